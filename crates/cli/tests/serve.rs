//! `txnfs serve` as an administrator meets it: help, clear errors, clean shutdown.

mod common;

use common::{bin, free_port, serve_help, spawn_serve, terminate, wait_listening};
use std::process::Command;

#[test]
fn help_explains_the_common_cases() {
    let out = serve_help();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--listen",
        "--export",
        "--config",
        "--no-grace",
        "EXAMPLES",
        "mount -t nfs",
    ] {
        assert!(text.contains(needle), "help lacks {needle:?}:\n{text}");
    }
}

#[test]
fn clear_errors_for_bad_configuration() {
    let state = std::env::temp_dir().join(format!("txnfs-overlap-{}", std::process::id()));
    let state = state.to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["serve", "/definitely/not/here"],
            "cannot export /definitely/not/here",
        ),
        (&["serve", "--export", "nopath"], "--export wants NAME=PATH"),
        (&["serve"], "nothing to export"),
        (
            &["serve", "--config", "/nope.toml", "/tmp"],
            "cannot read config file /nope.toml",
        ),
        (
            &[
                "serve",
                "--state-dir",
                state,
                "--no-rpcbind",
                "--listen",
                "127.0.0.1:0",
                "--export",
                "/a=/tmp",
                "--export",
                "/b=/tmp",
            ],
            "exports \"/a\" (/tmp) and \"/b\" (/tmp) overlap: the same directory",
        ),
        (
            &[
                "serve",
                "--state-dir",
                state,
                "--no-rpcbind",
                "--listen",
                "127.0.0.1:0",
                "--export",
                "/a=/tmp",
                "--export",
                "/b=/tmp/..",
            ],
            "one directory is inside the other",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(want),
            "{args:?}: stderr {err:?} lacks {want:?}"
        );
    }
    let _ = std::fs::remove_dir_all(state);
}

/// The client options belong to the file commands: `serve` does not list them and
/// refuses them before or after its name, saying whose they are.
#[test]
fn client_options_are_not_serve_options() {
    let out = serve_help();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--uid", "--gid", "--stats", "--vers"] {
        assert!(!text.contains(flag), "serve --help lists {flag}:\n{text}");
    }
    let out = Command::new(bin())
        .args(["--stats", "serve", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--stats is an option of the file commands"),
        "{err}"
    );
    let out = Command::new(bin())
        .args(["serve", "--uid", "7", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = spawn_serve(dir.path(), port, &[], true);
    wait_listening(port);
    let (exit, log) = terminate(&mut child);
    assert!(exit.success(), "exit status {exit:?}");
    assert!(log.contains("shutting down"), "{log}");
    // the state directory holds the handle secret for the next start
    assert!(dir.path().join("state/handle-secret").is_file());
}

/// SIGHUP does not stop the server (by default the signal would end it without a
/// clean stop): it reloads the configuration (ADR 0048; here nothing changed, see
/// `tests/reload.rs` for changes); SIGTERM afterwards still stops it.
#[test]
fn sighup_reloads_and_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = spawn_serve(dir.path(), port, &[], true);
    wait_listening(port);
    let st = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server ended on SIGHUP"
    );
    wait_listening(port);
    // Still serving: a file command gets its answer.
    let ls = Command::new(bin())
        .args(["ls", &format!("nfs://127.0.0.1:{port}/")])
        .output()
        .unwrap();
    assert!(ls.status.success(), "ls after SIGHUP: {ls:?}");
    let (exit, log) = terminate(&mut child);
    assert!(exit.success(), "exit status {exit:?}");
    assert!(log.contains("SIGHUP: reloading the configuration"), "{log}");
    assert!(log.contains("reload: no export changed"), "{log}");
}

/// One server per state directory: a second `serve` on it exits at once with an error
/// naming the PID of the first; after `kill -9` of the first the lock is free again.
#[test]
fn a_second_server_on_one_state_directory_fails_and_kill_9_frees_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut first = spawn_serve(dir.path(), port, &[], false);
    wait_listening(port);
    let second = Command::new(bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-grace",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .arg(dir.path().join("export"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    let alive = first.try_wait().unwrap().is_none();
    assert!(
        !second.status.success(),
        "the second server ran: {:?} {err}",
        second.status
    );
    assert!(
        err.contains(&format!("PID {}", first.id())),
        "the error names the first server's PID {}: {err}",
        first.id()
    );
    assert!(err.contains("is in use"), "{err}");
    assert!(alive, "the first server still runs");
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let port3 = free_port();
    let mut third = spawn_serve(dir.path(), port3, &[], false);
    wait_listening(port3);
    assert!(third.try_wait().unwrap().is_none(), "the third server runs");
    third.kill().unwrap();
    third.wait().unwrap();
}

/// `txnfs serve DIR` with its stderr in a file (as under systemd or `2>log`), state in
/// `dir/state`, extra `flags`.
fn spawn_logging(
    dir: &std::path::Path,
    port: u16,
    flags: &[&str],
    log: &str,
) -> std::process::Child {
    spawn_logging_at(dir, port, flags, log, None)
}

/// [`spawn_logging`] with `TXNFS_LOG` set to `level` (unset for `None`).
fn spawn_logging_at(
    dir: &std::path::Path,
    port: u16,
    flags: &[&str],
    log: &str,
    level: Option<&str>,
) -> std::process::Child {
    std::fs::create_dir_all(dir.join("export")).unwrap();
    let file = std::fs::File::create(dir.join(log)).unwrap();
    let mut cmd = Command::new(bin());
    if let Some(l) = level {
        cmd.env("TXNFS_LOG", l);
    }
    cmd.arg("serve")
        .args(flags)
        .args([
            "--no-rpcbind",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--state-dir",
        ])
        .arg(dir.join("state"))
        .arg(dir.join("export"))
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap()
}

/// An administrator's log: no colour codes in a file, ONE start-up summary naming the
/// export's path, layers, transactions, the state directory and grace; clients that
/// come and go leave no line at the default level; and a clean restart with persistent
/// sessions warns of nothing.
#[test]
fn the_log_is_an_administrators_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = spawn_logging(dir.path(), port, &["--persistent-sessions"], "first.log");
    wait_listening(port);
    let url = format!("nfs://127.0.0.1:{port}");
    for args in [
        vec!["ls".to_string(), format!("{url}/")],
        vec!["mkdir".to_string(), format!("{url}/d")],
        vec![
            "cp".to_string(),
            "/etc/hostname".to_string(),
            format!("{url}/d/h"),
        ],
        vec!["cat".to_string(), format!("{url}/d/h")],
    ] {
        let out = Command::new(bin()).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let (exit, _) = terminate(&mut server);
    assert!(exit.success());
    let first = std::fs::read(dir.path().join("first.log")).unwrap();
    assert!(
        !first.contains(&0x1b),
        "ESC in a log file:\n{}",
        String::from_utf8_lossy(&first)
    );
    let first = String::from_utf8(first).unwrap();
    let summaries: Vec<&str> = first
        .lines()
        .filter(|l| l.contains("serving NFSv3 (with MOUNT), NFSv4.0, NFSv4.1 and NFSv4.2"))
        .collect();
    assert_eq!(summaries.len(), 1, "{first}");
    let export = std::fs::canonicalize(dir.path().join("export")).unwrap();
    let state = std::fs::canonicalize(dir.path().join("state")).unwrap();
    for want in [
        format!("on 127.0.0.1:{port}"),
        format!("state directory {}", state.display()),
        "grace on".to_string(),
        format!(
            "/ = {} (layers txn,local; read-write; transactions)",
            export.display()
        ),
        "delegations on".to_string(),
        "persistent sessions on".to_string(),
        "rpcbind off (--no-rpcbind)".to_string(),
        concat!("txnfs ", env!("CARGO_PKG_VERSION")).to_string(),
    ] {
        assert!(
            summaries[0].contains(&want),
            "summary lacks {want:?}: {}",
            summaries[0]
        );
    }
    assert!(!first.contains("Destroyed"), "{first}");
    assert!(!first.contains("released client state"), "{first}");
    // Only the summary before the first client: no second line about the listener.
    let before_stop: Vec<&str> = first
        .lines()
        .take_while(|l| !l.contains("shutting down"))
        .collect();
    assert_eq!(before_stop.len(), 1, "{first}");

    // A clean restart: nothing to warn about, and nothing of the clients that said
    // goodbye left in the session store (the stop made their goodbyes durable).
    let mut server = spawn_logging_at(
        dir.path(),
        port,
        &["--persistent-sessions"],
        "second.log",
        Some("debug"),
    );
    wait_listening(port);
    let (exit, _) = terminate(&mut server);
    assert!(exit.success());
    let second = std::fs::read_to_string(dir.path().join("second.log")).unwrap();
    assert!(!second.contains("WARN"), "{second}");
    assert!(!second.contains("not restored"), "{second}");
    assert!(!second.contains("left before the restart"), "{second}");
    assert!(!second.contains("restored persistent sessions"), "{second}");

    // At DEBUG: the peer of each connection, the goodbyes, session ids in hex.
    let mut server = spawn_logging_at(dir.path(), port, &[], "debug.log", Some("debug"));
    wait_listening(port);
    let out = Command::new(bin())
        .args(["ls", &format!("{url}/")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (exit, _) = terminate(&mut server);
    assert!(exit.success());
    let debug = std::fs::read_to_string(dir.path().join("debug.log")).unwrap();
    assert!(
        debug
            .lines()
            .any(|l| l.contains("accepted connection") && l.contains("peer=127.0.0.1:")),
        "{debug}"
    );
    assert!(
        debug.contains("released client state: Destroyed"),
        "{debug}"
    );
    let hex_session = debug
        .lines()
        .filter_map(|l| l.split("session=").nth(1))
        .any(|rest| {
            let id: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit())
        });
    assert!(hex_session, "no session id in hex:\n{debug}");
}
