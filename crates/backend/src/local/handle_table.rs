//! The persistent handle table of the local backend's table mode (ADR 0050): object ids
//! for a server that may not open kernel file handles (no `CAP_DAC_READ_SEARCH`).
//!
//! One redb database per export (`handles.redb` in the export's layer state directory),
//! three tables:
//! * `objects`: id → (device, inode, birth time, parent id, name). The name is of one
//!   link, the last one the server created, renamed to or was told of by a lookup; an
//!   object with several hard links has one id and one recorded link.
//! * `inodes`: (device, inode) → id, to give an object seen again its id.
//! * `meta`: `next` → the next id to hand out.
//!
//! Id 1 is the export root. The birth time (statx `STATX_BTIME`, in nanoseconds; 0
//! where the file system has none) tells a reused inode number from the object that
//! had it. A key is [`KEY_TAG`] then the id big-endian: no kernel handle starts so.
//!
//! Every change is committed without a sync (redb's `Durability::None`; its
//! `Eventual` is an `fdatasync` on Linux) and written, also without a sync, to the
//! redo log beside the table (`handle_log.rs`) before the COMPOUND's reply can carry
//! a new id: a killed server replays the log when it opens the table again, as the
//! files it created are still in the page cache. A durable commit (one sync) empties
//! the log: when a COMMIT or a stable WRITE makes data durable
//! ([`HandleTable::make_durable`], so every handle of durable data survives a power
//! loss), once [`SYNC_EVERY`] unsynced commits have piled up (redb frees pages only at
//! a durable commit), at start and at close.
//!
//! A power loss may lose the log's tail, and with it ids a client was given for files
//! not yet made durable: those handles answer `Stale`. So that a lost id is never
//! given to another object, a table opened after an unclean stop (its `meta.open`
//! still 1) moves `next` on by [`ID_GAP`], more than can be handed out between two
//! durable commits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};
use txnfs_wal::{Dec, Enc};

use super::handle_log::{Change, RedoLog};
use crate::{BackendError, FileKey, Result};

const OBJECTS: TableDefinition<u64, &[u8]> = TableDefinition::new("objects");
const INODES: TableDefinition<(u64, u64), u64> = TableDefinition::new("inodes");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The id of the export root.
pub(super) const ROOT_ID: u64 = 1;

/// First bytes of a table-mode key (`0xfe 'T'`): Linux defines no handle type 0xfe.
const KEY_TAG: [u8; 2] = [0xfe, b'T'];

/// The key of object `id`.
pub(super) fn key_of(id: u64) -> FileKey {
    let mut k = Vec::with_capacity(10);
    k.extend_from_slice(&KEY_TAG);
    k.extend_from_slice(&id.to_be_bytes());
    Bytes::from(k)
}

/// The id a key names, if it is a table-mode key.
pub(super) fn id_of_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(&KEY_TAG)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Which object on disk an id stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Identity {
    pub dev: u64,
    pub ino: u64,
    /// Birth time in nanoseconds, 0 when unknown.
    pub birth: u64,
}

impl Identity {
    /// Whether `seen` is this object: the same inode, and not a reuse of its number
    /// (birth times differ only when both are known).
    pub(super) fn same_object(&self, seen: &Identity) -> bool {
        self.dev == seen.dev
            && self.ino == seen.ino
            && (self.birth == 0 || seen.birth == 0 || self.birth == seen.birth)
    }
}

/// A row of `objects`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Object {
    pub identity: Identity,
    pub parent: u64,
    pub name: Bytes,
}

impl Object {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.identity.dev)
            .u64(self.identity.ino)
            .u64(self.identity.birth)
            .u64(self.parent)
            .bytes(&self.name);
        e.into_vec()
    }

    pub(super) fn decode(raw: &[u8]) -> Result<Object> {
        let mut d = Dec::copy_from(raw);
        let bad = |e: txnfs_wal::DecodeError| BackendError::Io(format!("handle table: {e}"));
        Ok(Object {
            identity: Identity {
                dev: d.u64().map_err(bad)?,
                ino: d.u64().map_err(bad)?,
                birth: d.u64().map_err(bad)?,
            },
            parent: d.u64().map_err(bad)?,
            name: d.bytes().map_err(bad)?,
        })
    }
}

/// An object seen in directory `parent` under `name`.
#[derive(Debug, Clone)]
pub(super) struct Sighting<'a> {
    pub identity: Identity,
    pub parent: u64,
    pub name: &'a [u8],
}

/// Tables open in this process, by file: a second backend on the same export (a reload
/// that opens it again while the old one still serves) shares the first one's
/// database, which redb refuses to open twice.
static OPEN_TABLES: Mutex<Vec<(PathBuf, Weak<HandleTable>)>> = Mutex::new(Vec::new());

/// [`HandleTable::open`], sharing a table this process already has open at `path`.
pub(super) fn open_shared(path: Option<&Path>, root: Identity) -> Result<Arc<HandleTable>> {
    let Some(path) = path else {
        return Ok(Arc::new(HandleTable::open(None, root)?));
    };
    // The list holds no invariant a panic could break half-way.
    let mut open = OPEN_TABLES.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, t)| t.strong_count() > 0);
    if let Some(t) = open
        .iter()
        .find(|(p, _)| p == path)
        .and_then(|(_, t)| t.upgrade())
    {
        return Ok(t);
    }
    let table = Arc::new(HandleTable::open(Some(path), root)?);
    open.push((path.to_path_buf(), Arc::downgrade(&table)));
    Ok(table)
}

fn db_err(e: impl std::fmt::Display) -> BackendError {
    BackendError::Io(format!("handle table: {e}"))
}

/// The table of one export.
pub(super) struct HandleTable {
    db: Database,
    /// Held across every write transaction and its log record, and across a durable
    /// commit and the log's reset, so no record is emptied away before its commit is
    /// durable.
    writes: Mutex<Writes>,
    /// Unsynced commits since the last durable one (a copy of `Writes::written` that
    /// the end of every COMPOUND reads without taking the lock).
    unsynced: AtomicU64,
    /// Tests: the process "dies" at the drop (no closing sync).
    #[cfg(test)]
    crashed: std::sync::atomic::AtomicBool,
}

/// What the writers share.
#[derive(Debug)]
struct Writes {
    /// The redo log (`None` for a table kept in memory).
    log: Option<RedoLog>,
    /// Unsynced commits that assigned ids, and of any kind, since the last durable one.
    assigned: u64,
    written: u64,
}

/// Unsynced commits after which the end of a COMPOUND syncs: redb reuses the pages
/// of older versions only after a durable commit, and the log stays short.
const SYNC_EVERY: u64 = 1024;

/// How far `next` moves on after an unclean stop: far more ids than [`SYNC_EVERY`]
/// commits can assign (a READDIR's at most, each), and 2^32 unclean stops before
/// the ids run out.
const ID_GAP: u64 = 1 << 32;

impl std::fmt::Debug for HandleTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleTable")
    }
}

impl HandleTable {
    /// Opens (or creates) the table at `path`; `None` keeps it in memory (ids then do
    /// not survive the process). Records the export root as id 1: a root with another
    /// identity (the directory was replaced) takes the id over.
    pub(super) fn open(path: Option<&Path>, root: Identity) -> Result<HandleTable> {
        let db = match path {
            Some(p) => Database::create(p)
                .map_err(|e| BackendError::Io(format!("handle table {}: {e}", p.display())))?,
            None => Database::builder()
                .create_with_backend(redb::backends::InMemoryBackend::new())
                .map_err(db_err)?,
        };
        let (log, replay) = match path {
            Some(p) => {
                let (log, changes) = RedoLog::open(&p.with_extension("log"))?;
                (Some(log), changes)
            }
            None => (None, Vec::new()),
        };
        let table = HandleTable {
            db,
            writes: Mutex::new(Writes {
                log,
                assigned: 0,
                written: 0,
            }),
            unsynced: AtomicU64::new(0),
            #[cfg(test)]
            crashed: std::sync::atomic::AtomicBool::new(false),
        };
        if path.is_some() {
            table.recover(&replay)?;
        }
        let root_obj = Object {
            identity: root,
            parent: ROOT_ID,
            name: Bytes::new(),
        };
        if table.get(ROOT_ID)?.as_ref() != Some(&root_obj) {
            let w = table.db.begin_write().map_err(db_err)?;
            {
                let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
                let mut inodes = w.open_table(INODES).map_err(db_err)?;
                let mut meta = w.open_table(META).map_err(db_err)?;
                if let Some(old) = objects.get(ROOT_ID).map_err(db_err)? {
                    let old = Object::decode(old.value())?;
                    inodes
                        .remove((old.identity.dev, old.identity.ino))
                        .map_err(db_err)?;
                }
                objects
                    .insert(ROOT_ID, root_obj.encode().as_slice())
                    .map_err(db_err)?;
                inodes
                    .insert((root.dev, root.ino), ROOT_ID)
                    .map_err(db_err)?;
                if meta.get("next").map_err(db_err)?.is_none() {
                    meta.insert("next", ROOT_ID + 1).map_err(db_err)?;
                }
            }
            w.commit().map_err(db_err)?;
        }
        Ok(table)
    }

    /// Applies what the log kept of the last run, moves `next` on by [`ID_GAP`] if
    /// that run did not close the table, and marks the table open, in one durable
    /// commit; then empties the log.
    fn recover(&self, replay: &[Change]) -> Result<()> {
        let mut writes = self.writes();
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            let mut inodes = w.open_table(INODES).map_err(db_err)?;
            let mut meta = w.open_table(META).map_err(db_err)?;
            let mut next = meta.get("next").map_err(db_err)?.map(|v| v.value());
            for c in replay {
                match c {
                    Change::Put { id, object } => {
                        objects
                            .insert(*id, object.encode().as_slice())
                            .map_err(db_err)?;
                        let at = (object.identity.dev, object.identity.ino);
                        inodes.insert(at, *id).map_err(db_err)?;
                    }
                    Change::Remove { id } => remove_object(&mut objects, &mut inodes, *id)?,
                    Change::Next(n) => next = Some(next.map_or(*n, |v| v.max(*n))),
                }
            }
            let unclean = meta.get("open").map_err(db_err)?.map(|v| v.value()) == Some(1);
            if let Some(n) = next {
                let n = if unclean { n.saturating_add(ID_GAP) } else { n };
                meta.insert("next", n).map_err(db_err)?;
            }
            if unclean || !replay.is_empty() {
                tracing::info!(
                    changes = replay.len(),
                    "handle table: the last run did not close it; its log replayed, new ids skip {ID_GAP}"
                );
            }
            meta.insert("open", 1).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        if let Some(log) = writes.log.as_mut() {
            log.reset()?;
        }
        Ok(())
    }

    fn writes(&self) -> MutexGuard<'_, Writes> {
        // A panic in a writer leaves at worst a record for a commit that did not
        // happen; replaying it records a real sighting.
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `change` in a write transaction committed without a sync, and logs the
    /// changes it lists; `assigns` says whether it handed out ids.
    fn write<T>(
        &self,
        change: impl FnOnce(&redb::WriteTransaction, &mut Vec<Change>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut writes = self.writes();
        let mut w = self.db.begin_write().map_err(db_err)?;
        let mut changes = Vec::new();
        let (out, assigns) = change(&w, &mut changes)?;
        w.set_durability(Durability::None);
        w.commit().map_err(db_err)?;
        if let Some(log) = writes.log.as_mut() {
            log.append(&changes)?;
        }
        writes.written += 1;
        self.unsynced.store(writes.written, Ordering::Relaxed);
        writes.assigned += u64::from(assigns);
        Ok(out)
    }

    /// One durable commit (which makes the unsynced ones before it durable too), then
    /// an empty log, when `due(&writes)` says so; `open` is what `meta.open` becomes.
    fn sync(&self, due: impl Fn(&Writes) -> bool, open: u64) -> Result<()> {
        let mut writes = self.writes();
        if !due(&writes) {
            return Ok(());
        }
        let w = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = w.open_table(META).map_err(db_err)?;
            meta.insert("open", open).map_err(db_err)?;
        }
        w.commit().map_err(db_err)?;
        if let Some(log) = writes.log.as_mut() {
            log.reset()?;
        }
        writes.assigned = 0;
        writes.written = 0;
        self.unsynced.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// The end of a COMPOUND: new ids are in the log already; a durable commit only
    /// every [`SYNC_EVERY`] unsynced ones.
    pub(super) fn flush(&self) -> Result<()> {
        if self.unsynced.load(Ordering::Relaxed) < SYNC_EVERY {
            return Ok(());
        }
        self.sync(|w| w.written >= SYNC_EVERY, 1)
    }

    /// Data was made durable (COMMIT, a stable WRITE): so are the ids handed out so
    /// far, so that a handle to durable data survives a power loss.
    pub(super) fn make_durable(&self) -> Result<()> {
        self.sync(|w| w.assigned > 0, 1)
    }

    /// The row of `id`, if it has one.
    pub(super) fn get(&self, id: u64) -> Result<Option<Object>> {
        let r = self.db.begin_read().map_err(db_err)?;
        let objects = match r.open_table(OBJECTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(db_err(e)),
        };
        let row = objects.get(id).map_err(db_err)?;
        row.map(|v| Object::decode(v.value())).transpose()
    }

    /// The id of a known object, when `seen` is it (not a reuse of its inode number).
    pub(super) fn id_of(&self, seen: &Identity) -> Result<Option<u64>> {
        let r = self.db.begin_read().map_err(db_err)?;
        let inodes = r.open_table(INODES).map_err(db_err)?;
        let objects = r.open_table(OBJECTS).map_err(db_err)?;
        let Some(id) = inodes.get((seen.dev, seen.ino)).map_err(db_err)? else {
            return Ok(None);
        };
        let id = id.value();
        let Some(row) = objects.get(id).map_err(db_err)? else {
            return Ok(None);
        };
        let obj = Object::decode(row.value())?;
        Ok(obj.identity.same_object(seen).then_some(id))
    }

    /// The ids of the objects seen, in order: known ones keep theirs (their recorded
    /// link is moved to the sighting when `relink`), new ones and reused inode numbers
    /// get new ids, committed durably before this returns.
    pub(super) fn ids_for(&self, seen: &[Sighting<'_>], relink: bool) -> Result<Vec<u64>> {
        let mut ids = Vec::with_capacity(seen.len());
        let mut stale = false;
        {
            let r = self.db.begin_read().map_err(db_err)?;
            let inodes = r.open_table(INODES).map_err(db_err)?;
            let objects = r.open_table(OBJECTS).map_err(db_err)?;
            for s in seen {
                let known = match inodes
                    .get((s.identity.dev, s.identity.ino))
                    .map_err(db_err)?
                {
                    Some(id) => {
                        let id = id.value();
                        let row = objects.get(id).map_err(db_err)?;
                        let obj = row.map(|v| Object::decode(v.value())).transpose()?;
                        obj.filter(|o| o.identity.same_object(&s.identity))
                            .filter(|o| !relink || (o.parent == s.parent && o.name == s.name))
                            .map(|_| id)
                    }
                    None => None,
                };
                stale |= known.is_none();
                ids.push(known);
            }
        }
        if !stale {
            return Ok(ids.into_iter().flatten().collect());
        }
        self.write_sightings(seen, relink)
    }

    /// The write half of `ids_for`: one transaction for every sighting.
    fn write_sightings(&self, seen: &[Sighting<'_>], relink: bool) -> Result<Vec<u64>> {
        self.write(|w, changes| {
            let mut ids = Vec::with_capacity(seen.len());
            let mut assigned = false;
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            let mut inodes = w.open_table(INODES).map_err(db_err)?;
            let mut meta = w.open_table(META).map_err(db_err)?;
            let mut next = meta
                .get("next")
                .map_err(db_err)?
                .map_or(ROOT_ID + 1, |v| v.value());
            for s in seen {
                let at = (s.identity.dev, s.identity.ino);
                let old = inodes.get(at).map_err(db_err)?.map(|v| v.value());
                let old_obj = match old {
                    Some(id) => {
                        let row = objects.get(id).map_err(db_err)?;
                        row.map(|v| Object::decode(v.value()))
                            .transpose()?
                            .map(|o| (id, o))
                    }
                    None => None,
                };
                let id = match old_obj {
                    Some((id, o)) if o.identity.same_object(&s.identity) => {
                        if !relink || (o.parent == s.parent && o.name == s.name) {
                            ids.push(id);
                            continue;
                        }
                        id
                    }
                    Some((id, _)) => {
                        // The inode number was reused: the old object is gone.
                        objects.remove(id).map_err(db_err)?;
                        changes.push(Change::Remove { id });
                        assigned = true;
                        next += 1;
                        next - 1
                    }
                    None => {
                        assigned = true;
                        next += 1;
                        next - 1
                    }
                };
                let object = Object {
                    identity: s.identity,
                    parent: s.parent,
                    name: Bytes::copy_from_slice(s.name),
                };
                objects
                    .insert(id, object.encode().as_slice())
                    .map_err(db_err)?;
                inodes.insert(at, id).map_err(db_err)?;
                changes.push(Change::Put { id, object });
                ids.push(id);
            }
            meta.insert("next", next).map_err(db_err)?;
            changes.push(Change::Next(next));
            Ok((ids, assigned))
        })
    }

    /// Records that object `id` is now `name` in directory `parent` (a rename through
    /// the server, or a link found by a search).
    pub(super) fn relink(&self, id: u64, parent: u64, name: &[u8]) -> Result<()> {
        let Some(mut object) = self.get(id)? else {
            return Ok(());
        };
        if object.parent == parent && object.name == name {
            return Ok(());
        }
        object.parent = parent;
        object.name = Bytes::copy_from_slice(name);
        self.write(|w, changes| {
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            objects
                .insert(id, object.encode().as_slice())
                .map_err(db_err)?;
            changes.push(Change::Put { id, object });
            Ok(((), false))
        })
    }

    /// Drops object `id` (its last link is gone): its handles are stale from now on.
    pub(super) fn forget(&self, id: u64) -> Result<()> {
        if id == ROOT_ID {
            return Ok(());
        }
        self.write(|w, changes| {
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            let mut inodes = w.open_table(INODES).map_err(db_err)?;
            remove_object(&mut objects, &mut inodes, id)?;
            changes.push(Change::Remove { id });
            Ok(((), false))
        })
    }

    /// Number of objects recorded (tests, reports).
    pub(super) fn len(&self) -> Result<u64> {
        let r = self.db.begin_read().map_err(db_err)?;
        let objects = r.open_table(OBJECTS).map_err(db_err)?;
        objects.len().map_err(db_err)
    }
}

/// Removes `objects[id]`, and `inodes[(dev, ino)]` where it names `id`.
fn remove_object(
    objects: &mut redb::Table<'_, u64, &[u8]>,
    inodes: &mut redb::Table<'_, (u64, u64), u64>,
    id: u64,
) -> Result<()> {
    let removed = objects
        .remove(id)
        .map_err(db_err)?
        .map(|v| Object::decode(v.value()))
        .transpose()?;
    if let Some(o) = removed {
        let at = (o.identity.dev, o.identity.ino);
        if inodes.get(at).map_err(db_err)?.map(|v| v.value()) == Some(id) {
            inodes.remove(at).map_err(db_err)?;
        }
    }
    Ok(())
}

impl Drop for HandleTable {
    /// A clean close: everything durable, the log empty, `meta.open` 0 (no gap at the
    /// next start).
    fn drop(&mut self) {
        #[cfg(test)]
        if self.crashed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.sync(|_| true, 0) {
            tracing::warn!(error = %e, "handle table: not synced at close");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(ino: u64, birth: u64) -> Identity {
        Identity { dev: 7, ino, birth }
    }

    #[test]
    fn keys_round_trip_and_differ_from_kernel_keys() {
        assert_eq!(id_of_key(&key_of(42)), Some(42));
        assert_eq!(id_of_key(b"\x01abcdefgh"), None);
        assert_eq!(id_of_key(&key_of(42)[..9]), None);
    }

    #[test]
    fn ids_are_stable_reused_inodes_get_new_ones_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("handles.redb");
        let (a, b) = {
            let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
            let seen = [
                Sighting {
                    identity: ident(10, 5),
                    parent: ROOT_ID,
                    name: b"a",
                },
                Sighting {
                    identity: ident(11, 6),
                    parent: ROOT_ID,
                    name: b"b",
                },
            ];
            let ids = t.ids_for(&seen, false).unwrap();
            assert_eq!(ids, t.ids_for(&seen, false).unwrap());
            assert_ne!(ids[0], ids[1]);
            assert!(!ids.contains(&ROOT_ID));
            (ids[0], ids[1])
        };
        let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
        assert_eq!(t.id_of(&ident(10, 5)).unwrap(), Some(a));
        assert_eq!(t.get(b).unwrap().unwrap().name, Bytes::from_static(b"b"));
        // Inode 10 reborn: a new object, the old id is gone.
        assert_eq!(t.id_of(&ident(10, 9)).unwrap(), None);
        let reborn = t
            .ids_for(
                &[Sighting {
                    identity: ident(10, 9),
                    parent: ROOT_ID,
                    name: b"a",
                }],
                false,
            )
            .unwrap()[0];
        assert_ne!(reborn, a);
        assert!(reborn > b);
        assert_eq!(t.get(a).unwrap(), None);
        t.relink(b, reborn, b"moved").unwrap();
        assert_eq!(t.get(b).unwrap().unwrap().parent, reborn);
        t.forget(b).unwrap();
        assert_eq!(t.get(b).unwrap(), None);
        assert_eq!(t.id_of(&ident(11, 6)).unwrap(), None);
        assert_eq!(t.len().unwrap(), 2);
    }

    fn sighting(ino: u64, name: &'static [u8]) -> Sighting<'static> {
        Sighting {
            identity: ident(ino, 1),
            parent: ROOT_ID,
            name,
        }
    }

    fn new_id(t: &HandleTable, ino: u64) -> u64 {
        t.ids_for(&[sighting(ino, b"x")], false).unwrap()[0]
    }

    #[test]
    fn an_unclean_stop_replays_the_log_and_never_gives_a_lost_id_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("handles.redb");
        let log = dir.path().join("handles.log");
        let a = {
            let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
            let a = new_id(&t, 10);
            t.flush().unwrap();
            assert!(
                std::fs::metadata(&log).unwrap().len() > 0,
                "the id is in the log"
            );
            t.crashed.store(true, std::sync::atomic::Ordering::Relaxed);
            a
        };
        // What the log kept beyond what redb made durable: an id the dying server gave.
        {
            let (mut l, _) = RedoLog::open(&log).unwrap();
            let object = Object {
                identity: ident(50, 1),
                parent: ROOT_ID,
                name: Bytes::from_static(b"late"),
            };
            l.append(&[Change::Put { id: 999, object }, Change::Next(1000)])
                .unwrap();
        }
        let b = {
            let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
            assert_eq!(
                std::fs::metadata(&log).unwrap().len(),
                0,
                "replayed, emptied"
            );
            assert_eq!(t.id_of(&ident(10, 1)).unwrap(), Some(a));
            assert_eq!(t.id_of(&ident(50, 1)).unwrap(), Some(999));
            assert_eq!(
                t.get(999).unwrap().unwrap().name,
                Bytes::from_static(b"late")
            );
            let b = new_id(&t, 11);
            assert!(b >= 1000 + ID_GAP, "ids of an unclean run are skipped: {b}");
            b
        };
        // A clean close: no gap at the next start.
        let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
        assert_eq!(new_id(&t, 12), b + 1);
    }

    #[test]
    fn data_made_durable_makes_the_ids_durable_and_empties_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("handles.redb");
        let log = dir.path().join("handles.log");
        let t = HandleTable::open(Some(&path), ident(2, 1)).unwrap();
        new_id(&t, 10);
        t.flush().unwrap();
        assert!(std::fs::metadata(&log).unwrap().len() > 0);
        t.make_durable().unwrap();
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
        // Nothing new: no sync, nothing logged.
        t.make_durable().unwrap();
        t.relink(2, ROOT_ID, b"y").unwrap();
        assert!(
            std::fs::metadata(&log).unwrap().len() > 0,
            "links are logged too"
        );
    }
}
