//! Local-directory backend: serves one directory tree of the host's file system.
//!
//! # Design (see `docs/adr/0001-file-handles.md`)
//!
//! * A [`FileKey`] is the kernel's file handle for the object (`name_to_handle_at`):
//!   restart-stable, no database, and `ESTALE` once the object is gone. Keys are turned
//!   back into file descriptors with `open_by_handle_at(root, handle, O_PATH)`, which
//!   needs `CAP_DAC_READ_SEARCH` (the server runs as root).
//! * Without that capability (or when asked, [`HandleMode::Table`]), keys are ids of a
//!   persistent handle table instead (`handle_table.rs`, `table_mode.rs`, ADR 0050),
//!   resolved by the recorded name from the export root and found again by a bounded
//!   search when moved by someone else.
//! * Every operation works relative to file descriptors with the `*at` system calls and
//!   single-component names, never following a symlink (`O_NOFOLLOW`,
//!   `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`): a symlink in the export is always returned
//!   as a symlink and never traversed by the server.
//! * Only objects of the export root's mount are served: a lookup that lands on another
//!   device or another mount answers `XDev`; readdir leaves such entries out.
//! * Regular files are reopened for I/O through `/proc/self/fd/<n>` (the magic link
//!   names exactly the inode of the `O_PATH` descriptor; no path is walked). `/proc` must
//!   be mounted.
//! * Bounded caches keep `O_PATH` descriptors (4096) and read-write descriptors of
//!   regular files (128) so that hot keys are not reopened on every call.
//! * Delegated files are watched with kernel leases (`lease.rs`, ADR 0027): a process
//!   on the host opening one in a conflicting way waits while the server recalls the
//!   delegation. While a lease lives, the file's I/O goes through the lease's descriptor.
//! * Directories with directory delegations are watched with inotify (`dirwatch.rs`,
//!   ADR 0047): entries created, removed or renamed outside the server are reported;
//!   the backend's own entry changes are told apart and left out.
//! * `change` is the ctime in nanoseconds, bumped by an in-memory per-file counter so that
//!   two mutations within one ctime tick still differ and it never goes back during a run.
//! * Directory mutations report their directory's change before and after (not atomic:
//!   another process may change the directory in between).
//! * `clone_range` uses `FICLONERANGE` when a probe at open time showed that the file
//!   system shares blocks (XFS, Btrfs), else it copies (ext4, tmpfs).
//! * NFSv4.2: ALLOCATE and DEALLOCATE are `fallocate` (mode 0; punch hole with keep
//!   size), SEEK is `lseek` SEEK_DATA / SEEK_HOLE, and extended attributes are the
//!   file's `user.` attributes (the protocol's names without that prefix, as in knfsd).
//! * Directory cookies are the file system's `d_off` values (stable on ext4, xfs, btrfs
//!   and tmpfs since Linux 6.6). If the file system reports a `d_off` that cannot be
//!   passed back to `lseek` (0 or negative), the entry gets an ordinal cookie instead
//!   (bit 63 set, low bits = number of raw entries from the start of the directory);
//!   such cookies are only stable while no entry before them is removed.

// `struct stat` field types differ between architectures; the casts below are no-ops on
// some of them.
#![allow(clippy::unnecessary_cast, clippy::useless_conversion)]

mod attrs;
mod backend;
mod change;
mod create;
mod descriptors;
mod dirwatch;
mod errors;
mod fd_cache;
mod handle_log;
mod handle_table;
mod handles;
mod io;
mod lease;
mod piped;
mod readdir;
mod table_mode;
mod v42;

use foldhash::{HashMap, HashMapExt};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::{self as rfs, Mode, OFlags};
use rustix::io::Errno;

use crate::reflink::probe_reflink;
use crate::{BackendError, CloneMethod, FileKey, Result};
use change::ChangeTable;
use fd_cache::{cache_caps, FdCache};
use handle_table::{key_of, HandleTable, ROOT_ID};
use handles::{map_handle_errno, name_to_handle, open_handle};

pub(crate) use errors::{map_errno, retry};
pub use lease::{lease_break_time, sigio_handled};

/// A [`Backend`](crate::Backend) serving one directory tree of the local file system.
pub struct LocalBackend {
    /// Descriptor of the export root, the mount fd for `open_by_handle_at`. Opened
    /// `O_RDONLY`, not `O_PATH`: recent kernels refuse an `O_PATH` mount fd (`EBADF`).
    root_fd: OwnedFd,
    root_key: FileKey,
    root_dev: u64,
    root_ino: u64,
    mount_id: i32,
    fsid: u64,
    paths: Mutex<FdCache>,
    rw: Mutex<FdCache>,
    changes: Mutex<ChangeTable>,
    /// Objects a client has open (`Backend::hold`), with the descriptor that keeps each
    /// alive after its last name is gone and the number of holds.
    held: Mutex<HashMap<FileKey, (Arc<OwnedFd>, usize)>>,
    /// Kernel leases behind delegations (`Backend::watch_file`, ADR 0027).
    leases: Arc<lease::Leases>,
    /// inotify watches of delegated directories (`Backend::watch_dir`, ADR 0047).
    dirs: Arc<dirwatch::DirWatches>,
    /// What `clone_range` does here (probed once at open).
    clone: CloneMethod,
    /// Whether the file system keeps `user.` extended attributes (probed once at open).
    xattrs: bool,
    /// Whether reads may ask for the page cache only (`RWF_NOWAIT`); cleared the first
    /// time the file system refuses it.
    nowait_reads: std::sync::atomic::AtomicBool,
    /// The handle table when keys are its ids (table mode); `None`: kernel handles.
    table: Option<Arc<HandleTable>>,
}

/// Where the local backend's keys come from (ADR 0050).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HandleMode {
    /// Kernel handles when this process may open them (`CAP_DAC_READ_SEARCH`), else
    /// the handle table.
    #[default]
    Auto,
    /// Kernel file handles (`name_to_handle_at`/`open_by_handle_at`); fails to open
    /// without the capability.
    Kernel,
    /// Ids of the persistent handle table in the state directory.
    Table,
}

impl std::str::FromStr for HandleMode {
    type Err = BackendError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(HandleMode::Auto),
            "kernel" => Ok(HandleMode::Kernel),
            "table" => Ok(HandleMode::Table),
            _ => Err(BackendError::Inval),
        }
    }
}

/// The name of the handle table's file in an export's layer state directory.
pub const HANDLE_TABLE_FILE: &str = "handles.redb";

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("root_fd", &self.root_fd)
            .field("root_dev", &self.root_dev)
            .field("root_ino", &self.root_ino)
            .field("mount_id", &self.mount_id)
            .field("table", &self.table.is_some())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Caches hold no invariant a panic could break half-way.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LocalBackend {
    /// Serves the directory at `path` with kernel handles when this process may open
    /// them, else with a handle table in memory (see [`LocalBackend::open_with`]).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, HandleMode::Auto, None)
    }

    /// Serves the directory at `path` (symlinks in `path` itself are followed: it comes
    /// from the administrator). Fails if it is not a directory, or in kernel mode if its
    /// file system cannot produce file handles or this process may not open them
    /// (`CAP_DAC_READ_SEARCH`). `state` is the export's layer state directory, where
    /// table mode keeps [`HANDLE_TABLE_FILE`]; without one the table lives in memory.
    /// Logs which mode serves the export and why: one INFO line for the handle table
    /// (whose file in the state directory the administrator must keep), DEBUG for
    /// kernel handles.
    ///
    /// Raises the process's soft `RLIMIT_NOFILE` to its hard limit, and sizes the
    /// descriptor caches to the result.
    pub fn open_with(path: &Path, mode: HandleMode, state: Option<&Path>) -> Result<Self> {
        let root_fd = retry(|| {
            rfs::open(
                path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
        .map_err(|e| match e {
            Errno::NOENT | Errno::NOTDIR => map_errno(e),
            other => BackendError::Io(format!("cannot open export {}: {other}", path.display())),
        })?;
        let st = rfs::fstat(&root_fd).map_err(map_errno)?;
        let kernel = match mode {
            HandleMode::Table => Err("table mode asked for".to_string()),
            _ => match Self::probe_kernel_handles(&root_fd) {
                Ok(k) => Ok(k),
                Err(e) if mode == HandleMode::Kernel => {
                    return Err(BackendError::Io(format!("export {}: {e}", path.display())))
                }
                Err(e) => Err(e.to_string()),
            },
        };
        let (root_key, mount_id, table) = match kernel {
            Ok((key, mount_id)) => {
                // The default of a root server: nothing for the administrator to act
                // on, and `txnfs serve` starts with one summary line.
                tracing::debug!(
                    export = %path.display(),
                    "file handles: kernel handles (open_by_handle_at works)"
                );
                (key, mount_id, None)
            }
            Err(why) => {
                let (root, root_mnt) = table_mode::statx_at(root_fd.as_fd(), c"")?;
                let file = Self::table_file(state)?;
                let table = handle_table::open_shared(file.as_deref(), root)?;
                let place = file
                    .as_ref()
                    .map_or("in memory (not kept across restarts)".to_string(), |f| {
                        f.display().to_string()
                    });
                tracing::info!(
                    export = %path.display(),
                    "file handles: handle table {place} (kernel handles unusable: {why})"
                );
                // Mount ids are small numbers; 0 (none reported) makes no check.
                let mount_id = root_mnt.and_then(|m| i32::try_from(m).ok()).unwrap_or(0);
                (key_of(ROOT_ID), mount_id, Some(table))
            }
        };
        let (path_cap, rw_cap) = cache_caps();
        let fsid = match rfs::fstatvfs(&root_fd) {
            Ok(v) if v.f_fsid != 0 => v.f_fsid,
            _ => st.st_dev as u64,
        };
        let clone = probe_reflink(&root_fd);
        let xattrs = Self::probe_xattrs(&root_fd);
        Ok(LocalBackend {
            clone,
            xattrs,
            nowait_reads: std::sync::atomic::AtomicBool::new(true),
            root_key,
            root_dev: st.st_dev as u64,
            root_ino: st.st_ino as u64,
            mount_id,
            fsid,
            root_fd,
            paths: Mutex::new(FdCache::new(path_cap)),
            rw: Mutex::new(FdCache::new(rw_cap)),
            changes: Mutex::new(ChangeTable::default()),
            held: Mutex::new(HashMap::new()),
            leases: Arc::new(lease::Leases::new(path_cap)),
            table,
            dirs: Arc::default(),
        })
    }

    /// The export root's kernel handle and mount id, once `open_by_handle_at` has
    /// proved it can open them (rather than on the first client request).
    fn probe_kernel_handles(root_fd: &OwnedFd) -> std::result::Result<(FileKey, i32), String> {
        let (root_key, mount_id) = name_to_handle(root_fd.as_fd(), c"", libc::AT_EMPTY_PATH)
            .map_err(|e| format!("cannot get a file handle: {e}"))?;
        open_handle(root_fd.as_fd(), &root_key).map_err(|e| match e {
            Errno::PERM => "open_by_handle_at: EPERM, this process lacks CAP_DAC_READ_SEARCH \
                            (root has it)"
                .to_string(),
            e => format!("open_by_handle_at failed: {}", map_handle_errno(e)),
        })?;
        Ok((root_key, mount_id))
    }

    /// Where table mode keeps its table: in `state`, created if missing.
    fn table_file(state: Option<&Path>) -> Result<Option<PathBuf>> {
        let Some(dir) = state else {
            return Ok(None);
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            BackendError::Io(format!(
                "handle table: cannot create {}: {e}",
                dir.display()
            ))
        })?;
        Ok(Some(dir.join(HANDLE_TABLE_FILE)))
    }

    /// Which kind of keys this backend hands out.
    pub fn handle_mode(&self) -> HandleMode {
        if self.table.is_some() {
            HandleMode::Table
        } else {
            HandleMode::Kernel
        }
    }

    /// Objects recorded in the handle table (0 in kernel mode).
    pub fn handle_table_len(&self) -> Result<u64> {
        self.table.as_ref().map_or(Ok(0), |t| t.len())
    }
}
