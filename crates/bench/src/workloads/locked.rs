//! Locked reads (seed 001 §5.2, Table 1): 1,000 files of 4 KB (scaled); per
//! iteration: OPEN, LOCK (read lock, whole file), READ the whole file, LOCKU,
//! CLOSE, each its own request; ten iterations per file before the next file.
//! Without delegations every iteration sends exactly one READ and one
//! LOCK/LOCKU pair.

use super::common;
use crate::nfs;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use txnfs_client::Compound;
use txnfs_proto::nfs4::{nfs_lock_type4, OPEN4_SHARE_ACCESS_READ};

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
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let name = format!("f{}", (i / self.repeats_per_file) % self.files);
                let f = common::open(w, &dir, &name, OPEN4_SHARE_ACCESS_READ, false, false).await?;
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
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let reads = it * common::reads_for(self.file_size);
        vec![
            Expectation::eq("READ == iterations (no delegation)", s.ops("READ"), reads),
            s.once_per_iteration("LOCK"),
            s.once_per_iteration("LOCKU"),
            s.once_per_iteration("OPEN"),
            s.once_per_iteration("CLOSE"),
        ]
    }
}
