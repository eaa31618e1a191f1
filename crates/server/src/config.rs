//! Server settings: built from CLI flags or a TOML file (same keys), with defaults that
//! work for `txnfs serve <dir>`.

use serde::Deserialize;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;

/// An export's backend as a stack of layers, top first: requests enter the first layer
/// and the last one stores the data, e.g. `["local"]`, `["memory"]`,
/// `["txn", "local"]`. A layer may carry parameters after a colon
/// (`"memory:max_file_size=1G,max_bytes=4G"`). Names are resolved by
/// [`txnfs_backend::layer::LayerRegistry`]; an unknown name is an error at startup that
/// lists the known ones.
///
/// In TOML, `layers = ["txn", "local"]`, or the older `backend = "memory"` (one layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStack(pub Cow<'static, [Cow<'static, str>]>);

/// The former name of [`LayerStack`] (`BackendKind::Local`, `BackendKind::Memory`).
pub type BackendKind = LayerStack;

#[allow(non_upper_case_globals)]
impl LayerStack {
    /// A directory of the local file system (the default).
    pub const Local: LayerStack = LayerStack(Cow::Borrowed(&[Cow::Borrowed("local")]));
    /// Volatile in-memory file system (tests, benchmarks).
    pub const Memory: LayerStack = LayerStack(Cow::Borrowed(&[Cow::Borrowed("memory")]));

    /// A stack from layer names, top first.
    pub fn of<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        LayerStack(names.into_iter().map(|n| Cow::Owned(n.into())).collect())
    }

    pub fn names(&self) -> &[Cow<'static, str>] {
        &self.0
    }

    /// Checks the names against the built-in layers (what `txnfs serve` can build);
    /// the error names the unknown layer and lists the known ones.
    pub fn check_builtin(&self) -> Result<(), txnfs_backend::layer::StackError> {
        txnfs_backend::layer::LayerRegistry::builtin().check(self.names())
    }

    /// The bottom layer's name without parameters (`"local"`, `"memory"`).
    pub fn bottom(&self) -> Option<&str> {
        self.0
            .last()
            .map(|n| n.split(':').next().unwrap_or(n).trim())
    }
}

impl Default for LayerStack {
    fn default() -> Self {
        LayerStack::Local
    }
}

impl<'de> Deserialize<'de> for LayerStack {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(n) => LayerStack::of([n]),
            OneOrMany::Many(v) => LayerStack::of(v),
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// Path in the NFS name space, "/" or "/a/b".
    pub name: String,
    /// Directory to export (used by the `local` layer).
    #[serde(default)]
    pub path: PathBuf,
    /// The layer stack (TOML `layers = [...]`, or `backend = "..."`).
    #[serde(default, alias = "layers")]
    pub backend: LayerStack,
    #[serde(default)]
    pub read_only: bool,
    /// Which clients may use the export, and how: exports(5) specs, the first that
    /// matches a client applies (`clients = ["127.0.0.1(rw,no_root_squash)",
    /// "10.0.0.0/8(ro)"]`). Empty: this host only (127.0.0.0/8, ::1), read-write,
    /// identities as sent (ADR 0043).
    #[serde(default, deserialize_with = "crate::exportrules::deserialize_clients")]
    pub clients: Vec<crate::exportrules::ClientRule>,
    /// A backend built by the embedding program (tests, the simulation); when set it is
    /// used instead of `backend`/`path` (wrap it in layers yourself, see
    /// `txnfs_backend::layer`). Not configurable from TOML.
    #[serde(skip)]
    pub prebuilt: Option<PrebuiltBackend>,
}

/// A backend handed to the server ready-made (kept across simulated restarts).
#[derive(Clone)]
pub struct PrebuiltBackend(pub std::sync::Arc<dyn txnfs_backend::Backend>);

impl std::fmt::Debug for PrebuiltBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrebuiltBackend")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: SocketAddr,
    pub exports: Vec<ExportConfig>,
    /// Where the handle secret and the client list for the grace period live.
    pub state_dir: Option<PathBuf>,
    /// Run a grace period after a restart so clients can reclaim their state.
    pub grace: bool,
    /// Lease time in seconds (also the grace period length).
    pub lease_time: u32,
    /// Largest RPC record accepted (bytes).
    pub max_record_size: usize,
    /// Largest READ/WRITE payload (bytes).
    pub max_io_size: u32,
    /// Upper bound of slots per session (the table grows lazily up to it).
    pub max_slots_per_session: u32,
    /// Upper bound of operations per COMPOUND we negotiate.
    pub max_ops_per_compound: u32,
    /// Upper bound of a cached reply (ca_maxresponsesize_cached).
    pub max_cached_reply: u32,
    pub max_clients: usize,
    pub max_sessions_per_client: usize,
    /// Bytes of reply cache all sessions together may hold (slots × cached reply size,
    /// reserved at CREATE_SESSION; fewer slots are granted when it is short).
    pub max_reply_cache_bytes: usize,
    /// Open TCP connections. At the limit a new connection makes the server close the
    /// longest idle one (nothing in progress on it), so idle sockets cannot lock clients out.
    pub max_connections: usize,
    /// Bytes of requests read and not yet answered plus replies not yet written, over
    /// all connections (ADR 0029; default 256 MiB). At the limit connections stop
    /// reading their sockets until bytes are released; a request larger than it is
    /// still served, alone.
    pub max_in_flight_bytes: usize,
    /// Seconds a connection may stay silent with nothing in progress before the server
    /// closes it; 0 keeps idle connections. Unset: three lease periods (the method
    /// `Config::idle_timeout()` resolves this and says why).
    pub idle_timeout: Option<u32>,
    /// Milliseconds the server waits for a client's reply to a callback (CB_NULL,
    /// CB_COMPOUND) before it counts the back channel as down. Unset: a tenth of the
    /// lease, at least one second (knfsd's `max_cb_time`): a recall must fail well
    /// within the lease so the server can still act on it.
    pub callback_timeout_ms: Option<u32>,
    /// Grant read and write delegations (RFC 8881 §10.4) to clients whose back channel
    /// works. On by default.
    pub delegations: bool,
    /// Milliseconds a request that conflicts with another client's delegation is held
    /// while the delegation is recalled, before it is answered NFS4ERR_DELAY and the
    /// delegation revoked. Unset: a quarter of the lease (the holder must be able to
    /// flush its cached writes; a holder that does not answer in time loses it).
    pub recall_wait_ms: Option<u32>,
    /// Requests held for recalls at once; beyond it a conflicting request is answered
    /// NFS4ERR_DELAY at once (each held request occupies a thread and its slot).
    pub max_held_requests: usize,
    /// Run transactional COMPOUNDs (ADR 0021): local and memory exports get the `txn`
    /// layer on top of their stack, and procedure `PROC_TXN_COMPOUND` is served. Off
    /// (`--no-txn`), that procedure is answered PROC_UNAVAIL and stacks stay as written.
    pub txn: bool,
    /// Busy polling (ADR 0057 addendum): microseconds a connection's reader spins on a
    /// non-blocking read before it sleeps, for a client that sends one call at a time
    /// (its next call then costs no wake-up). 0 (the default) never spins; it costs up
    /// to this much CPU per wait of such a client, none for others.
    pub busy_poll_us: u32,
    /// Largest number of COMPOUNDs in one transaction of several (BEGIN .. COMMIT).
    pub max_txn_compounds: u32,
    /// Seconds a transaction of several COMPOUNDs may stay open before it is rolled
    /// back. Unset: one lease.
    pub txn_timeout: Option<u32>,
    /// Grant CREATE_SESSION4_FLAG_PERSIST to clients that ask (RFC 8881 §2.10.6.5, ADR
    /// 0022): their sessions, slots and cached replies are kept in the state directory
    /// and survive a restart, so a retried transaction is answered, not run twice.
    /// Every cached reply of such a session is made durable before it is sent (one
    /// shared fdatasync per group of replies). Off by default: the Linux client asks
    /// for it on every session (see the ADR for the measured cost).
    pub persistent_sessions: bool,
    /// Bytes from which a COPY the client lets run asynchronously (`ca_synchronous`
    /// false) is answered at once and runs in the background, reported by CB_OFFLOAD
    /// (RFC 7862 §15.2.3, ADR 0026); smaller copies run within their COMPOUND.
    /// `u64::MAX` keeps every copy synchronous.
    pub async_copy_threshold: u64,
    /// Bytes an asynchronous copy moves per step: OFFLOAD_STATUS reports progress and
    /// OFFLOAD_CANCEL stops a copy between steps. Rounded up to 4 KiB.
    pub async_copy_chunk: u64,
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`, ADR 0045); off
    /// when unset. The same counters reach `txnfs stats` through the control socket.
    pub metrics: Option<SocketAddr>,
    /// Where local exports' file handles come from (ADR 0050): `auto` (kernel handles
    /// when the server may open them, i.e. has `CAP_DAC_READ_SEARCH`, else the handle
    /// table), `kernel` or `table`. An export whose `local` layer names `handles=`
    /// itself keeps that.
    pub handles: HandleChoice,
    /// RPC-with-TLS (RFC 9289, ADR 0049): TOML `[tls]` with `cert`, `key` and
    /// optionally `client_ca`. Unset: the AUTH_TLS probe is refused.
    pub tls: Option<TlsFiles>,
    /// RPCSEC_GSS with Kerberos v5 (ADR 0051): TOML `kerberos = { keytab = ..., map =
    /// ... }`. Set (or any export rule naming `krb5`, `krb5i` or `krb5p`), the server
    /// accepts Kerberos contexts with the keytab's keys.
    pub kerberos: Option<crate::kerberos::KerberosConfig>,
    /// Tests only: a pause after every step of an asynchronous copy, so that one can be
    /// watched and cancelled while it runs. Not configurable from TOML.
    #[serde(skip)]
    #[doc(hidden)]
    pub async_copy_pause: Option<std::time::Duration>,
    /// Deliberate defects for proving that the tests and the simulation can fail.
    /// Never set outside tests; not configurable from TOML.
    #[serde(skip)]
    #[doc(hidden)]
    pub mutations: Mutations,
}

/// Where local exports' file handles come from (`Config::handles`, ADR 0050).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandleChoice {
    /// Kernel handles when the server may open them, else the handle table.
    #[default]
    Auto,
    /// Kernel file handles (needs CAP_DAC_READ_SEARCH, i.e. root).
    Kernel,
    /// The persistent handle table in the state directory.
    Table,
}

impl std::str::FromStr for HandleChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(HandleChoice::Auto),
            "kernel" => Ok(HandleChoice::Kernel),
            "table" => Ok(HandleChoice::Table),
            other => Err(format!("{other:?}: want auto, kernel or table")),
        }
    }
}

impl HandleChoice {
    /// The `local` layer's parameter for it (`handles=table`).
    pub fn as_str(self) -> &'static str {
        match self {
            HandleChoice::Auto => "auto",
            HandleChoice::Kernel => "kernel",
            HandleChoice::Table => "table",
        }
    }

    /// `exports` with each one's `local` layer told this choice ([`Self::apply`]): at
    /// start and at every reload, so a reload compares like with like.
    pub fn apply_to(self, exports: &[ExportConfig]) -> Vec<ExportConfig> {
        exports
            .iter()
            .map(|e| ExportConfig {
                backend: self.apply(&e.backend),
                ..e.clone()
            })
            .collect()
    }

    /// `stack` with its `local` bottom layer told this choice, unless it is `auto` or
    /// the layer already names one.
    pub fn apply(self, stack: &LayerStack) -> LayerStack {
        let names = stack.names();
        let Some(last) = names.last() else {
            return stack.clone();
        };
        let (name, params) = last.split_once(':').unwrap_or((last, ""));
        if self == HandleChoice::Auto
            || name.trim() != "local"
            || params.split(',').any(|p| p.trim().starts_with("handles="))
        {
            return stack.clone();
        }
        let bottom = if params.trim().is_empty() {
            format!("local:handles={}", self.as_str())
        } else {
            format!("local:{params},handles={}", self.as_str())
        };
        let mut v: Vec<String> = names[..names.len() - 1]
            .iter()
            .map(|n| n.to_string())
            .collect();
        v.push(bottom);
        LayerStack::of(v)
    }
}

/// The PEM files of RPC-with-TLS: the server's certificate chain (leaf first) and
/// key, and the CAs whose client certificates it verifies (mTLS, `sec=mtls`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Read and check the files (a certificate present, the key its own).
    pub fn load(&self) -> Result<txnfs_rpc::ServerTls, txnfs_rpc::TlsConfigError> {
        txnfs_rpc::ServerTls::from_pem_files(&self.cert, &self.key, self.client_ca.as_deref())
    }
}

/// Deliberate defects a test can switch on to check that it catches them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[doc(hidden)]
pub struct Mutations {
    /// Execute retransmissions again instead of answering from the reply cache.
    pub break_reply_cache: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 2049)),
            exports: Vec::new(),
            state_dir: None,
            grace: true,
            lease_time: 60,
            max_record_size: (1 << 20) + (64 << 10),
            max_io_size: 1 << 20,
            max_slots_per_session: 2048,
            max_ops_per_compound: 16384,
            max_cached_reply: 64 << 10,
            max_clients: 4096,
            max_sessions_per_client: 16,
            max_reply_cache_bytes: 512 << 20,
            max_connections: 4096,
            max_in_flight_bytes: txnfs_rpc::DEFAULT_IN_FLIGHT_BYTES,
            idle_timeout: None,
            callback_timeout_ms: None,
            delegations: true,
            recall_wait_ms: None,
            max_held_requests: 256,
            txn: true,
            busy_poll_us: 0,
            max_txn_compounds: 4096,
            txn_timeout: None,
            persistent_sessions: false,
            async_copy_threshold: 16 << 20,
            async_copy_chunk: 8 << 20,
            metrics: None,
            handles: HandleChoice::Auto,
            tls: None,
            kerberos: None,
            async_copy_pause: None,
            mutations: Mutations::default(),
        }
    }
}

impl Config {
    /// How long an idle connection is kept: `idle_timeout` if set (0: forever), else three
    /// lease periods. A client that still holds state renews its lease (by SEQUENCE) within
    /// every period, so a connection silent for three is unused or belongs to a client
    /// whose lease and courtesy time are over; closing it costs at most a reconnect.
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        match self.idle_timeout {
            Some(0) => None,
            Some(s) => Some(std::time::Duration::from_secs(u64::from(s))),
            None => Some(std::time::Duration::from_secs(
                3 * u64::from(self.lease_time.max(1)),
            )),
        }
    }

    /// How long a callback waits for the client's reply (see `callback_timeout_ms`).
    pub fn callback_timeout(&self) -> std::time::Duration {
        match self.callback_timeout_ms {
            Some(ms) => std::time::Duration::from_millis(u64::from(ms.max(1))),
            None => std::time::Duration::from_secs(u64::from((self.lease_time / 10).max(1))),
        }
    }

    /// How long a transaction of several COMPOUNDs may stay open (`txn_timeout`).
    pub fn txn_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(
            self.txn_timeout.unwrap_or(self.lease_time).max(1),
        ))
    }

    /// How long a conflicting request waits for a recalled delegation (see
    /// `recall_wait_ms`).
    pub fn recall_wait(&self) -> std::time::Duration {
        match self.recall_wait_ms {
            Some(ms) => std::time::Duration::from_millis(u64::from(ms)),
            None => std::time::Duration::from_millis(u64::from(self.lease_time.max(1)) * 250),
        }
    }

    /// The state directory: configured, else /var/lib/txnfs for root, else
    /// $XDG_STATE_HOME/txnfs or ~/.local/state/txnfs.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.state_dir {
            return d.clone();
        }
        // By the effective user, not $USER or $HOME: a server started through
        // setpriv/runuser keeps the environment of whoever started it.
        if rustix::process::geteuid().is_root() {
            return PathBuf::from("/var/lib/txnfs");
        }
        if let Some(x) = std::env::var_os("XDG_STATE_HOME") {
            return PathBuf::from(x).join("txnfs");
        }
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/txnfs"),
            None => PathBuf::from("/var/lib/txnfs"),
        }
    }
}
