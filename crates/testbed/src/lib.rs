//! What the benchmark framework (`txnfs-bench`) and the end-to-end tests share at
//! run time, with no NFS client and no test fixture in it:
//!
//! * [`ganesha`]: NFS-Ganesha as the reference server, its one configuration and the
//!   one way to start it;
//! * [`data`]: deterministic file contents and directory trees;
//! * [`kdc`]: a private MIT Kerberos KDC for the RPCSEC_GSS tests;
//! * `certs` (feature `certs`, tests only): certificates for the RPC-with-TLS tests;
//! * [`workspace_root`]: where the workspace (and its `target/`) is.
//!
//! The `txnfs` product binary links none of this (ADR 0031).

#![forbid(unsafe_code)]

#[cfg(feature = "certs")]
pub mod certs;
pub mod data;
pub mod ganesha;
pub mod kdc;

pub use data::{pattern, TreeShape, XorShift};

use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}
