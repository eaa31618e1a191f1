//! The export table and the pseudo file system above the exports (RFC 8881 §7).
//!
//! With one export named "/", the NFS root *is* that export. Otherwise the root is a
//! read-only synthetic directory tree whose leaves are the exports' roots.
//!
//! The table ([`Exports`]) holds the current [`ExportSet`] behind one pointer that a
//! reload swaps (ADR 0048): a request works on the set it found, the next one sees the
//! new set. Building a set is in `build`, the reload and its diff in `reload`.

mod build;
mod reload;

pub use build::{export_id, export_identity, layer_state_dir, with_txn_layer};
pub use reload::{ReloadDiff, RulesChange};

use crate::config::ExportConfig;
use crate::exportrules::hostnames::HostNames;
use crate::exportrules::ClientRules;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use txnfs_backend::layer::{LayerRegistry, StackError};
use txnfs_backend::{Backend, BackendError, Creds, FileKey, OpCtx, WaitClock};

/// One exported directory.
pub struct Export {
    pub id: u16,
    pub name: String,
    pub backend: Arc<dyn Backend>,
    pub root_key: FileKey,
    pub read_only: bool,
    /// The pseudo directory this export hangs under (its mounted-on node).
    pub parent_node: Option<u16>,
    /// Which clients may use it, and how (ADR 0043).
    pub clients: ClientRules,
    /// The configuration it was opened from (with the `txn` layer when the server put
    /// it there): a reload keeps the export when name, path and layers are unchanged.
    pub config: ExportConfig,
}

impl Export {
    /// NFSv4 fsid of objects in this export: unique per export, stable across restarts.
    pub fn fsid(&self) -> (u64, u64) {
        (self.id as u64, 0x7478_6e66) // "txnf"
    }
}

#[derive(Debug, Clone)]
pub enum PseudoChild {
    Node(u16),
    Export(u16),
}

#[derive(Debug, Clone)]
pub struct PseudoNode {
    pub name: Bytes,
    pub parent: u16,
    pub children: BTreeMap<Bytes, PseudoChild>,
}

impl PseudoNode {
    /// Synthetic fileid of a pseudo directory: high bit set so it never equals an inode
    /// of a real file system the client could also see through the same fsid.
    pub fn fileid(id: u16) -> u64 {
        (1u64 << 63) | id as u64
    }
}

pub const PSEUDO_FSID: (u64, u64) = (0, 0);

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("no export configured (give a directory or --export NAME=PATH)")]
    None,
    #[error("export name {0:?} must be an absolute path like /data")]
    BadName(String),
    #[error("export {0:?} is given twice")]
    Duplicate(String),
    #[error("export \"/\" cannot be combined with other exports")]
    RootWithOthers,
    #[error("export {0:?} lies inside export {1:?}")]
    Nested(String, String),
    /// Two exports of one directory, or of a directory and one inside it: two `txn`
    /// layers (and two handle spaces) over the same files.
    #[error(
        "exports {a:?} ({a_path}) and {b:?} ({b_path}) overlap: {how}; \
         export each directory once"
    )]
    Overlapping {
        a: String,
        a_path: String,
        b: String,
        b_path: String,
        how: &'static str,
    },
    #[error("export names {0:?} and {1:?} hash to the same id; rename one")]
    IdCollision(String, String),
    /// A reload that would put another directory or stack under a running export's
    /// name (its handles would then name objects of another backend).
    #[error(
        "export {name:?}: {how}; a running export keeps its directory and layers \
         (remove it in one reload and add it back in the next, or restart)"
    )]
    Replaced { name: String, how: String },
    #[error("export {name:?}: {err}")]
    Stack { name: String, err: StackError },
    #[error("export {name:?}: {err}")]
    Journal {
        name: String,
        err: txnfs_backend::txn::JournalError,
    },
    #[error("cannot open export {name:?} at {path}: {err}")]
    Open {
        name: String,
        path: String,
        err: txnfs_backend::BackendError,
    },
}

/// One configuration's exports and the pseudo file system above them.
pub struct ExportSet {
    /// Pseudo directories by id (0 is the root; the others' ids are hashes of their
    /// paths, stable across reloads and restarts). Empty when the root is an export.
    pub nodes: BTreeMap<u16, PseudoNode>,
    pub exports: BTreeMap<u16, Arc<Export>>,
    /// Some(id) when the single export "/" is the root.
    pub root_export: Option<u16>,
    /// Whether some export's rules name hosts (callers' names are then looked up).
    pub needs_names: bool,
}

impl ExportSet {
    pub fn get(&self, id: u16) -> Option<&Arc<Export>> {
        self.exports.get(&id)
    }

    pub fn node(&self, id: u16) -> Option<&PseudoNode> {
        self.nodes.get(&id)
    }
}

/// The export table: the current set, swapped whole by a reload.
pub struct Exports {
    current: RwLock<Arc<ExportSet>>,
    /// Where new exports' layers keep their state, and whether they get `txn`.
    state_dir: Option<std::path::PathBuf>,
    txn: bool,
    /// One reload at a time (a reload reads the set it replaces).
    reloading: Mutex<()>,
    /// Source of COMPOUND ids ([`OpCtx::compound`]); the first is 1.
    compounds: AtomicU64,
    /// Verified host names of callers, when the set `needs_names`.
    pub hostnames: HostNames,
}
impl Exports {
    /// Opens the exports, building each backend from the built-in layers.
    pub fn build(cfgs: &[ExportConfig]) -> Result<Self, ExportError> {
        Self::build_with(cfgs, &LayerRegistry::builtin())
    }

    /// Opens the exports, resolving layer names in `layers`.
    pub fn build_with(cfgs: &[ExportConfig], layers: &LayerRegistry) -> Result<Self, ExportError> {
        Self::open(cfgs, layers, None, false)
    }

    /// Opens the exports as the server does: with `txn`, every local or memory stack
    /// that lacks it gets the `txn` layer on top (ADR 0021); layers keep their state in
    /// `<state_dir>/layers/<hash of the export's identity>/` (ADR 0023).
    pub fn open(
        cfgs: &[ExportConfig],
        layers: &LayerRegistry,
        state_dir: Option<&std::path::Path>,
        txn: bool,
    ) -> Result<Self, ExportError> {
        let src = build::Sources {
            layers,
            state_dir,
            txn,
        };
        let set = build::build_set(cfgs, &src, &BTreeMap::new())?;
        Ok(Exports {
            current: RwLock::new(Arc::new(set)),
            state_dir: state_dir.map(|d| d.to_path_buf()),
            txn,
            reloading: Mutex::new(()),
            compounds: AtomicU64::new(0),
            hostnames: HostNames::default(),
        })
    }

    /// The current set: what one request works on from start to end.
    pub fn snapshot(&self) -> Arc<ExportSet> {
        // A poisoned lock only means a thread panicked while swapping in a whole `Arc`:
        // the pointer inside is always a complete set.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Export `id` of the current set.
    pub fn get(&self, id: u16) -> Option<Arc<Export>> {
        self.snapshot().exports.get(&id).cloned()
    }

    /// The root export's id, when the single export "/" is the root.
    pub fn root_export(&self) -> Option<u16> {
        self.snapshot().root_export
    }

    /// Whether callers' host names must be looked up for the current rules.
    pub fn needs_names(&self) -> bool {
        self.snapshot().needs_names
    }

    /// Makes COMPOUND ids unique across restarts too (the boot epoch in the high bits):
    /// the `txn` layer's journal names transactions by them, and the server tells from
    /// them which stored replies belong to transactions recovery rolled back.
    pub fn number_compounds_from(&self, boot_epoch: u32) {
        self.compounds
            .store(u64::from(boot_epoch) << 40, Ordering::Relaxed);
    }

    /// The COMPOUNDs whose transactions recovery rolled back when the exports opened.
    pub fn rolled_back_at_start(&self) -> Vec<u64> {
        self.snapshot()
            .exports
            .values()
            .flat_map(|e| e.backend.rolled_back_at_start())
            .collect()
    }

    /// The transaction journals' counters, summed over the exports that keep one
    /// (`txn`); `None` when none does.
    pub fn journal_stats(&self) -> Option<txnfs_backend::JournalStats> {
        self.snapshot()
            .exports
            .values()
            .filter_map(|e| e.backend.journal_stats())
            .reduce(|a, b| txnfs_backend::JournalStats {
                appended_bytes: a.appended_bytes + b.appended_bytes,
                records: a.records + b.records,
                size: a.size + b.size,
            })
    }

    /// A fresh id for a COMPOUND (unique while this server runs, never 0; across
    /// restarts too once `number_compounds_from` ran).
    pub fn next_compound_id(&self) -> u64 {
        self.compounds.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The backend side of one COMPOUND: its [`OpCtx`] and the exports whose
/// [`Backend::begin_compound`] ran, so each gets exactly one `end_compound`.
///
/// An export is entered when an op first puts one of its objects into the current
/// filehandle (PUTFH, PUTROOTFH, LOOKUP, ...) and again, as a no-op, before every
/// mutating backend call ([`CompoundScope::ctx_for`]), so no backend call of a COMPOUND
/// can precede that backend's `begin_compound`.
pub struct CompoundScope {
    ctx: OpCtx,
    /// Exports whose `begin_compound` succeeded (few per COMPOUND: a linear scan).
    /// (Inline: almost every COMPOUND enters one export, and this is per COMPOUND.)
    entered: smallvec::SmallVec<[Arc<Export>; 2]>,
    finished: bool,
    /// The export of the transaction this COMPOUND continues (a transaction of several
    /// COMPOUNDs stays in one export).
    txn_export: Option<u16>,
}

impl CompoundScope {
    /// A plain COMPOUND's scope.
    pub fn new(exports: &Exports) -> Self {
        Self::with_txn(exports, false, WaitClock::default())
    }

    /// The scope of a COMPOUND that is a transaction (`txn`) or plain, whose waits in
    /// the backends are counted in `waited`.
    pub fn with_txn(exports: &Exports, txn: bool, waited: WaitClock) -> Self {
        CompoundScope {
            ctx: OpCtx {
                creds: Creds::default(),
                client: None,
                compound: exports.next_compound_id(),
                txn,
                span: txnfs_backend::TxnSpan::Whole,
                waited,
            },
            entered: smallvec::SmallVec::new(),
            finished: false,
            txn_export: None,
        }
    }

    /// The context, without entering an export: for calls on the export of the current
    /// filehandle (which setting it entered), such as the reads of an op, and in tests.
    pub fn ctx(&self) -> &OpCtx {
        &self.ctx
    }

    /// Places this transactional COMPOUND in a transaction of several (`export`: the
    /// one the transaction is in, if it touched one already). Before any export is
    /// entered.
    pub fn set_span(&mut self, span: txnfs_backend::TxnSpan, export: Option<u16>) {
        self.ctx.span = span;
        self.txn_export = export;
    }

    /// The export a transactional COMPOUND entered (or its transaction had).
    pub fn txn_export(&self) -> Option<u16> {
        self.entered.first().map(|e| e.id).or(self.txn_export)
    }

    /// Has this COMPOUND entered export `id`?
    pub fn entered(&self, id: u16) -> bool {
        self.entered.iter().any(|e| e.id == id)
    }

    /// Runs `begin_compound` on `export` unless this COMPOUND already did. The caller
    /// and its client are fixed when the first export is entered (SEQUENCE, which sets
    /// the client, always runs before any op can touch an export).
    pub fn enter(
        &mut self,
        export: &Arc<Export>,
        creds: &Creds,
        client: Option<u64>,
    ) -> Result<(), BackendError> {
        if self.entered.iter().any(|e| e.id == export.id) {
            return Ok(());
        }
        if self.ctx.txn
            && (!self.entered.is_empty() || self.txn_export.is_some_and(|id| id != export.id))
        {
            // One export's layer makes a transaction atomic; two could not commit as
            // one (ADR 0021).
            return Err(BackendError::XDev);
        }
        if self.entered.is_empty() {
            self.ctx.creds = creds.clone();
            self.ctx.client = client;
        }
        export.backend.begin_compound(&self.ctx)?;
        self.entered.push(export.clone());
        Ok(())
    }

    /// The context for a call on `export`'s backend, entering the export first. Its
    /// identity is `creds`: the caller's as that export's rules squash it (ADR 0043),
    /// which may differ between the exports of one COMPOUND.
    pub fn ctx_for(
        &mut self,
        export: &Arc<Export>,
        creds: &Creds,
        client: Option<u64>,
    ) -> Result<&OpCtx, BackendError> {
        self.enter(export, creds, client)?;
        if self.ctx.creds != *creds {
            self.ctx.creds = creds.clone();
        }
        Ok(&self.ctx)
    }

    /// Ends the COMPOUND on every entered export (`ok`: every op succeeded), in the
    /// reverse order of entering. An error: a transaction could not commit (it was
    /// rolled back), so the COMPOUND must be reported as failed.
    pub fn finish(&mut self, ok: bool) -> Result<(), BackendError> {
        self.finished = true;
        let mut r = Ok(());
        while let Some(e) = self.entered.pop() {
            if let Err(err) = e.backend.end_compound(&self.ctx, ok) {
                r = Err(err);
            }
        }
        r
    }
}

impl Drop for CompoundScope {
    /// A COMPOUND abandoned without `finish` (an early return, a panic) did not
    /// complete: its exports see it end as failed.
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.finish(false);
        }
    }
}
