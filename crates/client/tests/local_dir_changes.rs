//! Our client's cached listing of a delegated directory of a local export follows
//! changes made directly on the server's host (ADR 0047): CB_NOTIFY brings them in,
//! and the listing is still served without a READDIR.

mod common;

use common::*;
use std::time::{Duration, Instant};
use txnfs_client::{Client, Fs};
use txnfs_server::BackendKind;

fn ops(c: &Client, name: &str) -> u64 {
    c.stats().ops.get(name).copied().unwrap_or(0)
}

/// The names of `d`'s listing as `fs` sees it.
async fn names(fs: &Fs) -> Vec<String> {
    let l = fs.vlistdir(&["d"], false).await;
    let mut v: Vec<String> = l[0]
        .as_ref()
        .expect("list")
        .iter()
        .map(|e| e.name.clone())
        .collect();
    v.sort();
    v
}

/// Lists `d` until it names `want` (within 2 s).
async fn until_listed(fs: &Fs, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let got = names(fs).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "listing {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_listing_follows_local_changes() {
    let dir = std::env::temp_dir().join(format!("txnfs-client-ldc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("d")).expect("export");
    std::fs::write(dir.join("d/old"), b"o").expect("old");
    let export = dir.clone();
    let srv = start_memory_server_with(move |cfg| {
        cfg.exports[0].backend = BackendKind::Local;
        cfg.exports[0].path = export;
    })
    .await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    assert_eq!(names(&fs).await, vec!["old"]);
    assert_eq!(a.delegations_held().1, 1, "directory delegation granted");
    let readdirs = ops(&a, "READDIR");

    std::fs::write(dir.join("d/new"), b"n").expect("local create");
    until_listed(&fs, &["new", "old"]).await;
    std::fs::rename(dir.join("d/old"), dir.join("d/older")).expect("local rename");
    until_listed(&fs, &["new", "older"]).await;
    std::fs::remove_file(dir.join("d/new")).expect("local remove");
    until_listed(&fs, &["older"]).await;
    assert_eq!(
        ops(&a, "READDIR"),
        readdirs,
        "kept current by CB_NOTIFY alone"
    );
    assert!(a.cache_stats().notify_applied >= 3);
    assert_eq!(a.cache_stats().notify_dropped, 0);
    a.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}
