//! Undo entries of the `txn` layer: how to take back one change, written to the journal
//! before the change is made (ADR 0021).
//!
//! Every entry is idempotent and tolerant: applied to a state where its change never
//! happened, or was already undone, it does nothing harmful (a missing name or backup
//! is skipped). That is what lets recovery run the entries of an interrupted
//! transaction without knowing how far it got, and run them again after a crash during
//! recovery itself. It relies on the transaction's locks: nobody else changed the
//! objects and names an entry concerns while the transaction was open.

use bytes::Bytes;
use txnfs_wal::{Dec, DecodeError, Enc};

use crate::{Backend, BackendError, FileKey, OpCtx, SetAttrs, SetTime, Timestamp};

/// The largest range saved in the journal entry itself ([`Saved::Inline`]); larger ones
/// are cloned into a backup file ([`Saved::Backup`]: a reflink where the file system has
/// them).
pub const INLINE_MAX: u64 = 64 << 10;

/// Where the bytes a data change overwrites were saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saved {
    /// Small ranges: in the journal entry itself. No backup file is made, synced or
    /// removed (on ext4, creating and deleting a file per overwrite made concurrent
    /// transactions spend their CPU in the inode allocator and on the backup
    /// directory's lock).
    Inline(Bytes),
    /// `len` bytes in backup file `name` (none when `len` is 0).
    Backup { name: Bytes, len: u64 },
}

/// Where the backups live: a directory of the backend below, hidden from clients.
pub struct Backups<'a> {
    pub lower: &'a dyn Backend,
    pub dir: &'a FileKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// WRITE, SETATTR(size), or a clone into `key`: put the bytes saved at `offset`
    /// back (nothing when none were saved), then the size and the times the file had.
    Data {
        key: FileKey,
        offset: u64,
        saved: Saved,
        old_size: u64,
        atime: Timestamp,
        mtime: Timestamp,
    },
    /// SETATTR of mode, owner or times: the old values.
    Attrs {
        key: FileKey,
        mode: u32,
        uid: u32,
        gid: u32,
        atime: Timestamp,
        mtime: Timestamp,
    },
    /// CREATE, OPEN(create), LINK: remove the name the transaction made.
    Unlink { dir: FileKey, name: Bytes },
    /// RENAME: move `to` back to `from`.
    Unrename {
        from_dir: FileKey,
        from: Bytes,
        to_dir: FileKey,
        to: Bytes,
    },
    /// REMOVE, or the target a RENAME replaced: the object was moved into the backups
    /// as `backup`; move it back to (`dir`, `name`).
    Restore {
        dir: FileKey,
        name: Bytes,
        backup: Bytes,
    },
}

fn put_time(e: &mut Enc, t: Timestamp) {
    e.i64(t.sec).u32(t.nsec);
}

fn get_time(d: &mut Dec) -> Result<Timestamp, DecodeError> {
    Ok(Timestamp {
        sec: d.i64()?,
        nsec: d.u32()?,
    })
}

/// A missing object or name means the change this entry undoes never happened (or was
/// undone already): nothing to do.
fn tolerate(r: crate::Result<()>) -> crate::Result<()> {
    match r {
        Err(BackendError::NotFound | BackendError::Stale) => Ok(()),
        r => r,
    }
}

impl Undo {
    /// Writes the entry (its journal record's body).
    pub fn encode(&self, e: &mut Enc) {
        match self {
            Undo::Data {
                key,
                offset,
                saved,
                old_size,
                atime,
                mtime,
            } => {
                // Tag 0: saved in a backup file, 5: inline.
                match saved {
                    Saved::Backup { name, len } => {
                        e.u8(0).bytes(key).u64(*offset).u64(*len).bytes(name);
                    }
                    Saved::Inline(data) => {
                        e.u8(5).bytes(key).u64(*offset).bytes(data);
                    }
                }
                e.u64(*old_size);
                put_time(e, *atime);
                put_time(e, *mtime);
            }
            Undo::Attrs {
                key,
                mode,
                uid,
                gid,
                atime,
                mtime,
            } => {
                e.u8(1).bytes(key).u32(*mode).u32(*uid).u32(*gid);
                put_time(e, *atime);
                put_time(e, *mtime);
            }
            Undo::Unlink { dir, name } => {
                e.u8(2).bytes(dir).bytes(name);
            }
            Undo::Unrename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                e.u8(3).bytes(from_dir).bytes(from).bytes(to_dir).bytes(to);
            }
            Undo::Restore { dir, name, backup } => {
                e.u8(4).bytes(dir).bytes(name).bytes(backup);
            }
        }
    }

    /// Reads an entry written by [`Undo::encode`].
    pub fn decode(d: &mut Dec) -> Result<Undo, DecodeError> {
        Ok(match d.u8()? {
            tag @ (0 | 5) => {
                let key = d.bytes()?;
                let offset = d.u64()?;
                let saved = if tag == 0 {
                    let len = d.u64()?;
                    Saved::Backup {
                        len,
                        name: d.bytes()?,
                    }
                } else {
                    Saved::Inline(d.bytes()?)
                };
                Undo::Data {
                    key,
                    offset,
                    saved,
                    old_size: d.u64()?,
                    atime: get_time(d)?,
                    mtime: get_time(d)?,
                }
            }
            1 => Undo::Attrs {
                key: d.bytes()?,
                mode: d.u32()?,
                uid: d.u32()?,
                gid: d.u32()?,
                atime: get_time(d)?,
                mtime: get_time(d)?,
            },
            2 => Undo::Unlink {
                dir: d.bytes()?,
                name: d.bytes()?,
            },
            3 => Undo::Unrename {
                from_dir: d.bytes()?,
                from: d.bytes()?,
                to_dir: d.bytes()?,
                to: d.bytes()?,
            },
            4 => Undo::Restore {
                dir: d.bytes()?,
                name: d.bytes()?,
                backup: d.bytes()?,
            },
            tag => return Err(DecodeError::Tag { what: "undo", tag }),
        })
    }

    /// The backup this entry keeps, if any (removed once the transaction is over).
    pub fn backup(&self) -> Option<&Bytes> {
        match self {
            Undo::Data {
                saved: Saved::Backup { name, len },
                ..
            } if *len > 0 => Some(name),
            Undo::Restore { backup, .. } => Some(backup),
            _ => None,
        }
    }

    /// The object or directory this entry's undo changes (to be made durable).
    pub fn touches(&self) -> &FileKey {
        match self {
            Undo::Data { key, .. } | Undo::Attrs { key, .. } => key,
            Undo::Unlink { dir, .. } | Undo::Restore { dir, .. } => dir,
            Undo::Unrename { from_dir, .. } => from_dir,
        }
    }

    /// Takes the change back. `cx` is the layer's own (privileged) context.
    pub fn apply(&self, cx: &OpCtx, b: &Backups) -> crate::Result<()> {
        let lower = b.lower;
        match self {
            Undo::Data {
                key,
                offset,
                saved,
                old_size,
                atime,
                mtime,
            } => {
                let now = match lower.getattr(cx, key) {
                    Ok(a) => a,
                    Err(e) => return tolerate(Err(e)),
                };
                match saved {
                    Saved::Inline(data) if !data.is_empty() => {
                        tolerate(lower.write(cx, key, *offset, data, false).map(|_| ()))?;
                    }
                    Saved::Backup { name, len } if *len > 0 => {
                        match lower.lookup(cx, b.dir, name) {
                            Ok((bk, battrs)) if battrs.size >= *len => {
                                lower.clone_range(cx, &bk, 0, key, *offset, *len)?;
                            }
                            // The backup was never completed: the change it guards was
                            // never made either (the entry is written after the backup).
                            Ok(_) => {}
                            Err(e) => tolerate(Err(e))?,
                        }
                    }
                    _ => {}
                }
                let mut set = SetAttrs {
                    atime: Some(SetTime::Client(*atime)),
                    mtime: Some(SetTime::Client(*mtime)),
                    ..SetAttrs::default()
                };
                let size_now = lower.getattr(cx, key).map(|a| a.size).unwrap_or(now.size);
                if size_now != *old_size {
                    set.size = Some(*old_size);
                }
                tolerate(lower.setattr(cx, key, &set).map(|_| ()))
            }
            Undo::Attrs {
                key,
                mode,
                uid,
                gid,
                atime,
                mtime,
            } => {
                let set = SetAttrs {
                    mode: Some(*mode),
                    uid: Some(*uid),
                    gid: Some(*gid),
                    atime: Some(SetTime::Client(*atime)),
                    mtime: Some(SetTime::Client(*mtime)),
                    size: None,
                };
                tolerate(lower.setattr(cx, key, &set).map(|_| ()))
            }
            Undo::Unlink { dir, name } => tolerate(lower.remove(cx, dir, name).map(|_| ())),
            Undo::Unrename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                // Only if `to` exists: renaming a missing name is NotFound anyway, but the
                // old name must not be clobbered by a rename that never happened.
                match lower.lookup(cx, to_dir, to) {
                    Ok(_) => {}
                    Err(BackendError::NotFound | BackendError::Stale) => return Ok(()),
                    Err(e) => return Err(e),
                }
                tolerate(lower.rename(cx, to_dir, to, from_dir, from).map(|_| ()))
            }
            Undo::Restore { dir, name, backup } => {
                match lower.lookup(cx, b.dir, backup) {
                    Ok(_) => {}
                    Err(BackendError::NotFound | BackendError::Stale) => return Ok(()),
                    Err(e) => return Err(e),
                }
                tolerate(lower.rename(cx, b.dir, backup, dir, name).map(|_| ()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_round_trips() {
        let t = Timestamp { sec: -3, nsec: 7 };
        let all = [
            Undo::Data {
                key: Bytes::from_static(b"k"),
                offset: 9,
                saved: Saved::Backup {
                    name: Bytes::from_static(b"b"),
                    len: 3,
                },
                old_size: 12,
                atime: t,
                mtime: t,
            },
            Undo::Attrs {
                key: Bytes::from_static(b"k"),
                mode: 0o755,
                uid: 1,
                gid: 2,
                atime: t,
                mtime: t,
            },
            Undo::Unlink {
                dir: Bytes::from_static(b"d"),
                name: Bytes::from_static(b"n"),
            },
            Undo::Unrename {
                from_dir: Bytes::from_static(b"d"),
                from: Bytes::from_static(b"a"),
                to_dir: Bytes::from_static(b"e"),
                to: Bytes::from_static(b"b"),
            },
            Undo::Restore {
                dir: Bytes::from_static(b"d"),
                name: Bytes::from_static(b"n"),
                backup: Bytes::from_static(b"1.2"),
            },
            Undo::Data {
                key: Bytes::from_static(b"k"),
                offset: 4,
                saved: Saved::Inline(Bytes::from_static(b"old")),
                old_size: 7,
                atime: t,
                mtime: t,
            },
        ];
        for u in all {
            let mut e = Enc::new();
            u.encode(&mut e);
            let mut d = Dec::copy_from(e.as_slice());
            assert_eq!(Undo::decode(&mut d), Ok(u));
            assert_eq!(d.remaining(), 0);
        }
    }
}
