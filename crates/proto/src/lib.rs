//! Protocol types generated from the XDR specifications in `spec/` by `txnfs-xdrgen`
//! (see `docs/adr/0002-xdr-codegen.md` for the naming conventions).
//!
//! Names are verbatim from the specifications (`nfs4::COMPOUND4args`,
//! `nfs4::nfs_argop4::OP_SEQUENCE`, ...). Every type implements
//! [`txnfs_xdr::Encode`] and [`txnfs_xdr::Decode`].

pub use txnfs_xdr::{Decode, Encode, XdrError};

/// NFSv4.x (RFC 8881 / RFC 7862 / RFC 8276), from `spec/nfs4.x`.
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unreachable_patterns,
    unused_parens,
    clippy::all,
    missing_docs
)]
pub mod nfs4 {
    include!(concat!(env!("OUT_DIR"), "/nfs4.rs"));
}

/// NFSv3 (RFC 1813), from `spec/nfs3.x`.
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unreachable_patterns,
    unused_parens,
    clippy::all,
    missing_docs
)]
pub mod nfs3 {
    include!(concat!(env!("OUT_DIR"), "/nfs3.rs"));
}

/// MOUNT v3 (RFC 1813 appendix I), from `spec/mnt3.x`.
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unreachable_patterns,
    unused_parens,
    clippy::all,
    missing_docs
)]
pub mod mnt3 {
    include!(concat!(env!("OUT_DIR"), "/mnt3.rs"));
}

/// Per-operation protocol facts (names, flags) shared by client and server (ADR 0007).
pub mod ops;
