//! The export table and the pseudo file system above the exports (RFC 8881 §7).
//!
//! With one export named "/", the NFS root *is* that export. Otherwise the root is a
//! read-only synthetic directory tree whose leaves are the exports' roots.

use crate::config::ExportConfig;
use crate::exportrules::hostnames::HostNames;
use crate::exportrules::ClientRules;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

pub struct Exports {
    /// Pseudo directories; node 0 is the root. Empty when the root is an export.
    pub nodes: Vec<PseudoNode>,
    pub exports: BTreeMap<u16, Arc<Export>>,
    /// Some(id) when the single export "/" is the root.
    pub root_export: Option<u16>,
    /// Source of COMPOUND ids ([`OpCtx::compound`]); the first is 1.
    compounds: AtomicU64,
    /// Whether some export's rules name hosts (callers' names are then looked up).
    pub needs_names: bool,
    /// Verified host names of callers, when `needs_names`.
    pub hostnames: HostNames,
}

/// Stable 16-bit export id from the export's name (FNV-1a folded), never 0.
fn export_id(name: &str) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.as_bytes() {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    let id = ((h >> 16) ^ (h & 0xffff)) as u16;
    if id == 0 {
        1
    } else {
        id
    }
}

/// The identity of an export's data (ADR 0023), which its layers' durable files are
/// keyed by and record: for a local directory, its canonical path and the device and
/// inode numbers of that directory (another directory, or one made anew at the same
/// path, is another export); for other stacks, the bottom layer and the export's name.
pub fn export_identity(c: &ExportConfig) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let bottom = c.backend.bottom().unwrap_or("?");
    let mut id = format!("{bottom}:").into_bytes();
    if bottom != "local" {
        id.extend_from_slice(c.name.as_bytes());
        return id;
    }
    match std::fs::canonicalize(&c.path).and_then(|p| Ok((std::fs::metadata(&p)?, p))) {
        Ok((m, p)) => {
            id.extend_from_slice(p.as_os_str().as_bytes());
            id.extend_from_slice(format!(" dev={} ino={}", m.dev(), m.ino()).as_bytes());
        }
        // Opening it fails below and says why.
        Err(_) => id.extend_from_slice(c.path.as_os_str().as_bytes()),
    }
    id
}

/// Refuses local exports of the same directory, or of a directory and one inside it
/// (compared canonical: symbolic links resolved). A path that does not resolve is left
/// for opening the export to report.
fn overlapping_paths(cfgs: &[ExportConfig]) -> Result<(), ExportError> {
    let local: Vec<(&ExportConfig, std::path::PathBuf)> = cfgs
        .iter()
        .filter(|c| c.prebuilt.is_none() && c.backend.bottom() == Some("local"))
        .filter_map(|c| Some((c, std::fs::canonicalize(&c.path).ok()?)))
        .collect();
    for (i, (a, pa)) in local.iter().enumerate() {
        for (b, pb) in &local[i + 1..] {
            let how = if pa == pb {
                "the same directory"
            } else if pb.starts_with(pa) || pa.starts_with(pb) {
                "one directory is inside the other"
            } else {
                continue;
            };
            return Err(ExportError::Overlapping {
                a: a.name.clone(),
                a_path: a.path.display().to_string(),
                b: b.name.clone(),
                b_path: b.path.display().to_string(),
                how,
            });
        }
    }
    Ok(())
}

/// `<state_dir>/layers/<hash of the export's identity>/`: where its layers keep their
/// durable files (16 hex digits; the 4 of the older layout named the export's name).
pub fn layer_state_dir(state_dir: &std::path::Path, identity: &[u8]) -> std::path::PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    state_dir.join("layers").join(format!("{h:016x}"))
}

/// The journal an older txnfs kept for export id `id` (by the export's name, whatever
/// directory it served): removed when it holds nothing unfinished, else refused, since
/// it cannot say which directory it belongs to.
fn legacy_journal(state_dir: &std::path::Path, id: u16, name: &str) -> Result<(), ExportError> {
    use txnfs_backend::txn::JournalError;
    let dir = state_dir.join("layers").join(format!("{id:04x}"));
    let path = dir.join("txn.journal");
    let err = |err| ExportError::Journal {
        name: name.into(),
        err,
    };
    let summary = match txnfs_backend::txn::inspect_journal(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(JournalError::Io { path, err: e })),
    };
    if summary.unfinished > 0 {
        return Err(err(JournalError::Legacy {
            path,
            unfinished: summary.unfinished,
        }));
    }
    tracing::info!(
        path = %path.display(),
        "removing a journal of the older layout: it holds no unfinished transaction"
    );
    std::fs::remove_file(&path).map_err(|e| err(JournalError::Io { path, err: e }))?;
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}

/// `c` with the `txn` layer on top, when its stack stores data locally or in memory
/// and has no `txn` layer yet (prebuilt backends are the embedder's business): the
/// stack a server with transactions on runs (and its start-up summary shows).
pub fn with_txn_layer(c: &ExportConfig) -> ExportConfig {
    let mut c = c.clone();
    let names = c.backend.names();
    let has_txn = names
        .iter()
        .any(|n| n.split(':').next().unwrap_or(n).trim() == "txn");
    if c.prebuilt.is_none() && !has_txn && matches!(c.backend.bottom(), Some("local" | "memory")) {
        let top = if c.backend.bottom() == Some("memory") {
            "txn:journal=memory"
        } else {
            "txn"
        };
        let mut v: Vec<String> = vec![top.into()];
        v.extend(names.iter().map(|n| n.to_string()));
        c.backend = crate::config::LayerStack::of(v);
    }
    c
}

fn components(name: &str) -> Result<Vec<String>, ExportError> {
    if !name.starts_with('/') {
        return Err(ExportError::BadName(name.into()));
    }
    let parts: Vec<String> = name
        .split('/')
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect();
    if parts.iter().any(|c| c == "." || c == "..") {
        return Err(ExportError::BadName(name.into()));
    }
    Ok(parts)
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
        let with_txn: Vec<ExportConfig>;
        let cfgs = if txn {
            with_txn = cfgs.iter().map(with_txn_layer).collect();
            &with_txn[..]
        } else {
            cfgs
        };
        if cfgs.is_empty() {
            return Err(ExportError::None);
        }
        // Check every stack before opening any, so a typo fails fast and alone.
        for c in cfgs.iter().filter(|c| c.prebuilt.is_none()) {
            layers
                .check(c.backend.names())
                .map_err(|err| ExportError::Stack {
                    name: c.name.clone(),
                    err,
                })?;
        }
        let open =
            |c: &ExportConfig, id: u16, parent: Option<u16>| -> Result<Export, ExportError> {
                let identity = export_identity(c);
                if let (Some(d), None) = (state_dir, &c.prebuilt) {
                    legacy_journal(d, id, &c.name)?;
                }
                let backend: Arc<dyn Backend> = match &c.prebuilt {
                    Some(b) => b.0.clone(),
                    None => layers
                        .build_with_state(
                            c.backend.names(),
                            &c.path,
                            state_dir.map(|d| layer_state_dir(d, &identity)).as_deref(),
                            &identity,
                        )
                        .map_err(|err| match err {
                            StackError::Open { err, .. } => ExportError::Open {
                                name: c.name.clone(),
                                path: c.path.display().to_string(),
                                err,
                            },
                            err => ExportError::Stack {
                                name: c.name.clone(),
                                err,
                            },
                        })?,
                };
                let root_key = backend.root().map_err(|err| ExportError::Open {
                    name: c.name.clone(),
                    path: c.path.display().to_string(),
                    err,
                })?;
                Ok(Export {
                    id,
                    name: c.name.clone(),
                    backend,
                    root_key,
                    read_only: c.read_only,
                    parent_node: parent,
                    clients: if c.clients.is_empty() {
                        ClientRules::local_only()
                    } else {
                        ClientRules::new(c.clients.clone())
                    },
                })
            };

        let mut all: Vec<(Vec<String>, &ExportConfig)> = Vec::new();
        for c in cfgs {
            let comps = components(&c.name)?;
            if all.iter().any(|(p, _)| *p == comps) {
                return Err(ExportError::Duplicate(c.name.clone()));
            }
            all.push((comps, c));
        }
        overlapping_paths(cfgs)?;
        if all.iter().any(|(p, _)| p.is_empty()) {
            if all.len() > 1 {
                return Err(ExportError::RootWithOthers);
            }
            let id = export_id("/");
            let e = open(all[0].1, id, None)?;
            let mut exports = BTreeMap::new();
            exports.insert(id, Arc::new(e));
            return Ok(Exports {
                nodes: Vec::new(),
                exports,
                root_export: Some(id),
                compounds: AtomicU64::new(0),
                needs_names: cfgs
                    .iter()
                    .any(|c| ClientRules::new(c.clients.clone()).needs_names()),
                hostnames: HostNames::default(),
            });
        }
        for (a, ca) in &all {
            for (b, cb) in &all {
                if a.len() < b.len() && b.starts_with(a) {
                    return Err(ExportError::Nested(cb.name.clone(), ca.name.clone()));
                }
            }
        }
        let mut nodes = vec![PseudoNode {
            name: Bytes::new(),
            parent: 0,
            children: BTreeMap::new(),
        }];
        let mut exports: BTreeMap<u16, Arc<Export>> = BTreeMap::new();
        let mut names: BTreeMap<u16, String> = BTreeMap::new();
        for (comps, c) in &all {
            let mut node = 0u16;
            for comp in &comps[..comps.len() - 1] {
                let key = Bytes::from(comp.clone().into_bytes());
                node = match nodes[node as usize].children.get(&key) {
                    Some(PseudoChild::Node(n)) => *n,
                    _ => {
                        let n = nodes.len() as u16;
                        nodes.push(PseudoNode {
                            name: key.clone(),
                            parent: node,
                            children: BTreeMap::new(),
                        });
                        nodes[node as usize]
                            .children
                            .insert(key, PseudoChild::Node(n));
                        n
                    }
                };
            }
            let id = export_id(&c.name);
            if let Some(other) = names.get(&id) {
                return Err(ExportError::IdCollision(other.clone(), c.name.clone()));
            }
            names.insert(id, c.name.clone());
            let e = open(c, id, Some(node))?;
            let leaf = Bytes::from(comps[comps.len() - 1].clone().into_bytes());
            nodes[node as usize]
                .children
                .insert(leaf, PseudoChild::Export(id));
            exports.insert(id, Arc::new(e));
        }
        Ok(Exports {
            nodes,
            exports,
            root_export: None,
            compounds: AtomicU64::new(0),
            needs_names: cfgs
                .iter()
                .any(|c| ClientRules::new(c.clients.clone()).needs_names()),
            hostnames: HostNames::default(),
        })
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
        self.exports
            .values()
            .flat_map(|e| e.backend.rolled_back_at_start())
            .collect()
    }

    /// A fresh id for a COMPOUND (unique while this server runs, never 0; across
    /// restarts too once `number_compounds_from` ran).
    pub fn next_compound_id(&self) -> u64 {
        self.compounds.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn get(&self, id: u16) -> Option<&Arc<Export>> {
        self.exports.get(&id)
    }

    pub fn node(&self, id: u16) -> Option<&PseudoNode> {
        self.nodes.get(id as usize)
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
    entered: Vec<Arc<Export>>,
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
            entered: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BackendKind;

    fn mem(name: &str) -> ExportConfig {
        ExportConfig {
            name: name.into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        }
    }

    #[test]
    fn pseudo_tree_and_errors() {
        let e = Exports::build(&[mem("/a/b"), mem("/a/c"), mem("/d")]).unwrap();
        assert_eq!(e.exports.len(), 3);
        // root, "a"
        assert_eq!(e.nodes.len(), 2);
        assert_eq!(e.nodes[0].children.len(), 2);
        assert_eq!(e.nodes[1].children.len(), 2);
        assert!(matches!(
            Exports::build(&[mem("/"), mem("/x")]),
            Err(ExportError::RootWithOthers)
        ));
        assert!(matches!(
            Exports::build(&[mem("/a"), mem("/a/b")]),
            Err(ExportError::Nested(..))
        ));
        assert!(matches!(
            Exports::build(&[mem("a")]),
            Err(ExportError::BadName(_))
        ));
        assert!(matches!(
            Exports::build(&[mem("/x/../y")]),
            Err(ExportError::BadName(_))
        ));
        let r = Exports::build(&[mem("/")]).unwrap();
        assert!(r.root_export.is_some());
    }

    #[test]
    fn overlapping_directories_are_refused() {
        let top = tempfile::tempdir().unwrap();
        let inner = top.path().join("inner");
        let other = top.path().join("other");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&inner, top.path().join("link")).unwrap();
        let local = |name: &str, path: &std::path::Path| ExportConfig {
            name: name.into(),
            path: path.to_path_buf(),
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        };
        let refused = |cfgs: &[ExportConfig]| match overlapping_paths(cfgs) {
            Err(ExportError::Overlapping { how, .. }) => how,
            r => panic!("not refused: {r:?}"),
        };
        assert_eq!(
            refused(&[local("/a", &inner), local("/b", &inner)]),
            "the same directory"
        );
        assert_eq!(
            refused(&[local("/a", &inner), local("/b", &top.path().join("link"))]),
            "the same directory"
        );
        assert_eq!(
            refused(&[local("/a", top.path()), local("/b", &inner)]),
            "one directory is inside the other"
        );
        assert_eq!(
            refused(&[local("/b", &inner), local("/a", top.path())]),
            "one directory is inside the other"
        );
        overlapping_paths(&[local("/a", &inner), local("/b", &other), mem("/m")]).unwrap();
        let msg = ExportError::Overlapping {
            a: "/a".into(),
            a_path: "/x".into(),
            b: "/b".into(),
            b_path: "/x".into(),
            how: "the same directory",
        }
        .to_string();
        assert!(msg.contains("\"/a\" (/x) and \"/b\" (/x) overlap"), "{msg}");
    }

    #[test]
    fn layer_stacks_are_checked_before_anything_opens() {
        let stack = |names: &[&str]| ExportConfig {
            backend: crate::config::LayerStack::of(names.iter().copied()),
            ..mem("/a")
        };
        let e = Exports::build(&[stack(&["memory:max_bytes=1M"])]).unwrap();
        let b = &e.exports.values().next().unwrap().backend;
        let cx = OpCtx::default();
        assert_eq!(
            b.statfs(&cx, &b.root().unwrap()).unwrap().total_bytes,
            1 << 20
        );
        let err = Exports::build(&[
            stack(&["memory"]),
            ExportConfig {
                name: "/b".into(),
                ..stack(&["lcoal"])
            },
        ])
        .err()
        .unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains("\"/b\"") && msg.contains("unknown layer \"lcoal\""),
            "{msg}"
        );
        assert!(msg.contains("known layers: local, memory, txn"), "{msg}");
        // A prebuilt backend is used as handed in, whatever the stack says.
        let pre = ExportConfig {
            prebuilt: Some(crate::config::PrebuiltBackend(Arc::new(
                txnfs_backend::memory::MemoryBackend::new(),
            ))),
            ..stack(&["nonsense"])
        };
        assert!(Exports::build(&[pre]).is_ok());
    }

    #[test]
    fn compound_ids_are_fresh_and_never_zero() {
        let e = Exports::build(&[mem("/")]).unwrap();
        let a = CompoundScope::new(&e);
        let b = CompoundScope::new(&e);
        assert!(a.ctx().compound > 0 && b.ctx().compound > a.ctx().compound);
    }
}
