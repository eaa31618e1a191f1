//! Reading directories: `d_off` cookies, or ordinal ones where the file system hands out
//! `d_off` values that cannot be passed back to `lseek`.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};

use bytes::Bytes;
use rustix::fs::{self as rfs, AtFlags, Dir};

use super::errors::map_errno;
use super::handles::name_to_handle;
use super::LocalBackend;
use crate::{BackendError, DirEntry, FileKey, Result};

/// Flag bit of an ordinal readdir cookie.
const ORDINAL_COOKIE: u64 = 1 << 63;

impl LocalBackend {
    /// Reads directory entries starting after `cookie`.
    pub(super) fn readdir_inner(
        &self,
        dir_key: &FileKey,
        dfd: &OwnedFd,
        cookie: u64,
        max_entries: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let open_dir = || -> Result<Dir> {
            let fd = self.open_dir_for_reading(dfd.as_fd())?;
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
            let key = if self.table.is_some() {
                // Keys come after the loop, in one table transaction.
                FileKey::new()
            } else {
                let Ok((key, mount_id)) = name_to_handle(dirfd.as_fd(), name, 0) else {
                    continue;
                };
                if mount_id != self.mount_id {
                    continue;
                }
                key
            };
            out.push(DirEntry {
                name: Bytes::copy_from_slice(bytes),
                cookie: entry_cookie,
                key,
                attrs: self.attrs(&st, false),
            });
        }
        if self.table.is_some() {
            out = self.with_table_keys(dir_key, dirfd, out)?;
        }
        Ok((out, eof))
    }

    /// Table mode: the entries' keys, from the handle table in one transaction; an
    /// entry removed meanwhile is left out.
    fn with_table_keys(
        &self,
        dir_key: &FileKey,
        dirfd: &OwnedFd,
        entries: Vec<DirEntry>,
    ) -> Result<Vec<DirEntry>> {
        let names: Vec<CString> = entries
            .iter()
            .map(|e| CString::new(e.name.to_vec()).map_err(|_| BackendError::BadName))
            .collect::<Result<_>>()?;
        let refs: Vec<&CStr> = names.iter().map(CString::as_c_str).collect();
        let keys = self.table_keys_in(dir_key, dirfd, &refs)?;
        Ok(entries
            .into_iter()
            .zip(keys)
            .filter_map(|(mut e, k)| {
                e.key = k?;
                Some(e)
            })
            .collect())
    }

    /// Counts raw entries from the start of the directory up to and including the entry
    /// (`ino`, `name`) that follows position `prev_off` (used when a file system hands out
    /// unusable `d_off` values).
    pub(super) fn ordinal_after(
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
