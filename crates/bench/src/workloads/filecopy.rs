//! `cp big big.copy` within one server (ADR 0028): one file of `--file-size` (default
//! 1 GiB × --scale) copied per iteration with `Fs::vcopy`. Over NFSv4.2 against a
//! server with COPY no byte of it crosses the network (the server copies, reflinking
//! where its file system can); over 4.1 (`--vers 4.1`), or against a server without a
//! usable COPY (NFS-Ganesha 4.3), the client reads and writes it. The per-op counts
//! (COPY vs READ + WRITE) show which happened.

use crate::driver::Driver;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::common::PreparedFile;
use crate::workloads::Params;
use anyhow::Context;
use std::time::Instant;

const SOURCE: &str = "source";

pub struct FileCopy {
    size: u64,
    file: PreparedFile,
}

impl FileCopy {
    pub fn new(p: &Params) -> Self {
        FileCopy {
            size: p.file_size.unwrap_or_else(|| p.scaled(1 << 30)).max(1),
            file: PreparedFile::default(),
        }
    }
}

impl Workload for FileCopy {
    fn name(&self) -> &str {
        "filecopy"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({ "file_size": self.size })
    }
    fn default_ops(&self) -> u64 {
        1
    }
    fn validate(&self, _clients: usize, threads: usize) -> anyhow::Result<()> {
        anyhow::ensure!(threads == 1, "filecopy runs one thread per client");
        Ok(())
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move { self.file.fill(s, SOURCE, self.size).await })
    }
    fn drivers(&self) -> &'static [Driver] {
        &[Driver::Txnfs]
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let fs = w.fs();
            let src = format!("{}/{SOURCE}", w.base);
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let dst = format!("{}/copy-{}-{i}", w.base, w.global_idx());
                let before = w.client.stats();
                let t = Instant::now();
                fs.vcopy(&[(src.clone(), dst)])
                    .await
                    .pop()
                    .context("no result")?
                    .context("copy")?;
                let after = w.client.stats();
                w.record_stats_delta("COPY_FILE", &before, &after, t.elapsed(), self.size);
                w.count("files_copied", 1);
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let through = s.ops("READ") > 0;
        let mut v = vec![Expectation::eq(
            "files copied",
            s.counter("files_copied"),
            it,
        )];
        if through {
            // Through the client: every byte read and written once.
            v.push(Expectation::ge(
                "READ >= size / 1 MiB per copy",
                s.ops("READ"),
                it * (self.size >> 20),
            ));
        } else {
            v.push(Expectation::ge("COPY >= 1 per copy", s.ops("COPY"), it));
            v.push(Expectation::eq("no WRITE", s.ops("WRITE"), 0));
        }
        v
    }
}
