//! Exactly once across a crash, from our client (ADR 0022): `txnfs serve` (a real
//! process on a local export) dies right after committing a transaction and before
//! answering it (`TXNFS_TXN_FAULT=after-commit`), and is started again on the same port
//! and state directory. The client, still waiting for its reply, reconnects and sends
//! the same request again:
//! - with `--persistent-sessions` (the client asks for PERSIST and gets it) the restored
//!   session answers from the reply it stored with the commit: the transaction succeeds
//!   and was run once (a second run would fail: its `mkdir` finds the directory);
//! - without, the server no longer knows the session: the client reports an unknown
//!   outcome instead of running the transaction again in a new session, and the
//!   transaction's effect is there exactly once.
//!
//! Needs the `txnfs` binary (`$TXNFS_BIN`, else `target/debug/txnfs`: `cargo build`
//! first; `scripts/test.sh` does) and root (the local backend's file handles).

use bytes::Bytes;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use txnfs_client::{Client, ClientConfig, ClientError, Fs};

fn txnfs_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TXNFS_BIN") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug").join("txnfs")
}

/// A `txnfs serve` child, killed by its PID when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(addr: SocketAddr, dir: &Path, persistent: bool, fault: Option<&str>) -> Serve {
    let bin = txnfs_bin();
    assert!(
        bin.exists(),
        "{} missing: build the workspace first",
        bin.display()
    );
    let mut cmd = Command::new(&bin);
    cmd.arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--no-grace", "--no-rpcbind", "--no-delegations"])
        .arg(dir.join("export"))
        .env_remove("TXNFS_TXN_FAULT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if persistent {
        cmd.arg("--persistent-sessions");
    }
    if let Some(f) = fault {
        cmd.env("TXNFS_TXN_FAULT", f);
    }
    let mut child = Serve(cmd.spawn().expect("spawn txnfs serve"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(st)) = child.0.try_wait() {
            panic!("txnfs serve exited before listening: {st}");
        }
        assert!(Instant::now() < deadline, "txnfs serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Waits for the fault point to end the server (it aborts).
async fn wait_dead(mut s: Serve) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(st)) = s.0.try_wait() {
            assert!(!st.success(), "the fault point aborts the server");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not reach its fault point"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_whose_reply_a_crash_lost_is_never_run_twice() {
    for persistent in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("export")).expect("export dir");
        let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let server = serve(addr, dir.path(), persistent, Some("after-commit"));

        let mut cfg = ClientConfig::new(addr);
        cfg.uid = 0;
        cfg.gid = 0;
        cfg.delegations = false;
        let client = Client::connect(cfg).await.expect("connect");
        assert_eq!(
            client.session_persistent(),
            persistent,
            "PERSIST asked for, and granted exactly when the server is configured to"
        );
        let data = Bytes::from_static(b"written once\n");
        let mut t = client.transaction();
        t.mkdir("d", 0o755);
        t.write_file("d/f", data.clone(), 0o644, true);
        let pending = tokio::spawn(async move { t.commit().await.map(|r| r.len()) });

        wait_dead(server).await;
        let _server = serve(addr, dir.path(), persistent, None);
        let outcome = tokio::time::timeout(Duration::from_secs(60), pending)
            .await
            .expect("the client gets an answer after the restart")
            .expect("transaction task");
        match (persistent, &outcome) {
            (true, Ok(2)) => {}
            (false, Err(ClientError::TxnOutcomeUnknown(e)))
                if matches!(**e, ClientError::SessionLost(_)) => {}
            _ => panic!("persistent={persistent}: unexpected outcome {outcome:?}"),
        }
        let stats = client.stats();
        assert_eq!(
            stats.session_recoveries,
            u64::from(!persistent),
            "a persistent session survives the restart; another one is re-created"
        );
        // Committed before the crash, and exactly once: the bytes are there.
        let fs = Fs::new(client);
        let got = fs.vread(&["d/f"]).await.pop().expect("one result");
        assert_eq!(
            got.expect("d/f reads back"),
            data,
            "persistent={persistent}"
        );
        let again = fs
            .vmkdir(&["d"], 0o755, false)
            .await
            .pop()
            .expect("one result");
        assert!(
            again.is_err(),
            "persistent={persistent}: d exists, and the client works after the restart"
        );
    }
}
