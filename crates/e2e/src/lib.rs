//! End-to-end harness: starts an NFSv4.1 server (txnfs, or NFS-Ganesha for
//! validating the tests themselves) on a free loopback port with a fresh
//! temporary export, and mounts it with the third-party `nfs-rs` client.
//!
//! The server is chosen by `TXNFS_E2E_SERVER` (`txnfs`, the default, or
//! `ganesha`). The txnfs binary is `$TXNFS_BIN` or
//! `<workspace>/target/debug/txnfs`.

pub use txnfs_testbed::{data, ganesha, workspace_root};
pub use txnfs_testbed::{pattern, TreeShape, XorShift};

use std::fs::File;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod fixtures;
pub mod peer;
pub use nfs_rs;

/// How long a server gets to start accepting connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound for any single client call in the tests.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// Which NFS server the tests drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    Txnfs,
    Ganesha,
}

impl ServerKind {
    /// The kind named by `TXNFS_E2E_SERVER` (default: txnfs).
    pub fn from_env() -> ServerKind {
        match std::env::var("TXNFS_E2E_SERVER").as_deref() {
            Ok("ganesha") => ServerKind::Ganesha,
            Ok("txnfs") | Ok("") | Err(_) => ServerKind::Txnfs,
            Ok(other) => panic!("TXNFS_E2E_SERVER={other:?}: expected \"txnfs\" or \"ganesha\""),
        }
    }
}

/// A running server with its own temporary export and state directory.
/// The child process is killed (by PID) when the guard is dropped.
pub struct ServerGuard {
    kind: ServerKind,
    opts: ServerOpts,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    starts: u32,
}

/// Server settings beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct ServerOpts {
    /// Lease time in seconds (txnfs `--lease-time`, Ganesha `Lease_Lifetime`).
    pub lease_time: Option<u32>,
    /// Named exports instead of the single export at "/": (pseudo path such
    /// as "/a" or "/x/y", read-only). Each is backed by its own host
    /// directory, see [`ServerGuard::export_host_dir`]. txnfs gets them
    /// through a `--config` TOML file, Ganesha as EXPORT blocks.
    pub exports: Vec<(String, bool)>,
    /// Run the server with its grace period after (re)start (default: no
    /// grace, txnfs `--no-grace`, Ganesha `Graceless = true`). The grace
    /// period lasts one lease time on txnfs; Ganesha gets
    /// `Grace_Period = lease_time`.
    pub grace: bool,
    /// txnfs only: serve the volatile in-memory file system (`--memory`)
    /// instead of the export directory.
    pub memory: bool,
}

/// Host directory name for a named export ("/x/y" -> "x_y").
fn export_slug(name: &str) -> String {
    name.trim_matches('/').replace('/', "_")
}

/// The txnfs binary to run.
pub fn txnfs_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TXNFS_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("debug").join("txnfs")
}

/// A port that is free now, below the kernel's ephemeral range (32768+),
/// so that no client socket is ever given it implicitly (which could also
/// let a readiness probe connect to itself), and never handed out twice in
/// this process.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    static USED: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    // Start at an offset that differs between processes.
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    let _ = NEXT.compare_exchange(u32::MAX, seed % SPAN, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
        if used.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            used.push(port);
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN);
}

/// Whether process `pid` owns the socket listening on 127.0.0.1:`port`
/// (IPv4 or IPv4-mapped IPv6), read from /proc.
fn pid_listens_on(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, rem_address, st, ..., inode at index 9
            if f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A" {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|l| inodes.iter().any(|i| l.to_string_lossy() == *i))
            .unwrap_or(false)
    })
}

impl ServerGuard {
    /// Start the server named by `TXNFS_E2E_SERVER`.
    pub fn start_default() -> ServerGuard {
        ServerGuard::start(ServerKind::from_env())
    }

    /// Start the server named by `TXNFS_E2E_SERVER` with extra settings.
    pub fn start_default_with(opts: ServerOpts) -> ServerGuard {
        ServerGuard::start_with(ServerKind::from_env(), opts)
    }

    /// Start a server of the given kind on a free loopback port.
    pub fn start(kind: ServerKind) -> ServerGuard {
        ServerGuard::start_with(kind, ServerOpts::default())
    }

    /// Start a server of the given kind and settings on a free loopback port.
    pub fn start_with(kind: ServerKind, opts: ServerOpts) -> ServerGuard {
        let mut dir = tempfile::Builder::new()
            .prefix("txnfs-e2e-")
            .tempdir()
            .expect("create temp dir");
        std::fs::create_dir_all(dir.path().join("export")).expect("mkdir export");
        std::fs::create_dir_all(dir.path().join("state")).expect("mkdir state");
        for (name, _) in &opts.exports {
            std::fs::create_dir_all(dir.path().join("exports").join(export_slug(name)))
                .expect("mkdir export");
        }
        if kind == ServerKind::Txnfs {
            let bin = txnfs_bin();
            assert!(
                bin.is_file(),
                "txnfs binary {} is missing: build it first with cargo build -p txnfs-cli \
                 (or set TXNFS_BIN)",
                bin.display()
            );
        }
        let mut last_err = String::new();
        // A port found free may be taken by someone else before the server
        // binds it: retry with another port a few times.
        for _ in 0..3 {
            let mut guard = ServerGuard {
                kind,
                opts: opts.clone(),
                port: free_port(),
                dir,
                child: None,
                starts: 0,
            };
            match guard.spawn() {
                Ok(()) => return guard,
                Err(e) => {
                    last_err = e;
                    guard.kill9();
                    dir = guard.into_dir();
                }
            }
        }
        panic!("could not start {kind:?} server: {last_err}");
    }

    fn into_dir(mut self) -> tempfile::TempDir {
        self.kill9();
        let placeholder = tempfile::tempdir().expect("tempdir");
        std::mem::replace(&mut self.dir, placeholder)
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Host path of the exported directory, for checking bytes on disk.
    pub fn export_dir(&self) -> PathBuf {
        self.dir.path().join("export")
    }

    /// Host directory behind the named export `name` (see [`ServerOpts::exports`]).
    pub fn export_host_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join("exports").join(export_slug(name))
    }

    /// `nfs://` URL for the pseudo path `path` (e.g. "/" or "/a"), as root.
    pub fn url_at(&self, path: &str) -> String {
        format!(
            "nfs://127.0.0.1:{}{path}?version=4.1&noresvport=true&uid=0&gid=0",
            self.port
        )
    }

    /// Mount the pseudo path `path` (for servers started with named exports).
    pub async fn mount_at(&self, path: &str) -> Box<dyn nfs_rs::Mount> {
        self.mount_url(&self.url_at(path)).await
    }

    /// Server state directory (txnfs `--state-dir`, Ganesha recovery root).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The whole server log so far (stdout+stderr of every start).
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// The last `n` lines of the server log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The export path part of the URL: Ganesha's pseudo path is /export,
    /// txnfs exports its directory at the pseudo root.
    pub fn export_path(&self) -> &'static str {
        match self.kind {
            ServerKind::Txnfs => "/",
            ServerKind::Ganesha => ganesha::EXPORT_PSEUDO,
        }
    }

    /// `nfs://` URL for nfs-rs, forcing NFSv4.1 and an unprivileged source
    /// port, as uid 0 / gid 0.
    pub fn url(&self) -> String {
        self.url_with("uid=0&gid=0")
    }

    /// Like [`ServerGuard::url`] with extra query options instead of the
    /// default `uid=0&gid=0` (e.g. `uid=1000&gid=1000&readdir-buffer=1024`).
    pub fn url_with(&self, query: &str) -> String {
        format!(
            "nfs://127.0.0.1:{}{}?version=4.1&noresvport=true&{query}",
            self.port,
            self.export_path()
        )
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("open log: {e}"))?;
        self.starts += 1;
        let mut cmd = match self.kind {
            ServerKind::Txnfs => {
                let mut cmd = Command::new(txnfs_bin());
                cmd.arg("serve")
                    .arg("--listen")
                    .arg(format!("127.0.0.1:{}", self.port))
                    .arg("--state-dir")
                    .arg(self.state_dir());
                if !self.opts.grace {
                    cmd.arg("--no-grace");
                }
                if let Some(lease) = self.opts.lease_time {
                    cmd.arg("--lease-time").arg(lease.to_string());
                }
                if self.opts.memory {
                    cmd.arg("--memory");
                } else if self.opts.exports.is_empty() {
                    cmd.arg(self.export_dir());
                } else {
                    let conf = self.dir.path().join("txnfs.toml");
                    let mut toml = String::new();
                    for (name, ro) in &self.opts.exports {
                        toml.push_str(&format!(
                            "[[exports]]\nname = \"{name}\"\npath = \"{}\"\nread_only = {ro}\n\n",
                            self.export_host_dir(name).display()
                        ));
                    }
                    std::fs::write(&conf, toml).map_err(|e| format!("write txnfs.toml: {e}"))?;
                    cmd.arg("--config").arg(conf);
                }
                cmd.env("NO_COLOR", "1");
                if std::env::var_os("TXNFS_LOG").is_none() {
                    cmd.env("TXNFS_LOG", "info");
                }
                cmd
            }
            ServerKind::Ganesha => {
                let conf = ganesha_conf(self.port, self.dir.path(), &self.opts);
                let bin = ganesha::find_bin()
                    .ok_or_else(|| format!("ganesha.nfsd not found: {}", ganesha::INSTALL_HINT))?;
                let child = ganesha::spawn(&bin, &conf, self.dir.path(), &self.log_path())
                    .map_err(|e| format!("spawn ganesha.nfsd: {e}"))?;
                self.child = Some(child);
                return self.wait_ready();
            }
        };
        let err_log = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {:?}: {e}", self.kind))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "server exited during startup with {status}; log tail:\n{}",
                        self.log_tail(30)
                    ));
                }
            }
            // Ready when the port accepts AND the listener is our child's
            // (not another process that happens to hold the same port).
            let pid = self.child.as_ref().map(|c| c.id());
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && pid.is_some_and(|pid| pid_listens_on(pid, self.port))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server did not accept on {addr} within {START_TIMEOUT:?}; log tail:\n{}",
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL the server and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the server again with the same port, export and state dir.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() < deadline => {
                    // The port may linger briefly; try again.
                    eprintln!("restart attempt failed, retrying: {e}");
                    self.kill9();
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("restart failed: {e}"),
            }
        }
    }

    /// Mount the export with nfs-rs (NFSv4.1) as root.
    pub async fn mount(&self) -> Box<dyn nfs_rs::Mount> {
        self.mount_url(&self.url()).await
    }

    /// Mount with extra URL query options (see [`ServerGuard::url_with`]).
    pub async fn mount_with(&self, query: &str) -> Box<dyn nfs_rs::Mount> {
        self.mount_url(&self.url_with(query)).await
    }

    /// `nfs://` URL for nfs-rs speaking NFSv3, MOUNT on the NFS port (no portmapper
    /// needed), as uid 0 / gid 0. txnfs only: the Ganesha configuration serves v4.
    pub fn url_v3(&self) -> String {
        format!(
            "nfs://127.0.0.1:{port}{}?version=3&noresvport=true&nfsport={port}&mountport={port}&uid=0&gid=0",
            self.export_path(),
            port = self.port,
        )
    }

    /// Mount the export with nfs-rs over NFSv3 (see [`ServerGuard::url_v3`]).
    pub async fn mount_v3(&self) -> Box<dyn nfs_rs::Mount> {
        self.mount_url(&self.url_v3()).await
    }

    async fn mount_url(&self, url: &str) -> Box<dyn nfs_rs::Mount> {
        let url = url.to_string();
        match tokio::time::timeout(OP_TIMEOUT, nfs_rs::parse_url_and_mount(&url)).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => panic!(
                "mount {url} failed: {e} ({e:?}); server log tail:\n{}",
                self.log_tail(30)
            ),
            Err(_) => panic!(
                "mount {url} timed out; server log tail:\n{}",
                self.log_tail(30)
            ),
        }
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() || std::env::var_os("TXNFS_E2E_SHOW_LOG").is_some() {
            eprintln!(
                "---- {:?} server log tail ({}) ----\n{}\n----",
                self.kind,
                self.log_path().display(),
                self.log_tail(40)
            );
        }
        if std::env::var_os("TXNFS_E2E_KEEP").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
            eprintln!("keeping {}", dir.keep().display());
        }
    }
}

/// The shared Ganesha configuration ([`ganesha::Config`]) with this
/// guard's exports, lease time and grace setting.
fn ganesha_conf(port: u16, dir: &Path, opts: &ServerOpts) -> ganesha::Config {
    let mut conf = ganesha::Config::single(port, &dir.join("export"), &dir.join("state"));
    conf.graceless = !opts.grace;
    conf.lease_time = opts.lease_time;
    if !opts.exports.is_empty() {
        conf.exports = opts
            .exports
            .iter()
            .map(|(name, ro)| ganesha::Export {
                path: dir.join("exports").join(export_slug(name)),
                pseudo: name.clone(),
                read_only: *ro,
            })
            .collect();
    }
    conf
}

/// Await `fut` with [`OP_TIMEOUT`], panicking with `what` on timeout.
pub async fn timed<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: timed out after {OP_TIMEOUT:?}"),
    }
}

/// Read `len` bytes from `offset`, looping over short reads until EOF.
pub async fn read_exact(
    m: &dyn nfs_rs::Mount,
    fh: bytes::Bytes,
    offset: u64,
    len: usize,
) -> nfs_rs::Result<Vec<u8>> {
    let max = m.get_max_read_size().max(4096) as usize;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let want = (len - out.len()).min(max) as u32;
        let chunk = timed("read", m.read(fh.clone(), offset + out.len() as u64, want)).await?;
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// List every name in a directory with READDIR pages (nfs-rs
/// `readdirplus_page`), failing on a repeated cookie.
pub async fn list_dir(m: &dyn nfs_rs::Mount, dir_fh: bytes::Bytes) -> nfs_rs::Result<Vec<String>> {
    let mut position = nfs_rs::DirectoryCookie::default();
    let mut seen = std::collections::HashSet::new();
    let mut names = Vec::new();
    loop {
        let page = timed("readdir page", m.readdirplus_page(dir_fh.clone(), position)).await?;
        names.extend(
            page.entries
                .into_iter()
                .map(|e| e.file_name)
                .filter(|n| n != "." && n != ".."),
        );
        if page.eof {
            return Ok(names);
        }
        if !seen.insert(page.next.cookie) {
            return Err(nfs_rs::NfsError::Xdr("directory cookie repeated".into()));
        }
        position = page.next;
    }
}

// ---- assertion helpers shared by the tests ----

/// Panics with the server log tail when `r` is an error.
pub fn ok<T>(server: &ServerGuard, what: &str, r: nfs_rs::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!(
            "{what} failed: {e} ({e:?})\nserver log tail:\n{}",
            server.log_tail(25)
        ),
    }
}

/// Expects an error; panics (with the server log tail) on success.
pub fn err<T: std::fmt::Debug>(
    server: &ServerGuard,
    what: &str,
    r: nfs_rs::Result<T>,
) -> nfs_rs::NfsError {
    match r {
        Ok(v) => panic!(
            "{what} unexpectedly succeeded: {v:?}\nserver log tail:\n{}",
            server.log_tail(25)
        ),
        Err(e) => e,
    }
}

/// A lock conflict: nfs-rs reports LOCK denials as `LockDenied` (with the
/// holder's range) and LOCKT denials as plain `NFS4ERR_DENIED`.
pub fn is_denied(e: &nfs_rs::NfsError) -> bool {
    matches!(e, nfs_rs::NfsError::LockDenied { .. })
        || is_nfs4(e, nfs_rs::Nfs4ErrorCode::NFS4ERR_DENIED)
}

pub fn is_nfs4(e: &nfs_rs::NfsError, want: nfs_rs::Nfs4ErrorCode) -> bool {
    matches!(e, nfs_rs::NfsError::Nfs4(code) if std::mem::discriminant(code) == std::mem::discriminant(&want))
}

pub async fn write_all(
    server: &ServerGuard,
    m: &dyn nfs_rs::Mount,
    fh: &bytes::Bytes,
    offset: u64,
    data: &[u8],
) {
    let n = ok(
        server,
        "write_all",
        timed(
            "write_all",
            nfs_rs::write_all(m, fh.clone(), offset, bytes::Bytes::copy_from_slice(data)),
        )
        .await,
    );
    assert_eq!(n, data.len() as u64, "write_all wrote a short count");
}

pub async fn create_with(
    server: &ServerGuard,
    m: &dyn nfs_rs::Mount,
    path: &str,
    mode: u32,
    data: &[u8],
) -> bytes::Bytes {
    let obj = ok(
        server,
        &format!("create {path}"),
        timed("create", m.create_path(path, Some(mode))).await,
    );
    if !data.is_empty() {
        write_all(server, m, &obj.fh, 0, data).await;
    }
    ok(
        server,
        "close",
        timed("close", m.close(obj.fh.clone())).await,
    );
    obj.fh
}

/// Run borrowed futures concurrently on the current task (a minimal
/// `join_all`, as the crate keeps to tokio/bytes/nfs-rs/tempfile).
pub async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    use std::pin::Pin;
    use std::task::Poll;
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in futs.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => out[i] = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("completed")).collect()
}

/// Collects independent check failures so one test can report all of them
/// (with the server log tail) instead of stopping at the first.
#[must_use = "call Checks::finish, or the recorded failures are never reported"]
pub struct Checks<'a> {
    server: &'a ServerGuard,
    failures: Vec<String>,
}

impl<'a> Checks<'a> {
    pub fn new(server: &'a ServerGuard) -> Checks<'a> {
        Checks {
            server,
            failures: Vec::new(),
        }
    }

    /// Records `what` as failed unless `cond` holds.
    pub fn check(&mut self, cond: bool, what: impl Into<String>) {
        if !cond {
            self.failures.push(what.into());
        }
    }

    /// Records a failure unless `r` is an NFSv4 error among `want`.
    pub fn expect_err<T: std::fmt::Debug>(
        &mut self,
        what: &str,
        r: nfs_rs::Result<T>,
        want: &[nfs_rs::Nfs4ErrorCode],
    ) {
        match r {
            Ok(v) => self.failures.push(format!(
                "{what}: want one of {want:?}, but it succeeded: {v:?}"
            )),
            Err(e) if want.iter().any(|w| is_nfs4(&e, *w)) => {}
            Err(e) => self
                .failures
                .push(format!("{what}: want one of {want:?}, got {e:?}")),
        }
    }

    /// Records a failure if `r` is an error; returns the value.
    pub fn expect_ok<T>(&mut self, what: &str, r: nfs_rs::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.failures.push(format!("{what}: failed: {e:?}"));
                None
            }
        }
    }

    /// Panics listing every recorded failure.
    pub fn finish(mut self) {
        let failures = std::mem::take(&mut self.failures);
        if !failures.is_empty() {
            panic!(
                "{} check(s) failed:\n  - {}\nserver log tail:\n{}",
                failures.len(),
                failures.join("\n  - "),
                self.server.log_tail(20)
            );
        }
    }
}

/// A collector dropped with failures that [`Checks::finish`] never reported
/// still fails the test.
impl Drop for Checks<'_> {
    fn drop(&mut self) {
        if !self.failures.is_empty() && !std::thread::panicking() {
            panic!(
                "Checks dropped without finish() and {} failure(s):\n  - {}",
                self.failures.len(),
                self.failures.join("\n  - ")
            );
        }
    }
}
