//! The one operation table (as Linux `nfsd4_ops[]`): per op its name and the flags the
//! executor checks before calling the handler. Handlers themselves are dispatched in
//! `ops::dispatch`; nothing op-specific lives in the executor.

use crate::nfs::nfs_opnum4;

#[derive(Debug, Clone, Copy)]
pub struct OpDesc {
    pub name: &'static str,
    /// Fails with NFS4ERR_NOFILEHANDLE when there is no current filehandle.
    pub needs_fh: bool,
    /// May be the sole op of a COMPOUND that has no SEQUENCE.
    pub sessionless: bool,
    /// Implemented (others answer NFS4ERR_NOTSUPP).
    pub supported: bool,
}

const fn d(name: &'static str, needs_fh: bool, sessionless: bool, supported: bool) -> OpDesc {
    OpDesc {
        name,
        needs_fh,
        sessionless,
        supported,
    }
}

pub fn desc(op: nfs_opnum4) -> OpDesc {
    use nfs_opnum4::*;
    match op {
        OP_ACCESS => d("ACCESS", true, false, true),
        OP_CLOSE => d("CLOSE", true, false, true),
        OP_COMMIT => d("COMMIT", true, false, true),
        OP_CREATE => d("CREATE", true, false, true),
        OP_GETATTR => d("GETATTR", true, false, true),
        OP_GETFH => d("GETFH", true, false, true),
        OP_LINK => d("LINK", true, false, true),
        OP_LOCK => d("LOCK", true, false, true),
        OP_LOCKT => d("LOCKT", true, false, true),
        OP_LOCKU => d("LOCKU", true, false, true),
        OP_LOOKUP => d("LOOKUP", true, false, true),
        OP_LOOKUPP => d("LOOKUPP", true, false, true),
        OP_NVERIFY => d("NVERIFY", true, false, true),
        OP_OPEN => d("OPEN", true, false, true),
        OP_OPEN_DOWNGRADE => d("OPEN_DOWNGRADE", true, false, true),
        OP_PUTFH => d("PUTFH", false, false, true),
        OP_PUTPUBFH => d("PUTPUBFH", false, false, true),
        OP_PUTROOTFH => d("PUTROOTFH", false, false, true),
        OP_READ => d("READ", true, false, true),
        OP_READDIR => d("READDIR", true, false, true),
        OP_READLINK => d("READLINK", true, false, true),
        OP_REMOVE => d("REMOVE", true, false, true),
        OP_RENAME => d("RENAME", true, false, true),
        OP_RESTOREFH => d("RESTOREFH", false, false, true),
        OP_SAVEFH => d("SAVEFH", true, false, true),
        OP_SECINFO => d("SECINFO", true, false, true),
        OP_SETATTR => d("SETATTR", true, false, true),
        OP_VERIFY => d("VERIFY", true, false, true),
        OP_WRITE => d("WRITE", true, false, true),
        OP_BIND_CONN_TO_SESSION => d("BIND_CONN_TO_SESSION", false, true, true),
        OP_EXCHANGE_ID => d("EXCHANGE_ID", false, true, true),
        OP_CREATE_SESSION => d("CREATE_SESSION", false, true, true),
        OP_DESTROY_SESSION => d("DESTROY_SESSION", false, true, true),
        OP_FREE_STATEID => d("FREE_STATEID", false, false, true),
        OP_SECINFO_NO_NAME => d("SECINFO_NO_NAME", true, false, true),
        OP_SEQUENCE => d("SEQUENCE", false, false, true),
        OP_TEST_STATEID => d("TEST_STATEID", false, false, true),
        OP_DESTROY_CLIENTID => d("DESTROY_CLIENTID", false, true, true),
        OP_RECLAIM_COMPLETE => d("RECLAIM_COMPLETE", false, false, true),
        // v4.0-only operations are illegal in a v4.1 compound (RFC 8881 §18.x "MUST NOT").
        OP_OPENATTR => d("OPENATTR", true, false, false),
        OP_DELEGPURGE => d("DELEGPURGE", false, false, false),
        OP_DELEGRETURN => d("DELEGRETURN", true, false, false),
        OP_OPEN_CONFIRM => d("OPEN_CONFIRM", false, false, false),
        OP_RENEW => d("RENEW", false, false, false),
        OP_SETCLIENTID => d("SETCLIENTID", false, false, false),
        OP_SETCLIENTID_CONFIRM => d("SETCLIENTID_CONFIRM", false, false, false),
        OP_RELEASE_LOCKOWNER => d("RELEASE_LOCKOWNER", false, false, false),
        _ => d("other", false, false, false),
    }
}

/// Ops that RFC 8881 forbids in minor version 1 (answer NFS4ERR_NOTSUPP).
pub fn v40_only(op: nfs_opnum4) -> bool {
    use nfs_opnum4::*;
    matches!(
        op,
        OP_OPEN_CONFIRM | OP_RENEW | OP_SETCLIENTID | OP_SETCLIENTID_CONFIRM | OP_RELEASE_LOCKOWNER
    )
}
