//! In-memory backend: a mutex-protected inode table, for tests and for running the server
//! without touching a disk.
//!
//! Semantics follow the local backend (and POSIX) closely so that one conformance suite
//! covers both: `nlink` counts (a directory has 2 + its subdirectories), times updated on
//! mutation, the exclusive-create verifier stored in the seconds of atime/mtime, and
//! `change` moved by every mutation. A [`FileKey`] is the inode number (8 bytes,
//! big-endian); removing the last link frees the inode, after which its key is `Stale`.
//! Inode numbers are never reused within an instance.
//!
//! Directory cookies are per-directory insertion counters (starting at 3, so the values
//! 1 and 2 that NFS reserves are never produced), so a cookie stays valid when other
//! entries are added or removed.

mod backend;
mod table;
mod v42;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::{
    Attrs, BackendError, CreateMode, Creds, DirChange, FileKey, FileType, NodeKind, OpCtx, Result,
    SetAttrs, Timestamp,
};
use table::{ino_of, key_of, now, Content, Dir, Inner, Node, BLOCK};

/// The root directory's inode number.
const ROOT_INO: u64 = 1;
/// Largest read answered in one call (a shorter read is not end of file).
const MAX_READ: u32 = 16 << 20;
const REPORTED_FILES: u64 = 1 << 32;

/// How much the memory backend may hold (file data lives in `Vec`s, so these bound the
/// process's memory rather than a disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Largest size of one file (`FileTooBig` beyond it). Default 4 GiB.
    pub max_file_size: u64,
    /// Total bytes of file data (`NoSpace` beyond it); also the reported capacity.
    /// Default 8 GiB.
    pub max_bytes: u64,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            max_file_size: 4 << 30,
            max_bytes: 8 << 30,
        }
    }
}

static NEXT_FSID: AtomicU64 = AtomicU64::new(1);

/// An in-memory [`Backend`](crate::Backend). Cheap to create; everything is lost when dropped.
#[derive(Debug)]
pub struct MemoryBackend {
    inner: Mutex<Inner>,
    fsid: u64,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty file system: a root directory (mode 0755, owned by root), with the
    /// default [`MemoryLimits`].
    pub fn new() -> Self {
        Self::with_limits(MemoryLimits::default())
    }

    /// An empty file system holding at most what `limits` allow.
    pub fn with_limits(limits: MemoryLimits) -> Self {
        let t = now();
        let root = Node {
            attrs: Attrs {
                ftype: FileType::Directory,
                mode: 0o755,
                nlink: 2,
                uid: 0,
                gid: 0,
                size: BLOCK,
                space_used: BLOCK,
                rdev: (0, 0),
                fsid: 0,
                fileid: ROOT_INO,
                atime: t,
                mtime: t,
                ctime: t,
                change: 1,
            },
            content: Content::Dir(Dir::new(ROOT_INO)),
            xattrs: Default::default(),
        };
        let mut nodes = HashMap::new();
        nodes.insert(ROOT_INO, root);
        MemoryBackend {
            inner: Mutex::new(Inner {
                nodes,
                next_ino: ROOT_INO + 1,
                change: 1,
                limits,
                data_bytes: 0,
                held: HashMap::new(),
            }),
            fsid: 0x6d65_6d00_0000_0000 | NEXT_FSID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `create_file` with the lock held.
    fn create_locked(
        &self,
        inner: &mut Inner,
        cx: &OpCtx,
        dir: u64,
        name: &[u8],
        mode: CreateMode,
        attrs: &SetAttrs,
    ) -> Result<(FileKey, Attrs, bool)> {
        if let Some(ino) = inner.dir(dir)?.get(name) {
            let existing = inner.attrs(ino)?;
            match existing.ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                FileType::Symlink if mode == CreateMode::Unchecked => {
                    return Err(BackendError::SymlinkLoop)
                }
                _ => return Err(BackendError::Exists),
            }
            return match mode {
                CreateMode::Guarded => Err(BackendError::Exists),
                CreateMode::Unchecked => {
                    if let Some(size) = attrs.size {
                        inner.set_size(ino, size)?;
                        inner.touch(ino, true, now())?;
                    }
                    Ok((key_of(ino), self.out(inner.attrs(ino)?), false))
                }
                CreateMode::Exclusive(verf) => {
                    let (a, m) = verifier_times(&verf);
                    if existing.atime.sec == a && existing.mtime.sec == m {
                        Ok((key_of(ino), self.out(existing), false))
                    } else {
                        Err(BackendError::Exists)
                    }
                }
            };
        }
        let create_attrs = SetAttrs {
            size: None,
            atime: None,
            mtime: None,
            ..attrs.clone()
        };
        let ino = inner.new_node(
            dir,
            name,
            FileType::Regular,
            Content::File(Vec::new()),
            0o644,
            &cx.creds,
            &create_attrs,
            (0, 0),
        )?;
        let rest = SetAttrs {
            mode: None,
            uid: None,
            gid: None,
            ..attrs.clone()
        };
        let result = match mode {
            CreateMode::Exclusive(verf) => {
                let (a, m) = verifier_times(&verf);
                let node = inner.node_mut(ino)?;
                node.attrs.atime = Timestamp { sec: a, nsec: 0 };
                node.attrs.mtime = Timestamp { sec: m, nsec: 0 };
                if rest.size.is_some() {
                    inner.apply(ino, &rest, true)
                } else {
                    Ok(())
                }
            }
            _ if !rest.is_empty() => inner.apply(ino, &rest, false),
            _ => Ok(()),
        };
        if let Err(e) = result {
            // Undo the half-made file.
            let t = now();
            if inner.dir_mut(dir)?.remove(name).is_some() {
                inner.unlink_node(ino, t)?;
            }
            return Err(e);
        }
        Ok((key_of(ino), self.out(inner.attrs(ino)?), true))
    }

    /// `make_node` with the lock held.
    fn make_locked(
        &self,
        inner: &mut Inner,
        owner: &Creds,
        dir: u64,
        name: &[u8],
        kind: &NodeKind,
        attrs: &SetAttrs,
    ) -> Result<(FileKey, Attrs)> {
        if inner.dir(dir)?.get(name).is_some() {
            return Err(BackendError::Exists);
        }
        if attrs.size.is_some() {
            return Err(BackendError::Inval);
        }
        let (ftype, content, mode, rdev) = match kind {
            NodeKind::Directory => (
                FileType::Directory,
                Content::Dir(Dir::new(dir)),
                0o755,
                (0, 0),
            ),
            NodeKind::Symlink(target) => {
                check_symlink_target(target)?;
                (
                    FileType::Symlink,
                    Content::Symlink(target.clone()),
                    0o777,
                    (0, 0),
                )
            }
            NodeKind::Fifo => (FileType::Fifo, Content::Special, 0o644, (0, 0)),
            NodeKind::Socket => (FileType::Socket, Content::Special, 0o644, (0, 0)),
            NodeKind::BlockDev(ma, mi) => (FileType::BlockDev, Content::Special, 0o644, (*ma, *mi)),
            NodeKind::CharDev(ma, mi) => (FileType::CharDev, Content::Special, 0o644, (*ma, *mi)),
        };
        let ino = inner.new_node(dir, name, ftype, content, mode, owner, attrs, rdev)?;
        if attrs.atime.is_some() || attrs.mtime.is_some() {
            let times = SetAttrs {
                atime: attrs.atime,
                mtime: attrs.mtime,
                ..SetAttrs::default()
            };
            inner.apply(ino, &times, false)?;
        }
        Ok((key_of(ino), self.out(inner.attrs(ino)?)))
    }

    /// Runs `f`, a mutation of the directory `dir` (given its inode), under the lock, and
    /// reports the directory's change across it: atomic, since nothing else runs meanwhile.
    fn mutate_dir<T>(
        &self,
        dir: &FileKey,
        f: impl FnOnce(&mut Inner, u64) -> Result<T>,
    ) -> Result<(T, DirChange)> {
        let dir = ino_of(dir)?;
        let mut inner = self.lock();
        let before = inner.change_of(dir)?;
        let out = f(&mut inner, dir)?;
        Ok((out, inner.dir_change(dir, before)?))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the table consistent enough to go on
        // (each operation validates before mutating), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn out(&self, mut a: Attrs) -> Attrs {
        a.fsid = self.fsid;
        a
    }
}

/// The exclusive-create verifier as (atime.sec, mtime.sec), as knfsd stores it.
pub(crate) fn verifier_times(verf: &[u8; 8]) -> (i64, i64) {
    let a = u32::from_be_bytes([verf[0], verf[1], verf[2], verf[3]]);
    let m = u32::from_be_bytes([verf[4], verf[5], verf[6], verf[7]]);
    (i64::from(a), i64::from(m))
}

/// A symlink target must be non-empty, NUL-free and at most PATH_MAX - 1 bytes.
pub(crate) fn check_symlink_target(target: &[u8]) -> Result<()> {
    if target.is_empty() || target.contains(&0) {
        return Err(BackendError::Inval);
    }
    if target.len() >= 4096 {
        return Err(BackendError::NameTooLong);
    }
    Ok(())
}
