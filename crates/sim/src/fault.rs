//! A fault-injecting, effect-counting backend: wraps another backend and, driven by a
//! seeded generator, fails calls with EIO or ENOSPC and adds simulated latency.
//!
//! Faults are injected *before* the inner call, so a failed call changed nothing: a
//! failed WRITE is reported as failed and never half-applied. That is the contract the
//! model relies on ("faults never corrupt acknowledged data").
//!
//! Every mutation that the inner backend applied is counted in the [`Ledger`] under a
//! token naming the request that caused it (a WRITE's payload, a created or renamed-to
//! name; the simulation makes those unique per request). A token applied twice means a
//! request was executed twice: the reply cache failed.
//!
//! A [`Layer`]: one `gate` call, then the same call on the backend below; what it does
//! not gate forwards by the trait's defaults.

use crate::rng::Rng;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use txnfs_backend::layer::Layer;
use txnfs_backend::{
    Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, DirChange, DirEntry, FileKey,
    Linked, Made, NodeKind, OpCtx, RenameChange, Result, SetAttrs,
};
use txnfs_state::clock::ManualClock;

/// How often each fault happens, in calls per thousand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// EIO on data and namespace calls (read, write, commit, setattr, create, remove,
    /// rename, lookup).
    pub io_per_mille: u32,
    /// ENOSPC on calls that allocate (write, setattr, create).
    pub nospace_per_mille: u32,
    /// EIO on `getattr`. Separate because the server stats around every operation, so
    /// this one decides how often post-operation attributes are missing.
    pub getattr_io_per_mille: u32,
    /// A simulated delay (the clock moves forward 1..=`max_delay_ms`).
    pub delay_per_mille: u32,
    pub max_delay_ms: u64,
    /// Harness self-test only: a lying backend that flips the last byte of a write
    /// and reports success. Acknowledged data is then wrong, which the simulation
    /// must report (invariant 2).
    pub corrupt_write_per_mille: u32,
    /// Faults also hit a transaction's rollback and the txn layer's recovery (off in
    /// the standard plan: a failed undo step is not retried, see the ignored test
    /// `undo_faults_keep_transactions_atomic`).
    pub undo_faults: bool,
    /// Faults also hit `lookup` inside transactions (off in the standard plan: the txn
    /// layer's MAKE_NODE and LINK take a failed existence check for "absent", record
    /// an undo that unlinks the name, and when the name did exist, the rollback
    /// deletes it; see the ignored test `txn_lookup_faults_keep_existing_names`).
    pub txn_lookup_faults: bool,
}

impl FaultPlan {
    /// The plan of the standard sweep.
    pub fn standard() -> Self {
        FaultPlan {
            io_per_mille: 15,
            nospace_per_mille: 10,
            getattr_io_per_mille: 3,
            delay_per_mille: 50,
            max_delay_ms: 40,
            corrupt_write_per_mille: 0,
            undo_faults: false,
            txn_lookup_faults: false,
        }
    }

    /// No faults: the wrapper only counts.
    pub fn none() -> Self {
        FaultPlan::default()
    }
}

/// FNV-1a: a stable 64-bit name for a payload (std's hasher is not guaranteed stable).
pub fn token(kind: u8, data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(&kind).chain(data.iter()) {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub const TOKEN_WRITE: u8 = b'w';
pub const TOKEN_CREATE: u8 = b'c';
pub const TOKEN_RENAME: u8 = b'r';

/// What the inner backend applied, and what the wrapper injected.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<LedgerInner>,
}

#[derive(Debug, Default)]
struct LedgerInner {
    applied: BTreeMap<u64, u32>,
    injected: u64,
}

impl Ledger {
    pub fn applied(&self, token: u64) -> u32 {
        self.inner
            .lock()
            .map(|l| l.applied.get(&token).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Faults injected so far (the simulation tolerates I/O errors only after one).
    pub fn injected(&self) -> u64 {
        self.inner.lock().map(|l| l.injected).unwrap_or(0)
    }

    fn count(&self, token: u64) {
        if let Ok(mut l) = self.inner.lock() {
            *l.applied.entry(token).or_insert(0) += 1;
        }
    }

    fn inject(&self) {
        if let Ok(mut l) = self.inner.lock() {
            l.injected += 1;
        }
    }
}

pub struct FaultBackend {
    inner: Arc<dyn Backend>,
    plan: FaultPlan,
    rng: Mutex<Rng>,
    clock: Arc<ManualClock>,
    ledger: Arc<Ledger>,
    spare: Mutex<Spare>,
}

/// Which calls the fault plan spares right now (set by the simulation around what it
/// must not disturb: a transaction's rollback, recovery, its own checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spare {
    /// Faults as planned.
    #[default]
    Nothing,
    /// A transaction commits: only its syncs (`commit`) may fail, and after one
    /// injected fault (the layer then rolls back) nothing more.
    AllButCommit,
    /// Inside a transaction: no faults on `lookup` (see [`FaultPlan::txn_lookup_faults`]).
    Lookups,
    /// No faults at all.
    All,
}

thread_local! {
    /// Whether this thread drives the simulation. Calls from other threads (the txn
    /// layer's background cleaner) would draw from the fault stream at times no seed
    /// decides: they are refused instead, and change nothing.
    static DRIVER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Mark the calling thread as one that drives a simulation (see [`FaultBackend`]).
pub fn adopt_thread() {
    DRIVER.with(|d| d.set(true));
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Meta,
    Io,
    Alloc,
    /// `commit` (a sync): EIO like `Io`.
    Sync,
    /// `lookup`: EIO like `Io`.
    Lookup,
}

impl FaultBackend {
    pub fn new(
        inner: Arc<dyn Backend>,
        plan: FaultPlan,
        rng: Rng,
        clock: Arc<ManualClock>,
        ledger: Arc<Ledger>,
    ) -> Self {
        FaultBackend {
            inner,
            plan,
            rng: Mutex::new(rng),
            clock,
            ledger,
            spare: Mutex::new(Spare::Nothing),
        }
    }

    /// Spare calls from faults (until set back to [`Spare::Nothing`]).
    pub fn set_spare(&self, spare: Spare) {
        if let Ok(mut s) = self.spare.lock() {
            *s = spare;
        }
    }

    /// Whether lookups inside transactions may fail ([`FaultPlan::txn_lookup_faults`]).
    pub fn txn_lookup_faults(&self) -> bool {
        self.plan.txn_lookup_faults
    }

    /// Whether faults may hit rollbacks and recovery too ([`FaultPlan::undo_faults`]).
    pub fn undo_faults(&self) -> bool {
        self.plan.undo_faults
    }

    pub fn spare(&self) -> Spare {
        self.spare.lock().map(|s| *s).unwrap_or(Spare::Nothing)
    }

    /// Decide this call's fate before it reaches the inner backend.
    fn gate(&self, call: Call) -> Result<()> {
        if !DRIVER.with(|d| d.get()) {
            return Err(BackendError::Io(
                "the simulation refuses calls from background threads".into(),
            ));
        }
        let spare = self.spare();
        let Ok(mut rng) = self.rng.lock() else {
            return Ok(());
        };
        if spare == Spare::All
            || (spare == Spare::AllButCommit && call != Call::Sync)
            || (spare == Spare::Lookups && call == Call::Lookup)
        {
            return Ok(());
        }
        if rng.chance(self.plan.delay_per_mille) {
            let ms = 1 + rng.below(self.plan.max_delay_ms.max(1));
            self.clock.advance(Duration::from_millis(ms));
        }
        let io = match call {
            Call::Meta => self.plan.getattr_io_per_mille,
            Call::Io | Call::Alloc | Call::Sync | Call::Lookup => self.plan.io_per_mille,
        };
        if rng.chance(io) {
            self.ledger.inject();
            if spare == Spare::AllButCommit {
                drop(rng);
                self.set_spare(Spare::All);
            }
            return Err(BackendError::Io("injected by the simulation".into()));
        }
        if call == Call::Alloc && rng.chance(self.plan.nospace_per_mille) {
            self.ledger.inject();
            return Err(BackendError::NoSpace);
        }
        Ok(())
    }
}

/// Writes [`Layer`] methods that pass one `gate` (the call kind after `=>`) and then make
/// the same call on the backend below. With `applied KIND(arg)`, a call the backend below
/// applied is counted in the ledger under the token of `arg` (with `if field`, only when
/// the result's `field` is true).
macro_rules! gated {
    (@count $ledger:expr, $r:ident, $kind:ident, $payload:ident) => {
        $ledger.count(token($kind, $payload))
    };
    (@count $ledger:expr, $r:ident, $kind:ident, $payload:ident, $field:ident) => {
        if $r.$field {
            $ledger.count(token($kind, $payload))
        }
    };
    ($(
        fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty => $call:expr
            $(, applied $kind:ident($payload:ident) $(if $field:ident)?)?;
    )*) => {
        $(
            fn $name(&self $(, $arg: $ty)*) -> $ret {
                self.gate($call)?;
                let r = self.inner.$name($($arg),*)?;
                $(gated!(@count self.ledger, r, $kind, $payload $(, $field)?);)?
                Ok(r)
            }
        )*
    };
}

/// Faults are a layer: the calls it does not gate (root, statfs, the compound hooks)
/// forward to the backend below unchanged.
impl Layer for FaultBackend {
    fn lower(&self) -> &dyn Backend {
        &*self.inner
    }

    #[rustfmt::skip]
    gated! {
        fn getattr(&self, cx: &OpCtx, key: &FileKey) -> Result<Attrs> => Call::Meta;
        fn lookup(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> => Call::Lookup;
        fn lookup_parent(&self, cx: &OpCtx, dir: &FileKey) -> Result<(FileKey, Attrs)> => Call::Io;
        fn read(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> => Call::Io;
        fn commit(&self, cx: &OpCtx, key: &FileKey) -> Result<()> => Call::Sync;
        fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> => Call::Io;
        fn link(&self, cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked> => Call::Alloc;
        fn readlink(&self, cx: &OpCtx, key: &FileKey) -> Result<Bytes> => Call::Io;
        fn readdir(&self, cx: &OpCtx, dir: &FileKey, cookie: u64, max_entries: usize) -> Result<(Vec<DirEntry>, bool)> => Call::Io;
        fn clone_range(&self, cx: &OpCtx, src: &FileKey, src_off: u64, dst: &FileKey, dst_off: u64, len: u64) -> Result<CloneMethod> => Call::Alloc;
        fn create_file(&self, cx: &OpCtx, dir: &FileKey, name: &[u8], mode: CreateMode, attrs: &SetAttrs) -> Result<Created>
            => Call::Alloc, applied TOKEN_CREATE(name) if created;
        fn make_node(&self, cx: &OpCtx, dir: &FileKey, name: &[u8], kind: &NodeKind, attrs: &SetAttrs) -> Result<Made>
            => Call::Alloc, applied TOKEN_CREATE(name);
        fn rename(&self, cx: &OpCtx, from_dir: &FileKey, from: &[u8], to_dir: &FileKey, to: &[u8]) -> Result<RenameChange>
            => Call::Io, applied TOKEN_RENAME(to);
    }

    fn setattr(&self, cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs> {
        self.gate(if attrs.size.is_some() {
            Call::Alloc
        } else {
            Call::Io
        })?;
        self.inner.setattr(cx, key, attrs)
    }

    fn write(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        self.gate(Call::Alloc)?;
        let corrupt = self.plan.corrupt_write_per_mille > 0
            && !data.is_empty()
            && self
                .rng
                .lock()
                .is_ok_and(|mut r| r.chance(self.plan.corrupt_write_per_mille));
        let r = if corrupt {
            let mut bad = data.to_vec();
            if let Some(last) = bad.last_mut() {
                *last ^= 0xff;
            }
            self.inner.write(cx, key, offset, &bad, sync)?
        } else {
            self.inner.write(cx, key, offset, data, sync)?
        };
        self.ledger.count(token(TOKEN_WRITE, data));
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_backend::memory::MemoryBackend;

    fn wrap(plan: FaultPlan) -> (Arc<dyn Backend>, Arc<Ledger>) {
        adopt_thread();
        let ledger = Arc::new(Ledger::default());
        let b: Arc<dyn Backend> = Arc::new(FaultBackend::new(
            Arc::new(MemoryBackend::new()),
            plan,
            Rng::new(3),
            Arc::new(ManualClock::new()),
            ledger.clone(),
        ));
        (b, ledger)
    }

    #[test]
    fn counts_applied_writes_only() {
        let (b, ledger) = wrap(FaultPlan::none());
        let root = b.root().unwrap();
        let cx = OpCtx::default();
        let key = b
            .create_file(&cx, &root, b"f", CreateMode::Guarded, &SetAttrs::default())
            .unwrap()
            .key;
        b.write(&cx, &key, 0, b"hello", true).unwrap();
        b.write(&cx, &key, 0, b"hello", true).unwrap();
        assert_eq!(ledger.applied(token(TOKEN_WRITE, b"hello")), 2);
        assert_eq!(ledger.applied(token(TOKEN_CREATE, b"f")), 1);
        assert_eq!(ledger.injected(), 0);
    }

    #[test]
    fn failed_writes_change_nothing() {
        let (b, ledger) = wrap(FaultPlan {
            io_per_mille: 500,
            nospace_per_mille: 500,
            ..FaultPlan::none()
        });
        let root = b.root().unwrap();
        let cx = OpCtx::default();
        let key = loop {
            if let Ok(c) = b.create_file(
                &cx,
                &root,
                b"f",
                CreateMode::Unchecked,
                &SetAttrs::default(),
            ) {
                break c.key;
            }
        };
        let mut ok = 0;
        for i in 0..200u32 {
            let data = i.to_be_bytes();
            if b.write(&cx, &key, 0, &data, true).is_ok() {
                ok += 1;
                assert_eq!(ledger.applied(token(TOKEN_WRITE, &data)), 1);
            } else {
                assert_eq!(ledger.applied(token(TOKEN_WRITE, &data)), 0);
            }
        }
        assert!(ok > 0 && ok < 200, "some writes fail, some succeed: {ok}");
        assert!(ledger.injected() > 0);
    }
}
