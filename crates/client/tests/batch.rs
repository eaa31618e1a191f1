//! Adaptive batching (ADR 0044) against the real txnfs server in process: several
//! callers' READs share COMPOUNDs, each caller gets its own bytes, a caller whose op
//! fails gets its own error while the others get theirs, a lone request leaves after
//! `max_delay`, and level 1 sends every request alone.

mod common;

use bytes::Bytes;
use common::*;
use std::time::{Duration, Instant};
use txnfs_client::batch::{BatchConfig, BatchMode, ControllerSettings};
use txnfs_client::vector::OpenFile;
use txnfs_client::{Client, ClientConfig, ClientError, Compound, Fs};
use txnfs_proto::nfs4::{nfsstat4, stateid4, OPEN4_SHARE_ACCESS_READ};

const FILES: usize = 8;

async fn batching_client(srv: &TestServer, mode: BatchMode, max_delay: Duration) -> Client {
    let mut cfg = ClientConfig::new(srv.addr);
    cfg.delegations = false;
    cfg.uid = 0;
    cfg.gid = 0;
    cfg.batch = BatchConfig {
        mode,
        settings: ControllerSettings {
            max_delay,
            interval: Duration::from_millis(100),
            ..ControllerSettings::default()
        },
    };
    Client::connect(cfg).await.expect("connect")
}

/// A client batching up to all FILES reads (waiting up to 200 ms for them), and its
/// opened files.
async fn static_batching(srv: &TestServer) -> (Client, Vec<OpenFile>) {
    let client = batching_client(
        srv,
        BatchMode::Static(FILES as u32),
        Duration::from_millis(200),
    )
    .await;
    let files = open_files(&client).await;
    (client, files)
}

fn content(i: usize) -> Bytes {
    Bytes::from(format!("file {i} ").repeat(100 + i))
}

/// Files f0..f7 with distinct contents, opened for reading by `client`.
async fn open_files(client: &Client) -> Vec<OpenFile> {
    let fs = Fs::new(client.clone());
    let files: Vec<(String, Bytes)> = (0..FILES).map(|i| (format!("f{i}"), content(i))).collect();
    for r in fs.vwrite(&files, true).await {
        r.expect("write");
    }
    let paths: Vec<String> = (0..FILES).map(|i| format!("f{i}")).collect();
    fs.vopen(&paths, OPEN4_SHARE_ACCESS_READ, None)
        .await
        .into_iter()
        .map(|r| r.expect("open"))
        .collect()
}

/// Each caller READs its file whole (the last one with a forged stateid when `forge`).
async fn read_all(
    client: &Client,
    files: &[OpenFile],
    forge: bool,
) -> Vec<Result<Bytes, ClientError>> {
    let mut tasks = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let client = client.clone();
        let mut sid = f.stateid.clone();
        if forge && i == files.len() - 1 {
            sid = stateid4 {
                seqid: 1,
                other: [0xee; 12],
            };
        }
        let fh = f.fh.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Compound::new();
            c.putfh(&fh);
            let k = c.read(sid, 0, 64 << 10);
            let r = client.compound(&c).await?;
            r.read(k).map(|(d, _)| d)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_share_compounds_and_each_gets_its_own_bytes() {
    let srv = start_memory_server().await;
    let (client, files) = static_batching(&srv).await;
    let before = client.stats().compounds;
    let got = read_all(&client, &files, false).await;
    for (i, r) in got.into_iter().enumerate() {
        assert_eq!(
            r.expect("read"),
            content(i),
            "caller {i} got another's bytes"
        );
    }
    let sent = client.stats().compounds - before;
    let b = client.batch_stats().expect("batching on");
    assert!(
        sent < FILES as u64,
        "{FILES} reads went out in {sent} COMPOUNDs: none shared"
    );
    assert!(b.messages >= 1 && b.requests >= 2, "{b:?}");
    assert_eq!(b.resent, 0, "{b:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_failure_leaves_the_others_their_results() {
    let srv = start_memory_server().await;
    let (client, files) = static_batching(&srv).await;
    for round in 0..3 {
        let got = read_all(&client, &files, true).await;
        for (i, r) in got.into_iter().enumerate() {
            if i == FILES - 1 {
                match r {
                    Err(ClientError::Nfs { status, .. }) => assert!(
                        matches!(
                            status,
                            nfsstat4::NFS4ERR_BAD_STATEID | nfsstat4::NFS4ERR_STALE_STATEID
                        ),
                        "round {round}: {status:?}"
                    ),
                    other => panic!("round {round}: the forged stateid read {other:?}"),
                }
            } else {
                assert_eq!(r.expect("read"), content(i), "round {round}, caller {i}");
            }
        }
    }
    let b = client.batch_stats().expect("batching on");
    assert!(b.messages >= 1, "never batched: {b:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_request_leaves_after_max_delay() {
    let srv = start_memory_server().await;
    let delay = Duration::from_millis(150);
    let client = batching_client(&srv, BatchMode::Static(64), delay).await;
    let files = open_files(&client).await;
    let t = Instant::now();
    let got = read_all(&client, &files[..1], false).await;
    let took = t.elapsed();
    assert_eq!(got[0].as_ref().expect("read"), &content(0));
    assert!(took >= delay, "sent before max_delay: {took:?}");
    assert!(took < Duration::from_secs(5), "waited {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_level_one_every_request_goes_alone() {
    let srv = start_memory_server().await;
    let client = batching_client(&srv, BatchMode::Static(1), Duration::from_millis(200)).await;
    let files = open_files(&client).await;
    let before = client.stats().compounds;
    let t = Instant::now();
    let got = read_all(&client, &files, false).await;
    assert!(t.elapsed() < Duration::from_millis(200), "level 1 waited");
    for (i, r) in got.into_iter().enumerate() {
        assert_eq!(r.expect("read"), content(i));
    }
    assert_eq!(client.stats().compounds - before, FILES as u64);
    assert_eq!(client.batch_stats().expect("on").messages, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_batching_keeps_every_result_right() {
    let srv = start_memory_server().await;
    let client = batching_client(&srv, BatchMode::Dynamic, Duration::from_millis(2)).await;
    let files = open_files(&client).await;
    let until = Instant::now() + Duration::from_millis(1500);
    let mut rounds = 0;
    while Instant::now() < until {
        let got = read_all(&client, &files, rounds % 5 == 4).await;
        for (i, r) in got.into_iter().enumerate() {
            if rounds % 5 == 4 && i == FILES - 1 {
                assert!(r.is_err(), "forged stateid read");
            } else {
                assert_eq!(r.expect("read"), content(i), "round {rounds}, caller {i}");
            }
        }
        rounds += 1;
    }
    let b = client.batch_stats().expect("on");
    assert!((1..=64).contains(&b.level), "{b:?}");
    assert!(rounds > 10, "only {rounds} rounds");
    // Every request completed was counted by the level's measure, the batched ones
    // once per message by their batch's sender.
    assert!(b.messages > 0, "nothing was batched: {b:?}");
    assert_eq!(b.measured, (rounds * FILES) as u64, "{b:?}");
}

/// One READ of `f` whole through `client`.
async fn read_one(client: &Client, f: &OpenFile) -> Result<Bytes, ClientError> {
    let mut c = Compound::new();
    c.putfh(&f.fh);
    let k = c.read(f.stateid.clone(), 0, 64 << 10);
    client.compound(&c).await?.read(k).map(|(d, _)| d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_who_gives_up_strands_no_one_in_its_batch() {
    // No batcher task sends batches, and only the caller who started a batch waits
    // with a timer. Here that caller gives up while the batch fills, after a second
    // caller joined it: the batch must still leave, and the second caller get its bytes.
    let srv = start_memory_server().await;
    let client = batching_client(&srv, BatchMode::Static(8), Duration::from_secs(30)).await;
    let files = open_files(&client).await;
    let (c, f) = (client.clone(), files[0].clone());
    let first = tokio::spawn(async move { read_one(&c, &f).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (c, f) = (client.clone(), files[1].clone());
    let second = tokio::spawn(async move { read_one(&c, &f).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !first.is_finished() && !second.is_finished(),
        "left before the batch filled"
    );
    first.abort();
    let got = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("stranded: the batch's first caller gave up and nobody sent it")
        .expect("task");
    assert_eq!(got.expect("read"), content(1));
    let b = client.batch_stats().expect("on");
    assert_eq!(
        (b.messages, b.requests),
        (1, 2),
        "both parts in one COMPOUND: {b:?}"
    );
}
