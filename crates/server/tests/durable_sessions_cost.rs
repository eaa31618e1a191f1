//! What persistent sessions cost (ADR 0022), measured with raw sessions that ask for
//! CREATE_SESSION4_FLAG_PERSIST as the Linux client does on every session. Every client asks for PERSIST
//! (as Linux does) and caches every reply (`sa_cachethis`, as Linux does for
//! non-idempotent ops; txnfs caches every reply that fits anyway); the server grants
//! it or not (`persistent_sessions`), in alternating runs of the same invocation.
//!
//!     cargo test --release -p txnfs-server --test durable_sessions_cost -- --ignored --nocapture
//!
//! `TXNFS_COST_SECS` (default 2) sets the length of a run, `TXNFS_COST_ROUNDS`
//! (default 3) the runs per setting; medians are printed with the on/off ratio.

mod common;

use bytes::Bytes;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig, Server};

#[derive(Clone, Copy, Debug)]
enum Workload {
    /// PUTROOTFH, GETATTR(type, size): the most frequent request of a Linux mount.
    Getattr,
    /// PUTROOTFH, CREATE (a directory of a new name): a metadata change.
    Mkdir,
    /// PUTFH, WRITE 4 KiB UNSTABLE: a small write as the Linux client sends it.
    Write4k,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn client_loop(
    addr: std::net::SocketAddr,
    id: usize,
    w: Workload,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) {
    let cl = connect(addr).await;
    let owner = format!("cost-{id}-{}", std::process::id());
    let r = call(&cl, vec![exchange_id(owner.as_bytes())]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    let mut op = create_session(e, channel(1000, 8), channel(16, 1));
    if let nfs_argop4::OP_CREATE_SESSION(a) = &mut op {
        a.csa_flags = CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
    }
    let r = call(&cl, vec![op]).await;
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(cs)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    reclaim_complete(&cl, cs.csr_sessionid).await;
    let mut s = Session {
        cl,
        clientid: e.eir_clientid,
        sid: cs.csr_sessionid,
        seq: 0,
    };
    let fh = if let Workload::Write4k = w {
        let (_, fh) = s.open_new_file(&format!("file-{id}")).await;
        Some(fh)
    } else {
        None
    };
    let data = Bytes::from(vec![7u8; 4096]);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let ops = match w {
            Workload::Getattr => vec![
                nfs_argop4::OP_PUTROOTFH,
                nfs_argop4::OP_GETATTR(GETATTR4args {
                    attr_request: vec![(1 << 1) | (1 << 4)],
                }),
            ],
            Workload::Mkdir => vec![nfs_argop4::OP_PUTROOTFH, mkdir(&format!("d-{id}-{n}"))],
            Workload::Write4k => vec![
                nfs_argop4::OP_PUTFH(PUTFH4args {
                    object: fh.clone().unwrap(),
                }),
                nfs_argop4::OP_WRITE(WRITE4args {
                    stateid: stateid4 {
                        seqid: 0,
                        other: [0; 12],
                    },
                    offset: (n % 256) * 4096,
                    stable: stable_how4::UNSTABLE4,
                    data: data.clone(),
                }),
            ],
        };
        let r = s.run(ops).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{w:?}: {:?}", r.resarray);
        n += 1;
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// One run: a fresh server (local export, persistence as given), `clients` sessions
/// driving `w` for `secs`: COMPOUNDs per second and fdatasyncs per COMPOUND.
async fn run(w: Workload, clients: usize, persistent: bool, secs: u64) -> (f64, f64) {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "txnfs-cost-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let (export, state) = (dir.join("export"), dir.join("state"));
    std::fs::create_dir_all(&export).unwrap();
    let server = Server::new(Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: export,
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        }],
        state_dir: Some(state),
        grace: false,
        persistent_sessions: persistent,
        ..Config::default()
    })
    .unwrap();
    // Served with a shutdown signal, so each run's server (and its descriptor cache)
    // is gone before the next starts.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(txnfs_server::run(server.clone(), listener, async move {
        let _ = stopped.await;
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|i| tokio::spawn(client_loop(addr, i, w, stop.clone(), done.clone())))
        .collect();
    // Warm up, then count.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let syncs = |srv: &Server| {
        srv.session_store
            .as_ref()
            .map_or(0, |s| s.stats.syncs.load(Ordering::Relaxed))
    };
    let (n0, s0, t0) = (done.load(Ordering::Relaxed), syncs(&server), Instant::now());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (n1, s1, t1) = (done.load(Ordering::Relaxed), syncs(&server), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    drop(server);
    let _ = shutdown.send(());
    let _ = serving.await;
    let _ = std::fs::remove_dir_all(&dir);
    let ops = (n1 - n0) as f64;
    (
        ops / (t1 - t0).as_secs_f64(),
        (s1 - s0) as f64 / ops.max(1.0),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement (minutes); run it by hand with --release"]
async fn cost_of_persistent_sessions() {
    let secs = env_num("TXNFS_COST_SECS", 2);
    let rounds = env_num("TXNFS_COST_ROUNDS", 3);
    println!(
        "| workload | clients | off ops/s | on ops/s | on/off | fdatasync per COMPOUND (on) |"
    );
    println!("|---|---|---|---|---|---|");
    for w in [Workload::Getattr, Workload::Mkdir, Workload::Write4k] {
        for clients in [1usize, 16] {
            let (mut off, mut on, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                off.push(run(w, clients, false, secs).await.0);
                let (r, s) = run(w, clients, true, secs).await;
                on.push(r);
                syncs.push(s);
            }
            let (off, on) = (median(off), median(on));
            println!(
                "| {w:?} | {clients} | {off:.0} | {on:.0} | {:.3} | {:.2} |",
                on / off,
                median(syncs)
            );
        }
    }
}
