//! Transactional COMPOUNDs (ADR 0021) in the simulation: random heterogeneous
//! transactions (mkdir, create + write, overwrite, SETATTR size and mode, remove,
//! rename of files and directories, link), some ending on purpose with an op that
//! fails (random aborts), sent with procedure PROC_TXN_COMPOUND among the plain
//! traffic; transactions cut short by a crash (driven on the txn layer directly, then
//! the server restarts over the same backend and journal, sometimes crashing during
//! recovery too); and the oracle: a committed transaction's effects are all there, an
//! aborted, failed or crashed one left nothing.
//!
//! Transactions live in a directory of their own (`tx` at the export root, made at
//! bootstrap) that plain traffic never touches, so the model of it ([`TxModel`]) is
//! exact: every name, type, size, mode (once seen), file id (once seen) and byte.

use crate::fault::Spare;
use crate::sim::{Sim, Violation, ViolationKind as K};
use crate::wire::{self, status_of, Fh, ANON};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use txnfs_backend::txn::TxnLayer;
use txnfs_backend::{Backend, CreateMode, Creds, FileKey, NodeKind, OpCtx, SetAttrs};
use txnfs_proto::nfs4::*;

/// The transactions' directory at the export root.
pub const AREA: &[u8] = b"tx";
/// Compound ids for transactions the simulation drives on the layer directly (far from
/// the server's own).
const DIRECT_COMPOUND: u64 = 1 << 62;
/// Ops of a transaction besides SEQUENCE (sessions allow 64 per COMPOUND).
const MAX_OPS: usize = 60;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxNode {
    pub is_dir: bool,
    pub data: Vec<u8>,
    /// Permission bits, once set or seen.
    pub mode: Option<u32>,
    /// The file id, once seen (names of one object share it; a rename keeps it).
    pub fileid: Option<u64>,
    /// The file handle, once seen (requests start from the nearest directory whose
    /// handle the model knows instead of looking the whole path up).
    pub fh: Option<Fh>,
}

/// The transactions' directory as the model knows it: node 0 is `tx` itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxModel {
    pub area: Fh,
    pub nodes: Vec<TxNode>,
    /// (directory node, name) -> node.
    pub entries: BTreeMap<(usize, Bytes), usize>,
}

/// One step of a transaction.
#[derive(Debug, Clone)]
pub enum Step {
    Mkdir {
        dir: usize,
        name: Bytes,
    },
    /// OPEN(create) + WRITE (current stateid) + CLOSE.
    CreateWrite {
        dir: usize,
        name: Bytes,
        offset: u64,
        data: Bytes,
    },
    /// LOOKUP + WRITE with the anonymous stateid.
    Overwrite {
        dir: usize,
        name: Bytes,
        offset: u64,
        data: Bytes,
        stable: bool,
    },
    SetSize {
        dir: usize,
        name: Bytes,
        size: u64,
    },
    SetMode {
        dir: usize,
        name: Bytes,
        mode: u32,
    },
    Remove {
        dir: usize,
        name: Bytes,
    },
    Rename {
        from_dir: usize,
        from: Bytes,
        to_dir: usize,
        to: Bytes,
    },
    Link {
        dir: usize,
        name: Bytes,
        to_dir: usize,
        to: Bytes,
    },
    /// Fails on purpose (a random abort): REMOVE of a missing name (NOENT).
    FailRemoveMissing {
        dir: usize,
        name: Bytes,
    },
    /// Fails on purpose: CREATE of a name that exists (EXIST).
    FailCreateExisting {
        dir: usize,
        name: Bytes,
    },
    /// Fails on purpose: an op transactions do not allow (NOTSUPP).
    FailNotAllowed,
}

impl Step {
    /// The status this step fails with on purpose.
    fn planned_failure(&self) -> Option<nfsstat4> {
        match self {
            Step::FailRemoveMissing { .. } => Some(nfsstat4::NFS4ERR_NOENT),
            Step::FailCreateExisting { .. } => Some(nfsstat4::NFS4ERR_EXIST),
            Step::FailNotAllowed => Some(nfsstat4::NFS4ERR_NOTSUPP),
            _ => None,
        }
    }

    /// The directory entries this step may change.
    fn touches(&self) -> Vec<(usize, Bytes)> {
        match self {
            Step::Mkdir { dir, name }
            | Step::CreateWrite { dir, name, .. }
            | Step::Overwrite { dir, name, .. }
            | Step::SetSize { dir, name, .. }
            | Step::SetMode { dir, name, .. }
            | Step::Remove { dir, name }
            | Step::FailRemoveMissing { dir, name }
            | Step::FailCreateExisting { dir, name } => vec![(*dir, name.clone())],
            Step::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } => vec![(*from_dir, from.clone()), (*to_dir, to.clone())],
            Step::Link {
                dir,
                name,
                to_dir,
                to,
            } => vec![(*dir, name.clone()), (*to_dir, to.clone())],
            Step::FailNotAllowed => vec![],
        }
    }
}

impl TxModel {
    pub fn new(area: Fh) -> TxModel {
        TxModel {
            area: area.clone(),
            nodes: vec![TxNode {
                is_dir: true,
                data: Vec::new(),
                mode: None,
                fileid: None,
                fh: Some(area.clone()),
            }],
            entries: BTreeMap::new(),
        }
    }

    fn child(&self, dir: usize, name: &[u8]) -> Option<usize> {
        self.entries
            .get(&(dir, Bytes::copy_from_slice(name)))
            .copied()
    }

    fn children(&self, dir: usize) -> usize {
        self.entries.keys().filter(|(d, _)| *d == dir).count()
    }

    /// The names from `tx` down to directory `dir` (`None`: not reachable).
    pub fn path(&self, dir: usize) -> Option<Vec<Bytes>> {
        let mut path = Vec::new();
        let mut at = dir;
        while at != 0 {
            let ((parent, name), _) = self.entries.iter().find(|(_, &c)| c == at)?;
            path.push(name.clone());
            at = *parent;
            if path.len() > self.nodes.len() {
                return None;
            }
        }
        path.reverse();
        Some(path)
    }

    /// Whether `a` is `b` or one of its ancestors.
    fn is_ancestor(&self, a: usize, b: usize) -> bool {
        let mut at = b;
        loop {
            if at == a {
                return true;
            }
            if at == 0 {
                return false;
            }
            match self.entries.iter().find(|(_, &c)| c == at) {
                Some(((p, _), _)) => at = *p,
                None => return false,
            }
        }
    }

    fn dirs(&self) -> Vec<usize> {
        let mut v = vec![0];
        v.extend(
            self.entries
                .values()
                .filter(|&&c| self.nodes[c].is_dir)
                .copied(),
        );
        v
    }

    fn entries_where(&self, f: impl Fn(&TxNode) -> bool) -> Vec<(usize, Bytes)> {
        self.entries
            .iter()
            .filter(|(_, &c)| f(&self.nodes[c]))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn new_node(&mut self, is_dir: bool) -> usize {
        self.nodes.push(TxNode {
            is_dir,
            data: Vec::new(),
            mode: None,
            fileid: None,
            fh: None,
        });
        self.nodes.len() - 1
    }

    fn write(&mut self, node: usize, offset: u64, data: &[u8]) {
        let d = &mut self.nodes[node].data;
        let end = offset as usize + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(data);
    }

    /// Apply a step that succeeds (the generator only makes valid ones).
    fn apply(&mut self, s: &Step) {
        match s {
            Step::Mkdir { dir, name } => {
                let n = self.new_node(true);
                self.entries.insert((*dir, name.clone()), n);
            }
            Step::CreateWrite {
                dir,
                name,
                offset,
                data,
            } => {
                let n = self.new_node(false);
                self.entries.insert((*dir, name.clone()), n);
                self.write(n, *offset, data);
            }
            Step::Overwrite {
                dir,
                name,
                offset,
                data,
                ..
            } => {
                if let Some(n) = self.child(*dir, name) {
                    self.write(n, *offset, data);
                }
            }
            Step::SetSize { dir, name, size } => {
                if let Some(n) = self.child(*dir, name) {
                    self.nodes[n].data.resize(*size as usize, 0);
                }
            }
            Step::SetMode { dir, name, mode } => {
                if let Some(n) = self.child(*dir, name) {
                    self.nodes[n].mode = Some(*mode);
                }
            }
            Step::Remove { dir, name } => {
                self.entries.remove(&(*dir, name.clone()));
            }
            Step::Rename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                let Some(n) = self.child(*from_dir, from) else {
                    return;
                };
                if self.child(*to_dir, to) == Some(n) {
                    return; // one object under both names: nothing happens
                }
                self.entries.remove(&(*from_dir, from.clone()));
                self.entries.insert((*to_dir, to.clone()), n);
            }
            Step::Link {
                dir,
                name,
                to_dir,
                to,
            } => {
                if let Some(n) = self.child(*dir, name) {
                    self.entries.insert((*to_dir, to.clone()), n);
                }
            }
            Step::FailRemoveMissing { .. }
            | Step::FailCreateExisting { .. }
            | Step::FailNotAllowed => {}
        }
    }
}

/// What a transaction did, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
}

fn name(sim: &mut Sim, prefix: &str) -> Bytes {
    let n = sim.next_req;
    sim.next_req += 1;
    wire::name(&format!("{prefix}{n}"))
}

fn data(sim: &mut Sim) -> Bytes {
    let n = sim.next_req;
    sim.next_req += 1;
    let len = 1 + sim.rng.below(100) as usize;
    let mut b = BytesMut::with_capacity(len + 8);
    b.put_u64(n);
    while b.len() < len + 8 {
        b.put_u8(sim.rng.below(256) as u8);
    }
    b.freeze()
}

fn pick<T: Clone>(sim: &mut Sim, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[sim.rng.index(v.len())].clone())
}

/// One random step that is valid in `m` (applied to it), or a planned failure.
fn random_step(sim: &mut Sim, m: &mut TxModel) -> Step {
    let dirs = m.dirs();
    let files = m.entries_where(|n| !n.is_dir);
    let all: Vec<(usize, Bytes)> = m.entries.keys().cloned().collect();
    let crowded = m.entries.len() > 40;
    let choice = if crowded {
        50 + sim.rng.below(20)
    } else {
        sim.rng.below(100)
    };
    let dir = pick(sim, &dirs).unwrap_or(0);
    let step = match choice {
        0..=11 => Step::Mkdir {
            dir,
            name: name(sim, "td"),
        },
        12..=29 => {
            let offset = sim.rng.below(64);
            Step::CreateWrite {
                dir,
                name: name(sim, "tf"),
                offset,
                data: data(sim),
            }
        }
        30..=41 => match pick(sim, &files) {
            Some((dir, name)) => Step::Overwrite {
                dir,
                name,
                offset: sim.rng.below(200),
                data: data(sim),
                stable: sim.rng.chance(500),
            },
            None => Step::Mkdir {
                dir,
                name: name(sim, "td"),
            },
        },
        42..=49 => match pick(sim, &files) {
            Some((dir, name)) => Step::SetSize {
                dir,
                name,
                size: sim.rng.below(300),
            },
            None => Step::FailNotAllowed,
        },
        50..=55 => match pick(sim, &all) {
            Some((dir, name)) => Step::SetMode {
                dir,
                name,
                mode: [0o600, 0o640, 0o644, 0o700, 0o755, 0o444][sim.rng.index(6)],
            },
            None => Step::FailNotAllowed,
        },
        56..=67 => {
            let removable: Vec<(usize, Bytes)> = all
                .iter()
                .filter(|(d, n)| {
                    let c = m.entries[&(*d, n.clone())];
                    !m.nodes[c].is_dir || m.children(c) == 0
                })
                .cloned()
                .collect();
            match pick(sim, &removable) {
                Some((dir, name)) => Step::Remove { dir, name },
                None => Step::FailRemoveMissing {
                    dir,
                    name: name(sim, "tn"),
                },
            }
        }
        68..=83 => match pick(sim, &all) {
            Some((from_dir, from)) => {
                let moved = m.entries[&(from_dir, from.clone())];
                let is_dir = m.nodes[moved].is_dir;
                // Never into its own subtree.
                let targets: Vec<usize> = dirs
                    .iter()
                    .copied()
                    .filter(|&d| !(is_dir && m.is_ancestor(moved, d)))
                    .collect();
                let to_dir = pick(sim, &targets).unwrap_or(0);
                // Now and then over an existing target of the same kind (a file, or
                // an empty directory), else to a new name.
                let over: Vec<Bytes> = m
                    .entries
                    .iter()
                    .filter(|((d, _), &c)| {
                        *d == to_dir
                            && c != moved
                            && m.nodes[c].is_dir == is_dir
                            && (!is_dir || m.children(c) == 0)
                    })
                    .map(|((_, n), _)| n.clone())
                    .collect();
                let to = match pick(sim, &over) {
                    Some(n) if sim.rng.chance(300) => n,
                    _ => name(sim, "tr"),
                };
                Step::Rename {
                    from_dir,
                    from,
                    to_dir,
                    to,
                }
            }
            None => Step::FailRemoveMissing {
                dir,
                name: name(sim, "tn"),
            },
        },
        84..=91 => match pick(sim, &files) {
            Some((d, n)) => Step::Link {
                dir: d,
                name: n,
                to_dir: dir,
                to: name(sim, "tl"),
            },
            None => Step::FailNotAllowed,
        },
        _ => match pick(sim, &all) {
            Some((dir, name)) if sim.rng.chance(500) => Step::FailCreateExisting { dir, name },
            _ if sim.rng.chance(500) => Step::FailNotAllowed,
            _ => Step::FailRemoveMissing {
                dir,
                name: name(sim, "tn"),
            },
        },
    };
    m.apply(&step);
    step
}

/// A random transaction: 1..=6 steps; a third end on purpose with a failing op
/// (earlier planned failures end the plan there).
fn random_plan(sim: &mut Sim) -> Vec<Step> {
    let mut m = sim.tx.clone();
    let n = 1 + sim.rng.below(6);
    let mut plan = Vec::new();
    for _ in 0..n {
        let s = random_step(sim, &mut m);
        let fails = s.planned_failure().is_some();
        plan.push(s);
        if fails {
            return plan;
        }
    }
    if sim.rng.chance(330) {
        let dir = pick(sim, &m.dirs()).unwrap_or(0);
        let existing: Vec<Bytes> = m
            .entries
            .keys()
            .filter(|(d, _)| *d == dir)
            .map(|(_, n)| n.clone())
            .collect();
        let s = match pick(sim, &existing) {
            Some(name) if sim.rng.chance(400) => Step::FailCreateExisting { dir, name },
            _ if sim.rng.chance(400) => Step::FailNotAllowed,
            _ => Step::FailRemoveMissing {
                dir,
                name: name(sim, "tn"),
            },
        };
        plan.push(s);
    }
    plan
}

/// PUTFH of the nearest directory above `dir` whose handle model `m` knows, then
/// LOOKUP down to `dir`.
fn goto(m: &TxModel, dir: usize, ops: &mut Vec<nfs_argop4>) {
    if let Some(fh) = &m.nodes[dir].fh {
        ops.push(wire::putfh(fh));
        return;
    }
    match m.entries.iter().find(|(_, &c)| c == dir) {
        Some(((parent, name), _)) if *parent != dir => {
            goto(m, *parent, ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: name.clone(),
            }));
        }
        _ => ops.push(wire::putfh(&m.area)),
    }
}

fn setattr(attrs: fattr4) -> nfs_argop4 {
    nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
        stateid: ANON,
        obj_attributes: attrs,
    }))
}

const FATTR4_TYPE: u32 = 1;
const FATTR4_FILEID: u32 = 20;
const FATTR4_MODE: u32 = 33;

fn mode_fattr(mode: u32) -> fattr4 {
    fattr4 {
        attrmask: vec![0, 1 << (FATTR4_MODE - 32)],
        attr_vals: Bytes::copy_from_slice(&mode.to_be_bytes()),
    }
}

/// GETATTR type, size, fileid, mode.
fn getattr_all() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![
            (1 << FATTR4_TYPE) | (1 << wire::FATTR4_SIZE) | (1 << FATTR4_FILEID),
            1 << (FATTR4_MODE - 32),
        ],
    })
}

/// (type, size, fileid, mode) from [`getattr_all`].
fn decode_all(f: &fattr4) -> Option<(u32, u64, u64, u32)> {
    let w0 = (1 << FATTR4_TYPE) | (1 << wire::FATTR4_SIZE) | (1 << FATTR4_FILEID);
    if f.attrmask.first().copied()? & w0 != w0
        || f.attrmask.get(1).copied()? & (1 << (FATTR4_MODE - 32)) == 0
        || f.attr_vals.len() < 24
    {
        return None;
    }
    let v = &f.attr_vals;
    let t = u32::from_be_bytes(v[0..4].try_into().ok()?);
    let size = u64::from_be_bytes(v[4..12].try_into().ok()?);
    let fileid = u64::from_be_bytes(v[12..20].try_into().ok()?);
    let mode = u32::from_be_bytes(v[20..24].try_into().ok()?);
    Some((t, size, fileid, mode & 0o7777))
}

/// The ops of one step in model `m` (before the step); the index of the op that
/// decides it is the last one.
fn step_ops(m: &TxModel, s: &Step, owner: &Bytes) -> Vec<nfs_argop4> {
    let mut ops = Vec::new();
    match s {
        Step::Mkdir { dir, name } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                objtype: createtype4::NF4DIR,
                objname: name.clone(),
                createattrs: wire::empty_fattr(),
            })));
        }
        Step::CreateWrite {
            dir,
            name,
            offset,
            data,
        } => {
            goto(m, *dir, &mut ops);
            ops.push(wire::open(
                name,
                owner,
                OPEN4_SHARE_ACCESS_BOTH,
                OPEN4_SHARE_DENY_NONE,
                wire::openhow(true),
            ));
            ops.push(wire::write_with(
                &CURRENT,
                *offset,
                stable_how4::FILE_SYNC4,
                data.clone(),
            ));
            ops.push(nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: CURRENT,
            }));
        }
        Step::Overwrite {
            dir,
            name,
            offset,
            data,
            stable,
        } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: name.clone(),
            }));
            let how = if *stable {
                stable_how4::FILE_SYNC4
            } else {
                stable_how4::UNSTABLE4
            };
            ops.push(wire::write_with(&ANON, *offset, how, data.clone()));
            if !*stable {
                ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
                    offset: 0,
                    count: 0,
                }));
            }
        }
        Step::SetSize { dir, name, size } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: name.clone(),
            }));
            ops.push(setattr(wire::size_fattr(*size)));
        }
        Step::SetMode { dir, name, mode } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: name.clone(),
            }));
            ops.push(setattr(mode_fattr(*mode)));
        }
        Step::Remove { dir, name } | Step::FailRemoveMissing { dir, name } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_REMOVE(REMOVE4args {
                target: name.clone(),
            }));
        }
        Step::Rename {
            from_dir,
            from,
            to_dir,
            to,
        } => {
            goto(m, *from_dir, &mut ops);
            ops.push(nfs_argop4::OP_SAVEFH);
            goto(m, *to_dir, &mut ops);
            ops.push(nfs_argop4::OP_RENAME(RENAME4args {
                oldname: from.clone(),
                newname: to.clone(),
            }));
        }
        Step::Link {
            dir,
            name,
            to_dir,
            to,
        } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: name.clone(),
            }));
            ops.push(nfs_argop4::OP_SAVEFH);
            goto(m, *to_dir, &mut ops);
            ops.push(nfs_argop4::OP_LINK(LINK4args {
                newname: to.clone(),
            }));
        }
        Step::FailCreateExisting { dir, name } => {
            goto(m, *dir, &mut ops);
            ops.push(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                objtype: createtype4::NF4DIR,
                objname: name.clone(),
                createattrs: wire::empty_fattr(),
            })));
        }
        Step::FailNotAllowed => {
            ops.push(nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
                rca_one_fs: false,
            }));
        }
    }
    ops
}

fn data_lost(v: Violation) -> Violation {
    Violation::new(K::DataLost, v.detail)
}

/// What the oracle checks of the transactions' directory.
#[derive(Debug, Clone)]
enum Check {
    /// A directory lists exactly the names the model has in it.
    Dir(usize),
    /// An entry (directory, name, node) the model has: type, mode, file id, handle,
    /// and for files size and bytes.
    Entry(usize, Bytes, usize),
}

/// The ops of a check: to the directory, then READDIR; or LOOKUP, GETFH, GETATTR and
/// for files READ.
fn check_ops(m: &TxModel, c: &Check) -> Vec<nfs_argop4> {
    let mut ops = Vec::new();
    match c {
        Check::Dir(d) => {
            goto(m, *d, &mut ops);
            ops.push(nfs_argop4::OP_READDIR(READDIR4args {
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 1 << 16,
                maxcount: 1 << 16,
                attr_request: vec![],
            }));
        }
        Check::Entry(d, nm, n) => {
            goto(m, *d, &mut ops);
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: nm.clone(),
            }));
            ops.push(nfs_argop4::OP_GETFH);
            ops.push(getattr_all());
            if !m.nodes[*n].is_dir {
                ops.push(wire::read(&ANON, 0, m.nodes[*n].data.len() as u32 + 64));
            }
        }
    }
    ops
}

/// The special "current stateid" (RFC 8881 §16.2.3.1.2).
const CURRENT: stateid4 = stateid4 {
    seqid: 1,
    other: [0; 12],
};

impl Sim {
    /// Make the transactions' directory (at bootstrap, spared from faults).
    pub(crate) fn make_txn_area(&mut self) -> Result<(), Violation> {
        let before = self.setup.backend.spare();
        self.setup.backend.set_spare(Spare::All);
        let ops = vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                objtype: createtype4::NF4DIR,
                objname: Bytes::from_static(AREA),
                createattrs: wire::empty_fattr(),
            })),
            nfs_argop4::OP_GETFH,
        ];
        let r = self.send_ops(0, ops);
        self.setup.backend.set_spare(before);
        let (_, res) = r?;
        match res.resarray.get(3) {
            Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(g))) => {
                self.tx = TxModel::new(g.object.clone());
                Ok(())
            }
            other => Err(Violation::new(
                K::Harness,
                format!("making the transactions' directory failed: {other:?}"),
            )),
        }
    }

    /// One random transaction by client `ci`: sent, judged, checked.
    pub(crate) fn txn_step(&mut self, ci: usize) -> Result<(), Violation> {
        if self.tx.area.is_empty() {
            return Ok(());
        }
        self.retransmit(ci, true)?;
        self.ensure_session(ci)?;
        if self.clients[ci].session.is_none() {
            return Ok(());
        }
        let mut plan = random_plan(self);
        if self.rng.chance(self.mix.txn_crash) {
            return self.crash_mid_txn(plan);
        }
        if self.rng.chance(60) {
            return self.conflicting_txns(ci, plan);
        }
        let owner = wire::name(&format!("tx-{ci}"));
        // The ops, each step's last op index (in the reply, after SEQUENCE); as many
        // steps as the session's 64 ops per COMPOUND take.
        let mut m = self.tx.clone();
        let mut ops = Vec::new();
        let mut ends = Vec::new();
        for (i, s) in plan.iter().enumerate() {
            let more = step_ops(&m, s, &owner);
            if ops.len() + more.len() > MAX_OPS {
                plan.truncate(i);
                break;
            }
            ops.extend(more);
            ends.push(ops.len());
            m.apply(s);
        }
        if plan.is_empty() {
            return Ok(());
        }
        let expect_fail = plan.iter().find_map(Step::planned_failure);
        let (bytes, _slot) = self.frame(ci, ops)?;
        let injected = self.ledger.injected();
        self.digest(0x7478);
        let (reply, res) = self.call_as(ci, bytes.clone(), true)?;
        self.spare_nothing();
        if !self.after_sequence(ci, &res)? {
            return Ok(());
        }
        let faulted = self.ledger.injected() > injected;
        self.stats.faults += self.ledger.injected() - injected;
        if self.trace {
            eprintln!(
                "step {} client {ci} TXN {plan:?} -> {:?} {:?}",
                self.step,
                res.status,
                res.resarray.iter().map(status_of).collect::<Vec<_>>()
            );
        }
        let outcome = self.judge_txn(&plan, &ends, &res, expect_fail, faulted)?;
        match outcome {
            Outcome::Committed => {
                self.tx = m;
                self.stats.txn_committed += 1;
            }
            Outcome::Aborted => {
                self.stats.txn_aborted += 1;
                if faulted {
                    self.stats.txn_faulted += 1;
                }
                if self.cfg.break_txn {
                    self.leak_first_change(&plan)?;
                }
            }
        }
        if self.rng.chance(100) {
            // A retransmission: the cached reply, nothing executed again.
            self.stats.retransmissions += 1;
            let (again, _) = self.call_as(ci, bytes, true)?;
            if again != reply {
                return Err(Violation::new(
                    K::ExecutedTwice,
                    format!("a retransmitted transaction got another reply: {plan:?}"),
                ));
            }
        }
        let touched = self.known_dirs(plan.iter().flat_map(Step::touches));
        self.tx_touched.extend(touched.iter().cloned());
        self.verify_tx(&touched, "after a transaction")
    }

    /// Back to faults as planned (should a COMPOUND have begun without ending).
    fn spare_nothing(&self) {
        if self.setup.backend.spare() == Spare::Lookups {
            self.setup.backend.set_spare(Spare::Nothing);
        }
    }

    /// Two transactions at once: one driven on the txn layer directly makes a prefix
    /// of `plan` and stays open (holding its locks); meanwhile client `ci` sends the
    /// same plan as a transactional COMPOUND, which must conflict: NFS4ERR_DELAY (or an
    /// injected fault first), with everything it changed rolled back. Then the first
    /// one commits or aborts, and the model follows what it answered.
    fn conflicting_txns(&mut self, ci: usize, plan: Vec<Step>) -> Result<(), Violation> {
        let layer = self.server()?.txn_layer();
        let upto = 1 + self.rng.index(plan.len());
        let (done, cx) = self.drive_open(&layer, &plan[..upto])?;
        // A call that failed may have left its step half made: as the server would, the
        // transaction then aborts.
        let failed = done < upto;
        let owner = wire::name(&format!("tx-{ci}"));
        let mut ops = Vec::new();
        let mut m = self.tx.clone();
        for s in &plan {
            let more = step_ops(&m, s, &owner);
            if ops.len() + more.len() > MAX_OPS {
                break;
            }
            ops.extend(more);
            m.apply(s);
        }
        let mut outcome = Ok(());
        if done > 0 && !ops.is_empty() {
            let (bytes, _) = self.frame(ci, ops)?;
            let injected = self.ledger.injected();
            let (_, res) = self.call_as(ci, bytes, true)?;
            self.spare_nothing();
            if self.trace {
                eprintln!(
                    "step {} client {ci} TXN (against an open one) -> {:?} {:?}",
                    self.step,
                    res.status,
                    res.resarray.iter().map(status_of).collect::<Vec<_>>()
                );
            }
            if self.after_sequence(ci, &res)? {
                let faulted = self.ledger.injected() > injected;
                self.stats.faults += self.ledger.injected() - injected;
                let last = res.resarray.last().map(status_of);
                let ok = last == Some(nfsstat4::NFS4ERR_DELAY)
                    || (faulted
                        && matches!(
                            last,
                            Some(nfsstat4::NFS4ERR_IO) | Some(nfsstat4::NFS4ERR_NOSPC)
                        ));
                if res.status == nfsstat4::NFS4ERR_DELAY {
                    self.stats.txn_conflicts += 1;
                }
                if !ok || res.status == nfsstat4::NFS4_OK {
                    outcome = Err(Violation::new(
                        K::TxnAtomicity,
                        format!(
                            "a transaction over the entries another open transaction holds answered {:?} (op {}), not NFS4ERR_DELAY; plan {plan:?}",
                            res.status,
                            res.resarray.len().saturating_sub(1)
                        ),
                    ));
                }
            }
        }
        // The first transaction ends: commit or abort, spared from faults but for its
        // syncs (as the server's are).
        let commit = self.rng.chance(600) && !failed;
        let undo_faults = self.setup.backend.undo_faults();
        if !undo_faults {
            self.setup.backend.set_spare(if commit {
                Spare::AllButCommit
            } else {
                Spare::All
            });
        }
        let b: &dyn Backend = &*layer;
        let r = b.end_compound(&cx, commit);
        self.setup.backend.set_spare(Spare::Nothing);
        if self.trace {
            eprintln!(
                "step {} client {ci} two transactions: {done} of {plan:?} held open, then {} -> {r:?}; the other: {outcome:?}",
                self.step,
                if commit { "commit" } else { "abort" },
            );
        }
        outcome?;
        if commit && r.is_ok() {
            for s in &plan[..done] {
                self.tx.apply(s);
            }
            self.stats.txn_committed += 1;
        } else {
            self.stats.txn_aborted += 1;
        }
        let touched = self.known_dirs(plan.iter().flat_map(Step::touches));
        self.tx_touched.extend(touched.iter().cloned());
        self.verify_tx(&touched, "after two conflicting transactions")
    }

    /// Begin a transaction on the layer directly and make `steps` in it (stopping at
    /// the first failed call), leaving it open. Returns how many steps were made and
    /// its context (to end it).
    fn drive_open(
        &mut self,
        layer: &Arc<TxnLayer>,
        steps: &[Step],
    ) -> Result<(usize, OpCtx), Violation> {
        self.next_direct += 1;
        let cx = OpCtx {
            creds: Creds::default(),
            client: None,
            compound: DIRECT_COMPOUND + self.next_direct,
            txn: true,
            span: Default::default(),
            waited: Default::default(),
        };
        let b: &dyn Backend = &**layer;
        if b.begin_compound(&cx).is_err() {
            return Ok((0, cx));
        }
        let mut m = self.tx.clone();
        let mut done = 0;
        for s in steps {
            if run_direct(b, &cx, &m, s).is_err() {
                break;
            }
            m.apply(s);
            done += 1;
        }
        // The transaction stays open: nothing of it is tied to this thread.
        Ok((done, cx))
    }

    /// The oracle's judgement of a transaction's reply: all ops succeeded (commit), or
    /// it stopped at the first failing op, which must be the planned failure or an
    /// injected fault (EIO, ENOSPC; a commit whose sync failed answers EIO at its last
    /// op).
    fn judge_txn(
        &mut self,
        plan: &[Step],
        ends: &[usize],
        res: &COMPOUND4res,
        expect_fail: Option<nfsstat4>,
        faulted: bool,
    ) -> Result<Outcome, Violation> {
        let results = &res.resarray[1..];
        let total = *ends.last().unwrap_or(&0);
        let bad = |what: String| Violation::new(K::TxnAtomicity, what);
        if res.status == nfsstat4::NFS4_OK {
            if let Some(e) = expect_fail {
                return Err(bad(format!(
                    "transaction committed although it ends with an op that must fail ({e:?}): {plan:?}"
                )));
            }
            if results.len() != total || results.iter().any(|r| status_of(r) != nfsstat4::NFS4_OK) {
                return Err(bad(format!(
                    "transaction OK with {} of {total} results: {:?}",
                    results.len(),
                    results.iter().map(status_of).collect::<Vec<_>>()
                )));
            }
            return Ok(Outcome::Committed);
        }
        let at = results.len();
        let last = results.last().map(status_of).unwrap_or(res.status);
        if last != res.status
            || results[..at.saturating_sub(1)]
                .iter()
                .any(|r| status_of(r) != nfsstat4::NFS4_OK)
        {
            return Err(Violation::new(
                K::Harness,
                format!("transaction reply not stopped at its first failure: {res:?}"),
            ));
        }
        let planned_at = plan.iter().position(|s| s.planned_failure().is_some());
        let step = ends.iter().position(|&e| at <= e).unwrap_or(plan.len());
        let is_planned = planned_at == Some(step) && at == ends[step] && Some(last) == expect_fail;
        let injected = faulted
            && matches!(last, nfsstat4::NFS4ERR_IO | nfsstat4::NFS4ERR_NOSPC)
            && planned_at.is_none_or(|p| step <= p);
        if !is_planned && !injected {
            return Err(Violation::new(
                K::UnexpectedStatus,
                format!(
                    "transaction op {at} (step {step}: {:?}) answered {last:?}{}; plan {plan:?}",
                    plan.get(step),
                    if faulted { " (faults injected)" } else { "" }
                ),
            ));
        }
        Ok(Outcome::Aborted)
    }

    /// Check every entry in `touched` (and the ones the model has for the same
    /// directories' names) against the model: present or absent, type, size, mode,
    /// file id and bytes. Spared from faults: it checks, it does not test.
    pub(crate) fn verify_tx(
        &mut self,
        touched: &[(usize, Bytes)],
        when: &str,
    ) -> Result<(), Violation> {
        let before = self.setup.backend.spare();
        self.setup.backend.set_spare(Spare::All);
        let r = self.verify_tx_spared(touched, when);
        self.setup.backend.set_spare(before);
        r
    }

    fn verify_tx_spared(
        &mut self,
        touched: &[(usize, Bytes)],
        when: &str,
    ) -> Result<(), Violation> {
        let ci = 0;
        self.retransmit(ci, true)?;
        self.ensure_session(ci)?;
        // Directories that exist (a missing one shows in its own entry, checked too).
        let reachable = |m: &TxModel, d: usize| {
            (d == 0 || m.entries.values().any(|&c| c == d)) && m.path(d).is_some()
        };
        let mut checks = Vec::new();
        // Directories are listed where a touched name must be absent (READDIR shows
        // it, and any name the model does not have); present names are checked one by
        // one.
        let dirs: BTreeSet<usize> = touched
            .iter()
            .filter(|(d, n)| self.tx.child(*d, n).is_none())
            .map(|(d, _)| *d)
            .collect();
        for d in dirs {
            if reachable(&self.tx, d) {
                checks.push(Check::Dir(d));
            }
        }
        let names: BTreeSet<(usize, Bytes)> = touched.iter().cloned().collect();
        for (d, nm) in names {
            if reachable(&self.tx, d) {
                if let Some(n) = self.tx.child(d, &nm) {
                    checks.push(Check::Entry(d, nm, n));
                }
            }
        }
        // As many checks per COMPOUND as its ops allow; every op must succeed.
        let mut i = 0;
        while i < checks.len() {
            let mut ops = Vec::new();
            let mut batch = Vec::new();
            while i < checks.len() {
                let more = check_ops(&self.tx, &checks[i]);
                if !batch.is_empty() && ops.len() + more.len() > MAX_OPS {
                    break;
                }
                // (reply index of the check's first op, after SEQUENCE)
                batch.push((ops.len() + 1, checks[i].clone(), more.len()));
                ops.extend(more);
                i += 1;
            }
            if ops.len() > MAX_OPS {
                continue; // a path too deep for one COMPOUND: not checked
            }
            let (_, res) = self.send_ops(ci, ops)?;
            if self.clients[ci].session.is_none() {
                // Lost to an expiry nobody saw yet: check again next time.
                return Ok(());
            }
            for (at, check, len) in batch {
                self.judge_check(&res, at, len, &check, when)?;
            }
        }
        Ok(())
    }

    /// One check's results (ops `at..at + len` of `res`) against the model.
    fn judge_check(
        &mut self,
        res: &COMPOUND4res,
        at: usize,
        len: usize,
        check: &Check,
        when: &str,
    ) -> Result<(), Violation> {
        let (dir, shown) = match check {
            Check::Dir(d) => (*d, String::new()),
            Check::Entry(d, nm, _) => (*d, String::from_utf8_lossy(nm).to_string()),
        };
        let path: String = self
            .tx
            .path(dir)
            .unwrap_or_default()
            .iter()
            .map(|c| String::from_utf8_lossy(c).to_string() + "/")
            .collect();
        let fail = |what: String| {
            Violation::new(K::TxnAtomicity, format!("{when}: tx/{path}{shown}: {what}"))
        };
        let st = |i: usize| res.resarray.get(i).map(status_of);
        for k in at..at + len {
            if st(k) != Some(nfsstat4::NFS4_OK) {
                let what = match check {
                    Check::Entry(..) if k == at + len - if self.is_file(check) { 4 } else { 3 } => {
                        format!(
                            "the model has this entry, LOOKUP answered {:?}; the directory holds {}",
                            st(k),
                            self.listing(dir)
                        )
                    }
                    _ => format!("op {} of the check answered {:?}", k - at, st(k)),
                };
                return Err(fail(what));
            }
        }
        let last = at + len - 1;
        match check {
            Check::Dir(d) => {
                let Some(nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(r))) = res.resarray.get(last)
                else {
                    return Err(Violation::new(K::Harness, "READDIR result shape"));
                };
                let listed: BTreeSet<Bytes> =
                    r.reply.entries.iter().map(|e| e.name.clone()).collect();
                let model: BTreeSet<Bytes> = self
                    .tx
                    .entries
                    .keys()
                    .filter(|(p, _)| p == d)
                    .map(|(_, n)| n.clone())
                    .collect();
                if r.reply.eof && listed != model {
                    let show = |v: Vec<&Bytes>| {
                        v.iter()
                            .map(|n| String::from_utf8_lossy(n).to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    return Err(fail(format!(
                        "the directory lists names the model does not have: [{}]; the model has names it does not list: [{}]",
                        show(listed.difference(&model).collect()),
                        show(model.difference(&listed).collect()),
                    )));
                }
                self.stats.txn_entries_checked += listed.len() as u64;
            }
            Check::Entry(_, _, node) => {
                let file = self.is_file(check);
                let base = if file { last - 3 } else { last - 2 };
                let fh = match res.resarray.get(base + 1) {
                    Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(g))) => g.object.clone(),
                    _ => return Err(Violation::new(K::Harness, "GETFH result shape")),
                };
                let Some(nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g))) =
                    res.resarray.get(base + 2)
                else {
                    return Err(Violation::new(K::Harness, "GETATTR result shape"));
                };
                let Some((t, got_size, fileid, mode)) = decode_all(&g.obj_attributes) else {
                    return Err(Violation::new(K::Harness, "GETATTR attributes missing"));
                };
                let n = &mut self.tx.nodes[*node];
                if *n.fh.get_or_insert(fh.clone()) != fh {
                    return Err(fail("another file handle than before".into()));
                }
                let want_type = if n.is_dir {
                    nfs_ftype4::NF4DIR as u32
                } else {
                    nfs_ftype4::NF4REG as u32
                };
                if t != want_type {
                    return Err(fail(format!("type {t}, the model says {want_type}")));
                }
                if *n.mode.get_or_insert(mode) != mode {
                    return Err(fail(format!(
                        "mode {mode:o}, the model says {:o}",
                        n.mode.unwrap_or(0)
                    )));
                }
                if *n.fileid.get_or_insert(fileid) != fileid {
                    return Err(fail(format!(
                        "file id {fileid}, the model says {} (another object)",
                        n.fileid.unwrap_or(0)
                    )));
                }
                if file {
                    if got_size != n.data.len() as u64 {
                        return Err(fail(format!(
                            "size {got_size}, the model says {}",
                            n.data.len()
                        )));
                    }
                    let Some(nfs_resop4::OP_READ(READ4res::NFS4_OK(r))) = res.resarray.get(last)
                    else {
                        return Err(Violation::new(K::Harness, "READ result shape"));
                    };
                    if r.data[..] != n.data[..] {
                        let at = r
                            .data
                            .iter()
                            .zip(n.data.iter())
                            .position(|(a, b)| a != b)
                            .unwrap_or(r.data.len().min(n.data.len()));
                        // Bytes that do not read back as the model has them: lost data
                        // (invariant 2) whether a commit lost them or a rollback did.
                        return Err(data_lost(fail(format!(
                            "reads {} bytes, the model has {}; first difference at byte {at}",
                            r.data.len(),
                            n.data.len()
                        ))));
                    }
                    self.stats.bytes_verified += r.data.len() as u64;
                }
                self.stats.txn_entries_checked += 1;
            }
        }
        Ok(())
    }

    /// The entries of directories the model knows (a transaction that did not commit
    /// made its directories under node numbers the model will give to others).
    fn known_dirs(&self, e: impl Iterator<Item = (usize, Bytes)>) -> Vec<(usize, Bytes)> {
        e.filter(|(d, _)| self.tx.nodes.get(*d).is_some_and(|n| n.is_dir))
            .collect()
    }

    fn is_file(&self, check: &Check) -> bool {
        matches!(check, Check::Entry(_, _, n) if !self.tx.nodes[*n].is_dir)
    }

    /// What the backend holds in directory `dir` of the model, and in the backups
    /// (for failure messages).
    fn listing(&self, dir: usize) -> String {
        let b: &dyn Backend = &*self.setup.backend;
        let cx = OpCtx::default();
        let names = |k: &FileKey| -> String {
            match b.readdir(&cx, k, 0, 1000) {
                Ok((es, _)) => es
                    .iter()
                    .map(|e| String::from_utf8_lossy(&e.name).to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(e) => format!("({e})"),
            }
        };
        let here = match dir_key(b, &cx, &self.tx, dir) {
            Ok(k) => names(&k),
            Err(e) => format!("({e})"),
        };
        let backups = b
            .root()
            .and_then(|r| b.lookup(&cx, &r, txnfs_backend::txn::HIDDEN))
            .and_then(|(h, _)| b.lookup(&cx, &h, b"backup"))
            .map(|(k, _)| names(&k))
            .unwrap_or_else(|e| format!("({e})"));
        format!("[{here}]; backups [{backups}]")
    }

    /// The end of run: every entry the model has, and every name any transaction
    /// touched.
    pub(crate) fn audit_tx(&mut self) -> Result<(), Violation> {
        if self.tx.area.is_empty() {
            return Ok(());
        }
        let mut all: Vec<(usize, Bytes)> = self.tx.entries.keys().cloned().collect();
        all.extend(self.tx_touched.iter().cloned());
        self.verify_tx(&all, "end-of-run audit")
    }

    /// A crash in the middle of a transaction: run a prefix of `plan` on the txn layer
    /// directly (as the server would, without ending it), then the server dies and a
    /// new one starts over the same backend and journal; recovery must leave nothing
    /// of the transaction. Now and then recovery itself crashes and starts again.
    fn crash_mid_txn(&mut self, plan: Vec<Step>) -> Result<(), Violation> {
        self.note("crash in the middle of a transaction");
        let layer = self.server()?.txn_layer();
        let upto = 1 + self.rng.index(plan.len());
        let done = self.drive_direct(&layer, &plan[..upto], true)?;
        self.stats.txn_crashed += 1;
        if done > 0 {
            self.stats.txn_crashed_changes += done as u64;
        }
        drop(layer);
        // The server and its layer go away; the journal and the backend stay.
        self.server = None;
        let mut stops = self.rng.below(4);
        let layer = loop {
            let stop = (stops > 0).then(|| self.rng.below(3) as usize);
            match crate::server_port::open_txn_layer(&self.setup, stop) {
                Ok(l) => break l,
                Err(crate::server_port::PortError::RecoveryStopped) => {
                    self.stats.recovery_crashes += 1;
                    stops -= 1;
                }
                Err(e) => return Err(Violation::new(K::Harness, e.to_string())),
            }
        };
        let recovered = layer
            .stats
            .recovered
            .load(std::sync::atomic::Ordering::Relaxed);
        self.stats.txn_recovered += recovered;
        self.restart_over(Some(Arc::new(layer)))?;
        let touched = self.known_dirs(plan[..upto].iter().flat_map(Step::touches));
        self.tx_touched.extend(touched.iter().cloned());
        self.verify_tx(&touched, "after a crash in a transaction and recovery")
    }

    /// Run `steps` on the txn layer directly: as a transaction that is never ended
    /// (`txn`), or as plain calls (the harness self-test leaking a change). Stops at
    /// the first failed call. Returns how many steps were made.
    fn drive_direct(
        &mut self,
        layer: &Arc<TxnLayer>,
        steps: &[Step],
        txn: bool,
    ) -> Result<usize, Violation> {
        self.next_direct += 1;
        let cx = OpCtx {
            creds: Creds::default(),
            client: None,
            compound: DIRECT_COMPOUND + self.next_direct,
            txn,
            span: Default::default(),
            waited: Default::default(),
        };
        let b: &dyn Backend = &**layer;
        if b.begin_compound(&cx).is_err() {
            return Ok(0);
        }
        let mut m = self.tx.clone();
        let mut done = 0;
        for s in steps {
            if run_direct(b, &cx, &m, s).is_err() {
                break;
            }
            m.apply(s);
            done += 1;
        }
        // A transaction stays open (nothing of it is tied to this thread); a plain
        // COMPOUND ends.
        if !txn {
            let _ = b.end_compound(&cx, true);
        }
        Ok(done)
    }

    /// Harness self-test (`break_txn`): after an abort, make the first change of the
    /// transaction again outside of it, as a rollback that skipped it would leave it.
    fn leak_first_change(&mut self, plan: &[Step]) -> Result<(), Violation> {
        let Some(first) = plan
            .iter()
            .position(|s| matches!(s, Step::Mkdir { .. } | Step::CreateWrite { .. }))
        else {
            return Ok(());
        };
        // The model before the plan must still hold for the steps up to it.
        let layer = self.server()?.txn_layer();
        let before = self.setup.backend.spare();
        self.setup.backend.set_spare(Spare::All);
        let r = self.drive_direct(&layer, &plan[..=first], false);
        self.setup.backend.set_spare(before);
        r.map(|_| ())
    }
}

/// The key of directory `dir` of the model, looked up from the export root with `cx`.
fn dir_key(b: &dyn Backend, cx: &OpCtx, m: &TxModel, dir: usize) -> txnfs_backend::Result<FileKey> {
    let root = b.root()?;
    let (mut k, _) = b.lookup(cx, &root, AREA)?;
    for c in m.path(dir).ok_or(txnfs_backend::BackendError::NotFound)? {
        k = b.lookup(cx, &k, &c)?.0;
    }
    Ok(k)
}

/// One step as backend calls (what the server would make for it).
fn run_direct(b: &dyn Backend, cx: &OpCtx, m: &TxModel, s: &Step) -> txnfs_backend::Result<()> {
    use txnfs_backend::BackendError as E;
    let attrs = SetAttrs::default();
    match s {
        Step::Mkdir { dir, name } => {
            b.make_node(
                cx,
                &dir_key(b, cx, m, *dir)?,
                name,
                &NodeKind::Directory,
                &attrs,
            )?;
        }
        Step::CreateWrite {
            dir,
            name,
            offset,
            data,
        } => {
            let c = b.create_file(
                cx,
                &dir_key(b, cx, m, *dir)?,
                name,
                CreateMode::Guarded,
                &attrs,
            )?;
            b.write(cx, &c.key, *offset, data, true)?;
        }
        Step::Overwrite {
            dir,
            name,
            offset,
            data,
            stable,
        } => {
            let (k, _) = b.lookup(cx, &dir_key(b, cx, m, *dir)?, name)?;
            b.write(cx, &k, *offset, data, *stable)?;
        }
        Step::SetSize { dir, name, size } => {
            let (k, _) = b.lookup(cx, &dir_key(b, cx, m, *dir)?, name)?;
            let a = SetAttrs {
                size: Some(*size),
                ..SetAttrs::default()
            };
            b.setattr(cx, &k, &a)?;
        }
        Step::SetMode { dir, name, mode } => {
            let (k, _) = b.lookup(cx, &dir_key(b, cx, m, *dir)?, name)?;
            let a = SetAttrs {
                mode: Some(*mode),
                ..SetAttrs::default()
            };
            b.setattr(cx, &k, &a)?;
        }
        Step::Remove { dir, name } => {
            b.remove(cx, &dir_key(b, cx, m, *dir)?, name)?;
        }
        Step::Rename {
            from_dir,
            from,
            to_dir,
            to,
        } => {
            let f = dir_key(b, cx, m, *from_dir)?;
            let t = dir_key(b, cx, m, *to_dir)?;
            b.rename(cx, &f, from, &t, to)?;
        }
        Step::Link {
            dir,
            name,
            to_dir,
            to,
        } => {
            let (k, _) = b.lookup(cx, &dir_key(b, cx, m, *dir)?, name)?;
            b.link(cx, &k, &dir_key(b, cx, m, *to_dir)?, to)?;
        }
        Step::FailRemoveMissing { .. } | Step::FailCreateExisting { .. } | Step::FailNotAllowed => {
            return Err(E::Inval)
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn model_follows_renames_links_and_paths() {
        let mut m = TxModel::new(Bytes::from_static(b"area"));
        m.apply(&Step::Mkdir {
            dir: 0,
            name: n("a"),
        });
        m.apply(&Step::Mkdir {
            dir: 1,
            name: n("b"),
        });
        m.apply(&Step::CreateWrite {
            dir: 2,
            name: n("f"),
            offset: 2,
            data: n("xy"),
        });
        assert_eq!(m.path(2), Some(vec![n("a"), n("b")]));
        assert_eq!(m.nodes[3].data, b"\0\0xy");
        assert!(m.is_ancestor(1, 2) && !m.is_ancestor(2, 1));
        m.apply(&Step::Link {
            dir: 2,
            name: n("f"),
            to_dir: 0,
            to: n("g"),
        });
        m.apply(&Step::Rename {
            from_dir: 0,
            from: n("a"),
            to_dir: 0,
            to: n("c"),
        });
        assert_eq!(m.path(2), Some(vec![n("c"), n("b")]));
        assert_eq!(m.child(0, b"g"), Some(3));
        m.apply(&Step::SetSize {
            dir: 0,
            name: n("g"),
            size: 1,
        });
        assert_eq!(m.nodes[3].data, b"\0");
        // Renaming one of two names of an object over the other does nothing.
        m.apply(&Step::Rename {
            from_dir: 2,
            from: n("f"),
            to_dir: 0,
            to: n("g"),
        });
        assert_eq!(m.child(2, b"f"), Some(3));
        m.apply(&Step::Remove {
            dir: 2,
            name: n("f"),
        });
        assert_eq!(m.children(2), 0);
    }
}
