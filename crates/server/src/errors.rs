//! Mapping of lower-layer failures to the precise NFS4ERR_* (RFC 8881 §15.1) and,
//! for the NFSv3 front end, NFS3ERR_* (RFC 1813 §2.6).

use crate::nfs::{nfs_resop4, nfsstat4};
use txnfs_backend::BackendError;
use txnfs_proto::nfs3::nfsstat3;

/// The XDR status word at `at` in an encoded reply (a COMPOUND4res or a v3 result
/// begins with one; an op's result has one after its opnum), if the reply is that long.
pub fn status_word(reply: &[u8], at: usize) -> Option<i32> {
    let b = reply.get(at..at + 4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn backend_status(e: &BackendError) -> nfsstat4 {
    use nfsstat4::*;
    match e {
        BackendError::NotFound => NFS4ERR_NOENT,
        BackendError::Exists => NFS4ERR_EXIST,
        BackendError::NotDir => NFS4ERR_NOTDIR,
        BackendError::IsDir => NFS4ERR_ISDIR,
        BackendError::NotEmpty => NFS4ERR_NOTEMPTY,
        BackendError::Access => NFS4ERR_ACCESS,
        BackendError::Perm => NFS4ERR_PERM,
        BackendError::Stale => NFS4ERR_STALE,
        BackendError::BadName => NFS4ERR_BADNAME,
        BackendError::NameTooLong => NFS4ERR_NAMETOOLONG,
        BackendError::Inval => NFS4ERR_INVAL,
        BackendError::NoSpace => NFS4ERR_NOSPC,
        BackendError::Quota => NFS4ERR_DQUOT,
        BackendError::ReadOnly => NFS4ERR_ROFS,
        BackendError::FileTooBig => NFS4ERR_FBIG,
        BackendError::MLink => NFS4ERR_MLINK,
        BackendError::XDev => NFS4ERR_XDEV,
        BackendError::SymlinkLoop => NFS4ERR_SYMLINK,
        BackendError::NotSymlink => NFS4ERR_INVAL,
        BackendError::NotSupp => NFS4ERR_NOTSUPP,
        BackendError::Nxio => NFS4ERR_NXIO,
        BackendError::NoXattr => NFS4ERR_NOXATTR,
        BackendError::XattrTooBig => NFS4ERR_XATTR2BIG,
        BackendError::Conflict => NFS4ERR_DELAY,
        BackendError::Io(msg) => {
            tracing::warn!("backend I/O error: {msg}");
            NFS4ERR_IO
        }
    }
}

/// An nfsstat4 given as a number (from the attribute layer).
pub fn status_from_u32(v: u32) -> nfsstat4 {
    nfsstat4::from_i32(v as i32).unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT)
}

pub fn state_status(e: &txnfs_state::StateError) -> nfsstat4 {
    use nfsstat4::*;
    use txnfs_state::StateError as S;
    match e {
        S::BadStateid => NFS4ERR_BAD_STATEID,
        S::OldStateid => NFS4ERR_OLD_STATEID,
        S::StaleStateid => NFS4ERR_STALE_STATEID,
        S::ShareDenied => NFS4ERR_SHARE_DENIED,
        S::OpenMode => NFS4ERR_OPENMODE,
        S::LocksHeld => NFS4ERR_LOCKS_HELD,
        S::Denied(_) => NFS4ERR_DENIED,
        S::Inval => NFS4ERR_INVAL,
        S::Locked => NFS4ERR_LOCKED,
        S::StaleClientId => NFS4ERR_STALE_CLIENTID,
        S::Grace => NFS4ERR_GRACE,
        S::NoGrace => NFS4ERR_NO_GRACE,
        // v4.1 prefers DELAY to RESOURCE (RFC 8881 §15.1.1.3).
        S::Resource => NFS4ERR_DELAY,
        S::DelegRevoked => NFS4ERR_DELEG_REVOKED,
        S::Delay => NFS4ERR_DELAY,
    }
}

/// Why an op failed: a status, or a status with a result body (LOCK denied).
#[derive(Debug)]
pub enum OpError {
    Status(nfsstat4),
    WithBody(nfsstat4, Box<nfs_resop4>),
}

impl From<nfsstat4> for OpError {
    fn from(s: nfsstat4) -> Self {
        OpError::Status(s)
    }
}

impl From<BackendError> for OpError {
    fn from(e: BackendError) -> Self {
        OpError::Status(backend_status(&e))
    }
}

pub type OpResult = Result<nfs_resop4, OpError>;

/// The NFSv3 status of a backend failure (RFC 1813 §2.6), the v3 twin of
/// [`backend_status`]. NFSv3 has no BADNAME, SYMLINK, DELAY, NOXATTR or XATTR2BIG:
/// a bad name is ACCES as knfsd answers it (`nfserrno(-EACCES)` for "." and ".."),
/// wait-and-retry is JUKEBOX, a symlink loop (a path component that is a symlink) is
/// NOTDIR, and the extended-attribute failures cannot happen (no v3 procedure asks).
pub fn backend_status3(e: &BackendError) -> nfsstat3 {
    use nfsstat3::*;
    match e {
        BackendError::NotFound => NFS3ERR_NOENT,
        BackendError::Exists => NFS3ERR_EXIST,
        BackendError::NotDir => NFS3ERR_NOTDIR,
        BackendError::IsDir => NFS3ERR_ISDIR,
        BackendError::NotEmpty => NFS3ERR_NOTEMPTY,
        BackendError::Access => NFS3ERR_ACCES,
        BackendError::Perm => NFS3ERR_PERM,
        BackendError::Stale => NFS3ERR_STALE,
        BackendError::BadName => NFS3ERR_ACCES,
        BackendError::NameTooLong => NFS3ERR_NAMETOOLONG,
        BackendError::Inval | BackendError::NotSymlink => NFS3ERR_INVAL,
        BackendError::NoSpace => NFS3ERR_NOSPC,
        BackendError::Quota => NFS3ERR_DQUOT,
        BackendError::ReadOnly => NFS3ERR_ROFS,
        BackendError::FileTooBig => NFS3ERR_FBIG,
        BackendError::MLink => NFS3ERR_MLINK,
        BackendError::XDev => NFS3ERR_XDEV,
        BackendError::SymlinkLoop => NFS3ERR_NOTDIR,
        BackendError::NotSupp => NFS3ERR_NOTSUPP,
        BackendError::Nxio => NFS3ERR_NXIO,
        BackendError::NoXattr | BackendError::XattrTooBig => NFS3ERR_SERVERFAULT,
        BackendError::Conflict => NFS3ERR_JUKEBOX,
        BackendError::Io(msg) => {
            tracing::warn!("backend I/O error: {msg}");
            NFS3ERR_IO
        }
    }
}

/// The NFSv3 status of a failure the v3 front end meets in a part it shares with
/// NFSv4 (handle decoding, permission checks, recall-and-wait): each v4 status those
/// parts answer, as v3 says it. A status no shared part answers is SERVERFAULT.
pub fn v3_status_of_v4(s: nfsstat4) -> nfsstat3 {
    use nfsstat3::*;
    use nfsstat4::*;
    match s {
        NFS4_OK => NFS3_OK,
        NFS4ERR_PERM => NFS3ERR_PERM,
        NFS4ERR_NOENT => NFS3ERR_NOENT,
        NFS4ERR_IO => NFS3ERR_IO,
        NFS4ERR_NXIO => NFS3ERR_NXIO,
        NFS4ERR_ACCESS => NFS3ERR_ACCES,
        NFS4ERR_EXIST => NFS3ERR_EXIST,
        NFS4ERR_XDEV => NFS3ERR_XDEV,
        NFS4ERR_NOTDIR => NFS3ERR_NOTDIR,
        NFS4ERR_ISDIR => NFS3ERR_ISDIR,
        NFS4ERR_INVAL => NFS3ERR_INVAL,
        NFS4ERR_FBIG => NFS3ERR_FBIG,
        NFS4ERR_NOSPC => NFS3ERR_NOSPC,
        NFS4ERR_ROFS => NFS3ERR_ROFS,
        NFS4ERR_MLINK => NFS3ERR_MLINK,
        NFS4ERR_NAMETOOLONG => NFS3ERR_NAMETOOLONG,
        NFS4ERR_NOTEMPTY => NFS3ERR_NOTEMPTY,
        NFS4ERR_DQUOT => NFS3ERR_DQUOT,
        NFS4ERR_STALE | NFS4ERR_FHEXPIRED => NFS3ERR_STALE,
        NFS4ERR_BADHANDLE => NFS3ERR_BADHANDLE,
        NFS4ERR_NOTSUPP => NFS3ERR_NOTSUPP,
        NFS4ERR_BADTYPE => NFS3ERR_BADTYPE,
        NFS4ERR_BADNAME => NFS3ERR_ACCES,
        NFS4ERR_SYMLINK => NFS3ERR_NOTDIR,
        // A recall that did not end in time, a transaction's lock, a core that is
        // recovering: the client should try again later.
        NFS4ERR_DELAY | NFS4ERR_GRACE => NFS3ERR_JUKEBOX,
        other => {
            tracing::debug!(status = ?other, "v4 status without a v3 twin");
            NFS3ERR_SERVERFAULT
        }
    }
}

/// The NFSv3 status of a shared helper's `OpError` (its status; a v4 result body has
/// no v3 meaning).
pub fn op_status3(e: OpError) -> nfsstat3 {
    match e {
        OpError::Status(s) | OpError::WithBody(s, _) => v3_status_of_v4(s),
    }
}
