//! Locked reads (seed 001 §5.2, Table 1): 1,000 files of 4 KB (scaled); per
//! iteration: OPEN, LOCK (read lock, whole file), READ the whole file, LOCKU,
//! CLOSE, each its own request; ten iterations per file before the next file.
//! Without delegations every iteration sends exactly one READ and one
//! LOCK/LOCKU pair. With a read delegation the worker behaves as a
//! delegation-aware client (the Linux kernel client): the first iteration on a
//! file sends OPEN and READ, the other nine are local (open, lock and read
//! under the delegation), and moving on sends CLOSE + DELEGRETURN.

use super::common;
use crate::nfs;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use txnfs_client::Compound;
use txnfs_proto::nfs4::{
    nfs_argop4, nfs_lock_type4, open_delegation4, stateid4, DELEGRETURN4args,
    OPEN4_SHARE_ACCESS_READ,
};

pub struct Locked {
    pub files: u64,
    pub file_size: u64,
    pub repeats_per_file: u64,
}

impl Locked {
    pub fn new(p: &Params) -> anyhow::Result<Locked> {
        Ok(Locked {
            files: p.files_or(1000),
            file_size: p.file_size.unwrap_or(4096),
            repeats_per_file: p.get_u64("per_file", 10)?.max(1),
        })
    }
}

impl Workload for Locked {
    fn name(&self) -> &str {
        "locked"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size,
                           "per_file": self.repeats_per_file})
    }
    fn default_ops(&self) -> u64 {
        self.files * self.repeats_per_file
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move { common::create_numbered(s, self.files, self.file_size).await })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let dir = w.base_fh.clone();
            let owner = w.owner.clone();
            // The file this worker holds a read delegation on, as a delegation-aware
            // client (the Linux kernel client) would: its opens, locks and reads of
            // that file are local until it moves on.
            let mut held: Option<(u64, Delegated)> = None;
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let idx = (i / self.repeats_per_file) % self.files;
                if let Some((f, d)) = &held {
                    if *f == idx {
                        anyhow::ensure!(d.cached == self.file_size, "cached {} bytes", d.cached);
                        w.count("local_iterations", 1);
                        w.done();
                        continue;
                    }
                }
                if let Some((_, d)) = held.take() {
                    give_back(w, d).await?;
                }
                let name = format!("f{idx}");
                let mut c = Compound::new();
                c.putfh(&dir);
                // No want bits: the server's choice, as the Linux client asks.
                let o = c.open_wanting(name.as_bytes(), OPEN4_SHARE_ACCESS_READ, &owner, 0);
                let g = c.getfh();
                let r = w.call(&c).await?;
                let ok = r.open(o)?;
                let f = common::Open {
                    fh: r.fh(g)?,
                    sid: ok.stateid,
                    size: self.file_size,
                };
                if let open_delegation4::OPEN_DELEGATE_READ(d) = ok.delegation {
                    // Under the delegation the lock is local; the data is read once.
                    let cached = common::read_whole(w, &f).await?;
                    w.count("delegations", 1);
                    held = Some((
                        idx,
                        Delegated {
                            open: f,
                            stateid: d.stateid,
                            cached,
                        },
                    ));
                    w.done();
                    continue;
                }
                let mut c = Compound::new();
                c.putfh(&f.fh);
                let l = c.op(nfs::lock_new_owner(
                    nfs_lock_type4::READ_LT,
                    f.sid.clone(),
                    &owner,
                    0,
                    u64::MAX,
                ));
                let r = w.call(&c).await?;
                let lsid = nfs::lock_stateid(&r, l)?;
                let n = common::read_whole(w, &f).await?;
                anyhow::ensure!(n == self.file_size, "read {n} of {} bytes", self.file_size);
                let mut c = Compound::new();
                c.putfh(&f.fh);
                c.op(nfs::locku(nfs_lock_type4::READ_LT, lsid, 0, u64::MAX));
                w.call(&c).await?;
                common::close(w, f).await?;
                w.done();
            }
            if let Some((_, d)) = held.take() {
                give_back(w, d).await?;
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let delegated = s.counter("delegations");
        let local = s.counter("local_iterations");
        // Iterations that went to the server without a delegation.
        let plain = it - delegated - local;
        let per_file = common::reads_for(self.file_size);
        vec![
            Expectation::eq(
                "READ == (iterations without a delegation + delegations) x reads per file",
                s.ops("READ"),
                (plain + delegated) * per_file,
            ),
            Expectation::eq(
                "LOCK == iterations without a delegation",
                s.ops("LOCK"),
                plain,
            ),
            Expectation::eq("LOCKU == LOCK", s.ops("LOCKU"), plain),
            Expectation::eq(
                "OPEN == iterations sent to the server",
                s.ops("OPEN"),
                plain + delegated,
            ),
            Expectation::eq("CLOSE == OPEN", s.ops("CLOSE"), plain + delegated),
            Expectation::eq(
                "DELEGRETURN == delegations",
                s.ops("DELEGRETURN"),
                delegated,
            ),
            Expectation::that(
                "iterations served under a delegation (informational)",
                true,
                format!("{local} of {it}"),
            ),
        ]
    }
}

/// A read delegation held by a worker: the open, the delegation and the bytes cached.
struct Delegated {
    open: common::Open,
    stateid: stateid4,
    cached: u64,
}

/// CLOSE the open and return the delegation, in one COMPOUND.
async fn give_back(w: &mut Worker, d: Delegated) -> anyhow::Result<()> {
    let mut c = Compound::new();
    c.putfh(&d.open.fh);
    c.close(d.open.sid);
    c.op(nfs_argop4::OP_DELEGRETURN(DELEGRETURN4args {
        deleg_stateid: d.stateid,
    }));
    w.call(&c).await?;
    Ok(())
}
