//! Every example in every `--help` of `txnfs` runs as written: the file commands'
//! against a server that holds the files they name, and `txnfs serve`'s with the
//! directories and the configuration file they name.
//!
//! What the test changes in an example, and only that: the host (`server`,
//! `server:2050`, `127.0.0.1:2050`, `127.0.0.1`) becomes the test server, absolute
//! local paths (`/tmp/`, `/srv/data`, `/etc/txnfs.toml` ...) become directories of a
//! scratch directory, and a server's address becomes 127.0.0.1 with a free port (a
//! shell's single quotes around a word of a `txnfs serve` example are removed, as
//! the shell would). Each
//! example starts from the same files (examples are alternatives, not a sequence),
//! and runs under `sh -c` in a scratch working directory with `txnfs` on the PATH, so
//! that a redirection (`> both.txt`) works as in a shell.

mod common;

use common::{bin, free_port, wait_listening};
use std::path::Path;
use std::process::{Command, Stdio};

/// The help text of `txnfs ARGS --help`.
fn help(args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "txnfs {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The example commands of a help text: the lines starting with `txnfs ` after
/// "EXAMPLES:" (blank lines between them allowed) up to the first other text, each
/// without its trailing description (after two or more spaces).
fn examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("EXAMPLES:"))
        .skip(1)
        .map(str::trim)
        .take_while(|l| l.is_empty() || l.starts_with("txnfs "))
        .filter(|l| !l.is_empty())
        .map(|l| l.split("  ").next().unwrap_or(l).trim().to_string())
        .collect()
}

/// The lines of the help's sample configuration file (after "CONFIG FILE", up to
/// the first blank line), unindented.
fn config_sample(help: &str) -> String {
    help.lines()
        .skip_while(|l| !l.starts_with("CONFIG FILE"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect()
}

/// The lines of the help's sample exports file (after "EXPORTS FILE", up to the first
/// blank line), unindented.
fn exports_sample(help: &str) -> String {
    help.lines()
        .skip_while(|l| !l.starts_with("EXPORTS FILE"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{}\n", l.trim()))
        .collect()
}

/// The files the file commands' examples name, on the server and in the working
/// directory, laid out afresh.
fn lay_out(export: &Path, cwd: &Path) {
    // The contents only: the export's root handle must stay valid.
    for dir in [export, cwd] {
        std::fs::create_dir_all(dir).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
    for d in [
        "data/tree/sub",
        "a",
        "b",
        "dir",
        "etc",
        "logs",
        "links",
        "backup",
        "www",
        "photos",
    ] {
        std::fs::create_dir_all(export.join(d)).unwrap();
    }
    for f in [
        "data/file.txt",
        "data/a.txt",
        "data/old.txt",
        "data/a",
        "data/tree/sub/f",
        "etc/motd",
        "logs/a",
        "logs/b",
        "notes.txt",
        "a.txt",
        "x",
        "y",
        "photos/a.jpg",
    ] {
        std::fs::write(export.join(f), format!("{f}\n")).unwrap();
    }
    std::os::unix::fs::symlink("a.txt", export.join("data/latest")).unwrap();
    for d in ["project/src", "tree/d", "site/css", "photos", "tmp"] {
        std::fs::create_dir_all(cwd.join(d)).unwrap();
    }
    for f in [
        "photo.jpg",
        "project/README",
        "project/src/main.rs",
        "tree/f",
        "tree/d/g",
        "site/index.html",
        "site/css/a.css",
        "photos/a.jpg",
    ] {
        std::fs::write(cwd.join(f), format!("{f}\n")).unwrap();
    }
}

/// An example with the host made the test server's and `/tmp/` the scratch one.
fn localize(example: &str, port: u16, cwd: &Path) -> String {
    let url = format!("nfs://127.0.0.1:{port}/");
    let mut s = example.to_string();
    for host in ["server:2050", "server", "127.0.0.1:2050", "127.0.0.1"] {
        s = s.replace(&format!("nfs://{host}/"), &url);
    }
    s.replace(" /tmp/", &format!(" {}/tmp/", cwd.display()))
}

/// A server of `export` on `port`, killed on drop.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(export: &Path, state: &Path, port: u16) -> Server {
    std::fs::create_dir_all(export).unwrap();
    let child = Command::new(bin())
        .args(["serve", "--no-rpcbind", "--no-grace", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(state)
        .arg(export)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port);
    Server(child)
}

/// Waits (up to 10 s) for the control socket of the server of `state`: the server
/// listens for NFS before it opens that socket, so `wait_listening` alone left
/// `txnfs reload` and `txnfs stats` a moment in which no server answered there.
fn wait_control_socket(state: &Path) {
    let sock = state.join("control.sock");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sock.exists() {
        assert!(
            std::time::Instant::now() < until,
            "no {} after 10 s",
            sock.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `sh -c EXAMPLE` in `cwd` with this `txnfs` first on the PATH.
fn shell(example: &str, cwd: &Path, path_dir: &Path) -> std::process::Output {
    let path = format!(
        "{}:{}",
        path_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", example])
        .current_dir(cwd)
        .env("PATH", path)
        .env("TXNFS_PROGRESS", "0")
        .output()
        .unwrap()
}

#[test]
fn every_file_command_example_runs_as_written() {
    let scratch = tempfile::tempdir().unwrap();
    let path_dir = scratch.path().join("bin");
    std::fs::create_dir_all(&path_dir).unwrap();
    std::os::unix::fs::symlink(bin(), path_dir.join("txnfs")).unwrap();
    let export = scratch.path().join("export");
    let cwd = scratch.path().join("cwd");
    let port = free_port();
    let _server = serve(&export, &scratch.path().join("state"), port);
    let mut ran = 0;
    let mut failed = Vec::new();
    for cmd in [
        vec![],
        vec!["ls"],
        vec!["stat"],
        vec!["cat"],
        vec!["cp"],
        vec!["mkdir"],
        vec!["rm"],
        vec!["mv"],
        vec!["ln"],
    ] {
        let text = help(&cmd);
        let ex = examples(&text);
        assert!(
            !ex.is_empty(),
            "txnfs {cmd:?} --help has no examples:\n{text}"
        );
        for e in ex.iter().filter(|e| !e.starts_with("txnfs serve")) {
            lay_out(&export, &cwd);
            let run = localize(e, port, &cwd);
            let out = shell(&run, &cwd, &path_dir);
            ran += 1;
            if !out.status.success() {
                failed.push(format!(
                    "txnfs {cmd:?} --help: {e:?} (run as {run:?}): {:?}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ran} examples failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    assert!(ran >= 30, "only {ran} examples found");
}

#[test]
fn every_serve_example_starts_a_server() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    let text = help(&["serve"]);
    let mut ex = examples(&text);
    ex.extend(
        examples(&help(&[]))
            .into_iter()
            .filter(|e| e.starts_with("txnfs serve")),
    );
    assert!(ex.len() >= 5, "{ex:?}");
    // The places the examples name, under the scratch directory.
    let local = |p: &str| root.join(p.trim_start_matches('/'));
    for d in ["srv/data", "home", "mnt/scratch"] {
        std::fs::create_dir_all(local(d)).unwrap();
    }
    let config = config_sample(&text)
        .replace("\"/srv/data\"", &format!("{:?}", local("/srv/data")))
        .replace(
            "\"/var/lib/txnfs\"",
            &format!("{:?}", local("/var/lib/txnfs")),
        );
    assert!(config.contains("[[exports]]"), "{config}");
    std::fs::create_dir_all(local("etc")).unwrap();
    std::fs::write(local("/etc/txnfs.toml"), &config).unwrap();
    let exports =
        exports_sample(&text).replace("/srv/data ", &format!("{} ", local("/srv/data").display()));
    assert!(exports.contains("(rw"), "{exports}");
    std::fs::write(local("/etc/txnfs.exports"), &exports).unwrap();
    for e in &ex {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args: Vec<String> = Vec::new();
        let mut words = e.split_whitespace().skip(1); // txnfs
        let mut has_listen = false;
        while let Some(w) = words.next() {
            let w = w.trim_matches('\'');
            if w == "--listen" {
                words.next();
                has_listen = true;
                args.extend(["--listen".to_string(), listen.clone()]);
            } else if let Some((name, path)) = w.split_once('=').filter(|(_, p)| p.starts_with('/'))
            {
                // --export NAME=PATH: the name is the clients' view, kept.
                args.push(format!("{name}={}", local(path).display()));
            } else if w.starts_with('/') {
                args.push(local(w).display().to_string());
            } else {
                args.push(w.to_string());
            }
        }
        if !has_listen {
            args.extend(["--listen".to_string(), listen]);
        }
        let state = root.join(format!("state-{port}"));
        args.extend([
            "--no-rpcbind".to_string(),
            "--no-grace".to_string(),
            "--state-dir".to_string(),
        ]);
        args.push(state.display().to_string());
        if args.iter().any(|a| a == "--check") {
            // Checks and exits: binds nothing, leaves the state directory alone.
            let out = Command::new(bin()).args(&args).output().unwrap();
            assert!(
                out.status.success(),
                "{e:?} (run as txnfs {args:?}): {out:?}"
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.starts_with("configuration OK"), "{e:?}: {text}");
            assert!(!state.exists(), "{e:?} made its state directory");
            continue;
        }
        let mut child = Command::new(bin())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut s, &mut err);
                }
                panic!("{e:?} (run as txnfs {args:?}) ended: {st:?}\n{err}");
            }
            assert!(std::time::Instant::now() < deadline, "{e:?} did not listen");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let (status, log) = common::terminate(&mut child);
        assert!(status.success(), "{e:?}: {status:?}\n{log}");
    }
}

#[test]
fn every_stats_example_reads_a_running_server() {
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let port = free_port();
    let _server = serve(&scratch.path().join("export"), &state, port);
    wait_control_socket(&state);
    let ex = examples(&help(&["stats"]));
    assert!(ex.len() >= 3, "{ex:?}");
    for e in &ex {
        // The state directory an example names (or the default) becomes the test
        // server's.
        let mut args: Vec<String> = Vec::new();
        let mut words = e.split_whitespace().skip(1);
        while let Some(w) = words.next() {
            if w == "--state-dir" {
                words.next();
            } else {
                args.push(w.to_string());
            }
        }
        let out = Command::new(bin())
            .args(&args)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        assert!(out.status.success(), "{e:?}: {out:?}");
        assert!(!out.stdout.is_empty(), "{e:?} printed nothing");
    }
}

#[test]
fn every_reload_example_reloads_a_running_server() {
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let port = free_port();
    let _server = serve(&scratch.path().join("export"), &state, port);
    wait_control_socket(&state);
    let ex = examples(&help(&["reload"]));
    assert!(ex.len() >= 2, "{ex:?}");
    for e in &ex {
        // As for stats: the state directory becomes the test server's.
        let mut args: Vec<String> = Vec::new();
        let mut words = e.split_whitespace().skip(1);
        while let Some(w) = words.next() {
            if w == "--state-dir" {
                words.next();
            } else {
                args.push(w.to_string());
            }
        }
        let out = Command::new(bin())
            .args(&args)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        assert!(out.status.success(), "{e:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("1 export(s) unchanged; nothing to apply"),
            "{e:?}: {text}"
        );
    }
}
