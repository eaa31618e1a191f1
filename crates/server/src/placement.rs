//! Where a COMPOUND runs (ADR 0004, ADR 0013, ADR 0033): inline on the transport thread
//! that decoded it (no handoff), or on the blocking pool (one handoff).
//!
//! A COMPOUND that may wait for someone else runs on the pool, never inline: a
//! transaction (its commit syncs files and waits for the journal's group commit, and it
//! may wait for another's locks), and any request while a transaction is running or
//! open (it may wait up to the `txn` layer's lock wait for it). A wait that happens
//! inline all the same — a recall, or a transaction that began after the request was
//! placed — is made through `tokio::task::block_in_place`, so the runtime moves its
//! other work to another thread first. Waits are timed ([`WaitClock`]) and left out of
//! the pace below: only execution time says whether the file system is slow.
//!
//! Ops that never wait on storage run inline, also in a long COMPOUND (a client's batch
//! of small READs) up to 256 ops and 256 KiB of I/O; a longer one, or a long one with
//! any op that may wait, runs on the pool. Large stable WRITEs and a SETATTR that
//! truncates always go to the pool. Namespace changes (OPEN with create, CREATE,
//! REMOVE, RENAME, LINK) are in between: on a healthy file system each is one syscall
//! of a few tens of µs, cheaper to run inline than to hand off, but some file systems
//! make them slow at times — ext4 without a journal scans every recently deleted inode
//! when it allocates one, a create after a mass delete took milliseconds here — and a
//! slow op inline holds one of the
//! runtime's few worker threads, so the quick requests queued behind it (CLOSE, GETATTR)
//! wait for it. [`MetadataPace`] tracks how long recent namespace changes took and sends
//! them to the pool while they are slow; they are timed on the pool too, so they come
//! back inline as soon as the file system is quick again. A change whose call is alone
//! on its connection (`CallInfo::alone`) stays inline while the mean is within
//! [`SLOW_SYNC`], in the bound of large I/O below, as a short sync does: truncating a
//! 64 KiB file (an OPEN that truncates) takes about 200 µs here, and a client writing
//! files one call at a time paid the pool's handoff for every OPEN and, through the
//! rule below, every COMMIT.
//!
//! Large READs and unstable WRITEs are in between too (ADR 0040 addendum): one runs
//! inline, with no handoff (a 1 MiB READ on the pool cost about five context switches),
//! while fewer than [`MetadataPace::max_inline_large_io`] are running inline; the others
//! go to the pool, so that the workers never all copy megabytes while quick requests
//! wait, and a WRITE held by the kernel's dirty-page throttling holds one worker at most
//! per bound.
//!
//! A namespace change that truncates a non-empty file (an OPEN or v3 CREATE, UNCHECKED,
//! with a size among its attributes, of a name that is such a file now: what
//! `open(O_CREAT | O_TRUNC)` of an existing file sends) goes to the pool when its call
//! has company on its connection ([`with_truncation`]).
//!
//! Small stable WRITEs (FILE_SYNC or DATA_SYNC, up to [`INLINE_IO_BYTES`]) wait for one
//! sync of the data just written: a few hundred µs on a quick disk, of which the pool's
//! handoff and the wake-ups back cost about 50 here (ADR 0059). One runs inline, in the
//! same bound as large I/O, when three things hold: the call is alone on its connection
//! (`CallInfo::alone`: nothing else of the connection running or received, so the
//! connection's reader, held meanwhile, delays no one), recent syncs were quick (a
//! moving mean up to [`SLOW_SYNC`]), and namespace changes are within that too (such a
//! WRITE often follows an OPEN that creates). Otherwise it goes to the pool, so that the
//! syncs of concurrent writers still overlap there. It blocks the worker plainly:
//! `block_in_place` around it was measured slower than the pool. A COMMIT is placed the
//! same way (ADR 0059 addendum): it syncs whatever the file has unwritten, which for a
//! client that writes one call at a time is one small file's data; a long one raises
//! the mean and sends the next ones to the pool, and the bound keeps it to one worker.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// READs and unstable WRITEs up to this many bytes do not wait on the disk (the page
/// cache takes them): they run inline, in NFSv4 COMPOUNDs and NFSv3 calls alike.
pub const INLINE_IO_BYTES: usize = 64 << 10;

/// How a COMPOUND may wait on storage: the most of its ops' answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Blocking {
    /// No storage wait (state, attributes from caches, small reads and writes).
    No,
    /// Namespace changes: quick unless the file system is having a slow time.
    Metadata,
    /// A stable WRITE of up to [`INLINE_IO_BYTES`], or a COMMIT: one sync, short for a
    /// client that writes one call at a time (module documentation).
    Sync,
    /// A READ or unstable WRITE larger than [`INLINE_IO_BYTES`]: inline within a bound.
    LargeIo,
    /// May wait on the disk (large stable writes, truncation) or is rare and heavy.
    Yes,
}

/// Where a COMPOUND runs, given how its ops may wait on storage (`ops`), whether it is
/// a transaction (`txn`), and whether any transaction is running or open
/// (`transactions`): see the module documentation.
pub fn needs_pool(ops: Blocking, txn: bool, transactions: bool) -> Blocking {
    if txn || transactions {
        Blocking::Yes
    } else {
        ops
    }
}

/// A namespace change that truncates a non-empty file (`truncates`, asked only when it
/// matters) runs on the pool when its call has company on its connection: truncating
/// takes about 100 µs here under the file's own lock, so truncations of several
/// threads overlap on the pool instead of waiting one after another on the
/// connection's reader. Creates of new files stay as they are: in one directory they
/// serialise on its lock wherever they run, and on the pool they only contend for it
/// (ADR 0059).
pub fn with_truncation(b: Blocking, alone: bool, truncates: impl FnOnce() -> bool) -> Blocking {
    if b == Blocking::Metadata && !alone && truncates() {
        Blocking::Yes
    } else {
        b
    }
}

/// Whether `name` in the directory of the handle `dir` (as the client sent it) is a
/// non-empty regular file now: what makes a create with a size a truncation
/// (`Backend::peek_size`; a hint, the file may change before the create runs).
pub fn names_a_non_empty_file(
    srv: &crate::server::Server,
    dir: &bytes::Bytes,
    name: &[u8],
) -> bool {
    match srv.fh_from_wire(dir) {
        Ok(crate::fh::Fh::Obj(d)) => d
            .export
            .backend
            .peek_size(&d.key, name)
            .is_some_and(|n| n > 0),
        _ => false,
    }
}

/// The time one COMPOUND spent waiting for others: the server's recall waits and the
/// `txn` layer's lock waits add to it through the COMPOUND's `OpCtx`.
pub use txnfs_backend::WaitClock;

/// A moving average of how long COMPOUNDs with namespace changes took to execute.
#[derive(Debug)]
pub struct MetadataPace {
    /// Exponentially weighted mean in nanoseconds (weight 1/8 per sample).
    mean_ns: AtomicU64,
    /// Above this mean, namespace changes run on the blocking pool.
    slow: Duration,
    /// The same mean for COMPOUNDs placed as [`Blocking::Sync`].
    sync_ns: AtomicU64,
    /// Large READs and WRITEs running inline now, and the most that may.
    large_io: AtomicUsize,
    max_large_io: usize,
}

/// A COMPOUND placed inline; it holds a large I/O's place in the bound until dropped.
#[must_use = "the COMPOUND runs inline while this is held"]
pub struct Inline<'a>(Option<&'a AtomicUsize>);

impl Drop for Inline<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.0 {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A handoff to the blocking pool costs two context switches (~10 µs each way on these
/// machines, seed 004); a request that stalls a worker for longer than this delays the
/// requests queued behind it by more than the handoff would have cost them.
pub const DEFAULT_SLOW: Duration = Duration::from_micros(200);

/// Above this mean a small stable WRITE runs on the pool, even alone: a disk this slow
/// (a spinning one, a loaded one) makes the handoff a small share of the call, and
/// holding a worker and a connection's reader for longer is not worth it.
pub const SLOW_SYNC: Duration = Duration::from_millis(1);

impl Default for MetadataPace {
    fn default() -> Self {
        MetadataPace::new(DEFAULT_SLOW)
    }
}

impl MetadataPace {
    pub fn new(slow: Duration) -> Self {
        // Half the runtime's workers (it has one per core) may copy large I/O at once.
        // `TXNFS_INLINE_LARGE_IO=N` sets another bound, for A/B measurements (0: every
        // large READ and WRITE on the pool, as before ADR 0040's addendum).
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let max_large_io = std::env::var("TXNFS_INLINE_LARGE_IO")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or((cores / 2).max(1));
        MetadataPace {
            mean_ns: AtomicU64::new(0),
            slow,
            sync_ns: AtomicU64::new(0),
            large_io: AtomicUsize::new(0),
            max_large_io,
        }
    }

    /// The most large READs and WRITEs that run inline at once.
    pub fn max_inline_large_io(&self) -> usize {
        self.max_large_io
    }

    /// Whether a COMPOUND of this kind runs inline, for kinds without a bound (large
    /// I/O and short syncs are placed by [`MetadataPace::place`]).
    pub fn inline(&self, b: Blocking) -> bool {
        match b {
            Blocking::No => true,
            Blocking::Metadata => self.mean() <= self.slow,
            Blocking::Sync | Blocking::LargeIo | Blocking::Yes => false,
        }
    }

    /// Where a COMPOUND of this kind runs: `Some` inline (keep it while running),
    /// `None` on the blocking pool. `alone`: the call is alone on its connection
    /// (`CallInfo::alone`), which a short sync needs to run inline.
    pub fn place(&self, b: Blocking, alone: bool) -> Option<Inline<'_>> {
        match b {
            Blocking::LargeIo => {}
            Blocking::Sync => {
                let quick = Duration::from_nanos(self.sync_ns.load(Ordering::Relaxed)) <= SLOW_SYNC
                    && self.mean() <= SLOW_SYNC;
                if !(alone && quick) {
                    return None;
                }
            }
            // Namespace changes slower than `slow` but within `SLOW_SYNC` (truncating
            // a 64 KiB file takes about 200 µs here): alone on its connection, such a
            // change delays no other call of it, so it runs inline in the bound, as a
            // short sync does, instead of paying the pool's handoff.
            Blocking::Metadata if self.mean() > self.slow => {
                if !(alone && self.mean() <= SLOW_SYNC) {
                    return None;
                }
            }
            _ => return self.inline(b).then_some(Inline(None)),
        }
        let mut n = self.large_io.load(Ordering::Relaxed);
        while n < self.max_large_io {
            match self.large_io.compare_exchange_weak(
                n,
                n + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Inline(Some(&self.large_io))),
                Err(now) => n = now,
            }
        }
        None
    }

    /// Record how long a COMPOUND of this kind took to execute (wherever it ran).
    pub fn record(&self, b: Blocking, took: Duration) {
        let mean = match b {
            Blocking::Metadata => &self.mean_ns,
            Blocking::Sync => &self.sync_ns,
            _ => return,
        };
        let sample = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // Concurrent updates may lose one another's sample: harmless for an average
        // that only steers placement, and cheaper than a compare-and-swap loop.
        let old = mean.load(Ordering::Relaxed);
        let new = if sample >= old {
            old + (sample - old) / 8
        } else {
            old - (old - sample) / 8
        };
        mean.store(new, Ordering::Relaxed);
    }

    /// The current mean execution time of namespace changes.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.mean_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn transactions_and_their_neighbours_run_on_the_pool() {
        assert_eq!(needs_pool(Blocking::No, false, false), Blocking::No);
        assert_eq!(
            needs_pool(Blocking::Metadata, false, false),
            Blocking::Metadata
        );
        assert_eq!(needs_pool(Blocking::No, true, false), Blocking::Yes);
        assert_eq!(needs_pool(Blocking::No, false, true), Blocking::Yes);
    }

    #[test]
    fn quick_and_heavy_compounds_ignore_the_pace() {
        let p = MetadataPace::default();
        for _ in 0..100 {
            p.record(Blocking::Metadata, 10_000 * US);
        }
        assert!(p.inline(Blocking::No));
        assert!(!p.inline(Blocking::Yes));
        p.record(Blocking::No, 1_000_000 * US);
        p.record(Blocking::Yes, US);
        assert!(p.mean() > 9_000 * US, "only namespace changes are timed");
    }

    #[test]
    fn large_io_run_inline_within_the_bound() {
        let p = MetadataPace::default();
        let max = p.max_inline_large_io();
        let held: Vec<_> = (0..max)
            .map(|i| {
                p.place(Blocking::LargeIo, false)
                    .unwrap_or_else(|| panic!("read {i} inline"))
            })
            .collect();
        assert!(
            p.place(Blocking::LargeIo, false).is_none(),
            "past the bound: the pool"
        );
        assert!(
            p.place(Blocking::No, false).is_some(),
            "small ops are not bounded"
        );
        assert!(p.place(Blocking::Yes, true).is_none());
        drop(held);
        assert!(
            p.place(Blocking::LargeIo, false).is_some(),
            "places given back"
        );
    }

    #[test]
    fn a_short_sync_runs_inline_only_alone_quick_and_within_the_bound() {
        let p = MetadataPace::default();
        assert!(
            p.place(Blocking::Sync, false).is_none(),
            "another call of the connection runs or waits: the pool"
        );
        let held: Vec<_> = (0..p.max_inline_large_io())
            .map(|i| {
                p.place(Blocking::Sync, true)
                    .unwrap_or_else(|| panic!("sync {i} inline"))
            })
            .collect();
        assert!(
            p.place(Blocking::Sync, true).is_none(),
            "past the large-I/O bound: the pool"
        );
        assert!(
            p.place(Blocking::LargeIo, false).is_none(),
            "one bound for both"
        );
        drop(held);
        // A slow disk: after a few slow syncs, alone or not, the pool.
        let mut n = 0;
        while p.place(Blocking::Sync, true).is_some() {
            p.record(Blocking::Sync, 8_000 * US);
            n += 1;
        }
        assert!(n <= 3, "took {n} slow samples");
        assert!(
            p.mean() < US,
            "syncs are timed apart from namespace changes"
        );
        while p.place(Blocking::Sync, true).is_none() {
            p.record(Blocking::Sync, 200 * US);
        }
        // Slow namespace changes keep it on the pool too (an OPEN that creates may
        // share its COMPOUND).
        for _ in 0..20 {
            p.record(Blocking::Metadata, 3_000 * US);
        }
        assert!(p.place(Blocking::Sync, true).is_none());
    }

    #[test]
    fn a_slowish_namespace_change_runs_inline_only_alone_and_within_the_bound() {
        let p = MetadataPace::default();
        // Truncations of 64 KiB files: above `slow`, within `SLOW_SYNC`.
        while p.mean() <= DEFAULT_SLOW {
            p.record(Blocking::Metadata, 400 * US);
        }
        assert!(!p.inline(Blocking::Metadata), "slow for calls with company");
        assert!(
            p.place(Blocking::Metadata, false).is_none(),
            "with company: the pool"
        );
        let held: Vec<_> = (0..p.max_inline_large_io())
            .map(|i| {
                p.place(Blocking::Metadata, true)
                    .unwrap_or_else(|| panic!("change {i} inline"))
            })
            .collect();
        assert!(
            p.place(Blocking::Metadata, true).is_none(),
            "past the large-I/O bound: the pool"
        );
        assert!(
            p.place(Blocking::Sync, true).is_none(),
            "one bound for short syncs too"
        );
        drop(held);
        assert!(
            p.place(Blocking::Sync, true).is_some(),
            "a short sync alone is not held back by such changes"
        );
        // Slower than a short sync may be: the pool, alone or not.
        while p.mean() <= SLOW_SYNC {
            p.record(Blocking::Metadata, 5_000 * US);
        }
        assert!(p.place(Blocking::Metadata, true).is_none());
        assert!(p.place(Blocking::Sync, true).is_none());
    }

    #[test]
    fn slow_metadata_moves_to_the_pool_and_comes_back() {
        let p = MetadataPace::default();
        assert!(p.inline(Blocking::Metadata), "inline until proven slow");
        for _ in 0..20 {
            p.record(Blocking::Metadata, 30 * US);
        }
        assert!(p.inline(Blocking::Metadata));
        // The file system turns slow: within a few samples, off the transport threads.
        let mut n = 0;
        while p.inline(Blocking::Metadata) {
            p.record(Blocking::Metadata, 3_000 * US);
            n += 1;
        }
        assert!(n <= 3, "took {n} slow samples");
        // Quick again (timed on the pool): back inline within a few dozen samples.
        let mut n = 0;
        while !p.inline(Blocking::Metadata) {
            p.record(Blocking::Metadata, 30 * US);
            n += 1;
        }
        assert!((5..40).contains(&n), "took {n} quick samples");
    }
}
