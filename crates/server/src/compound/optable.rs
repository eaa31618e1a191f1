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
use crate::ops::{attr, deleg, dir, fh, file, lock, session, v42};
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

/// An upper bound on the encoded size of an op's result (opnum and status included),
/// checked before a state-modifying op runs (NFS4ERR_REP_TOO_BIG[_TO_CACHE]).
#[derive(Clone, Copy)]
pub enum ReplyBound {
    Fixed(usize),
    Args(fn(&A) -> usize),
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
    /// `None`: not implemented (NFS4ERR_NOTSUPP).
    pub handler: Option<Handler>,
    pub may_block: MayBlock,
    pub stateid: CurrentStateid,
    pub reply_bound: ReplyBound,
    pub error_body: ErrorBody,
}

impl OpEntry {
    /// An unimplemented op: answered NFS4ERR_NOTSUPP without touching storage.
    const fn new(op: nfs_opnum4) -> Self {
        OpEntry {
            op,
            handler: None,
            may_block: MayBlock::Never,
            stateid: CurrentStateid::Keeps,
            reply_bound: ReplyBound::Fixed(STATUS),
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
    const fn reply(mut self, bytes: usize) -> Self {
        self.reply_bound = ReplyBound::Fixed(bytes);
        self
    }
    const fn reply_args(mut self, f: fn(&A) -> usize) -> Self {
        self.reply_bound = ReplyBound::Args(f);
        self
    }
    const fn on_error(mut self, e: ErrorBody) -> Self {
        self.error_body = e;
        self
    }

    /// The protocol facts of this op.
    pub fn info(&self) -> OpInfo {
        txnfs_proto::ops::info(self.op)
    }

    pub fn may_block(&self, arg: &A) -> Blocking {
        match self.may_block {
            MayBlock::Never => Blocking::No,
            MayBlock::Metadata => Blocking::Metadata,
            MayBlock::Always => Blocking::Yes,
            MayBlock::When(f) => f(arg),
        }
    }

    pub fn reply_bound(&self, arg: &A) -> usize {
        match self.reply_bound {
            ReplyBound::Fixed(n) => n,
            ReplyBound::Args(f) => f(arg),
        }
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

// Encoded sizes (RFC 8881 §3.3 and the op results in §18).
const STATUS: usize = 8; // opnum + status
const STATEID: usize = 16;
const CHANGE_INFO: usize = 20;
/// The server reports attribute numbers below 96: at most three bitmap words.
const BITMAP: usize = 4 + 3 * 4;
const OPAQUE_LIMIT: usize = 4 + 1024;
/// LOCK4denied: offset, length, type, owner (clientid + opaque owner).
const LOCK_DENIED: usize = 8 + 8 + 4 + 8 + OPAQUE_LIMIT;
/// The largest `open_delegation4`: a write delegation (type, stateid, recall, space
/// limit of type + u64, an ACE with an empty `who`).
const OPEN_DELEGATION: usize = 4 + STATEID + 4 + 12 + 16;
const MAX_IO: usize = 64 << 10;
const FHSIZE: usize = 128;
const PATH_MAX: usize = 4096;
/// The largest extended attribute value (Linux's `XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 64 << 10;

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Builds a handler from a pattern on the decoded arguments. A mismatch (the table and
/// the decoder disagree) is a server bug: SERVERFAULT, never a panic.
macro_rules! handler {
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
    blocks_if(!matches!(a, A::OP_READ(r) if (r.count as usize) <= MAX_IO))
}

fn write_blocks(a: &A) -> Blocking {
    blocks_if(!matches!(a, A::OP_WRITE(w)
        if w.stable == crate::nfs::stable_how4::UNSTABLE4 && w.data.len() <= MAX_IO))
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

fn read_reply(a: &A) -> usize {
    let count = match a {
        A::OP_READ(r) => r.count as usize,
        _ => MAX_IO,
    };
    STATUS + 4 + 4 + pad4(count)
}

/// READ_PLUS: eof, the segment count, and at most `count` bytes of data in segments
/// of at least 20 bytes each besides their data (bounded: the handler stops when the
/// reply is full).
fn read_plus_reply(a: &A) -> usize {
    let count = match a {
        A::OP_READ_PLUS(r) => r.rpa_count as usize,
        _ => MAX_IO,
    };
    STATUS + 4 + 4 + pad4(count) + 64 * 20
}

/// LISTXATTRS: cookie, names (at most `lxa_maxcount` bytes), eof.
fn listxattrs_reply(a: &A) -> usize {
    let maxcount = match a {
        A::OP_LISTXATTRS(l) => l.lxa_maxcount as usize,
        _ => MAX_IO,
    };
    STATUS + 8 + 4 + maxcount.min(MAX_IO) + 4
}

fn readdir_reply(a: &A) -> usize {
    let maxcount = match a {
        A::OP_READDIR(r) => r.maxcount as usize,
        _ => MAX_IO,
    };
    // cookieverf, the entries (at most maxcount), the list end and eof.
    STATUS + 8 + maxcount + 8
}

fn test_stateid_reply(a: &A) -> usize {
    let n = match a {
        A::OP_TEST_STATEID(t) => t.ts_stateids.len(),
        _ => 0,
    };
    STATUS + 4 + 4 * n
}

/// The largest encoding of one attribute the server can return.
fn attr_bound(bit: u32) -> usize {
    use txnfs_attr::fattr;
    match bit {
        fattr::OWNER | fattr::OWNER_GROUP | fattr::MIMETYPE => OPAQUE_LIMIT,
        fattr::FILEHANDLE => 4 + FHSIZE,
        // Variable-length attributes the server does not return (ACLs, locations)
        // answer with an empty list; keep room for a small one anyway.
        fattr::ACL | fattr::FS_LOCATIONS => 1024,
        fattr::SUPPORTED_ATTRS | fattr::SUPPATTR_EXCLCREAT => BITMAP,
        // Every other attribute is at most a fsid, a time, or a 64-bit value.
        _ => 16,
    }
}

fn getattr_reply(a: &A) -> usize {
    let mask: &[u32] = match a {
        A::OP_GETATTR(g) => &g.attr_request,
        _ => &[],
    };
    let values: usize = mask
        .iter()
        .enumerate()
        .flat_map(|(w, bits)| {
            (0..32u32)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| attr_bound(w as u32 * 32 + b))
        })
        .sum();
    STATUS + 4 + 4 * mask.len() + 4 + values
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
    e(OP_ACCESS)
        .run(handler!(OP_ACCESS(a) => |c, a| attr::access(c, &a)))
        .reply(STATUS + 8),
    e(OP_CLOSE)
        .run(handler!(OP_CLOSE(a) => |c, a| file::close(c, &a)))
        .sid(Clears)
        .reply(STATUS + STATEID),
    e(OP_COMMIT)
        .run(handler!(OP_COMMIT(a) => |c, a| file::commit(c, &a)))
        .blocks(Always)
        .reply(STATUS + 8),
    e(OP_CREATE)
        .run(handler!(OP_CREATE(a) => dir::create))
        .blocks(Metadata)
        .sid(Clears)
        .reply(STATUS + CHANGE_INFO + BITMAP),
    e(OP_DELEGPURGE).run(handler!(OP_DELEGPURGE(a) => |c, a| deleg::delegpurge(c, &a))),
    e(OP_DELEGRETURN).run(handler!(OP_DELEGRETURN(a) => |c, a| deleg::delegreturn(c, &a))),
    e(OP_GETATTR)
        .run(handler!(OP_GETATTR(a) => |c, a| attr::getattr(c, &a)))
        .reply_args(getattr_reply),
    e(OP_GETFH)
        .run(handler!(OP_GETFH => fh::getfh))
        .reply(STATUS + 4 + FHSIZE),
    e(OP_LINK)
        .run(handler!(OP_LINK(a) => |c, a| dir::link(c, &a)))
        .blocks(Metadata)
        .reply(STATUS + CHANGE_INFO),
    e(OP_LOCK)
        .run(handler!(OP_LOCK(a) => |c, a| lock::lock(c, &a)))
        .sid(Sets(lock_sid))
        // What a LOCK that changed state sends. A denied LOCK changed nothing, so its
        // LOCK4denied (up to 1 KiB of owner) is checked on the real bytes afterwards;
        // bounding it here would refuse every LOCK on a session with small replies.
        .reply(STATUS + STATEID),
    e(OP_LOCKT)
        .run(handler!(OP_LOCKT(a) => |c, a| lock::lockt(c, &a)))
        .reply(STATUS + LOCK_DENIED),
    e(OP_LOCKU)
        .run(handler!(OP_LOCKU(a) => |c, a| lock::locku(c, &a)))
        .sid(Sets(locku_sid))
        .reply(STATUS + STATEID),
    e(OP_LOOKUP)
        .run(handler!(OP_LOOKUP(a) => |c, a| fh::lookup(c, &a)))
        .sid(Clears),
    e(OP_LOOKUPP)
        .run(handler!(OP_LOOKUPP => fh::lookupp))
        .sid(Clears),
    e(OP_NVERIFY).run(handler!(OP_NVERIFY(a) => |c, a| attr::nverify(c, &a))),
    e(OP_OPEN)
        .run(handler!(OP_OPEN(a) => file::open))
        .blocks(When(open_blocks))
        .sid(Sets(open_sid))
        .reply(STATUS + STATEID + CHANGE_INFO + 4 + BITMAP + OPEN_DELEGATION),
    e(OP_OPENATTR).sid(Clears),
    e(OP_OPEN_CONFIRM),
    e(OP_OPEN_DOWNGRADE)
        .run(handler!(OP_OPEN_DOWNGRADE(a) => |c, a| file::open_downgrade(c, &a)))
        .sid(Sets(open_downgrade_sid))
        .reply(STATUS + STATEID),
    e(OP_PUTFH)
        .run(handler!(OP_PUTFH(a) => |c, a| fh::putfh(c, &a)))
        .sid(Clears),
    e(OP_PUTPUBFH)
        .run(handler!(OP_PUTPUBFH => fh::putpubfh))
        .sid(Clears),
    e(OP_PUTROOTFH)
        .run(handler!(OP_PUTROOTFH => fh::putrootfh))
        .sid(Clears),
    e(OP_READ)
        .run(handler!(OP_READ(a) => |c, a| file::read(c, &a)))
        .blocks(When(read_blocks))
        .reply_args(read_reply),
    e(OP_READDIR)
        .run(handler!(OP_READDIR(a) => |c, a| dir::readdir(c, &a)))
        .reply_args(readdir_reply),
    e(OP_READLINK)
        .run(handler!(OP_READLINK => dir::readlink))
        .reply(STATUS + 4 + PATH_MAX),
    e(OP_REMOVE)
        .run(handler!(OP_REMOVE(a) => |c, a| dir::remove(c, &a)))
        .blocks(Metadata)
        .reply(STATUS + CHANGE_INFO),
    e(OP_RENAME)
        .run(handler!(OP_RENAME(a) => |c, a| dir::rename(c, &a)))
        .blocks(Metadata)
        .reply(STATUS + 2 * CHANGE_INFO),
    e(OP_RENEW),
    e(OP_RESTOREFH)
        .run(handler!(OP_RESTOREFH => fh::restorefh))
        .sid(Restores),
    e(OP_SAVEFH)
        .run(handler!(OP_SAVEFH => fh::savefh))
        .sid(Saves),
    e(OP_SECINFO)
        .run(handler!(OP_SECINFO(a) => |c, a| fh::secinfo(c, &a)))
        .reply(STATUS + 4 + 4 * 4),
    e(OP_SETATTR)
        // SETATTR, then CB_NOTIFY of the attribute change (`crate::notify`).
        .run(handler!(OP_SETATTR(a) => |c, a| crate::notify::setattr(c, &a)))
        .blocks(When(setattr_blocks))
        .reply(STATUS + BITMAP)
        .on_error(ErrorBody::EmptyBitmap),
    e(OP_SETCLIENTID),
    e(OP_SETCLIENTID_CONFIRM),
    e(OP_VERIFY).run(handler!(OP_VERIFY(a) => |c, a| attr::verify(c, &a))),
    e(OP_WRITE)
        .run(handler!(OP_WRITE(a) => file::write))
        .blocks(When(write_blocks))
        .reply(STATUS + 4 + 4 + 8),
    e(OP_RELEASE_LOCKOWNER),
    e(OP_BACKCHANNEL_CTL)
        .run(handler!(OP_BACKCHANNEL_CTL(a) => |c, a| session::backchannel_ctl(c, &a))),
    e(OP_BIND_CONN_TO_SESSION)
        .run(handler!(OP_BIND_CONN_TO_SESSION(a) => |c, a| session::bind_conn_to_session(c, &a)))
        .blocks(Always)
        .reply(STATUS + 16 + 4 + 4),
    e(OP_EXCHANGE_ID)
        .run(handler!(OP_EXCHANGE_ID(a) => |c, a| session::exchange_id(c, &a)))
        .blocks(Always)
        // clientid, sequenceid, flags, state protection (at most two bitmaps),
        // server owner, server scope, one implementation id.
        .reply(
            STATUS
                + 8
                + 4
                + 4
                + (4 + 2 * BITMAP)
                + (8 + OPAQUE_LIMIT)
                + OPAQUE_LIMIT
                + (4 + 2 * OPAQUE_LIMIT + 12),
        ),
    e(OP_CREATE_SESSION)
        .run(handler!(OP_CREATE_SESSION(a) => |c, a| session::create_session(c, &a)))
        .blocks(Always)
        // session id, sequence, flags, two channels (six counters, one rdma_ird).
        .reply(STATUS + 16 + 4 + 4 + 2 * (6 * 4 + 4 + 4)),
    e(OP_DESTROY_SESSION)
        .run(handler!(OP_DESTROY_SESSION(a) => |c, a| session::destroy_session(c, &a))),
    e(OP_FREE_STATEID).run(handler!(OP_FREE_STATEID(a) => |c, a| lock::free_stateid(c, &a))),
    e(OP_GET_DIR_DELEGATION)
        .run(handler!(OP_GET_DIR_DELEGATION(a) => |c, a| deleg::get_dir_delegation(c, &a)))
        // status, GDD4_OK, cookie verifier, stateid, three bitmaps.
        .reply(STATUS + 4 + 8 + STATEID + 3 * BITMAP),
    e(OP_GETDEVICEINFO),
    e(OP_GETDEVICELIST),
    e(OP_LAYOUTCOMMIT),
    e(OP_LAYOUTGET),
    e(OP_LAYOUTRETURN),
    e(OP_SECINFO_NO_NAME)
        .run(handler!(OP_SECINFO_NO_NAME(a) => |c, a| fh::secinfo_no_name(c, &a)))
        .reply(STATUS + 4 + 4 * 4),
    // Run by the executor itself (position rules, slot, replay): see `compound::execute`.
    e(OP_SEQUENCE).reply(STATUS + 16 + 5 * 4),
    e(OP_SET_SSV).run(handler!(OP_SET_SSV(a) => |c, a| session::set_ssv(c, &a))),
    e(OP_TEST_STATEID)
        .run(handler!(OP_TEST_STATEID(a) => |c, a| lock::test_stateid(c, &a)))
        .reply_args(test_stateid_reply),
    e(OP_WANT_DELEGATION)
        .run(handler!(OP_WANT_DELEGATION(a) => |c, a| deleg::want_delegation(c, &a)))
        .reply(STATUS + OPEN_DELEGATION),
    e(OP_DESTROY_CLIENTID)
        .run(handler!(OP_DESTROY_CLIENTID(a) => |c, a| session::destroy_clientid(c, &a)))
        .blocks(Always),
    e(OP_RECLAIM_COMPLETE)
        .run(handler!(OP_RECLAIM_COMPLETE(a) => |c, a| session::reclaim_complete(c, &a))),
    e(OP_ALLOCATE)
        .run(handler!(OP_ALLOCATE(a) => |c, a| v42::allocate(c, &a)))
        .blocks(Always),
    e(OP_COPY)
        .run(handler!(OP_COPY(a) => |c, a| v42::copy(c, &a)))
        .blocks(Always)
        // write_response4 (with a callback id: a copy stateid), copy_requirements4.
        .reply(STATUS + 4 + 16 + 8 + 4 + 8 + 8),
    // Inter-server copy is not offered (ADR 0025): NOTSUPP.
    e(OP_COPY_NOTIFY),
    e(OP_DEALLOCATE)
        .run(handler!(OP_DEALLOCATE(a) => |c, a| v42::deallocate(c, &a)))
        .blocks(Always),
    e(OP_IO_ADVISE)
        .run(handler!(OP_IO_ADVISE(a) => |c, a| v42::io_advise(c, &a)))
        .reply(STATUS + BITMAP),
    // pNFS is not offered: the LAYOUT* ops and GETDEVICE* answer NOTSUPP.
    e(OP_LAYOUTERROR),
    e(OP_LAYOUTSTATS),
    e(OP_OFFLOAD_CANCEL).run(handler!(OP_OFFLOAD_CANCEL(a) => |c, a| v42::offload_cancel(c, &a))),
    e(OP_OFFLOAD_STATUS)
        .run(handler!(OP_OFFLOAD_STATUS(a) => |c, a| v42::offload_status(c, &a)))
        // osr_count, osr_complete<1>.
        .reply(STATUS + 8 + 4 + 4),
    e(OP_READ_PLUS)
        .run(handler!(OP_READ_PLUS(a) => |c, a| v42::read_plus(c, &a)))
        .blocks(Always)
        .reply_args(read_plus_reply),
    e(OP_SEEK)
        .run(handler!(OP_SEEK(a) => |c, a| v42::seek(c, &a)))
        .reply(STATUS + 4 + 8),
    // WRITE_SAME (application data blocks) is optional and not offered.
    e(OP_WRITE_SAME),
    e(OP_CLONE)
        .run(handler!(OP_CLONE(a) => |c, a| v42::clone(c, &a)))
        .blocks(Always),
    e(OP_GETXATTR)
        .run(handler!(OP_GETXATTR(a) => |c, a| v42::getxattr(c, &a)))
        .reply(STATUS + 4 + XATTR_SIZE_MAX),
    e(OP_SETXATTR)
        .run(handler!(OP_SETXATTR(a) => |c, a| v42::setxattr(c, &a)))
        .blocks(Metadata)
        .reply(STATUS + CHANGE_INFO),
    e(OP_LISTXATTRS)
        .run(handler!(OP_LISTXATTRS(a) => |c, a| v42::listxattrs(c, &a)))
        .reply_args(listxattrs_reply),
    e(OP_REMOVEXATTR)
        .run(handler!(OP_REMOVEXATTR(a) => |c, a| v42::removexattr(c, &a)))
        .blocks(Metadata)
        .reply(STATUS + CHANGE_INFO),
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
    fn reply_bounds_cover_the_largest_results() {
        use crate::nfs::*;
        use txnfs_xdr::Encode;
        let bound = |a: &A| entry(a.discriminant()).unwrap().reply_bound(a);
        let size = |r: &R| {
            let mut b = BytesMut::new();
            r.encode(&mut b);
            b.len()
        };
        let owner = bytes::Bytes::from(vec![7u8; 1024]);
        let denied = R::OP_LOCK(LOCK4res::NFS4ERR_DENIED(LOCK4denied {
            offset: 0,
            length: u64::MAX,
            locktype: nfs_lock_type4::WRITE_LT,
            owner: lock_owner4 { clientid: 1, owner },
        }));
        let lock = A::OP_LOCK(LOCK4args {
            locktype: nfs_lock_type4::WRITE_LT,
            reclaim: false,
            offset: 0,
            length: 1,
            locker: locker4::FALSE(exist_lock_owner4::default()),
        });
        // LOCK is bounded by what it sends when it changed state; a denied LOCK changed
        // nothing and is checked on its real bytes. LOCKT's bound covers the denial.
        let granted = R::OP_LOCK(LOCK4res::NFS4_OK(LOCK4resok::default()));
        assert!(size(&granted) <= bound(&lock));
        assert!(size(&denied) > bound(&lock));
        let lockt = A::OP_LOCKT(LOCKT4args {
            locktype: nfs_lock_type4::WRITE_LT,
            offset: 0,
            length: 1,
            owner: lock_owner4::default(),
        });
        assert!(size(&denied) <= bound(&lockt));
        let rename = R::OP_RENAME(RENAME4res::NFS4_OK(RENAME4resok::default()));
        assert!(
            size(&rename)
                <= bound(&A::OP_RENAME(RENAME4args {
                    oldname: Default::default(),
                    newname: Default::default(),
                }))
        );
        let read = R::OP_READ(READ4res::NFS4_OK(READ4resok {
            eof: true,
            data: bytes::Bytes::from(vec![0u8; 1001]),
        }));
        let read_args = A::OP_READ(READ4args {
            stateid: Default::default(),
            offset: 0,
            count: 1001,
        });
        assert!(size(&read) <= bound(&read_args));
        let create = R::OP_CREATE(CREATE4res::NFS4_OK(CREATE4resok {
            cinfo: Default::default(),
            attrset: vec![u32::MAX; 3],
        }));
        assert!(size(&create) <= entry(OP_CREATE).unwrap().reply_bound(&A::OP_GETFH));
        let big = |n| bytes::Bytes::from(vec![b'x'; n]);
        let exchange_id = R::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(EXCHANGE_ID4resok {
            eir_clientid: 1,
            eir_sequenceid: 1,
            eir_flags: 0,
            eir_state_protect: state_protect4_r::SP4_MACH_CRED(state_protect_ops4 {
                spo_must_enforce: vec![u32::MAX; 3],
                spo_must_allow: vec![u32::MAX; 3],
            }),
            eir_server_owner: server_owner4 {
                so_minor_id: 1,
                so_major_id: big(1024),
            },
            eir_server_scope: big(1024),
            eir_server_impl_id: vec![nfs_impl_id4 {
                nii_domain: big(1024),
                nii_name: big(1024),
                nii_date: Default::default(),
            }],
        }));
        assert!(size(&exchange_id) <= entry(OP_EXCHANGE_ID).unwrap().reply_bound(&A::OP_GETFH));
        let chan = channel_attrs4 {
            ca_rdma_ird: vec![1],
            ..Default::default()
        };
        let create_session =
            R::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(CREATE_SESSION4resok {
                csr_sessionid: [1; 16],
                csr_sequence: 1,
                csr_flags: 0,
                csr_fore_chan_attrs: chan.clone(),
                csr_back_chan_attrs: chan,
            }));
        assert!(
            size(&create_session) <= entry(OP_CREATE_SESSION).unwrap().reply_bound(&A::OP_GETFH)
        );
        let open = R::OP_OPEN(OPEN4res::NFS4_OK(OPEN4resok {
            stateid: Default::default(),
            cinfo: Default::default(),
            rflags: 0,
            attrset: vec![u32::MAX; 3],
            delegation: open_delegation4::OPEN_DELEGATE_NONE,
        }));
        assert!(size(&open) <= entry(OP_OPEN).unwrap().reply_bound(&A::OP_GETFH));
        let getattr = A::OP_GETATTR(GETATTR4args {
            attr_request: vec![u32::MAX, u32::MAX, u32::MAX],
        });
        assert!(bound(&getattr) > 3 * OPAQUE_LIMIT);
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
        use Blocking::{Metadata, No, Yes};
        let r = entry(OP_READ).unwrap();
        assert_eq!(r.may_block(&read(4096)), No);
        assert_eq!(r.may_block(&read(1 << 20)), Yes);
        let setattr = |mask| {
            A::OP_SETATTR(SETATTR4args {
                stateid: Default::default(),
                obj_attributes: fattr4 {
                    attrmask: mask,
                    attr_vals: Default::default(),
                },
            })
        };
        let s = entry(OP_SETATTR).unwrap();
        assert_eq!(s.may_block(&setattr(vec![1 << 4])), Yes);
        assert_eq!(s.may_block(&setattr(vec![0, 1 << 1])), No);
        let open = |openhow| {
            A::OP_OPEN(OPEN4args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: 0,
                owner: Default::default(),
                openhow,
                claim: open_claim4::CLAIM_FH,
            })
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
        assert_eq!(entry(OP_COMMIT).unwrap().may_block(&A::OP_GETFH), Yes);
        // Copying data blocks; an op answered NOTSUPP does not.
        assert_eq!(entry(OP_COPY).unwrap().may_block(&A::OP_GETFH), Yes);
        assert_eq!(entry(OP_LAYOUTGET).unwrap().may_block(&A::OP_GETFH), No);
    }
}
