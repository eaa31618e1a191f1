//! `txnfs cat` and `txnfs cp` follow symbolic links as coreutils do: a link operand is
//! read through its target (relative or absolute, links in the middle of the path
//! too), a loop is ELOOP's message, and `cp -P` / `cp -R` copy links as links.

mod common;

use common::{bin, free_port, spawn_serve, wait_listening};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Child, Command, Output};

/// A server of a fresh export holding `d/f` ("target bytes\n") and links to it; killed
/// by PID on drop.
struct Served {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Served {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let export = dir.path().join("export");
        std::fs::create_dir_all(export.join("d")).unwrap();
        std::fs::write(export.join("d/f"), b"target bytes\n").unwrap();
        symlink("d/f", export.join("rel")).unwrap();
        symlink("/d/f", export.join("abs")).unwrap();
        symlink("d", export.join("dirlink")).unwrap();
        symlink("../rel", export.join("d/chain")).unwrap();
        symlink("loop-b", export.join("loop-a")).unwrap();
        symlink("loop-a", export.join("loop-b")).unwrap();
        let child = spawn_serve(dir.path(), port, &["--no-rpcbind"], false);
        wait_listening(port);
        Served { child, port, dir }
    }

    fn url(&self, rel: &str) -> String {
        format!("nfs://127.0.0.1:{}/{rel}", self.port)
    }

    fn local(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn txnfs(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("TXNFS_PROGRESS", "0")
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> Output {
    let out = txnfs(args);
    assert!(
        out.status.success(),
        "txnfs {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn is_link_to(p: &Path, target: &str) -> bool {
    std::fs::symlink_metadata(p)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
        && std::fs::read_link(p)
            .map(|t| t == Path::new(target))
            .unwrap_or(false)
}

#[test]
fn cat_reads_links_through_their_targets() {
    let s = Served::start();
    for link in ["rel", "abs", "dirlink/f", "d/chain"] {
        let out = ok(&["cat", &s.url(link)]);
        assert_eq!(out.stdout, b"target bytes\n", "cat {link}");
    }
    let out = txnfs(&["cat", &s.url("loop-a")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loop-a' for reading: Too many levels of symbolic links"),
        "{err}"
    );
}

#[test]
fn cp_follows_links_and_cp_p_keeps_them() {
    let s = Served::start();
    let out = s.local("out");
    std::fs::create_dir(&out).unwrap();
    let o = |n: &str| out.join(n).to_str().unwrap().to_string();
    // A link operand: the target's bytes, under the link's name.
    ok(&["cp", &s.url("rel"), &o("from-rel")]);
    ok(&["cp", &s.url("abs"), &o("from-abs")]);
    ok(&["cp", &s.url("dirlink/f"), &o("through-dir")]);
    for n in ["from-rel", "from-abs", "through-dir"] {
        let p = out.join(n);
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{n}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"target bytes\n", "{n}");
    }
    ok(&["cp", &s.url("rel"), &(o("") + "/")]);
    assert_eq!(std::fs::read(out.join("rel")).unwrap(), b"target bytes\n");
    // Remote to remote, and local links to the server.
    ok(&["cp", &s.url("abs"), &s.url("copy-of-abs")]);
    let export = s.local("export");
    assert_eq!(
        std::fs::read(export.join("copy-of-abs")).unwrap(),
        b"target bytes\n"
    );
    // -P, -R and -a copy the link itself.
    ok(&["cp", "-P", &s.url("rel"), &o("kept")]);
    assert!(is_link_to(&out.join("kept"), "d/f"));
    ok(&["cp", "-R", &s.url("dirlink"), &o("kept-dir")]);
    assert!(is_link_to(&out.join("kept-dir"), "d"));
    ok(&["cp", "-P", &s.url("abs"), &s.url("remote-kept")]);
    assert!(is_link_to(&export.join("remote-kept"), "/d/f"));
    symlink("d/f", out.join("local-link")).unwrap();
    ok(&["cp", "-a", &o("local-link"), &s.url("from-local-a")]);
    assert!(is_link_to(&export.join("from-local-a"), "d/f"));
    // A DEST through a link to a directory: into that directory, new name or not.
    ok(&["cp", &o("from-rel"), &s.url("dirlink/new")]);
    assert_eq!(
        std::fs::read(export.join("d/new")).unwrap(),
        b"target bytes\n"
    );
    ok(&["cp", &o("from-abs"), &s.url("dirlink")]);
    assert_eq!(
        std::fs::read(export.join("d/from-abs")).unwrap(),
        b"target bytes\n"
    );
    // A missing operand is still "No such file or directory".
    let r = txnfs(&["cat", &s.url("dirlink/none")]);
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("No such file or directory"),
        "{r:?}"
    );
    // A loop is an error naming the operand.
    let r = txnfs(&["cp", &s.url("loop-b"), &o("never")]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("Too many levels of symbolic links"), "{err}");
    assert!(!out.join("never").exists());
}
