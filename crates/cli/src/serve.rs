//! `txnfs serve`: flags and TOML configuration to a running server.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use txnfs_server::exportrules::parse_rule;
use txnfs_server::{BackendKind, Config, ExportConfig, Server, TlsFiles};

/// `txnfs serve`'s Kerberos options (ADR 0051).
#[derive(Args, Debug, Clone, Default)]
pub struct KerberosArgs {
    /// Kerberos (RPCSEC_GSS, sec=krb5/krb5i/krb5p): the keytab with the service keys
    /// (nfs/HOST@REALM). Default: the library's, /etc/krb5.keytab (or KRB5_KTNAME).
    #[arg(long, value_name = "FILE")]
    pub keytab: Option<PathBuf>,
    /// Kerberos principal → uid/gid map: lines `alice@REALM 1000 1000 [gid,gid]`.
    /// Without a line a principal acts as the local user of its name, else as the
    /// export rule's anonymous user.
    #[arg(long, value_name = "FILE")]
    pub gss_map: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs serve /srv/data                      export /srv/data as / on 127.0.0.1:2049\n  \
    txnfs serve --listen 0.0.0.0:2049 /srv     listen on every interface (still only this host may mount)\n  \
    txnfs serve --listen 0.0.0.0:2049 --client '10.0.0.0/8(rw)' /srv/data   let a network mount it\n  \
    txnfs serve --listen 0.0.0.0:2049 --exports /etc/txnfs.exports   exports and clients as /etc/exports lines\n  \
    txnfs serve --export /home=/home --export /scratch=/mnt/scratch\n  \
    txnfs serve --config /etc/txnfs.toml\n  \
    txnfs serve --no-txn /srv/data             no transactional COMPOUNDs (plain NFSv4.1 only)\n  \
    txnfs serve --handles table /srv/data      handles from a table in the state directory (as a normal user: the default)\n  \
    txnfs serve --check --config /etc/txnfs.toml   check a configuration, serve nothing\n\n\
    RELOAD: SIGHUP or `txnfs reload` reads the configuration again (the --config and\n\
    --exports files, and the flags the server was started with) and applies, without a\n\
    restart: export additions, removals and rule changes; the TLS certificate, key and\n\
    client CAs (the files read again, e.g. a renewed certificate at the same path; new\n\
    handshakes use it, open connections keep theirs); the --gss-map principal map. The\n\
    answer names every other setting that changed (listen, lease_time, limits, TLS on or\n\
    off, the keytab path...): it takes effect after a restart. A bad file changes nothing.\n\n\
    CONFIG FILE (TOML, same settings as the flags):\n  \
    listen = \"127.0.0.1:2049\"\n  \
    state_dir = \"/var/lib/txnfs\"\n  \
    grace = true\n  \
    lease_time = 60\n  \
    max_connections = 4096         # at the limit the longest idle one is closed\n  \
    idle_timeout = 180             # seconds; default 3 x lease_time, 0 = never\n  \
    busy_poll_us = 0               # spin this long for a one-call-at-a-time client (0 = never)\n  \
    max_in_flight_bytes = 268435456  # requests + replies in flight; at it, sockets wait\n  \
    delegations = true             # read/write delegations to clients with a back channel\n  \
    recall_wait_ms = 15000         # hold a conflicting request this long for a recall\n  \
    txn = true                     # transactional COMPOUNDs (the txn layer on top)\n  \
    persistent_sessions = false    # grant CREATE_SESSION4_FLAG_PERSIST (ADR 0022)\n  \
    async_copy_threshold = 16777216  # bytes from which COPY may run in the background (ADR 0026)\n  \
    async_copy_chunk = 8388608     # bytes per step of a background copy\n  \
    handles = \"auto\"              # file handles: auto, kernel (root) or table (ADR 0050)\n  \
    [[exports]]\n  \
    name = \"/data\"\n  \
    path = \"/srv/data\"\n  \
    layers = [\"local\"]            # the backend stack, top first (txn is added on top\n  \
    #                               unless txn = false); or [\"memory\"],\n  \
    #                               [\"memory:max_file_size=1G,max_bytes=4G\"]\n  \
    read_only = false\n  \
    clients = [\"127.0.0.1(rw,no_root_squash)\", \"10.0.0.0/8(rw)\", \"*(ro,all_squash)\"]\n\n\
    EXPORTS FILE (--exports; exports(5) lines: PATH CLIENT(OPTIONS) ..., first match wins):\n  \
    /srv/data  127.0.0.1(rw,no_root_squash) 10.0.0.0/8(rw) *(ro,all_squash,anonuid=1000)\n\n\
    CLIENTS: an address, a network (10.0.0.0/8), a host name, a wildcard (*.example.com) or *;\n\
    options ro (default) or rw, root_squash (default), no_root_squash, all_squash, anonuid=N,\n\
    anongid=N, sec=sys (or sys:krb5:krb5i:krb5p:tls:mtls, any of them). An export without client rules serves this host only (127.0.0.0/8\n\
    and ::1), read-write, root as root.\n\n\
    RPC-WITH-TLS (RFC 9289): --tls-cert FILE --tls-key FILE (PEM) make the server answer the\n\
    AUTH_TLS probe with STARTTLS and run the connection inside TLS 1.3; --tls-client-ca FILE\n\
    verifies client certificates. In the config file: tls = { cert = \"FILE\", key = \"FILE\",\n\
    client_ca = \"FILE\" } before [[exports]]. Export rules: sec=tls serves only TLS\n\
    connections, sec=mtls only those with a verified client certificate (identities stay\n\
    the AUTH_SYS ones, squashed as usual); sec=sys serves both. Clients: txnfs cp --tls\n\
    --tls-ca CA.pem ..., or the Linux client's mount -o xprtsec=tls.\n\n\
    KERBEROS (RPCSEC_GSS, RFC 2203): exports with sec=krb5 (signed headers), krb5i (signed\n\
    calls) or krb5p (encrypted calls) accept Kerberos v5 with the keys of --keytab FILE\n\
    (default /etc/krb5.keytab; the principal nfs/HOST@REALM). --gss-map FILE maps principals\n\
    to ids (lines: alice@REALM 1000 1000 [gid,gid]); an unmapped principal acts as the local\n\
    user of its name, else as the rule's anonymous user. TOML: kerberos = { keytab = \"FILE\",\n\
    map = \"FILE\" }. Needs the library libgssapi_krb5.so.2 (Debian: libgssapi-krb5-2).\n\
    Clients: txnfs cp --sec krb5p ... (after kinit), or mount -o sec=krb5p.\n\n\
    Clients mount with: mount -t nfs -o vers=4.1,port=PORT HOST:/ /mnt\n\
    Logs go to stderr; set TXNFS_LOG=debug for more.")]
pub struct ServeArgs {
    /// Directory to export as "/" (the simple case).
    pub dir: Option<PathBuf>,
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Export PATH under the pseudo-root as NAME (repeatable), e.g. --export /data=/srv/data.
    #[arg(long = "export", value_name = "NAME=PATH")]
    pub exports: Vec<String>,
    /// Exports and their clients from a file of /etc/exports lines
    /// (`/srv/data 10.0.0.0/8(rw) *(ro)`): each exports its path under the same name.
    #[arg(long = "exports", value_name = "FILE")]
    pub exports_file: Option<PathBuf>,
    /// A client rule for the exports given as DIR or --export (repeatable, first match
    /// wins): `10.0.0.0/8(rw)`, `*.lan(ro,all_squash)`. Without any, only this host may
    /// mount them (read-write, root as root).
    #[arg(long = "client", value_name = "SPEC")]
    pub clients: Vec<String>,
    /// TOML configuration file (flags given on the command line override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Skip the grace period after a restart (clients cannot reclaim opens and locks).
    #[arg(long)]
    pub no_grace: bool,
    /// Where the handle secret and client list live (default /var/lib/txnfs for root,
    /// else $XDG_STATE_HOME/txnfs or ~/.local/state/txnfs).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Serve a volatile in-memory file system instead of a directory (tests, benchmarks).
    #[arg(long)]
    pub memory: bool,
    /// Lease time in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub lease_time: Option<u32>,
    /// Do not register with the host's portmapper. By default, when an rpcbind runs,
    /// txnfs registers NFS (program 100003) versions 3 and 4 and MOUNT (100005)
    /// version 3 over TCP at its port on start and removes the entries on a clean stop
    /// (SIGINT/SIGTERM): NFSv3 clients find MOUNT there, and clients built on
    /// libtirpc/libntirpc ask the portmapper for the NFS port even for NFSv4.
    #[arg(long)]
    pub no_rpcbind: bool,
    /// Open connections; at the limit the longest idle one is closed for a new client.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Close connections idle this long (default 3 lease periods; 0 = never).
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<u32>,
    /// Busy polling: a client sending one call at a time has its next call awaited by
    /// spinning up to this long before the reader sleeps (lower latency at the cost of
    /// CPU; 0, the default, never spins). Clients with calls in flight are never spun for.
    #[arg(long, value_name = "MICROSECONDS")]
    pub busy_poll_us: Option<u32>,
    /// Grant no delegations. By default clients whose back channel answers get read
    /// and write delegations, recalled (and the conflicting request held, not answered
    /// NFS4ERR_DELAY) when another client needs the file.
    #[arg(long)]
    pub no_delegations: bool,
    /// Do not run transactional COMPOUNDs. By default local and memory exports run them
    /// (the `txn` layer; `txnfs cp -R --atomic` and friends use it) and plain COMPOUNDs
    /// behave as without it.
    #[arg(long)]
    pub no_txn: bool,
    /// Grant persistent sessions (CREATE_SESSION4_FLAG_PERSIST) to clients that ask:
    /// their cached replies are made durable in the state directory before they are
    /// sent and survive a restart, so a transaction retried after a crash is answered,
    /// not run twice. Costs a shared fdatasync per group of replies (ADR 0022).
    #[arg(long)]
    pub persistent_sessions: bool,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (off by default; e.g.
    /// 127.0.0.1:9464). `txnfs stats` reads the same counters without it.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Where file handles of local exports come from: `kernel` (open_by_handle_at;
    /// needs CAP_DAC_READ_SEARCH, i.e. root), `table` (a persistent handle table in the
    /// state directory, for a server run as a normal user), or `auto` (the default:
    /// kernel when it works, else table; the log says which and why).
    #[arg(long, value_name = "auto|kernel|table")]
    pub handles: Option<txnfs_server::config::HandleChoice>,
    /// Offer RPC-with-TLS (RFC 9289) with this certificate chain (PEM, leaf first);
    /// with --tls-key. Without it the AUTH_TLS probe is refused.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Verify client certificates against these CAs (PEM): clients that present one
    /// signed by them may use sec=mtls exports.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Kerberos: --keytab, --gss-map (boxed: `Cmd` stays small).
    #[command(flatten)]
    pub kerberos: Box<KerberosArgs>,
    /// Check the configuration (files parse, paths exist, exports do not overlap) and
    /// exit: 0 with a summary, else 1 with the reason. Binds no port and leaves the
    /// state directory alone.
    #[arg(long)]
    pub check: bool,
}

fn parse_export(s: &str) -> Result<(String, PathBuf)> {
    let Some((name, path)) = s.split_once('=') else {
        bail!("--export wants NAME=PATH (e.g. /data=/srv/data), got {s:?}");
    };
    let name = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{name}")
    };
    Ok((name, PathBuf::from(path)))
}

/// The exports of an /etc/exports-style file: each line's path, exported under its own
/// name, with the line's client rules.
fn exports_file(f: &Path, backend: &BackendKind) -> Result<Vec<ExportConfig>> {
    let text = std::fs::read_to_string(f)
        .with_context(|| format!("cannot read exports file {}", f.display()))?;
    let lines = txnfs_server::exportrules::exports_file::parse(&text)
        .with_context(|| format!("invalid exports file {}", f.display()))?;
    Ok(lines
        .into_iter()
        .map(|l| ExportConfig {
            name: l.path.clone(),
            path: PathBuf::from(&l.path),
            backend: backend.clone(),
            read_only: false,
            clients: l.rules,
            prebuilt: None,
        })
        .collect())
}

pub fn build_config(a: &ServeArgs) -> Result<Config> {
    let mut cfg = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read config file {}", p.display()))?;
            toml::from_str::<Config>(&text)
                .with_context(|| format!("invalid config file {}", p.display()))?
        }
        None => Config::default(),
    };
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    if let Some(m) = a.metrics {
        cfg.metrics = Some(m);
    }
    if a.no_grace {
        cfg.grace = false;
    }
    if let Some(d) = &a.state_dir {
        cfg.state_dir = Some(d.clone());
    }
    if let Some(t) = a.lease_time {
        if t < 5 {
            bail!("--lease-time must be at least 5 seconds");
        }
        cfg.lease_time = t;
    }
    if let Some(n) = a.max_connections {
        if n == 0 {
            bail!("--max-connections must be at least 1");
        }
        cfg.max_connections = n;
    }
    if let Some(t) = a.idle_timeout {
        cfg.idle_timeout = Some(t);
    }
    if let Some(us) = a.busy_poll_us {
        cfg.busy_poll_us = us;
    }
    if cfg.busy_poll_us > 10_000 {
        bail!(
            "busy_poll_us (--busy-poll-us) must be at most 10000 microseconds, not {}",
            cfg.busy_poll_us
        );
    }
    if a.no_delegations {
        cfg.delegations = false;
    }
    if a.no_txn {
        cfg.txn = false;
    }
    if a.persistent_sessions {
        cfg.persistent_sessions = true;
    }
    if let Some(h) = a.handles {
        cfg.handles = h;
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        cfg.tls = Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: a.tls_client_ca.clone(),
        });
    }
    if let Some(tls) = &cfg.tls {
        // Checked now, so that a bad file stops the start with its name and problem.
        tls.load().context("RPC-with-TLS")?;
    }
    let flags = &a.kerberos;
    if flags.keytab.is_some() || flags.gss_map.is_some() {
        let k = cfg.kerberos.get_or_insert_with(Default::default);
        k.keytab = flags.keytab.clone().or(k.keytab.take());
        k.map = flags.gss_map.clone().or(k.map.take());
    }
    let backend = if a.memory {
        BackendKind::Memory
    } else {
        BackendKind::Local
    };
    let clients = a
        .clients
        .iter()
        .map(|s| parse_rule(s).with_context(|| format!("--client {s:?}")))
        .collect::<Result<Vec<_>>>()?;
    let from_flags = cfg.exports.len();
    if let Some(d) = &a.dir {
        cfg.exports.push(ExportConfig {
            name: "/".into(),
            path: d.clone(),
            backend: backend.clone(),
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
    } else if a.memory && a.exports.is_empty() && cfg.exports.is_empty() {
        cfg.exports.push(ExportConfig {
            name: "/".into(),
            path: PathBuf::new(),
            backend: backend.clone(),
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
    }
    for e in &a.exports {
        let (name, path) = parse_export(e)?;
        cfg.exports.push(ExportConfig {
            name,
            path,
            backend: backend.clone(),
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
    }
    if !clients.is_empty() && cfg.exports.len() == from_flags {
        bail!("--client applies to the exports given as DIR or --export; give one (or put clients = [...] in the config file)");
    }
    for e in &mut cfg.exports[from_flags..] {
        e.clients = clients.clone();
    }
    if let Some(f) = &a.exports_file {
        cfg.exports.extend(exports_file(f, &backend)?);
    }
    if cfg.exports.is_empty() {
        bail!(
            "nothing to export: give a directory (txnfs serve /srv/data), --export NAME=PATH \
             or --exports FILE"
        );
    }
    for e in &cfg.exports {
        e.backend
            .check_builtin()
            .with_context(|| format!("export {}", e.name))?;
        if e.backend.bottom() == Some("local") {
            let md = std::fs::metadata(&e.path)
                .with_context(|| format!("cannot export {}", e.path.display()))?;
            if !md.is_dir() {
                bail!("cannot export {}: not a directory", e.path.display());
            }
        }
    }
    Ok(cfg)
}

/// `txnfs serve --check`: every check `serve` makes of its configuration before it
/// opens anything.
fn check(a: &ServeArgs) -> Result<()> {
    let cfg = build_config(a)?;
    txnfs_server::export::Exports::check(&cfg.exports, cfg.txn)?;
    print!("{}", crate::startup::check_summary(&cfg));
    Ok(())
}

/// How a reload reads the configuration again: the same flags, the files read anew.
fn config_source(a: &ServeArgs) -> txnfs_server::reload::ConfigSource {
    let a = a.clone();
    Box::new(move || build_config(&a).map_err(|e| format!("{e:#}")))
}

pub fn run(a: ServeArgs) -> Result<()> {
    if a.check {
        return check(&a);
    }
    let cfg = build_config(&a)?;
    let listen = cfg.listen;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        // The signal handlers first: a SIGTERM or SIGINT that arrives while the server
        // starts (binding, registering with rpcbind) must stop it cleanly too, not kill
        // it. SIGHUP reloads the configuration (ADR 0048).
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("cannot catch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot catch SIGINT")?;
        let mut hup = signal(SignalKind::hangup()).context("cannot catch SIGHUP")?;
        let server = Server::new(cfg).context("cannot start the server")?;
        let _ = server.config_source.set(config_source(&a));
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let bound = listener.local_addr().unwrap_or(listen);
        let (registered, rpcbind_status) = if a.no_rpcbind {
            (None, "off (--no-rpcbind)".to_string())
        } else {
            rpcbind::register(bound).await
        };
        tracing::info!(
            "{}",
            crate::startup::summary(&server.cfg, bound, &rpcbind_status)
        );
        if let Some(w) = crate::startup::local_only_warning(&server.cfg, bound) {
            tracing::warn!("{w}");
        }
        let reloading = server.clone();
        let shutdown = async move {
            loop {
                tokio::select! {
                    _ = int.recv() => break,
                    _ = term.recv() => break,
                    _ = hup.recv() => {
                        tracing::info!("SIGHUP: reloading the configuration");
                        let s = reloading.clone();
                        // Logged by the reload, success or refusal.
                        let _ = tokio::task::spawn_blocking(move || {
                            txnfs_server::reload::reload(&s)
                        })
                        .await;
                    }
                }
            }
            tracing::info!("shutting down");
        };
        let r = txnfs_server::run(server.clone(), listener, shutdown)
            .await
            .context("server failed");
        log_delegation_counters(&server);
        if let Some(reg) = registered {
            rpcbind::unregister(reg).await;
        }
        r
    })
}

/// At a clean stop: what the delegations did, and how each recall ended.
fn log_delegation_counters(server: &Server) {
    let Ok(core) = server.core() else { return };
    let s = core.delegations().stats();
    drop(core);
    tracing::info!(
        granted = s.granted,
        recalled = s.recalled,
        returned = s.returned,
        recall_returns = s.recall_returns,
        revoked_unreachable = s.revoked_unreachable,
        revoked_timeout = s.revoked_timeout,
        released = s.released,
        recall_latency_max_ms = s.recall_latency_us_max / 1000,
        held_returned = s.held_returned,
        held_unreachable = s.held_unreachable,
        held_timeout = s.held_timeout,
        held_gave_way = s.held_gave_way,
        held_max_ms = s.held_us_max / 1000,
        "delegation counters"
    );
}

/// Registration with the host's portmapper: best effort, never a reason not to serve.
mod rpcbind {
    use std::net::SocketAddr;
    use std::time::Duration;
    use txnfs_rpc::portmap::{local_portmappers, PortmapError, Portmapper, Registration};

    /// Per portmapper; a local one answers in microseconds, so this only bounds a hung
    /// one and start-up stays quick when none runs (connects are refused at once).
    const TIMEOUT: Duration = Duration::from_millis(500);

    /// NFS versions 3 and 4, MOUNT version 3, NLM version 4 and NSM version 1, over
    /// TCP at `addr`.
    fn programs(addr: SocketAddr) -> Vec<Registration> {
        vec![
            Registration {
                prog: 100003,
                versions: vec![3, 4],
                addr,
            },
            Registration {
                prog: 100005,
                versions: vec![3],
                addr,
            },
            Registration {
                prog: 100021,
                versions: vec![4],
                addr,
            },
            Registration {
                prog: 100024,
                versions: vec![1],
                addr,
            },
        ]
    }

    /// Registers every program with the first portmapper that takes them all; returns
    /// where, for the unregistration at a clean stop, and what happened, for the
    /// start-up summary (a failure other than "none runs" is also a warning of its own).
    pub async fn register(addr: SocketAddr) -> (Option<(Portmapper, Vec<Registration>)>, String) {
        let regs = programs(addr);
        let mut errors = Vec::new();
        'portmappers: for pm in local_portmappers() {
            for reg in &regs {
                if let Err(e) = pm.set(reg, TIMEOUT).await {
                    errors.push(e);
                    continue 'portmappers;
                }
            }
            let status = format!(
                "registered NFS v3 and v4, MOUNT v3, NLM v4 and NSM v1 with rpcbind at {pm}"
            );
            return (Some((pm, regs)), status);
        }
        if errors
            .iter()
            .all(|e| matches!(e, PortmapError::NotRunning(_)))
        {
            (None, "none running (not registered)".into())
        } else {
            let why: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            tracing::warn!(errors = %why.join("; "), "could not register with rpcbind");
            (None, "not registered (see the warning)".into())
        }
    }

    pub async fn unregister((pm, regs): (Portmapper, Vec<Registration>)) {
        for reg in regs {
            match pm.unset(&reg, TIMEOUT).await {
                Ok(()) => {
                    tracing::info!(portmapper = %pm, program = reg.prog, "unregistered from rpcbind")
                }
                Err(e) => {
                    tracing::warn!(error = %e, program = reg.prog, "could not unregister from rpcbind")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn args(v: &[&str]) -> ServeArgs {
        Cli::parse_from(std::iter::once("serve").chain(v.iter().copied())).serve
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn memory_flag_and_dir_keep_their_meaning() {
        let cfg = build_config(&args(&["--memory"])).unwrap();
        assert_eq!(cfg.exports.len(), 1);
        assert_eq!(cfg.exports[0].backend, BackendKind::Memory);
        let dir = tempfile::tempdir().unwrap();
        let cfg = build_config(&args(&[dir.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.exports[0].backend, BackendKind::Local);
        assert_eq!(cfg.exports[0].name, "/");
    }

    #[test]
    fn toml_layers_and_the_old_backend_key() {
        let f = config_file("[[exports]]\nname = \"/m\"\nlayers = [\"memory:max_bytes=1M\"]\n");
        let cfg = build_config(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.exports[0].backend.names(), ["memory:max_bytes=1M"]);
        let f = config_file("[[exports]]\nname = \"/m\"\nbackend = \"memory\"\n");
        let cfg = build_config(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.exports[0].backend, BackendKind::Memory);
    }

    #[test]
    fn busy_polling_from_the_flag_and_toml_within_a_bound() {
        assert_eq!(build_config(&args(&["/tmp"])).unwrap().busy_poll_us, 0);
        let cfg = build_config(&args(&["--busy-poll-us", "50", "/tmp"])).unwrap();
        assert_eq!(cfg.busy_poll_us, 50);
        let f = config_file("busy_poll_us = 20\n[[exports]]\nname = \"/\"\nbackend = \"memory\"\n");
        let cfg = build_config(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.busy_poll_us, 20);
        let err = build_config(&args(&["--busy-poll-us", "20000", "/tmp"])).unwrap_err();
        assert!(format!("{err:#}").contains("at most 10000"), "{err:#}");
    }

    #[test]
    fn connection_limits_from_flags_and_toml() {
        let cfg = build_config(&args(&["--memory", "--lease-time", "20"])).unwrap();
        assert_eq!(cfg.max_connections, 4096);
        assert_eq!(cfg.idle_timeout(), Some(std::time::Duration::from_secs(60)));
        let f = config_file("max_connections = 100\nidle_timeout = 0\n");
        let cfg =
            build_config(&args(&["--memory", "--config", f.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.max_connections, 100);
        assert_eq!(cfg.idle_timeout(), None);
        let cfg = build_config(&args(&[
            "--memory",
            "--config",
            f.path().to_str().unwrap(),
            "--max-connections",
            "7",
            "--idle-timeout",
            "30",
        ]))
        .unwrap();
        assert_eq!(cfg.max_connections, 7);
        assert_eq!(cfg.idle_timeout(), Some(std::time::Duration::from_secs(30)));
        assert!(build_config(&args(&["--memory", "--max-connections", "0"])).is_err());
    }

    #[test]
    fn client_rules_from_the_exports_file_the_flag_and_toml() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let f = config_file(&format!(
            "# two exports\n{d}  127.0.0.1(rw,no_root_squash) *(ro,all_squash,anonuid=1000)\n"
        ));
        let cfg = build_config(&args(&["--exports", f.path().to_str().unwrap()])).unwrap();
        assert_eq!(cfg.exports.len(), 1);
        let e = &cfg.exports[0];
        assert_eq!(
            (e.name.as_str(), e.path.as_path()),
            (&*d.to_string(), dir.path())
        );
        let specs: Vec<String> = e.clients.iter().map(|r| r.describe()).collect();
        assert_eq!(
            specs,
            [
                "127.0.0.1(rw,no_root_squash)",
                "*(ro,all_squash,anonuid=1000,anongid=65534)"
            ]
        );
        // An error names the file, the line and the column.
        let bad = config_file(&format!("{d} 127.0.0.1(rw)\n{d}2  10.0.0.1(rw,bogus)\n"));
        let err = build_config(&args(&["--exports", bad.path().to_str().unwrap()])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("invalid exports file"), "{msg}");
        assert!(msg.contains("line 2, column "), "{msg}");
        assert!(msg.contains("unknown option \"bogus\""), "{msg}");
        // --client applies to DIR and --export, and only there.
        let cfg = build_config(&args(&[
            "--client",
            "10.0.0.0/8(rw)",
            "--client",
            "*",
            dir.path().to_str().unwrap(),
        ]))
        .unwrap();
        let specs: Vec<String> = cfg.exports[0]
            .clients
            .iter()
            .map(|r| r.describe())
            .collect();
        assert_eq!(specs, ["10.0.0.0/8(rw,root_squash)", "*(ro,root_squash)"]);
        assert!(build_config(&args(&[
            "--client",
            "*",
            "--exports",
            f.path().to_str().unwrap()
        ]))
        .is_err());
        // Kerberos flavours are served (ADR 0051).
        let cfg =
            build_config(&args(&["--client", "10.0.0.0/8(rw,sec=krb5p)", "--memory"])).unwrap();
        assert_eq!(
            cfg.exports[0].clients[0].sec,
            vec![txnfs_server::exportrules::Flavor::Krb5p]
        );
        // TOML: the same specs in `clients`.
        let toml = config_file(
            "[[exports]]\nname = \"/m\"\nbackend = \"memory\"\nclients = [\"10.1.0.0/16(rw,no_root_squash)\"]\n",
        );
        let cfg = build_config(&args(&["--config", toml.path().to_str().unwrap()])).unwrap();
        assert_eq!(
            cfg.exports[0].clients[0].describe(),
            "10.1.0.0/16(rw,no_root_squash)"
        );
        let toml = config_file("[[exports]]\nname = \"/m\"\nbackend = \"memory\"\nclients = [\"10.1.0.0/16(rw,nope)\"]\n");
        let err = build_config(&args(&["--config", toml.path().to_str().unwrap()])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("client \"10.1.0.0/16(rw,nope)\": unknown option \"nope\""),
            "{msg}"
        );
    }

    #[test]
    fn kerberos_from_toml_and_flags() {
        let f = config_file(
            "kerberos = { keytab = \"/k/nfs.keytab\", map = \"/k/map\" }\n[[exports]]\nname = \"/m\"\nbackend = \"memory\"\nclients = [\"*(rw,sec=krb5p:krb5i)\"]\n",
        );
        let path = f.path().to_str().unwrap();
        let k = build_config(&args(&["--config", path])).unwrap().kerberos;
        let k = k.expect("kerberos from TOML");
        assert_eq!(k.keytab.as_deref(), Some(Path::new("/k/nfs.keytab")));
        assert_eq!(k.map.as_deref(), Some(Path::new("/k/map")));
        // A flag wins over the file; the other setting stays.
        let cfg = build_config(&args(&["--config", path, "--keytab", "/other.keytab"])).unwrap();
        let k = cfg.kerberos.expect("kerberos");
        assert_eq!(k.keytab.as_deref(), Some(Path::new("/other.keytab")));
        assert_eq!(k.map.as_deref(), Some(Path::new("/k/map")));
        // Neither: no Kerberos section (rules naming krb5 still turn it on at start).
        let cfg = build_config(&args(&["--memory"])).unwrap();
        assert_eq!(cfg.kerberos, None);
    }

    #[test]
    fn tls_files_from_toml_and_flags_are_checked_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let ca = txnfs_testbed::certs::TestCa::new(dir.path(), "t");
        let a_cert = ca.server(dir.path(), "a");
        let b_cert = ca.server(dir.path(), "b");
        let f = config_file(&format!(
            "tls = {{ cert = {:?}, key = {:?}, client_ca = {:?} }}\n[[exports]]\nname = \"/m\"\nbackend = \"memory\"\n",
            a_cert.cert, a_cert.key, ca.cert_pem
        ));
        let path = f.path().to_str().unwrap();
        let cfg = build_config(&args(&["--config", path])).unwrap();
        let tls = cfg.tls.expect("tls from TOML");
        assert_eq!(
            (tls.cert, tls.client_ca),
            (a_cert.cert.clone(), Some(ca.cert_pem.clone()))
        );
        // The flags win over the file.
        let cfg = build_config(&args(&[
            "--config",
            path,
            "--tls-cert",
            b_cert.cert.to_str().unwrap(),
            "--tls-key",
            b_cert.key.to_str().unwrap(),
        ]))
        .unwrap();
        let tls = cfg.tls.expect("tls from flags");
        assert_eq!((tls.key, tls.client_ca), (b_cert.key.clone(), None));
        // A key that is not the certificate's stops the load, naming both files.
        let err = build_config(&args(&[
            "--memory",
            "--tls-cert",
            a_cert.cert.to_str().unwrap(),
            "--tls-key",
            b_cert.key.to_str().unwrap(),
        ]))
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.starts_with("RPC-with-TLS: the TLS key"), "{msg}");
        assert!(msg.contains("b-key.pem") && msg.contains("a.pem"), "{msg}");
    }

    #[test]
    fn unknown_layer_lists_the_known_ones() {
        let f = config_file("[[exports]]\nname = \"/m\"\nlayers = [\"zip\", \"memory\"]\n");
        let err = build_config(&args(&["--config", f.path().to_str().unwrap()])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("unknown layer \"zip\""), "{msg}");
        assert!(msg.contains("local, memory, txn"), "{msg}");
    }
}
