//! GETATTR of one file in a loop (ADR 0012): each iteration is one GETATTR
//! request, so ops/s is the server's per-request turnaround and the server CPU
//! µs and context switches per request are its fixed cost per COMPOUND. Runs
//! with either driver (`--driver txnfs|nfs-rs`). The file is `--file-size`
//! bytes (default 1 MiB); 20,000 iterations by default (times `--scale`).

use crate::driver::{self, Driver};

use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::common::PreparedFile;
use crate::workloads::Params;
use anyhow::bail;
use txnfs_client::attrs::{self, SIZE, TYPE};
use txnfs_client::Compound;

const FILE: &str = "getattr.dat";

pub struct Getattr {
    file_size: u64,
    default_ops: u64,
    file: PreparedFile,
}

impl Getattr {
    pub fn new(p: &Params) -> Getattr {
        Getattr {
            file_size: p.file_size.unwrap_or(1 << 20),
            default_ops: p.scaled(20_000),
            file: PreparedFile::default(),
        }
    }
}

impl Workload for Getattr {
    fn name(&self) -> &str {
        "getattr"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"file_size": self.file_size})
    }
    fn default_ops(&self) -> u64 {
        self.default_ops
    }
    fn drivers(&self) -> &'static [Driver] {
        &[Driver::Txnfs, Driver::NfsRs]
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move { self.file.fill(s, FILE, self.file_size).await })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let fh = self.file.handle()?;
            let want = self.file_size;
            match w.driver {
                Driver::Txnfs => {
                    w.ready().await;
                    while w.next_iter().is_some() {
                        let mut c = Compound::new();
                        c.putfh(&fh);
                        let a = c.getattr(attrs::bitmap(&[TYPE, SIZE]));
                        let size = w.call(&c).await?.attrs(a)?.size;
                        if size != Some(want) {
                            bail!("GETATTR size {size:?}, want {want}");
                        }
                        w.done();
                    }
                }
                Driver::NfsRs => {
                    let fh = w.nfsrs_fh(FILE, fh).await?;
                    let m = w.nfsrs()?;
                    w.ready().await;
                    while w.next_iter().is_some() {
                        let a = w
                            .nfsrs_call(
                                driver::GETATTR,
                                || FILE.to_string(),
                                m.getattr(fh.clone()),
                                |_| 0,
                            )
                            .await?;
                        if a.filesize != want {
                            bail!("GETATTR size {}, want {want}", a.filesize);
                        }
                        w.done();
                    }
                }
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        vec![
            s.once_per_iteration("GETATTR"),
            Expectation::eq("one COMPOUND per iteration", s.rec.compounds, it),
            Expectation::eq("no READ", s.ops("READ"), 0),
        ]
    }
}
