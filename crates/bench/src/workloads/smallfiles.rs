//! Small-file reads (seed 001 §4.1): 10,000 files of 4 KB (scaled); each
//! iteration opens a random file, reads it whole and closes it (OPEN, READ,
//! CLOSE: three requests, as a client without delegations sends them).

use super::common;
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
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
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
