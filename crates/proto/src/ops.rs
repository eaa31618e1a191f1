//! Protocol facts about each NFSv4 operation that both ends need (ADR 0007): its name,
//! whether it changes server state, whether a retransmission must be answered from the
//! reply cache, whether it may run without a session, whether it needs a current
//! filehandle, and in which minor versions it exists. The server's op table
//! (`txnfs-server`, `compound::optable`) pairs each of these with its handler; the client
//! reads them for statistics names and for `sa_cachethis`.
//!
//! The match in [`info`] is exhaustive: an op added to `spec/nfs4.x` does not compile
//! until it is described here.

use crate::nfs4::nfs_opnum4;

/// The minor versions an operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minors {
    /// Only NFSv4.0: "MUST NOT be used" in a v4.1 COMPOUND (RFC 8881 §18.35 ff.: the
    /// server answers NFS4ERR_NOTSUPP).
    Only0,
    /// Defined from this minor version on (0 for the base protocol, 1 for RFC 8881,
    /// 2 for RFC 7862 and RFC 8276).
    Since(u32),
}

/// What the protocol says about one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub op: nfs_opnum4,
    /// Changes server state (files, opens, locks, sessions): a server must decide
    /// whether its reply fits before running it, because it cannot be undone.
    pub modifies: bool,
    /// Not idempotent: running it twice gives a different answer (a second CREATE
    /// fails EXIST, a second CLOSE fails BAD_STATEID), so a retransmission must be
    /// answered from the reply cache and a client asks for caching (sa_cachethis).
    pub cache_reply: bool,
    /// May be the only op of a COMPOUND that does not start with SEQUENCE
    /// (RFC 8881 §2.10.6.2 and the op descriptions in §18).
    pub sessionless: bool,
    /// Fails with NFS4ERR_NOFILEHANDLE when there is no current filehandle.
    pub needs_fh: bool,
    pub minors: Minors,
    /// A transactional COMPOUND (ADR 0021) may hold it: its effects live in the backend,
    /// where the `txn` layer can undo them, or it only reads or moves filehandles.
    /// Anything else (locks, delegations, session and client management) changes server
    /// state that an abort could not take back: the server answers NFS4ERR_NOTSUPP, and
    /// the client refuses to send it.
    pub in_txn: bool,
}

impl OpInfo {
    const fn new(op: nfs_opnum4, minors: Minors) -> Self {
        OpInfo {
            op,
            modifies: false,
            cache_reply: false,
            sessionless: false,
            needs_fh: false,
            minors,
            in_txn: false,
        }
    }
    const fn fh(mut self) -> Self {
        self.needs_fh = true;
        self
    }
    const fn modifies(mut self) -> Self {
        self.modifies = true;
        self
    }
    /// Modifies and is not idempotent.
    const fn once(mut self) -> Self {
        self.modifies = true;
        self.cache_reply = true;
        self
    }
    const fn txn(mut self) -> Self {
        self.in_txn = true;
        self
    }
    const fn sessionless(mut self) -> Self {
        self.sessionless = true;
        self
    }

    /// The op's name without the `OP_` prefix ("READ", "CREATE_SESSION").
    pub fn name(&self) -> &'static str {
        op_name(self.op)
    }

    /// Whether the op exists in `minor`.
    pub fn in_minor(&self, minor: u32) -> bool {
        match self.minors {
            Minors::Only0 => minor == 0,
            Minors::Since(first) => minor >= first,
        }
    }

    /// Whether the op is only defined by a later minor version than `minor` (an NFSv4.2
    /// op in a v4.1 COMPOUND): for that minor version its opcode is undefined, so it is
    /// illegal there (RFC 8881 §15.2; knfsd's `nfsd4_opnum_in_range`), unlike a v4.0 op
    /// that v4.1 retired, which is NOTSUPP.
    pub fn defined_after(&self, minor: u32) -> bool {
        matches!(self.minors, Minors::Since(first) if first > minor)
    }
}

/// The op's name as RFC 8881 writes it, without the `OP_` prefix.
pub fn op_name(op: nfs_opnum4) -> &'static str {
    let n = op.name();
    n.strip_prefix("OP_").unwrap_or(n)
}

/// Whether a transactional COMPOUND may hold `op` ([`OpInfo::in_txn`]).
pub fn allowed_in_txn(op: nfs_opnum4) -> bool {
    info(op).in_txn
}

/// The protocol facts about `op` (a `const fn`: the server's op table holds them).
pub const fn info(op: nfs_opnum4) -> OpInfo {
    use nfs_opnum4::*;
    use Minors::{Only0, Since};
    // (Copies: each arm builds on one.)
    let v0 = OpInfo::new(op, Since(0));
    let v1 = OpInfo::new(op, Since(1));
    let v2 = OpInfo::new(op, Since(2));
    let only0 = OpInfo::new(op, Only0);
    match op {
        OP_ACCESS => v0.fh().txn(),
        OP_CLOSE => v0.fh().once().txn(),
        OP_COMMIT => v0.fh().modifies().txn(),
        OP_CREATE => v0.fh().once().txn(),
        OP_DELEGPURGE => v0.once(),
        OP_DELEGRETURN => v0.fh().once(),
        OP_GETATTR => v0.fh().txn(),
        OP_GETFH => v0.fh().txn(),
        OP_LINK => v0.fh().once().txn(),
        OP_LOCK => v0.fh().once(),
        OP_LOCKT => v0.fh(),
        OP_LOCKU => v0.fh().once(),
        OP_LOOKUP => v0.fh().txn(),
        OP_LOOKUPP => v0.fh().txn(),
        OP_NVERIFY => v0.fh().txn(),
        OP_OPEN => v0.fh().once().txn(),
        OP_OPENATTR => v0.fh(),
        OP_OPEN_CONFIRM => only0.fh().once(),
        OP_OPEN_DOWNGRADE => v0.fh().once(),
        OP_PUTFH => v0.txn(),
        OP_PUTPUBFH => v0.txn(),
        OP_PUTROOTFH => v0.txn(),
        OP_READ => v0.fh().txn(),
        OP_READDIR => v0.fh().txn(),
        OP_READLINK => v0.fh().txn(),
        OP_REMOVE => v0.fh().once().txn(),
        OP_RENAME => v0.fh().once().txn(),
        OP_RENEW => only0.modifies(),
        OP_RESTOREFH => v0.txn(),
        OP_SAVEFH => v0.fh().txn(),
        OP_SECINFO => v0.fh(),
        OP_SETATTR => v0.fh().once().txn(),
        OP_SETCLIENTID => only0.once(),
        OP_SETCLIENTID_CONFIRM => only0.once(),
        OP_VERIFY => v0.fh().txn(),
        OP_WRITE => v0.fh().modifies().txn(),
        OP_RELEASE_LOCKOWNER => only0.once(),
        OP_BACKCHANNEL_CTL => v1.modifies(),
        OP_BIND_CONN_TO_SESSION => v1.modifies().sessionless(),
        OP_EXCHANGE_ID => v1.modifies().sessionless(),
        OP_CREATE_SESSION => v1.modifies().sessionless(),
        OP_DESTROY_SESSION => v1.modifies().sessionless(),
        OP_FREE_STATEID => v1.once(),
        OP_GET_DIR_DELEGATION => v1.fh().modifies(),
        OP_GETDEVICEINFO => v1,
        OP_GETDEVICELIST => v1.fh(),
        OP_LAYOUTCOMMIT => v1.fh().modifies(),
        OP_LAYOUTGET => v1.fh().modifies(),
        OP_LAYOUTRETURN => v1.fh().once(),
        OP_SECINFO_NO_NAME => v1.fh().txn(),
        OP_SEQUENCE => v1.txn(),
        OP_SET_SSV => v1.modifies(),
        OP_TEST_STATEID => v1,
        OP_WANT_DELEGATION => v1.modifies(),
        OP_DESTROY_CLIENTID => v1.modifies().sessionless(),
        OP_RECLAIM_COMPLETE => v1.once(),
        OP_ALLOCATE => v2.fh().modifies().txn(),
        OP_COPY => v2.fh().modifies().txn(),
        OP_COPY_NOTIFY => v2.fh().modifies(),
        OP_DEALLOCATE => v2.fh().modifies().txn(),
        OP_IO_ADVISE => v2.fh(),
        OP_LAYOUTERROR => v2.fh().modifies(),
        OP_LAYOUTSTATS => v2.fh().modifies(),
        OP_OFFLOAD_CANCEL => v2.fh().modifies(),
        OP_OFFLOAD_STATUS => v2.fh(),
        OP_READ_PLUS => v2.fh().txn(),
        OP_SEEK => v2.fh().txn(),
        OP_WRITE_SAME => v2.fh().modifies(),
        OP_CLONE => v2.fh().modifies().txn(),
        OP_GETXATTR => v2.fh(),
        OP_SETXATTR => v2.fh().once(),
        OP_LISTXATTRS => v2.fh(),
        OP_REMOVEXATTR => v2.fh().once(),
        OP_ILLEGAL => v0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_described_under_its_own_number() {
        assert_eq!(nfs_opnum4::VARIANTS.len(), 74);
        for &op in nfs_opnum4::VARIANTS {
            assert_eq!(info(op).op, op);
            assert!(!op_name(op).starts_with("OP_"));
        }
        assert_eq!(op_name(nfs_opnum4::OP_CREATE_SESSION), "CREATE_SESSION");
    }

    #[test]
    fn protocol_facts() {
        use nfs_opnum4::*;
        // DELEGRETURN and DELEGPURGE are v4.1 ops too; only these five are v4.0-only.
        let only0: Vec<_> = nfs_opnum4::VARIANTS
            .iter()
            .filter(|&&o| info(o).minors == Minors::Only0)
            .map(|&o| op_name(o))
            .collect();
        assert_eq!(
            only0,
            [
                "OPEN_CONFIRM",
                "RENEW",
                "SETCLIENTID",
                "SETCLIENTID_CONFIRM",
                "RELEASE_LOCKOWNER"
            ]
        );
        assert!(info(OP_DELEGRETURN).in_minor(1));
        assert!(!info(OP_COPY).in_minor(1) && info(OP_COPY).in_minor(2));
        // Every op that must not run twice changes state.
        for &op in nfs_opnum4::VARIANTS {
            let i = info(op);
            assert!(!i.cache_reply || i.modifies, "{}", i.name());
            assert!(!(i.sessionless && i.needs_fh), "{}", i.name());
        }
        assert!(!info(OP_WRITE).cache_reply && info(OP_WRITE).modifies);
        assert!(!info(OP_PUTFH).needs_fh && info(OP_SAVEFH).needs_fh);
    }
}
