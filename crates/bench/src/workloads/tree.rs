//! vNFS-style tree operations with the vectorized client ([`txnfs_client::Fs`]):
//! `ls -lR` (tree-ls), `cp -R` (tree-cp) and `rm -r` (tree-rm) of a generated
//! tree shaped like a kernel source tree: about 60,000 files averaging about
//! 15 KB in about 4,000 directories at scale 1 (`--scale`, `--files`,
//! `--set dirs=N`, `--set mean_size=15k`). One iteration is one whole-tree
//! operation. Per-op counts come from the client's counters around each call,
//! so the workload runs one thread per client (the vectorized client keeps
//! many COMPOUNDs in flight itself). tree-rm removes one prepared copy per
//! iteration (`--set trees=N`, default 1).

use crate::driver::Driver;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::tree_nfsrs;
use crate::workloads::Params;
use anyhow::Context;
use bytes::Bytes;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeOp {
    Ls,
    Cp,
    Rm,
}

/// The shared tree generator.
pub use txnfs_testbed::data::TreeShape as Shape;

pub struct Tree {
    pub op: TreeOp,
    pub shape: Shape,
    pub trees: u64,
    /// tree-cp / tree-rm as ONE transaction per tree (`--txn`): the copy is
    /// listed and read plainly, then written as one transaction of mkdirs and
    /// write_files; the removal is `Fs::vremove_atomic`. The tree must fit
    /// one COMPOUND (about 1 MiB of data).
    pub txn: bool,
}

impl Tree {
    pub fn new(op: TreeOp, p: &Params) -> anyhow::Result<Tree> {
        let dirs = p.get_u64("dirs", p.scaled(4000))?.max(1);
        let files = p.files_or(60_000);
        let mean = p.file_size.unwrap_or(p.get_u64("mean_size", 15 << 10)?);
        Ok(Tree {
            op,
            shape: Shape::random(dirs, files, mean, 42),
            trees: p.get_u64("trees", 1)?.max(1),
            txn: p.txn,
        })
    }

    fn root(&self, k: u64) -> String {
        format!("src{k}")
    }
}

use txnfs_testbed::data::join;

async fn build(s: &Setup, root: &str, shape: &Shape) -> anyhow::Result<()> {
    let dirs: Vec<String> = shape.dirs.iter().map(|d| join(&s.path(root), d)).collect();
    for r in s.fs.vmkdir(&dirs, 0o755, true).await {
        r.context("mkdir")?;
    }
    for chunk in shape.files.chunks(1000) {
        let files: Vec<(String, Bytes)> = chunk
            .iter()
            .map(|(p, n)| {
                (
                    join(&s.path(root), p),
                    Bytes::from(crate::pattern(*n, *n as usize)),
                )
            })
            .collect();
        for r in s.fs.vwrite(&files, false).await {
            r.context("write file")?;
        }
    }
    Ok(())
}

impl Tree {
    /// The timed part with nfs-rs, one call at a time ([`tree_nfsrs`]).
    async fn run_nfsrs(&self, w: &mut Worker) -> anyhow::Result<()> {
        let m = w.nfsrs()?;
        let src = self.root(0);
        w.ready().await;
        while let Some(i) = w.next_iter() {
            let t = Instant::now();
            let kind = match self.op {
                TreeOp::Ls => {
                    let n = tree_nfsrs::ls(w, &m, &src).await?;
                    w.count("entries", n as u64);
                    "LS_LR"
                }
                TreeOp::Cp => {
                    let (files, dirs) = tree_nfsrs::cp(w, &m, &src, &format!("copy{i}")).await?;
                    w.count("files_copied", files);
                    w.count("dirs_created", dirs);
                    "CP_R"
                }
                TreeOp::Rm => {
                    if i >= self.trees {
                        break;
                    }
                    let n = tree_nfsrs::rm(w, &m, &self.root(i)).await?;
                    w.count("entries_removed", n + 1);
                    "RM_R"
                }
            };
            // The whole-tree operation as one entry of its own kind (no
            // COMPOUND: its calls were recorded one by one).
            w.record_tree_op(kind, t.elapsed());
            w.done();
        }
        Ok(())
    }
}

/// A transaction error, with the hint for servers without transactions.
fn txn_error(e: txnfs_client::ClientError) -> anyhow::Error {
    use txnfs_client::ClientError as E;
    match e {
        E::TxnUnsupported | E::TxnExportUnsupported { .. } => {
            anyhow::Error::new(e).context(super::tcnfs::NO_TXN_HINT)
        }
        e => e.into(),
    }
}

/// `cp -R` as one transaction: read the sources (plain reads), then make the
/// directories (parents first) and write every file in ONE transaction.
async fn copy_txn(
    fs: &txnfs_client::Fs,
    dirs: &[String],
    pairs: &[(String, String)],
) -> anyhow::Result<()> {
    let srcs: Vec<&str> = pairs.iter().map(|(s, _)| s.as_str()).collect();
    let mut t = fs.transaction();
    let mut sorted: Vec<&String> = dirs.iter().collect();
    sorted.sort_by_key(|d| (d.matches('/').count(), d.as_str()));
    for d in sorted {
        t.mkdir(d, 0o755);
    }
    for ((src, dst), data) in pairs.iter().zip(fs.vread(&srcs).await) {
        let data = data.with_context(|| format!("read {src}"))?;
        t.write_file(dst, data, 0o644, true);
    }
    t.commit()
        .await
        .map_err(txn_error)
        .context("cp -R as one transaction")?;
    Ok(())
}

impl Workload for Tree {
    fn supports_txn(&self) -> bool {
        self.op != TreeOp::Ls
    }
    fn name(&self) -> &str {
        match self.op {
            TreeOp::Ls => "tree-ls",
            TreeOp::Cp => "tree-cp",
            TreeOp::Rm => "tree-rm",
        }
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"dirs": self.shape.dirs.len(), "files": self.shape.files.len(),
                           "bytes": self.shape.bytes(), "trees": self.trees, "txn": self.txn})
    }
    fn default_ops(&self) -> u64 {
        match self.op {
            TreeOp::Rm => self.trees,
            _ => 1,
        }
    }
    fn validate(&self, _clients: usize, threads: usize) -> anyhow::Result<()> {
        // (--txn with nfs-rs is refused in run: the driver is not known here.)
        anyhow::ensure!(
            threads == 1,
            "tree workloads run one thread per client (the vectorized client is concurrent itself)"
        );
        Ok(())
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let n = if self.op == TreeOp::Rm { self.trees } else { 1 };
            for k in 0..n {
                build(s, &self.root(k), &self.shape).await?;
            }
            Ok(())
        })
    }
    fn drivers(&self) -> &'static [Driver] {
        &[Driver::Txnfs, Driver::NfsRs]
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            if w.driver == Driver::NfsRs {
                anyhow::ensure!(!self.txn, "--txn runs with the txnfs driver only");
                return self.run_nfsrs(w).await;
            }
            let fs = w.fs();
            let src = join(&w.base, &self.root(0));
            w.ready().await;
            while let Some(i) = w.next_iter() {
                let before = w.client.stats();
                let t = Instant::now();
                let (kind, bytes) = match self.op {
                    TreeOp::Ls => {
                        let l = fs
                            .vlistdir(std::slice::from_ref(&src), true)
                            .await
                            .pop()
                            .context("no listing")??;
                        w.count("entries", l.len() as u64);
                        ("LS_LR", 0)
                    }
                    TreeOp::Cp => {
                        let dst = join(&w.base, &format!("copy{i}"));
                        let l = fs
                            .vlistdir(std::slice::from_ref(&src), true)
                            .await
                            .pop()
                            .context("no listing")??;
                        let mut dirs = vec![dst.clone()];
                        let mut pairs = Vec::new();
                        let mut bytes = 0;
                        for e in &l {
                            let rel = e.path.strip_prefix(&format!("{src}/")).unwrap_or(&e.path);
                            let to = join(&dst, rel);
                            if e.attrs.is_dir() {
                                dirs.push(to);
                            } else {
                                bytes += e.attrs.size.unwrap_or(0);
                                pairs.push((e.path.clone(), to));
                            }
                        }
                        if self.txn {
                            copy_txn(&fs, &dirs, &pairs).await?;
                            w.count("txn_commits", 1);
                        } else {
                            for r in fs.vmkdir(&dirs, 0o755, true).await {
                                r.context("mkdir")?;
                            }
                            for r in fs.vcopy(&pairs).await {
                                r.context("copy")?;
                            }
                        }
                        w.count("files_copied", pairs.len() as u64);
                        w.count("dirs_created", dirs.len() as u64);
                        ("CP_R", 2 * bytes)
                    }
                    TreeOp::Rm => {
                        if i >= self.trees {
                            break;
                        }
                        let root = join(&w.base, &self.root(i));
                        if self.txn {
                            fs.vremove_atomic(&[root], true)
                                .await
                                .map_err(txn_error)
                                .context("rm -r as one transaction")?;
                            w.count("txn_commits", 1);
                        } else {
                            for r in fs.vremove(&[root], true).await {
                                r.context("rm -r")?;
                            }
                        }
                        w.count(
                            "entries_removed",
                            (self.shape.dirs.len() + self.shape.files.len()) as u64,
                        );
                        ("RM_R", 0)
                    }
                };
                let after = w.client.stats();
                w.record_stats_delta(kind, &before, &after, t.elapsed(), bytes);
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let (d, f) = (self.shape.dirs.len() as u64, self.shape.files.len() as u64);
        let mut v = Vec::new();
        if s.driver == Driver::NfsRs {
            return self.expected_nfsrs(s);
        }
        match self.op {
            TreeOp::Ls => {
                v.push(Expectation::eq(
                    "entries listed == dirs - 1 + files",
                    s.counter("entries"),
                    it * (d - 1 + f),
                ));
                // Every directory is read at least once; later listings may come from
                // the client's cache under directory delegations (none on the wire).
                v.push(Expectation::ge(
                    "READDIR >= dirs (each listing, or once under directory delegations)",
                    s.ops("READDIR"),
                    d.min(it * d),
                ));
            }
            TreeOp::Cp => {
                v.push(Expectation::eq(
                    "files copied",
                    s.counter("files_copied"),
                    it * f,
                ));
                v.push(Expectation::eq(
                    "dirs created",
                    s.counter("dirs_created"),
                    it * d,
                ));
                v.push(Expectation::ge(
                    "OPEN >= 2 × files",
                    s.ops("OPEN"),
                    2 * it * f,
                ));
                v.push(Expectation::ge("CREATE >= dirs", s.ops("CREATE"), it * d));
            }
            TreeOp::Rm => {
                v.push(Expectation::ge(
                    "REMOVE >= dirs + files",
                    s.ops("REMOVE"),
                    it * (d + f),
                ));
            }
        }
        if self.txn && self.op != TreeOp::Ls {
            v.push(Expectation::eq(
                "one committed transaction per tree",
                s.counter("txn_commits"),
                it,
            ));
        }
        if d + f >= 50 && self.op != TreeOp::Cp {
            v.push(Expectation::that(
                "vectorized: COMPOUNDs × 4 < entries",
                s.rec.compounds * 4 < it * (d + f),
                format!("{} COMPOUNDs for {} entries", s.rec.compounds, it * (d + f)),
            ));
        }
        v
    }
}

impl Tree {
    /// With nfs-rs every entry costs at least one call: the counters and the
    /// per-entry op counts must match the tree exactly.
    fn expected_nfsrs(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        let (d, f) = (self.shape.dirs.len() as u64, self.shape.files.len() as u64);
        match self.op {
            TreeOp::Ls => vec![
                Expectation::eq(
                    "entries listed == dirs - 1 + files",
                    s.counter("entries"),
                    it * (d - 1 + f),
                ),
                Expectation::eq(
                    "one GETATTR per entry",
                    s.requests("GETATTR"),
                    it * (d - 1 + f),
                ),
                Expectation::ge("READDIR >= dirs", s.requests("READDIR"), it * d),
            ],
            TreeOp::Cp => vec![
                Expectation::eq("files copied", s.counter("files_copied"), it * f),
                Expectation::eq("dirs created", s.counter("dirs_created"), it * d),
                Expectation::eq("one OPEN per file", s.requests("OPEN"), it * f),
                Expectation::eq("one CLOSE per file", s.requests("CLOSE"), it * f),
                Expectation::eq("one CREATE per directory", s.requests("CREATE"), it * d),
            ],
            TreeOp::Rm => vec![Expectation::eq(
                "one REMOVE per entry",
                s.requests("REMOVE"),
                it * (d + f),
            )],
        }
    }
}
