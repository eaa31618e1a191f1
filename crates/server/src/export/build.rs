//! Building an export set from its configuration (ADR 0023, 0043, 0048): every check
//! that needs no backend first (names, duplicates, nesting, overlapping directories,
//! layer names, ids), then the backends of the exports that are new. Exports of a
//! running set whose name, directory and layers are unchanged are taken over as they
//! are: the same backend instance (its open files, journal and held objects), with the
//! new rules.

use super::{Export, ExportError, ExportSet, PseudoChild, PseudoNode};
use crate::config::ExportConfig;
use crate::exportrules::ClientRules;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use txnfs_backend::layer::{LayerRegistry, StackError};
use txnfs_backend::Backend;

/// Stable 16-bit export id from the export's name (FNV-1a folded), never 0: the same
/// name has the same id in every configuration, whatever else it exports.
pub fn export_id(name: &str) -> u16 {
    fold16(name.as_bytes())
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
pub(super) fn overlapping_paths(cfgs: &[ExportConfig]) -> Result<(), ExportError> {
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

/// FNV-1a of `bytes` folded to 16 bits, never 0.
fn fold16(bytes: &[u8]) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    match ((h >> 16) ^ (h & 0xffff)) as u16 {
        0 => 1,
        id => id,
    }
}

/// Stable id of the pseudo directory at `comps` (the root is 0): from its path, like an
/// export's id, so a reload that adds or removes exports never renumbers the pseudo
/// directories whose handles clients hold.
fn pseudo_id(comps: &[String]) -> u16 {
    if comps.is_empty() {
        return 0;
    }
    fold16(format!("pseudo:/{}", comps.join("/")).as_bytes())
}

/// Why `old` cannot be taken over by `new` (same name), or None when it can.
fn replaced_how(old: &ExportConfig, new: &ExportConfig) -> Option<String> {
    match (&old.prebuilt, &new.prebuilt) {
        (Some(a), Some(b)) if Arc::ptr_eq(&a.0, &b.0) => return None,
        (None, None) => {}
        _ => return Some("its backend changed".into()),
    }
    if old.backend != new.backend {
        let names = |c: &ExportConfig| c.backend.names().join(", ");
        return Some(format!(
            "its layers changed ([{}] -> [{}])",
            names(old),
            names(new)
        ));
    }
    if old.path != new.path {
        return Some(format!(
            "its path changed ({} -> {})",
            old.path.display(),
            new.path.display()
        ));
    }
    None
}

fn rules_of(c: &ExportConfig) -> ClientRules {
    if c.clients.is_empty() {
        ClientRules::local_only()
    } else {
        ClientRules::new(c.clients.clone())
    }
}

/// Where the exports of a set come from.
pub(super) struct Sources<'a> {
    pub layers: &'a LayerRegistry,
    pub state_dir: Option<&'a std::path::Path>,
    /// Put the `txn` layer on local and memory stacks that lack it (ADR 0021).
    pub txn: bool,
}

/// The export set of `cfgs`. Exports of `running` with the same name, directory and
/// layers are taken over (their backends are not opened again); only new ones are
/// opened, after every check passed, so a refused configuration opens nothing.
pub(super) fn build_set(
    cfgs: &[ExportConfig],
    src: &Sources<'_>,
    running: &BTreeMap<u16, Arc<Export>>,
) -> Result<ExportSet, ExportError> {
    let with_txn: Vec<ExportConfig>;
    let cfgs = if src.txn {
        with_txn = cfgs.iter().map(with_txn_layer).collect();
        &with_txn[..]
    } else {
        cfgs
    };
    let plan = plan(cfgs, src.layers, running)?;
    let mut exports = BTreeMap::new();
    for p in &plan.exports {
        let e = match p.kept {
            Some(old) => Export {
                id: p.id,
                name: p.cfg.name.clone(),
                backend: old.backend.clone(),
                root_key: old.root_key.clone(),
                read_only: p.cfg.read_only,
                parent_node: p.parent,
                clients: rules_of(p.cfg),
                config: p.cfg.clone(),
            },
            None => open(p.cfg, p.id, p.parent, src)?,
        };
        exports.insert(p.id, Arc::new(e));
    }
    Ok(ExportSet {
        nodes: plan.nodes,
        exports,
        root_export: plan.root_export,
        needs_names: cfgs.iter().any(|c| rules_of(c).needs_names()),
    })
}

/// Every check of [`build_set`] that opens nothing (for `txnfs serve --check`).
pub(super) fn check_set(
    cfgs: &[ExportConfig],
    layers: &LayerRegistry,
    txn: bool,
) -> Result<(), ExportError> {
    let cfgs: Vec<ExportConfig> = if txn {
        cfgs.iter().map(with_txn_layer).collect()
    } else {
        cfgs.to_vec()
    };
    plan(&cfgs, layers, &BTreeMap::new()).map(|_| ())
}

/// One export of a planned set.
struct Planned<'a> {
    cfg: &'a ExportConfig,
    id: u16,
    parent: Option<u16>,
    /// The running export it takes over.
    kept: Option<&'a Arc<Export>>,
}

/// A set checked and laid out, nothing opened yet.
struct Plan<'a> {
    nodes: BTreeMap<u16, PseudoNode>,
    exports: Vec<Planned<'a>>,
    root_export: Option<u16>,
}

/// Every check that needs no backend, and the pseudo tree.
fn plan<'a>(
    cfgs: &'a [ExportConfig],
    layers: &LayerRegistry,
    running: &'a BTreeMap<u16, Arc<Export>>,
) -> Result<Plan<'a>, ExportError> {
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
    let mut all: Vec<(Vec<String>, &ExportConfig)> = Vec::new();
    for c in cfgs {
        let comps = components(&c.name)?;
        if all.iter().any(|(p, _)| *p == comps) {
            return Err(ExportError::Duplicate(c.name.clone()));
        }
        all.push((comps, c));
    }
    overlapping_paths(cfgs)?;
    let root = all.iter().any(|(p, _)| p.is_empty());
    if root && all.len() > 1 {
        return Err(ExportError::RootWithOthers);
    }
    for (a, ca) in &all {
        for (b, cb) in &all {
            if a.len() < b.len() && b.starts_with(a) {
                return Err(ExportError::Nested(cb.name.clone(), ca.name.clone()));
            }
        }
    }
    let mut nodes = BTreeMap::new();
    if !root {
        nodes.insert(
            0,
            PseudoNode {
                name: Bytes::new(),
                parent: 0,
                children: BTreeMap::new(),
            },
        );
    }
    let mut names: BTreeMap<u16, String> = BTreeMap::new();
    let mut node_paths: BTreeMap<u16, Vec<String>> = BTreeMap::from([(0, Vec::new())]);
    let mut exports = Vec::new();
    for (comps, c) in &all {
        let id = export_id(&c.name);
        if let Some(other) = names.get(&id) {
            return Err(ExportError::IdCollision(other.clone(), c.name.clone()));
        }
        names.insert(id, c.name.clone());
        let kept = match running.get(&id) {
            Some(old) if old.name == c.name => match replaced_how(&old.config, c) {
                Some(how) => {
                    return Err(ExportError::Replaced {
                        name: c.name.clone(),
                        how,
                    })
                }
                None => Some(old),
            },
            _ => None,
        };
        let parent = if comps.is_empty() {
            None
        } else {
            Some(add_pseudo_path(&mut nodes, &mut node_paths, comps, id)?)
        };
        exports.push(Planned {
            cfg: c,
            id,
            parent,
            kept,
        });
    }
    Ok(Plan {
        nodes,
        root_export: if root {
            exports.first().map(|p| p.id)
        } else {
            None
        },
        exports,
    })
}

/// Adds the pseudo directories leading to the export `id` at `comps` and the export
/// as the last one's child; returns that directory's id.
fn add_pseudo_path(
    nodes: &mut BTreeMap<u16, PseudoNode>,
    paths: &mut BTreeMap<u16, Vec<String>>,
    comps: &[String],
    id: u16,
) -> Result<u16, ExportError> {
    let mut node = 0u16;
    for depth in 1..comps.len() {
        let key = Bytes::from(comps[depth - 1].clone().into_bytes());
        let existing = match nodes.get(&node).and_then(|n| n.children.get(&key)) {
            Some(PseudoChild::Node(n)) => Some(*n),
            _ => None,
        };
        node = match existing {
            Some(n) => n,
            None => {
                let path = &comps[..depth];
                let n = pseudo_id(path);
                if let Some(other) = paths.get(&n) {
                    return Err(ExportError::IdCollision(
                        format!("/{}", other.join("/")),
                        format!("/{}", path.join("/")),
                    ));
                }
                paths.insert(n, path.to_vec());
                nodes.insert(
                    n,
                    PseudoNode {
                        name: key.clone(),
                        parent: node,
                        children: BTreeMap::new(),
                    },
                );
                if let Some(p) = nodes.get_mut(&node) {
                    p.children.insert(key, PseudoChild::Node(n));
                }
                n
            }
        };
    }
    let leaf = Bytes::from(comps[comps.len() - 1].clone().into_bytes());
    if let Some(p) = nodes.get_mut(&node) {
        p.children.insert(leaf, PseudoChild::Export(id));
    }
    Ok(node)
}

/// Opens the backend of a new export.
fn open(
    c: &ExportConfig,
    id: u16,
    parent: Option<u16>,
    src: &Sources<'_>,
) -> Result<Export, ExportError> {
    let identity = export_identity(c);
    if let (Some(d), None) = (src.state_dir, &c.prebuilt) {
        legacy_journal(d, id, &c.name)?;
    }
    let backend: Arc<dyn Backend> = match &c.prebuilt {
        Some(b) => b.0.clone(),
        None => src
            .layers
            .build_with_state(
                c.backend.names(),
                &c.path,
                src.state_dir
                    .map(|d| layer_state_dir(d, &identity))
                    .as_deref(),
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
        clients: rules_of(c),
        config: c.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{CompoundScope, Exports};
    use super::*;
    use crate::config::BackendKind;
    use txnfs_backend::OpCtx;

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
        let e = Exports::build(&[mem("/a/b"), mem("/a/c"), mem("/d")])
            .unwrap()
            .snapshot();
        assert_eq!(e.exports.len(), 3);
        // root, "a"
        assert_eq!(e.nodes.len(), 2);
        assert_eq!(e.nodes[&0].children.len(), 2);
        let a = pseudo_id(&["a".to_string()]);
        assert_eq!(e.nodes[&a].children.len(), 2);
        assert_eq!(e.get(export_id("/d")).unwrap().parent_node, Some(0));
        assert_eq!(e.get(export_id("/a/b")).unwrap().parent_node, Some(a));
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
        assert!(r.root_export().is_some());
        assert!(r.snapshot().nodes.is_empty());
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
        let set = e.snapshot();
        let b = &set.exports.values().next().unwrap().backend;
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
