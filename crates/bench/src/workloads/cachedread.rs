//! Cached reads (seed 001 Fig. 7 shape): every client reads the same small set
//! of files over and over through the vectorized client (`Fs::vread`), one
//! whole file per iteration. A server that grants read delegations lets the
//! client serve every read after the first from its cache, without an RPC; one
//! that does not (or `txnfs serve --no-delegations`) pays OPEN + READ + CLOSE
//! each time. Compare ops/s and the READs on the wire (exact with one thread
//! per client: the op counts come from the client's counters).

use super::common;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use anyhow::Context;

pub struct CachedRead {
    pub files: u64,
    pub file_size: u64,
}

impl CachedRead {
    pub fn new(p: &Params) -> CachedRead {
        CachedRead {
            files: p.files_or(16),
            file_size: p.file_size.unwrap_or(64 << 10),
        }
    }
}

impl Workload for CachedRead {
    fn name(&self) -> &str {
        "cachedread"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "file_size": self.file_size})
    }
    fn default_ops(&self) -> u64 {
        self.files * 100
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move { common::create_numbered(s, self.files, self.file_size).await })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let fs = w.fs();
            let paths: Vec<String> = (0..self.files)
                .map(|i| format!("{}/f{i}", w.base))
                .collect();
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let path = &paths[(i % self.files) as usize];
                let before = w.client.stats();
                let t = std::time::Instant::now();
                let data = fs
                    .vread(std::slice::from_ref(path))
                    .await
                    .pop()
                    .context("no result")?
                    .with_context(|| format!("read {path}"))?;
                anyhow::ensure!(
                    data.len() as u64 == self.file_size,
                    "read {} of {} bytes",
                    data.len(),
                    self.file_size
                );
                let after = w.client.stats();
                w.record_stats_delta("READ_FILE", &before, &after, t.elapsed(), data.len() as u64);
                w.count("bytes_read", data.len() as u64);
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        vec![
            Expectation::eq(
                "bytes read == iterations x file size",
                s.counter("bytes_read"),
                it * self.file_size,
            ),
            Expectation::that(
                "READs on the wire per iteration (informational: 1 without delegations, ~0 with)",
                s.ops("READ") <= it * common::reads_for(self.file_size),
                format!("{} READs for {it} iterations", s.ops("READ")),
            ),
        ]
    }
}
