//! The NFSv4.2 calls of the memory backend. Files are dense byte vectors: ALLOCATE
//! only extends, DEALLOCATE writes zeros, and SEEK finds data everywhere before the
//! end of file and the one hole at it. Extended attributes live in the node, with the
//! limits Linux puts on `user.` attributes so that both backends answer alike.

use bytes::Bytes;

use super::table::{ino_of, now, Content, Inner};
use super::MemoryBackend;
use crate::{
    check_xattr_name, Attrs, BackendError, DirChange, FileKey, FileType, Result, SeekWhat,
    XattrSet, XATTR_SIZE_MAX,
};

/// The size of regular file `ino` (`IsDir` / `Inval` for other objects).
fn file_size(inner: &Inner, ino: u64) -> Result<u64> {
    match &inner.node(ino)?.content {
        Content::File(d) => Ok(d.len() as u64),
        Content::Dir(_) => Err(BackendError::IsDir),
        _ => Err(BackendError::Inval),
    }
}

/// Objects that may carry `user.` attributes: regular files and directories.
fn xattr_node(inner: &Inner, ino: u64) -> Result<()> {
    match inner.node(ino)?.attrs.ftype {
        FileType::Regular | FileType::Directory => Ok(()),
        _ => Err(BackendError::Perm),
    }
}

impl MemoryBackend {
    pub(super) fn allocate_range(&self, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let end = offset.checked_add(len).ok_or(BackendError::FileTooBig)?;
        if len == 0 {
            return Err(BackendError::Inval);
        }
        let mut inner = self.lock();
        let size = file_size(&inner, ino)?;
        if end > size {
            inner.set_size(ino, end)?;
            inner.touch(ino, true, now())?;
        }
        Ok(self.out(inner.attrs(ino)?))
    }

    pub(super) fn deallocate_range(&self, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        let size = file_size(&inner, ino)?;
        let end = offset.saturating_add(len).min(size);
        if offset < end {
            // offset < end <= size, which fits in memory.
            let zeros = vec![0u8; (end - offset) as usize];
            inner.write_at(ino, offset, &zeros)?;
            inner.touch(ino, true, now())?;
        }
        Ok(self.out(inner.attrs(ino)?))
    }

    pub(super) fn seek_in(&self, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        let size = file_size(&inner, ino)?;
        if offset >= size {
            return Err(BackendError::Nxio);
        }
        Ok(match what {
            SeekWhat::Data => offset,
            SeekWhat::Hole => size,
        })
    }

    pub(super) fn get_xattr(&self, key: &FileKey, name: &[u8]) -> Result<Bytes> {
        check_xattr_name(name)?;
        let ino = ino_of(key)?;
        let inner = self.lock();
        xattr_node(&inner, ino)?;
        inner
            .node(ino)?
            .xattrs
            .get(name)
            .cloned()
            .ok_or(BackendError::NoXattr)
    }

    pub(super) fn set_xattr(
        &self,
        key: &FileKey,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<DirChange> {
        check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(BackendError::XattrTooBig);
        }
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        xattr_node(&inner, ino)?;
        let before = inner.attrs(ino)?.change;
        let node = inner.node_mut(ino)?;
        let exists = node.xattrs.contains_key(name);
        match how {
            XattrSet::Create if exists => return Err(BackendError::Exists),
            XattrSet::Replace if !exists => return Err(BackendError::NoXattr),
            _ => {}
        }
        node.xattrs
            .insert(Bytes::copy_from_slice(name), Bytes::copy_from_slice(value));
        inner.touch(ino, false, now())?;
        Ok(DirChange {
            before,
            after: inner.attrs(ino)?.change,
            atomic: true,
        })
    }

    pub(super) fn list_xattrs(&self, key: &FileKey) -> Result<Vec<Bytes>> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        xattr_node(&inner, ino)?;
        Ok(inner.node(ino)?.xattrs.keys().cloned().collect())
    }

    pub(super) fn remove_xattr(&self, key: &FileKey, name: &[u8]) -> Result<DirChange> {
        check_xattr_name(name)?;
        let ino = ino_of(key)?;
        let mut inner = self.lock();
        xattr_node(&inner, ino)?;
        let before = inner.attrs(ino)?.change;
        inner
            .node_mut(ino)?
            .xattrs
            .remove(name)
            .ok_or(BackendError::NoXattr)?;
        inner.touch(ino, false, now())?;
        Ok(DirChange {
            before,
            after: inner.attrs(ino)?.change,
            atomic: true,
        })
    }
}
