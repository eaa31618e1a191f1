//! inotify behind the local backend's directory watches (ADR 0047): a directory with
//! a directory delegation is watched for entries created, removed and renamed, and
//! the changes made outside the server are handed to the server
//! ([`crate::DirWatch::take_events`]); the server's own are left out.
//!
//! Kernel facts this relies on (`inotify(7)`, `fs/notify/`):
//! * One inotify instance per backend; a watch is per inode (adding the same
//!   directory twice returns the same watch descriptor), added through the
//!   `/proc/self/fd/<n>` magic link of the directory's `O_PATH` descriptor.
//! * An event is queued before the system call that caused it returns, so once a
//!   `mkdirat` or `renameat` of the server returns, its events can be read.
//! * A rename is `IN_MOVED_FROM` then `IN_MOVED_TO` with one cookie; the kernel never
//!   puts another event of those directories between them, but a read may end
//!   between them (then the server reports a removal and an addition).
//! * With `O_ASYNC` and `F_SETOWN`, each queued event sends SIGIO to this process,
//!   the bell leases ring too (ADR 0027): the server looks at its watches then.
//! * A full queue drops events and says so (`IN_Q_OVERFLOW`): every watch reports
//!   [`DirEvent::Lost`].
//!
//! inotify does not say who made a change. Before each of its own entry changes in a
//! watched directory the backend opens an *expectation* naming the directory and the
//! names it touches; while it is open, every event on those names is held back. When
//! the change is done, the held events are compared with what the change made: equal,
//! they were the server's own and are dropped; the change failed (or made nothing),
//! they were someone else's and are reported; anything else (an outside process
//! touched the same name at the same moment) is reported as [`DirEvent::Lost`], so
//! the server recalls rather than guesses.

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use super::descriptors::proc_path;
use super::errors::map_errno;
use super::lease::{ring, sigio_handled};
use super::{lock, LocalBackend};
use crate::{BackendError, DirEvent, DirWatch, DirWatchHandle, FileKey, Result};

/// Events queued for one watch at most before it reports [`DirEvent::Lost`] alone
/// (nobody took them: the holders are recalled instead).
const MAX_QUEUED: usize = 4096;

/// The backend's directory watches.
#[derive(Default)]
pub(super) struct DirWatches {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The inotify instance, made for the first watch.
    fd: Option<OwnedFd>,
    /// Watched directories by watch descriptor.
    dirs: HashMap<i32, Watched>,
    by_key: HashMap<FileKey, i32>,
    /// The server's own entry changes under way, by id.
    expecting: HashMap<u64, Expecting>,
    next_id: u64,
}

struct Watched {
    key: FileKey,
    /// Live [`DirWatch`]es of it (the server holds one per directory).
    users: usize,
    /// Outside changes not taken yet.
    events: Vec<DirEvent>,
}

struct Expecting {
    /// (directory, name) pairs the change touches.
    names: Vec<(FileKey, Bytes)>,
    /// Events on those names seen meanwhile: (watch descriptor, event).
    held: Vec<(i32, DirEvent)>,
}

impl State {
    fn names_of(ev: &DirEvent) -> Vec<&Bytes> {
        match ev {
            DirEvent::Added(n) | DirEvent::Removed(n) => vec![n],
            DirEvent::Renamed { from, to } => vec![from, to],
            DirEvent::Lost => Vec::new(),
        }
    }

    /// Read every queued inotify event and file each: held by an expectation naming
    /// it, or queued for its watch.
    fn drain(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut read = Vec::new();
        let mut lost = false;
        {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(fd.as_fd(), &mut buf);
            // MOVED_FROM events waiting for their MOVED_TO: cookie → index in `read`.
            let mut moves: HashMap<u32, usize> = HashMap::new();
            loop {
                let ev = match reader.next() {
                    Ok(ev) => ev,
                    Err(Errno::INTR) => continue,
                    Err(Errno::AGAIN) => break,
                    Err(e) => {
                        tracing::warn!("cannot read directory watch events: {e}");
                        lost = true;
                        break;
                    }
                };
                let flags = ev.events();
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    lost = true;
                    continue;
                }
                let name = match ev.file_name() {
                    Some(n) if !n.is_empty() => Bytes::copy_from_slice(n.to_bytes()),
                    // Events of the directory itself (IN_IGNORED when it is gone):
                    // nothing can change in it any more.
                    _ => continue,
                };
                let wd = ev.wd();
                if flags.contains(ReadFlags::MOVED_TO) {
                    if let Some(i) = moves.remove(&ev.cookie()) {
                        if let (from_wd, DirEvent::Removed(from)) = &read[i] {
                            if *from_wd == wd {
                                read[i] = (
                                    wd,
                                    DirEvent::Renamed {
                                        from: from.clone(),
                                        to: name,
                                    },
                                );
                                continue;
                            }
                        }
                    }
                    read.push((wd, DirEvent::Added(name)));
                } else if flags.contains(ReadFlags::MOVED_FROM) {
                    moves.insert(ev.cookie(), read.len());
                    read.push((wd, DirEvent::Removed(name)));
                } else if flags.contains(ReadFlags::CREATE) {
                    read.push((wd, DirEvent::Added(name)));
                } else if flags.contains(ReadFlags::DELETE) {
                    read.push((wd, DirEvent::Removed(name)));
                }
            }
        }
        if lost {
            for w in self.dirs.values_mut() {
                w.events.push(DirEvent::Lost);
            }
        }
        for (wd, ev) in read {
            self.file(wd, ev);
        }
    }

    /// One event read: to the expectation that names it, else to its watch.
    fn file(&mut self, wd: i32, ev: DirEvent) {
        let Some(key) = self.dirs.get(&wd).map(|w| w.key.clone()) else {
            return;
        };
        let names = Self::names_of(&ev);
        let held_by = self
            .expecting
            .values_mut()
            .find(|x| x.names.iter().any(|(d, n)| *d == key && names.contains(&n)));
        match held_by {
            Some(x) => x.held.push((wd, ev)),
            None => self.queue(wd, ev),
        }
    }

    fn queue(&mut self, wd: i32, ev: DirEvent) {
        if let Some(w) = self.dirs.get_mut(&wd) {
            if w.events.len() >= MAX_QUEUED {
                w.events.clear();
                w.events.push(DirEvent::Lost);
            } else {
                w.events.push(ev);
            }
        }
    }

    /// Events as (watch descriptor, added or removed name), renames split: the form
    /// two descriptions of one change are compared in.
    fn flat(events: &[(i32, DirEvent)]) -> Vec<(i32, bool, Bytes)> {
        let mut out = Vec::new();
        for (wd, ev) in events {
            match ev {
                DirEvent::Added(n) => out.push((*wd, true, n.clone())),
                DirEvent::Removed(n) => out.push((*wd, false, n.clone())),
                DirEvent::Renamed { from, to } => {
                    out.push((*wd, false, from.clone()));
                    out.push((*wd, true, to.clone()));
                }
                DirEvent::Lost => out.push((*wd, false, Bytes::new())),
            }
        }
        out
    }

    /// The server's change `id` is over and made `made` ((directory, event) in
    /// order; empty when it failed or changed nothing): drop what it explains, report
    /// the rest. Returns whether anything was reported.
    fn settle(&mut self, id: u64, made: &[(FileKey, DirEvent)]) -> bool {
        self.drain();
        let Some(x) = self.expecting.remove(&id) else {
            return false;
        };
        if x.held.is_empty() {
            return false;
        }
        let made: Vec<(i32, DirEvent)> = made
            .iter()
            .filter_map(|(k, ev)| self.by_key.get(k).map(|wd| (*wd, ev.clone())))
            .collect();
        if Self::flat(&x.held) == Self::flat(&made) {
            return false;
        }
        if made.is_empty() {
            // Not the server's: another process's, in order.
            for (wd, ev) in x.held {
                self.queue(wd, ev);
            }
        } else {
            // The server's change and another process's on the same name: which
            // event is whose cannot be told.
            let mut wds: Vec<i32> = x.held.iter().map(|(wd, _)| *wd).collect();
            wds.dedup();
            for wd in wds {
                self.queue(wd, DirEvent::Lost);
            }
        }
        true
    }
}

/// One [`DirWatch`] of a directory.
struct DirWatchOf {
    table: Weak<DirWatches>,
    wd: i32,
}

impl DirWatchHandle for DirWatchOf {
    fn take_events(&self) -> Vec<DirEvent> {
        let Some(table) = self.table.upgrade() else {
            return Vec::new();
        };
        let mut st = lock(&table.state);
        st.drain();
        st.dirs
            .get_mut(&self.wd)
            .map(|w| std::mem::take(&mut w.events))
            .unwrap_or_default()
    }
}

impl Drop for DirWatchOf {
    fn drop(&mut self) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        let mut st = lock(&table.state);
        let Some(w) = st.dirs.get_mut(&self.wd) else {
            return;
        };
        w.users -= 1;
        if w.users > 0 {
            return;
        }
        let key = w.key.clone();
        st.dirs.remove(&self.wd);
        st.by_key.remove(&key);
        if let Some(fd) = &st.fd {
            // EINVAL: the kernel dropped it already (the directory is gone).
            match inotify::remove_watch(fd, self.wd) {
                Ok(()) | Err(Errno::INVAL) => {}
                Err(e) => tracing::warn!("cannot remove a directory watch: {e}"),
            }
        }
    }
}

/// The server's own change of entries in possibly watched directories, open until
/// [`Expectation::made`] (or dropped: the change failed).
pub(super) struct Expectation<'a> {
    table: &'a DirWatches,
    id: Option<u64>,
}

impl Expectation<'_> {
    /// The change is done and made `made` ((directory, event), in order).
    pub(super) fn made(mut self, made: &[(FileKey, DirEvent)]) {
        self.settle(made);
    }

    fn settle(&mut self, made: &[(FileKey, DirEvent)]) {
        let Some(id) = self.id.take() else { return };
        let reported = lock(&self.table.state).settle(id, made);
        if reported {
            // Held-back events are the server's business now.
            ring();
        }
    }
}

impl Drop for Expectation<'_> {
    fn drop(&mut self) {
        self.settle(&[]);
    }
}

impl DirWatches {
    /// Before the server changes the entries `names` ((directory, name)): hold back
    /// the events on them until the change is settled. Nothing to do while no
    /// directory is watched.
    pub(super) fn expect(&self, names: &[(&FileKey, &CStr)]) -> Expectation<'_> {
        let mut st = lock(&self.state);
        if st.dirs.is_empty() || !names.iter().any(|(d, _)| st.by_key.contains_key(*d)) {
            return Expectation {
                table: self,
                id: None,
            };
        }
        let id = st.next_id;
        st.next_id += 1;
        let names = names
            .iter()
            .map(|(d, n)| ((*d).clone(), Bytes::copy_from_slice(n.to_bytes())))
            .collect();
        st.expecting.insert(
            id,
            Expecting {
                names,
                held: Vec::new(),
            },
        );
        Expectation {
            table: self,
            id: Some(id),
        }
    }
}

impl LocalBackend {
    /// [`crate::Backend::watch_dir`] of the local backend.
    pub(super) fn watch_directory(&self, key: &FileKey) -> Result<Option<DirWatch>> {
        if !sigio_handled() {
            // Without the bell, outside changes would wait for the next tick.
            return Err(BackendError::NotSupp);
        }
        let (dfd, _) = self.dir_fd(key)?;
        let table = &self.dirs;
        let mut st = lock(&table.state);
        if let Some(&wd) = st.by_key.get(key) {
            if let Some(w) = st.dirs.get_mut(&wd) {
                w.users += 1;
                return Ok(Some(self.dir_watch(wd)));
            }
        }
        if st.fd.is_none() {
            st.fd = Some(new_instance()?);
        }
        let Some(fd) = &st.fd else {
            return Err(BackendError::Io("no inotify instance".into()));
        };
        let mask = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::ONLYDIR;
        let wd = inotify::add_watch(fd, proc_path(dfd.as_fd()), mask).map_err(|e| match e {
            Errno::NOSPC => BackendError::NoSpace,
            other => map_errno(other),
        })?;
        // Events queued before this watch are not this directory's business.
        st.drain();
        st.dirs.insert(
            wd,
            Watched {
                key: key.clone(),
                users: 1,
                events: Vec::new(),
            },
        );
        st.by_key.insert(key.clone(), wd);
        Ok(Some(self.dir_watch(wd)))
    }

    fn dir_watch(&self, wd: i32) -> DirWatch {
        DirWatch::new(Box::new(DirWatchOf {
            table: Arc::downgrade(&self.dirs),
            wd,
        }))
    }
}

/// A non-blocking inotify instance that rings SIGIO on every event.
fn new_instance() -> Result<OwnedFd> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(map_errno)?;
    // SAFETY: F_SETOWN and F_GETFL take and return plain integers for a descriptor we
    // own for the duration of the calls; the kernel keeps no memory of ours.
    let ok = unsafe {
        let raw = fd.as_raw_fd();
        libc::fcntl(raw, libc::F_SETOWN, libc::getpid()) == 0 && {
            let flags = libc::fcntl(raw, libc::F_GETFL);
            flags >= 0 && libc::fcntl(raw, libc::F_SETFL, flags | libc::O_ASYNC) == 0
        }
    };
    if !ok {
        return Err(BackendError::Io(format!(
            "cannot make directory watches signal: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(fd)
}
