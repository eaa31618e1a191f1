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

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::{
    check_name, Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, Creds, DirChange,
    DirEntry, FileKey, FileType, FsStats, Linked, Made, NodeKind, OpCtx, RenameChange, Result,
    SetAttrs, SetTime, Timestamp, NAME_MAX,
};

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
/// First cookie handed out in a directory (0 is "start", 1 and 2 are reserved by NFS).
const FIRST_COOKIE: u64 = 3;
const BLOCK: u64 = 4096;

static NEXT_FSID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
struct Dir {
    /// name -> (inode, cookie)
    entries: BTreeMap<Bytes, (u64, u64)>,
    /// cookie -> name, for readdir in cookie order
    by_cookie: BTreeMap<u64, Bytes>,
    next_cookie: u64,
    parent: u64,
}

impl Dir {
    fn new(parent: u64) -> Self {
        Dir {
            entries: BTreeMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            parent,
        }
    }

    fn insert(&mut self, name: Bytes, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some((_, old)) = self.entries.insert(name.clone(), (ino, cookie)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(cookie, name);
    }

    fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let (ino, cookie) = self.entries.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    fn get(&self, name: &[u8]) -> Option<u64> {
        self.entries.get(name).map(|&(ino, _)| ino)
    }
}

#[derive(Debug)]
enum Content {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(Bytes),
    /// fifo, socket, device node
    Special,
}

#[derive(Debug)]
struct Node {
    attrs: Attrs,
    content: Content,
}

#[derive(Debug)]
struct Inner {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Source of `change` values: bumped by every mutation, so they never repeat.
    change: u64,
    limits: MemoryLimits,
    /// Bytes of file data held (sum of file lengths), bounded by `limits.max_bytes`.
    data_bytes: u64,
}

/// An in-memory [`Backend`]. Cheap to create; everything is lost when dropped.
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

fn now() -> Timestamp {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(_) => Timestamp::default(),
    }
}

fn key_of(ino: u64) -> FileKey {
    Bytes::copy_from_slice(&ino.to_be_bytes())
}

fn ino_of(key: &FileKey) -> Result<u64> {
    let arr: [u8; 8] = key.as_ref().try_into().map_err(|_| BackendError::Stale)?;
    Ok(u64::from_be_bytes(arr))
}

fn set_time(t: SetTime) -> Timestamp {
    match t {
        SetTime::ServerNow => now(),
        SetTime::Client(ts) => ts,
    }
}

fn space_for(size: u64) -> u64 {
    size.div_ceil(BLOCK) * BLOCK
}

impl Inner {
    fn node(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(BackendError::Stale)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(BackendError::Stale)
    }

    fn dir(&self, ino: u64) -> Result<&Dir> {
        match &self.node(ino)?.content {
            Content::Dir(d) => Ok(d),
            _ => Err(BackendError::NotDir),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir> {
        match &mut self.node_mut(ino)?.content {
            Content::Dir(d) => Ok(d),
            _ => Err(BackendError::NotDir),
        }
    }

    fn next_change(&mut self) -> u64 {
        self.change += 1;
        self.change
    }

    /// Marks `ino` modified: ctime = now, change bumped; with `data`, mtime = now too.
    fn touch(&mut self, ino: u64, data: bool, t: Timestamp) -> Result<()> {
        let change = self.next_change();
        let node = self.node_mut(ino)?;
        node.attrs.ctime = t;
        if data {
            node.attrs.mtime = t;
        }
        node.attrs.change = change;
        Ok(())
    }

    fn attrs(&self, ino: u64) -> Result<Attrs> {
        Ok(self.node(ino)?.attrs.clone())
    }

    /// Drops one link of `ino` (already removed from its directory); frees it at zero.
    fn unlink_node(&mut self, ino: u64, t: Timestamp) -> Result<()> {
        let is_dir = self.node(ino)?.attrs.ftype == FileType::Directory;
        let free = {
            let change = self.next_change();
            let node = self.node_mut(ino)?;
            node.attrs.nlink = if is_dir {
                0
            } else {
                node.attrs.nlink.saturating_sub(1)
            };
            node.attrs.ctime = t;
            node.attrs.change = change;
            node.attrs.nlink == 0
        };
        if free {
            if let Some(Node {
                content: Content::File(data),
                ..
            }) = self.nodes.remove(&ino)
            {
                self.data_bytes -= data.len() as u64;
            }
        }
        Ok(())
    }

    /// Is `anc` `ino` or one of its ancestors?
    fn is_ancestor(&self, anc: u64, mut ino: u64) -> Result<bool> {
        loop {
            if ino == anc {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.dir(ino)?.parent;
        }
    }

    /// Checks that a file of `old` bytes may become `new` bytes long.
    fn reserve(&self, old: u64, new: u64) -> Result<()> {
        if new > self.limits.max_file_size {
            return Err(BackendError::FileTooBig);
        }
        if new > old && self.data_bytes - old + new > self.limits.max_bytes {
            return Err(BackendError::NoSpace);
        }
        Ok(())
    }

    /// The change value of directory `dir` now.
    fn change_of(&self, dir: u64) -> Result<u64> {
        Ok(self.node(dir)?.attrs.change)
    }

    /// A directory's change across a mutation done under the lock (hence atomic).
    fn dir_change(&self, dir: u64, before: u64) -> Result<DirChange> {
        Ok(DirChange {
            before,
            after: self.change_of(dir)?,
            atomic: true,
        })
    }

    fn set_size(&mut self, ino: u64, size: u64) -> Result<()> {
        let old = match &self.node(ino)?.content {
            Content::File(data) => data.len() as u64,
            Content::Dir(_) => return Err(BackendError::IsDir),
            _ => return Err(BackendError::Inval),
        };
        self.reserve(old, size)?;
        let len = usize::try_from(size).map_err(|_| BackendError::FileTooBig)?;
        self.data_bytes = self.data_bytes - old + size;
        let node = self.node_mut(ino)?;
        match &mut node.content {
            Content::File(data) => {
                data.resize(len, 0);
                node.attrs.size = size;
                node.attrs.space_used = space_for(size);
                Ok(())
            }
            Content::Dir(_) => Err(BackendError::IsDir),
            _ => Err(BackendError::Inval),
        }
    }

    /// Writes `data` at `offset` of file `ino` (growing it), within the limits. Does not
    /// touch the times.
    fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(BackendError::FileTooBig)?;
        let old = match &self.node(ino)?.content {
            Content::File(d) => d.len() as u64,
            Content::Dir(_) => return Err(BackendError::IsDir),
            _ => return Err(BackendError::Inval),
        };
        let new = old.max(end);
        self.reserve(old, new)?;
        // end <= max_file_size; usize conversion checked for 32-bit targets.
        let s = usize::try_from(offset).map_err(|_| BackendError::FileTooBig)?;
        let e = usize::try_from(end).map_err(|_| BackendError::FileTooBig)?;
        self.data_bytes = self.data_bytes - old + new;
        let node = self.node_mut(ino)?;
        if let Content::File(buf) = &mut node.content {
            if buf.len() < e {
                buf.resize(e, 0);
            }
            buf[s..e].copy_from_slice(data);
            let size = buf.len() as u64;
            node.attrs.size = size;
            node.attrs.space_used = space_for(size);
        }
        // Writes by root keep set-ID bits (CAP_FSETID), as on the local backend.
        Ok(())
    }

    /// Applies `sa` (already validated) to `ino`. `skip_times` leaves atime/mtime alone
    /// (exclusive create keeps the verifier there).
    fn apply(&mut self, ino: u64, sa: &SetAttrs, skip_times: bool) -> Result<()> {
        let t = now();
        let ftype = self.node(ino)?.attrs.ftype;
        if sa.size.is_some() {
            match ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                _ => return Err(BackendError::Inval),
            }
        }
        if sa.uid.is_some() || sa.gid.is_some() {
            let node = self.node_mut(ino)?;
            if let Some(uid) = sa.uid {
                node.attrs.uid = uid;
            }
            if let Some(gid) = sa.gid {
                node.attrs.gid = gid;
            }
            // Like Linux chown(2): a non-directory loses set-user-ID, and set-group-ID
            // when group-executable.
            if ftype != FileType::Directory {
                node.attrs.mode &= !0o4000;
                if node.attrs.mode & 0o010 != 0 {
                    node.attrs.mode &= !0o2000;
                }
            }
        }
        if let Some(mode) = sa.mode {
            if ftype != FileType::Symlink {
                self.node_mut(ino)?.attrs.mode = mode & 0o7777;
            }
        }
        let mut data_changed = false;
        if let Some(size) = sa.size {
            self.set_size(ino, size)?;
            data_changed = true;
        }
        self.touch(ino, data_changed && !skip_times, t)?;
        if !skip_times {
            let node = self.node_mut(ino)?;
            if let Some(at) = sa.atime {
                node.attrs.atime = set_time(at);
            }
            if let Some(mt) = sa.mtime {
                node.attrs.mtime = set_time(mt);
            }
        }
        Ok(())
    }

    /// Creates a new node in `dir` (the name must not exist). Returns its inode.
    #[allow(clippy::too_many_arguments)]
    fn new_node(
        &mut self,
        dir: u64,
        name: &[u8],
        ftype: FileType,
        content: Content,
        mode: u32,
        owner: &Creds,
        sa: &SetAttrs,
        rdev: (u32, u32),
    ) -> Result<u64> {
        let t = now();
        let parent = self.node(dir)?;
        let setgid_dir = parent.attrs.mode & 0o2000 != 0;
        let dir_gid = parent.attrs.gid;
        let mut mode = sa.mode.unwrap_or(mode) & 0o7777;
        if ftype == FileType::Directory && setgid_dir {
            mode |= 0o2000;
        }
        if ftype == FileType::Symlink {
            mode = 0o777;
        }
        let gid = sa
            .gid
            .unwrap_or(if setgid_dir { dir_gid } else { owner.gid });
        let ino = self.next_ino;
        self.next_ino += 1;
        let change = self.next_change();
        let size = match &content {
            Content::Symlink(target) => target.len() as u64,
            Content::Dir(_) => BLOCK,
            _ => 0,
        };
        let is_dir = ftype == FileType::Directory;
        let attrs = Attrs {
            ftype,
            mode,
            nlink: if is_dir { 2 } else { 1 },
            uid: sa.uid.unwrap_or(owner.uid),
            gid,
            size,
            space_used: if is_dir { BLOCK } else { space_for(size) },
            rdev,
            fsid: 0,
            fileid: ino,
            atime: t,
            mtime: t,
            ctime: t,
            change,
        };
        self.nodes.insert(ino, Node { attrs, content });
        self.dir_mut(dir)?.insert(Bytes::copy_from_slice(name), ino);
        if is_dir {
            self.node_mut(dir)?.attrs.nlink += 1;
        }
        self.touch(dir, true, t)?;
        Ok(ino)
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

impl Backend for MemoryBackend {
    fn root(&self) -> Result<FileKey> {
        Ok(key_of(ROOT_INO))
    }

    fn getattr(&self, key: &FileKey) -> Result<Attrs> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        Ok(self.out(inner.attrs(ino)?))
    }

    fn lookup(&self, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        check_name(name)?;
        let dir = ino_of(dir)?;
        let inner = self.lock();
        let ino = inner.dir(dir)?.get(name).ok_or(BackendError::NotFound)?;
        Ok((key_of(ino), self.out(inner.attrs(ino)?)))
    }

    fn lookup_parent(&self, dir: &FileKey) -> Result<(FileKey, Attrs)> {
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

    fn read(&self, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
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

    fn readlink(&self, key: &FileKey) -> Result<Bytes> {
        let ino = ino_of(key)?;
        let inner = self.lock();
        match &inner.node(ino)?.content {
            Content::Symlink(t) => Ok(t.clone()),
            _ => Err(BackendError::NotSymlink),
        }
    }

    fn readdir(
        &self,
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

    fn statfs(&self, key: &FileKey) -> Result<FsStats> {
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
