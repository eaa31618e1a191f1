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
//! New ids are committed without a sync and made durable by [`HandleTable::flush`],
//! which the backend calls at the end of every COMPOUND (before its reply can carry
//! them): one sync per COMPOUND, not per new object. Link updates are never synced on
//! their own, since a lost one only costs a search when the object is next resolved.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};
use txnfs_wal::{Dec, Enc};

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
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u64(self.identity.dev)
            .u64(self.identity.ino)
            .u64(self.identity.birth)
            .u64(self.parent)
            .bytes(&self.name);
        e.into_vec()
    }

    fn decode(raw: &[u8]) -> Result<Object> {
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
    /// Commits of new ids so far (counted after each commit returns).
    assigned: AtomicU64,
    /// How many of those a sync has made durable; held while syncing, so a flush that
    /// waits here sees the work of the one before.
    synced: Mutex<u64>,
}

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
        let table = HandleTable {
            db,
            assigned: AtomicU64::new(0),
            synced: Mutex::new(0),
        };
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
        let mut ids = Vec::with_capacity(seen.len());
        let mut w = self.db.begin_write().map_err(db_err)?;
        let mut assigned = false;
        {
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
                        assigned = true;
                        let id = next;
                        next += 1;
                        id
                    }
                    None => {
                        assigned = true;
                        let id = next;
                        next += 1;
                        id
                    }
                };
                let row = Object {
                    identity: s.identity,
                    parent: s.parent,
                    name: Bytes::copy_from_slice(s.name),
                };
                objects
                    .insert(id, row.encode().as_slice())
                    .map_err(db_err)?;
                inodes.insert(at, id).map_err(db_err)?;
                ids.push(id);
            }
            meta.insert("next", next).map_err(db_err)?;
        }
        // Synced by `flush` (new ids) or never (only links moved: see `relink`).
        w.set_durability(Durability::Eventual);
        w.commit().map_err(db_err)?;
        if assigned {
            self.assigned.fetch_add(1, Ordering::SeqCst);
        }
        Ok(ids)
    }

    /// Makes every id assigned so far durable (one sync for all of them; nothing when
    /// none is new since the last flush).
    pub(super) fn flush(&self) -> Result<()> {
        let target = self.assigned.load(Ordering::SeqCst);
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if *synced >= target {
            return Ok(());
        }
        // An Immediate commit makes the Eventual ones before it durable too.
        let w = self.db.begin_write().map_err(db_err)?;
        w.commit().map_err(db_err)?;
        *synced = target;
        Ok(())
    }

    /// Records that object `id` is now `name` in directory `parent` (a rename through
    /// the server, or a link found by a search). Not synced: see the module doc.
    pub(super) fn relink(&self, id: u64, parent: u64, name: &[u8]) -> Result<()> {
        let Some(mut obj) = self.get(id)? else {
            return Ok(());
        };
        if obj.parent == parent && obj.name == name {
            return Ok(());
        }
        obj.parent = parent;
        obj.name = Bytes::copy_from_slice(name);
        let mut w = self.db.begin_write().map_err(db_err)?;
        w.set_durability(Durability::Eventual);
        {
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            objects
                .insert(id, obj.encode().as_slice())
                .map_err(db_err)?;
        }
        w.commit().map_err(db_err)
    }

    /// Drops object `id` (its last link is gone): its handles are stale from now on.
    pub(super) fn forget(&self, id: u64) -> Result<()> {
        if id == ROOT_ID {
            return Ok(());
        }
        let mut w = self.db.begin_write().map_err(db_err)?;
        w.set_durability(Durability::Eventual);
        {
            let mut objects = w.open_table(OBJECTS).map_err(db_err)?;
            let mut inodes = w.open_table(INODES).map_err(db_err)?;
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
        }
        w.commit().map_err(db_err)
    }

    /// Number of objects recorded (tests, reports).
    pub(super) fn len(&self) -> Result<u64> {
        let r = self.db.begin_read().map_err(db_err)?;
        let objects = r.open_table(OBJECTS).map_err(db_err)?;
        objects.len().map_err(db_err)
    }
}

impl Drop for HandleTable {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "handle table: new ids not synced at close");
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
}
