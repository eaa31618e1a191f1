//! Mapping of lower-layer failures to the precise NFS4ERR_* (RFC 8881 §15.1).

use crate::nfs::{nfs_resop4, nfsstat4};
use txnfs_backend::BackendError;

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
