//! File creation (seed 001 §4.2): create files of a given size (empty, 4 KB,
//! 16 KB; `--file-size`) as fast as possible, in the workload's directory.
//! Per file: OPEN(create), WRITE(s) unless empty, COMMIT unless `--sync` or
//! empty, CLOSE. One run creates `--files` files (default 10,000, scaled).
//! With `--driver nfs-rs`, one call at a time: CREATE (v3) or OPEN (v4), WRITE,
//! COMMIT unless empty, and CLOSE on v4 (v3 has no opens).

use super::common;
use crate::driver::{self, Driver};
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
            if w.driver == Driver::NfsRs {
                return self.run_nfsrs(w, &data).await;
            }
            w.ready().await;
            while let Some(i) = w.next_iter() {
                common::write_file(w, &dir, &format!("c{i}"), &data, self.sync).await?;
                w.count("files_created", 1);
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
        let commits = if self.sync || self.file_size == 0 {
            0
        } else {
            it
        };
        vec![
            // NFSv3 through nfs-rs creates with CREATE and has no opens; NFSv4 OPENs.
            Expectation::eq(
                "OPEN + CREATE == files created",
                s.ops("OPEN") + s.ops("CREATE"),
                it,
            ),
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
            Expectation::eq(
                "CLOSE == OPEN (no CLOSE on NFSv3)",
                s.ops("CLOSE"),
                s.ops("OPEN"),
            ),
            Expectation::eq("READ == 0", s.ops("READ"), 0),
        ]
    }
}

impl Create {
    /// The timed loop through nfs-rs: create, write, commit and close each file.
    async fn run_nfsrs(&self, w: &mut Worker, data: &Bytes) -> anyhow::Result<()> {
        let m = w.nfsrs()?;
        let dir = w.base_fh.clone();
        let max = m.get_max_write_size().clamp(4096, 1 << 20) as usize;
        w.ready().await;
        while let Some(i) = w.next_iter() {
            let name = format!("c{i}");
            let o = w
                .nfsrs_call(
                    driver::OPEN_CREATE,
                    || format!("create {name}"),
                    m.create(dir.clone(), &name, Some(0o644)),
                    |_| 0,
                )
                .await?;
            let mut off = 0usize;
            while off < data.len() {
                let end = (off + max).min(data.len());
                let r = w
                    .nfsrs_call(
                        driver::WRITE,
                        || format!("write {name} at {off}"),
                        m.write(o.fh.clone(), off as u64, data.slice(off..end)),
                        |r| u64::from(r.count),
                    )
                    .await?;
                anyhow::ensure!(r.count > 0, "write {name}: no progress at {off}");
                off += r.count as usize;
            }
            if !data.is_empty() {
                w.nfsrs_call(
                    driver::COMMIT,
                    || format!("commit {name}"),
                    m.commit(o.fh.clone(), 0, 0),
                    |_| 0,
                )
                .await?;
            }
            w.nfsrs_call(
                driver::CLOSE,
                || format!("close {name}"),
                m.close(o.fh),
                |_| 0,
            )
            .await?;
            w.count("files_created", 1);
            w.done();
        }
        Ok(())
    }
}
