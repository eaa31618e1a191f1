//! A normal user runs `txnfs serve DIR` (ADR 0050): with no handle option the server
//! picks the handle table (one INFO line says so), keeps its state under
//! `$XDG_STATE_HOME/txnfs`, and the handles it gave out still work after a restart and
//! after the file is renamed on disk behind its back, until the file is removed.
//!
//! Run as root, the test serves as `nobody` (uid 65534) through `setpriv`; run as a
//! normal user, it serves as that user. Without `setpriv` as root it is skipped
//! loudly, and fails under `CI=true` (see `txnfs_e2e::peer`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs_rs::{Mount, Nfs4ErrorCode};
use txnfs_e2e::{is_nfs4, timed, txnfs_bin};

/// The user the server runs as when the test runs as root.
const NOBODY: u32 = 65534;

/// A server run as a normal user, and the directories it uses.
struct UserServer {
    tmp: tempfile::TempDir,
    bin: PathBuf,
    /// Run through `setpriv` as `NOBODY` (the test is root), else as ourselves.
    switch_user: bool,
    uid: u32,
    port: u16,
    /// Options given to `txnfs serve` before the directory.
    serve_args: Vec<String>,
    /// `TXNFS_LOG` of the server.
    log_level: &'static str,
    child: Option<Child>,
    starts: u32,
}

fn euid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

impl UserServer {
    /// The scratch tree: the binary (copied where the user can run it), the export and
    /// the user's XDG state home, owned by the user. `None`: skipped (see module doc).
    fn prepare() -> Option<UserServer> {
        Self::prepare_as(euid() == 0)
    }

    /// As [`UserServer::prepare`]; `switch_user` false runs the server as the test's
    /// own user (root's server, when the test runs as root).
    fn prepare_as(switch_user: bool) -> Option<UserServer> {
        if switch_user {
            let setpriv = Command::new("setpriv")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success());
            txnfs_e2e::peer::require(
                "setpriv (util-linux), to run the server as uid 65534",
                setpriv,
                "apt-get install util-linux",
            )?;
        }
        let uid = if switch_user { NOBODY } else { euid() };
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = tmp.path().join("txnfs");
        std::fs::copy(txnfs_bin(), &bin).unwrap_or_else(|e| {
            panic!(
                "cannot copy {} (build it: cargo build -p txnfs-cli): {e}",
                txnfs_bin().display()
            )
        });
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["export", "xdg", "home"] {
            let p = tmp.path().join(d);
            std::fs::create_dir(&p).unwrap();
            if switch_user {
                chown(&p, uid);
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Some(UserServer {
            tmp,
            bin,
            switch_user,
            uid,
            port,
            serve_args: Vec::new(),
            log_level: "info",
            child: None,
            starts: 0,
        })
    }

    fn export(&self) -> PathBuf {
        self.tmp.path().join("export")
    }

    fn log_path(&self) -> PathBuf {
        self.tmp.path().join("server.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `txnfs serve EXPORT` as the user, with no handle or state-directory option.
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut cmd = if self.switch_user {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={NOBODY}"))
                .arg(format!("--regid={NOBODY}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(&self.bin);
            c
        } else {
            Command::new(&self.bin)
        };
        cmd.args(["serve", "--no-grace", "--no-rpcbind", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .args(&self.serve_args)
            .arg(self.export())
            .env("XDG_STATE_HOME", self.tmp.path().join("xdg"))
            .env("HOME", self.tmp.path().join("home"))
            .env("TXNFS_LOG", self.log_level)
            .current_dir(self.tmp.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.child = Some(cmd.spawn().expect("spawn txnfs serve"));
        self.starts += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("txnfs serve exited ({st}); log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "txnfs serve did not listen within 30 s; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL (the handle table must not depend on a clean stop) and reap.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.stop();
        self.start();
    }

    fn url(&self, path: &str) -> String {
        format!("nfs://127.0.0.1:{}{path}", self.port)
    }

    async fn mount(&self) -> Box<dyn Mount> {
        let url = format!(
            "nfs://127.0.0.1:{}/?version=4.1&noresvport=true&uid={}&gid={}",
            self.port, self.uid, self.uid
        );
        match timed("mount", nfs_rs::parse_url_and_mount(&url)).await {
            Ok(m) => m,
            Err(e) => panic!("mount {url}: {e:?}; log:\n{}", self.log()),
        }
    }

    /// Our client, as the serving user (a normal user's server cannot give files to
    /// anyone else: a create as root is NFS4ERR_PERM).
    fn txnfs_cp(&self, args: &[&str]) {
        let out = Command::new(&self.bin)
            .arg("--uid")
            .arg(self.uid.to_string())
            .arg("--gid")
            .arg(self.uid.to_string())
            .arg("cp")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "txnfs cp {args:?}: {}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }
}

impl Drop for UserServer {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("server log:\n{}", self.log());
        }
    }
}

async fn read_all(s: &UserServer, m: &dyn Mount, fh: &Bytes, what: &str) -> Vec<u8> {
    match timed(what, m.read(fh.clone(), 0, 1 << 16)).await {
        Ok(b) => b.to_vec(),
        Err(e) => panic!("{what}: {e:?}; server log:\n{}", s.log()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_users_server_keeps_handles_across_restarts_and_renames() {
    let Some(mut s) = UserServer::prepare() else {
        return;
    };
    s.start();
    let log = s.log();
    let mode_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("file handles:"))
        .collect();
    assert_eq!(
        mode_lines.len(),
        1,
        "one INFO line on the handle mode:\n{log}"
    );
    assert!(
        mode_lines[0].contains("INFO") && mode_lines[0].contains("file handles: handle table"),
        "the server chose the handle table: {}",
        mode_lines[0]
    );
    assert!(
        mode_lines[0].contains("EPERM, this process lacks CAP_DAC_READ_SEARCH"),
        "{}",
        mode_lines[0]
    );
    // The default state directory of a normal user.
    assert!(
        s.tmp.path().join("xdg/txnfs/boot-epoch").is_file(),
        "state under $XDG_STATE_HOME/txnfs:\n{log}"
    );

    // Write a small tree with our client.
    let src = s.tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let data = b"bytes written by a normal user's server\n".repeat(50);
    std::fs::write(src.join("sub/data.txt"), &data).unwrap();
    s.txnfs_cp(&["-R", src.join("sub").to_str().unwrap(), &s.url("/sub")]);
    assert_eq!(
        std::fs::read(s.export().join("sub/data.txt")).unwrap(),
        data
    );
    assert_eq!(
        std::fs::metadata(s.export().join("sub/data.txt"))
            .unwrap()
            .uid(),
        s.uid
    );

    let m = s.mount().await;
    let fh = match timed("lookup", m.lookup_path("/sub/data.txt")).await {
        Ok(r) => r.fh,
        Err(e) => panic!("lookup: {e:?}; log:\n{}", s.log()),
    };
    assert_eq!(read_all(&s, &*m, &fh, "read before restart").await, data);
    drop(m);

    // Restart: the same handle reads the same bytes.
    s.restart();
    let m = s.mount().await;
    assert_eq!(read_all(&s, &*m, &fh, "read after restart").await, data);

    // A file created and never made durable (no COMMIT, no stable WRITE): its new id
    // lives only in the table's redo log when the server is killed, and its handle
    // must still work after the restart.
    let sub = match timed("lookup /sub", m.lookup_path("/sub")).await {
        Ok(r) => r.fh,
        Err(e) => panic!("lookup /sub: {e:?}; log:\n{}", s.log()),
    };
    let fresh = match timed("create", m.create(sub, "fresh.txt", Some(0o644))).await {
        Ok(r) => r.fh,
        Err(e) => panic!("create: {e:?}; log:\n{}", s.log()),
    };
    drop(m);
    s.restart();
    let m = s.mount().await;
    if let Err(e) = timed("getattr of a fresh file", m.getattr(fresh.clone())).await {
        panic!(
            "a file created before a kill -9 is stale after it: {e:?}; log:\n{}",
            s.log()
        );
    }

    // Renamed on disk between two accesses, within its directory and then into
    // another one: still reached by its handle, running and after a restart.
    std::fs::rename(
        s.export().join("sub/data.txt"),
        s.export().join("sub/renamed.txt"),
    )
    .unwrap();
    assert_eq!(read_all(&s, &*m, &fh, "read after a rename").await, data);
    drop(m);
    let other = s.export().join("other");
    std::fs::create_dir(&other).unwrap();
    if s.switch_user {
        chown(&other, s.uid);
    }
    std::fs::rename(s.export().join("sub/renamed.txt"), other.join("moved.txt")).unwrap();
    s.restart();
    let m = s.mount().await;
    assert_eq!(
        read_all(&s, &*m, &fh, "read after a move and a restart").await,
        data
    );

    // Gone: the handle is stale.
    std::fs::remove_file(other.join("moved.txt")).unwrap();
    s.restart();
    let m = s.mount().await;
    match timed("getattr of a removed file", m.getattr(fh.clone())).await {
        Err(e) if is_nfs4(&e, Nfs4ErrorCode::NFS4ERR_STALE) => {}
        other => panic!("getattr of a removed file: want NFS4ERR_STALE, got {other:?}"),
    }
    let starts = s.starts;
    assert_eq!(starts, 5);
    assert_eq!(
        s.log().matches("file handles: handle table").count(),
        5,
        "the INFO line once per start"
    );
}

#[test]
fn a_normal_user_cannot_force_kernel_handles() {
    let Some(s) = UserServer::prepare() else {
        return;
    };
    let mut cmd = Command::new(if s.switch_user { "setpriv" } else { "env" });
    if s.switch_user {
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    }
    let out = cmd
        .arg(&s.bin)
        .args(["serve", "--no-rpcbind", "--handles", "kernel", "--listen"])
        .arg(format!("127.0.0.1:{}", s.port))
        .arg(s.export())
        .env("XDG_STATE_HOME", s.tmp.path().join("xdg"))
        .env("HOME", s.tmp.path().join("home"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with kernel handles: {err}");
    assert!(
        err.contains("EPERM, this process lacks CAP_DAC_READ_SEARCH"),
        "the error says why: {err}"
    );
}

/// Root keeps kernel handles by default (said at DEBUG: nothing to act on), and may
/// ask for the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_keeps_kernel_handles_and_may_force_the_table() {
    if euid() != 0 {
        eprintln!("SKIPPED: root_keeps_kernel_handles_and_may_force_the_table: needs root");
        return;
    }
    let Some(mut s) = UserServer::prepare_as(false) else {
        return;
    };
    s.log_level = "debug";
    s.start();
    let log = s.log();
    assert!(
        log.contains("DEBUG")
            && log.contains("file handles: kernel handles (open_by_handle_at works)"),
        "root's default: {log}"
    );
    assert!(!log.contains("file handles: handle table"), "{log}");
    s.stop();
    s.log_level = "info";
    std::fs::remove_file(s.log_path()).unwrap();
    s.serve_args = vec!["--handles".into(), "table".into()];
    s.start();
    let log = s.log();
    assert!(
        log.contains("file handles: handle table") && log.contains("table mode asked for"),
        "forced table: {log}"
    );
    let src = s.tmp.path().join("f.txt");
    std::fs::write(&src, b"root in table mode").unwrap();
    s.txnfs_cp(&[src.to_str().unwrap(), &s.url("/f.txt")]);
    let m = s.mount().await;
    let fh = match timed("lookup", m.lookup_path("/f.txt")).await {
        Ok(r) => r.fh,
        Err(e) => panic!("lookup: {e:?}; log:\n{}", s.log()),
    };
    drop(m);
    s.restart();
    let m = s.mount().await;
    assert_eq!(
        read_all(&s, &*m, &fh, "read after restart").await,
        b"root in table mode"
    );
}
