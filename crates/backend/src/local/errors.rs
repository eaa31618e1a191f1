//! Errno to [`BackendError`] mapping, and the `EINTR` retry every system call goes through.

use rustix::io::Errno;

use crate::BackendError;

/// Maps an errno to the backend error the server translates to NFS4ERR_*.
pub(crate) fn map_errno(e: Errno) -> BackendError {
    match e {
        Errno::NOENT => BackendError::NotFound,
        Errno::EXIST => BackendError::Exists,
        Errno::NOTDIR => BackendError::NotDir,
        Errno::ISDIR => BackendError::IsDir,
        Errno::NOTEMPTY => BackendError::NotEmpty,
        Errno::ACCESS => BackendError::Access,
        Errno::PERM => BackendError::Perm,
        Errno::STALE => BackendError::Stale,
        Errno::NAMETOOLONG => BackendError::NameTooLong,
        Errno::INVAL => BackendError::Inval,
        Errno::NOSPC => BackendError::NoSpace,
        Errno::DQUOT => BackendError::Quota,
        Errno::ROFS => BackendError::ReadOnly,
        Errno::FBIG => BackendError::FileTooBig,
        Errno::MLINK => BackendError::MLink,
        Errno::XDEV => BackendError::XDev,
        Errno::LOOP => BackendError::SymlinkLoop,
        Errno::OPNOTSUPP => BackendError::NotSupp,
        other => BackendError::Io(other.to_string()),
    }
}

/// For directory removal and rename: EEXIST means "target directory not empty".
pub(super) fn map_errno_dir(e: Errno) -> BackendError {
    match e {
        Errno::EXIST | Errno::NOTEMPTY => BackendError::NotEmpty,
        other => map_errno(other),
    }
}

pub(crate) fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            r => return r,
        }
    }
}
