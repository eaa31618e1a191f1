//! TC-NFS Writefiles / Readfiles (seed 003 §4.1.1): 1,000 files (scaled) of
//! one fixed size (1 KB-16 MB, `--file-size`, default 64 KB).
//!
//! Without `--files-per-txn` and `--txn` (the per-file mode), one iteration
//! is one file as a normal client sends it: Writefiles writes it fully (OPEN
//! create/truncate, WRITEs of ≤ 1 MiB, COMMIT unless `--sync`, CLOSE),
//! Readfiles reads a pre-written file fully (OPEN, READs, CLOSE).
//!
//! With `--files-per-txn N` (the batch mode) one iteration is N files:
//! - Writefiles with `--txn` is ONE transaction of N `write_file` steps
//!   (OPEN create/truncate, FILE_SYNC WRITEs, CLOSE each; durable at commit)
//!   through the client's transaction builder; plain, the same files are
//!   written with FILE_SYNC through the vectorized client (`Fs::vwrite`),
//!   which spreads them over the COMPOUNDs it sends at once (one per session
//!   slot, up to 16, so that the server syncs them side by side: ADR 0061;
//!   the transaction is one COMPOUND); a file still under the write
//!   delegation its last OPEN got is written under it, with no OPEN or
//!   CLOSE (ADR 0060). Every write overwrites a file prepare made (a transaction then backs up what it truncates): each
//!   worker has its own set of `files` files, and with `--sharing P` a share P
//!   of every iteration's files comes from one set all workers write in
//!   common, in the same order (worst-case conflicts: transactions on the
//!   same files wait, roll back and retry). After the timed part each worker
//!   reads its last iteration's files back (untimed) and checks the bytes.
//! - Readfiles reads N pre-written files per iteration: `--txn` as one
//!   transactional COMPOUND (PUTFH, OPEN, READ, CLOSE per file), plain
//!   through `Fs::vread` (the same ops, packed).

use super::common;
use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use anyhow::Context;
use bytes::Bytes;
use std::time::Instant;
use txnfs_client::compound::CURRENT_STATEID;
use txnfs_client::{ClientError, Compound};
use txnfs_proto::nfs4::OPEN4_SHARE_ACCESS_READ;
use txnfs_testbed::data::join;

pub struct TcNfs {
    pub write: bool,
    pub files: u64,
    pub file_size: u64,
    pub sync: bool,
    /// Transactional COMPOUNDs (batch mode).
    pub txn: bool,
    /// Files per iteration in batch mode; `None`: the per-file mode.
    pub batch: Option<u64>,
    /// Share of each iteration's files taken from the common set (Writefiles).
    pub sharing: f64,
}

/// What `--txn` against a server without transactions says.
pub const NO_TXN_HINT: &str = "--txn needs a txnfs server with transactions \
     (not `txnfs serve --no-txn`, not NFS-Ganesha); run without --txn there";

impl TcNfs {
    pub fn new(write: bool, p: &Params) -> TcNfs {
        TcNfs {
            write,
            files: p.files_or(1000),
            file_size: p.file_size.unwrap_or(64 << 10),
            sync: p.sync,
            txn: p.txn,
            batch: p.files_per_txn.or(p.txn.then_some(1)),
            sharing: p.sharing,
        }
    }

    /// (shared, own) files of one iteration in batch mode.
    fn split(&self) -> (u64, u64) {
        let n = self.batch.unwrap_or(1);
        let shared = if self.write {
            ((n as f64) * self.sharing).round() as u64
        } else {
            0
        };
        (shared.min(n), n - shared.min(n))
    }

    /// Names of iteration `j` (the worker's own count) of worker `me`.
    fn batch_names(&self, me: usize, j: u64) -> Vec<(String, bool)> {
        let (shared, own) = self.split();
        let mut v = Vec::with_capacity((shared + own) as usize);
        for k in 0..shared {
            v.push((format!("s{}", (j * shared + k) % self.files), true));
        }
        for k in 0..own {
            let idx = (j * own + k) % self.files;
            if self.write {
                v.push((format!("w{me}-{idx}"), false));
            } else {
                v.push((format!("f{idx}"), false));
            }
        }
        v
    }

    /// A worker's data for its iterations: two buffers, alternating, so that
    /// every overwrite changes the bytes.
    fn data(&self, me: usize, j: u64) -> Bytes {
        Bytes::from(crate::pattern(
            1000 + 2 * me as u64 + (j % 2),
            self.file_size as usize,
        ))
    }

    async fn run_batch(&self, w: &mut Worker) -> anyhow::Result<()> {
        let fs = w.fs();
        let me = w.global_idx();
        let bufs = [self.data(me, 0), self.data(me, 1)];
        let kind = match (self.write, self.txn) {
            (true, true) => "TXN_WRITEFILES",
            (true, false) => "VWRITE",
            (false, true) => "TXN_READFILES",
            (false, false) => "VREAD",
        };
        w.ready().await;
        let mut j = 0u64;
        let mut last = None;
        while w.next_iter().is_some() {
            let names = self.batch_names(me, j);
            let paths: Vec<String> = names.iter().map(|(n, _)| join(&w.base, n)).collect();
            let data = &bufs[(j % 2) as usize];
            let before = w.client.stats();
            let delegated_before = w.client.cache_stats().delegated_writes;
            let t = Instant::now();
            let outcome = if self.write {
                self.write_batch(w, &fs, &paths, data).await
            } else {
                self.read_batch(w, &fs, &names).await
            };
            let lat = t.elapsed();
            let after = w.client.stats();
            let bytes = paths.len() as u64 * self.file_size;
            match outcome {
                Ok(()) => {
                    w.record_stats_delta(kind, &before, &after, lat, bytes);
                    let delegated = w.client.cache_stats().delegated_writes - delegated_before;
                    if delegated > 0 {
                        w.count("files_under_delegation", delegated);
                    }
                    w.count(
                        if self.write {
                            "files_written"
                        } else {
                            "files_read"
                        },
                        paths.len() as u64,
                    );
                    if self.txn {
                        w.count("txn_commits", 1);
                        w.count(
                            "txn_compounds",
                            after.compounds.saturating_sub(before.compounds),
                        );
                    }
                    w.done();
                    last = Some(j);
                }
                Err(e) => match e.downcast_ref::<ClientError>() {
                    // Conflicting on every try (shared files): counted, not done.
                    Some(ClientError::TxnConflict { .. }) => w.count("txn_conflicts", 1),
                    Some(
                        ClientError::TxnUnsupported | ClientError::TxnExportUnsupported { .. },
                    ) => {
                        return Err(e.context(NO_TXN_HINT));
                    }
                    _ => return Err(e),
                },
            }
            j += 1;
        }
        if self.write {
            if let Some(j) = last {
                w.set_recording(false);
                let names = self.batch_names(me, j);
                self.verify(w, &fs, &names, &bufs[(j % 2) as usize]).await?;
            }
        }
        Ok(())
    }

    async fn write_batch(
        &self,
        w: &mut Worker,
        fs: &txnfs_client::Fs,
        paths: &[String],
        data: &Bytes,
    ) -> anyhow::Result<()> {
        if self.txn {
            let mut t = w.client.transaction();
            for p in paths {
                t.write_file(p, data.clone(), 0o644, false);
            }
            let steps = t.commit().await?;
            let written: u64 = steps.iter().map(|s| s.written()).sum();
            anyhow::ensure!(
                written == paths.len() as u64 * self.file_size,
                "transaction wrote {written} bytes of {}",
                paths.len() as u64 * self.file_size
            );
        } else {
            let files: Vec<(&str, Bytes)> =
                paths.iter().map(|p| (p.as_str(), data.clone())).collect();
            for (p, r) in paths.iter().zip(fs.vwrite(&files, true).await) {
                r.with_context(|| format!("write {p}"))?;
            }
        }
        Ok(())
    }

    async fn read_batch(
        &self,
        w: &mut Worker,
        fs: &txnfs_client::Fs,
        names: &[(String, bool)],
    ) -> anyhow::Result<()> {
        if self.txn {
            let mut c = Compound::new();
            let mut reads = Vec::new();
            for (n, _) in names {
                c.putfh(&w.base_fh);
                c.open(n.as_bytes(), OPEN4_SHARE_ACCESS_READ, &w.owner, None);
                let mut off = 0;
                loop {
                    let len = (self.file_size - off).min(common::MAX_IO);
                    reads.push(c.read(CURRENT_STATEID, off, len as u32));
                    off += len;
                    if off >= self.file_size {
                        break;
                    }
                }
                c.close(CURRENT_STATEID);
            }
            let r = w.client.compound_txn(&c).await?;
            crate::nfs::check(&r, "TXN_READFILES")?;
            let mut got = 0;
            for i in reads {
                got += r.read(i)?.0.len() as u64;
            }
            let want = names.len() as u64 * self.file_size;
            anyhow::ensure!(got == want, "read {got} bytes of {want}");
        } else {
            let paths: Vec<String> = names.iter().map(|(n, _)| join(&w.base, n)).collect();
            for (p, r) in paths.iter().zip(fs.vread(&paths).await) {
                let d = r.with_context(|| format!("read {p}"))?;
                anyhow::ensure!(
                    d.len() as u64 == self.file_size,
                    "read {} bytes of {} from {p}",
                    d.len(),
                    self.file_size
                );
            }
        }
        Ok(())
    }

    /// Read the last iteration's files back: the worker's own ones hold its
    /// bytes, shared ones some writer's (right size).
    async fn verify(
        &self,
        w: &mut Worker,
        fs: &txnfs_client::Fs,
        names: &[(String, bool)],
        data: &Bytes,
    ) -> anyhow::Result<()> {
        // Plain writes of shared files are not atomic: another worker may have
        // truncated one and not written it yet. Transactions are: a shared file
        // always holds some writer's whole data.
        let names: Vec<&(String, bool)> = names
            .iter()
            .filter(|(_, shared)| self.txn || !shared)
            .collect();
        let paths: Vec<String> = names.iter().map(|(n, _)| join(&w.base, n)).collect();
        let mut ok = 0;
        for ((p, (_, shared)), r) in paths.iter().zip(names).zip(fs.vread(&paths).await) {
            let got = r.with_context(|| format!("read back {p}"))?;
            anyhow::ensure!(
                got.len() == data.len(),
                "read back {p}: {} bytes, wrote {}",
                got.len(),
                data.len()
            );
            anyhow::ensure!(
                *shared || got == *data,
                "read back {p}: not the bytes written"
            );
            ok += 1;
        }
        w.set_recording(true);
        w.count("files_verified", ok);
        w.set_recording(false);
        Ok(())
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
        serde_json::json!({"files": self.files, "file_size": self.file_size, "sync": self.sync,
                           "txn": self.txn, "files_per_txn": self.batch,
                           "sharing": self.sharing})
    }
    fn default_ops(&self) -> u64 {
        self.files.div_ceil(self.batch.unwrap_or(1))
    }
    fn supports_txn(&self) -> bool {
        true
    }
    fn validate(&self, _clients: usize, _threads: usize) -> anyhow::Result<()> {
        if self.batch.is_some() && !self.write && self.sharing > 0.0 {
            anyhow::bail!("--sharing applies to writefiles only");
        }
        Ok(())
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            if !self.write {
                return common::create_numbered(s, self.files, self.file_size).await;
            }
            if self.batch.is_none() {
                return Ok(());
            }
            // Every timed write overwrites one of these.
            let (shared, own) = self.split();
            let mut names = Vec::new();
            if shared > 0 {
                names.extend((0..self.files).map(|i| format!("s{i}")));
            }
            if own > 0 {
                for me in 0..s.clients * s.threads {
                    names.extend((0..self.files).map(|i| format!("w{me}-{i}")));
                }
            }
            let files: Vec<(String, u64)> =
                names.into_iter().map(|n| (n, self.file_size)).collect();
            common::create_files(s, &s.base_fh, &files).await
        })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            if self.batch.is_some() {
                return self.run_batch(w).await;
            }
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
        if let Some(n) = self.batch {
            return self.expected_batch(s, n);
        }
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

impl TcNfs {
    fn expected_batch(&self, s: &RunStats, n: u64) -> Vec<Expectation> {
        let it = s.iterations();
        let files = it * n;
        let per = common::reads_for(self.file_size);
        let mut v = vec![
            Expectation::eq("bytes == files × size", s.rec.bytes, files * self.file_size),
            // The client's counters are per client: with several threads per
            // client each sees the others' ops too. A file written under the write
            // delegation its last OPEN got needs no OPEN or CLOSE (RFC 8881 §10.4).
            Expectation::ge(
                "OPEN + files under delegation >= files",
                s.ops("OPEN") + s.counter("files_under_delegation"),
                files,
            ),
            Expectation::ge(
                "CLOSE + files under delegation >= files",
                s.ops("CLOSE") + s.counter("files_under_delegation"),
                files,
            ),
        ];
        if self.write {
            v.push(Expectation::eq(
                "files written == iterations × files per txn",
                s.counter("files_written"),
                files,
            ));
            v.push(Expectation::ge(
                "WRITE >= files × ⌈size / 1 MiB⌉",
                s.ops("WRITE"),
                files * per.max(1),
            ));
            v.push(Expectation::eq(
                "COMMIT == 0 (FILE_SYNC)",
                s.ops("COMMIT"),
                0,
            ));
            let (shared, own) = self.split();
            let checked = if self.txn { shared + own } else { own };
            v.push(Expectation::that(
                "last iteration's files read back with the bytes written",
                it == 0 || s.counter("files_verified") >= checked.min(files),
                format!("{} files verified", s.counter("files_verified")),
            ));
        } else {
            v.push(Expectation::eq(
                "files read == iterations × files per txn",
                s.counter("files_read"),
                files,
            ));
            v.push(Expectation::ge("READ >= files", s.ops("READ"), files * per));
        }
        if self.txn {
            v.push(Expectation::eq(
                "one committed transaction per iteration",
                s.counter("txn_commits"),
                it,
            ));
            v.push(Expectation::ge(
                "a COMPOUND per transaction (more when retried)",
                s.counter("txn_compounds"),
                it,
            ));
        } else if s.threads == 1 {
            // The vectorized client packs reads into one COMPOUND when they fit
            // the server's limits and spreads FILE_SYNC writes over up to 16
            // COMPOUNDs in flight; a file larger than its share of a request or
            // reply (about 512 KiB of WRITE, 7/8 MiB / N of READ) continues in
            // further COMPOUNDs.
            let per_file = 2 + self.file_size.div_ceil(256 << 10);
            v.push(Expectation::le(
                "COMPOUNDs <= files × (2 + ⌈size / 256 KiB⌉)",
                s.rec.compounds,
                files.max(it) * per_file,
            ));
        }
        v
    }
}
