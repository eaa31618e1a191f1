//! What the `txnfs serve` tests share: the binary, a free port, and a server of a fresh
//! export started the way an administrator would.

#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_txnfs")
}

/// The output of `txnfs serve --help`.
pub fn serve_help() -> std::process::Output {
    Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .unwrap()
}

/// A port nothing listens on now (the listener is closed again at once).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `txnfs serve [flags] --listen 127.0.0.1:port --no-grace` of `dir/export` (created
/// here) with its state in `dir/state`; its stderr piped when `stderr` is true.
pub fn spawn_serve(dir: &Path, port: u16, flags: &[&str], stderr: bool) -> Child {
    std::fs::create_dir_all(dir.join("export")).unwrap();
    Command::new(bin())
        .arg("serve")
        .args(flags)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-grace",
            "--state-dir",
        ])
        .arg(dir.join("state"))
        .arg(dir.join("export"))
        .stdout(Stdio::null())
        .stderr(if stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap()
}

/// Wait up to 10 s until something accepts connections on `port`.
pub fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM to `child`, then wait up to 10 s for its exit: its status and what it wrote
/// to its (piped) stderr.
pub fn terminate(child: &mut Child) -> (std::process::ExitStatus, String) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "txnfs did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut log);
    }
    (status, log)
}

/// A path as the `&str` a command line takes (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A server of a test, killed when the test ends before it was stopped (or fails).
pub struct Serving(pub Child);

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `txnfs` command's output, its log kept to warnings.
pub fn txnfs(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .env("TXNFS_LOG", "warn")
        .output()
        .unwrap()
}
