//! The `txn` layer: a COMPOUND marked as a transaction (`OpCtx::txn`) happens entirely
//! or not at all, in isolation, durably, and survives crashes (ADR 0021).
//!
//! - **Isolation** ([`locks`]): every call, transactional or plain, takes locks on the
//!   objects and directory entries it reads or changes; a transaction keeps them until
//!   it ends. A conflict a transaction cannot wait out fails its op with `Conflict`
//!   (NFS4ERR_DELAY) and rolls it back.
//! - **Atomicity** ([`undo`]): before each change a transaction makes, the layer saves
//!   what the change destroys (overwritten ranges cloned into a backup file; removed
//!   objects moved into the backup directory instead of unlinked) and appends an undo
//!   entry to the journal ([`journal`]). `end_compound(false)` applies the entries
//!   backwards.
//! - **Durability**: `end_compound(true)` syncs every file and directory the
//!   transaction changed, then appends a `Commit` record and waits until it is on stable
//!   storage (group commit), all before the reply leaves.
//! - **Recovery**: opening the layer rolls back every transaction the journal holds
//!   without a `Commit` or `Aborted` record, then empties the backup directory.
//!
//! Plain COMPOUNDs pass through with only the per-call locks.

mod journal;
mod locks;
mod undo;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::layer::Layer;
use crate::{
    Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, Creds, DirEntry, FileKey,
    FileType, Linked, Made, NodeKind, OpCtx, RenameChange, Result, SetAttrs, TxnSpan,
};
use journal::{Journal, Record};
use locks::{Kind, LockId, LockTable, Mode, Owner};
use undo::{Backups, Undo};

/// The hidden directory at the export root that holds the backups.
pub const HIDDEN: &[u8] = b".txnfs";
const BACKUP_DIR: &[u8] = b"backup";

thread_local! {
    /// The COMPOUND this thread runs (id, transactional), set by `begin_compound`: the
    /// read calls carry no `OpCtx`, and the server runs a whole COMPOUND on one thread.
    static CURRENT: Cell<(u64, bool)> = const { Cell::new((0, false)) };
    /// The read locks the plain COMPOUND of this thread holds to its end: (layer, lock,
    /// mode), the layer by address (a COMPOUND may touch several exports).
    static HELD: RefCell<HashSet<(usize, LockId, Mode)>> = RefCell::new(HashSet::new());
}

/// Who reads on this thread: its transaction, its plain COMPOUND (read locks kept to
/// the end), or a call outside any COMPOUND.
fn current_reader() -> Owner {
    let (id, txn) = CURRENT.with(Cell::get);
    let kind = match (txn, id) {
        (true, _) => Kind::Txn,
        (false, 0) => Kind::Call,
        (false, _) => Kind::Compound,
    };
    Owner { id, kind }
}

/// Where a transaction's process may be made to die on purpose (crash tests): set
/// `TXNFS_TXN_FAULT=<point>[:<n>]` and the n-th (default first) time the layer reaches
/// `<point>` the process aborts, as a `kill -9` would stop it there.
#[derive(Debug, Default)]
struct FaultPoint {
    point: Option<String>,
    left: AtomicU64,
}

impl FaultPoint {
    fn from_env() -> Self {
        let Ok(v) = std::env::var("TXNFS_TXN_FAULT") else {
            return FaultPoint::default();
        };
        let (point, n) = match v.split_once(':') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (v, 1),
        };
        FaultPoint {
            point: Some(point),
            left: AtomicU64::new(n.max(1)),
        }
    }

    /// The points (for documentation and tests): `after-journal` (an undo entry is
    /// written, its change not yet made), `between-ops` (a change was made),
    /// `before-commit` (all changes made and synced, no commit record yet),
    /// `after-commit` (commit record durable, reply not yet sent), `during-undo` (a
    /// rollback has undone one change), `during-recovery` (recovery has undone one
    /// change).
    fn hit(&self, point: &str) {
        if self.point.as_deref() == Some(point) && self.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            eprintln!("txnfs: TXNFS_TXN_FAULT: dying at {point}");
            std::process::abort();
        }
    }
}

/// Backups to delete: (backup directory, names).
type CleanupQueue = mpsc::Sender<(FileKey, Vec<Bytes>)>;

/// One open transaction.
struct Txn {
    txid: u64,
    owner: Owner,
    /// Locks held until the end, each once.
    locks: Vec<(LockId, Mode)>,
    held: HashSet<(LockId, Mode)>,
    undo: Vec<Undo>,
    /// Offset the journal must be durable to before the commit record counts.
    journal_end: u64,
    /// Objects this transaction created: their undo removes them, so changes to them
    /// need no backup.
    created: HashSet<FileKey>,
    /// Ranges of existing files already saved (key → (offset, end) list).
    saved: HashMap<FileKey, Vec<(u64, u64)>>,
    /// Files and directories to sync at commit.
    dirty: HashSet<FileKey>,
    next_backup: u64,
}

/// Settings of the layer (`txn:key=value,...`).
#[derive(Debug, Clone)]
pub struct TxnSettings {
    /// How long a call waits for a lock before answering NFS4ERR_DELAY.
    pub lock_wait: Duration,
    /// Sync the journal before every change that overwrites data (strict power-loss
    /// safety, at one fdatasync per such change); off, an undo entry is safe from
    /// `kill -9` at once and from power loss at the commit (ADR 0021).
    pub sync_undo: bool,
    /// Tests only: recovery stops (as a crash would) before its n-th undo step.
    #[doc(hidden)]
    pub stop_recovery_after: Option<usize>,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings {
            lock_wait: Duration::from_millis(200),
            sync_undo: false,
            stop_recovery_after: None,
        }
    }
}

/// Counters (for tests and the closing figures).
#[derive(Debug, Default)]
pub struct TxnStats {
    pub committed: AtomicU64,
    pub aborted: AtomicU64,
    pub recovered: AtomicU64,
    pub backups: AtomicU64,
}

pub struct TxnLayer {
    lower: Arc<dyn Backend>,
    root: FileKey,
    /// `.txnfs/backup`, made when the first backup is (so exports that never see a
    /// transaction never see the directory either).
    backup_dir: Mutex<Option<FileKey>>,
    journal: Journal,
    locks: LockTable,
    open: Mutex<HashMap<u64, Txn>>,
    next_txid: AtomicU64,
    settings: TxnSettings,
    faults: FaultPoint,
    cleanup: Mutex<Option<CleanupQueue>>,
    /// The COMPOUNDs whose transactions recovery rolled back when the layer opened.
    rolled_back: Vec<u64>,
    pub stats: Arc<TxnStats>,
}

/// The layer's own context for backups, undo and recovery: root, outside any COMPOUND.
fn layer_cx() -> OpCtx {
    OpCtx::for_creds(Creds::default())
}

fn io(e: std::io::Error) -> BackendError {
    BackendError::Io(format!("txn journal: {e}"))
}

impl TxnLayer {
    /// Opens the layer over `lower`, with its journal at `journal` (`None`: in memory),
    /// and rolls back what an earlier run left unfinished.
    pub fn open(
        lower: Arc<dyn Backend>,
        journal: Option<&Path>,
        settings: TxnSettings,
    ) -> Result<TxnLayer> {
        let root = lower.root()?;
        let cx = layer_cx();
        let faults = FaultPoint::from_env();
        let stats = Arc::new(TxnStats::default());
        let (journal, found) = match journal {
            Some(p) => Journal::open(p).map_err(io)?,
            None => (Journal::in_memory(), Vec::new()),
        };
        let needs_backups = found
            .iter()
            .any(|f| f.undo.iter().any(|u| u.backup().is_some()));
        let backup_dir = match lower.lookup(&root, HIDDEN) {
            Ok((hidden, _)) => match lower.lookup(&hidden, BACKUP_DIR) {
                Ok((k, _)) => Some(k),
                Err(BackendError::NotFound) => None,
                Err(e) => return Err(e),
            },
            Err(BackendError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let backup_dir = match backup_dir {
            Some(k) => Some(k),
            // Backups the journal names but no directory: they are all gone; a
            // directory to look them up in (empty) keeps the undo code uniform.
            None if needs_backups => Some(make_backup_dir(&*lower, &cx, &root)?),
            None => None,
        };
        let backups = Backups {
            lower: &*lower,
            dir: backup_dir.as_ref().unwrap_or(&root),
        };
        let mut steps = 0usize;
        let mut rolled_back = Vec::new();
        for f in found.iter().filter(|f| !f.committed && !f.aborted) {
            rolled_back.push(f.compound);
            tracing::warn!(
                txid = f.txid,
                changes = f.undo.len(),
                "txn recovery: rolling back an unfinished transaction"
            );
            let todo = f.undo.len().saturating_sub(f.undone);
            for u in f.undo[..todo].iter().rev() {
                if let Err(e) = u.apply(&cx, &backups) {
                    tracing::error!(txid = f.txid, "txn recovery: undo failed: {e}");
                }
                if settings.stop_recovery_after == Some(steps) {
                    // As if the process died after the step and before its mark.
                    return Err(BackendError::Io("recovery stopped (test)".into()));
                }
                steps += 1;
                mark_undone(&journal, &*lower, &cx, f.txid, u, settings.sync_undo)?;
                faults.hit("during-recovery");
            }
            for u in &f.undo {
                let _ = lower.commit(&cx, u.touches());
            }
            // Durably done before the backups go: a crash from here on must not undo
            // again without them.
            let end = journal
                .append(f.txid, &Record::Aborted, false)
                .map_err(io)?;
            journal.sync_to(end).map_err(io)?;
            stats.recovered.fetch_add(1, Ordering::Relaxed);
        }
        // Whatever is left in the backup directory belongs to no open transaction.
        if let Some(d) = &backup_dir {
            purge(&*lower, &cx, d)?;
        }
        journal.rewind().map_err(io)?;
        let next_txid = found.iter().map(|f| f.txid).max().unwrap_or(0) + 1;
        let layer = TxnLayer {
            lower: lower.clone(),
            root,
            backup_dir: Mutex::new(backup_dir),
            journal,
            locks: LockTable::new(settings.lock_wait),
            open: Mutex::new(HashMap::new()),
            next_txid: AtomicU64::new(next_txid),
            settings,
            faults,
            cleanup: Mutex::new(None),
            rolled_back,
            stats,
        };
        *layer.cleanup.lock().unwrap_or_else(|p| p.into_inner()) = Some(spawn_cleaner(lower));
        Ok(layer)
    }

    /// The backup directory, made on first use.
    fn backups(&self) -> Result<FileKey> {
        let mut d = self.backup_dir.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = &*d {
            return Ok(k.clone());
        }
        let k = make_backup_dir(&*self.lower, &layer_cx(), &self.root)?;
        *d = Some(k.clone());
        Ok(k)
    }

    fn is_hidden(&self, dir: &FileKey, name: &[u8]) -> bool {
        name == HIDDEN && *dir == self.root
    }

    fn refuse_hidden(&self, dir: &FileKey, name: &[u8]) -> Result<()> {
        if self.is_hidden(dir, name) {
            Err(BackendError::Access)
        } else {
            Ok(())
        }
    }

    /// The owner of a change made with `cx`: its transaction, or a plain call (whose
    /// change locks last as long as the call).
    fn owner_of(cx: &OpCtx) -> Owner {
        if cx.txn {
            Owner {
                id: cx.span.key(cx.compound),
                kind: Kind::Txn,
            }
        } else {
            Owner {
                id: cx.compound,
                kind: Kind::Call,
            }
        }
    }

    fn with_txn<R>(&self, owner: Owner, f: impl FnOnce(&mut Txn) -> R) -> Option<R> {
        if !owner.is_txn() {
            return None;
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get_mut(&owner.id).map(f)
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Does the plain COMPOUND `id` of this thread hold read locks here?
    fn compound_holds(&self, id: u64) -> bool {
        let me = self.addr();
        id != 0
            && CURRENT.with(Cell::get).0 == id
            && HELD.with(|h| h.borrow().iter().any(|&(l, _, _)| l == me))
    }

    /// Takes `set` for `owner`: a transaction keeps it until its end, so does a plain
    /// COMPOUND its read locks; a plain call gets a guard that gives them back.
    fn lock(&self, owner: Owner, set: &[(LockId, Mode)]) -> Result<LockGuard<'_>> {
        let in_txn = self.with_txn(owner, |t| {
            let todo: Vec<_> = set
                .iter()
                .copied()
                .filter(|l| !t.held.contains(l))
                .collect();
            (todo, !t.locks.is_empty())
        });
        if let Some((todo, holding)) = in_txn {
            if !todo.is_empty() {
                self.locks
                    .acquire(owner, &todo, holding)
                    .map_err(|_| BackendError::Conflict)?;
                self.with_txn(owner, |t| {
                    for l in todo {
                        if t.held.insert(l) {
                            t.locks.push(l);
                        } else {
                            self.locks.release(owner, l.0, l.1);
                        }
                    }
                });
            }
            return Ok(LockGuard::none(self));
        }
        // (A transactional owner without an open transaction here, e.g. a call made
        // after its COMPOUND ended, locks as a plain call.)
        let owner = match owner.kind {
            Kind::Txn => Owner {
                kind: Kind::Call,
                ..owner
            },
            _ => owner,
        };
        if owner.kind == Kind::Compound {
            let me = self.addr();
            let todo: Vec<_> = HELD.with(|h| {
                let h = h.borrow();
                set.iter()
                    .copied()
                    .filter(|&(id, m)| !h.contains(&(me, id, m)))
                    .collect()
            });
            if !todo.is_empty() {
                let holding = self.compound_holds(owner.id);
                self.locks
                    .acquire(owner, &todo, holding)
                    .map_err(|_| BackendError::Conflict)?;
                HELD.with(|h| {
                    let mut h = h.borrow_mut();
                    for (id, m) in todo {
                        h.insert((me, id, m));
                    }
                });
            }
            return Ok(LockGuard::none(self));
        }
        self.locks
            .acquire(owner, set, self.compound_holds(owner.id))
            .map_err(|_| BackendError::Conflict)?;
        Ok(LockGuard {
            table: self,
            owner,
            set: set.to_vec(),
        })
    }

    /// Gives back the read locks of this thread's plain COMPOUND `id` here.
    fn release_compound(&self, id: u64) {
        let me = self.addr();
        let mine: Vec<_> = HELD.with(|h| {
            let mut h = h.borrow_mut();
            let mine: Vec<_> = h.iter().copied().filter(|&(l, _, _)| l == me).collect();
            for e in &mine {
                h.remove(e);
            }
            mine
        });
        let owner = Owner {
            id,
            kind: Kind::Compound,
        };
        for (_, lock, mode) in mine {
            self.locks.release(owner, lock, mode);
        }
    }

    /// Adds object locks found after a lookup to `guard` (a plain call must not wait
    /// while it holds locks: it gives up with `Conflict` for the retry loop instead).
    fn lock_more(
        &self,
        guard: &mut LockGuard<'_>,
        owner: Owner,
        set: &[(LockId, Mode)],
    ) -> Result<()> {
        if owner.is_txn() {
            // A transaction's locks live in the transaction, not in the guard.
            self.lock(owner, set)?;
            return Ok(());
        }
        if !self.locks.try_acquire(owner, set) {
            return Err(BackendError::Conflict);
        }
        guard.set.extend_from_slice(set);
        Ok(())
    }

    /// Runs a plain mutator that locks in two steps (entries, then the objects found
    /// under them) until it gets every lock without waiting while holding one, or the
    /// lock wait runs out. (Not when its COMPOUND holds read locks: that one must not
    /// wait at all, see `locks`.)
    fn retrying<R>(&self, owner: Owner, mut f: impl FnMut() -> Result<R>) -> Result<R> {
        let deadline = std::time::Instant::now() + self.settings.lock_wait;
        loop {
            match f() {
                Err(BackendError::Conflict)
                    if !owner.is_txn()
                        && !self.compound_holds(owner.id)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => return r,
            }
        }
    }

    /// Records `u` for the transaction of `owner` (journal first), before its change.
    fn record(&self, owner: Owner, u: Undo, overwrites: bool) -> Result<()> {
        let (txid, first) = self
            .with_txn(owner, |t| {
                let first = t.txid == 0;
                if first {
                    t.txid = self.next_txid.fetch_add(1, Ordering::Relaxed);
                }
                (t.txid, first)
            })
            .ok_or(BackendError::Inval)?;
        if first {
            let begin = Record::Begin { compound: owner.id };
            self.journal.append(txid, &begin, true).map_err(io)?;
        }
        let end = self
            .journal
            .append(txid, &Record::Undo(u.clone()), false)
            .map_err(io)?;
        if overwrites && self.settings.sync_undo {
            self.journal.sync_to(end).map_err(io)?;
        }
        self.with_txn(owner, |t| {
            t.journal_end = end;
            t.undo.push(u);
        });
        self.faults.hit("after-journal");
        Ok(())
    }

    fn backup_name(&self, owner: Owner) -> Bytes {
        self.with_txn(owner, |t| {
            t.next_backup += 1;
            // The txid may not be assigned yet: name backups by the COMPOUND and count,
            // unique within the backup directory for this run (it is purged at start).
            Bytes::from(format!("{}.{}", t.owner.id, t.next_backup))
        })
        .unwrap_or_default()
    }

    /// Saves `[offset, offset+len)` of `key` (as far as it exists) before a change
    /// overwrites or cuts it, and records the undo entry. Skips files the transaction
    /// created and ranges it saved already.
    fn save_range(&self, owner: Owner, key: &FileKey, offset: u64, len: u64) -> Result<()> {
        let covered = self
            .with_txn(owner, |t| {
                t.dirty.insert(key.clone());
                t.created.contains(key)
                    || t.saved
                        .get(key)
                        .is_some_and(|r| r.iter().any(|&(a, b)| a <= offset && offset + len <= b))
            })
            .unwrap_or(true);
        if covered {
            return Ok(());
        }
        let attrs = self.lower.getattr(key)?;
        let keep = attrs.size.saturating_sub(offset).min(len);
        let backup = self.backup_name(owner);
        if keep > 0 {
            let cx = layer_cx();
            let dir = self.backups()?;
            let bk = self
                .lower
                .create_file(
                    &cx,
                    &dir,
                    &backup,
                    CreateMode::Guarded,
                    &SetAttrs {
                        mode: Some(0o600),
                        ..SetAttrs::default()
                    },
                )?
                .key;
            self.lower
                .clone_range(&cx, key, offset, &bk.clone(), 0, keep)?;
            self.stats.backups.fetch_add(1, Ordering::Relaxed);
        }
        self.record(
            owner,
            Undo::Data {
                key: key.clone(),
                offset,
                len: keep,
                backup,
                old_size: attrs.size,
                atime: attrs.atime,
                mtime: attrs.mtime,
            },
            keep > 0,
        )?;
        self.with_txn(owner, |t| {
            // Once saved, the original bytes of the range and the original size are
            // restorable, whatever later changes do (undo runs backwards).
            t.saved
                .entry(key.clone())
                .or_default()
                .push((offset, offset.saturating_add(len)));
        });
        Ok(())
    }

    /// Before `key` (now `old` bytes long) is set to `size`: a cut saves the tail, a
    /// growth records the old size.
    fn save_for_size(&self, owner: Owner, key: &FileKey, size: u64, old: u64) -> Result<()> {
        let from = size.min(old);
        self.save_range(owner, key, from, old.saturating_sub(from).max(1))
    }

    /// Moves (`dir`, `name`) into the backups instead of deleting it, recording how to
    /// move it back.
    fn move_to_backup(
        &self,
        owner: Owner,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
    ) -> Result<crate::DirChange> {
        let backup = self.backup_name(owner);
        self.record(
            owner,
            Undo::Restore {
                dir: dir.clone(),
                name: Bytes::copy_from_slice(name),
                backup: backup.clone(),
            },
            false,
        )?;
        let ch = self
            .lower
            .rename(cx, dir, name, &self.backups()?, &backup)?;
        self.mark_dirty(owner, dir);
        Ok(ch.from)
    }

    /// Before a call that makes the name (`dir`, `name`): the undo that removes it. The
    /// name must not exist yet (under the entry's lock it cannot appear meanwhile), or
    /// the undo would remove what was there before.
    fn record_new_name(&self, owner: Owner, dir: &FileKey, name: &[u8]) -> Result<()> {
        if self.lower.lookup(dir, name).is_ok() {
            return Err(BackendError::Exists);
        }
        self.record(
            owner,
            Undo::Unlink {
                dir: dir.clone(),
                name: Bytes::copy_from_slice(name),
            },
            false,
        )
    }

    fn mark_dirty(&self, owner: Owner, key: &FileKey) {
        self.with_txn(owner, |t| {
            t.dirty.insert(key.clone());
        });
    }

    fn mutated(&self, owner: Owner) {
        if owner.is_txn() {
            self.faults.hit("between-ops");
        }
    }

    /// An object's type and whether it is an empty directory (REMOVE, RENAME checks).
    fn is_nonempty_dir(&self, key: &FileKey) -> Result<bool> {
        let (entries, _) = self.lower.readdir(key, 0, 1)?;
        Ok(!entries.is_empty())
    }

    /// Ends transaction `t`: commit (sync, durable commit record) or roll back.
    fn finish(&self, t: Txn, ok: bool) -> Result<()> {
        let cx = layer_cx();
        // Made by the first backup; without one no entry looks in it.
        let dir = self
            .backup_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| self.root.clone());
        let backups = Backups {
            lower: &*self.lower,
            dir: &dir,
        };
        let asked = ok;
        let mut ok = ok;
        let mut failure = None;
        if t.txid != 0 && ok {
            // Durable before the reply: the data and names first, then the record.
            for k in &t.dirty {
                if let Err(e) = self.lower.commit(&cx, k) {
                    if !matches!(e, BackendError::NotFound | BackendError::Stale) {
                        tracing::error!("txn {}: sync failed ({e}); rolling back", t.txid);
                        ok = false;
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if t.txid != 0 {
            if ok {
                self.faults.hit("before-commit");
            } else {
                for u in t.undo.iter().rev() {
                    if let Err(e) = u.apply(&cx, &backups) {
                        tracing::error!("txn {}: undo failed: {e}", t.txid);
                    }
                    if let Err(e) = mark_undone(
                        &self.journal,
                        &*self.lower,
                        &cx,
                        t.txid,
                        u,
                        self.settings.sync_undo,
                    ) {
                        tracing::error!("txn {}: {e}", t.txid);
                    }
                    self.faults.hit("during-undo");
                }
                for u in &t.undo {
                    let _ = self.lower.commit(&cx, u.touches());
                }
            }
            let rec = if ok { Record::Commit } else { Record::Aborted };
            let r = self
                .journal
                .append(t.txid, &rec, false)
                .and_then(|end| self.journal.sync_to(end));
            if let Err(e) = &r {
                // The locks are released below all the same; the next start's recovery
                // decides from what reached the journal.
                tracing::error!("txn {}: journal: {e}", t.txid);
            }
            let r = r.map_err(io);
            self.journal.close_txn();
            if ok {
                self.faults.hit("after-commit");
            }
            let names: Vec<Bytes> = t.undo.iter().filter_map(|u| u.backup().cloned()).collect();
            if !names.is_empty() {
                if let Some(tx) = &*self.cleanup.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = tx.send((dir.clone(), names));
                }
            }
            if let Err(e) = r {
                failure = Some(e);
            }
        }
        let counter = if ok {
            &self.stats.committed
        } else {
            &self.stats.aborted
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.locks.release_set(t.owner, &t.locks);
        match failure {
            // A commit that could not be made durable was rolled back (or its outcome
            // is left to recovery): the COMPOUND must not be reported as done.
            Some(e) if asked => Err(e),
            _ => Ok(()),
        }
    }

    /// Locks currently held (tests).
    pub fn held_locks(&self) -> usize {
        self.locks.held_count()
    }
}

/// Notes in the journal that `u` (of `txid`) was applied. The note needs no fsync
/// against `kill -9`; with `strict` (power loss) the step's effect is synced first and
/// the note after, so a note never reaches the disk before its step.
fn mark_undone(
    j: &Journal,
    lower: &dyn Backend,
    cx: &OpCtx,
    txid: u64,
    u: &Undo,
    strict: bool,
) -> Result<()> {
    if strict {
        let _ = lower.commit(cx, u.touches());
    }
    let end = j.append(txid, &Record::Undone, false).map_err(io)?;
    if strict {
        j.sync_to(end).map_err(io)?;
    }
    Ok(())
}

/// A plain call's locks, given back when it returns.
struct LockGuard<'a> {
    table: &'a TxnLayer,
    owner: Owner,
    set: Vec<(LockId, Mode)>,
}

impl<'a> LockGuard<'a> {
    fn none(table: &'a TxnLayer) -> Self {
        LockGuard {
            table,
            owner: Owner {
                id: 0,
                kind: Kind::Txn,
            },
            set: Vec::new(),
        }
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.table.locks.release_set(self.owner, &self.set);
    }
}

/// `.txnfs/backup` at the export root (root-only), made if missing.
fn make_backup_dir(lower: &dyn Backend, cx: &OpCtx, root: &FileKey) -> Result<FileKey> {
    let hidden = ensure_dir(lower, cx, root, HIDDEN, 0o700)?;
    ensure_dir(lower, cx, &hidden, BACKUP_DIR, 0o700)
}

fn ensure_dir(
    lower: &dyn Backend,
    cx: &OpCtx,
    dir: &FileKey,
    name: &[u8],
    mode: u32,
) -> Result<FileKey> {
    match lower.lookup(dir, name) {
        Ok((k, a)) if a.ftype == FileType::Directory => Ok(k),
        Ok(_) => Err(BackendError::Io(format!(
            "{} exists and is not a directory",
            String::from_utf8_lossy(name)
        ))),
        Err(BackendError::NotFound) => {
            let attrs = SetAttrs {
                mode: Some(mode),
                ..SetAttrs::default()
            };
            Ok(lower
                .make_node(cx, dir, name, &NodeKind::Directory, &attrs)?
                .key)
        }
        Err(e) => Err(e),
    }
}

/// Removes everything inside `dir` (backups: files and empty directories, but a
/// directory restored half-way may hold more, so this recurses).
fn purge(lower: &dyn Backend, cx: &OpCtx, dir: &FileKey) -> Result<()> {
    loop {
        let (entries, _) = lower.readdir(dir, 0, 256)?;
        if entries.is_empty() {
            return Ok(());
        }
        for e in entries {
            if e.attrs.ftype == FileType::Directory {
                purge(lower, cx, &e.key)?;
            }
            match lower.remove(cx, dir, &e.name) {
                Ok(_) | Err(BackendError::NotFound) => {}
                Err(err) => return Err(err),
            }
        }
    }
}

/// The background thread that deletes the backups of finished transactions.
fn spawn_cleaner(lower: Arc<dyn Backend>) -> CleanupQueue {
    let (tx, rx) = mpsc::channel::<(FileKey, Vec<Bytes>)>();
    let spawned = std::thread::Builder::new()
        .name("txn-cleanup".into())
        .spawn(move || {
            let cx = layer_cx();
            while let Ok((dir, names)) = rx.recv() {
                for n in names {
                    match lower.remove(&cx, &dir, &n) {
                        Ok(_) | Err(BackendError::NotFound) => {}
                        Err(e) => tracing::warn!("txn cleanup of a backup: {e}"),
                    }
                }
            }
        });
    if let Err(e) = spawned {
        // Backups then stay until the next start purges them.
        tracing::warn!("txn: no cleanup thread ({e})");
    }
    tx
}

impl Layer for TxnLayer {
    fn lower(&self) -> &dyn Backend {
        &*self.lower
    }

    fn rolled_back_at_start(&self) -> Vec<u64> {
        let mut v = self.rolled_back.clone();
        v.extend(self.lower.rolled_back_at_start());
        v
    }

    fn begin_compound(&self, cx: &OpCtx) -> Result<()> {
        let plain = OpCtx {
            txn: false,
            span: TxnSpan::Whole,
            ..cx.clone()
        };
        self.lower.begin_compound(&plain)?;
        let owner = Self::owner_of(cx);
        CURRENT.with(|c| c.set((owner.id, cx.txn)));
        if cx.txn {
            // Made by the first COMPOUND of the transaction that reaches this export
            // (the server tracks which transactions are open, so a later COMPOUND of one
            // that has not touched the export yet starts it here too).
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.entry(owner.id).or_insert_with(|| Txn {
                txid: 0,
                owner,
                locks: Vec::new(),
                held: HashSet::new(),
                undo: Vec::new(),
                journal_end: 0,
                created: HashSet::new(),
                saved: HashMap::new(),
                dirty: HashSet::new(),
                next_backup: 0,
            });
        }
        Ok(())
    }

    fn end_compound(&self, cx: &OpCtx, ok: bool) -> Result<()> {
        let mut r = Ok(());
        if cx.txn {
            let key = cx.span.key(cx.compound);
            // A transaction ends with its last COMPOUND, or with any that failed.
            let commit = match cx.span {
                TxnSpan::Abort(_) => Some(false),
                span if span.ends() => Some(ok),
                _ if !ok => Some(false),
                _ => None,
            };
            if let Some(commit) = commit {
                let t = self
                    .open
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                if let Some(t) = t {
                    r = self.finish(t, commit);
                }
            }
        }
        self.release_compound(cx.compound);
        CURRENT.with(|c| c.set((0, false)));
        let plain = OpCtx {
            txn: false,
            span: TxnSpan::Whole,
            ..cx.clone()
        };
        let below = self.lower.end_compound(&plain, ok && r.is_ok());
        r.and(below)
    }

    fn getattr(&self, key: &FileKey) -> Result<Attrs> {
        let _g = self.lock(current_reader(), &[(locks::object(key), Mode::Shared)])?;
        self.lower.getattr(key)
    }

    fn lookup(&self, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        if self.is_hidden(dir, name) {
            return Err(BackendError::NotFound);
        }
        let _g = self.lock(current_reader(), &[(locks::entry(dir, name), Mode::Shared)])?;
        self.lower.lookup(dir, name)
    }

    fn lookup_parent(&self, dir: &FileKey) -> Result<(FileKey, Attrs)> {
        let _g = self.lock(current_reader(), &[(locks::object(dir), Mode::Shared)])?;
        self.lower.lookup_parent(dir)
    }

    fn read(&self, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let _g = self.lock(current_reader(), &[(locks::object(key), Mode::Shared)])?;
        self.lower.read(key, offset, count)
    }

    fn readlink(&self, key: &FileKey) -> Result<Bytes> {
        let _g = self.lock(current_reader(), &[(locks::object(key), Mode::Shared)])?;
        self.lower.readlink(key)
    }

    fn readdir(
        &self,
        dir: &FileKey,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let _g = self.lock(current_reader(), &[(locks::object(dir), Mode::Shared)])?;
        if *dir != self.root {
            return self.lower.readdir(dir, cookie, max_entries);
        }
        let mut cookie = cookie;
        loop {
            let (mut entries, eof) = self.lower.readdir(dir, cookie, max_entries)?;
            let last = entries.last().map(|e| e.cookie);
            entries.retain(|e| e.name != HIDDEN);
            // Never an empty page without end of directory (the contract), so a page
            // that held only the hidden directory is followed by the next one.
            match last {
                Some(c) if entries.is_empty() && !eof => cookie = c,
                _ => return Ok((entries, eof)),
            }
        }
    }

    fn setattr(&self, cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs> {
        let owner = Self::owner_of(cx);
        let _g = self.lock(owner, &[(locks::object(key), Mode::Exclusive)])?;
        if owner.is_txn() {
            let old = self.lower.getattr(key)?;
            if let Some(size) = attrs.size {
                self.save_for_size(owner, key, size, old.size)?;
            }
            let changes_meta = attrs.mode.is_some()
                || attrs.uid.is_some()
                || attrs.gid.is_some()
                || attrs.atime.is_some()
                || attrs.mtime.is_some();
            let created = self
                .with_txn(owner, |t| t.created.contains(key))
                .unwrap_or(false);
            if changes_meta && !created {
                self.record(
                    owner,
                    Undo::Attrs {
                        key: key.clone(),
                        mode: old.mode,
                        uid: old.uid,
                        gid: old.gid,
                        atime: old.atime,
                        mtime: old.mtime,
                    },
                    false,
                )?;
            }
            self.mark_dirty(owner, key);
        }
        let r = self.lower.setattr(cx, key, attrs);
        self.mutated(owner);
        r
    }

    fn write(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        let owner = Self::owner_of(cx);
        let _g = self.lock(owner, &[(locks::object(key), Mode::Exclusive)])?;
        if owner.is_txn() {
            self.save_range(owner, key, offset, data.len().max(1) as u64)?;
        }
        let r = self.lower.write(cx, key, offset, data, sync);
        self.mutated(owner);
        r
    }

    fn create_file(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &SetAttrs,
    ) -> Result<Created> {
        self.refuse_hidden(dir, name)?;
        let owner = Self::owner_of(cx);
        self.retrying(owner, || {
            let mut g = self.lock(
                owner,
                &[
                    (locks::object(dir), Mode::Intent),
                    (locks::entry(dir, name), Mode::Exclusive),
                ],
            )?;
            let existing = match self.lower.lookup(dir, name) {
                Ok((k, _)) => Some(k),
                Err(BackendError::NotFound) => None,
                Err(e) => return Err(e),
            };
            if let Some(k) = &existing {
                self.lock_more(&mut g, owner, &[(locks::object(k), Mode::Exclusive)])?;
            }
            if owner.is_txn() {
                match (&existing, attrs.size) {
                    // Opening an existing file with a size (O_TRUNC) changes it.
                    (Some(k), Some(size)) if mode == CreateMode::Unchecked => {
                        self.save_for_size(owner, k, size, self.lower.getattr(k)?.size)?;
                    }
                    (Some(_), _) => {}
                    (None, _) => self.record(
                        owner,
                        Undo::Unlink {
                            dir: dir.clone(),
                            name: Bytes::copy_from_slice(name),
                        },
                        false,
                    )?,
                }
            }
            let c = self.lower.create_file(cx, dir, name, mode, attrs)?;
            if owner.is_txn() {
                self.with_txn(owner, |t| {
                    t.dirty.insert(dir.clone());
                    t.dirty.insert(c.key.clone());
                    if c.created {
                        t.created.insert(c.key.clone());
                    }
                });
                if c.created {
                    self.lock(owner, &[(locks::object(&c.key), Mode::Exclusive)])?;
                }
            }
            self.mutated(owner);
            Ok(c)
        })
    }

    fn make_node(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
        kind: &NodeKind,
        attrs: &SetAttrs,
    ) -> Result<Made> {
        self.refuse_hidden(dir, name)?;
        let owner = Self::owner_of(cx);
        let _g = self.lock(
            owner,
            &[
                (locks::object(dir), Mode::Intent),
                (locks::entry(dir, name), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            self.record_new_name(owner, dir, name)?;
        }
        let m = self.lower.make_node(cx, dir, name, kind, attrs)?;
        if owner.is_txn() {
            self.with_txn(owner, |t| {
                t.dirty.insert(dir.clone());
                // Only files and directories have anything to sync.
                if *kind == NodeKind::Directory {
                    t.dirty.insert(m.key.clone());
                }
                t.created.insert(m.key.clone());
            });
            self.lock(owner, &[(locks::object(&m.key), Mode::Exclusive)])?;
        }
        self.mutated(owner);
        Ok(m)
    }

    fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<crate::DirChange> {
        self.refuse_hidden(dir, name)?;
        let owner = Self::owner_of(cx);
        self.retrying(owner, || {
            let mut g = self.lock(
                owner,
                &[
                    (locks::object(dir), Mode::Intent),
                    (locks::entry(dir, name), Mode::Exclusive),
                ],
            )?;
            let (victim, vattrs) = self.lower.lookup(dir, name)?;
            self.lock_more(&mut g, owner, &[(locks::object(&victim), Mode::Exclusive)])?;
            if !owner.is_txn() {
                return self.lower.remove(cx, dir, name);
            }
            if vattrs.ftype == FileType::Directory && self.is_nonempty_dir(&victim)? {
                return Err(BackendError::NotEmpty);
            }
            let ch = self.move_to_backup(owner, cx, dir, name)?;
            self.mutated(owner);
            Ok(ch)
        })
    }

    fn rename(
        &self,
        cx: &OpCtx,
        from_dir: &FileKey,
        from: &[u8],
        to_dir: &FileKey,
        to: &[u8],
    ) -> Result<RenameChange> {
        self.refuse_hidden(from_dir, from)?;
        self.refuse_hidden(to_dir, to)?;
        let owner = Self::owner_of(cx);
        self.retrying(owner, || {
            let mut g = self.lock(
                owner,
                &[
                    (locks::object(from_dir), Mode::Intent),
                    (locks::object(to_dir), Mode::Intent),
                    (locks::entry(from_dir, from), Mode::Exclusive),
                    (locks::entry(to_dir, to), Mode::Exclusive),
                ],
            )?;
            let (moved, mattrs) = self.lower.lookup(from_dir, from)?;
            let victim = match self.lower.lookup(to_dir, to) {
                Ok(v) => Some(v),
                Err(BackendError::NotFound) => None,
                Err(e) => return Err(e),
            };
            let mut objs = vec![(locks::object(&moved), Mode::Exclusive)];
            if let Some((v, _)) = &victim {
                objs.push((locks::object(v), Mode::Exclusive));
            }
            self.lock_more(&mut g, owner, &objs)?;
            if !owner.is_txn() {
                return self.lower.rename(cx, from_dir, from, to_dir, to);
            }
            let same = victim.as_ref().is_some_and(|(v, _)| *v == moved);
            if same {
                // One object under both names: POSIX does nothing.
                return self.lower.rename(cx, from_dir, from, to_dir, to);
            }
            if let Some((v, vattrs)) = &victim {
                // What rename(2) would refuse, refused before the target is moved away.
                match (
                    mattrs.ftype == FileType::Directory,
                    vattrs.ftype == FileType::Directory,
                ) {
                    (true, false) => return Err(BackendError::NotDir),
                    (false, true) => return Err(BackendError::IsDir),
                    (true, true) if self.is_nonempty_dir(v)? => return Err(BackendError::NotEmpty),
                    _ => {}
                }
                self.move_to_backup(owner, cx, to_dir, to)?;
            }
            self.record(
                owner,
                Undo::Unrename {
                    from_dir: from_dir.clone(),
                    from: Bytes::copy_from_slice(from),
                    to_dir: to_dir.clone(),
                    to: Bytes::copy_from_slice(to),
                },
                false,
            )?;
            let ch = self.lower.rename(cx, from_dir, from, to_dir, to)?;
            self.with_txn(owner, |t| {
                t.dirty.insert(from_dir.clone());
                t.dirty.insert(to_dir.clone());
            });
            self.mutated(owner);
            Ok(ch)
        })
    }

    fn link(&self, cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked> {
        self.refuse_hidden(dir, name)?;
        let owner = Self::owner_of(cx);
        let _g = self.lock(
            owner,
            &[
                (locks::object(dir), Mode::Intent),
                (locks::entry(dir, name), Mode::Exclusive),
                (locks::object(file), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            self.record_new_name(owner, dir, name)?;
            self.mark_dirty(owner, dir);
        }
        let l = self.lower.link(cx, file, dir, name)?;
        self.mutated(owner);
        Ok(l)
    }

    fn clone_range(
        &self,
        cx: &OpCtx,
        src: &FileKey,
        src_off: u64,
        dst: &FileKey,
        dst_off: u64,
        len: u64,
    ) -> Result<CloneMethod> {
        let owner = Self::owner_of(cx);
        let _g = self.lock(
            owner,
            &[
                (locks::object(src), Mode::Shared),
                (locks::object(dst), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            let n = if len == 0 {
                self.lower.getattr(src)?.size.saturating_sub(src_off)
            } else {
                len
            };
            self.save_range(owner, dst, dst_off, n.max(1))?;
        }
        let r = self.lower.clone_range(cx, src, src_off, dst, dst_off, len);
        self.mutated(owner);
        r
    }
}
