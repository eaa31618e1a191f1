//! The client library that issues a workload's timed operations.
//!
//! * `txnfs` (default): our `txnfs-client`, COMPOUNDs built by the workload
//!   (op counts are exact) or the vectorized [`txnfs_client::Fs`].
//! * `nfs-rs`: the third-party `nfs-rs` crate, one call at a time, the way a
//!   simple program uses a client library (ADR 0012). nfs-rs composes its own
//!   COMPOUNDs, so each call is recorded as one request with the ops nfs-rs
//!   sends for it ([`NfsRsCall`]); behind `--delay-ms` the proxy's
//!   `proxy_rpc_calls` counter shows the real number of RPCs.
//!
//! Set-up and clean-up always use our client: file handles are the server's,
//! so an nfs-rs worker uses the handles the set-up client found.

use crate::workload::Worker;
use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which client library drives the timed part.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Driver {
    #[default]
    Txnfs,
    NfsRs,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Txnfs => "txnfs",
            Driver::NfsRs => "nfs-rs",
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The protocol version the nfs-rs driver speaks (`--nfs-version`): seed 001 compares
/// NFSv3 with NFSv4.1 through one client, and so can we.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NfsVersion {
    #[serde(rename = "3")]
    V3,
    #[serde(rename = "4.0")]
    V40,
    #[default]
    #[serde(rename = "4.1")]
    V41,
}

impl NfsVersion {
    pub fn name(self) -> &'static str {
        match self {
            NfsVersion::V3 => "3",
            NfsVersion::V40 => "4.0",
            NfsVersion::V41 => "4.1",
        }
    }
}

impl std::fmt::Display for NfsVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for NfsVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "3" => Ok(NfsVersion::V3),
            "4.0" | "4" => Ok(NfsVersion::V40),
            "4.1" => Ok(NfsVersion::V41),
            _ => Err(format!("NFS version {s:?}: expected 3, 4.0 or 4.1")),
        }
    }
}

/// An nfs-rs mount, shared by the threads of one client.
pub type NfsRsMount = Arc<dyn nfs_rs::Mount>;

/// Longest time a mount may take.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// Mount `path` (relative to the pseudo root; for NFSv3 the export's MOUNT path) of
/// the server at `addr` with nfs-rs in `version`: unprivileged source port, this
/// process's uid/gid (the credentials our client uses too). NFSv3 asks MOUNT at
/// `mount_port` (txnfs serves it on the NFS port).
pub async fn mount_nfsrs(
    addr: SocketAddr,
    path: &str,
    (uid, gid): (u32, u32),
    version: NfsVersion,
    mount_port: Option<u16>,
) -> anyhow::Result<NfsRsMount> {
    let ports = match version {
        NfsVersion::V3 => format!(
            "&nfsport={}&mountport={}",
            addr.port(),
            mount_port.unwrap_or(addr.port())
        ),
        _ => String::new(),
    };
    let url = format!(
        "nfs://{addr}/{path}?version={version}&noresvport=true&uid={uid}&gid={gid}{ports}",
        path = path.trim_start_matches('/')
    );
    let m = tokio::time::timeout(MOUNT_TIMEOUT, nfs_rs::parse_url_and_mount(&url))
        .await
        .map_err(|_| anyhow!("nfs-rs mount {url}: timed out after {MOUNT_TIMEOUT:?}"))?
        .map_err(|e| anyhow!("nfs-rs mount {url}: {e}"))?;
    Ok(Arc::from(m))
}

/// One nfs-rs call as a request: its kind (the main op) and the ops nfs-rs
/// puts in its COMPOUND after SEQUENCE.
#[derive(Clone, Copy, Debug)]
pub struct NfsRsCall {
    pub kind: &'static str,
    pub ops: &'static [&'static str],
    /// The NFSv3 procedures nfs-rs calls for it (none for CLOSE: v3 has no opens).
    pub v3: &'static [&'static str],
}

impl NfsRsCall {
    const fn new(
        kind: &'static str,
        ops: &'static [&'static str],
        v3: &'static [&'static str],
    ) -> NfsRsCall {
        NfsRsCall { kind, ops, v3 }
    }
}

pub const GETATTR: NfsRsCall = NfsRsCall::new("GETATTR", &["PUTFH", "GETATTR"], &["GETATTR"]);
pub const READ: NfsRsCall = NfsRsCall::new("READ", &["PUTFH", "READ"], &["READ"]);
pub const READDIR: NfsRsCall = NfsRsCall::new("READDIR", &["PUTFH", "READDIR"], &["READDIRPLUS"]);
pub const MKDIR: NfsRsCall = NfsRsCall::new(
    "CREATE",
    &["PUTFH", "CREATE", "GETFH", "GETATTR"],
    &["MKDIR"],
);
pub const OPEN_CREATE: NfsRsCall =
    NfsRsCall::new("OPEN", &["PUTFH", "OPEN", "GETFH", "GETATTR"], &["CREATE"]);
pub const WRITE: NfsRsCall = NfsRsCall::new("WRITE", &["PUTFH", "WRITE"], &["WRITE"]);
pub const COMMIT: NfsRsCall = NfsRsCall::new("COMMIT", &["PUTFH", "COMMIT"], &["COMMIT"]);
pub const CLOSE: NfsRsCall = NfsRsCall::new("CLOSE", &["PUTFH", "CLOSE"], &[]);
pub const REMOVE: NfsRsCall = NfsRsCall::new("REMOVE", &["PUTFH", "REMOVE"], &["REMOVE"]);
pub const LOOKUP: NfsRsCall = NfsRsCall::new(
    "LOOKUP",
    &["PUTFH", "LOOKUP", "GETFH", "GETATTR"],
    &["LOOKUP"],
);

impl Worker {
    /// This worker's nfs-rs mount (only with `--driver nfs-rs`).
    pub fn nfsrs(&self) -> anyhow::Result<NfsRsMount> {
        self.nfsrs_mount
            .clone()
            .context("no nfs-rs mount (the runner mounts one with --driver nfs-rs)")
    }

    /// The handle the nfs-rs mount uses for `name` in the working directory, whose
    /// NFSv4 handle (from the set-up client) is `v4`: NFSv3 looks it up (untimed), as
    /// its handles need not be NFSv4's.
    pub async fn nfsrs_fh(&self, name: &str, v4: bytes::Bytes) -> anyhow::Result<bytes::Bytes> {
        if self.nfs_version != NfsVersion::V3 {
            return Ok(v4);
        }
        let m = self.nfsrs()?;
        Ok(m.lookup(self.base_fh.clone(), name)
            .await
            .map_err(|e| anyhow!("NFSv3 LOOKUP of {name}: {e}"))?
            .fh)
    }

    /// Run one nfs-rs call and record it (once timed) as `call`, with
    /// `bytes(result)` payload bytes; an error fails the run.
    pub async fn nfsrs_call<T, F>(
        &mut self,
        call: NfsRsCall,
        what: impl FnOnce() -> String,
        fut: F,
        bytes: impl FnOnce(&T) -> u64,
    ) -> anyhow::Result<T>
    where
        F: std::future::Future<Output = nfs_rs::Result<T>>,
    {
        let t = Instant::now();
        let r = fut.await;
        let lat = t.elapsed();
        let n = r.as_ref().map(bytes).unwrap_or(0);
        let ops = if self.nfs_version == NfsVersion::V3 {
            call.v3
        } else {
            call.ops
        };
        self.record_request(call.kind, ops.iter().copied(), lat, n, r.is_ok());
        r.map_err(|e| anyhow!("{} ({}): {e}", what(), call.kind))
    }
}
