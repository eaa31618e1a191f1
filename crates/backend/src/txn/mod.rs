//! The `txn` layer: a COMPOUND marked as a transaction (`OpCtx::txn`) happens entirely
//! or not at all, in isolation, durably, and survives crashes (ADR 0021).
//!
//! - **Isolation** (`locks`): a transaction locks the objects and directory entries it
//!   reads or changes and keeps them until it ends (over one COMPOUND or several). A conflict a transaction cannot wait out fails its op with `Conflict`
//!   (NFS4ERR_DELAY) and rolls it back.
//! - **Atomicity** (`undo`): before each change a transaction makes, the layer saves
//!   what the change destroys (overwritten ranges cloned into a backup file; removed
//!   objects moved into the backup directory instead of unlinked) and appends an undo
//!   entry to the journal (`journal`). `end_compound(false)` applies the entries
//!   backwards.
//! - **Durability**: `end_compound(true)` syncs every file and directory the
//!   transaction changed, then appends a `Commit` record and waits until it is on stable
//!   storage (group commit), all before the reply leaves.
//! - **Recovery**: opening the layer rolls back every transaction the journal holds
//!   without a `Commit` or `Aborted` record, then empties the backup directory.
//!
//! Plain COMPOUNDs pass through: their calls take locks too, but conflict only with
//! transactions (a plain COMPOUND keeps its read locks to its end, so it never sees a
//! transaction in part). Files: `isolation` (who holds which locks), `changes`
//! (undo entries and backups before each change; commit and rollback), `calls` (the
//! backend calls), `journal`, `locks`, `undo`.

mod calls;
mod changes;
mod gate;
mod isolation;
mod journal;
mod locks;
mod undo;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::{Backend, BackendError, Creds, FileKey, FileType, NodeKind, OpCtx, Result, SetAttrs};
use changes::{apply_retrying, mark_undone};
use isolation::CompoundLocks;
pub use journal::{inspect as inspect_journal, JournalError, JournalSummary};
use journal::{Journal, Record};
use locks::{LockId, LockTable, Mode, Owner};
use undo::{Backups, Undo};

/// The hidden directory at the export root that holds the backups.
pub const HIDDEN: &[u8] = b".txnfs";
const BACKUP_DIR: &[u8] = b"backup";

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
    /// How many of the last undo entries a rollback has applied.
    undone: usize,
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
    /// The read locks of the plain COMPOUNDs open here (`isolation`).
    compounds: CompoundLocks,
    /// Whether plain COMPOUNDs lock at all (`gate`).
    gate: gate::Gate,
    open: Mutex<HashMap<u64, Txn>>,
    next_txid: AtomicU64,
    settings: TxnSettings,
    faults: FaultPoint,
    cleanup: Mutex<Option<CleanupQueue>>,
    /// The COMPOUNDs whose transactions recovery rolled back when the layer opened.
    rolled_back: Vec<u64>,
    /// Transactions whose rollback stopped at a failing step (`changes`).
    stuck: Mutex<Vec<Txn>>,
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
    /// and rolls back what an earlier run left unfinished. The journal records no
    /// export identity (an empty one): see [`TxnLayer::open_as`].
    pub fn open(
        lower: Arc<dyn Backend>,
        journal: Option<&Path>,
        settings: TxnSettings,
    ) -> Result<TxnLayer> {
        Self::open_as(lower, journal, b"", settings)
    }

    /// [`TxnLayer::open`] for the export `identity` (ADR 0023): the journal records it,
    /// and a journal that records another one is refused, never applied.
    pub fn open_as(
        lower: Arc<dyn Backend>,
        journal: Option<&Path>,
        identity: &[u8],
        settings: TxnSettings,
    ) -> Result<TxnLayer> {
        let root = lower.root()?;
        let cx = layer_cx();
        let faults = FaultPoint::from_env();
        let stats = Arc::new(TxnStats::default());
        let (journal, found) = match journal {
            Some(p) => Journal::open(p, identity).map_err(|e| {
                tracing::error!("txn recovery: {e}");
                BackendError::Io(e.to_string())
            })?,
            None => (Journal::in_memory(), Vec::new()),
        };
        let needs_backups = found
            .iter()
            .any(|f| f.undo.iter().any(|u| u.backup().is_some()));
        let backup_dir = match lower.lookup(&cx, &root, HIDDEN) {
            Ok((hidden, _)) => match lower.lookup(&cx, &hidden, BACKUP_DIR) {
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
                // A step that keeps failing stops the start: serving now would show a
                // transaction in part.
                apply_retrying(u, &cx, &backups).map_err(|e| {
                    tracing::error!(txid = f.txid, "txn recovery: undo failed: {e}");
                    e
                })?;
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
            compounds: CompoundLocks::new(),
            open: Mutex::new(HashMap::new()),
            gate: gate::Gate::default(),
            next_txid: AtomicU64::new(next_txid),
            settings,
            faults,
            cleanup: Mutex::new(None),
            rolled_back,
            stuck: Mutex::new(Vec::new()),
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

    /// Locks currently held (tests).
    pub fn held_locks(&self) -> usize {
        self.locks.held_count()
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
    match lower.lookup(cx, dir, name) {
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
        let (entries, _) = lower.readdir(cx, dir, 0, 256)?;
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
