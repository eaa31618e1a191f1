//! File creation (seed 001 §4.2): create files of a given size (empty, 4 KB,
//! 16 KB; `--file-size`) as fast as possible, in the workload's directory.
//! Per file: OPEN(create), WRITE(s) unless empty, COMMIT unless `--sync` or
//! empty, CLOSE. One run creates `--files` files (default 10,000, scaled).

use super::common;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use bytes::Bytes;

pub struct Create {
    pub files: u64,
    pub file_size: u64,
    pub sync: bool,
}

impl Create {
    pub fn new(p: &Params) -> Create {
        Create {
            files: p.files_or(10_000),
            file_size: p.file_size.unwrap_or(0),
            sync: p.sync,
        }
    }
}

impl Workload for Create {
    fn name(&self) -> &str {
        "create"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size, "sync": self.sync})
    }
    fn default_ops(&self) -> u64 {
        self.files
    }
    fn prepare<'a>(&'a self, _s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let data = Bytes::from(crate::pattern(1, self.file_size as usize));
            let dir = w.base_fh.clone();
            w.ready().await;
            while let Some(i) = w.next_iter() {
                common::write_file(w, &dir, &format!("c{i}"), &data, self.sync).await?;
                w.count("files_created", 1);
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let commits = if self.sync || self.file_size == 0 {
            0
        } else {
            it
        };
        vec![
            Expectation::eq("OPEN == files created", s.ops("OPEN"), it),
            Expectation::eq(
                "files_created == iterations",
                s.counter("files_created"),
                it,
            ),
            Expectation::eq(
                "WRITE == files × ⌈size / 1 MiB⌉",
                s.ops("WRITE"),
                it * common::reads_for(self.file_size),
            ),
            Expectation::eq(
                "COMMIT == files unless --sync or empty",
                s.ops("COMMIT"),
                commits,
            ),
            Expectation::eq("CLOSE == files", s.ops("CLOSE"), it),
            Expectation::eq("READ == 0", s.ops("READ"), 0),
        ]
    }
}
