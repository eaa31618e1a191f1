//! The inode table behind the memory backend's lock: directories with their cookies,
//! nodes, and the locked state with the operations on it (lookups, attributes, space
//! accounting, linking and unlinking).

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::{MemoryLimits, ROOT_INO};
use crate::{
    Attrs, BackendError, Creds, DirChange, FileKey, FileType, Result, SetAttrs, SetTime, Timestamp,
};

/// First cookie handed out in a directory (0 is "start", 1 and 2 are reserved by NFS).
const FIRST_COOKIE: u64 = 3;
pub(super) const BLOCK: u64 = 4096;

#[derive(Debug)]
pub(super) struct Dir {
    /// name -> (inode, cookie)
    pub(super) entries: BTreeMap<Bytes, (u64, u64)>,
    /// cookie -> name, for readdir in cookie order
    pub(super) by_cookie: BTreeMap<u64, Bytes>,
    pub(super) next_cookie: u64,
    pub(super) parent: u64,
}

impl Dir {
    pub(super) fn new(parent: u64) -> Self {
        Dir {
            entries: BTreeMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            parent,
        }
    }

    pub(super) fn insert(&mut self, name: Bytes, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some((_, old)) = self.entries.insert(name.clone(), (ino, cookie)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(cookie, name);
    }

    pub(super) fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let (ino, cookie) = self.entries.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    pub(super) fn get(&self, name: &[u8]) -> Option<u64> {
        self.entries.get(name).map(|&(ino, _)| ino)
    }
}

#[derive(Debug)]
pub(super) enum Content {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(Bytes),
    /// fifo, socket, device node
    Special,
}

#[derive(Debug)]
pub(super) struct Node {
    pub(super) attrs: Attrs,
    pub(super) content: Content,
    /// Extended attributes (RFC 8276 names, without `user.`).
    pub(super) xattrs: std::collections::BTreeMap<Bytes, Bytes>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) nodes: HashMap<u64, Node>,
    pub(super) next_ino: u64,
    /// Source of `change` values: bumped by every mutation, so they never repeat.
    pub(super) change: u64,
    pub(super) limits: MemoryLimits,
    /// Bytes of file data held (sum of file lengths), bounded by `limits.max_bytes`.
    pub(super) data_bytes: u64,
    /// Objects a client has open (`Backend::hold`) and how many holds each has: they
    /// outlive their last name until the last release.
    pub(super) held: HashMap<u64, usize>,
}

pub(super) fn now() -> Timestamp {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(_) => Timestamp::default(),
    }
}

pub(super) fn key_of(ino: u64) -> FileKey {
    Bytes::copy_from_slice(&ino.to_be_bytes())
}

pub(super) fn ino_of(key: &FileKey) -> Result<u64> {
    let arr: [u8; 8] = key.as_ref().try_into().map_err(|_| BackendError::Stale)?;
    Ok(u64::from_be_bytes(arr))
}

pub(super) fn set_time(t: SetTime) -> Timestamp {
    match t {
        SetTime::ServerNow => now(),
        SetTime::Client(ts) => ts,
    }
}

pub(super) fn space_for(size: u64) -> u64 {
    size.div_ceil(BLOCK) * BLOCK
}

impl Inner {
    pub(super) fn node(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(BackendError::Stale)
    }

    pub(super) fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(BackendError::Stale)
    }

    pub(super) fn dir(&self, ino: u64) -> Result<&Dir> {
        match &self.node(ino)?.content {
            Content::Dir(d) => Ok(d),
            _ => Err(BackendError::NotDir),
        }
    }

    pub(super) fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir> {
        match &mut self.node_mut(ino)?.content {
            Content::Dir(d) => Ok(d),
            _ => Err(BackendError::NotDir),
        }
    }

    pub(super) fn next_change(&mut self) -> u64 {
        self.change += 1;
        self.change
    }

    /// Marks `ino` modified: ctime = now, change bumped; with `data`, mtime = now too.
    pub(super) fn touch(&mut self, ino: u64, data: bool, t: Timestamp) -> Result<()> {
        let change = self.next_change();
        let node = self.node_mut(ino)?;
        node.attrs.ctime = t;
        if data {
            node.attrs.mtime = t;
        }
        node.attrs.change = change;
        Ok(())
    }

    pub(super) fn attrs(&self, ino: u64) -> Result<Attrs> {
        Ok(self.node(ino)?.attrs.clone())
    }

    /// Drops one link of `ino` (already removed from its directory); frees it at zero.
    pub(super) fn unlink_node(&mut self, ino: u64, t: Timestamp) -> Result<()> {
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
        if free && !self.held.contains_key(&ino) {
            self.free_node(ino);
        }
        Ok(())
    }

    /// Forget an object that has no name and no hold left.
    pub(super) fn free_node(&mut self, ino: u64) {
        if let Some(Node {
            content: Content::File(data),
            ..
        }) = self.nodes.remove(&ino)
        {
            self.data_bytes -= data.len() as u64;
        }
    }

    /// Is `anc` `ino` or one of its ancestors?
    pub(super) fn is_ancestor(&self, anc: u64, mut ino: u64) -> Result<bool> {
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
    pub(super) fn reserve(&self, old: u64, new: u64) -> Result<()> {
        if new > self.limits.max_file_size {
            return Err(BackendError::FileTooBig);
        }
        if new > old && self.data_bytes - old + new > self.limits.max_bytes {
            return Err(BackendError::NoSpace);
        }
        Ok(())
    }

    /// The change value of directory `dir` now.
    pub(super) fn change_of(&self, dir: u64) -> Result<u64> {
        Ok(self.node(dir)?.attrs.change)
    }

    /// A directory's change across a mutation done under the lock (hence atomic).
    pub(super) fn dir_change(&self, dir: u64, before: u64) -> Result<DirChange> {
        Ok(DirChange {
            before,
            after: self.change_of(dir)?,
            atomic: true,
        })
    }

    pub(super) fn set_size(&mut self, ino: u64, size: u64) -> Result<()> {
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
    pub(super) fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<()> {
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
    pub(super) fn apply(&mut self, ino: u64, sa: &SetAttrs, skip_times: bool) -> Result<()> {
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
    pub(super) fn new_node(
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
        self.nodes.insert(
            ino,
            Node {
                attrs,
                content,
                xattrs: Default::default(),
            },
        );
        self.dir_mut(dir)?.insert(Bytes::copy_from_slice(name), ino);
        if is_dir {
            self.node_mut(dir)?.attrs.nlink += 1;
        }
        self.touch(dir, true, t)?;
        Ok(ino)
    }
}
