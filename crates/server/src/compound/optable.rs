//! The one operation table (ADR 0007; as Linux nfsd's `nfsd4_ops[]`), indexed by opnum.
//!
//! Each entry pairs the protocol facts of `txnfs_proto::ops::info` (name, modifies,
//! sessionless, needs a current filehandle, minor versions) with what only the server
//! knows: the handler, whether the op may wait on storage, what it does to the current
//! stateid, a bound on its reply's size, and what a failed result carries besides its
//! status. The executor (`compound::execute`) is a loop over this table; adding an op
//! means one entry here plus one handler.

use super::{Compound, OpError, OpResult};
use crate::nfs::{nfs_argop4 as A, nfs_opnum4, nfs_resop4 as R, nfsstat4, stateid4};
use crate::ops::{attr, deleg, dir, fh, file, lock, session, v40, v42};
use crate::placement::Blocking;
use bytes::{BufMut, BytesMut};
use txnfs_proto::ops::OpInfo;

/// Runs one op on its decoded arguments.
pub type Handler = fn(&mut Compound, A) -> OpResult;

/// Whether an op may wait on storage, which decides where its COMPOUND runs
/// (`crate::placement`, ADR 0004).
#[derive(Clone, Copy)]
pub enum MayBlock {
    Never,
    /// A namespace change: inline while such changes are quick.
    Metadata,
    Always,
    /// Depends on the arguments (READ count, WRITE stability and size, SETATTR size,
    /// OPEN with create).
    When(fn(&A) -> Blocking),
}

/// What a successful op does to the current stateid (RFC 8881 §16.2.3.1.2). The
/// executor applies it, so handlers never touch `cur_sid`/`saved_sid` for this.
#[derive(Clone, Copy)]
pub enum CurrentStateid {
    Keeps,
    /// The current filehandle changed (or the state is gone): using the current stateid
    /// afterwards fails NFS4ERR_BAD_STATEID until another op sets one.
    Clears,
    /// The op returned a stateid, which becomes current.
    Sets(fn(&R) -> Option<stateid4>),
    /// SAVEFH: the saved stateid travels with the saved filehandle.
    Saves,
    /// RESTOREFH.
    Restores,
}

/// What a failed result carries after its status.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody {
    Nothing,
    /// SETATTR4res: the attrsset bitmap, empty.
    EmptyBitmap,
}

#[derive(Clone, Copy)]
pub struct OpEntry {
    pub op: nfs_opnum4,
    /// The protocol facts of `op`, computed with the table (asked several times per op).
    info: OpInfo,
    /// `None`: not implemented (NFS4ERR_NOTSUPP).
    pub handler: Option<Handler>,
    pub may_block: MayBlock,
    pub stateid: CurrentStateid,
    pub error_body: ErrorBody,
}

impl OpEntry {
    /// An unimplemented op: answered NFS4ERR_NOTSUPP without touching storage.
    const fn new(op: nfs_opnum4) -> Self {
        OpEntry {
            op,
            info: txnfs_proto::ops::info(op),
            handler: None,
            may_block: MayBlock::Never,
            stateid: CurrentStateid::Keeps,
            error_body: ErrorBody::Nothing,
        }
    }
    const fn run(mut self, h: Handler) -> Self {
        self.handler = Some(h);
        self
    }
    const fn blocks(mut self, b: MayBlock) -> Self {
        self.may_block = b;
        self
    }
    const fn sid(mut self, s: CurrentStateid) -> Self {
        self.stateid = s;
        self
    }
    const fn on_error(mut self, e: ErrorBody) -> Self {
        self.error_body = e;
        self
    }

    /// The protocol facts of this op.
    pub fn info(&self) -> OpInfo {
        self.info
    }

    pub fn may_block(&self, arg: &A) -> Blocking {
        match self.may_block {
            MayBlock::Never => Blocking::No,
            MayBlock::Metadata => Blocking::Metadata,
            MayBlock::Always => Blocking::Yes,
            MayBlock::When(f) => f(arg),
        }
    }

    /// A bound on the encoded size of the op's result (opnum and status included),
    /// checked before a state-modifying op runs: the one both ends use
    /// (`txnfs_proto::reply_bound`).
    pub fn reply_bound(&self, arg: &A) -> usize {
        txnfs_proto::reply_bound::reply_bound(arg)
    }

    /// Encode this op's failed result.
    pub fn encode_error(&self, out: &mut BytesMut, status: nfsstat4) {
        encode_status(out, self.op as u32, status);
        if self.error_body == ErrorBody::EmptyBitmap {
            out.put_u32(0);
        }
    }
}

/// A result that is only opnum and status.
pub fn encode_status(out: &mut BytesMut, op: u32, status: nfsstat4) {
    out.put_u32(op);
    out.put_i32(status as i32);
}

/// READs and unstable WRITEs up to this size run inline (`crate::placement`).
const MAX_IO: usize = crate::placement::INLINE_IO_BYTES;

/// Builds a handler from a pattern on the decoded arguments. A mismatch (the table and
/// the decoder disagree) is a server bug: SERVERFAULT, never a panic.
macro_rules! handler {
    // An op whose arguments are boxed (`NFS4_BOXED_ARMS` in the proto crate's build.rs):
    // the handler takes them unboxed.
    ($v:ident(*$a:ident) => $body:expr) => {{
        fn h(c: &mut Compound, arg: A) -> OpResult {
            match arg {
                A::$v($a) => $body(c, *$a),
                _ => Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT)),
            }
        }
        h as Handler
    }};
    ($v:ident($a:ident) => $body:expr) => {{
        fn h(c: &mut Compound, arg: A) -> OpResult {
            match arg {
                A::$v($a) => $body(c, $a),
                _ => Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT)),
            }
        }
        h as Handler
    }};
    ($v:ident => $body:expr) => {{
        fn h(c: &mut Compound, arg: A) -> OpResult {
            match arg {
                A::$v => $body(c),
                _ => Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT)),
            }
        }
        h as Handler
    }};
}

fn blocks_if(b: bool) -> Blocking {
    if b {
        Blocking::Yes
    } else {
        Blocking::No
    }
}

fn read_blocks(a: &A) -> Blocking {
    match a {
        A::OP_READ(r) if (r.count as usize) <= MAX_IO => Blocking::No,
        A::OP_READ(_) => Blocking::LargeIo,
        _ => Blocking::Yes,
    }
}

fn write_blocks(a: &A) -> Blocking {
    match a {
        A::OP_WRITE(w) if w.stable == crate::nfs::stable_how4::UNSTABLE4 => {
            if w.data.len() <= MAX_IO {
                Blocking::No
            } else {
                Blocking::LargeIo
            }
        }
        A::OP_WRITE(w) if w.data.len() <= MAX_IO => Blocking::Sync,
        _ => Blocking::Yes,
    }
}

/// Truncating can free many blocks; other attribute changes are quick.
fn setattr_blocks(a: &A) -> Blocking {
    const SIZE_BIT: u32 = 1 << txnfs_attr::fattr::SIZE;
    blocks_if(match a {
        A::OP_SETATTR(sa) => sa
            .obj_attributes
            .attrmask
            .first()
            .is_some_and(|w| w & SIZE_BIT != 0),
        _ => true,
    })
}

/// An OPEN that may create the file changes the namespace; other OPENs look a name up.
fn open_blocks(a: &A) -> Blocking {
    match a {
        A::OP_OPEN(o) if matches!(o.openhow, crate::nfs::openflag4::default(_)) => Blocking::No,
        _ => Blocking::Metadata,
    }
}

fn open_sid(r: &R) -> Option<stateid4> {
    match r {
        R::OP_OPEN(crate::nfs::OPEN4res::NFS4_OK(ok)) => Some(ok.stateid.clone()),
        _ => None,
    }
}

fn open_downgrade_sid(r: &R) -> Option<stateid4> {
    match r {
        R::OP_OPEN_DOWNGRADE(crate::nfs::OPEN_DOWNGRADE4res::NFS4_OK(ok)) => {
            Some(ok.open_stateid.clone())
        }
        _ => None,
    }
}

fn lock_sid(r: &R) -> Option<stateid4> {
    match r {
        R::OP_LOCK(crate::nfs::LOCK4res::NFS4_OK(ok)) => Some(ok.lock_stateid.clone()),
        _ => None,
    }
}

fn locku_sid(r: &R) -> Option<stateid4> {
    match r {
        R::OP_LOCKU(crate::nfs::LOCKU4res::NFS4_OK(sid)) => Some(sid.clone()),
        _ => None,
    }
}

use nfs_opnum4::*;
use CurrentStateid::{Clears, Restores, Saves, Sets};
use MayBlock::{Always, Metadata, When};

const fn e(op: nfs_opnum4) -> OpEntry {
    OpEntry::new(op)
}

/// The lowest opnum (OP_ACCESS); `TABLE[i]` describes opnum `FIRST + i`.
const FIRST: usize = 3;

/// Every op of `nfs_opnum4` but OP_ILLEGAL, in opnum order.
static TABLE: [OpEntry; 73] = [
    e(OP_ACCESS).run(handler!(OP_ACCESS(a) => |c, a| attr::access(c, &a))),
    e(OP_CLOSE)
        .run(handler!(OP_CLOSE(a) => |c, a| file::close(c, &a)))
        .sid(Clears),
    e(OP_COMMIT)
        .run(handler!(OP_COMMIT(a) => |c, a| file::commit(c, &a)))
        .blocks(When(|_| Blocking::Sync)),
    e(OP_CREATE)
        .run(handler!(OP_CREATE(*a) => dir::create))
        .blocks(Metadata)
        .sid(Clears),
    e(OP_DELEGPURGE).run(handler!(OP_DELEGPURGE(a) => |c, a| deleg::delegpurge(c, &a))),
    e(OP_DELEGRETURN).run(handler!(OP_DELEGRETURN(a) => |c, a| deleg::delegreturn(c, &a))),
    e(OP_GETATTR).run(handler!(OP_GETATTR(a) => |c, a| attr::getattr(c, &a))),
    e(OP_GETFH).run(handler!(OP_GETFH => fh::getfh)),
    e(OP_LINK)
        .run(handler!(OP_LINK(a) => |c, a| dir::link(c, &a)))
        .blocks(Metadata),
    e(OP_LOCK)
        .run(handler!(OP_LOCK(*a) => |c, a| lock::lock(c, &a)))
        .sid(Sets(lock_sid)),
    e(OP_LOCKT).run(handler!(OP_LOCKT(a) => |c, a| lock::lockt(c, &a))),
    e(OP_LOCKU)
        .run(handler!(OP_LOCKU(a) => |c, a| lock::locku(c, &a)))
        .sid(Sets(locku_sid)),
    e(OP_LOOKUP)
        .run(handler!(OP_LOOKUP(a) => |c, a| fh::lookup(c, &a)))
        .sid(Clears),
    e(OP_LOOKUPP)
        .run(handler!(OP_LOOKUPP => fh::lookupp))
        .sid(Clears),
    e(OP_NVERIFY).run(handler!(OP_NVERIFY(a) => |c, a| attr::nverify(c, &a))),
    e(OP_OPEN)
        .run(handler!(OP_OPEN(*a) => file::open))
        .blocks(When(open_blocks))
        .sid(Sets(open_sid)),
    e(OP_OPENATTR).sid(Clears),
    e(OP_OPEN_CONFIRM).run(handler!(OP_OPEN_CONFIRM(a) => |c, a| v40::open_confirm(c, &a))),
    e(OP_OPEN_DOWNGRADE)
        .run(handler!(OP_OPEN_DOWNGRADE(a) => |c, a| file::open_downgrade(c, &a)))
        .sid(Sets(open_downgrade_sid)),
    e(OP_PUTFH)
        .run(handler!(OP_PUTFH(a) => |c, a| fh::putfh(c, &a)))
        .sid(Clears),
    e(OP_PUTPUBFH)
        .run(handler!(OP_PUTPUBFH => fh::putpubfh))
        .sid(Clears),
    e(OP_PUTROOTFH)
        .run(handler!(OP_PUTROOTFH => fh::putrootfh))
        .sid(Clears),
    // Small READs inline; one that must wait for the disk moves off the worker in the
    // backend (`Backend::read`, the local backend's `RWF_NOWAIT`; ADR 0040). Large ones
    // inline within a bound (`placement::MetadataPace::place`): inline they measured
    // faster alone but slower four at a time.
    e(OP_READ)
        .run(handler!(OP_READ(a) => |c, a| file::read(c, &a)))
        .blocks(When(read_blocks)),
    e(OP_READDIR).run(handler!(OP_READDIR(a) => |c, a| dir::readdir(c, &a))),
    e(OP_READLINK).run(handler!(OP_READLINK => dir::readlink)),
    e(OP_REMOVE)
        .run(handler!(OP_REMOVE(a) => |c, a| dir::remove(c, &a)))
        .blocks(Metadata),
    e(OP_RENAME)
        .run(handler!(OP_RENAME(a) => |c, a| dir::rename(c, &a)))
        .blocks(Metadata),
    e(OP_RENEW).run(handler!(OP_RENEW(a) => |c, a| v40::renew(c, &a))),
    e(OP_RESTOREFH)
        .run(handler!(OP_RESTOREFH => fh::restorefh))
        .sid(Restores),
    e(OP_SAVEFH)
        .run(handler!(OP_SAVEFH => fh::savefh))
        .sid(Saves),
    e(OP_SECINFO).run(handler!(OP_SECINFO(a) => |c, a| fh::secinfo(c, &a))),
    e(OP_SETATTR)
        // SETATTR, then CB_NOTIFY of the attribute change (`crate::ops::notify`).
        .run(handler!(OP_SETATTR(*a) => |c, a| crate::ops::notify::setattr(c, &a)))
        .blocks(When(setattr_blocks))
        .on_error(ErrorBody::EmptyBitmap),
    e(OP_SETCLIENTID)
        .run(handler!(OP_SETCLIENTID(*a) => |c, a| v40::setclientid(c, &a)))
        .blocks(Always),
    e(OP_SETCLIENTID_CONFIRM)
        .run(handler!(OP_SETCLIENTID_CONFIRM(a) => |c, a| v40::setclientid_confirm(c, &a)))
        .blocks(Always),
    e(OP_VERIFY).run(handler!(OP_VERIFY(a) => |c, a| attr::verify(c, &a))),
    e(OP_WRITE)
        .run(handler!(OP_WRITE(a) => file::write))
        .blocks(When(write_blocks)),
    e(OP_RELEASE_LOCKOWNER)
        .run(handler!(OP_RELEASE_LOCKOWNER(a) => |c, a| v40::release_lockowner(c, &a))),
    e(OP_BACKCHANNEL_CTL)
        .run(handler!(OP_BACKCHANNEL_CTL(a) => |c, a| session::backchannel_ctl(c, &a))),
    e(OP_BIND_CONN_TO_SESSION)
        .run(handler!(OP_BIND_CONN_TO_SESSION(a) => |c, a| session::bind_conn_to_session(c, &a)))
        .blocks(Always),
    e(OP_EXCHANGE_ID)
        .run(handler!(OP_EXCHANGE_ID(*a) => |c, a| session::exchange_id(c, &a)))
        .blocks(Always),
    e(OP_CREATE_SESSION)
        .run(handler!(OP_CREATE_SESSION(*a) => |c, a| session::create_session(c, &a)))
        .blocks(Always),
    e(OP_DESTROY_SESSION)
        .run(handler!(OP_DESTROY_SESSION(a) => |c, a| session::destroy_session(c, &a))),
    e(OP_FREE_STATEID).run(handler!(OP_FREE_STATEID(a) => |c, a| lock::free_stateid(c, &a))),
    e(OP_GET_DIR_DELEGATION)
        .run(handler!(OP_GET_DIR_DELEGATION(*a) => |c, a| deleg::get_dir_delegation(c, &a))),
    e(OP_GETDEVICEINFO),
    e(OP_GETDEVICELIST),
    e(OP_LAYOUTCOMMIT),
    e(OP_LAYOUTGET),
    e(OP_LAYOUTRETURN),
    e(OP_SECINFO_NO_NAME).run(handler!(OP_SECINFO_NO_NAME(a) => |c, a| fh::secinfo_no_name(c, &a))),
    // Run by the executor itself (position rules, slot, replay): see `compound::execute`.
    e(OP_SEQUENCE),
    e(OP_SET_SSV).run(handler!(OP_SET_SSV(a) => |c, a| session::set_ssv(c, &a))),
    e(OP_TEST_STATEID).run(handler!(OP_TEST_STATEID(a) => |c, a| lock::test_stateid(c, &a))),
    e(OP_WANT_DELEGATION)
        .run(handler!(OP_WANT_DELEGATION(a) => |c, a| deleg::want_delegation(c, &a))),
    e(OP_DESTROY_CLIENTID)
        .run(handler!(OP_DESTROY_CLIENTID(a) => |c, a| session::destroy_clientid(c, &a)))
        .blocks(Always),
    e(OP_RECLAIM_COMPLETE)
        .run(handler!(OP_RECLAIM_COMPLETE(a) => |c, a| session::reclaim_complete(c, &a))),
    e(OP_ALLOCATE)
        .run(handler!(OP_ALLOCATE(a) => |c, a| v42::allocate(c, &a)))
        .blocks(Always),
    e(OP_COPY)
        .run(handler!(OP_COPY(*a) => |c, a| v42::copy(c, &a)))
        .blocks(Always),
    // Inter-server copy is not offered (ADR 0025): NOTSUPP.
    e(OP_COPY_NOTIFY),
    e(OP_DEALLOCATE)
        .run(handler!(OP_DEALLOCATE(a) => |c, a| v42::deallocate(c, &a)))
        .blocks(Always),
    e(OP_IO_ADVISE).run(handler!(OP_IO_ADVISE(a) => |c, a| v42::io_advise(c, &a))),
    // pNFS is not offered: the LAYOUT* ops and GETDEVICE* answer NOTSUPP.
    e(OP_LAYOUTERROR),
    e(OP_LAYOUTSTATS),
    e(OP_OFFLOAD_CANCEL).run(handler!(OP_OFFLOAD_CANCEL(a) => |c, a| v42::offload_cancel(c, &a))),
    e(OP_OFFLOAD_STATUS).run(handler!(OP_OFFLOAD_STATUS(a) => |c, a| v42::offload_status(c, &a))),
    e(OP_READ_PLUS)
        .run(handler!(OP_READ_PLUS(a) => |c, a| v42::read_plus(c, &a)))
        .blocks(Always),
    e(OP_SEEK).run(handler!(OP_SEEK(a) => |c, a| v42::seek(c, &a))),
    // WRITE_SAME (application data blocks) is optional and not offered.
    e(OP_WRITE_SAME),
    e(OP_CLONE)
        .run(handler!(OP_CLONE(a) => |c, a| v42::clone(c, &a)))
        .blocks(Always),
    e(OP_GETXATTR).run(handler!(OP_GETXATTR(a) => |c, a| v42::getxattr(c, &a))),
    e(OP_SETXATTR)
        .run(handler!(OP_SETXATTR(*a) => |c, a| v42::setxattr(c, &a)))
        .blocks(Metadata),
    e(OP_LISTXATTRS).run(handler!(OP_LISTXATTRS(a) => |c, a| v42::listxattrs(c, &a))),
    e(OP_REMOVEXATTR)
        .run(handler!(OP_REMOVEXATTR(a) => |c, a| v42::removexattr(c, &a)))
        .blocks(Metadata),
];

fn illegal(_c: &mut Compound, _a: A) -> OpResult {
    Err(OpError::Status(nfsstat4::NFS4ERR_OP_ILLEGAL))
}

/// OP_ILLEGAL sent as such answers like an unknown opnum. `compound::execute` answers
/// both before it consults the table (so that the position rules never apply to
/// them); this entry keeps the table total and the handler agrees with the executor.
static ILLEGAL: OpEntry = e(OP_ILLEGAL).run(illegal);

/// The table entry of `op`; `None` only if the table misses an op of `nfs_opnum4` (a
/// bug the tests catch).
pub fn entry(op: nfs_opnum4) -> Option<&'static OpEntry> {
    if op == OP_ILLEGAL {
        return Some(&ILLEGAL);
    }
    (op as usize)
        .checked_sub(FIRST)
        .and_then(|i| TABLE.get(i))
        .filter(|e| e.op == op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_of_the_specification_has_its_entry() {
        for &op in nfs_opnum4::VARIANTS {
            let e = entry(op).unwrap_or_else(|| panic!("no table entry for {op:?}"));
            assert_eq!(e.op, op);
        }
        for (i, e) in TABLE.iter().enumerate() {
            assert_eq!(e.op as usize, FIRST + i, "{:?} is out of order", e.op);
        }
    }

    #[test]
    fn current_stateid_rules_follow_rfc_8881() {
        for &op in nfs_opnum4::VARIANTS {
            let Some(e) = entry(op) else { continue };
            let want = match op {
                // Ops that replace the current filehandle without returning a stateid.
                OP_PUTFH | OP_PUTPUBFH | OP_PUTROOTFH | OP_LOOKUP | OP_LOOKUPP | OP_CREATE
                | OP_OPENATTR | OP_CLOSE => "clears",
                OP_OPEN | OP_OPEN_DOWNGRADE | OP_LOCK | OP_LOCKU => "sets",
                OP_SAVEFH => "saves",
                OP_RESTOREFH => "restores",
                _ => "keeps",
            };
            let got = match e.stateid {
                CurrentStateid::Keeps => "keeps",
                Clears => "clears",
                Sets(_) => "sets",
                Saves => "saves",
                Restores => "restores",
            };
            assert_eq!(got, want, "{op:?}");
        }
    }

    #[test]
    fn only_setattr_carries_a_body_on_error() {
        for &op in nfs_opnum4::VARIANTS {
            let mut out = BytesMut::new();
            entry(op)
                .unwrap()
                .encode_error(&mut out, nfsstat4::NFS4ERR_PERM);
            let want = if op == OP_SETATTR { 12 } else { 8 };
            assert_eq!(out.len(), want, "{op:?}");
        }
    }

    #[test]
    fn may_block_depends_on_the_arguments() {
        use crate::nfs::*;
        let read = |count| {
            A::OP_READ(READ4args {
                stateid: Default::default(),
                offset: 0,
                count,
            })
        };
        use Blocking::{LargeIo, Metadata, No, Sync, Yes};
        let r = entry(OP_READ).unwrap();
        assert_eq!(r.may_block(&read(4096)), No);
        assert_eq!(r.may_block(&read(1 << 20)), LargeIo);
        let write = |stable, n| {
            A::OP_WRITE(WRITE4args {
                stateid: Default::default(),
                offset: 0,
                stable,
                data: bytes::Bytes::from(vec![0u8; n]),
            })
        };
        let w = entry(OP_WRITE).unwrap();
        assert_eq!(w.may_block(&write(stable_how4::UNSTABLE4, 4096)), No);
        assert_eq!(
            w.may_block(&write(stable_how4::UNSTABLE4, 1 << 20)),
            LargeIo
        );
        assert_eq!(w.may_block(&write(stable_how4::FILE_SYNC4, 4096)), Sync);
        assert_eq!(w.may_block(&write(stable_how4::DATA_SYNC4, 4096)), Sync);
        assert_eq!(w.may_block(&write(stable_how4::FILE_SYNC4, 1 << 20)), Yes);
        let setattr = |mask| {
            A::OP_SETATTR(Box::new(SETATTR4args {
                stateid: Default::default(),
                obj_attributes: fattr4 {
                    attrmask: mask,
                    attr_vals: Default::default(),
                },
            }))
        };
        let s = entry(OP_SETATTR).unwrap();
        assert_eq!(s.may_block(&setattr(vec![1 << 4])), Yes);
        assert_eq!(s.may_block(&setattr(vec![0, 1 << 1])), No);
        let open = |openhow| {
            A::OP_OPEN(Box::new(OPEN4args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: 0,
                owner: Default::default(),
                openhow,
                claim: open_claim4::CLAIM_FH,
            }))
        };
        let o = entry(OP_OPEN).unwrap();
        assert_eq!(
            o.may_block(&open(openflag4::default(opentype4::OPEN4_NOCREATE))),
            No
        );
        let unchecked = openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(Default::default()));
        assert_eq!(o.may_block(&open(unchecked)), Metadata);
        for op in [OP_CREATE, OP_REMOVE, OP_RENAME, OP_LINK] {
            assert_eq!(entry(op).unwrap().may_block(&A::OP_GETFH), Metadata);
        }
        assert_eq!(entry(OP_COMMIT).unwrap().may_block(&A::OP_GETFH), Sync);
        // Copying data blocks; an op answered NOTSUPP does not.
        assert_eq!(entry(OP_COPY).unwrap().may_block(&A::OP_GETFH), Yes);
        assert_eq!(entry(OP_LAYOUTGET).unwrap().may_block(&A::OP_GETFH), No);
    }
}
