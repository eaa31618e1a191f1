//! The handle table's redo log (ADR 0050 addendum): what each unsynced commit of the
//! table changed, appended to `handles.log` beside `handles.redb` with one `write`
//! and no sync.
//!
//! redb keeps an unsynced commit (`Durability::None`) in its own memory: a process
//! that dies loses it, while the files the server created in the same moment stay in
//! the page cache. The log's bytes are in the page cache as soon as `write` returns,
//! so a killed server finds every id it handed out when it opens the table again
//! (replay, then one durable commit, then the log is emptied). A power loss may lose
//! the log's tail as it may lose the files; the table's start-up gap (`ID_GAP` in
//! `handle_table.rs`) keeps a lost id from being given to another object.
//!
//! Records are framed as in the durable logs (`txnfs_wal::frame`: length, FNV-1a-64,
//! payload); a torn or corrupt tail ends the replay.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

use txnfs_wal::{Dec, Enc};

use super::handle_table::Object;
use crate::{BackendError, Result};

/// One change to the table, as the commit that made it did it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// `objects[id] = object`, `inodes[(dev, ino)] = id`.
    Put { id: u64, object: Object },
    /// `objects[id]` removed, and `inodes[(dev, ino)]` where it names `id`.
    Remove { id: u64 },
    /// `meta.next` is at least this.
    Next(u64),
}

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const NEXT: u8 = 3;

fn log_err(path: &Path, e: impl std::fmt::Display) -> BackendError {
    BackendError::Io(format!("handle table log {}: {e}", path.display()))
}

/// One commit's changes as a record payload.
fn encode(changes: &[Change]) -> Vec<u8> {
    let mut e = Enc::new();
    e.u32(changes.len() as u32);
    for c in changes {
        match c {
            Change::Put { id, object } => {
                e.u8(PUT).u64(*id).bytes(&object.encode());
            }
            Change::Remove { id } => {
                e.u8(REMOVE).u64(*id);
            }
            Change::Next(n) => {
                e.u8(NEXT).u64(*n);
            }
        }
    }
    e.into_vec()
}

/// A record payload's changes; `None` for one this code did not write.
fn decode(payload: &[u8]) -> Option<Vec<Change>> {
    let mut d = Dec::copy_from(payload);
    let n = d.u32().ok()?;
    let mut out = Vec::with_capacity((n as usize).min(1024));
    for _ in 0..n {
        let c = match d.u8().ok()? {
            PUT => Change::Put {
                id: d.u64().ok()?,
                object: Object::decode(&d.bytes().ok()?).ok()?,
            },
            REMOVE => Change::Remove { id: d.u64().ok()? },
            NEXT => Change::Next(d.u64().ok()?),
            _ => return None,
        };
        out.push(c);
    }
    (d.remaining() == 0).then_some(out)
}

/// The open log file.
#[derive(Debug)]
pub(super) struct RedoLog {
    file: File,
    path: std::path::PathBuf,
    /// Bytes in the file (appends go to its end; the valid prefix after a replay).
    len: u64,
}

impl RedoLog {
    /// Opens (or creates) the log at `path` and returns it with the changes of its
    /// valid prefix, in order. A torn or corrupt tail is cut off at the next `reset`.
    pub(super) fn open(path: &Path) -> Result<(RedoLog, Vec<Change>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| log_err(path, e))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(|e| log_err(path, e))?;
        let mut changes = Vec::new();
        let rec = txnfs_wal::scan(&data, 0, |payload| match decode(payload) {
            Some(c) => {
                changes.extend(c);
                true
            }
            None => false,
        });
        if rec.tail != txnfs_wal::Tail::Clean {
            tracing::warn!(
                log = %path.display(),
                records = rec.records,
                tail = ?rec.tail,
                "handle table log: replaying the valid prefix, dropping its tail"
            );
        }
        let log = RedoLog {
            file,
            path: path.to_path_buf(),
            len: rec.end,
        };
        Ok((log, changes))
    }

    /// Appends one commit's changes with one `write` at the log's end (positioned,
    /// so a tail cut off by `open` is overwritten). Not synced: see the module doc.
    pub(super) fn append(&mut self, changes: &[Change]) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut rec = Vec::new();
        txnfs_wal::frame(&mut rec, &encode(changes));
        std::os::unix::fs::FileExt::write_all_at(&self.file, &rec, self.len)
            .map_err(|e| log_err(&self.path, e))?;
        self.len += rec.len() as u64;
        Ok(())
    }

    /// Empties the log: every change in it is in a durable commit of the table.
    pub(super) fn reset(&mut self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.file.set_len(0).map_err(|e| log_err(&self.path, e))?;
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::handle_table::Identity;
    use bytes::Bytes;

    fn put(id: u64, name: &'static [u8]) -> Change {
        Change::Put {
            id,
            object: Object {
                identity: Identity {
                    dev: 1,
                    ino: id + 100,
                    birth: 9,
                },
                parent: 1,
                name: Bytes::from_static(name),
            },
        }
    }

    #[test]
    fn changes_come_back_in_order_and_a_torn_tail_is_dropped_then_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("handles.log");
        let first = vec![put(5, b"a"), Change::Next(6)];
        let second = vec![Change::Remove { id: 5 }, put(6, b"b"), Change::Next(7)];
        {
            let (mut log, old) = RedoLog::open(&path).unwrap();
            assert!(old.is_empty());
            log.append(&first).unwrap();
            log.append(&second).unwrap();
        }
        let (_, got) = RedoLog::open(&path).unwrap();
        assert_eq!(got, [first.clone(), second].concat());
        // A crash in the middle of the second record's write.
        let full = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full - 3).unwrap();
        let (mut log, got) = RedoLog::open(&path).unwrap();
        assert_eq!(got, first);
        let third = vec![put(8, b"c")];
        log.append(&third).unwrap();
        drop(log);
        let (mut log, got) = RedoLog::open(&path).unwrap();
        assert_eq!(got, [first, third].concat());
        log.reset().unwrap();
        drop(log);
        assert!(RedoLog::open(&path).unwrap().1.is_empty());
    }
}
