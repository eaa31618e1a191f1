//! Table mode of the local backend (ADR 0050): keys are ids of the persistent handle
//! table (`handle_table.rs`), for a server that may not open kernel file handles.
//!
//! An id is resolved by opening its recorded link from the export root, one name at a
//! time (`openat` with `O_NOFOLLOW` from the parent's descriptor), and checking that
//! the object reached is the recorded one (device, inode, birth time). When it is not
//! (renamed or moved by someone other than the server), the object is searched for:
//! first in its recorded directory, then breadth-first from the export root over at
//! most [`SEARCH_LIMIT`] entries, opening directories with `openat2(RESOLVE_BENEATH)`
//! so that no search leaves the export. Found, its link is recorded again; not found in
//! a search that saw the whole export, it is gone and its id is dropped (`Stale`).

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, Dir, Mode, OFlags, ResolveFlags, StatxFlags};

use super::errors::map_errno;
use super::handle_table::{id_of_key, key_of, HandleTable, Identity, Sighting, ROOT_ID};
use super::{lock, LocalBackend};
use crate::{BackendError, FileKey, Result};

/// Deepest chain of parents followed when resolving an id.
const MAX_DEPTH: usize = 1024;
/// Directory entries a search for a moved object reads at most.
const SEARCH_LIMIT: usize = 100_000;

fn identity_of(st: &rfs::Statx) -> Identity {
    let birth = if st.stx_mask & StatxFlags::BTIME.bits() != 0 {
        let ns = i128::from(st.stx_btime.tv_sec) * 1_000_000_000 + i128::from(st.stx_btime.tv_nsec);
        // 0 means "unknown": a birth at the epoch is recorded as 1 ns after it.
        u64::try_from(ns).unwrap_or(0).max(1)
    } else {
        0
    };
    Identity {
        dev: rfs::makedev(st.stx_dev_major, st.stx_dev_minor) as u64,
        ino: st.stx_ino,
        birth,
    }
}

/// The identity of the object `name` in `dirfd` (`name` empty: `dirfd` itself), never
/// following a symlink, and its mount id when the kernel reports one.
pub(super) fn statx_at(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<(Identity, Option<u64>)> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let want = StatxFlags::INO | StatxFlags::BTIME | StatxFlags::MNT_ID;
    let st = rfs::statx(dirfd, name, flags, want).map_err(map_errno)?;
    let mnt = (st.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(st.stx_mnt_id);
    Ok((identity_of(&st), mnt))
}

/// A directory (relative to the export root) opened for reading, never leaving the
/// export and never following a symlink.
fn open_beneath(root: BorrowedFd<'_>, rel: &[u8]) -> Result<OwnedFd> {
    let path = if rel.is_empty() { &b"."[..] } else { rel };
    let path = CString::new(path).map_err(|_| BackendError::BadName)?;
    rfs::openat2(
        root,
        path.as_c_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )
    .map_err(map_errno)
}

/// Where a search found an object: its directory's path from the export root and its
/// name there.
struct Found {
    fd: OwnedFd,
    dir: Vec<u8>,
    name: Vec<u8>,
}

impl LocalBackend {
    /// Data was made durable: so are the table's ids, so that every handle of durable
    /// data survives a power loss (a no-op in kernel mode).
    pub(super) fn table_durable(&self) -> Result<()> {
        match &self.table {
            Some(t) => t.make_durable(),
            None => Ok(()),
        }
    }

    /// The handle table (table mode only).
    fn table(&self) -> Result<&HandleTable> {
        self.table
            .as_deref()
            .ok_or_else(|| BackendError::Io("handle table used in kernel-handle mode".into()))
    }

    /// The identity of `name` in `dirfd` (empty: `dirfd` itself), which must be on the
    /// export's mount (`XDev` otherwise, as kernel mode answers for another mount).
    pub(super) fn seen_at(&self, dirfd: BorrowedFd<'_>, name: &CStr) -> Result<Identity> {
        let (identity, mnt) = statx_at(dirfd, name)?;
        let other_mount = self.mount_id != 0 && mnt.is_some_and(|m| m != self.mount_id as u64);
        if identity.dev != self.root_dev || other_mount {
            return Err(BackendError::XDev);
        }
        Ok(identity)
    }

    /// An `O_PATH` descriptor of the object a table key names.
    pub(super) fn open_table_key(&self, key: &[u8]) -> Result<OwnedFd> {
        let id = id_of_key(key).ok_or(BackendError::Stale)?;
        self.open_id(id, 0)
    }

    fn open_root_path(&self) -> Result<OwnedFd> {
        self.fds(|| {
            rfs::openat(
                &self.root_fd,
                c".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
        .map_err(map_errno)
    }

    fn open_id(&self, id: u64, depth: usize) -> Result<OwnedFd> {
        if id == ROOT_ID {
            return self.open_root_path();
        }
        if depth > MAX_DEPTH {
            return Err(BackendError::Stale);
        }
        let table = self.table()?;
        let obj = table.get(id)?.ok_or(BackendError::Stale)?;
        if let Some(fd) = self.open_recorded(obj.parent, &obj.name, &obj.identity, depth)? {
            return Ok(fd);
        }
        self.search(id, obj.parent, &obj.identity)
    }

    /// The object at its recorded link, if it is still there.
    fn open_recorded(
        &self,
        parent: u64,
        name: &[u8],
        want: &Identity,
        depth: usize,
    ) -> Result<Option<OwnedFd>> {
        let Some(pfd) = self.parent_fd(parent, depth)? else {
            return Ok(None);
        };
        let Ok(name) = CString::new(name) else {
            return Ok(None);
        };
        let fd = match self.open_child(&pfd, &name) {
            Ok(fd) => fd,
            Err(BackendError::NotFound | BackendError::NotDir | BackendError::Access) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        match self.seen_at(fd.as_fd(), c"") {
            Ok(seen) if want.same_object(&seen) => Ok(Some(fd)),
            _ => Ok(None),
        }
    }

    /// The descriptor of directory `parent` (cached), or `None` when it is gone.
    fn parent_fd(&self, parent: u64, depth: usize) -> Result<Option<Arc<OwnedFd>>> {
        let pkey = key_of(parent);
        let cached = lock(&self.paths).get(&pkey);
        if let Some(fd) = cached {
            return Ok(Some(fd));
        }
        match self.open_id(parent, depth + 1) {
            Ok(fd) => {
                let fd = Arc::new(fd);
                lock(&self.paths).insert(pkey, fd.clone());
                Ok(Some(fd))
            }
            Err(BackendError::Stale) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Finds a moved object, records where, or answers `Stale`.
    fn search(&self, id: u64, old_parent: u64, want: &Identity) -> Result<OwnedFd> {
        let table = self.table()?;
        // Renamed within its directory: the cheap case.
        if let Some(pfd) = self.parent_fd(old_parent, 0)? {
            let dir = self.open_dir_for_reading(pfd.as_fd())?;
            let mut budget = SEARCH_LIMIT;
            if let Some((fd, name)) = self.scan_dir(dir, want, &mut budget, &mut |_| {})? {
                table.relink(id, old_parent, &name)?;
                return Ok(fd);
            }
        }
        let (found, complete) = self.search_export(want)?;
        let Some(found) = found else {
            if complete {
                tracing::debug!(id, "object gone from the export: its handles are stale");
                table.forget(id)?;
            }
            return Err(BackendError::Stale);
        };
        let parent = self.ids_along(&found.dir)?;
        table.relink(id, parent, &found.name)?;
        Ok(found.fd)
    }

    /// Breadth-first search of the export for `want`; also says whether every
    /// directory was read (then "not found" means gone).
    fn search_export(&self, want: &Identity) -> Result<(Option<Found>, bool)> {
        let mut budget = SEARCH_LIMIT;
        let mut queue: VecDeque<Vec<u8>> = VecDeque::from([Vec::new()]);
        let mut complete = true;
        while let Some(rel) = queue.pop_front() {
            if budget == 0 {
                complete = false;
                break;
            }
            let dir = match open_beneath(self.root_fd.as_fd(), &rel) {
                Ok(d) => d,
                // A directory this user may not read, or gone meanwhile.
                Err(_) => {
                    complete = false;
                    continue;
                }
            };
            let mut subdirs = Vec::new();
            let hit = self.scan_dir(dir, want, &mut budget, &mut |name: &[u8]| {
                subdirs.push(name.to_vec())
            })?;
            if let Some((fd, name)) = hit {
                return Ok((Some(Found { fd, dir: rel, name }), complete));
            }
            for s in subdirs {
                if queue.len() >= SEARCH_LIMIT {
                    complete = false;
                    break;
                }
                let mut p = rel.clone();
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(&s);
                queue.push_back(p);
            }
        }
        Ok((None, complete))
    }

    /// Reads `dir` looking for `want`; reports each subdirectory's name to `subdir`.
    fn scan_dir(
        &self,
        dir: OwnedFd,
        want: &Identity,
        budget: &mut usize,
        subdir: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<(OwnedFd, Vec<u8>)>> {
        let dupd = rfs::openat(
            &dir,
            c".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(map_errno)?;
        let mut entries = Dir::new(dir).map_err(map_errno)?;
        while let Some(ent) = entries.read() {
            let Ok(ent) = ent else { break };
            let name = ent.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            if *budget == 0 {
                break;
            }
            *budget -= 1;
            if ent.ino() == want.ino {
                if let Ok(fd) = self.open_child(&dupd, name) {
                    if self
                        .seen_at(fd.as_fd(), c"")
                        .is_ok_and(|seen| want.same_object(&seen))
                    {
                        return Ok(Some((fd, bytes.to_vec())));
                    }
                }
            }
            let is_dir = match ent.file_type() {
                rfs::FileType::Directory => true,
                rfs::FileType::Unknown => rfs::statat(&dupd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| {
                        rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory
                    }),
                _ => false,
            };
            if is_dir {
                subdir(bytes);
            }
        }
        Ok(None)
    }

    /// The id of the directory at `rel` (from the export root), giving ids to the
    /// directories on the way that have none.
    fn ids_along(&self, rel: &[u8]) -> Result<u64> {
        let table = self.table()?;
        let mut parent = ROOT_ID;
        let mut at = Vec::new();
        for comp in rel.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            if !at.is_empty() {
                at.push(b'/');
            }
            at.extend_from_slice(comp);
            let fd = open_beneath(self.root_fd.as_fd(), &at)?;
            let identity = self.seen_at(fd.as_fd(), c"")?;
            parent = table.ids_for(
                &[Sighting {
                    identity,
                    parent,
                    name: comp,
                }],
                true,
            )?[0];
        }
        Ok(parent)
    }

    /// The key of an object the server reached as `name` in directory `dir`, giving it
    /// an id on first sight and recording that link.
    pub(super) fn table_key_at(&self, fd: &OwnedFd, dir: &FileKey, name: &CStr) -> Result<FileKey> {
        let table = self.table()?;
        let parent = id_of_key(dir).ok_or(BackendError::Stale)?;
        let identity = self.seen_at(fd.as_fd(), c"")?;
        let id = table.ids_for(
            &[Sighting {
                identity,
                parent,
                name: name.to_bytes(),
            }],
            true,
        )?[0];
        Ok(key_of(id))
    }

    /// The key of a directory reached without a name (`lookup_parent`): its id, or one
    /// given now after finding its name in its own parent (walking up to the export
    /// root).
    pub(super) fn table_key_of_dir(&self, fd: &OwnedFd) -> Result<FileKey> {
        let table = self.table()?;
        let mut chain: Vec<(Identity, Vec<u8>)> = Vec::new();
        let mut cur = self
            .fds(|| {
                rfs::openat(
                    fd,
                    c".",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            })
            .map_err(map_errno)?;
        let top = loop {
            let identity = self.seen_at(cur.as_fd(), c"")?;
            if identity.dev == self.root_dev && identity.ino == self.root_ino {
                break ROOT_ID;
            }
            if let Some(id) = table.id_of(&identity)? {
                break id;
            }
            if chain.len() >= MAX_DEPTH {
                return Err(BackendError::XDev);
            }
            let up = self
                .fds(|| {
                    rfs::openat(
                        &cur,
                        c"..",
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                })
                .map_err(map_errno)?;
            let name = name_in(&up, identity.ino)?;
            chain.push((identity, name));
            cur = up;
        };
        let mut parent = top;
        for (identity, name) in chain.iter().rev() {
            parent = table.ids_for(
                &[Sighting {
                    identity: *identity,
                    parent,
                    name,
                }],
                false,
            )?[0];
        }
        Ok(key_of(parent))
    }

    /// The keys of the entries a READDIR returns, given ids in one table transaction
    /// (known objects keep theirs and their recorded link).
    pub(super) fn table_keys_in(
        &self,
        dir: &FileKey,
        dirfd: &OwnedFd,
        names: &[&CStr],
    ) -> Result<Vec<Option<FileKey>>> {
        let table = self.table()?;
        let parent = id_of_key(dir).ok_or(BackendError::Stale)?;
        let mut seen = Vec::with_capacity(names.len());
        let mut at = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if let Ok(identity) = self.seen_at(dirfd.as_fd(), name) {
                seen.push(Sighting {
                    identity,
                    parent,
                    name: name.to_bytes(),
                });
                at.push(i);
            }
        }
        let ids = table.ids_for(&seen, false)?;
        let mut keys = vec![None; names.len()];
        for (i, id) in at.into_iter().zip(ids) {
            keys[i] = Some(key_of(id));
        }
        Ok(keys)
    }

    /// The key of `name` in `dirfd` if the table knows the object (before a remove or
    /// a rename, to update the table after it).
    pub(super) fn table_key_known(&self, dirfd: &OwnedFd, name: &CStr) -> Option<FileKey> {
        let identity = self.seen_at(dirfd.as_fd(), name).ok()?;
        let id = self.table.as_ref()?.id_of(&identity).ok()??;
        Some(key_of(id))
    }

    /// After a rename through the server: `key` is now `name` in `dir`.
    pub(super) fn table_moved(&self, key: &FileKey, dir: &FileKey, name: &CStr) -> Result<()> {
        if self.table.is_none() {
            return Ok(());
        }
        let (Some(id), Some(parent)) = (id_of_key(key), id_of_key(dir)) else {
            return Ok(());
        };
        self.table()?.relink(id, parent, name.to_bytes())
    }

    /// After a remove or a rename over it: drops `key`'s id when its object has no link
    /// left (`fd`, opened before, tells). A client holding it open keeps using it
    /// through the held descriptor (`Backend::hold`).
    pub(super) fn table_unlinked(&self, key: &FileKey, fd: &OwnedFd) -> Result<()> {
        let gone = rfs::fstat(fd).map(|st| st.st_nlink == 0).unwrap_or(true);
        match id_of_key(key) {
            Some(id) if gone => self.table()?.forget(id),
            _ => Ok(()),
        }
    }
}

/// The name under which inode `ino` is in directory `dir`.
fn name_in(dir: &OwnedFd, ino: u64) -> Result<Vec<u8>> {
    let rd = rfs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(map_errno)?;
    let mut entries = Dir::new(rd).map_err(map_errno)?;
    while let Some(ent) = entries.read() {
        let ent = ent.map_err(map_errno)?;
        let bytes = ent.file_name().to_bytes();
        if ent.ino() == ino && bytes != b"." && bytes != b".." {
            return Ok(bytes.to_vec());
        }
    }
    Err(BackendError::Stale)
}
