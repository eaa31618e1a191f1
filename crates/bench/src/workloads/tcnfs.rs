//! TC-NFS Writefiles / Readfiles (seed 003 §4.1.1): 1,000 files (scaled) of
//! one fixed size (1 KB-16 MB, `--file-size`, default 64 KB). Writefiles
//! writes each file fully (OPEN create/truncate, WRITEs of ≤ 1 MiB, COMMIT
//! unless `--sync`, CLOSE); Readfiles reads each pre-written file fully
//! (OPEN, READs, CLOSE). One iteration is one file.

use super::common;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use bytes::Bytes;

pub struct TcNfs {
    pub write: bool,
    pub files: u64,
    pub file_size: u64,
    pub sync: bool,
}

impl TcNfs {
    pub fn new(write: bool, p: &Params) -> TcNfs {
        TcNfs {
            write,
            files: p.files_or(1000),
            file_size: p.file_size.unwrap_or(64 << 10),
            sync: p.sync,
        }
    }
}

impl Workload for TcNfs {
    fn name(&self) -> &str {
        if self.write {
            "writefiles"
        } else {
            "readfiles"
        }
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size, "sync": self.sync})
    }
    fn default_ops(&self) -> u64 {
        self.files
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            if self.write {
                return Ok(());
            }
            common::create_numbered(s, self.files, self.file_size).await
        })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let dir = w.base_fh.clone();
            let data = Bytes::from(crate::pattern(9, self.file_size as usize));
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let name = format!("f{}", i % self.files);
                if self.write {
                    common::write_file(w, &dir, &name, &data, self.sync).await?;
                } else {
                    let n = common::read_file(w, &dir, &name).await?;
                    anyhow::ensure!(n == self.file_size, "read {n} of {}", self.file_size);
                }
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let per = common::reads_for(self.file_size);
        let mut v = vec![
            Expectation::eq("OPEN == files", s.ops("OPEN"), it),
            Expectation::eq("CLOSE == files", s.ops("CLOSE"), it),
            Expectation::eq("bytes == files × size", s.rec.bytes, it * self.file_size),
        ];
        if self.write {
            v.push(Expectation::eq(
                "WRITE == files × ⌈size / 1 MiB⌉",
                s.ops("WRITE"),
                it * per,
            ));
            let commits = if self.sync || self.file_size == 0 {
                0
            } else {
                it
            };
            v.push(Expectation::eq(
                "COMMIT == files unless --sync",
                s.ops("COMMIT"),
                commits,
            ));
            v.push(Expectation::eq("READ == 0", s.ops("READ"), 0));
        } else {
            v.push(Expectation::eq(
                "READ == files × ⌈size / 1 MiB⌉",
                s.ops("READ"),
                it * per,
            ));
            v.push(Expectation::eq("WRITE == 0", s.ops("WRITE"), 0));
        }
        v
    }
}
