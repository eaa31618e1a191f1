//! Client errors: every NFS status keeps the op and its index in the COMPOUND.

use txnfs_proto::nfs4::nfsstat4;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered this op with an error status.
    #[error("{op} failed: {} ({status:?})", message(*status))]
    Nfs {
        op: &'static str,
        /// Index of the op in the COMPOUND (SEQUENCE not counted).
        index: usize,
        status: nfsstat4,
    },
    #[error("RPC error: {0}")]
    Rpc(#[from] txnfs_rpc::RpcError),
    #[error("cannot reach {addr}: {msg}")]
    Unreachable { addr: String, msg: String },
    /// Something answers at the address, but not as an NFSv4 server: it closed the
    /// connection, sent what is not an RPC reply, refused the program or said nothing
    /// within [`crate::client::PROBE_TIMEOUT`].
    #[error("not an NFS server at {addr}: {why}")]
    NotNfsServer { addr: String, why: String },
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    /// A READ_PLUS reply that does not describe the range asked for (the reader falls
    /// back to READ).
    #[error("the server's READ_PLUS reply is malformed: {0}")]
    BadReadPlus(String),
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    #[error("invalid path {0:?}")]
    BadPath(String),
    #[error("{0}")]
    Local(String),
    /// A transactional COMPOUND was answered PROC_UNAVAIL: the server never ran it.
    #[error(
        "the server does not run transactional COMPOUNDs (not txnfs, or txnfs --no-txn); \
         nothing was changed"
    )]
    TxnUnsupported,
    /// The export a transaction touched has no `txn` layer (NFS4ERR_NOTSUPP from an op
    /// that is allowed in transactions); the server ran nothing of it.
    #[error(
        "this export does not run transactions (NFS4ERR_NOTSUPP at op {index}, {op}); \
         nothing was changed"
    )]
    TxnExportUnsupported { op: &'static str, index: usize },
    /// An op that transactions cannot hold (found before sending).
    #[error("{op} (op {index}) cannot be part of a transaction; nothing was sent")]
    TxnOpNotAllowed { op: &'static str, index: usize },
    /// The transaction does not fit (found before sending): one COMPOUND, for
    /// [`crate::Client::compound_txn`] (`unit`: "ops", "bytes", "bytes of reply"); the
    /// server's bound on the COMPOUNDs of one transaction (max_txn_compounds), for a
    /// [`crate::Transaction`] (`unit`: "COMPOUNDs").
    #[error("transaction too large ({n} {unit}, the limit is {max}); nothing was sent")]
    TxnTooLarge {
        n: usize,
        max: usize,
        /// "ops", "bytes", "bytes of reply" or "COMPOUNDs".
        unit: &'static str,
    },
    /// One step of a transaction does not fit one COMPOUND (a step is never split
    /// across the COMPOUNDs of a transaction); found before sending.
    #[error(
        "transaction step {step} ({what}) does not fit one COMPOUND ({n} {unit}, the \
         server allows {max}); nothing was sent"
    )]
    TxnStepTooLarge {
        step: usize,
        what: String,
        n: usize,
        max: usize,
        unit: &'static str,
    },
    /// The server no longer had the transaction of several COMPOUNDs open when its
    /// next COMPOUND came (it stayed open longer than the lease, the session was lost,
    /// or its connection closed, ADR 0036): it was rolled back, each time it was
    /// started again.
    #[error(
        "the server rolled the transaction back before its COMPOUND {compound} (open \
         longer than the lease, its session lost, or its connection broken); nothing was \
         changed"
    )]
    TxnClosed { compound: usize },
    /// A COMPOUND of a transaction of several got no usable reply, and it was not the
    /// committing one: the transaction did not commit (it was aborted, or the server
    /// rolls it back when it times out).
    #[error("the transaction was not committed (nothing was changed): {0}")]
    TxnNotCommitted(Box<ClientError>),
    /// A step of a transaction failed: the server rolled every step back.
    #[error(
        "transaction step {step} ({what}) failed: {op}: {} ({status:?}); \
         nothing was changed",
        message(*status)
    )]
    TxnStepFailed {
        /// Index of the step (0-based, in the order the steps were added).
        step: usize,
        /// The step, e.g. `remove "a/b"`.
        what: String,
        op: &'static str,
        status: nfsstat4,
    },
    /// Concurrent transactions kept conflicting (NFS4ERR_DELAY, each try rolled back).
    #[error(
        "the transaction conflicted with others {tries} times in a row (NFS4ERR_DELAY); \
         nothing was changed, try again later"
    )]
    TxnConflict { tries: u32 },
    /// The server no longer knows the session a re-sent request was sent on (it
    /// restarted without persistent sessions): what the first sending did is unknown.
    #[error(
        "the server lost the session of a re-sent request ({0:?}); its first sending may have run"
    )]
    SessionLost(nfsstat4),
    /// The transaction was sent but no usable reply came back: it may or may not have
    /// committed (every step or none, never part of it).
    #[error("the transaction's outcome is unknown (all of it or none of it happened): {0}")]
    TxnOutcomeUnknown(Box<ClientError>),
}

impl ClientError {
    /// The NFS status, when the failure is one.
    pub fn status(&self) -> Option<nfsstat4> {
        match self {
            ClientError::Nfs { status, .. } | ClientError::TxnStepFailed { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }

    pub fn nfs(op: &'static str, index: usize, status: nfsstat4) -> Self {
        ClientError::Nfs { op, index, status }
    }
}

/// A coreutils-style description of an NFS status ("No such file or directory").
pub fn message(s: nfsstat4) -> &'static str {
    use nfsstat4::*;
    match s {
        NFS4_OK => "Success",
        NFS4ERR_PERM => "Operation not permitted",
        NFS4ERR_NOENT => "No such file or directory",
        NFS4ERR_IO => "Input/output error",
        NFS4ERR_NXIO => "No such device or address",
        NFS4ERR_ACCESS => "Permission denied",
        NFS4ERR_EXIST => "File exists",
        NFS4ERR_XDEV => "Invalid cross-device link",
        NFS4ERR_NOTDIR => "Not a directory",
        NFS4ERR_ISDIR => "Is a directory",
        NFS4ERR_INVAL => "Invalid argument",
        NFS4ERR_FBIG => "File too large",
        NFS4ERR_NOSPC => "No space left on device",
        NFS4ERR_ROFS => "Read-only file system",
        NFS4ERR_MLINK => "Too many links",
        NFS4ERR_NAMETOOLONG => "File name too long",
        NFS4ERR_NOTEMPTY => "Directory not empty",
        NFS4ERR_DQUOT => "Disk quota exceeded",
        NFS4ERR_STALE => "Stale file handle",
        NFS4ERR_BADNAME => "Invalid file name",
        NFS4ERR_SYMLINK => "Is a symbolic link",
        NFS4ERR_DENIED | NFS4ERR_LOCKED => "Resource temporarily unavailable",
        NFS4ERR_SHARE_DENIED => "Text file busy",
        NFS4ERR_DELAY | NFS4ERR_GRACE => "Try again later",
        NFS4ERR_NOTSUPP => "Operation not supported",
        _ => "Remote I/O error",
    }
}
