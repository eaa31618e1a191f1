//! Delegation recall (seed 001 §5.3): two groups of clients. Group A (the
//! first half of the clients, at least one) opens every file for reading
//! before the timed part, keeps the opens and hands the read delegations the
//! server grants to its client's delegation cache (which returns them when
//! recalled); group B (the others) opens the same files read-write (OPEN,
//! CLOSE), one file per iteration. Each B open of a delegated file conflicts:
//! the server recalls A's delegation and holds the OPEN until A returned it
//! (txnfs) or answers NFS4ERR_DELAY for the client to retry (Linux, Ganesha):
//! the cost shows as OPEN latency. Servers that grant nothing (Ganesha by
//! default, `txnfs serve --no-delegations`) measure the conflicting open
//! without a recall.

use super::common;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use txnfs_proto::nfs4::{open_delegation4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};

pub struct Deleg {
    pub files: u64,
    pub file_size: u64,
    /// Group-B workers still running.
    b_running: AtomicUsize,
    delegations: AtomicU64,
    a_opens: AtomicU64,
}

impl Deleg {
    pub fn new(p: &Params) -> Deleg {
        Deleg {
            files: p.files_or(1000),
            file_size: p.file_size.unwrap_or(4096),
            b_running: AtomicUsize::new(0),
            delegations: AtomicU64::new(0),
            a_opens: AtomicU64::new(0),
        }
    }

    fn group_a(clients: usize) -> usize {
        clients.div_ceil(2).min(clients - 1).max(1)
    }
}

impl Workload for Deleg {
    fn name(&self) -> &str {
        "deleg"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size})
    }
    fn default_ops(&self) -> u64 {
        self.files
    }
    fn validate(&self, clients: usize, _threads: usize) -> anyhow::Result<()> {
        anyhow::ensure!(clients >= 2, "deleg needs --clients 2 or more (two groups)");
        Ok(())
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let a = Deleg::group_a(s.clients);
            self.b_running
                .store((s.clients - a) * s.threads, Ordering::SeqCst);
            self.delegations.store(0, Ordering::SeqCst);
            self.a_opens.store(0, Ordering::SeqCst);
            common::create_numbered(s, self.files, self.file_size).await
        })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let dir = w.base_fh.clone();
            if w.client_idx < Deleg::group_a(w.clients) {
                // Group A: thread 0 of each client holds read opens on every file.
                let mut held = Vec::new();
                let mut held_delegations = 0u64;
                if w.thread_idx == 0 {
                    for i in 0..self.files {
                        let name = format!("f{i}");
                        let mut c = txnfs_client::Compound::new();
                        c.putfh(&dir);
                        let o =
                            c.open_wanting(name.as_bytes(), OPEN4_SHARE_ACCESS_READ, &w.owner, 0);
                        let g = c.getfh();
                        let r = w.call(&c).await?;
                        let ok = r.open(o)?;
                        if !matches!(
                            ok.delegation,
                            open_delegation4::OPEN_DELEGATE_NONE
                                | open_delegation4::OPEN_DELEGATE_NONE_EXT(_)
                        ) {
                            self.delegations.fetch_add(1, Ordering::Relaxed);
                            held_delegations += 1;
                            w.client.adopt_delegation(&r.fh(g)?, &ok.delegation);
                        }
                        self.a_opens.fetch_add(1, Ordering::Relaxed);
                        held.push(common::Open {
                            fh: r.fh(g)?,
                            sid: ok.stateid,
                            size: self.file_size,
                        });
                    }
                }
                w.ready().await;
                let granted = held_delegations;
                w.count("group_a_delegations", granted);
                w.set_recording(false);
                while self.b_running.load(Ordering::SeqCst) > 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                for f in held {
                    common::close(w, f).await?;
                }
                return Ok(());
            }
            // Group B.
            w.ready().await;
            let res = async {
                while let Some(i) = w.next_iter() {
                    let name = format!("f{}", i % self.files);
                    let f =
                        common::open(w, &dir, &name, OPEN4_SHARE_ACCESS_BOTH, false, false).await?;
                    common::close(w, f).await?;
                    w.done();
                }
                anyhow::Ok(())
            }
            .await;
            self.b_running.fetch_sub(1, Ordering::SeqCst);
            res
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let a = Deleg::group_a(s.clients) as u64;
        vec![
            Expectation::eq(
                "OPEN (group B, read-write) == iterations",
                s.ops("OPEN"),
                it,
            ),
            s.once_per_iteration("CLOSE"),
            Expectation::eq(
                "group A holds files × A-clients read opens",
                self.a_opens.load(Ordering::Relaxed),
                self.files * a,
            ),
            Expectation::that(
                "delegations granted to group A (informational; none from a server that grants none)",
                true,
                format!("{}", self.delegations.load(Ordering::Relaxed)),
            ),
        ]
    }
}
