//! [`ClientConfig`]: how to reach and authenticate to a server, with its defaults.

use bytes::Bytes;
use std::net::SocketAddr;
use std::time::Duration;

use super::DEFAULT_BUSY_WAIT;
use crate::cache::DEFAULT_CACHE_BYTES;

/// How to reach and authenticate to a server.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub addr: SocketAddr,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
    /// Client owner id (must be unique per client instance; default: host + pid + time).
    pub owner: Option<Bytes>,
    /// Slots to ask for (the server may grant fewer).
    pub slots: u32,
    /// Connection attempts before a call fails as unreachable.
    pub max_attempts: u32,
    /// Longest wait for one reply.
    pub call_timeout: Duration,
    /// Use delegations: ask for them in OPEN and GET_DIR_DELEGATION and serve what they
    /// cover from the cache (on by default; off = OPEN with WANT_NO_DELEG, nothing
    /// cached, as before delegations existed).
    pub delegations: bool,
    /// Byte budget of the delegation cache (file data and directory listings).
    pub cache_bytes: usize,
    /// NFSv4 minor version to speak: `None` negotiates the highest both sides know
    /// (2, else 1), as the Linux client does without `vers=`; `Some(1)` or `Some(2)`
    /// insists on that one.
    pub minor: Option<u32>,
    /// How long a request the server answers NFS4ERR_DELAY or NFS4ERR_GRACE is tried
    /// again before it fails with that status ([`crate::busy`]).
    pub busy_wait: Duration,
    /// Told once per kind when the client starts waiting out DELAY or GRACE (the CLI
    /// prints one line); `None`: logged at INFO.
    pub on_busy: Option<crate::busy::BusyNotice>,
    /// Batch independent small requests of concurrent callers into shared COMPOUNDs
    /// (Tyche's adaptive batching, [`crate::batch`]); off by default.
    pub batch: crate::batch::BatchConfig,
    /// RPC-with-TLS (RFC 9289): every connection starts with the AUTH_TLS probe and
    /// runs inside TLS; a server that refuses it, or a certificate the CAs here do
    /// not vouch for, fails the connect at once (no retries). `None`: plain TCP.
    pub tls: Option<txnfs_rpc::ClientTls>,
    /// RPCSEC_GSS with Kerberos v5 (ADR 0051): every connection creates a context
    /// with the caller's ticket and protects each call (krb5, krb5i or krb5p). A
    /// failed context creation (no ticket, a server that refuses it) fails the
    /// connect at once. `None`: AUTH_SYS.
    pub gss: Option<txnfs_rpc::gss::GssClientConfig>,
}

impl ClientConfig {
    pub fn new(addr: SocketAddr) -> Self {
        ClientConfig {
            addr,
            uid: current_id("Uid"),
            gid: current_id("Gid"),
            gids: Vec::new(),
            owner: None,
            slots: 64,
            max_attempts: 20,
            call_timeout: Duration::from_secs(60),
            delegations: true,
            cache_bytes: DEFAULT_CACHE_BYTES,
            minor: None,
            busy_wait: DEFAULT_BUSY_WAIT,
            on_busy: None,
            batch: Default::default(),
            tls: None,
            gss: None,
        }
    }
}

/// The effective uid/gid from /proc/self/status (no libc needed).
fn current_id(field: &str) -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(&format!("{field}:")))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(65534)
}
