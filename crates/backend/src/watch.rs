//! Watches: how a backend tells the server that something outside the server (a
//! process on the host writing the exported directory) is about to change a file the
//! server has delegated, so the delegation can be recalled first (ADR 0027,
//! `docs/adr/0027-local-writers-recall-delegations.md`).
//!
//! The server asks for a watch when it grants a delegation ([`crate::Backend::watch_file`])
//! and drops it when the last delegation of the file ends. While the watch lives, an
//! outside access that conflicts with it waits (the local backend's kernel lease makes
//! the opener block) and [`Watch::broken`] turns true; the server finds it when the
//! backend rings ([`crate::local::lease`]: SIGIO), recalls the delegation and drops the
//! watch, which lets the outside access proceed.
//!
//! Directories with a directory delegation are watched for entry changes instead
//! ([`crate::Backend::watch_dir`], ADR 0047): nothing waits; the backend reports what
//! changed outside the server ([`DirWatch::take_events`]) and rings the same bell.

use std::fmt;

/// What a watch protects, after the delegation it backs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// A read delegation: outside opens for writing (and truncates) must wait.
    Read,
    /// A write delegation: every outside open must wait.
    Write,
}

/// What a backend keeps for one watch; dropping it ends the watch.
pub trait WatchHandle: Send + Sync {
    /// Whether an outside access conflicts with the watch now (it waits for the watch
    /// to be dropped), or the watch no longer protects anything.
    fn broken(&self) -> bool;
}

/// A live watch of one file ([`crate::Backend::watch_file`]). Dropping it releases
/// whatever the backend holds (the local backend's kernel lease), so an outside access
/// waiting for it proceeds.
pub struct Watch {
    kind: WatchKind,
    handle: Box<dyn WatchHandle>,
}

impl Watch {
    /// A watch of `kind` kept by `handle`.
    pub fn new(kind: WatchKind, handle: Box<dyn WatchHandle>) -> Self {
        Watch { kind, handle }
    }

    /// What the watch protects.
    pub fn kind(&self) -> WatchKind {
        self.kind
    }

    /// See [`WatchHandle::broken`].
    pub fn broken(&self) -> bool {
        self.handle.broken()
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// A change to a watched directory's entries made outside the server
/// ([`crate::Backend::watch_dir`]; ADR 0047). Names are single path components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEvent {
    /// `name` appeared (created, linked, moved in).
    Added(bytes::Bytes),
    /// `name` went away (removed, moved out).
    Removed(bytes::Bytes),
    /// `from` was renamed to `to` within the directory (over `to`, if it existed).
    Renamed {
        from: bytes::Bytes,
        to: bytes::Bytes,
    },
    /// Something changed that cannot be described: events were lost, or an outside
    /// change and one of the server's own touched the same name at once. Whoever
    /// relies on the directory must forget what it knows of it.
    Lost,
}

/// What a backend keeps for one directory watch; dropping it ends the watch.
pub trait DirWatchHandle: Send + Sync {
    /// The outside changes seen since the last call, oldest first. The server's own
    /// changes through the backend are never among them.
    fn take_events(&self) -> Vec<DirEvent>;
}

/// A live watch of one directory's entries ([`crate::Backend::watch_dir`]).
pub struct DirWatch {
    handle: Box<dyn DirWatchHandle>,
}

impl DirWatch {
    /// A directory watch kept by `handle`.
    pub fn new(handle: Box<dyn DirWatchHandle>) -> Self {
        DirWatch { handle }
    }

    /// See [`DirWatchHandle::take_events`].
    pub fn take_events(&self) -> Vec<DirEvent> {
        self.handle.take_events()
    }
}

impl fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}
