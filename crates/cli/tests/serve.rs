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
    let port = free_port();
    let mut child = spawn_serve(dir.path(), port, &[], true);
    wait_listening(port);
    let (exit, log) = terminate(&mut child);
    assert!(exit.success(), "exit status {exit:?}");
    assert!(log.contains("shutting down"), "{log}");
    // the state directory holds the handle secret for the next start
    assert!(dir.path().join("state/handle-secret").is_file());
}
