//! Start and stop the servers under comparison on 127.0.0.1, each on a free
//! port with a fresh export in a temporary directory.
//!
//! * txnfs: `<bin> serve --listen 127.0.0.1:PORT --no-grace --state-dir DIR
//!   EXPORTDIR`, exported as `/`. The binary is `$TXNFS_BIN`, else
//!   `<target>/release/txnfs`, else `<target>/debug/txnfs`.
//! * NFS-Ganesha: the shared configuration and launcher of
//!   [`txnfs_testbed::ganesha`] (FSAL VFS, NFSv4.1, graceless, pNFS off),
//!   exported as `/export`.
//!
//! A server counts as up once it answers an ONC RPC NULL call for NFSv4
//! (program 100003, version 4, procedure 0). Servers are stopped by PID:
//! SIGTERM, then SIGKILL after a grace time. Only one Ganesha runs at a time
//! on this machine (it still uses fixed paths such as `/var/run/ganesha`),
//! enforced with [`ganesha::lock`] held while it runs.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use txnfs_rpc::{Credential, RpcClient};
use txnfs_testbed::ganesha;

/// How long a server may take to answer the NULL probe.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for another Ganesha run to release the Ganesha lock.
const GANESHA_LOCK_WAIT: Duration = Duration::from_secs(600);

/// NFS program number and version probed with a NULL call.
const NFS_PROGRAM: u32 = 100003;
const NFS_V4: u32 = 4;

/// Which server implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerKind {
    Txnfs,
    Ganesha,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Txnfs => "txnfs",
            ServerKind::Ganesha => "ganesha",
        }
    }

    /// The path of the export in NFS terms (what goes after the port in a URL).
    pub fn export_path(self) -> &'static str {
        match self {
            ServerKind::Txnfs => "/",
            ServerKind::Ganesha => ganesha::EXPORT_PSEUDO,
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ServerKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "txnfs" => Ok(ServerKind::Txnfs),
            "ganesha" | "nfs-ganesha" => Ok(ServerKind::Ganesha),
            other => bail!("unknown server {other:?} (known: txnfs, ganesha)"),
        }
    }
}

/// Settings for starting a server.
#[derive(Clone, Debug)]
pub struct ServerOpts {
    /// txnfs binary; `None`: [`find_txnfs_bin`].
    pub txnfs_bin: Option<PathBuf>,
    /// Ganesha binary; `None`: `ganesha.nfsd` from `PATH`.
    pub ganesha_bin: Option<PathBuf>,
    /// Parent of the temporary directory (exports, state, logs); `None`: the
    /// system temporary directory.
    pub tmp_parent: Option<PathBuf>,
    /// Time allowed until the server answers the NULL probe.
    pub start_timeout: Duration,
    /// Keep the temporary directory after stopping (logs, exports).
    pub keep: bool,
    /// Extra arguments for `txnfs serve`.
    pub txnfs_args: Vec<String>,
    /// Ganesha with delegations on.
    pub ganesha_delegations: bool,
    /// Ganesha serves NFSv3 too (MOUNT on a port of its own, in the target URL).
    pub ganesha_nfsv3: bool,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            txnfs_bin: None,
            ganesha_bin: None,
            tmp_parent: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            keep: false,
            txnfs_args: Vec::new(),
            ganesha_delegations: false,
            ganesha_nfsv3: false,
        }
    }
}

/// The workspace root (one definition, in txnfs-e2e).
pub use txnfs_testbed::workspace_root;

/// The cargo target directory: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// A workspace binary: `$ENV_VAR` when set, else `<target>/release/NAME`, else
/// `<target>/debug/NAME` (the first that exists).
pub fn find_workspace_bin(env_var: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("{env_var}={} does not exist", p.display());
        }
        return Ok(p);
    }
    let target = target_dir();
    let candidates = [
        target.join("release").join(name),
        target.join("debug").join(name),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "{name} binary not found (looked at {} and {}; set {env_var} or build it)",
                candidates[0].display(),
                candidates[1].display()
            )
        })
}

/// The txnfs binary: `$TXNFS_BIN`, `<target>/release/txnfs` or `<target>/debug/txnfs`.
pub fn find_txnfs_bin() -> Result<PathBuf> {
    find_workspace_bin("TXNFS_BIN", "txnfs")
        .map_err(|e| anyhow!("{e}: cargo build --release -p txnfs-cli"))
}

/// `name` on `PATH`, if it is there.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A port on 127.0.0.1 nobody listens on right now (the kernel picks it;
/// the server binding it later is checked by the start-up probe).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0 to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// A running server. Dropping it stops the server (by PID) and removes its
/// temporary directory unless `keep` was set.
pub struct RunningServer {
    pub kind: ServerKind,
    pub pid: u32,
    pub port: u16,
    /// The export in NFS terms: `/` for txnfs, `/export` for Ganesha.
    pub export_path: String,
    /// The exported directory on this host.
    pub export_dir: PathBuf,
    /// Server log (stdout and stderr, and Ganesha's `-L` log).
    pub log_path: PathBuf,
    /// One line naming the server's version, if it could be found.
    pub version: Option<String>,
    /// Where NFSv3 clients find MOUNT when it is not the NFS port.
    pub mount_port: Option<u16>,
    /// An rpcbind started for this server (Ganesha must register NFSv3 with one).
    rpcbind: Option<Child>,
    keep: bool,
    child: Option<Child>,
    work: Option<tempfile::TempDir>,
    _lock: Option<File>,
}

impl fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningServer")
            .field("kind", &self.kind)
            .field("pid", &self.pid)
            .field("port", &self.port)
            .field("export_path", &self.export_path)
            .field("export_dir", &self.export_dir)
            .finish()
    }
}

impl RunningServer {
    /// Start `kind` and wait until it answers an RPC NULL call.
    pub fn start(kind: ServerKind, opts: &ServerOpts) -> Result<RunningServer> {
        match kind {
            ServerKind::Txnfs => start_txnfs(opts),
            ServerKind::Ganesha => start_ganesha(opts),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `nfs://127.0.0.1:PORT/` or `nfs://127.0.0.1:PORT/export`.
    pub fn url(&self) -> String {
        let mount = self
            .mount_port
            .map(|p| format!("?mountport={p}"))
            .unwrap_or_default();
        format!("nfs://127.0.0.1:{}{}{mount}", self.port, self.export_path)
    }

    /// The temporary directory holding export, state and logs.
    pub fn work_dir(&self) -> Option<&Path> {
        self.work.as_ref().map(|w| w.path())
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// Stop the server: SIGTERM by PID, SIGKILL after 10 s. Returns an error
    /// when it had already exited before (with its status and log tail).
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        unregister_child(self.pid);
        let result = match child.try_wait() {
            Ok(Some(status)) => Err(anyhow!(
                "{} (pid {}) had already exited ({status}); log tail:\n{}",
                self.kind,
                self.pid,
                self.log_tail(20)
            )),
            _ => {
                terminate(&mut child, self.pid, Duration::from_secs(10));
                Ok(())
            }
        };
        if let Some(work) = self.work.take() {
            if self.keep_work() {
                eprintln!("kept {} (logs, export)", work.path().display());
                let _ = work.keep();
            }
        }
        self._lock = None;
        if let Some(mut pm) = self.rpcbind.take() {
            let _ = pm.kill();
            let _ = pm.wait();
        }
        result
    }

    fn keep_work(&self) -> bool {
        self.keep || std::env::var_os("TXNFS_COMPARE_KEEP").is_some_and(|v| v == "1")
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// SIGTERM `pid`, wait up to `grace` for it to exit, then SIGKILL; reaps it.
fn terminate(child: &mut Child, pid: u32, grace: Duration) {
    signal_pid(pid, "-TERM");
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("server pid {pid} ignored SIGTERM for {grace:?}; sending SIGKILL");
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `lines` lines of a file (at most its last 64 KiB), or a note that
/// it could not be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("(no log at {}: {e})", path.display()),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    if tail.is_empty() {
        format!("(log {} is empty)", path.display())
    } else {
        tail.join("\n")
    }
}

fn make_work_dir(kind: ServerKind, opts: &ServerOpts) -> Result<tempfile::TempDir> {
    let prefix = format!("txnfs-compare-{}.", kind.name());
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix);
    let dir = match &opts.tmp_parent {
        Some(p) => {
            std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
            b.tempdir_in(p)
        }
        None => b.tempdir(),
    }
    .context("creating a temporary directory for the server")?;
    for sub in ["export", "state"] {
        std::fs::create_dir(dir.path().join(sub))
            .with_context(|| format!("creating {}", dir.path().join(sub).display()))?;
    }
    Ok(dir)
}

fn log_file(path: &Path) -> Result<(Stdio, Stdio)> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("creating log {}", path.display()))?;
    let g = f.try_clone()?;
    Ok((Stdio::from(f), Stdio::from(g)))
}

/// The first non-empty line `bin arg` prints (stdout, then stderr), if it
/// exits within 3 s (it is killed otherwise).
fn version_line(bin: &Path, arg: &str) -> Option<String> {
    let dir = tempfile::tempdir().ok()?;
    let out_path = dir.path().join("version.txt");
    let out = File::create(&out_path).ok()?;
    let err = out.try_clone().ok()?;
    let mut child = Command::new(bin)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let text = std::fs::read_to_string(&out_path).ok()?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// A server's work directory (`export/`, `state/`, `server.log`) and port,
/// made before its process starts.
struct Staged {
    kind: ServerKind,
    work: tempfile::TempDir,
    export_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
}

impl Staged {
    fn new(kind: ServerKind, opts: &ServerOpts) -> Result<Staged> {
        let work = make_work_dir(kind, opts)?;
        Ok(Staged {
            kind,
            export_dir: work.path().join("export"),
            log_path: work.path().join("server.log"),
            port: free_port()?,
            work,
        })
    }

    fn state_dir(&self) -> PathBuf {
        self.work.path().join("state")
    }

    /// The spawned server, once it answers the NULL probe.
    fn started(
        self,
        child: Child,
        version: Option<String>,
        lock: Option<File>,
        opts: &ServerOpts,
    ) -> Result<RunningServer> {
        let mut server = RunningServer {
            kind: self.kind,
            pid: child.id(),
            port: self.port,
            export_path: self.kind.export_path().to_string(),
            export_dir: self.export_dir,
            log_path: self.log_path,
            version,
            mount_port: None,
            rpcbind: None,
            keep: opts.keep,
            child: Some(child),
            work: Some(self.work),
            _lock: lock,
        };
        wait_ready(&mut server, opts.start_timeout)?;
        Ok(server)
    }
}

fn start_txnfs(opts: &ServerOpts) -> Result<RunningServer> {
    let bin = match &opts.txnfs_bin {
        Some(b) if b.is_file() => b.clone(),
        Some(b) => bail!("txnfs binary {} not found", b.display()),
        None => find_txnfs_bin()?,
    };
    let staged = Staged::new(ServerKind::Txnfs, opts)?;
    let (out, err) = log_file(&staged.log_path)?;
    let child = Command::new(&bin)
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", staged.port))
        .arg("--no-grace")
        .arg("--state-dir")
        .arg(staged.state_dir())
        .args(&opts.txnfs_args)
        .arg(&staged.export_dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    staged.started(child, version_line(&bin, "--version"), None, opts)
}

fn start_ganesha(opts: &ServerOpts) -> Result<RunningServer> {
    let bin = match &opts.ganesha_bin {
        Some(b) if b.is_file() => b.clone(),
        Some(b) => bail!("{} not found: {}", b.display(), ganesha::INSTALL_HINT),
        None => ganesha::find_bin()
            .ok_or_else(|| anyhow!("ganesha.nfsd not found: {}", ganesha::INSTALL_HINT))?,
    };
    let lock = ganesha::lock(GANESHA_LOCK_WAIT).context("taking the Ganesha lock")?;
    let staged = Staged::new(ServerKind::Ganesha, opts)?;
    let mut conf = ganesha::Config::single(staged.port, &staged.export_dir, &staged.state_dir());
    conf.delegations = opts.ganesha_delegations;
    let rpcbind = if opts.ganesha_nfsv3 {
        conf.nfsv3_mount_port = Some(free_port()?);
        ensure_portmapper()?
    } else {
        None
    };
    let child = ganesha::spawn(&bin, &conf, staged.work.path(), &staged.log_path)
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut server = staged.started(child, version_line(&bin, "-v"), Some(lock), opts)?;
    server.mount_port = conf.nfsv3_mount_port;
    server.rpcbind = rpcbind;
    Ok(server)
}

/// Ganesha will not serve NFSv3 unless it can register it with a portmapper: use the
/// host's, or start `rpcbind -f` (stopped with the server) when none answers.
fn ensure_portmapper() -> Result<Option<Child>> {
    let pm = SocketAddr::from(([127, 0, 0, 1], 111));
    let answers = || TcpStream::connect_timeout(&pm, Duration::from_millis(200)).is_ok();
    if answers() {
        return Ok(None);
    }
    let bin = ["/usr/sbin/rpcbind", "/sbin/rpcbind"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "NFS-Ganesha serves NFSv3 only with a portmapper to register with, and no \
                 rpcbind runs or is installed (apt-get install rpcbind), or leave 3 out of \
                 --versions"
            )
        })?;
    let child = Command::new(&bin)
        .arg("-f")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answers() {
        if Instant::now() > deadline {
            bail!("{} did not start listening on 127.0.0.1:111", bin.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Some(child))
}

/// Wait until the server answers the NULL probe; on failure stop it and return
/// an error with the log tail.
fn wait_ready(server: &mut RunningServer, timeout: Duration) -> Result<()> {
    register_child(server.pid, server.work_dir().map(Path::to_path_buf));
    let start = Instant::now();
    let addr = server.addr();
    let mut last_err;
    loop {
        if let Some(child) = server.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let tail = server.log_tail(30);
                server.child = None;
                unregister_child(server.pid);
                bail!(
                    "{} (pid {}) exited during start-up ({status}) on 127.0.0.1:{}; log {}:\n{tail}",
                    server.kind,
                    server.pid,
                    server.port,
                    server.log_path.display()
                );
            }
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            match rpc_null_blocking(addr, Duration::from_secs(2)) {
                Ok(()) => return Ok(()),
                Err(e) => last_err = format!("{e:#}"),
            }
        } else {
            last_err = "connection refused".into();
        }
        if start.elapsed() >= timeout {
            let tail = server.log_tail(30);
            let _ = server.stop();
            bail!(
                "{} (pid {}) did not answer an RPC NULL on 127.0.0.1:{} within {:?} (last: {last_err}); log {}:\n{tail}",
                server.kind,
                server.pid,
                server.port,
                timeout,
                server.log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One NFSv4 NULL call to `addr` with [`RpcClient`].
pub async fn rpc_null(addr: SocketAddr) -> Result<()> {
    let client = RpcClient::connect(addr, Credential::None)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    client
        .call(NFS_PROGRAM, NFS_V4, 0, Bytes::new())
        .await
        .with_context(|| format!("NFSv4 NULL call to {addr}"))?;
    Ok(())
}

/// [`rpc_null`] with a timeout, on a private current-thread runtime in its own
/// thread (so it also works when called from inside another tokio runtime).
pub fn rpc_null_blocking(addr: SocketAddr, timeout: Duration) -> Result<()> {
    std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building a tokio runtime")?;
        rt.block_on(async {
            match tokio::time::timeout(timeout, rpc_null(addr)).await {
                Ok(r) => r,
                Err(_) => bail!("NULL call to {addr} timed out after {timeout:?}"),
            }
        })
    })
    .join()
    .map_err(|_| anyhow!("NULL probe thread panicked"))?
}

/// Children to stop when this process is interrupted: (pid, directory to
/// remove afterwards).
static LIVE: std::sync::Mutex<Vec<(u32, Option<PathBuf>)>> = std::sync::Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<(u32, Option<PathBuf>)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Note a child process (server or runner) to stop on SIGINT/SIGTERM (see
/// [`install_signal_cleanup`]), and a directory to remove after it.
pub fn register_child(pid: u32, dir: Option<PathBuf>) {
    live().push((pid, dir));
}

/// Forget a child registered with [`register_child`] (it was stopped).
pub fn unregister_child(pid: u32) {
    live().retain(|(p, _)| *p != pid);
}

/// Whether `pid` exists and is not a zombie.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// On SIGINT or SIGTERM, stop every registered child by PID (SIGTERM, then
/// SIGKILL after 5 s), remove their temporary directories (unless
/// `TXNFS_COMPARE_KEEP=1`) and exit with status 130. Installed once, from a
/// thread of its own with a private tokio runtime.
pub fn install_signal_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("compare-signals".into())
            .spawn(|| {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let name = rt.block_on(async {
                    use tokio::signal::unix::{signal, SignalKind};
                    let (Ok(mut int), Ok(mut term)) = (
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                    ) else {
                        return None;
                    };
                    tokio::select! {
                        _ = int.recv() => Some("SIGINT"),
                        _ = term.recv() => Some("SIGTERM"),
                    }
                });
                let Some(name) = name else { return };
                let children: Vec<(u32, Option<PathBuf>)> = live().drain(..).collect();
                eprintln!(
                    "\n{name}: stopping {} child process(es) and exiting",
                    children.len()
                );
                for (pid, _) in &children {
                    signal_pid(*pid, "-TERM");
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while children.iter().any(|(p, _)| pid_alive(*p)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                for (pid, _) in &children {
                    if pid_alive(*pid) {
                        signal_pid(*pid, "-KILL");
                    }
                }
                let keep = std::env::var_os("TXNFS_COMPARE_KEEP").is_some_and(|v| v == "1");
                for (_, dir) in &children {
                    if let Some(d) = dir {
                        if keep {
                            eprintln!("kept {}", d.display());
                        } else {
                            let _ = std::fs::remove_dir_all(d);
                        }
                    }
                }
                std::process::exit(130);
            });
    });
}

fn signal_pid(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_kinds() {
        assert_eq!("txnfs".parse::<ServerKind>().unwrap(), ServerKind::Txnfs);
        assert_eq!(
            "Ganesha".parse::<ServerKind>().unwrap(),
            ServerKind::Ganesha
        );
        assert!("knfsd".parse::<ServerKind>().is_err());
    }

    #[test]
    fn missing_ganesha_binary_is_a_clear_error() {
        let opts = ServerOpts {
            ganesha_bin: Some(PathBuf::from("/nonexistent/ganesha.nfsd")),
            ..ServerOpts::default()
        };
        let err = RunningServer::start(ServerKind::Ganesha, &opts).unwrap_err();
        assert!(
            format!("{err}").contains("apt-get install nfs-ganesha nfs-ganesha-vfs"),
            "{err}"
        );
    }

    #[test]
    fn server_exiting_at_start_is_reported_with_log_tail() {
        // `false` exits at once with status 1: "exited during start-up".
        let opts = ServerOpts {
            txnfs_bin: which("false"),
            ..ServerOpts::default()
        };
        let err = RunningServer::start(ServerKind::Txnfs, &opts).unwrap_err();
        let msg = format!("{err}");
        assert!(msg.contains("exited during start-up"), "{msg}");
    }

    #[test]
    fn log_tail_takes_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&p, 2), "c\nd");
        assert!(log_tail(&dir.path().join("none"), 2).contains("no log"));
    }
}
