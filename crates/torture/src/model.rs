//! The model of one client's directory (`c<i>` at the export root), the transactions
//! planned from it, and the comparison with what is on the host.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use txnfs_proto::nfs4::nfs_argop4;

use crate::nfs::*;

/// splitmix64: small, seedable, good enough for choosing.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// The full bytes of a file whose content is `key`: a header naming the key, then
/// bytes derived from it, 1.2–12 KiB, so each file takes one to three WRITEs.
pub fn content(key: u64) -> Vec<u8> {
    let mut r = Rng(key ^ 0xC0FF_EE00_D15C_0001);
    let len = 1200 + r.below(11_000) as usize;
    let mut v = format!("txnfs-torture key={key:016x}\n").into_bytes();
    while v.len() < len {
        let x = r.next_u64();
        for i in 0..8 {
            v.push(b'a' + ((x >> (i * 8)) as u8 % 26));
        }
    }
    v.truncate(len);
    v
}

/// The key a file's header names, if it has one.
pub fn key_of(bytes: &[u8]) -> Option<u64> {
    let head = bytes.strip_prefix(b"txnfs-torture key=")?;
    let hex = std::str::from_utf8(head.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

const CHUNK: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(u64),
}

/// Paths relative to the client's directory ("t3", "t3/f0", "t3/s/f1") → node.
pub type Tree = BTreeMap<String, Node>;

/// What the host holds at a path.
#[derive(Debug)]
pub enum HostNode {
    Dir,
    File(Vec<u8>),
    Other,
}

/// Reads the host directory `root` recursively (paths relative to it).
pub fn snapshot(root: &Path) -> Result<BTreeMap<String, HostNode>, String> {
    let mut out = BTreeMap::new();
    walk(root, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, HostNode>) -> Result<(), String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in rd {
        let e = e.map_err(|e| e.to_string())?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let ft = e.file_type().map_err(|e| e.to_string())?;
        if ft.is_dir() {
            out.insert(path.clone(), HostNode::Dir);
            walk(&e.path(), &path, out)?;
        } else if ft.is_file() {
            let b = std::fs::read(e.path()).map_err(|e| format!("{path}: {e}"))?;
            out.insert(path, HostNode::File(b));
        } else {
            out.insert(path, HostNode::Other);
        }
    }
    Ok(())
}

/// The differences between the host and `tree` (at most a few), or `None` if equal.
/// A file whose bytes are no generation's full content is reported as torn.
pub fn diff(host: &BTreeMap<String, HostNode>, tree: &Tree) -> Option<String> {
    let mut d = Vec::new();
    for (p, n) in tree {
        match (n, host.get(p)) {
            (_, None) => d.push(format!("missing {p}")),
            (Node::Dir, Some(HostNode::Dir)) => {}
            (Node::File(k), Some(HostNode::File(b))) => {
                if *b != content(*k) {
                    let what = match key_of(b) {
                        Some(k2) if *b == content(k2) => format!("generation {k2:x}"),
                        Some(k2) => format!("TORN (starts as {k2:x}, {} bytes)", b.len()),
                        None => format!("TORN ({} bytes, no header)", b.len()),
                    };
                    d.push(format!("{p}: expected {k:x}, found {what}"));
                }
            }
            (n, Some(h)) => d.push(format!("{p}: expected {n:?}, found {h:?}")),
        }
    }
    for (p, h) in host {
        if !tree.contains_key(p) {
            let what = match h {
                HostNode::File(b) => format!("file of {} bytes", b.len()),
                other => format!("{other:?}"),
            };
            d.push(format!("unexpected {p} ({what})"));
        }
    }
    if d.is_empty() {
        None
    } else {
        let n = d.len();
        d.truncate(6);
        Some(format!("{} difference(s): {}", n, d.join("; ")))
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Removes `path` and everything under it.
fn remove_subtree(t: &mut Tree, path: &str) {
    let pre = format!("{path}/");
    t.retain(|p, _| p != path && !p.starts_with(&pre));
}

/// Moves `from` (and everything under it) to `to`.
fn move_subtree(t: &mut Tree, from: &str, to: &str) {
    let pre = format!("{from}/");
    let moved: Vec<(String, Node)> = t
        .iter()
        .filter(|(p, _)| *p == from || p.starts_with(&pre))
        .map(|(p, n)| (format!("{to}{}", &p[from.len()..]), n.clone()))
        .collect();
    remove_subtree(t, from);
    t.extend(moved);
}

/// A transaction to send and the client's directory if it commits.
#[derive(Clone, Debug)]
pub struct Plan {
    pub kind: &'static str,
    pub ops: Vec<nfs_argop4>,
    pub post: Tree,
    /// Ends with a REMOVE of a missing name: must fail with NFS4ERR_NOENT, undone.
    pub fails: bool,
    /// The key this transaction also writes into every shared file, if it does.
    pub shared_key: Option<u64>,
}

/// The directory at the export root whose files every client's transactions overwrite
/// together (contention: waits, NFS4ERR_DELAY and rollbacks between clients).
pub const SHARED_DIR: &str = "shared";

pub fn shared_file(i: usize) -> String {
    format!("s{i}")
}

/// One client's directory `c<id>` and its counters.
#[derive(Clone, Debug)]
pub struct ClientModel {
    pub id: usize,
    pub tree: Tree,
    counter: u64,
    /// How many shared files there are (0: no shared writes).
    pub shared: usize,
    /// Every key this client ever sent into the shared files.
    pub shared_keys: Vec<u64>,
}

impl ClientModel {
    pub fn new(id: usize) -> Self {
        ClientModel {
            id,
            tree: Tree::new(),
            counter: 0,
            shared: 0,
            shared_keys: Vec::new(),
        }
    }

    pub fn dir_name(&self) -> String {
        format!("c{}", self.id)
    }

    fn fresh(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// A content key no other file of any client had.
    fn fresh_key(&mut self) -> u64 {
        ((self.id as u64 + 1) << 40) | self.fresh()
    }

    /// PUTROOTFH, LOOKUP c<id>, LOOKUP each component of `dir`.
    fn goto(&self, dir: &str) -> Vec<nfs_argop4> {
        let mut ops = vec![nfs_argop4::OP_PUTROOTFH, lookup(&self.dir_name())];
        ops.extend(dir.split('/').filter(|c| !c.is_empty()).map(lookup));
        ops
    }

    fn tops(&self) -> Vec<String> {
        self.tree
            .iter()
            .filter(|(p, n)| **n == Node::Dir && !p.contains('/'))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn files(&self) -> Vec<String> {
        self.tree
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn dirs(&self) -> Vec<String> {
        self.tree
            .iter()
            .filter(|(_, n)| **n == Node::Dir)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Ops removing `path` recursively (children first); the current directory is
    /// re-established for each REMOVE.
    fn remove_ops(&self, path: &str, ops: &mut Vec<nfs_argop4>) {
        let pre = format!("{path}/");
        // Deepest first (the sort is stable), so a directory is empty when removed.
        let mut victims: Vec<&String> = self
            .tree
            .keys()
            .filter(|p| *p == path || p.starts_with(&pre))
            .collect();
        victims.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        for v in victims {
            let (parent, name) = split(v);
            ops.extend(self.goto(parent));
            ops.push(remove(name));
        }
    }

    fn write_ops(key: u64, sid: txnfs_proto::nfs4::stateid4) -> Vec<nfs_argop4> {
        let c = content(key);
        c.chunks(CHUNK)
            .enumerate()
            .map(|(i, ch)| write(&sid, (i * CHUNK) as u64, Bytes::copy_from_slice(ch)))
            .collect()
    }

    /// Plans a random transaction of one of the kinds; `fail` appends an op that fails.
    pub fn plan(&mut self, rng: &mut Rng, fail: bool) -> Plan {
        let tops = self.tops();
        let files = self.files();
        let roll = rng.below(100);
        let remove_weight = if tops.len() >= 5 { 40 } else { 15 };
        let mut p = if tops.is_empty() || roll < 30 {
            self.plan_copy(rng)
        } else if roll < 30 + remove_weight {
            self.plan_remove(rng)
        } else if roll < 70 || files.is_empty() {
            self.plan_rename(rng)
        } else {
            self.plan_overwrite(rng)
        };
        if self.shared > 0 && rng.chance(25) {
            // Also overwrite every shared file with one new generation, starting at a
            // random one so that transactions meet in different orders.
            let k = self.fresh_key();
            let start = rng.below(self.shared as u64) as usize;
            for j in 0..self.shared {
                let i = (start + j) % self.shared;
                p.ops.extend([
                    nfs_argop4::OP_PUTROOTFH,
                    lookup(SHARED_DIR),
                    lookup(&shared_file(i)),
                    truncate(0),
                ]);
                p.ops.extend(Self::write_ops(k, ANON));
            }
            if !fail {
                // A transaction planned to fail must never show its key.
                self.shared_keys.push(k);
            }
            p.shared_key = Some(k);
        }
        if fail {
            let n = self.fresh();
            p.ops.extend(self.goto(""));
            p.ops.push(remove(&format!("missing{n}")));
            p.post = self.tree.clone();
            p.fails = true;
        }
        p
    }

    /// Tree copy: mkdir tmp, OPEN-create + WRITE (FILE_SYNC) + CLOSE each file (a copy
    /// of an existing tree, or new files), then RENAME tmp into place, replacing (after
    /// removing it) an existing tree sometimes.
    fn plan_copy(&mut self, rng: &mut Rng) -> Plan {
        let n = self.fresh();
        let tmp = format!("tmp{n}");
        let tops = self.tops();
        let mut source: Tree = Tree::new();
        if !tops.is_empty() && rng.chance(50) {
            let from = rng.pick(&tops).clone();
            let pre = format!("{from}/");
            for (p, node) in &self.tree {
                if let Some(rel) = p.strip_prefix(&pre) {
                    source.insert(rel.to_string(), node.clone());
                }
            }
        }
        if source.is_empty() {
            for j in 0..rng.range(2, 4) {
                let k = self.fresh_key();
                source.insert(format!("f{j}"), Node::File(k));
            }
            if rng.chance(40) {
                source.insert("s".into(), Node::Dir);
                for j in 0..rng.range(1, 2) {
                    let k = self.fresh_key();
                    source.insert(format!("s/g{j}"), Node::File(k));
                }
            }
        }
        let mut ops = self.goto("");
        ops.push(mkdir(&tmp));
        // BTreeMap order puts a directory before its entries.
        for (rel, node) in &source {
            let (parent, name) = split(rel);
            let parent = if parent.is_empty() {
                tmp.clone()
            } else {
                format!("{tmp}/{parent}")
            };
            ops.extend(self.goto(&parent));
            match node {
                Node::Dir => ops.push(mkdir(name)),
                Node::File(k) => {
                    ops.push(open_create(name));
                    ops.extend(Self::write_ops(*k, CURRENT));
                    ops.push(close_current());
                }
            }
        }
        let mut post = self.tree.clone();
        let target = if !tops.is_empty() && (tops.len() >= 5 || rng.chance(35)) {
            let t = rng.pick(&tops).clone();
            self.remove_ops(&t, &mut ops);
            remove_subtree(&mut post, &t);
            t
        } else {
            format!("t{n}")
        };
        ops.extend(self.goto(""));
        ops.push(nfs_argop4::OP_SAVEFH);
        ops.push(rename(&tmp, &target));
        post.insert(target.clone(), Node::Dir);
        for (rel, node) in source {
            post.insert(format!("{target}/{rel}"), node);
        }
        Plan {
            kind: "copy",
            ops,
            post,
            fails: false,
            shared_key: None,
        }
    }

    fn plan_rename(&mut self, rng: &mut Rng) -> Plan {
        let tops = self.tops();
        let files = self.files();
        let dirs = self.dirs();
        let n = self.fresh();
        let mut post = self.tree.clone();
        let mut ops = Vec::new();
        let variant = rng.below(4);
        let kind = if variant == 1 && tops.len() >= 2 {
            // Swap two trees through a temporary name: three RENAMEs.
            let a = rng.pick(&tops).clone();
            let b = tops.iter().find(|t| **t != a).cloned().unwrap_or_default();
            let x = format!("x{n}");
            ops.extend(self.goto(""));
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.extend([rename(&a, &x), rename(&b, &a), rename(&x, &b)]);
            move_subtree(&mut post, &a, &x);
            move_subtree(&mut post, &b, &a);
            move_subtree(&mut post, &x, &b);
            "rename-swap"
        } else if variant == 2 && !files.is_empty() && !dirs.is_empty() {
            // A file into another directory.
            let f = rng.pick(&files).clone();
            let d = rng.pick(&dirs).clone();
            let (parent, name) = split(&f);
            let to = format!("m{n}");
            ops.extend(self.goto(parent));
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.extend(self.goto(&d));
            ops.push(rename(name, &to));
            move_subtree(&mut post, &f, &format!("{d}/{to}"));
            "rename-file"
        } else if variant == 3 && tops.len() >= 2 {
            // A whole tree into another one (kept shallow).
            let a = rng.pick(&tops).clone();
            let b = tops.iter().find(|t| **t != a).cloned().unwrap_or_default();
            let deep = self
                .tree
                .keys()
                .any(|p| p.starts_with(&format!("{a}/")) && p.matches('/').count() >= 3);
            let to = format!("sub{n}");
            if deep {
                return self.plan_copy(rng);
            }
            ops.extend(self.goto(""));
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.extend(self.goto(&b));
            ops.push(rename(&a, &to));
            move_subtree(&mut post, &a, &format!("{b}/{to}"));
            "rename-nest"
        } else {
            let a = rng.pick(&tops).clone();
            let to = format!("t{n}");
            ops.extend(self.goto(""));
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.push(rename(&a, &to));
            move_subtree(&mut post, &a, &to);
            "rename-dir"
        };
        Plan {
            kind,
            ops,
            post,
            fails: false,
            shared_key: None,
        }
    }

    /// Overwrite 1–3 existing files with a new generation each (truncate then write,
    /// or write then cut to the new length).
    fn plan_overwrite(&mut self, rng: &mut Rng) -> Plan {
        let mut files = self.files();
        let mut post = self.tree.clone();
        let mut ops = Vec::new();
        for _ in 0..rng.range(1, 3).min(files.len() as u64) {
            let i = rng.below(files.len() as u64) as usize;
            let f = files.swap_remove(i);
            let k = self.fresh_key();
            let (parent, name) = split(&f);
            ops.extend(self.goto(parent));
            ops.push(lookup(name));
            if rng.chance(50) {
                ops.push(truncate(0));
                ops.extend(Self::write_ops(k, ANON));
            } else {
                ops.extend(Self::write_ops(k, ANON));
                ops.push(truncate(content(k).len() as u64));
            }
            post.insert(f, Node::File(k));
        }
        Plan {
            kind: "overwrite",
            ops,
            post,
            fails: false,
            shared_key: None,
        }
    }

    /// Remove a whole tree, or one or two files.
    fn plan_remove(&mut self, rng: &mut Rng) -> Plan {
        let tops = self.tops();
        let mut files = self.files();
        let mut post = self.tree.clone();
        let mut ops = Vec::new();
        if files.is_empty() || rng.chance(50) {
            let t = rng.pick(&tops).clone();
            self.remove_ops(&t, &mut ops);
            remove_subtree(&mut post, &t);
        } else {
            for _ in 0..rng.range(1, 2).min(files.len() as u64) {
                let i = rng.below(files.len() as u64) as usize;
                let f = files.swap_remove(i);
                let (parent, name) = split(&f);
                ops.extend(self.goto(parent));
                ops.push(remove(name));
                post.remove(&f);
            }
        }
        Plan {
            kind: "remove",
            ops,
            post,
            fails: false,
            shared_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_finds_missing_extra_and_torn_files() {
        let mut tree = Tree::new();
        tree.insert("t1".into(), Node::Dir);
        tree.insert("t1/f0".into(), Node::File(7));
        let mut host = BTreeMap::new();
        host.insert("t1".to_string(), HostNode::Dir);
        host.insert("t1/f0".to_string(), HostNode::File(content(7)));
        assert!(diff(&host, &tree).is_none());
        let mut torn = content(7);
        torn.truncate(torn.len() - 1);
        host.insert("t1/f0".to_string(), HostNode::File(torn));
        assert!(diff(&host, &tree).unwrap().contains("TORN"));
        host.insert("t1/f0".to_string(), HostNode::File(content(8)));
        assert!(diff(&host, &tree).unwrap().contains("generation 8"));
        host.insert("t1/f0".to_string(), HostNode::File(content(7)));
        host.insert("t2".to_string(), HostNode::Dir);
        assert!(diff(&host, &tree).unwrap().contains("unexpected t2"));
        host.remove("t2");
        host.remove("t1/f0");
        assert!(diff(&host, &tree).unwrap().contains("missing t1/f0"));
    }

    #[test]
    fn moves_and_removes_keep_subtrees_together() {
        let mut t = Tree::new();
        for p in ["a", "a/x", "a/s", "a/s/y", "ab"] {
            t.insert(p.into(), Node::Dir);
        }
        move_subtree(&mut t, "a", "b/c");
        let keys: Vec<&str> = t.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["ab", "b/c", "b/c/s", "b/c/s/y", "b/c/x"]);
        remove_subtree(&mut t, "b/c");
        assert_eq!(t.keys().collect::<Vec<_>>(), ["ab"]);
    }
}
