//! Kernel file handles as keys: `name_to_handle_at` turns an object into a restart-stable
//! [`FileKey`], `open_by_handle_at` turns the key back into an `O_PATH` descriptor.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use bytes::Bytes;

use rustix::io::Errno;

use super::errors::map_errno;
use crate::{BackendError, FileKey, Result, MAX_KEY_LEN};

/// Kernel limit on `f_handle` bytes (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle the kernel produces.
#[repr(C)]
pub(super) struct HandleBuf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

impl HandleBuf {
    pub(super) fn empty() -> Self {
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
pub(super) fn encode_key(handle_type: i32, f_handle: &[u8]) -> Result<FileKey> {
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

pub(super) fn decode_key(key: &[u8]) -> Option<HandleBuf> {
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
pub(super) fn name_to_handle(
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
pub(super) fn open_handle(mount_fd: BorrowedFd<'_>, key: &[u8]) -> rustix::io::Result<OwnedFd> {
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
pub(super) fn map_handle_errno(e: Errno) -> BackendError {
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
}
