//! Small-file reads (seed 001 §4.1): 10,000 files of 4 KB (scaled); each
//! iteration opens a random file, reads it whole and closes it (OPEN, READ,
//! CLOSE: three requests, as a client without delegations sends them).
//! With `--driver nfs-rs`, as a v3 client reads a file: LOOKUP, then READ with
//! the anonymous stateid (two requests; the same on every version).

use super::common;
use crate::driver::{self, Driver};
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use crate::XorShift;

pub struct SmallFiles {
    pub files: u64,
    pub file_size: u64,
}

impl SmallFiles {
    pub fn new(p: &Params) -> SmallFiles {
        SmallFiles {
            files: p.files_or(10_000),
            file_size: p.file_size.unwrap_or(4096),
        }
    }
}

impl Workload for SmallFiles {
    fn name(&self) -> &str {
        "smallfiles"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size})
    }
    fn default_ops(&self) -> u64 {
        self.files
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move { common::create_numbered(s, self.files, self.file_size).await })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let mut rng = XorShift::new(w.global_idx() as u64 + 7);
            let dir = w.base_fh.clone();
            if w.driver == Driver::NfsRs {
                return self.run_nfsrs(w, rng).await;
            }
            w.ready().await;
            while w.next_iter().is_some() {
                let f = rng.next_u64() % self.files;
                let n = common::read_file(w, &dir, &format!("f{f}")).await?;
                anyhow::ensure!(n == self.file_size, "read {n} of {} bytes", self.file_size);
                w.done();
            }
            Ok(())
        })
    }
    fn drivers(&self) -> &'static [Driver] {
        &[Driver::Txnfs, Driver::NfsRs]
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        if s.driver == Driver::NfsRs {
            return vec![
                s.once_per_iteration("LOOKUP"),
                Expectation::eq(
                    "READ == iterations × ⌈size / 1 MiB⌉",
                    s.ops("READ"),
                    it * common::reads_for(self.file_size),
                ),
                Expectation::eq("OPEN == 0", s.ops("OPEN"), 0),
                Expectation::eq(
                    "bytes == iterations × size",
                    s.rec.bytes,
                    it * self.file_size,
                ),
            ];
        }
        vec![
            s.once_per_iteration("OPEN"),
            Expectation::eq(
                "READ == iterations × ⌈size / 1 MiB⌉",
                s.ops("READ"),
                it * common::reads_for(self.file_size),
            ),
            s.once_per_iteration("CLOSE"),
            Expectation::eq("WRITE == 0", s.ops("WRITE"), 0),
            Expectation::eq(
                "bytes == iterations × size",
                s.rec.bytes,
                it * self.file_size,
            ),
        ]
    }
}

impl SmallFiles {
    /// The timed loop through nfs-rs: LOOKUP a random file, READ it whole.
    async fn run_nfsrs(&self, w: &mut Worker, mut rng: XorShift) -> anyhow::Result<()> {
        let m = w.nfsrs()?;
        let dir = w.base_fh.clone();
        let max = m.get_max_read_size().clamp(4096, 1 << 20);
        w.ready().await;
        while w.next_iter().is_some() {
            let name = format!("f{}", rng.next_u64() % self.files);
            let fh = w
                .nfsrs_call(
                    driver::LOOKUP,
                    || format!("lookup {name}"),
                    m.lookup(dir.clone(), &name),
                    |_| 0,
                )
                .await?
                .fh;
            let mut off = 0u64;
            while off < self.file_size {
                let count = max.min((self.file_size - off) as u32);
                let d = w
                    .nfsrs_call(
                        driver::READ,
                        || format!("read {name} at {off}"),
                        m.read(fh.clone(), off, count),
                        |d| d.len() as u64,
                    )
                    .await?;
                anyhow::ensure!(!d.is_empty(), "read {name}: nothing at {off}");
                off += d.len() as u64;
            }
            w.done();
        }
        Ok(())
    }
}
