//! A server that goes away in the middle of a tree command: the command ends with ONE
//! line naming the server and why ("txnfs cp: connection to HOST:PORT lost after N of M
//! files: Connection refused"), not one line per file it could not send.
//!
//! The server is killed at a chosen point: the command talks to it through a relay
//! that, after a number of bytes from the client, kills the server with SIGKILL, cuts
//! the connections and stops listening, so the client's reconnects are refused.

mod common;

use common::{bin, free_port, spawn_serve, wait_listening};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Relay 127.0.0.1:<returned port> to `server_port` until `cut_after` bytes came from
/// clients; then kill `server`, cut every connection and stop listening.
fn relay_that_kills(server_port: u16, server: Child, cut_after: usize) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let server = Arc::new(Mutex::new(server));
    let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let cut2 = cut.clone();
    std::thread::spawn(move || {
        while !cut2.load(Ordering::SeqCst) {
            let client = match listener.accept() {
                Ok((c, _)) => c,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
            };
            client.set_nonblocking(false).unwrap();
            let upstream = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
            streams.lock().unwrap().push(client.try_clone().unwrap());
            streams.lock().unwrap().push(upstream.try_clone().unwrap());
            // server -> client
            let (mut from, mut to) = (upstream.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Both);
            });
            // client -> server, counting
            let (mut from, mut to) = (client, upstream);
            let (cut, sent, server, streams) =
                (cut2.clone(), sent.clone(), server.clone(), streams.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 << 10];
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if sent.fetch_add(n, Ordering::SeqCst) + n >= cut_after {
                        let mut s = server.lock().unwrap();
                        let _ = s.kill();
                        let _ = s.wait();
                        cut.store(true, Ordering::SeqCst);
                        for st in streams.lock().unwrap().iter() {
                            let _ = st.shutdown(Shutdown::Both);
                        }
                        break;
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
        // The listener is dropped here: reconnects are refused.
    });
    (port, cut)
}

fn run(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(bin())
        .args(args)
        .env("TXNFS_PROGRESS", "0")
        .output()
        .unwrap();
    (out, start.elapsed())
}

/// Exactly one line on stderr, the summary of the lost connection.
fn assert_one_summary(out: &Output, took: Duration, command: &str, relay: u16) {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(out.status.code(), Some(1), "{command}: {err}");
    assert_eq!(lines.len(), 1, "{command}: one line expected:\n{err}");
    let want = format!("txnfs {command}: connection to 127.0.0.1:{relay} lost");
    assert!(
        lines[0].starts_with(&want),
        "{command}: {:?} lacks {want:?}",
        lines[0]
    );
    assert!(lines[0].ends_with(": Connection refused"), "{:?}", lines[0]);
    eprintln!("{command}: {took:?}: {}", lines[0]);
    assert!(took < Duration::from_secs(30), "{command} took {took:?}");
}

/// 20 directories of 100 small files.
fn make_tree(root: &std::path::Path) {
    for d in 0..20 {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}")), format!("{d}/{f}\n")).unwrap();
        }
    }
}

#[test]
fn cp_r_into_a_killed_server_prints_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let port = free_port();
    let server = spawn_serve(dir.path(), port, &["--no-rpcbind"], false);
    wait_listening(port);
    // Past the session set-up and the directories, inside the files' COMPOUNDs.
    let (relay, cut) = relay_that_kills(port, server, 40 << 10);
    let (out, took) = run(&[
        "cp",
        "-R",
        src.to_str().unwrap(),
        &format!("nfs://127.0.0.1:{relay}/t"),
    ]);
    assert!(
        cut.load(Ordering::SeqCst),
        "the server was not killed mid-run"
    );
    assert_one_summary(&out, took, "cp", relay);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(" of 2000 files: "), "{err}");
}

#[test]
fn rm_r_ls_r_and_cp_r_from_a_killed_server_print_one_line() {
    for (command, cut_after) in [("ls", 3 << 10), ("rm", 3 << 10), ("cp", 3 << 10)] {
        let dir = tempfile::tempdir().unwrap();
        make_tree(&dir.path().join("export/t"));
        let port = free_port();
        let server = spawn_serve(dir.path(), port, &["--no-rpcbind"], false);
        wait_listening(port);
        let (relay, cut) = relay_that_kills(port, server, cut_after);
        let url = format!("nfs://127.0.0.1:{relay}/t");
        let local = dir.path().join("copy");
        let local = local.to_str().unwrap();
        let args: Vec<&str> = match command {
            "ls" => vec!["ls", "-lR", &url],
            "cp" => vec!["cp", "-R", &url, local],
            _ => vec!["rm", "-r", &url],
        };
        let (out, took) = run(&args);
        assert!(
            cut.load(Ordering::SeqCst),
            "{command}: the server was not killed"
        );
        assert_one_summary(&out, took, command, relay);
    }
}
