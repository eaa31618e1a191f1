//! Local-directory backend: serves one directory tree of the host's file system.
//!
//! # Design (see `docs/adr/0001-file-handles.md`)
//!
//! * A [`FileKey`] is the kernel's file handle for the object (`name_to_handle_at`):
//!   restart-stable, no database, and `ESTALE` once the object is gone. Keys are turned
//!   back into file descriptors with `open_by_handle_at(root, handle, O_PATH)`, which
//!   needs `CAP_DAC_READ_SEARCH` (the server runs as root).
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
//! * `change` is the ctime in nanoseconds, bumped by an in-memory per-file counter so that
//!   two mutations within one ctime tick still differ and it never goes back during a run.
//! * Directory mutations report their directory's change before and after (not atomic:
//!   another process may change the directory in between).
//! * `clone_range` uses `FICLONERANGE` when a probe at open time showed that the file
//!   system shares blocks (XFS, Btrfs), else it copies (ext4, tmpfs).
//! * Directory cookies are the file system's `d_off` values (stable on ext4, xfs, btrfs
//!   and tmpfs since Linux 6.6). If the file system reports a `d_off` that cannot be
//!   passed back to `lseek` (0 or negative), the entry gets an ordinal cookie instead
//!   (bit 63 set, low bits = number of raw entries from the start of the directory);
//!   such cookies are only stable while no entry before them is removed.

// `struct stat` field types differ between architectures; the casts below are no-ops on
// some of them.
#![allow(clippy::unnecessary_cast, clippy::useless_conversion)]

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rustix::fs::{self as rfs, AtFlags, Dir, FileType as RFileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

use crate::memory::{check_symlink_target, verifier_times};
use crate::reflink::{copy_range, ficlonerange, probe_reflink};
use crate::{
    check_name, Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, Creds, DirChange,
    DirEntry, FileKey, FileType, FsStats, Linked, Made, NodeKind, OpCtx, RenameChange, Result,
    SetAttrs, SetTime, Timestamp, MAX_KEY_LEN,
};

/// Capacity of the `O_PATH` descriptor cache.
const PATH_CACHE_CAP: usize = 4096;
/// Capacity of the read-write descriptor cache.
const RW_CACHE_CAP: usize = 128;
/// Capacity of the change-counter table before old entries are dropped.
const CHANGE_TABLE_CAP: usize = 65536;
/// Largest read answered in one call (a shorter read is not end of file).
const MAX_READ: u32 = 16 << 20;
/// Kernel limit on `f_handle` bytes (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;
/// Flag bit of an ordinal readdir cookie.
const ORDINAL_COOKIE: u64 = 1 << 63;

// ---------------------------------------------------------------------------------------
// Errors

/// Maps an errno to the backend error the server translates to NFS4ERR_*.
pub(crate) fn map_errno(e: Errno) -> BackendError {
    match e {
        Errno::NOENT => BackendError::NotFound,
        Errno::EXIST => BackendError::Exists,
        Errno::NOTDIR => BackendError::NotDir,
        Errno::ISDIR => BackendError::IsDir,
        Errno::NOTEMPTY => BackendError::NotEmpty,
        Errno::ACCESS => BackendError::Access,
        Errno::PERM => BackendError::Perm,
        Errno::STALE => BackendError::Stale,
        Errno::NAMETOOLONG => BackendError::NameTooLong,
        Errno::INVAL => BackendError::Inval,
        Errno::NOSPC => BackendError::NoSpace,
        Errno::DQUOT => BackendError::Quota,
        Errno::ROFS => BackendError::ReadOnly,
        Errno::FBIG => BackendError::FileTooBig,
        Errno::MLINK => BackendError::MLink,
        Errno::XDEV => BackendError::XDev,
        Errno::LOOP => BackendError::SymlinkLoop,
        Errno::OPNOTSUPP => BackendError::NotSupp,
        other => BackendError::Io(other.to_string()),
    }
}

/// For directory removal and rename: EEXIST means "target directory not empty".
fn map_errno_dir(e: Errno) -> BackendError {
    match e {
        Errno::EXIST | Errno::NOTEMPTY => BackendError::NotEmpty,
        other => map_errno(other),
    }
}

pub(crate) fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            r => return r,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Kernel file handles

/// `struct file_handle` with room for the largest handle the kernel produces.
#[repr(C)]
struct HandleBuf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

impl HandleBuf {
    fn empty() -> Self {
        HandleBuf {
            handle_bytes: MAX_HANDLE_SZ as libc::c_uint,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE_SZ],
        }
    }
}

/// Encodes a kernel handle as a key: one byte for the handle type when it is below 0xff
/// (every type Linux defines is), else 0xff and the type as 4 bytes little-endian; then
/// the `f_handle` bytes.
fn encode_key(handle_type: i32, f_handle: &[u8]) -> Result<FileKey> {
    let mut out = Vec::with_capacity(5 + f_handle.len());
    match u8::try_from(handle_type) {
        Ok(t) if t != 0xff => out.push(t),
        _ => {
            out.push(0xff);
            out.extend_from_slice(&handle_type.to_le_bytes());
        }
    }
    out.extend_from_slice(f_handle);
    if out.len() > MAX_KEY_LEN {
        return Err(BackendError::Io(format!(
            "kernel file handle too large ({} bytes, limit {MAX_KEY_LEN})",
            out.len()
        )));
    }
    Ok(Bytes::from(out))
}

fn decode_key(key: &[u8]) -> Option<HandleBuf> {
    let (&first, rest) = key.split_first()?;
    let (handle_type, body) = if first == 0xff {
        let t: [u8; 4] = rest.get(..4)?.try_into().ok()?;
        (i32::from_le_bytes(t), &rest[4..])
    } else {
        (i32::from(first), rest)
    };
    if body.is_empty() || body.len() > MAX_HANDLE_SZ {
        return None;
    }
    let mut buf = HandleBuf::empty();
    buf.handle_type = handle_type;
    buf.handle_bytes = body.len() as libc::c_uint;
    buf.f_handle[..body.len()].copy_from_slice(body);
    Some(buf)
}

/// `name_to_handle_at(dirfd, name, flags)`: the key and the mount id. `name` may be empty
/// with `AT_EMPTY_PATH` in `flags` to name `dirfd` itself. Symlinks are never followed
/// (`AT_SYMLINK_FOLLOW` is never passed).
fn name_to_handle(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
) -> Result<(FileKey, i32)> {
    let mut buf = HandleBuf::empty();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `name` is a valid NUL-terminated string borrowed for the call; `buf` is a
    // live, properly aligned `#[repr(C)]` value laid out as `struct file_handle` followed
    // by MAX_HANDLE_SZ bytes, and `handle_bytes` tells the kernel exactly that capacity,
    // so it writes at most `size_of::<HandleBuf>()` bytes; `mount_id` is a live c_int.
    // `dirfd` is a borrowed open descriptor valid for the duration of the call. The
    // kernel keeps no pointer past the return.
    let rc = unsafe {
        libc::name_to_handle_at(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
            &mut mount_id,
            flags,
        )
    };
    if rc != 0 {
        let e = Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO);
        return Err(match e {
            Errno::OVERFLOW => {
                BackendError::Io("kernel file handle larger than MAX_HANDLE_SZ".into())
            }
            Errno::OPNOTSUPP => BackendError::Io(
                "file system does not support file handles (name_to_handle_at)".into(),
            ),
            other => map_errno(other),
        });
    }
    let len = (buf.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((encode_key(buf.handle_type, &buf.f_handle[..len])?, mount_id))
}

/// `open_by_handle_at(mount_fd, key, O_PATH | O_CLOEXEC)`; a key that does not decode
/// is `ESTALE`.
fn open_handle(mount_fd: BorrowedFd<'_>, key: &[u8]) -> rustix::io::Result<OwnedFd> {
    let mut buf = decode_key(key).ok_or(Errno::STALE)?;
    // ENOMEM is what ext4 reports when the inode is being freed by a concurrent unlink
    // (exportfs cannot build a dentry for it). Retry a few times; if it persists, the
    // object is going away: `map_handle_errno` answers Stale.
    //
    // The retries only yield, never sleep: a short COMPOUND runs inline on a tokio worker
    // thread (`compound::blocking`), where a sleep would stall every connection served
    // by that worker. Yielding lets the unlinking thread finish without blocking, and the
    // bound (3 yields) keeps the worst case at a few context switches.
    let mut nomem_retries = 3;
    loop {
        // SAFETY: `buf` is a live, aligned `struct file_handle` with `handle_bytes` <=
        // MAX_HANDLE_SZ valid bytes after the header (checked by `decode_key`), so the
        // kernel reads only initialized memory inside `buf`. `mount_fd` is a borrowed
        // open descriptor valid for the call.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount_fd.as_raw_fd(),
                (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just returned `fd` as a new descriptor that nothing else
            // owns; wrapping it transfers ownership exactly once.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        match Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO) {
            Errno::INTR => continue,
            Errno::NOMEM if nomem_retries > 0 => {
                nomem_retries -= 1;
                std::thread::yield_now();
            }
            e => return Err(e),
        }
    }
}

/// Error of `open_by_handle_at` as a backend error.
fn map_handle_errno(e: Errno) -> BackendError {
    match e {
        // NOMEM: see `open_handle` (an inode being freed).
        Errno::STALE | Errno::NOENT | Errno::INVAL | Errno::NOMEM => BackendError::Stale,
        Errno::PERM => BackendError::Io(
            "open_by_handle_at: EPERM: the server needs CAP_DAC_READ_SEARCH (run it as root)"
                .into(),
        ),
        other => map_errno(other),
    }
}

// ---------------------------------------------------------------------------------------
// Descriptor cache

struct FdCache {
    map: HashMap<FileKey, (Arc<OwnedFd>, u64)>,
    tick: u64,
    cap: usize,
}

impl FdCache {
    fn new(cap: usize) -> Self {
        FdCache {
            map: HashMap::new(),
            tick: 0,
            cap,
        }
    }

    fn get(&mut self, key: &FileKey) -> Option<Arc<OwnedFd>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(fd, t)| {
            *t = tick;
            fd.clone()
        })
    }

    fn insert(&mut self, key: FileKey, fd: Arc<OwnedFd>) {
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            // Drop the least recently used eighth in one go (amortized O(1) per insert).
            let mut ticks: Vec<u64> = self.map.values().map(|&(_, t)| t).collect();
            let k = (self.cap / 8).max(1).min(ticks.len() - 1);
            let (_, &mut cut, _) = ticks.select_nth_unstable(k);
            self.map.retain(|_, (_, t)| *t > cut);
        }
        self.tick += 1;
        self.map.insert(key, (fd, self.tick));
    }

    /// Drops the least recently used half.
    fn shrink_to_half(&mut self) {
        if self.map.is_empty() {
            return;
        }
        let mut ticks: Vec<u64> = self.map.values().map(|&(_, t)| t).collect();
        let k = ticks.len() / 2;
        let (_, &mut cut, _) = ticks.select_nth_unstable(k);
        self.map.retain(|_, (_, t)| *t > cut);
    }

    fn remove(&mut self, key: &FileKey) -> Option<Arc<OwnedFd>> {
        self.map.remove(key).map(|(fd, _)| fd)
    }
}

// ---------------------------------------------------------------------------------------
// Change attribute

#[derive(Clone, Copy)]
struct ChangeEntry {
    /// ctime (ns) seen when `change` was last computed
    ctime: u64,
    /// last change value handed out
    change: u64,
}

/// Per-file `change` values: ctime in ns, moved past the last value whenever the file is
/// mutated through the backend or its ctime moves, so it differs after each mutation and
/// never goes back during a run. Files never mutated through the backend have no entry
/// and report their ctime.
struct ChangeTable {
    map: HashMap<u64, ChangeEntry>,
}

impl ChangeTable {
    fn value(&mut self, fileid: u64, ctime: u64, mutated: bool) -> u64 {
        let next = match self.map.get(&fileid) {
            None if !mutated => return ctime,
            // The unrecorded ctime may have been handed out already (a directory's
            // `before`), and a coarse ctime may not have moved: go past it.
            None => ctime + 1,
            Some(e) if e.ctime == ctime && !mutated => return e.change,
            Some(e) if e.ctime == ctime => e.change + 1,
            Some(e) => ctime.max(e.change + 1),
        };
        if self.map.len() >= CHANGE_TABLE_CAP && !self.map.contains_key(&fileid) {
            self.trim();
        }
        self.map.insert(
            fileid,
            ChangeEntry {
                ctime,
                change: next,
            },
        );
        next
    }

    /// Drops entries that equal their ctime and are old enough that any later mutation
    /// gets a larger ctime anyway; entries bumped past their ctime are kept (dropping them
    /// would let the value go back).
    fn trim(&mut self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let horizon = now.saturating_sub(2_000_000_000);
        self.map
            .retain(|_, e| e.change != e.ctime || e.ctime >= horizon);
        if self.map.len() >= CHANGE_TABLE_CAP {
            self.map.retain(|_, e| e.change != e.ctime);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

fn cname(name: &[u8]) -> Result<CString> {
    check_name(name)?;
    CString::new(name).map_err(|_| BackendError::BadName)
}

fn ftype_of(st: &Stat) -> FileType {
    match RFileType::from_raw_mode(st.st_mode as _) {
        RFileType::RegularFile => FileType::Regular,
        RFileType::Directory => FileType::Directory,
        RFileType::Symlink => FileType::Symlink,
        RFileType::BlockDevice => FileType::BlockDev,
        RFileType::CharacterDevice => FileType::CharDev,
        RFileType::Fifo => FileType::Fifo,
        RFileType::Socket => FileType::Socket,
        RFileType::Unknown => FileType::Regular,
    }
}

fn ts(sec: i64, nsec: i64) -> Timestamp {
    Timestamp {
        sec,
        nsec: u32::try_from(nsec).unwrap_or(0).min(999_999_999),
    }
}

fn ctime_ns(st: &Stat) -> u64 {
    let sec = u64::try_from(st.st_ctime).unwrap_or(0);
    let nsec = u64::try_from(st.st_ctime_nsec).unwrap_or(0);
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

fn to_rts(t: Option<SetTime>) -> rfs::Timespec {
    match t {
        None => rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        Some(SetTime::ServerNow) => rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_NOW,
        },
        Some(SetTime::Client(t)) => rfs::Timespec {
            tv_sec: t.sec as _,
            tv_nsec: i64::from(t.nsec.min(999_999_999)) as _,
        },
    }
}

/// Descriptor cache capacities that fit the process's descriptor limit, after raising
/// its soft limit to the hard limit (as file servers usually do).
fn cache_caps() -> (usize, usize) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let mut soft = lim.current.unwrap_or(u64::MAX);
    if let Some(want) = lim.maximum.map(|m| m.min(1 << 20)) {
        if soft < want
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(want),
                    maximum: lim.maximum,
                },
            )
            .is_ok()
        {
            soft = want;
        }
    }
    let soft = usize::try_from(soft).unwrap_or(usize::MAX);
    // Leave half of the descriptors (and at least 256) to sockets and everything else.
    let spare = soft.saturating_sub(256) / 2;
    let rw = (spare / 16).clamp(8, RW_CACHE_CAP);
    let paths = spare.saturating_sub(rw).clamp(32, PATH_CACHE_CAP);
    (paths, rw)
}

// ---------------------------------------------------------------------------------------
// The backend

/// A [`Backend`] serving one directory tree of the local file system.
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
    /// What `clone_range` does here (probed once at open).
    clone: CloneMethod,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("root_fd", &self.root_fd)
            .field("root_dev", &self.root_dev)
            .field("root_ino", &self.root_ino)
            .field("mount_id", &self.mount_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Caches hold no invariant a panic could break half-way.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LocalBackend {
    /// Serves the directory at `path` (symlinks in `path` itself are followed: it comes
    /// from the administrator). Fails if it is not a directory, if its file system cannot
    /// produce file handles, or if this process may not open handles
    /// (`CAP_DAC_READ_SEARCH`).
    ///
    /// Raises the process's soft `RLIMIT_NOFILE` to its hard limit, and sizes the
    /// descriptor caches to the result.
    pub fn open(path: &Path) -> Result<Self> {
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
        let (root_key, mount_id) = name_to_handle(root_fd.as_fd(), c"", libc::AT_EMPTY_PATH)
            .map_err(|e| {
                BackendError::Io(format!(
                    "export {}: cannot get a file handle: {e}",
                    path.display()
                ))
            })?;
        // Prove that handles can be opened now rather than on the first client request.
        open_handle(root_fd.as_fd(), &root_key).map_err(|e| match map_handle_errno(e) {
            BackendError::Io(m) => BackendError::Io(m),
            other => BackendError::Io(format!(
                "export {}: open_by_handle_at failed: {other}",
                path.display()
            )),
        })?;
        let (path_cap, rw_cap) = cache_caps();
        let fsid = match rfs::fstatvfs(&root_fd) {
            Ok(v) if v.f_fsid != 0 => v.f_fsid,
            _ => st.st_dev as u64,
        };
        let clone = probe_reflink(&root_fd);
        Ok(LocalBackend {
            clone,
            root_key,
            root_dev: st.st_dev as u64,
            root_ino: st.st_ino as u64,
            mount_id,
            fsid,
            root_fd,
            paths: Mutex::new(FdCache::new(path_cap)),
            rw: Mutex::new(FdCache::new(rw_cap)),
            changes: Mutex::new(ChangeTable {
                map: HashMap::new(),
            }),
        })
    }

    /// An `O_PATH` descriptor for `key` (cached).
    fn resolve(&self, key: &FileKey) -> Result<Arc<OwnedFd>> {
        let cached = lock(&self.paths).get(key);
        if let Some(fd) = cached {
            return Ok(fd);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(BackendError::Stale);
        }
        let fd = self
            .fds(|| open_handle(self.root_fd.as_fd(), key))
            .map_err(map_handle_errno)?;
        let fd = Arc::new(fd);
        lock(&self.paths).insert(key.clone(), fd.clone());
        Ok(fd)
    }

    /// Drops every cached descriptor of `key`.
    fn forget(&self, key: &FileKey) {
        lock(&self.paths).remove(key);
        lock(&self.rw).remove(key);
    }

    /// Runs a descriptor-allocating call, retrying on `EINTR`, and once more after
    /// shrinking the caches when the process is out of descriptors.
    fn fds<T>(&self, mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
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
    fn enoent_in(&self, dir: &FileKey, dfd: &OwnedFd, e: BackendError) -> BackendError {
        if e == BackendError::NotFound
            && rfs::fstat(dfd).map(|st| st.st_nlink == 0).unwrap_or(false)
        {
            self.forget(dir);
            return BackendError::Stale;
        }
        e
    }

    /// fstat of a resolved key; an object without links is gone (`Stale`).
    fn stat_live(&self, key: &FileKey, fd: &OwnedFd) -> Result<Stat> {
        let st = rfs::fstat(fd).map_err(map_errno)?;
        if st.st_nlink == 0 {
            self.forget(key);
            return Err(BackendError::Stale);
        }
        Ok(st)
    }

    fn attrs(&self, st: &Stat, mutated: bool) -> Attrs {
        let fileid = st.st_ino as u64;
        let change = lock(&self.changes).value(fileid, ctime_ns(st), mutated);
        Attrs {
            ftype: ftype_of(st),
            mode: (st.st_mode as u32) & 0o7777,
            nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
            uid: st.st_uid,
            gid: st.st_gid,
            size: u64::try_from(st.st_size).unwrap_or(0),
            space_used: u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512),
            rdev: (rfs::major(st.st_rdev as _), rfs::minor(st.st_rdev as _)),
            fsid: self.fsid,
            fileid,
            atime: ts(st.st_atime as i64, st.st_atime_nsec as i64),
            mtime: ts(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: ts(st.st_ctime as i64, st.st_ctime_nsec as i64),
            change,
        }
    }

    /// Records a mutation of a directory done through the backend (moves its `change`);
    /// returns the new change value (0 if the directory cannot be stat'ed).
    fn dir_mutated(&self, dirfd: &OwnedFd) -> u64 {
        rfs::fstat(dirfd).map_or(0, |st| self.attrs(&st, true).change)
    }

    /// A directory's change value before a mutation (0 if it cannot be stat'ed).
    fn dir_before(&self, dirfd: &OwnedFd) -> u64 {
        rfs::fstat(dirfd).map_or(0, |st| self.attrs(&st, false).change)
    }

    /// The change of a directory across a mutation through the backend.
    fn dir_change(&self, dirfd: &OwnedFd, before: u64) -> DirChange {
        let after = self.dir_mutated(dirfd);
        DirChange {
            before,
            after,
            atomic: false,
        }
    }

    /// Checks that an object opened by name belongs to the export's mount, and gets its key.
    fn key_in_export(&self, fd: &OwnedFd, st: &Stat) -> Result<FileKey> {
        if st.st_dev as u64 != self.root_dev {
            return Err(BackendError::XDev);
        }
        let (key, mount_id) = name_to_handle(fd.as_fd(), c"", libc::AT_EMPTY_PATH)?;
        if mount_id != self.mount_id {
            return Err(BackendError::XDev);
        }
        Ok(key)
    }

    /// Opens `name` in `dirfd` as `O_PATH`, never following a symlink.
    fn open_child(&self, dirfd: &OwnedFd, name: &CStr) -> Result<OwnedFd> {
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
    fn reopen_file(&self, fd: &OwnedFd, st: &Stat, flags: OFlags) -> Result<OwnedFd> {
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
        .map_err(map_errno)
    }

    /// A descriptor of `key` open for I/O (read-write when possible), with its stat.
    fn io_fd(&self, key: &FileKey, need_write: bool) -> Result<(Arc<OwnedFd>, Stat)> {
        // (bound first: the guard must not live through the block, which may lock again)
        let cached = lock(&self.rw).get(key);
        if let Some(fd) = cached {
            let st = self.stat_live(key, &fd)?;
            let writable = rfs::fcntl_getfl(&*fd)
                .map(|f| f.contains(OFlags::RDWR))
                .unwrap_or(false);
            if writable || !need_write {
                return Ok((fd, st));
            }
        }
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        let fd = match self.reopen_file(&pfd, &st, OFlags::RDWR) {
            Ok(fd) => fd,
            Err(BackendError::ReadOnly | BackendError::Access | BackendError::Perm)
                if !need_write =>
            {
                self.reopen_file(&pfd, &st, OFlags::RDONLY)?
            }
            Err(e) => return Err(e),
        };
        let fd = Arc::new(fd);
        lock(&self.rw).insert(key.clone(), fd.clone());
        Ok((fd, st))
    }

    /// Drops cached descriptors of `key` if its object has no links left.
    fn forget_if_unlinked(&self, key: &FileKey) {
        let in_paths = lock(&self.paths).get(key);
        let cached = in_paths.or_else(|| lock(&self.rw).get(key));
        if let Some(fd) = cached {
            match rfs::fstat(&*fd) {
                Ok(st) if st.st_nlink > 0 => {}
                _ => self.forget(key),
            }
        }
    }

    /// Applies ownership, mode and times to a new or existing object. Order matters:
    /// chown clears set-ID bits, so mode comes after it.
    fn apply_attrs(&self, fd: &OwnedFd, st: &Stat, sa: &SetAttrs, times: bool) -> Result<()> {
        let is_link = ftype_of(st) == FileType::Symlink;
        if sa.uid.is_some() || sa.gid.is_some() {
            rfs::chownat(
                fd,
                c"",
                sa.uid.map(rfs::Uid::from_raw),
                sa.gid.map(rfs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(map_errno)?;
        }
        if let (Some(mode), false) = (sa.mode, is_link) {
            rfs::chmodat(
                CWD,
                proc_path(fd.as_fd()).as_str(),
                Mode::from_raw_mode((mode & 0o7777) as _),
                AtFlags::empty(),
            )
            .map_err(map_errno)?;
        }
        if times && (sa.atime.is_some() || sa.mtime.is_some()) {
            let t = rfs::Timestamps {
                last_access: to_rts(sa.atime),
                last_modification: to_rts(sa.mtime),
            };
            // The magic link resolves to the inode itself (for a symlink: the link, not
            // its target).
            rfs::utimensat(CWD, proc_path(fd.as_fd()).as_str(), &t, AtFlags::empty())
                .map_err(map_errno)?;
        }
        Ok(())
    }

    /// Ownership of a new object: the creator's, with the group of a set-group-ID parent.
    fn new_owner(owner: &Creds, sa: &SetAttrs, parent: &Stat) -> (u32, u32) {
        let setgid_dir = parent.st_mode as u32 & 0o2000 != 0;
        let gid = sa
            .gid
            .unwrap_or(if setgid_dir { parent.st_gid } else { owner.gid });
        (sa.uid.unwrap_or(owner.uid), gid)
    }

    /// Finishes a newly made object: owner, mode, optional times. Returns its stat.
    fn init_new(
        &self,
        fd: &OwnedFd,
        parent: &Stat,
        owner: &Creds,
        sa: &SetAttrs,
        default_mode: u32,
        times: bool,
    ) -> Result<Stat> {
        let st = rfs::fstat(fd).map_err(map_errno)?;
        let (uid, gid) = Self::new_owner(owner, sa, parent);
        let mut mode = sa.mode.unwrap_or(default_mode) & 0o7777;
        if ftype_of(&st) == FileType::Directory && parent.st_mode as u32 & 0o2000 != 0 {
            mode |= 0o2000;
        }
        let init = SetAttrs {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            size: None,
            atime: sa.atime,
            mtime: sa.mtime,
        };
        self.apply_attrs(fd, &st, &init, times)?;
        rfs::fstat(fd).map_err(map_errno)
    }

    /// Stat of a directory key, checking that it is a live directory.
    fn dir_fd(&self, key: &FileKey) -> Result<(Arc<OwnedFd>, Stat)> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if ftype_of(&st) != FileType::Directory {
            return Err(BackendError::NotDir);
        }
        Ok((fd, st))
    }

    fn create_inner(
        &self,
        dfd: &OwnedFd,
        dst: &Stat,
        name: &CStr,
        mode: CreateMode,
        attrs: &SetAttrs,
        owner: &Creds,
    ) -> Result<(FileKey, Attrs, bool)> {
        // A few rounds in case the name is removed or created concurrently.
        for _ in 0..8 {
            let created = self.fds(|| {
                rfs::openat(
                    dfd,
                    name,
                    OFlags::RDWR
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC
                        | OFlags::NOCTTY,
                    Mode::from_raw_mode(0o600),
                )
            });
            match created {
                Ok(fd) => return self.finish_created(dfd, dst, name, fd, mode, attrs, owner),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(map_errno(e)),
            }
            let pfd = match self.open_child(dfd, name) {
                Ok(fd) => fd,
                Err(BackendError::NotFound) => continue,
                Err(e) => return Err(e),
            };
            let st = rfs::fstat(&pfd).map_err(map_errno)?;
            match ftype_of(&st) {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                FileType::Symlink if mode == CreateMode::Unchecked => {
                    return Err(BackendError::SymlinkLoop)
                }
                _ => return Err(BackendError::Exists),
            }
            let key = self.key_in_export(&pfd, &st)?;
            match mode {
                CreateMode::Guarded => return Err(BackendError::Exists),
                CreateMode::Exclusive(verf) => {
                    let (a, m) = verifier_times(&verf);
                    if st.st_atime as i64 == a && st.st_mtime as i64 == m {
                        return Ok((key, self.attrs(&st, false), false));
                    }
                    return Err(BackendError::Exists);
                }
                CreateMode::Unchecked => {
                    let pfd = Arc::new(pfd);
                    lock(&self.paths).insert(key.clone(), pfd.clone());
                    let st = match attrs.size {
                        Some(size) => {
                            let (fd, _) = self.io_fd(&key, true)?;
                            rfs::ftruncate(&*fd, size).map_err(map_errno)?;
                            rfs::fstat(&*fd).map_err(map_errno)?
                        }
                        None => st,
                    };
                    let a = self.attrs(&st, attrs.size.is_some());
                    return Ok((key, a, false));
                }
            }
        }
        Err(BackendError::Io("create: name keeps changing".into()))
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_created(
        &self,
        dfd: &OwnedFd,
        dst: &Stat,
        name: &CStr,
        fd: OwnedFd,
        mode: CreateMode,
        attrs: &SetAttrs,
        owner: &Creds,
    ) -> Result<(FileKey, Attrs, bool)> {
        let result = (|| {
            let exclusive = matches!(mode, CreateMode::Exclusive(_));
            // Size first: truncating sets mtime, which explicit times then override.
            if let Some(size) = attrs.size {
                rfs::ftruncate(&fd, size).map_err(map_errno)?;
            }
            let st = self.init_new(&fd, dst, owner, attrs, 0o644, !exclusive)?;
            if let CreateMode::Exclusive(verf) = mode {
                let (a, m) = verifier_times(&verf);
                let t = rfs::Timestamps {
                    last_access: rfs::Timespec {
                        tv_sec: a as _,
                        tv_nsec: 0,
                    },
                    last_modification: rfs::Timespec {
                        tv_sec: m as _,
                        tv_nsec: 0,
                    },
                };
                rfs::futimens(&fd, &t).map_err(map_errno)?;
            }
            let st = if exclusive {
                rfs::fstat(&fd).map_err(map_errno)?
            } else {
                st
            };
            let key = self.key_in_export(&fd, &st)?;
            Ok((key, st))
        })();
        match result {
            Ok((key, st)) => {
                let fd = Arc::new(fd);
                lock(&self.rw).insert(key.clone(), fd.clone());
                lock(&self.paths).insert(key.clone(), fd);
                let _ = self.dir_mutated(dfd);
                Ok((key, self.attrs(&st, true), true))
            }
            Err(e) => {
                let _ = rfs::unlinkat(dfd, name, AtFlags::empty());
                Err(e)
            }
        }
    }

    /// Reads directory entries starting after `cookie`.
    fn readdir_inner(
        &self,
        dfd: &OwnedFd,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let open_dir = || -> Result<Dir> {
            let fd = self
                .fds(|| {
                    rfs::openat(
                        dfd,
                        c".",
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                })
                .map_err(map_errno)?;
            Dir::new(fd).map_err(map_errno)
        };
        let mut dir = open_dir()?;
        // Entries are stat'ed and named through the directory's O_PATH descriptor.
        let dirfd = dfd;
        // Number of raw entries (including "." and "..") before the current position,
        // when known.
        let mut ordinal: Option<u64> = None;
        if cookie == 0 {
            ordinal = Some(0);
        } else if cookie & ORDINAL_COOKIE != 0 {
            let skip = cookie & !ORDINAL_COOKIE;
            for _ in 0..skip {
                match dir.read() {
                    None => return Ok((Vec::new(), true)),
                    Some(r) => {
                        r.map_err(map_errno)?;
                    }
                }
            }
            ordinal = Some(skip);
        } else {
            let off = i64::try_from(cookie).map_err(|_| BackendError::Inval)?;
            dir.seek(off).map_err(map_errno)?;
        }

        let mut out = Vec::new();
        let mut eof = true;
        let mut last_off = i64::try_from(cookie & !ORDINAL_COOKIE).unwrap_or(0);
        while let Some(ent) = dir.read() {
            let ent = ent.map_err(map_errno)?;
            if let Some(o) = ordinal.as_mut() {
                *o += 1;
            }
            let name = ent.file_name();
            let off = ent.offset();
            let prev_off = last_off;
            last_off = off;
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            if out.len() >= max_entries {
                eof = false;
                break;
            }
            let entry_cookie = if off > 0 {
                off as u64
            } else {
                if ordinal.is_none() {
                    ordinal = Some(self.ordinal_after(open_dir, prev_off, ent.ino(), name)?);
                }
                ordinal.unwrap_or(0) | ORDINAL_COOKIE
            };
            let Ok(st) = rfs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if st.st_dev as u64 != self.root_dev {
                continue;
            }
            let Ok((key, mount_id)) = name_to_handle(dirfd.as_fd(), name, 0) else {
                continue;
            };
            if mount_id != self.mount_id {
                continue;
            }
            out.push(DirEntry {
                name: Bytes::copy_from_slice(bytes),
                cookie: entry_cookie,
                key,
                attrs: self.attrs(&st, false),
            });
        }
        Ok((out, eof))
    }

    /// Counts raw entries from the start of the directory up to and including the entry
    /// (`ino`, `name`) that follows position `prev_off` (used when a file system hands out
    /// unusable `d_off` values).
    fn ordinal_after(
        &self,
        open_dir: impl Fn() -> Result<Dir>,
        prev_off: i64,
        ino: u64,
        name: &CStr,
    ) -> Result<u64> {
        let mut dir = open_dir()?;
        let mut n = 0u64;
        let mut seen_prev = prev_off == 0;
        while let Some(ent) = dir.read() {
            let ent = ent.map_err(map_errno)?;
            n += 1;
            if seen_prev && ent.ino() == ino && ent.file_name() == name {
                return Ok(n);
            }
            if ent.offset() == prev_off {
                seen_prev = true;
            }
        }
        Err(BackendError::Io(
            "readdir: cannot place an entry with an unusable d_off".into(),
        ))
    }
}

impl Backend for LocalBackend {
    fn root(&self) -> Result<FileKey> {
        Ok(self.root_key.clone())
    }

    fn getattr(&self, key: &FileKey) -> Result<Attrs> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        Ok(self.attrs(&st, false))
    }

    fn lookup(&self, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)> {
        let name = cname(name)?;
        let dfd = self.resolve(dir)?;
        let fd = self
            .open_child(&dfd, &name)
            .map_err(|e| self.enoent_in(dir, &dfd, e))?;
        let st = rfs::fstat(&fd).map_err(map_errno)?;
        let key = self.key_in_export(&fd, &st)?;
        lock(&self.paths).insert(key.clone(), Arc::new(fd));
        Ok((key, self.attrs(&st, false)))
    }

    fn lookup_parent(&self, dir: &FileKey) -> Result<(FileKey, Attrs)> {
        let (dfd, st) = self.dir_fd(dir)?;
        if st.st_dev as u64 == self.root_dev && st.st_ino as u64 == self.root_ino {
            return Err(BackendError::NotFound);
        }
        let fd = self
            .fds(|| {
                rfs::openat(
                    &*dfd,
                    c"..",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            })
            .map_err(map_errno)?;
        let pst = rfs::fstat(&fd).map_err(map_errno)?;
        let key = self.key_in_export(&fd, &pst)?;
        lock(&self.paths).insert(key.clone(), Arc::new(fd));
        Ok((key, self.attrs(&pst, false)))
    }

    fn setattr(&self, _cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if attrs.is_empty() {
            return Ok(self.attrs(&st, false));
        }
        if attrs.size.is_some() {
            match ftype_of(&st) {
                FileType::Regular => {}
                FileType::Directory => return Err(BackendError::IsDir),
                _ => return Err(BackendError::Inval),
            }
        }
        let owner_mode = SetAttrs {
            size: None,
            atime: None,
            mtime: None,
            ..attrs.clone()
        };
        self.apply_attrs(&fd, &st, &owner_mode, false)?;
        if let Some(size) = attrs.size {
            let (wfd, _) = self.io_fd(key, true)?;
            retry(|| rfs::ftruncate(&*wfd, size)).map_err(map_errno)?;
        }
        if attrs.atime.is_some() || attrs.mtime.is_some() {
            let times = SetAttrs {
                atime: attrs.atime,
                mtime: attrs.mtime,
                ..SetAttrs::default()
            };
            self.apply_attrs(&fd, &st, &times, true)?;
        }
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(self.attrs(&st, true))
    }

    fn read(&self, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let (fd, st) = self.io_fd(key, false)?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if offset >= size {
            return Ok((Bytes::new(), true));
        }
        let want = u64::from(count.min(MAX_READ)).min(size - offset);
        // want <= MAX_READ (16 MiB), fits in usize.
        let want = want as usize;
        let mut buf = vec![0u8; want];
        let mut got = 0usize;
        while got < buf.len() {
            let pos = offset + got as u64;
            match retry(|| rustix::io::pread(&*fd, &mut buf[got..], pos)) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => return Err(map_errno(e)),
            }
        }
        buf.truncate(got);
        // A short read means the file shrank meanwhile: that is end of file too.
        let eof = got < want || offset + got as u64 >= size;
        Ok((Bytes::from(buf), eof))
    }

    fn write(
        &self,
        _cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= i64::MAX as u64)
            .ok_or(BackendError::FileTooBig)?;
        let (fd, _) = self.io_fd(key, true)?;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            match retry(|| rustix::io::pwrite(&*fd, &data[done..], pos)) {
                Ok(0) => return Err(BackendError::NoSpace),
                Ok(n) => done += n,
                Err(e) => return Err(map_errno(e)),
            }
        }
        if sync {
            retry(|| rfs::fdatasync(&*fd)).map_err(map_errno)?;
        }
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(self.attrs(&st, true))
    }

    fn commit(&self, _cx: &OpCtx, key: &FileKey) -> Result<()> {
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        match ftype_of(&st) {
            FileType::Regular => {
                let (fd, _) = self.io_fd(key, false)?;
                retry(|| rfs::fsync(&*fd)).map_err(map_errno)
            }
            FileType::Directory => {
                let fd = self
                    .fds(|| {
                        rfs::openat(
                            &*pfd,
                            c".",
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                            Mode::empty(),
                        )
                    })
                    .map_err(map_errno)?;
                retry(|| rfs::fsync(&fd)).map_err(map_errno)
            }
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
        let name = cname(name)?;
        let (dfd, dst) = self.dir_fd(dir)?;
        let before = self.attrs(&dst, false).change;
        let (key, attrs, created) = self.create_inner(&dfd, &dst, &name, mode, attrs, &cx.creds)?;
        let dir = if created {
            // `finish_created` recorded the mutation: read the value it left.
            DirChange {
                before,
                after: self.dir_before(&dfd),
                atomic: false,
            }
        } else {
            DirChange {
                before,
                after: before,
                atomic: false,
            }
        };
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
        let owner = &cx.creds;
        let name = cname(name)?;
        if attrs.size.is_some() {
            return Err(BackendError::Inval);
        }
        let (dfd, dst) = self.dir_fd(dir)?;
        let before = self.attrs(&dst, false).change;
        let private = Mode::from_raw_mode(0o600);
        let (made, default_mode) = match kind {
            NodeKind::Directory => (
                rfs::mkdirat(&*dfd, &*name, Mode::from_raw_mode(0o700)),
                0o755,
            ),
            NodeKind::Symlink(target) => {
                check_symlink_target(target)?;
                let target = CString::new(target.as_ref()).map_err(|_| BackendError::Inval)?;
                (rfs::symlinkat(&*target, &*dfd, &*name), 0o777)
            }
            NodeKind::Fifo => (
                rfs::mknodat(&*dfd, &*name, RFileType::Fifo, private, 0),
                0o644,
            ),
            NodeKind::Socket => (
                rfs::mknodat(&*dfd, &*name, RFileType::Socket, private, 0),
                0o644,
            ),
            NodeKind::BlockDev(ma, mi) => (
                rfs::mknodat(
                    &*dfd,
                    &*name,
                    RFileType::BlockDevice,
                    private,
                    rfs::makedev(*ma, *mi),
                ),
                0o644,
            ),
            NodeKind::CharDev(ma, mi) => (
                rfs::mknodat(
                    &*dfd,
                    &*name,
                    RFileType::CharacterDevice,
                    private,
                    rfs::makedev(*ma, *mi),
                ),
                0o644,
            ),
        };
        made.map_err(map_errno)?;
        let is_dir = matches!(kind, NodeKind::Directory);
        let result = (|| {
            let fd = self.open_child(&dfd, &name)?;
            let st = self.init_new(&fd, &dst, owner, attrs, default_mode, true)?;
            let key = self.key_in_export(&fd, &st)?;
            Ok((fd, st, key))
        })();
        match result {
            Ok((fd, st, key)) => {
                lock(&self.paths).insert(key.clone(), Arc::new(fd));
                let dir = self.dir_change(&dfd, before);
                Ok(Made {
                    key,
                    attrs: self.attrs(&st, true),
                    dir,
                })
            }
            Err(e) => {
                let flags = if is_dir {
                    AtFlags::REMOVEDIR
                } else {
                    AtFlags::empty()
                };
                let _ = rfs::unlinkat(&*dfd, &*name, flags);
                Err(e)
            }
        }
    }

    fn remove(&self, _cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> {
        let name = cname(name)?;
        let dfd = self.resolve(dir)?;
        let before = self.dir_before(&dfd);
        let victim = name_to_handle(dfd.as_fd(), &name, 0).ok().map(|(k, _)| k);
        match retry(|| rfs::unlinkat(&*dfd, &*name, AtFlags::empty())) {
            Ok(()) => {}
            Err(Errno::ISDIR) => retry(|| rfs::unlinkat(&*dfd, &*name, AtFlags::REMOVEDIR))
                .map_err(|e| self.enoent_in(dir, &dfd, map_errno_dir(e)))?,
            Err(e) => return Err(self.enoent_in(dir, &dfd, map_errno(e))),
        }
        if let Some(k) = victim {
            self.forget_if_unlinked(&k);
        }
        Ok(self.dir_change(&dfd, before))
    }

    fn rename(
        &self,
        _cx: &OpCtx,
        from_dir: &FileKey,
        from: &[u8],
        to_dir: &FileKey,
        to: &[u8],
    ) -> Result<RenameChange> {
        let from = cname(from)?;
        let to = cname(to)?;
        let ffd = self.resolve(from_dir)?;
        let tfd = self.resolve(to_dir)?;
        let (from_before, to_before) = (self.dir_before(&ffd), self.dir_before(&tfd));
        let victim = name_to_handle(tfd.as_fd(), &to, 0).ok().map(|(k, _)| k);
        let moved = name_to_handle(ffd.as_fd(), &from, 0).ok().map(|(k, _)| k);
        retry(|| rfs::renameat(&*ffd, &*from, &*tfd, &*to)).map_err(|e| {
            let e = self.enoent_in(from_dir, &ffd, map_errno_dir(e));
            self.enoent_in(to_dir, &tfd, e)
        })?;
        if let Some(k) = victim {
            if Some(&k) != moved.as_ref() {
                self.forget_if_unlinked(&k);
            }
        }
        let from_change = self.dir_change(&ffd, from_before);
        let to_change = if from_dir == to_dir {
            // One directory, one mutation: both sides report the same values.
            from_change
        } else {
            self.dir_change(&tfd, to_before)
        };
        if let Some(k) = moved {
            if let Ok(fd) = self.resolve(&k) {
                if let Ok(st) = rfs::fstat(&*fd) {
                    let _ = self.attrs(&st, true);
                }
            }
        }
        Ok(RenameChange {
            from: from_change,
            to: to_change,
        })
    }

    fn link(&self, _cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked> {
        let name = cname(name)?;
        let fd = self.resolve(file)?;
        let st = self.stat_live(file, &fd)?;
        if ftype_of(&st) == FileType::Directory {
            return Err(BackendError::IsDir);
        }
        let dfd = self.resolve(dir)?;
        let before = self.dir_before(&dfd);
        retry(|| rfs::linkat(&*fd, c"", &*dfd, &*name, AtFlags::EMPTY_PATH)).map_err(|e| {
            let e = self.enoent_in(file, &fd, map_errno(e));
            self.enoent_in(dir, &dfd, e)
        })?;
        let dir = self.dir_change(&dfd, before);
        let st = rfs::fstat(&*fd).map_err(map_errno)?;
        Ok(Linked {
            attrs: self.attrs(&st, true),
            dir,
        })
    }

    fn readlink(&self, key: &FileKey) -> Result<Bytes> {
        let fd = self.resolve(key)?;
        let st = self.stat_live(key, &fd)?;
        if ftype_of(&st) != FileType::Symlink {
            return Err(BackendError::NotSymlink);
        }
        let target = rfs::readlinkat(&*fd, c"", Vec::new()).map_err(map_errno)?;
        Ok(Bytes::from(target.into_bytes()))
    }

    fn readdir(
        &self,
        dir: &FileKey,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let (dfd, _) = self.dir_fd(dir)?;
        self.readdir_inner(&dfd, cookie, max_entries)
    }

    fn statfs(&self, key: &FileKey) -> Result<FsStats> {
        let fd = self.resolve(key)?;
        let s = rfs::fstatvfs(&*fd).map_err(map_errno)?;
        let frsize = s.f_frsize;
        Ok(FsStats {
            total_bytes: s.f_blocks.saturating_mul(frsize),
            free_bytes: s.f_bfree.saturating_mul(frsize),
            avail_bytes: s.f_bavail.saturating_mul(frsize),
            total_files: s.f_files,
            free_files: s.f_ffree,
            avail_files: s.f_favail,
            max_name_len: u32::try_from(s.f_namemax).unwrap_or(u32::MAX),
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
        let (sfd, sst) = self.io_fd(src, false)?;
        let (dfd, _) = self.io_fd(dst, true)?;
        let size = u64::try_from(sst.st_size).unwrap_or(0);
        let len = if len == 0 {
            size.checked_sub(src_off).ok_or(BackendError::Inval)?
        } else {
            len
        };
        let src_end = src_off.checked_add(len).ok_or(BackendError::Inval)?;
        let dst_end = dst_off.checked_add(len).ok_or(BackendError::FileTooBig)?;
        if src_end > size || dst_end > i64::MAX as u64 {
            return Err(BackendError::Inval);
        }
        if src == dst && src_off < dst_end && dst_off < src_end {
            return Err(BackendError::Inval);
        }
        let method = if self.clone == CloneMethod::Reflink
            && ficlonerange(&sfd, src_off, &dfd, dst_off, len).is_ok()
        {
            CloneMethod::Reflink
        } else {
            // Unaligned ranges (EINVAL), another file system, or no reflink support.
            copy_range(&sfd, src_off, &dfd, dst_off, len)?;
            CloneMethod::Copy
        };
        let st = rfs::fstat(&*dfd).map_err(map_errno)?;
        let _ = self.attrs(&st, true);
        Ok(method)
    }

    fn clone_method(&self) -> CloneMethod {
        self.clone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encoding_round_trips() {
        for (t, body) in [(1, vec![7u8; 8]), (0x81, vec![1; 20]), (0xff, vec![2; 4])] {
            let key = encode_key(t, &body).unwrap();
            let buf = decode_key(&key).unwrap();
            assert_eq!(buf.handle_type, t);
            assert_eq!(&buf.f_handle[..buf.handle_bytes as usize], &body[..]);
        }
        assert_eq!(encode_key(1, &[0; 8]).unwrap().len(), 9);
        assert_eq!(encode_key(-5, &[0; 8]).unwrap().len(), 13);
        assert!(encode_key(1, &[0; MAX_KEY_LEN]).is_err());
        assert!(decode_key(b"").is_none());
        assert!(decode_key(b"\x01").is_none());
        assert!(decode_key(b"\xff\x01\x00").is_none());
    }

    #[test]
    fn change_values_move_and_hold() {
        let mut t = ChangeTable {
            map: HashMap::new(),
        };
        assert_eq!(t.value(1, 100, false), 100);
        // a mutation within the same ctime tick still moves past what was handed out
        assert_eq!(t.value(1, 100, true), 101);
        assert_eq!(t.value(1, 100, true), 102);
        assert_eq!(t.value(1, 100, false), 102);
        assert_eq!(t.value(1, 100, true), 103);
        // ctime moved but not past the counter: still forward
        assert_eq!(t.value(1, 101, false), 104);
        assert_eq!(t.value(1, 500, false), 500);
        // ctime set back (e.g. restored file): never backwards
        assert_eq!(t.value(1, 50, false), 501);
        assert_eq!(t.value(2, 7, false), 7);
    }

    #[test]
    fn fd_cache_evicts_least_recent() {
        let mut c = FdCache::new(16);
        let fd = |_: u32| Arc::new(rfs::open("/", OFlags::PATH, Mode::empty()).unwrap());
        for i in 0..16u32 {
            c.insert(Bytes::from(i.to_be_bytes().to_vec()), fd(i));
        }
        // touch key 0 so it survives
        assert!(c.get(&Bytes::from(0u32.to_be_bytes().to_vec())).is_some());
        c.insert(Bytes::from(99u32.to_be_bytes().to_vec()), fd(99));
        assert!(c.map.len() <= 16);
        assert!(c.get(&Bytes::from(0u32.to_be_bytes().to_vec())).is_some());
        assert!(c.get(&Bytes::from(1u32.to_be_bytes().to_vec())).is_none());
        assert!(c.get(&Bytes::from(99u32.to_be_bytes().to_vec())).is_some());
        c.shrink_to_half();
        assert!(c.map.len() <= 8);
    }
}
