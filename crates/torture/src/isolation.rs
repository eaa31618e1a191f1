//! Isolation check: writer sessions each write their own id into the same K files in
//! one transaction; transactional readers (one txn COMPOUND reading all K files) and
//! plain readers (one plain COMPOUND reading all K files) must never see a mix.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use txnfs_proto::nfs4::{nfs_argop4, nfsstat4};

use crate::model::Rng;
use crate::nfs::*;

#[derive(Clone, Debug)]
pub struct IsoConfig {
    pub writers: usize,
    pub txn_readers: usize,
    pub plain_readers: usize,
    pub files: usize,
    pub duration: Duration,
}

impl Default for IsoConfig {
    fn default() -> Self {
        IsoConfig {
            writers: 4,
            txn_readers: 2,
            plain_readers: 2,
            files: 8,
            duration: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Default)]
pub struct IsoStats {
    pub writer_commits: AtomicU64,
    pub writer_delays: AtomicU64,
    pub txn_reads: AtomicU64,
    pub txn_read_delays: AtomicU64,
    pub txn_mixes: AtomicU64,
    pub plain_reads: AtomicU64,
    pub plain_read_delays: AtomicU64,
    pub plain_mixes: AtomicU64,
    /// Unexpected statuses and the first mixes seen.
    pub notes: Mutex<Vec<String>>,
}

impl IsoStats {
    fn note(&self, s: String) {
        let mut n = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        if n.len() < 20 {
            n.push(s);
        }
    }

    pub fn errors(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl std::fmt::Display for IsoStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        write!(
            f,
            "writer transactions committed {} (NFS4ERR_DELAY {}), transactional reads checked {} \
             (DELAY {}, mixes {}), plain reads checked {} (DELAY {}, mixes {})",
            g(&self.writer_commits),
            g(&self.writer_delays),
            g(&self.txn_reads),
            g(&self.txn_read_delays),
            g(&self.txn_mixes),
            g(&self.plain_reads),
            g(&self.plain_read_delays),
            g(&self.plain_mixes)
        )
    }
}

const REC: usize = 32;

/// The fixed-length record writer `id` writes in its `n`-th transaction.
fn record(id: usize, n: u64) -> Bytes {
    let mut s = format!("writer={id:02} txn={n:010}");
    while s.len() < REC - 1 {
        s.push('.');
    }
    s.push('\n');
    Bytes::from(s)
}

fn file(i: usize) -> String {
    format!("iso{i}")
}

fn read_all_ops(k: usize) -> Vec<nfs_argop4> {
    let mut ops = Vec::new();
    for i in 0..k {
        ops.extend([
            nfs_argop4::OP_PUTROOTFH,
            lookup(&file(i)),
            read(&ANON, 0, 4096),
        ]);
    }
    ops
}

async fn writer(addr: SocketAddr, id: usize, cfg: IsoConfig, st: Arc<IsoStats>) {
    let mut s = match session(addr, format!("iso-writer-{id}").as_bytes()).await {
        Ok(s) => s,
        Err(e) => return st.note(format!("writer {id}: {e}")),
    };
    let mut rng = Rng(id as u64 * 7919 + 1);
    let deadline = Instant::now() + cfg.duration;
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let rec = record(id, n);
        // Each transaction starts at another file: conflicts, waits and rollbacks.
        let start = rng.below(cfg.files as u64) as usize;
        let mut ops = Vec::new();
        for j in 0..cfg.files {
            let i = (start + j) % cfg.files;
            ops.extend([
                nfs_argop4::OP_PUTROOTFH,
                lookup(&file(i)),
                write(&ANON, 0, rec.clone()),
            ]);
        }
        let mut backoff = 1;
        loop {
            match s.txn(ops.clone()).await {
                Ok(r) if r.status == nfsstat4::NFS4_OK => {
                    st.writer_commits.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) if r.status == nfsstat4::NFS4ERR_DELAY => {
                    st.writer_delays.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                    backoff = (backoff * 2).min(20);
                    if Instant::now() < deadline {
                        continue;
                    }
                }
                Ok(r) => st.note(format!("writer {id}: {:?}", r.status)),
                Err(e) => return st.note(format!("writer {id}: {e}")),
            }
            break;
        }
    }
}

async fn reader(addr: SocketAddr, id: usize, txn: bool, cfg: IsoConfig, st: Arc<IsoStats>) {
    let kind = if txn { "txn" } else { "plain" };
    let mut s = match session(addr, format!("iso-{kind}-reader-{id}").as_bytes()).await {
        Ok(s) => s,
        Err(e) => return st.note(format!("{kind} reader {id}: {e}")),
    };
    let (reads, delays, mixes) = if txn {
        (&st.txn_reads, &st.txn_read_delays, &st.txn_mixes)
    } else {
        (&st.plain_reads, &st.plain_read_delays, &st.plain_mixes)
    };
    let deadline = Instant::now() + cfg.duration;
    while Instant::now() < deadline {
        let ops = read_all_ops(cfg.files);
        let r = if txn {
            s.txn(ops).await
        } else {
            s.plain(ops).await
        };
        match r {
            Ok(r) if r.status == nfsstat4::NFS4_OK => {
                let data = read_results(&r);
                reads.fetch_add(1, Ordering::Relaxed);
                if data.len() != cfg.files || data.iter().any(|d| *d != data[0]) {
                    mixes.fetch_add(1, Ordering::Relaxed);
                    let seen: Vec<String> = data
                        .iter()
                        .map(|d| String::from_utf8_lossy(d).trim_end().to_string())
                        .collect();
                    st.note(format!("{kind} reader {id} saw a mix: {seen:?}"));
                }
            }
            Ok(r) if r.status == nfsstat4::NFS4ERR_DELAY => {
                delays.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(r) => st.note(format!("{kind} reader {id}: {:?}", r.status)),
            Err(e) => return st.note(format!("{kind} reader {id}: {e}")),
        }
    }
}

/// Creates the K files, then runs writers and readers concurrently for the duration.
pub async fn run_isolation(addr: SocketAddr, cfg: IsoConfig) -> Arc<IsoStats> {
    let st = Arc::new(IsoStats::default());
    let mut s = session(addr, b"iso-setup").await.expect("session");
    for i in 0..cfg.files {
        let r = s
            .plain(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_create(&file(i)),
                write(&CURRENT, 0, record(99, 0)),
                close_current(),
            ])
            .await
            .expect("setup call");
        assert_eq!(r.status, nfsstat4::NFS4_OK, "creating {}", file(i));
    }
    let mut tasks = Vec::new();
    for id in 0..cfg.writers {
        tasks.push(tokio::spawn(writer(addr, id, cfg.clone(), st.clone())));
    }
    for id in 0..cfg.txn_readers {
        tasks.push(tokio::spawn(reader(
            addr,
            id,
            true,
            cfg.clone(),
            st.clone(),
        )));
    }
    for id in 0..cfg.plain_readers {
        tasks.push(tokio::spawn(reader(
            addr,
            id,
            false,
            cfg.clone(),
            st.clone(),
        )));
    }
    for t in tasks {
        if let Err(e) = t.await {
            st.note(format!("task panicked: {e}"));
        }
    }
    st
}
