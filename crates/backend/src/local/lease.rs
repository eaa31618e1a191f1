//! Kernel file leases behind the local backend's watches (ADR 0027): a read lease
//! (`F_SETLEASE F_RDLCK` on an `O_RDONLY` descriptor) for a read delegation, a write
//! lease (`F_WRLCK` on an `O_RDWR` descriptor, the only open of the file) for a write
//! delegation.
//!
//! Kernel facts this relies on (`fcntl(2)`, `fs/locks.c`):
//! * A read lease can only be taken while nobody has the file open for writing, a write
//!   lease only while the lease's own descriptor is the file's only open one (`EAGAIN`
//!   otherwise). `O_PATH` descriptors (the backend's key cache) do not count.
//! * An outside `open` that conflicts (for writing against a read lease; any open
//!   against a write lease) or a `truncate` blocks for up to
//!   `/proc/sys/fs/lease-break-time` seconds until the holder removes the lease, and the
//!   kernel signals the lease's owner (this process, set when the lease is taken) with
//!   SIGIO. With `O_NONBLOCK` the opener gets `EWOULDBLOCK` at once instead (the break
//!   still starts).
//! * While a break is pending, `F_GETLEASE` reports the target type (`F_UNLCK`, or
//!   `F_RDLCK` when a reader breaks a write lease), so a scan finds broken leases
//!   without knowing which descriptor the signal was for.
//! * SIGIO's default action ends the process: no lease is taken unless the process
//!   handles SIGIO ([`sigio_handled`]; the server installs its handler before serving).
//!
//! The server's own I/O must never break its own leases: while a lease lives, every
//! read of the file through the backend uses the lease's descriptor (and every write too
//! under a write lease). A write through the backend under a read lease (only the
//! read-delegation holder's own, others are recalled first) gives the lease up, marks
//! the watch broken and rings SIGIO, so the server recalls that delegation.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rustix::fs::OFlags;
use rustix::io::Errno;

use super::descriptors::opened_read_write;
use super::errors::map_errno;
use super::{lock, LocalBackend};
use crate::{BackendError, FileKey, Result, Watch, WatchHandle, WatchKind};

/// The leases the backend holds, by key (weak: the [`Watch`]es own them).
pub(super) struct Leases {
    map: Mutex<HashMap<FileKey, Weak<Lease>>>,
    /// At most this many (each is an open descriptor): the size of the key cache,
    /// which is fitted to the process's descriptor limit.
    cap: usize,
}

impl Leases {
    pub(super) fn new(cap: usize) -> Self {
        Leases {
            map: Mutex::new(HashMap::new()),
            cap,
        }
    }
}

/// One kernel lease, on its own open file description.
pub(super) struct Lease {
    key: FileKey,
    /// The leased descriptor, also what the backend does the file's I/O through.
    fd: Arc<OwnedFd>,
    kind: WatchKind,
    /// Given up by a write through the backend under a read lease.
    surrendered: AtomicBool,
    table: Weak<Leases>,
}

impl Lease {
    /// The descriptor the backend's I/O on this file must use while the lease lives,
    /// if any: the lease's own for reads, and for writes under a write lease.
    fn io_fd(&self, need_write: bool) -> Option<Arc<OwnedFd>> {
        if self.surrendered.load(Ordering::Acquire) {
            return None;
        }
        match (self.kind, need_write) {
            (WatchKind::Write, _) | (WatchKind::Read, false) => Some(self.fd.clone()),
            (WatchKind::Read, true) => None,
        }
    }

    /// A write through the backend under this read lease: give the lease up (so the
    /// write's own open does not wait for it) and ring, so the server recalls the
    /// delegation the lease protected.
    fn surrender(&self) {
        if self.surrendered.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = set_lease(self.fd.as_fd(), libc::F_UNLCK) {
            tracing::warn!("cannot give a file lease up: {e}");
        }
        ring();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Explicitly: the descriptor may outlive the lease in a running read or write.
        // EAGAIN is the kernel's "no lease here": given up already, or removed by the
        // kernel when a break outlasted lease-break-time.
        if !self.surrendered.load(Ordering::Acquire) {
            match set_lease(self.fd.as_fd(), libc::F_UNLCK) {
                Ok(()) | Err(Errno::AGAIN) => {}
                Err(e) => tracing::warn!("cannot release a file lease: {e}"),
            }
        }
        if let Some(table) = self.table.upgrade() {
            let mut map = lock(&table.map);
            if map.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
                map.remove(&self.key);
            }
        }
    }
}

/// A [`Watch`] kept by a lease.
struct LeaseWatch(Arc<Lease>);

impl WatchHandle for LeaseWatch {
    fn broken(&self) -> bool {
        let l = &self.0;
        if l.surrendered.load(Ordering::Acquire) {
            return true;
        }
        let want = match l.kind {
            WatchKind::Read => libc::F_RDLCK,
            WatchKind::Write => libc::F_WRLCK,
        };
        // A failed query protects nothing either: recall.
        get_lease(l.fd.as_fd()) != Ok(want)
    }
}

impl LocalBackend {
    /// [`crate::Backend::watch_file`] of the local backend.
    pub(super) fn watch(&self, key: &FileKey, kind: WatchKind) -> Result<Option<Watch>> {
        if !sigio_handled() {
            // A lease break would end the process: no lease, so no delegation.
            return Err(BackendError::NotSupp);
        }
        let pfd = self.resolve(key)?;
        let st = self.stat_live(key, &pfd)?;
        let mut map = lock(&self.leases.map);
        if let Some(l) = map.get(key).and_then(Weak::upgrade) {
            let h = LeaseWatch(l);
            // (the guard goes first: dropping the last hold of a lease locks the map)
            drop(map);
            if h.0.kind == kind && !h.broken() {
                return Ok(Some(Watch::new(kind, Box::new(h))));
            }
            return Err(BackendError::Conflict);
        }
        if map.len() >= self.leases.cap {
            map.retain(|_, w| w.strong_count() > 0);
            if map.len() >= self.leases.cap {
                // Out of descriptors to spend on leases: no delegation (WND4_RESOURCE).
                return Err(BackendError::NoSpace);
            }
        }
        // The backend's own cached read-write descriptor would make the lease fail: the
        // lease's descriptor serves the file's I/O from now on. (One still in use by a
        // running request makes it fail: no delegation this time.)
        let cached = lock(&self.rw).remove(key);
        let flags = match kind {
            WatchKind::Read => OFlags::RDONLY,
            WatchKind::Write => OFlags::RDWR,
        };
        // A write lease adopts that descriptor when it is read-write and nobody else
        // uses it (a file just created or truncated by OPEN has one): one reopen
        // through /proc and one close fewer. A read lease needs a read-only one.
        let adopted = cached
            .filter(|_| kind == WatchKind::Write)
            .and_then(|fd| Arc::try_unwrap(fd).ok())
            .filter(opened_read_write);
        let fd = match adopted {
            Some(fd) => fd,
            // Non-blocking: an outside lease on the file answers at once.
            None => self.reopen_file(&pfd, &st, flags | OFlags::NONBLOCK)?,
        };
        let arg = match kind {
            WatchKind::Read => libc::F_RDLCK,
            WatchKind::Write => libc::F_WRLCK,
        };
        set_lease(fd.as_fd(), arg).map_err(|e| match e {
            // Open for writing (or, for a write lease, open at all) elsewhere.
            Errno::AGAIN => BackendError::Conflict,
            other => map_errno(other),
        })?;
        let lease = Arc::new(Lease {
            key: key.clone(),
            fd: Arc::new(fd),
            kind,
            surrendered: AtomicBool::new(false),
            table: Arc::downgrade(&self.leases),
        });
        map.insert(key.clone(), Arc::downgrade(&lease));
        Ok(Some(Watch::new(kind, Box::new(LeaseWatch(lease)))))
    }

    /// The descriptor to do `key`'s I/O through while it is leased (see
    /// [`Lease::io_fd`]); `None` when there is no lease or the I/O must open its own.
    /// A write under a read lease gives the lease up first.
    pub(super) fn leased_fd(&self, key: &FileKey, need_write: bool) -> Option<Arc<OwnedFd>> {
        let lease = lock(&self.leases.map).get(key).and_then(Weak::upgrade)?;
        let fd = lease.io_fd(need_write);
        if fd.is_none() && need_write {
            lease.surrender();
        }
        fd
    }
}

/// `fcntl(fd, F_SETLEASE, arg)`.
fn set_lease(fd: BorrowedFd<'_>, arg: libc::c_int) -> rustix::io::Result<()> {
    // SAFETY: `fd` is a descriptor borrowed for the duration of the call, and
    // F_SETLEASE takes a plain integer argument (no pointer): the kernel reads or keeps
    // no memory of ours.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, arg) };
    if rc < 0 {
        return Err(last_errno());
    }
    Ok(())
}

/// `fcntl(fd, F_GETLEASE)`: the lease held (or, during a break, its target type).
fn get_lease(fd: BorrowedFd<'_>) -> rustix::io::Result<libc::c_int> {
    // SAFETY: `fd` is a descriptor borrowed for the duration of the call; F_GETLEASE
    // takes no argument and returns an integer.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
    if rc < 0 {
        return Err(last_errno());
    }
    Ok(rc)
}

fn last_errno() -> Errno {
    Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)
}

/// Whether this process handles SIGIO (neither the default action, which ends the
/// process, nor ignored, which would lose lease breaks). Leases are taken only then.
pub fn sigio_handled() -> bool {
    // Once seen handled, handled for good: the server installs its handler at start
    // and never takes it away (this runs for every delegation granted).
    static SEEN: AtomicBool = AtomicBool::new(false);
    if SEEN.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: all-zero bytes are a valid `sigaction` (plain integers, a signal set and
    // a handler address of 0 = SIG_DFL); it is only an output buffer here.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null `act` only queries the disposition; `old` is a live, writable
    // `sigaction` the kernel fills before returning and keeps no pointer to.
    let rc = unsafe { libc::sigaction(libc::SIGIO, std::ptr::null(), &mut old) };
    let handled = rc == 0 && old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
    if handled {
        SEEN.store(true, Ordering::Relaxed);
    }
    handled
}

/// Send SIGIO to this process, as a lease break does: the server then scans its
/// watches. Only called once a lease was taken, so SIGIO is handled.
pub(super) fn ring() {
    // SAFETY: `kill` takes two integers and touches no memory of ours; SIGIO is
    // handled (checked before any lease was taken), so it cannot end the process.
    let rc = unsafe { libc::kill(libc::getpid(), libc::SIGIO) };
    if rc != 0 {
        tracing::warn!("cannot signal a given-up lease: {}", last_errno());
    }
}

/// How long the kernel lets an outside opener wait for a lease
/// (`/proc/sys/fs/lease-break-time`), if it can be read.
pub fn lease_break_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/sys/fs/lease-break-time").ok()?;
    s.trim().parse::<u64>().ok().map(Duration::from_secs)
}
