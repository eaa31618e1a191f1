//! The backend calls of the `txn` layer: each takes its locks and, in a transaction,
//! records its undo before it forwards to the layer below.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::locks::{self, Mode};
use super::undo::Undo;
use super::{Txn, TxnLayer, HIDDEN};
use crate::layer::Layer;
use crate::{
    Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, DirEntry, FileKey, FileType,
    Linked, Made, NodeKind, OpCtx, RenameChange, Result, SeekWhat, SetAttrs, TxnSpan, XattrChange,
    XattrSet,
};

/// The context the layer below sees: a plain COMPOUND, whatever this one is. A plain
/// one is passed as it is (no copy of its credentials per COMPOUND).
fn plain_below(cx: &OpCtx) -> Cow<'_, OpCtx> {
    if !cx.txn && cx.span == TxnSpan::Whole {
        return Cow::Borrowed(cx);
    }
    Cow::Owned(OpCtx {
        txn: false,
        span: TxnSpan::Whole,
        ..cx.clone()
    })
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

    fn journal_stats(&self) -> Option<crate::JournalStats> {
        Some(self.journal.stats())
    }

    fn begin_compound(&self, cx: &OpCtx) -> Result<()> {
        let plain = plain_below(cx);
        self.lower.begin_compound(&plain)?;
        let owner = Self::owner_of(cx);
        if !cx.txn {
            // Its reads keep their locks from now to its end (`isolation`).
            self.begin_plain_compound(cx.compound);
        } else {
            // Made by the first COMPOUND of the transaction that reaches this export
            // (the server tracks which transactions are open, so a later COMPOUND of one
            // that has not touched the export yet starts it here too).
            let known = self
                .open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&owner.id);
            if known {
                return Ok(());
            }
            // Plain COMPOUNDs lock from now on; those running unlocked end first.
            let deadline = std::time::Instant::now() + self.settings.lock_wait;
            if !cx.waited.timed(|| self.gate.open_txn(deadline)) {
                self.lower.end_compound(&plain, false)?;
                return Err(BackendError::Conflict);
            }
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            if open.contains_key(&owner.id) {
                // Another COMPOUND of the transaction opened it meanwhile.
                self.gate.close_txn();
                return Ok(());
            }
            open.entry(owner.id).or_insert_with(|| Txn {
                txid: 0,
                owner,
                locks: Vec::new(),
                held: HashSet::new(),
                undo: Vec::new(),
                undone: 0,
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
        let plain = plain_below(cx);
        let below = self.lower.end_compound(&plain, ok && r.is_ok());
        r.and(below)
    }

    fn getattr(&self, cx: &OpCtx, key: &FileKey) -> Result<Attrs> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Stat)],
        )?;
        self.lower.getattr(cx, key)
    }

    fn lookup(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        if self.is_hidden(dir, name) {
            return Err(BackendError::NotFound);
        }
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::entry(dir, name), Mode::Shared)],
        )?;
        self.lower.lookup(cx, dir, name)
    }

    fn lookup_parent(&self, cx: &OpCtx, dir: &FileKey) -> Result<(FileKey, Attrs)> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(dir), Mode::Shared)],
        )?;
        self.lower.lookup_parent(cx, dir)
    }

    fn read(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.read(cx, key, offset, count)
    }

    /// Under the same shared lock as `read`: the pipe then holds the pages as they
    /// were under it (a later write may still change a page the pipe refers to before
    /// it is sent, as with the kernel's server; ADR 0065).
    fn read_piped(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        count: u32,
    ) -> Result<Option<(txnfs_xdr::Piped, bool)>> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.read_piped(cx, key, offset, count)
    }

    fn readlink(&self, cx: &OpCtx, key: &FileKey) -> Result<Bytes> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.readlink(cx, key)
    }

    fn readdir(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(dir), Mode::Shared)],
        )?;
        if *dir != self.root {
            return self.lower.readdir(cx, dir, cookie, max_entries);
        }
        let mut cookie = cookie;
        loop {
            let (mut entries, eof) = self.lower.readdir(cx, dir, cookie, max_entries)?;
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
        let _g = self.lock(&cx.waited, owner, &[(locks::object(key), Mode::Exclusive)])?;
        if owner.is_txn() {
            let old = self.lower.getattr(cx, key)?;
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
        let _g = self.lock(&cx.waited, owner, &[(locks::object(key), Mode::Exclusive)])?;
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
        self.retrying(&cx.waited, owner, || {
            let mut g = self.lock(
                &cx.waited,
                owner,
                &[
                    (locks::object(dir), Mode::Intent),
                    (locks::entry(dir, name), Mode::Exclusive),
                ],
            )?;
            if g.is_unlocked() {
                // Nothing to lock (`gate`), so no lookup to find what to lock.
                return self.lower.create_file(cx, dir, name, mode, attrs);
            }
            let existing = match self.lower.lookup(cx, dir, name) {
                Ok((k, _)) => Some(k),
                Err(BackendError::NotFound) => None,
                Err(e) => return Err(e),
            };
            if let Some(k) = &existing {
                self.lock_more(
                    &mut g,
                    &cx.waited,
                    owner,
                    &[(locks::object(k), Mode::Exclusive)],
                )?;
            }
            if owner.is_txn() {
                match (&existing, attrs.size) {
                    // Opening an existing file with a size (O_TRUNC) changes it.
                    (Some(k), Some(size)) if mode == CreateMode::Unchecked => {
                        self.save_for_size(owner, k, size, self.lower.getattr(cx, k)?.size)?;
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
                    self.lock(
                        &cx.waited,
                        owner,
                        &[(locks::object(&c.key), Mode::Exclusive)],
                    )?;
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
            &cx.waited,
            owner,
            &[
                (locks::object(dir), Mode::Intent),
                (locks::entry(dir, name), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            self.record_new_name(owner, cx, dir, name)?;
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
            self.lock(
                &cx.waited,
                owner,
                &[(locks::object(&m.key), Mode::Exclusive)],
            )?;
        }
        self.mutated(owner);
        Ok(m)
    }

    fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<crate::DirChange> {
        self.refuse_hidden(dir, name)?;
        let owner = Self::owner_of(cx);
        self.retrying(&cx.waited, owner, || {
            let mut g = self.lock(
                &cx.waited,
                owner,
                &[
                    (locks::object(dir), Mode::Intent),
                    (locks::entry(dir, name), Mode::Exclusive),
                ],
            )?;
            if g.is_unlocked() {
                return self.lower.remove(cx, dir, name);
            }
            let (victim, vattrs) = self.lower.lookup(cx, dir, name)?;
            self.lock_more(
                &mut g,
                &cx.waited,
                owner,
                &[(locks::object(&victim), Mode::Exclusive)],
            )?;
            if !owner.is_txn() {
                return self.lower.remove(cx, dir, name);
            }
            if vattrs.ftype == FileType::Directory && self.is_nonempty_dir(cx, &victim)? {
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
        self.retrying(&cx.waited, owner, || {
            let mut g = self.lock(
                &cx.waited,
                owner,
                &[
                    (locks::object(from_dir), Mode::Intent),
                    (locks::object(to_dir), Mode::Intent),
                    (locks::entry(from_dir, from), Mode::Exclusive),
                    (locks::entry(to_dir, to), Mode::Exclusive),
                ],
            )?;
            if g.is_unlocked() {
                return self.lower.rename(cx, from_dir, from, to_dir, to);
            }
            let (moved, mattrs) = self.lower.lookup(cx, from_dir, from)?;
            let victim = match self.lower.lookup(cx, to_dir, to) {
                Ok(v) => Some(v),
                Err(BackendError::NotFound) => None,
                Err(e) => return Err(e),
            };
            let mut objs = vec![(locks::object(&moved), Mode::Exclusive)];
            if let Some((v, _)) = &victim {
                objs.push((locks::object(v), Mode::Exclusive));
            }
            self.lock_more(&mut g, &cx.waited, owner, &objs)?;
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
                    (true, true) if self.is_nonempty_dir(cx, v)? => {
                        return Err(BackendError::NotEmpty)
                    }
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
            &cx.waited,
            owner,
            &[
                (locks::object(dir), Mode::Intent),
                (locks::entry(dir, name), Mode::Exclusive),
                (locks::object(file), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            self.record_new_name(owner, cx, dir, name)?;
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
            &cx.waited,
            owner,
            &[
                (locks::object(src), Mode::Shared),
                (locks::object(dst), Mode::Exclusive),
            ],
        )?;
        if owner.is_txn() {
            let n = if len == 0 {
                self.lower.getattr(cx, src)?.size.saturating_sub(src_off)
            } else {
                len
            };
            self.save_range(owner, dst, dst_off, n.max(1))?;
        }
        let r = self.lower.clone_range(cx, src, src_off, dst, dst_off, len);
        self.mutated(owner);
        r
    }

    fn allocate(&self, cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.change_range(cx, key, offset, len, |cx| {
            self.lower.allocate(cx, key, offset, len)
        })
    }

    fn deallocate(&self, cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.change_range(cx, key, offset, len, |cx| {
            self.lower.deallocate(cx, key, offset, len)
        })
    }

    fn seek(&self, cx: &OpCtx, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.seek(cx, key, offset, what)
    }

    fn getxattr(&self, cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<Bytes> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.getxattr(cx, key, name)
    }

    fn listxattrs(&self, cx: &OpCtx, key: &FileKey) -> Result<Vec<Bytes>> {
        let _g = self.lock(
            &cx.waited,
            Self::reader(cx),
            &[(locks::object(key), Mode::Shared)],
        )?;
        self.lower.listxattrs(cx, key)
    }

    fn setxattr(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<XattrChange> {
        self.change_xattr(cx, key, |cx| self.lower.setxattr(cx, key, name, value, how))
    }

    fn removexattr(&self, cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<XattrChange> {
        self.change_xattr(cx, key, |cx| self.lower.removexattr(cx, key, name))
    }
}

impl TxnLayer {
    /// A change of `len` bytes at `offset` of `key` that is not a write (ALLOCATE,
    /// DEALLOCATE): locked like a write and, in a transaction, undone like one (the
    /// range and the size are saved first).
    fn change_range<R>(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        len: u64,
        change: impl FnOnce(&OpCtx) -> Result<R>,
    ) -> Result<R> {
        let owner = Self::owner_of(cx);
        let _g = self.lock(&cx.waited, owner, &[(locks::object(key), Mode::Exclusive)])?;
        if owner.is_txn() {
            self.save_range(owner, key, offset, len.max(1))?;
        }
        let r = change(cx);
        self.mutated(owner);
        r
    }

    /// A change of an extended attribute: locked like a write; not undoable (ADR 0025), so a
    /// transaction may not make one (NotSupp, and the server refuses the op in a
    /// transactional COMPOUND before it gets here).
    fn change_xattr(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        change: impl FnOnce(&OpCtx) -> Result<XattrChange>,
    ) -> Result<XattrChange> {
        let owner = Self::owner_of(cx);
        if owner.is_txn() {
            return Err(BackendError::NotSupp);
        }
        let _g = self.lock(&cx.waited, owner, &[(locks::object(key), Mode::Exclusive)])?;
        change(cx)
    }
}
