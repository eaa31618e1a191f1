//! `txnfs serve` as a child process on 127.0.0.1, killed by its PID when the guard is
//! dropped (also when the test panics).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a server gets to recover and start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The txnfs binary: `$TXNFS_BIN`, else `<target dir>/debug/txnfs` (`$CARGO_TARGET_DIR`
/// or the workspace's `target`).
pub fn txnfs_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TXNFS_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .nth(2)
                .expect("crate lives at <workspace>/crates/torture")
                .join("target")
        });
    target.join("debug").join("txnfs")
}

/// A port free right now on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// What to serve.
#[derive(Clone, Debug)]
pub struct ServeSpec {
    pub bin: PathBuf,
    /// The export directory, or `None` for `--memory`.
    pub export: Option<PathBuf>,
    pub state_dir: PathBuf,
    /// The server's stderr is appended here.
    pub log: PathBuf,
}

/// A running `txnfs serve`.
pub struct ServerProc {
    child: Child,
    pub addr: SocketAddr,
}

/// How a start ended.
pub enum Started {
    Listening(ServerProc),
    /// The process ended before it listened (e.g. a fault point during recovery).
    Exited(ExitStatus),
}

impl ServeSpec {
    /// Starts the server with `TXNFS_TXN_FAULT=fault` if given and waits until it
    /// listens or exits.
    pub fn start(&self, fault: Option<&str>) -> Result<Started, String> {
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        // `sh` only sets the core size to 0 (fault points abort) and execs: the PID is
        // the server's.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("ulimit -c 0 2>/dev/null; exec \"$0\" \"$@\"")
            .arg(&self.bin)
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(["--no-grace", "--no-rpcbind", "--no-delegations"]);
        match &self.export {
            Some(d) => cmd.arg(d),
            None => cmd.arg("--memory"),
        };
        cmd.env_remove("TXNFS_TXN_FAULT");
        if let Some(f) = fault {
            cmd.env("TXNFS_TXN_FAULT", f);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        let mut proc = ServerProc { child, addr };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(st) = proc.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(Started::Exited(st));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(Started::Listening(proc));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server did not listen on {addr} in {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl ServerProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9` by PID, and reap.
    pub fn kill9(&mut self) -> Option<ExitStatus> {
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Has it exited (a fault point fired)?
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The signal that ended a process, if one did.
pub fn signal_of(st: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    st.signal()
}
