//! From keys and names to descriptors: resolving keys (cached), opening children and
//! regular files for I/O, and forgetting the descriptors of objects that are gone.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{self as rfs, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::attrs::ftype_of;
use super::errors::{map_errno, retry};
use super::handles::{map_handle_errno, name_to_handle, open_handle};
use super::{lock, LocalBackend};
use crate::{check_name, BackendError, FileKey, FileType, Result, MAX_KEY_LEN};

/// A name as the `*at` calls take it, after the checks every backend makes.
pub(super) fn cname(name: &[u8]) -> Result<CString> {
    check_name(name)?;
    CString::new(name).map_err(|_| BackendError::BadName)
}

/// Whether `fd` was opened read-write (one `fcntl`).
pub(super) fn opened_read_write(fd: &OwnedFd) -> bool {
    rfs::fcntl_getfl(fd)
        .map(|f| f.contains(OFlags::RDWR))
        .unwrap_or(false)
}

/// The magic link that names exactly the inode of `fd` (no path is walked), for calls
/// that need a path: reopening an `O_PATH` descriptor for I/O, chmod, utimensat.
pub(super) fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

impl LocalBackend {
    /// An `O_PATH` descriptor for `key` (cached; a held object's own descriptor).
    pub(super) fn resolve(&self, key: &FileKey) -> Result<Arc<OwnedFd>> {
        let cached = lock(&self.paths).get(key);
        if let Some(fd) = cached {
            return Ok(fd);
        }
        let held = lock(&self.held).get(key).map(|(fd, _)| fd.clone());
        if let Some(fd) = held {
            return Ok(fd);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(BackendError::Stale);
        }
        let fd = if self.table.is_some() {
            self.open_table_key(key)?
        } else {
            self.fds(|| open_handle(self.root_fd.as_fd(), key))
                .map_err(map_handle_errno)?
        };
        let fd = Arc::new(fd);
        lock(&self.paths).insert(key.clone(), fd.clone());
        Ok(fd)
    }

    /// Drops every cached descriptor of `key`.
    pub(super) fn forget(&self, key: &FileKey) {
        lock(&self.paths).remove(key);
        lock(&self.rw).remove(key);
    }

    /// A readable descriptor of the directory `dir` names (usually an `O_PATH` one):
    /// for reading its entries or syncing it.
    pub(super) fn open_dir_for_reading(&self, dir: BorrowedFd<'_>) -> Result<OwnedFd> {
        self.fds(|| {
            rfs::openat(
                dir,
                c".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
        .map_err(map_errno)
    }

    /// Runs a descriptor-allocating call, retrying on `EINTR`, and once more after
    /// shrinking the caches when the process is out of descriptors.
    pub(super) fn fds<T>(
        &self,
        mut f: impl FnMut() -> rustix::io::Result<T>,
    ) -> rustix::io::Result<T> {
        match retry(&mut f) {
            Err(Errno::MFILE | Errno::NFILE) => {
                tracing::warn!("out of file descriptors: shrinking the descriptor caches");
                lock(&self.paths).shrink_to_half();
                lock(&self.rw).shrink_to_half();
                retry(f)
            }
            r => r,
        }
    }

    /// After `NotFound` from an operation in directory `dir`: if the directory itself has
    /// been removed, the answer is `Stale`.
    pub(super) fn enoent_in(&self, dir: &FileKey, dfd: &OwnedFd, e: BackendError) -> BackendError {
        if e == BackendError::NotFound
            && rfs::fstat(dfd).map(|st| st.st_nlink == 0).unwrap_or(false)
        {
            self.forget(dir);
            return BackendError::Stale;
        }
        e
    }

    /// fstat of a resolved key; an object without links is gone (`Stale`) unless a
    /// client holds it open (`Backend::hold`).
    pub(super) fn stat_live(&self, key: &FileKey, fd: &OwnedFd) -> Result<Stat> {
        let st = rfs::fstat(fd).map_err(map_errno)?;
        if st.st_nlink == 0 && !lock(&self.held).contains_key(key) {
            self.forget(key);
            return Err(BackendError::Stale);
        }
        Ok(st)
    }

    /// Checks that an object opened by name belongs to the export's mount, and gets its
    /// key. `at` is the directory and name it was reached by (table mode records that
    /// link; `None` for a directory reached by `..`).
    pub(super) fn key_in_export(
        &self,
        fd: &OwnedFd,
        st: &Stat,
        at: Option<(&FileKey, &CStr)>,
    ) -> Result<FileKey> {
        if st.st_dev as u64 != self.root_dev {
            return Err(BackendError::XDev);
        }
        if self.table.is_some() {
            return match at {
                Some((dir, name)) => self.table_key_at(fd, dir, name),
                None => self.table_key_of_dir(fd),
            };
        }
        let (key, mount_id) = name_to_handle(fd.as_fd(), c"", libc::AT_EMPTY_PATH)?;
        if mount_id != self.mount_id {
            return Err(BackendError::XDev);
        }
        Ok(key)
    }

    /// Whether an object opened from a key is on the export's mount (kernel mode: its
    /// handle's mount; table mode: its device, which resolution already checked).
    pub(super) fn on_export_mount(&self, fd: &OwnedFd, st: &Stat) -> bool {
        if self.table.is_some() {
            return st.st_dev as u64 == self.root_dev;
        }
        self.key_in_export(fd, st, None).is_ok()
    }

    /// The key of `name` in `dirfd` before a remove or a rename changes it, with (table
    /// mode) a descriptor that tells afterwards whether the object lost its last link.
    pub(super) fn key_before_change(
        &self,
        dirfd: &OwnedFd,
        name: &CStr,
    ) -> Option<(FileKey, Option<OwnedFd>)> {
        if self.table.is_none() {
            return name_to_handle(dirfd.as_fd(), name, 0)
                .ok()
                .map(|(k, _)| (k, None));
        }
        let key = self.table_key_known(dirfd, name)?;
        let fd = self.open_child(dirfd, name).ok();
        Some((key, fd))
    }

    /// After a remove or a rename over it: forgets what the server kept of an object
    /// that has no link left (cached descriptors; table mode: its id).
    pub(super) fn after_unlink(&self, key: &FileKey, fd: Option<&OwnedFd>) {
        self.forget_if_unlinked(key);
        if let Some(fd) = fd {
            if let Err(e) = self.table_unlinked(key, fd) {
                tracing::warn!(error = %e, "handle table: cannot drop a removed object");
            }
        }
    }

    /// Opens `name` in `dirfd` as `O_PATH`, never following a symlink.
    pub(super) fn open_child(&self, dirfd: &OwnedFd, name: &CStr) -> Result<OwnedFd> {
        self.fds(|| {
            rfs::openat(
                dirfd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
        .map_err(map_errno)
    }

    /// Opens the object of an `O_PATH` descriptor for I/O. Only regular files (never
    /// devices or fifos, whose open has side effects).
    pub(super) fn reopen_file(&self, fd: &OwnedFd, st: &Stat, flags: OFlags) -> Result<OwnedFd> {
        match ftype_of(st) {
            FileType::Regular => {}
            FileType::Directory => return Err(BackendError::IsDir),
            FileType::Symlink => return Err(BackendError::SymlinkLoop),
            _ => return Err(BackendError::Inval),
        }
        self.fds(|| {
            rfs::open(
                proc_path(fd.as_fd()).as_str(),
                flags | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
            )
        })
        .map_err(|e| match e {
            // With O_NONBLOCK, a regular file's open fails so only when a lease (ours
            // or another process's) is being broken for it: retry later.
            Errno::AGAIN => BackendError::Conflict,
            other => map_errno(other),
        })
    }

    /// A descriptor of `key` open for I/O (read-write when possible), with its stat.
    ///
    /// A leased file's I/O goes through the lease's descriptor (`lease.rs`), so the
    /// server never breaks its own lease; and no open here ever waits for a lease (the
    /// opens are non-blocking: a lease being broken answers `Conflict`, retry later).
    pub(super) fn io_fd(&self, key: &FileKey, need_write: bool) -> Result<(Arc<OwnedFd>, Stat)> {
        match self.open_io_fd(key, need_write) {
            Some(fd) => {
                let st = self.stat_live(key, &fd)?;
                Ok((fd, st))
            }
            None => self.new_io_fd(key, need_write),
        }
    }

    /// `io_fd` without its stat when a descriptor is open already: for READ and WRITE,
    /// whose handlers have just looked at the object (its type, the caller's access, and
    /// that it still has a link), so a second `fstat` per call would buy nothing.
    pub(super) fn io_fd_unchecked(&self, key: &FileKey, need_write: bool) -> Result<Arc<OwnedFd>> {
        match self.open_io_fd(key, need_write) {
            Some(fd) => Ok(fd),
            None => Ok(self.new_io_fd(key, need_write)?.0),
        }
    }

    /// The lease's or the cache's descriptor of `key`, if one fits `need_write`.
    fn open_io_fd(&self, key: &FileKey, need_write: bool) -> Option<Arc<OwnedFd>> {
        if let Some(fd) = self.leased_fd(key, need_write) {
            return Some(fd);
        }
        lock(&self.rw).get_for_io(key, need_write, opened_read_write)
    }

    /// Opens `key` for I/O (read-write when possible) and caches the descriptor.
    fn new_io_fd(&self, key: &FileKey, need_write: bool) -> Result<(Arc<OwnedFd>, Stat)> {
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        let fd = match self.reopen_file(&pfd, &st, OFlags::RDWR | OFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(BackendError::ReadOnly | BackendError::Access | BackendError::Perm)
                if !need_write =>
            {
                self.reopen_file(&pfd, &st, OFlags::RDONLY | OFlags::NONBLOCK)?
            }
            Err(e) => return Err(e),
        };
        let fd = Arc::new(fd);
        lock(&self.rw).insert(key.clone(), fd.clone());
        Ok((fd, st))
    }

    /// Drops cached descriptors of `key` if its object has no links left.
    pub(super) fn forget_if_unlinked(&self, key: &FileKey) {
        let in_paths = lock(&self.paths).get(key);
        let cached = in_paths.or_else(|| lock(&self.rw).get(key));
        if let Some(fd) = cached {
            match rfs::fstat(&*fd) {
                Ok(st) if st.st_nlink > 0 => {}
                _ => self.forget(key),
            }
        }
    }

    /// Stat of a directory key, checking that it is a live directory.
    pub(super) fn dir_fd(&self, key: &FileKey) -> Result<(Arc<OwnedFd>, Stat)> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if ftype_of(&st) != FileType::Directory {
            return Err(BackendError::NotDir);
        }
        Ok((fd, st))
    }
}
