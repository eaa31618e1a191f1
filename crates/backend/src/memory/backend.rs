//! The [`Backend`] calls of the memory backend, each one locked operation on the inode
//! table.

use std::ops::Bound;

use bytes::Bytes;

use super::table::{ino_of, key_of, now, Content, Inner};
use super::{MemoryBackend, MAX_READ, REPORTED_FILES, ROOT_INO};
use crate::{
    check_name, Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, DirChange,
    DirEntry, FileKey, FileType, FsStats, Linked, Made, NodeKind, OpCtx, RenameChange, Result,
    SeekWhat, SetAttrs, XattrChange, XattrSet, NAME_MAX,
};

impl Backend for MemoryBackend {
    fn root(&self) -> Result<FileKey> {
        Ok(key_of(ROOT_INO))
    }

    fn getattr(&self, _cx: &OpCtx, key: &FileKey) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        Ok(self.out(inner.attrs(ino)?))
    }

    fn lookup(&self, _cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        check_name(name)?;
        let dir = ino_of(dir)?;
        let inner = self.lock();
        let ino = inner.dir(dir)?.get(name).ok_or(BackendError::NotFound)?;
        Ok((key_of(ino), self.out(inner.attrs(ino)?)))
    }

    fn lookup_parent(&self, _cx: &OpCtx, dir: &FileKey) -> Result<(FileKey, Attrs)> {
        let dir = ino_of(dir)?;
        let inner = self.lock();
        let parent = inner.dir(dir)?.parent;
        if dir == ROOT_INO {
            return Err(BackendError::NotFound);
        }
        Ok((key_of(parent), self.out(inner.attrs(parent)?)))
    }

    fn setattr(&self, _cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        inner.node(ino)?;
        if !attrs.is_empty() {
            inner.apply(ino, attrs, false)?;
        }
        Ok(self.out(inner.attrs(ino)?))
    }

    fn read(&self, _cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        let node = inner.node_mut(ino)?;
        let data = match &node.content {
            Content::File(d) => d,
            Content::Dir(_) => return Err(BackendError::IsDir),
            _ => return Err(BackendError::Inval),
        };
        let len = data.len() as u64;
        if offset >= len {
            return Ok((Bytes::new(), true));
        }
        let want = u64::from(count.min(MAX_READ));
        let end = offset.saturating_add(want).min(len);
        // offset < len <= usize::MAX, end <= len: both fit in usize.
        let (s, e) = (offset as usize, end as usize);
        let out = Bytes::copy_from_slice(&data[s..e]);
        node.attrs.atime = now();
        Ok((out, end >= len))
    }

    fn write(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        _sync: bool,
    ) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        inner.write_at(ino, offset, data)?;
        inner.touch(ino, true, now())?;
        Ok(self.out(inner.attrs(ino)?))
    }

    fn commit(&self, _cx: &OpCtx, key: &FileKey) -> Result<()> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        match inner.node(ino)?.attrs.ftype {
            FileType::Regular | FileType::Directory => Ok(()),
            _ => Err(BackendError::Inval),
        }
    }

    fn create_file(
        &self,
        cx: &OpCtx,
        dir: &FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &SetAttrs,
    ) -> Result<Created> {
        check_name(name)?;
        let ((key, attrs, created), dir) = self.mutate_dir(dir, |inner, dir| {
            self.create_locked(inner, cx, dir, name, mode, attrs)
        })?;
        Ok(Created {
            key,
            attrs,
            created,
            dir,
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
        check_name(name)?;
        let ((key, attrs), dir) = self.mutate_dir(dir, |inner, dir| {
            self.make_locked(inner, &cx.creds, dir, name, kind, attrs)
        })?;
        Ok(Made { key, attrs, dir })
    }

    fn remove(&self, _cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> {
        check_name(name)?;
        let ((), change) = self.mutate_dir(dir, |inner, dir| {
            let ino = inner.dir(dir)?.get(name).ok_or(BackendError::NotFound)?;
            let is_dir = match &inner.node(ino)?.content {
                Content::Dir(d) if !d.entries.is_empty() => return Err(BackendError::NotEmpty),
                Content::Dir(_) => true,
                _ => false,
            };
            let t = now();
            inner.dir_mut(dir)?.remove(name);
            if is_dir {
                let p = inner.node_mut(dir)?;
                p.attrs.nlink = p.attrs.nlink.saturating_sub(1);
            }
            inner.touch(dir, true, t)?;
            inner.unlink_node(ino, t)
        })?;
        Ok(change)
    }

    fn rename(
        &self,
        _cx: &OpCtx,
        from_dir: &FileKey,
        from: &[u8],
        to_dir: &FileKey,
        to: &[u8],
    ) -> Result<RenameChange> {
        check_name(from)?;
        check_name(to)?;
        let from_dir = ino_of(from_dir)?;
        let to_dir = ino_of(to_dir)?;
        let mut inner = self.lock();
        inner.dir(to_dir)?;
        let (from_before, to_before) = (inner.change_of(from_dir)?, inner.change_of(to_dir)?);
        let changes = |inner: &Inner| -> Result<RenameChange> {
            Ok(RenameChange {
                from: inner.dir_change(from_dir, from_before)?,
                to: inner.dir_change(to_dir, to_before)?,
            })
        };
        let ino = inner
            .dir(from_dir)?
            .get(from)
            .ok_or(BackendError::NotFound)?;
        let src_is_dir = inner.node(ino)?.attrs.ftype == FileType::Directory;
        let target = inner.dir(to_dir)?.get(to);
        if target == Some(ino) {
            // Same object (same name, or two links to one file): POSIX says do nothing.
            return changes(&inner);
        }
        if src_is_dir && inner.is_ancestor(ino, to_dir)? {
            return Err(BackendError::Inval);
        }
        let mut target_is_dir = false;
        if let Some(t) = target {
            match (&inner.node(t)?.content, src_is_dir) {
                (Content::Dir(d), true) => {
                    if !d.entries.is_empty() {
                        return Err(BackendError::NotEmpty);
                    }
                    target_is_dir = true;
                }
                (Content::Dir(_), false) => return Err(BackendError::IsDir),
                (_, true) => return Err(BackendError::NotDir),
                (_, false) => {}
            }
        }
        let t = now();
        inner.dir_mut(from_dir)?.remove(from);
        if let Some(victim) = target {
            inner.dir_mut(to_dir)?.remove(to);
            if target_is_dir {
                let p = inner.node_mut(to_dir)?;
                p.attrs.nlink = p.attrs.nlink.saturating_sub(1);
            }
            inner.unlink_node(victim, t)?;
        }
        inner
            .dir_mut(to_dir)?
            .insert(Bytes::copy_from_slice(to), ino);
        if src_is_dir && from_dir != to_dir {
            inner.dir_mut(ino)?.parent = to_dir;
            let p = inner.node_mut(from_dir)?;
            p.attrs.nlink = p.attrs.nlink.saturating_sub(1);
            inner.node_mut(to_dir)?.attrs.nlink += 1;
        }
        inner.touch(from_dir, true, t)?;
        if to_dir != from_dir {
            inner.touch(to_dir, true, t)?;
        }
        inner.touch(ino, false, t)?;
        changes(&inner)
    }

    fn link(&self, _cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked> {
        check_name(name)?;
        let ino = ino_of(file)?;
        let (attrs, dir) = self.mutate_dir(dir, |inner, dir| {
            if inner.node(ino)?.attrs.ftype == FileType::Directory {
                return Err(BackendError::IsDir);
            }
            if inner.dir(dir)?.get(name).is_some() {
                return Err(BackendError::Exists);
            }
            if inner.node(ino)?.attrs.nlink >= u32::from(u16::MAX) {
                return Err(BackendError::MLink);
            }
            let t = now();
            inner
                .dir_mut(dir)?
                .insert(Bytes::copy_from_slice(name), ino);
            inner.node_mut(ino)?.attrs.nlink += 1;
            inner.touch(dir, true, t)?;
            inner.touch(ino, false, t)?;
            Ok(self.out(inner.attrs(ino)?))
        })?;
        Ok(Linked { attrs, dir })
    }

    fn readlink(&self, _cx: &OpCtx, key: &FileKey) -> Result<Bytes> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        match &inner.node(ino)?.content {
            Content::Symlink(t) => Ok(t.clone()),
            _ => Err(BackendError::NotSymlink),
        }
    }

    fn readdir(
        &self,
        _cx: &OpCtx,
        dir: &FileKey,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let dir = ino_of(dir)?;
        let inner = self.lock();
        let d = inner.dir(dir)?;
        let mut out = Vec::new();
        let mut range = d
            .by_cookie
            .range((Bound::Excluded(cookie), Bound::Unbounded))
            .peekable();
        while out.len() < max_entries {
            let Some((&c, name)) = range.next() else {
                break;
            };
            let Some(ino) = d.get(name) else { continue };
            out.push(DirEntry {
                name: name.clone(),
                cookie: c,
                key: key_of(ino),
                attrs: self.out(inner.attrs(ino)?),
            });
        }
        let eof = range.peek().is_none();
        Ok((out, eof))
    }

    fn statfs(&self, _cx: &OpCtx, key: &FileKey) -> Result<FsStats> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        inner.node(ino)?;
        let total = inner.limits.max_bytes;
        let free = total.saturating_sub(inner.data_bytes);
        let files = inner.nodes.len() as u64;
        let free_files = REPORTED_FILES.saturating_sub(files);
        Ok(FsStats {
            total_bytes: total,
            free_bytes: free,
            avail_bytes: free,
            total_files: REPORTED_FILES,
            free_files,
            avail_files: free_files,
            max_name_len: NAME_MAX as u32,
        })
    }

    fn clone_range(
        &self,
        _cx: &OpCtx,
        src: &FileKey,
        src_off: u64,
        dst: &FileKey,
        dst_off: u64,
        len: u64,
    ) -> Result<CloneMethod> {
        let (src, dst) = (ino_of(src)?, ino_of(dst)?);
        let mut inner = self.lock();
        let data = match &inner.node(src)?.content {
            Content::File(d) => {
                let size = d.len() as u64;
                let end = if len == 0 {
                    size
                } else {
                    src_off.checked_add(len).ok_or(BackendError::Inval)?
                };
                if end > size || src_off > end {
                    return Err(BackendError::Inval);
                }
                // Both bounds are within the Vec's length, so they fit in usize.
                d[src_off as usize..end as usize].to_vec()
            }
            Content::Dir(_) => return Err(BackendError::IsDir),
            _ => return Err(BackendError::Inval),
        };
        inner.write_at(dst, dst_off, &data)?;
        inner.touch(dst, true, now())?;
        Ok(CloneMethod::Copy)
    }

    fn clone_method(&self) -> CloneMethod {
        CloneMethod::Copy
    }

    fn hold(&self, _cx: &OpCtx, key: &FileKey) -> Result<()> {
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        inner.node(ino)?;
        *inner.held.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    fn release(&self, _cx: &OpCtx, key: &FileKey) {
        let Ok(ino) = ino_of(key) else { return };
        let mut inner = self.lock();
        let last = match inner.held.get_mut(&ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => inner.held.remove(&ino).is_some(),
            None => false,
        };
        if last && inner.node(ino).is_ok_and(|n| n.attrs.nlink == 0) {
            inner.free_node(ino);
        }
    }

    fn allocate(&self, _cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.allocate_range(key, offset, len)
    }

    fn deallocate(&self, _cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        self.deallocate_range(key, offset, len)
    }

    fn seek(&self, _cx: &OpCtx, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
        self.seek_in(key, offset, what)
    }

    fn xattr_support(&self) -> bool {
        true
    }

    fn getxattr(&self, _cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<Bytes> {
        self.get_xattr(key, name)
    }

    fn setxattr(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<XattrChange> {
        self.set_xattr(key, name, value, how)
    }

    fn listxattrs(&self, _cx: &OpCtx, key: &FileKey) -> Result<Vec<Bytes>> {
        self.list_xattrs(key)
    }

    fn removexattr(&self, _cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<XattrChange> {
        self.remove_xattr(key, name)
    }
}
