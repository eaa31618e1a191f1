//! Undo entries of the `txn` layer: how to take back one change, written to the journal
//! before the change is made (ADR 0021).
//!
//! Every entry is idempotent and tolerant: applied to a state where its change never
//! happened, or was already undone, it does nothing harmful (a missing name or backup
//! is skipped). That is what lets recovery run the entries of an interrupted
//! transaction without knowing how far it got, and run them again after a crash during
//! recovery itself. It relies on the transaction's locks: nobody else changed the
//! objects and names an entry concerns while the transaction was open.

use bytes::{Buf, BufMut, Bytes, BytesMut};

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

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_u32(v.len() as u32);
    b.put_slice(v);
}

fn get_bytes(b: &mut Bytes) -> Option<Bytes> {
    if b.remaining() < 4 {
        return None;
    }
    let n = b.get_u32() as usize;
    (b.remaining() >= n).then(|| b.split_to(n))
}

fn get_u64(b: &mut Bytes) -> Option<u64> {
    (b.remaining() >= 8).then(|| b.get_u64())
}

fn get_u32(b: &mut Bytes) -> Option<u32> {
    (b.remaining() >= 4).then(|| b.get_u32())
}

fn put_time(b: &mut BytesMut, t: Timestamp) {
    b.put_i64(t.sec);
    b.put_u32(t.nsec);
}

fn get_time(b: &mut Bytes) -> Option<Timestamp> {
    let sec = get_u64(b)? as i64;
    let nsec = get_u32(b)?;
    Some(Timestamp { sec, nsec })
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
    pub fn encode(&self, b: &mut BytesMut) {
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
                        b.put_u8(0);
                        put_bytes(b, key);
                        b.put_u64(*offset);
                        b.put_u64(*len);
                        put_bytes(b, name);
                    }
                    Saved::Inline(data) => {
                        b.put_u8(5);
                        put_bytes(b, key);
                        b.put_u64(*offset);
                        put_bytes(b, data);
                    }
                }
                b.put_u64(*old_size);
                put_time(b, *atime);
                put_time(b, *mtime);
            }
            Undo::Attrs {
                key,
                mode,
                uid,
                gid,
                atime,
                mtime,
            } => {
                b.put_u8(1);
                put_bytes(b, key);
                b.put_u32(*mode);
                b.put_u32(*uid);
                b.put_u32(*gid);
                put_time(b, *atime);
                put_time(b, *mtime);
            }
            Undo::Unlink { dir, name } => {
                b.put_u8(2);
                put_bytes(b, dir);
                put_bytes(b, name);
            }
            Undo::Unrename {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                b.put_u8(3);
                put_bytes(b, from_dir);
                put_bytes(b, from);
                put_bytes(b, to_dir);
                put_bytes(b, to);
            }
            Undo::Restore { dir, name, backup } => {
                b.put_u8(4);
                put_bytes(b, dir);
                put_bytes(b, name);
                put_bytes(b, backup);
            }
        }
    }

    pub fn decode(b: &mut Bytes) -> Option<Undo> {
        if !b.has_remaining() {
            return None;
        }
        Some(match b.get_u8() {
            tag @ (0 | 5) => {
                let key = get_bytes(b)?;
                let offset = get_u64(b)?;
                let saved = if tag == 0 {
                    let len = get_u64(b)?;
                    Saved::Backup {
                        len,
                        name: get_bytes(b)?,
                    }
                } else {
                    Saved::Inline(get_bytes(b)?)
                };
                Undo::Data {
                    key,
                    offset,
                    saved,
                    old_size: get_u64(b)?,
                    atime: get_time(b)?,
                    mtime: get_time(b)?,
                }
            }
            1 => Undo::Attrs {
                key: get_bytes(b)?,
                mode: get_u32(b)?,
                uid: get_u32(b)?,
                gid: get_u32(b)?,
                atime: get_time(b)?,
                mtime: get_time(b)?,
            },
            2 => Undo::Unlink {
                dir: get_bytes(b)?,
                name: get_bytes(b)?,
            },
            3 => Undo::Unrename {
                from_dir: get_bytes(b)?,
                from: get_bytes(b)?,
                to_dir: get_bytes(b)?,
                to: get_bytes(b)?,
            },
            4 => Undo::Restore {
                dir: get_bytes(b)?,
                name: get_bytes(b)?,
                backup: get_bytes(b)?,
            },
            _ => return None,
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
            let mut b = BytesMut::new();
            u.encode(&mut b);
            let mut bytes = b.freeze();
            assert_eq!(Undo::decode(&mut bytes), Some(u));
            assert!(bytes.is_empty());
        }
    }
}
