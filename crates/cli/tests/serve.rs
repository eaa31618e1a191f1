//! `txnfs serve` as an administrator meets it: help, clear errors, clean shutdown.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_txnfs")
}

#[test]
fn help_explains_the_common_cases() {
    let out = Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
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
    let cases: [(&[&str], &str); 4] = [
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
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("export")).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(bin())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-grace",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .arg(dir.path().join("export"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "server ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "exit status {exit:?}");
    let mut log = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("shutting down"), "{log}");
    // the state directory holds the handle secret for the next start
    assert!(dir.path().join("state/handle-secret").is_file());
}
