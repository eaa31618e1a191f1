//! Random read and random write of one large file (seed 001 §3.1, §3.3): each
//! iteration is one READ or WRITE of `io_size` bytes (4 KB-1 MB) at a random
//! aligned offset; `--sync` makes writes FILE_SYNC (like O_SYNC), otherwise
//! they are UNSTABLE and each worker COMMITs once at the end. The sequential
//! variants (seqio.rs) use the same engine with a shared cursor.
//! Both also run with `--driver nfs-rs` (READ or UNSTABLE WRITE with the
//! anonymous stateid, one call at a time; a writer COMMITs once at the end);
//! `--file-size 4k` reads one block only, always at offset 0 (opsloop's `read0`).
//!
//! Tyche's Fig. 8 (seed 004 §VII): `--set join_threads=N --set join_io=128k --set
//! join_every_ms=10000` makes the first N workers "joiners" of `join_io`-byte requests,
//! worker i starting (i + 1) × `join_every_ms` into the timed part, while the others
//! keep to `--io-size`: the per-second series of the results shows what each joiner
//! changes (with `--duration`; our client only, random I/O only).
//!
//! `--set depth=N` keeps N requests in flight per worker (Tyche's "threads × 4
//! outstanding"; a sequential reader's readahead), each its own COMPOUND, sent as
//! soon as one returns (our client only; default 1, one at a time).

use crate::driver::{self, Driver};

use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::common::PreparedFile;
use crate::workloads::Params;
use crate::XorShift;
use anyhow::bail;
use bytes::Bytes;
use txnfs_client::Compound;
use txnfs_proto::nfs4::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};

const FILE: &str = "data";

pub struct BlockIo {
    pub name: &'static str,
    pub write: bool,
    pub random: bool,
    pub file_size: u64,
    pub io_size: u64,
    pub sync: bool,
    /// Iterations per run by default.
    pub default_ops: u64,
    /// Workers that join late with another request size (Tyche's Fig. 8).
    pub join: Option<Joiners>,
    /// Requests each worker keeps in flight (`--set depth`).
    pub depth: usize,
    file: PreparedFile,
}

/// The first `threads` workers issue `io_size`-byte requests, worker i from
/// (i + 1) × `every` into the timed part.
#[derive(Debug, Clone, Copy)]
pub struct Joiners {
    pub threads: u64,
    pub io_size: u64,
    pub every: std::time::Duration,
}

impl BlockIo {
    pub(crate) fn new(
        name: &'static str,
        write: bool,
        random: bool,
        file_size: u64,
        io_size: u64,
        sync: bool,
        default_ops: u64,
    ) -> anyhow::Result<BlockIo> {
        if io_size == 0 || io_size > (1 << 20) {
            bail!("--io-size must be between 1 byte and 1 MiB");
        }
        if file_size < io_size {
            bail!("--file-size must be at least --io-size");
        }
        Ok(BlockIo {
            name,
            write,
            random,
            file_size,
            io_size,
            sync,
            default_ops,
            join: None,
            depth: 1,
            file: PreparedFile::default(),
        })
    }

    /// `--set depth=N`: requests in flight per worker, 1 to 64.
    pub(crate) fn with_depth(mut self, p: &Params) -> anyhow::Result<BlockIo> {
        let depth = p.get_u64("depth", 1)?;
        if !(1..=64).contains(&depth) {
            bail!("--set depth must be between 1 and 64");
        }
        self.depth = depth as usize;
        Ok(self)
    }

    /// Random read/write: default a 64 MiB file (times --scale), 4 KiB I/O,
    /// 10,000 iterations (times --scale).
    pub fn random(write: bool, p: &Params) -> anyhow::Result<BlockIo> {
        let io = p.io_size.unwrap_or(4096);
        let threads = p.get_u64("join_threads", 0)?;
        let join_io = p.get_u64("join_io", 128 << 10)?;
        let every = std::time::Duration::from_millis(p.get_u64("join_every_ms", 10_000)?);
        let mut b = BlockIo::new(
            if write { "randwrite" } else { "randread" },
            write,
            true,
            p.file_size
                .unwrap_or_else(|| p.scaled(64 << 20))
                .max(io)
                .max(if threads > 0 { join_io } else { 0 }),
            io,
            p.sync,
            p.scaled(10_000),
        )?;
        if threads > 0 {
            if join_io == 0 || join_io > (1 << 20) {
                bail!("--set join_io must be between 1 byte and 1 MiB");
            }
            b.join = Some(Joiners {
                threads,
                io_size: join_io,
                every,
            });
        }
        b.with_depth(p)
    }

    fn offset(&self, rng: &mut XorShift, i: u64, io: u64) -> u64 {
        let blocks = (self.file_size / io).max(1);
        let b = if self.random {
            rng.next_u64() % blocks
        } else {
            i % blocks
        };
        b * io
    }

    /// This worker's request size and how long into the timed part it starts.
    fn role(&self, worker: usize) -> (u64, std::time::Duration) {
        match self.join {
            Some(j) if (worker as u64) < j.threads => (j.io_size, j.every * (worker as u32 + 1)),
            _ => (self.io_size, std::time::Duration::ZERO),
        }
    }
}

impl BlockIo {
    /// The timed loop with `depth` requests in flight: each its own COMPOUND, the
    /// next sent as soon as one returns, each recorded with its own latency.
    async fn run_deep(
        &self,
        w: &mut Worker,
        fh: &Bytes,
        sid: &txnfs_proto::nfs4::stateid4,
        io: u64,
        data: &Bytes,
        rng: &mut XorShift,
    ) -> anyhow::Result<()> {
        let mut flight = tokio::task::JoinSet::new();
        loop {
            while flight.len() < self.depth {
                let Some(i) = w.next_iter() else { break };
                let off = self.offset(rng, i, io);
                let (c, k) = self.request(fh, sid, off, io, data);
                let client = w.client.clone();
                flight.spawn(async move {
                    let t = std::time::Instant::now();
                    let r = client.compound(&c).await;
                    (c, k, off, r, t.elapsed())
                });
            }
            let Some(done) = flight.join_next().await else {
                return Ok(());
            };
            let (c, k, off, r, lat) = done?;
            let r = w.record_reply(&c, r, lat)?;
            crate::nfs::check(&r, crate::nfs::primary_op(&c))?;
            self.check_transfer(&r, k, io, off)?;
            w.done();
        }
    }

    /// One request of the timed loop: PUTFH and the READ or WRITE of `io` bytes at
    /// `off`, and that op's index.
    fn request(
        &self,
        fh: &Bytes,
        sid: &txnfs_proto::nfs4::stateid4,
        off: u64,
        io: u64,
        data: &Bytes,
    ) -> (Compound, usize) {
        let mut c = Compound::new();
        c.putfh(fh);
        let k = if self.write {
            c.write(sid.clone(), off, data.clone(), self.sync)
        } else {
            c.read(sid.clone(), off, io as u32)
        };
        (c, k)
    }

    /// An error unless the READ or WRITE at `k` moved all `io` bytes.
    fn check_transfer(
        &self,
        r: &txnfs_client::Reply,
        k: usize,
        io: u64,
        off: u64,
    ) -> anyhow::Result<()> {
        let (what, n) = if self.write {
            ("WRITE", r.write(k)?.count as u64)
        } else {
            ("READ", r.read(k)?.0.len() as u64)
        };
        if n != io {
            bail!("short {what}: {n} of {io} bytes at {off}");
        }
        Ok(())
    }

    /// The timed loop through nfs-rs, one call at a time: READs, or UNSTABLE WRITEs
    /// and one COMMIT at the end (as our client's writers do).
    async fn run_nfsrs(&self, w: &mut Worker, fh: Bytes) -> anyhow::Result<()> {
        let m = w.nfsrs()?;
        let mut rng = XorShift::new(w.global_idx() as u64 + 1);
        let io = self.io_size;
        let data = Bytes::from(crate::pattern(w.global_idx() as u64, io as usize));
        w.ready().await;
        while let Some(i) = w.next_iter() {
            let off = self.offset(&mut rng, i, io);
            if self.write {
                let r = w
                    .nfsrs_call(
                        driver::WRITE,
                        || format!("WRITE {io} bytes at {off}"),
                        m.write(fh.clone(), off, data.clone()),
                        |r| u64::from(r.count),
                    )
                    .await?;
                if u64::from(r.count) != io {
                    bail!("short WRITE: {} of {io} bytes at {off}", r.count);
                }
            } else {
                let d = w
                    .nfsrs_call(
                        driver::READ,
                        || format!("READ {io} bytes at {off}"),
                        m.read(fh.clone(), off, io as u32),
                        |d| d.len() as u64,
                    )
                    .await?;
                if d.len() as u64 != io {
                    bail!("short READ: {} of {io} bytes at {off}", d.len());
                }
            }
            w.done();
        }
        if self.write {
            w.nfsrs_call(
                driver::COMMIT,
                || "COMMIT of the whole file".to_string(),
                m.commit(fh.clone(), 0, 0),
                |_| 0,
            )
            .await?;
        }
        Ok(())
    }
}

impl Workload for BlockIo {
    fn name(&self) -> &str {
        self.name
    }

    fn params(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "file_size": self.file_size,
            "io_size": self.io_size,
            "sync": self.sync,
            "random": self.random,
        });
        if self.depth > 1 {
            v["depth"] = self.depth.into();
        }
        v
    }

    fn default_ops(&self) -> u64 {
        self.default_ops
    }

    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // Writers start from a file of full size too, so writes are
            // in place (as in the seed).
            self.file.fill(s, FILE, self.file_size).await
        })
    }

    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let fh = self.file.handle()?;
            if w.driver == Driver::NfsRs {
                if self.join.is_some() {
                    bail!("--set join_threads runs with our client only (--driver txnfs)");
                }
                if self.depth > 1 {
                    bail!("--set depth runs with our client only (--driver txnfs)");
                }
                let fh = w.nfsrs_fh(FILE, fh).await?;
                return self.run_nfsrs(w, fh).await;
            }
            // Untimed: open the file once.
            let mut c = Compound::new();
            c.putfh(&w.base_fh);
            let access = if self.write {
                OPEN4_SHARE_ACCESS_BOTH
            } else {
                OPEN4_SHARE_ACCESS_READ
            };
            let o = c.open(FILE.as_bytes(), access, &w.owner.clone(), None);
            let r = w.call(&c).await?;
            let sid = r.open(o)?.stateid;
            let (io, join_after) = self.role(w.global_idx());
            let data = Bytes::from(crate::pattern(w.global_idx() as u64, io as usize));
            let mut rng = XorShift::new(w.global_idx() as u64 + 1);
            w.ready().await;
            if !join_after.is_zero() {
                tokio::time::sleep(join_after).await;
            }
            if self.depth > 1 {
                self.run_deep(w, &fh, &sid, io, &data, &mut rng).await?;
            } else {
                while let Some(i) = w.next_iter() {
                    let off = self.offset(&mut rng, i, io);
                    let (c, k) = self.request(&fh, &sid, off, io, &data);
                    let r = w.call(&c).await?;
                    self.check_transfer(&r, k, io, off)?;
                    w.done();
                }
            }
            let mut c = Compound::new();
            c.putfh(&fh);
            if self.write && !self.sync {
                c.commit();
            }
            c.close(sid);
            w.call(&c).await?;
            Ok(())
        })
    }

    fn drivers(&self) -> &'static [Driver] {
        &[Driver::Txnfs, Driver::NfsRs]
    }

    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let workers = (s.clients * s.threads) as u64;
        let it = s.iterations();
        let mut v = Vec::new();
        if s.driver == Driver::NfsRs {
            // nfs-rs READs and WRITEs with the anonymous stateid: no OPEN or CLOSE.
            let op = if self.write { "WRITE" } else { "READ" };
            v.push(s.once_per_iteration(op));
            let commits = if self.write { workers } else { 0 };
            v.push(Expectation::eq(
                "COMMIT == workers for writes (else 0)",
                s.ops("COMMIT"),
                commits,
            ));
            v.push(Expectation::eq(
                "bytes == iterations × io_size",
                s.rec.bytes,
                it * self.io_size,
            ));
            return v;
        }
        if self.write {
            v.push(s.once_per_iteration("WRITE"));
            v.push(Expectation::eq("READ == 0", s.ops("READ"), 0));
            let commits = if self.sync { 0 } else { workers };
            v.push(Expectation::eq(
                "COMMIT == workers unless --sync (then 0)",
                s.ops("COMMIT"),
                commits,
            ));
        } else {
            v.push(s.once_per_iteration("READ"));
            v.push(Expectation::eq("WRITE == 0", s.ops("WRITE"), 0));
        }
        match self.join {
            None => v.push(Expectation::eq(
                "bytes == iterations × io_size",
                s.rec.bytes,
                it * self.io_size,
            )),
            // Every request is io_size or join_io bytes.
            Some(j) => {
                let (small, big) = (self.io_size.min(j.io_size), self.io_size.max(j.io_size));
                v.push(Expectation::that(
                    "bytes == small × io_size + big × join_io",
                    s.rec.bytes >= it * small
                        && (s.rec.bytes - it * small).is_multiple_of(big - small),
                    format!("{} bytes in {it} requests", s.rec.bytes),
                ));
            }
        }
        v.push(Expectation::eq("CLOSE == workers", s.ops("CLOSE"), workers));
        v.push(Expectation::eq(
            "no OPEN in the timed part",
            s.ops("OPEN"),
            0,
        ));
        v
    }
}
