//! Live reconfiguration as an administrator uses it (ADR 0048): `txnfs serve --config
//! FILE`, the file rewritten, then `txnfs reload` or SIGHUP. Outcomes asserted over a
//! raw NFSv4.1 session: a new export is served while an open file of another export
//! keeps its session and stateid; a refused configuration changes nothing; a rule
//! change makes WRITE answer ROFS; a removed export's handles answer STALE; settings a
//! reload does not apply (listen, lease_time, max_connections) are named as waiting for
//! a restart, and the old address is still served. And `serve --check` on good and bad
//! configurations.

mod common;

use bytes::Bytes;
use common::{bin, free_port, terminate, wait_listening};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use txnfs_proto::mnt3::mountres3;
use txnfs_proto::nfs3::{nfsstat3, GETATTR3args, GETATTR3res};
use txnfs_rawclient::tcp::{auth_sys, Options, Session};
use txnfs_rawclient::v3::{proc3, V3Client};
use txnfs_rawclient::{channel, lookup, open_plain, opened, putfh, read, read_results, write};
use txnfs_server::nfs::*;

/// A scratch directory with the export directories `a` (file `f`: "alpha") and `b`
/// (file `g`: "beta"), the configuration file and the state directory.
struct Setup {
    top: tempfile::TempDir,
    port: u16,
}

impl Setup {
    fn new() -> Setup {
        let top = tempfile::tempdir().unwrap();
        for (d, f, data) in [("a", "f", "alpha"), ("b", "g", "beta")] {
            std::fs::create_dir(top.path().join(d)).unwrap();
            std::fs::write(top.path().join(d).join(f), data).unwrap();
        }
        Setup {
            top,
            port: free_port(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.top.path().join(p)
    }

    fn config(&self) -> PathBuf {
        self.path("txnfs.toml")
    }

    fn state(&self) -> PathBuf {
        self.path("state")
    }

    /// Writes the configuration: one `[[exports]]` per (name, directory, clients).
    fn write_config(&self, exports: &[(&str, &str, &[&str])]) {
        let mut text = String::new();
        for (name, dir, clients) in exports {
            let clients: Vec<String> = clients.iter().map(|c| format!("{c:?}")).collect();
            text.push_str(&format!(
                "[[exports]]\nname = {name:?}\npath = {:?}\nclients = [{}]\n",
                self.path(dir),
                clients.join(", ")
            ));
        }
        std::fs::write(self.config(), text).unwrap();
    }

    /// `txnfs serve --config FILE` on this setup's port, its log piped.
    fn serve(&self) -> Child {
        let child = Command::new(bin())
            .args(["serve", "--no-rpcbind", "--no-grace", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(self.config())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(self.port);
        child
    }

    /// `txnfs reload` of this setup's server: (succeeded, stdout, stderr).
    fn reload(&self) -> (bool, String, String) {
        let out = Command::new(bin())
            .arg("reload")
            .arg("--state-dir")
            .arg(self.state())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn session(&self, owner: &[u8]) -> Session {
        let opts = Options {
            tag: b"reload",
            cred: auth_sys(b"reload-test", 0, 0),
            timeout: Some(Duration::from_secs(10)),
            fore: channel(64, 4),
            back: channel(16, 1),
        };
        Session::new(([127, 0, 0, 1], self.port).into(), owner, opts)
            .await
            .unwrap()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// SEQUENCE + `ops`: the reply (its status is the last op's).
async fn run(s: &mut Session, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    s.plain(ops).await.unwrap()
}

/// OPEN `export/file` for reading and writing: its stateid and file handle.
async fn open(s: &mut Session, export: &str, file: &str) -> (stateid4, Bytes) {
    let r = run(
        s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup(export),
            open_plain(file, OPEN4_SHARE_ACCESS_BOTH, b"owner"),
            nfs_argop4::OP_GETFH,
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    opened(&r).unwrap()
}

/// READ of `fh` with `sid`: the status and the data.
async fn read_fh(s: &mut Session, fh: &Bytes, sid: &stateid4) -> (nfsstat4, Bytes) {
    let r = run(s, vec![putfh(fh), read(sid, 0, 100)]).await;
    (
        r.status,
        read_results(&r).into_iter().next().unwrap_or_default(),
    )
}

/// The names READDIR of the pseudo root lists.
async fn root_names(s: &mut Session) -> Vec<String> {
    let r = run(
        s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_READDIR(READDIR4args {
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 1000,
                maxcount: 8000,
                attr_request: vec![],
            }),
        ],
    )
    .await;
    let Some(nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(rd))) = r.resarray.get(2) else {
        panic!("READDIR: {:?}", r.resarray)
    };
    rd.reply
        .entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

const LOCAL_RW: &[&str] = &["127.0.0.1(rw,no_root_squash)"];

#[test]
fn a_reload_adds_an_export_while_a_client_keeps_its_session_and_open_file() {
    let t = Setup::new();
    t.write_config(&[("/a", "a", LOCAL_RW)]);
    let mut server = t.serve();
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"holder").await;
        let (sid, fh) = open(&mut s, "a", "f").await;
        assert_eq!(read_fh(&mut s, &fh, &sid).await.1, &b"alpha"[..]);
        assert_eq!(root_names(&mut s).await, ["a"]);

        t.write_config(&[("/a", "a", LOCAL_RW), ("/b", "b", LOCAL_RW)]);
        let (ok, out, err) = t.reload();
        assert!(ok, "{out}{err}");
        assert_eq!(out, "export /b added\n1 export(s) unchanged\n");

        // The new export is served to a new client ...
        let mut other = t.session(b"newcomer").await;
        let (sid_b, fh_b) = open(&mut other, "b", "g").await;
        assert_eq!(
            read_fh(&mut other, &fh_b, &sid_b).await,
            (nfsstat4::NFS4_OK, Bytes::from_static(b"beta"))
        );
        // ... and the first client's session and open stateid work as before.
        assert_eq!(
            read_fh(&mut s, &fh, &sid).await,
            (nfsstat4::NFS4_OK, Bytes::from_static(b"alpha"))
        );
        let r = run(&mut s, vec![putfh(&fh), write(&sid, 5, b"!")]).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        assert_eq!(root_names(&mut s).await, ["a", "b"]);
    });
    assert_eq!(std::fs::read(t.path("a/f")).unwrap(), b"alpha!");
    let (status, log) = terminate(&mut server);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("INFO txnfs_server::reload: export /b added"),
        "{log}"
    );
}

#[test]
fn an_invalid_reload_changes_nothing() {
    let t = Setup::new();
    t.write_config(&[("/a", "a", LOCAL_RW)]);
    let mut server = t.serve();
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"holder").await;
        let (sid, fh) = open(&mut s, "a", "f").await;

        // A directory that does not exist.
        t.write_config(&[("/a", "a", LOCAL_RW), ("/m", "missing", LOCAL_RW)]);
        let (ok, out, err) = t.reload();
        assert!(!ok, "{out}");
        assert!(err.contains("reload refused"), "{err}");
        assert!(
            err.contains(&format!("cannot export {}", t.path("missing").display())),
            "{err}"
        );
        // A parse error, with its line.
        std::fs::write(t.config(), "[[exports]]\nname = \"/a\"\npath = \n").unwrap();
        let (ok, _, err) = t.reload();
        assert!(!ok);
        assert!(err.contains("TOML parse error at line 3"), "{err}");
        // Two exports of one directory.
        t.write_config(&[("/a", "a", LOCAL_RW), ("/a2", "a", LOCAL_RW)]);
        let (ok, _, err) = t.reload();
        assert!(!ok);
        assert!(err.contains("overlap: the same directory"), "{err}");

        // Exactly the old exports, the old session and open file.
        assert_eq!(root_names(&mut s).await, ["a"]);
        assert_eq!(
            read_fh(&mut s, &fh, &sid).await,
            (nfsstat4::NFS4_OK, Bytes::from_static(b"alpha"))
        );
        let r = run(&mut s, vec![nfs_argop4::OP_PUTROOTFH, lookup("m")]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    });
    let (_, log) = terminate(&mut server);
    assert!(
        log.contains("reload refused, the running configuration stays"),
        "{log}"
    );
    assert!(!log.contains("added"), "{log}");
}

#[test]
fn sighup_reloads() {
    let t = Setup::new();
    t.write_config(&[("/a", "a", LOCAL_RW)]);
    let mut server = t.serve();
    t.write_config(&[("/a", "a", LOCAL_RW), ("/b", "b", LOCAL_RW)]);
    let st = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"hup").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while root_names(&mut s).await != ["a", "b"] {
            assert!(Instant::now() < deadline, "SIGHUP did not add /b");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (sid, fh) = open(&mut s, "b", "g").await;
        assert_eq!(read_fh(&mut s, &fh, &sid).await.1, &b"beta"[..]);
    });
    let (status, log) = terminate(&mut server);
    assert!(status.success(), "{log}");
    assert!(log.contains("SIGHUP: reloading the configuration"), "{log}");
    assert!(log.contains("export /b added"), "{log}");
}

#[test]
fn a_rule_change_takes_effect_at_the_next_request() {
    let t = Setup::new();
    t.write_config(&[("/a", "a", LOCAL_RW)]);
    let mut server = t.serve();
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"writer").await;
        let (sid, fh) = open(&mut s, "a", "f").await;
        let r = run(&mut s, vec![putfh(&fh), write(&sid, 0, b"A")]).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK);

        t.write_config(&[("/a", "a", &["127.0.0.1(ro,no_root_squash)"])]);
        let (ok, out, err) = t.reload();
        assert!(ok, "{out}{err}");
        assert_eq!(
            out,
            "export /a rules changed: 127.0.0.1(rw,no_root_squash) -> \
             127.0.0.1(ro,no_root_squash)\n0 export(s) unchanged\n"
        );
        let r = run(&mut s, vec![putfh(&fh), write(&sid, 0, b"B")]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_ROFS, "{:?}", r.resarray);
        // Reads go on with the same stateid.
        assert_eq!(
            read_fh(&mut s, &fh, &sid).await,
            (nfsstat4::NFS4_OK, Bytes::from_static(b"Alpha"))
        );
    });
    assert_eq!(std::fs::read(t.path("a/f")).unwrap(), b"Alpha");
    terminate(&mut server);
}

#[test]
fn a_removed_export_answers_stale() {
    let t = Setup::new();
    t.write_config(&[("/a", "a", LOCAL_RW), ("/b", "b", LOCAL_RW)]);
    let mut server = t.serve();
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"remover").await;
        let (sid_a, fh_a) = open(&mut s, "a", "f").await;
        let (sid_b, fh_b) = open(&mut s, "b", "g").await;
        let v3 = V3Client::connect(([127, 0, 0, 1], t.port).into(), auth_sys(b"v3", 0, 0))
            .await
            .unwrap();
        let root3 = v3.root("/b").await;

        t.write_config(&[("/a", "a", LOCAL_RW)]);
        let (ok, out, err) = t.reload();
        assert!(ok, "{out}{err}");
        assert_eq!(out, "export /b removed\n1 export(s) unchanged\n");

        let r = run(&mut s, vec![putfh(&fh_b), read(&sid_b, 0, 10)]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_STALE, "{:?}", r.resarray);
        assert_eq!(r.resarray.len(), 2, "SEQUENCE, then PUTFH fails");
        assert_eq!(root_names(&mut s).await, ["a"]);
        let r = run(&mut s, vec![nfs_argop4::OP_PUTROOTFH, lookup("b")]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
        // NFSv3: the handle MOUNT gave is stale, and MOUNT no longer knows the path.
        let r: GETATTR3res = v3
            .nfs(proc3::GETATTR, &GETATTR3args { object: root3 })
            .await
            .unwrap();
        assert!(
            matches!(r, GETATTR3res::default(nfsstat3::NFS3ERR_STALE)),
            "{r:?}"
        );
        let r = v3.mnt("/b").await.unwrap();
        assert!(!matches!(r, mountres3::MNT3_OK(_)), "{r:?}");
        // The export that stayed is untouched.
        assert_eq!(read_fh(&mut s, &fh_a, &sid_a).await.1, &b"alpha"[..]);
    });
    terminate(&mut server);
}

#[test]
fn settings_a_reload_does_not_apply_are_named() {
    let t = Setup::new();
    let other_port = free_port();
    let write = |listen: u16, head: &str| {
        let text = format!(
            "listen = \"127.0.0.1:{listen}\"\n{head}[[exports]]\nname = \"/a\"\npath = {:?}\n",
            t.path("a")
        );
        std::fs::write(t.config(), text).unwrap();
    };
    write(t.port, "lease_time = 60\n");
    // The listen address comes from the file only (a flag would win over it).
    let child = Command::new(bin())
        .args(["serve", "--no-rpcbind", "--no-grace", "--state-dir"])
        .arg(t.state())
        .arg("--config")
        .arg(t.config())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = child;
    wait_listening(t.port);

    write(other_port, "lease_time = 30\nmax_connections = 100\n");
    let (ok, out, err) = t.reload();
    assert!(ok, "{out}{err}");
    assert_eq!(
        out,
        "listen changed: takes effect after a restart\n\
         lease_time changed: takes effect after a restart\n\
         max_connections changed: takes effect after a restart\n\
         1 export(s) unchanged; nothing to apply\n"
    );
    // Still served where it was, not on the new address.
    assert!(std::net::TcpStream::connect(("127.0.0.1", other_port)).is_err());
    let rt = runtime();
    rt.block_on(async {
        let mut s = t.session(b"settings").await;
        assert_eq!(root_names(&mut s).await, ["a"]);
    });
    // Back to the running values: nothing is named.
    write(t.port, "lease_time = 60\n");
    let (ok, out, _) = t.reload();
    assert!(ok);
    assert_eq!(out, "1 export(s) unchanged; nothing to apply\n");
    let (status, log) = terminate(&mut server);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("WARN txnfs_server::reload: listen changed: takes effect after a restart"),
        "{log}"
    );
}

/// `txnfs serve --check ARGS`: (succeeded, stdout, stderr).
fn check(args: &[&str], config: &Path) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(["serve", "--check", "--config"])
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_validates_without_serving() {
    let t = Setup::new();
    // The port is taken and the state directory absent: --check needs neither.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let state = t.state();
    let args = ["--listen", &listen, "--state-dir", state.to_str().unwrap()];
    t.write_config(&[("/a", "a", LOCAL_RW), ("/b", "b", &["10.0.0.0/8(ro)"])]);
    let (ok, out, err) = check(&args, &t.config());
    assert!(ok, "{err}");
    assert!(out.starts_with("configuration OK"), "{out}");
    assert!(out.contains("2 export(s)"), "{out}");
    assert!(
        out.contains("/b = ") && out.contains("for 10.0.0.0/8(ro,root_squash)"),
        "{out}"
    );
    assert!(!state.exists(), "--check made the state directory");

    t.write_config(&[("/a", "a", LOCAL_RW), ("/m", "missing", LOCAL_RW)]);
    let (ok, out, err) = check(&args, &t.config());
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains(&format!("cannot export {}", t.path("missing").display())),
        "{err}"
    );

    std::fs::write(t.config(), "[[exports]]\nname = \"/a\"\npath = \n").unwrap();
    let (ok, _, err) = check(&args, &t.config());
    assert!(!ok);
    assert!(err.contains("TOML parse error at line 3"), "{err}");

    t.write_config(&[("/a", "a", LOCAL_RW), ("/a/inner", "b", LOCAL_RW)]);
    let (ok, _, err) = check(&args, &t.config());
    assert!(!ok);
    assert!(err.contains("lies inside export"), "{err}");
    assert!(!state.exists());
}
