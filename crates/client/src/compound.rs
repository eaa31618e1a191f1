//! A typed COMPOUND builder and its reply. Each `push`-style method returns the op's
//! index; the reply's accessors take that index and return the typed result, or the
//! error of the op that failed (with its index and status).

use crate::attrs::{self, Attributes, SetAttributes};
use crate::ClientError;
use bytes::Bytes;
use txnfs_proto::nfs4::*;

/// The "current stateid" (RFC 8881 §16.2.3.1.2): use the stateid the previous op in the
/// same COMPOUND produced, so OPEN + READ + CLOSE need no round trip in between.
pub const CURRENT_STATEID: stateid4 = stateid4 {
    seqid: 1,
    other: [0; 12],
};

/// The anonymous stateid (I/O without an open).
pub const ANONYMOUS_STATEID: stateid4 = stateid4 {
    seqid: 0,
    other: [0; 12],
};

/// Name of an op for messages and statistics (from the protocol op table, ADR 0007).
pub fn op_name(op: nfs_opnum4) -> &'static str {
    txnfs_proto::ops::op_name(op)
}

fn opnum(a: &nfs_argop4) -> nfs_opnum4 {
    a.discriminant()
}

/// An ordered list of ops (SEQUENCE is added by the client when it is sent).
#[derive(Debug, Clone, Default)]
pub struct Compound {
    pub(crate) ops: Vec<nfs_argop4>,
}

fn name(s: &[u8]) -> Bytes {
    Bytes::copy_from_slice(s)
}

impl Compound {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn ops(&self) -> &[nfs_argop4] {
        &self.ops
    }

    /// Ask the server to keep the reply for retransmissions (sa_cachethis) when the
    /// COMPOUND changes state and its reply is small; READ/READDIR replies can exceed the
    /// cache and those compounds are safe to repeat.
    pub fn wants_cache(&self) -> bool {
        changes_state(&self.ops) && !carries_data(&self.ops)
    }

    /// Append any op (the escape hatch for ops without a helper).
    pub fn op(&mut self, op: nfs_argop4) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    pub fn putrootfh(&mut self) -> usize {
        self.op(nfs_argop4::OP_PUTROOTFH)
    }
    pub fn putfh(&mut self, fh: &Bytes) -> usize {
        self.op(nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }))
    }
    pub fn getfh(&mut self) -> usize {
        self.op(nfs_argop4::OP_GETFH)
    }
    pub fn savefh(&mut self) -> usize {
        self.op(nfs_argop4::OP_SAVEFH)
    }
    pub fn restorefh(&mut self) -> usize {
        self.op(nfs_argop4::OP_RESTOREFH)
    }
    pub fn lookup(&mut self, n: &[u8]) -> usize {
        self.op(nfs_argop4::OP_LOOKUP(LOOKUP4args { objname: name(n) }))
    }
    pub fn lookupp(&mut self) -> usize {
        self.op(nfs_argop4::OP_LOOKUPP)
    }
    pub fn getattr(&mut self, bitmap: Vec<u32>) -> usize {
        self.op(nfs_argop4::OP_GETATTR(GETATTR4args {
            attr_request: bitmap,
        }))
    }
    pub fn setattr(&mut self, stateid: stateid4, set: &SetAttributes) -> usize {
        self.op(nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
            stateid,
            obj_attributes: attrs::encode_set(set),
        })))
    }
    pub fn access(&mut self, bits: u32) -> usize {
        self.op(nfs_argop4::OP_ACCESS(ACCESS4args { access: bits }))
    }
    /// OPEN of `n` in the current directory. `create`: None = open existing;
    /// Some((exclusive verifier, attrs)): create (GUARDED when no verifier is given and
    /// `guarded`, else UNCHECKED; EXCLUSIVE4_1 with a verifier).
    pub fn open(
        &mut self,
        n: &[u8],
        access: u32,
        owner: &[u8],
        create: Option<(CreateHow, &SetAttributes)>,
    ) -> usize {
        let openhow = match create {
            None => openflag4::default(opentype4::OPEN4_NOCREATE),
            Some((how, set)) => openflag4::OPEN4_CREATE(match how {
                CreateHow::Unchecked => createhow4::UNCHECKED4(attrs::encode_set(set)),
                CreateHow::Guarded => createhow4::GUARDED4(attrs::encode_set(set)),
                CreateHow::Exclusive(v) => createhow4::EXCLUSIVE4_1(creatverfattr {
                    cva_verf: v,
                    cva_attrs: attrs::encode_set(set),
                }),
            }),
        };
        self.open_as(access, owner, openhow, open_claim4::CLAIM_NULL(name(n)))
    }
    /// OPEN of an existing `n` in the current directory whose share access carries the
    /// `OPEN4_SHARE_ACCESS_WANT_*` bits `want` (0: the server's choice). For callers that
    /// handle the delegation the reply may grant: they must return it (DELEGRETURN),
    /// also when the server recalls it; [`Compound::open`] asks for none.
    pub fn open_wanting(&mut self, n: &[u8], access: u32, owner: &[u8], want: u32) -> usize {
        let i = self.open_as(
            access,
            owner,
            openflag4::default(opentype4::OPEN4_NOCREATE),
            open_claim4::CLAIM_NULL(name(n)),
        );
        if let Some(nfs_argop4::OP_OPEN(o)) = self.ops.get_mut(i) {
            o.share_access = access | want;
        }
        i
    }
    /// OPEN of the current filehandle itself (CLAIM_FH).
    pub fn open_fh(&mut self, access: u32, owner: &[u8]) -> usize {
        let openhow = openflag4::default(opentype4::OPEN4_NOCREATE);
        self.open_as(access, owner, openhow, open_claim4::CLAIM_FH)
    }
    /// OPEN with `access` (no delegation wanted, nothing denied) by `owner`.
    fn open_as(
        &mut self,
        access: u32,
        owner: &[u8],
        openhow: openflag4,
        claim: open_claim4,
    ) -> usize {
        self.op(nfs_argop4::OP_OPEN(Box::new(OPEN4args {
            seqid: 0,
            share_access: access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: open_owner4 {
                clientid: 0,
                owner: name(owner),
            },
            openhow,
            claim,
        })))
    }
    pub fn close(&mut self, stateid: stateid4) -> usize {
        self.op(nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: stateid,
        }))
    }
    pub fn read(&mut self, stateid: stateid4, offset: u64, count: u32) -> usize {
        self.op(nfs_argop4::OP_READ(READ4args {
            stateid,
            offset,
            count,
        }))
    }
    /// NFSv4.2 READ_PLUS: like [`Compound::read`], with holes sent as their length.
    pub fn read_plus(&mut self, stateid: stateid4, offset: u64, count: u32) -> usize {
        self.op(nfs_argop4::OP_READ_PLUS(READ_PLUS4args {
            rpa_stateid: stateid,
            rpa_offset: offset,
            rpa_count: count,
        }))
    }
    pub fn write(&mut self, stateid: stateid4, offset: u64, data: Bytes, stable: bool) -> usize {
        self.op(nfs_argop4::OP_WRITE(WRITE4args {
            stateid,
            offset,
            stable: if stable {
                stable_how4::FILE_SYNC4
            } else {
                stable_how4::UNSTABLE4
            },
            data,
        }))
    }
    pub fn commit(&mut self) -> usize {
        self.op(nfs_argop4::OP_COMMIT(COMMIT4args {
            offset: 0,
            count: 0,
        }))
    }
    pub fn mkdir(&mut self, n: &[u8], set: &SetAttributes) -> usize {
        self.op(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
            objtype: createtype4::NF4DIR,
            objname: name(n),
            createattrs: attrs::encode_set(set),
        })))
    }
    pub fn symlink(&mut self, n: &[u8], target: &[u8], set: &SetAttributes) -> usize {
        self.op(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
            objtype: createtype4::NF4LNK(name(target)),
            objname: name(n),
            createattrs: attrs::encode_set(set),
        })))
    }
    pub fn readlink(&mut self) -> usize {
        self.op(nfs_argop4::OP_READLINK)
    }
    pub fn remove(&mut self, n: &[u8]) -> usize {
        self.op(nfs_argop4::OP_REMOVE(REMOVE4args { target: name(n) }))
    }
    /// RENAME from the saved filehandle's directory to the current one.
    pub fn rename(&mut self, from: &[u8], to: &[u8]) -> usize {
        self.op(nfs_argop4::OP_RENAME(RENAME4args {
            oldname: name(from),
            newname: name(to),
        }))
    }
    /// LINK the saved filehandle into the current directory.
    pub fn link(&mut self, n: &[u8]) -> usize {
        self.op(nfs_argop4::OP_LINK(LINK4args { newname: name(n) }))
    }
    pub fn readdir(
        &mut self,
        cookie: u64,
        verf: [u8; 8],
        maxcount: u32,
        bitmap: Vec<u32>,
    ) -> usize {
        self.op(nfs_argop4::OP_READDIR(READDIR4args {
            cookie,
            cookieverf: verf,
            dircount: maxcount,
            maxcount,
            attr_request: bitmap,
        }))
    }
}

/// Whether ops hold one that changes state and must not run twice (its reply must
/// come from the server's reply cache when retransmitted).
pub(crate) fn changes_state(ops: &[nfs_argop4]) -> bool {
    ops.iter()
        .any(|o| txnfs_proto::ops::info(o.discriminant()).cache_reply)
}

/// Whether ops move file data or listings (replies that may exceed the reply cache).
pub(crate) fn carries_data(ops: &[nfs_argop4]) -> bool {
    ops.iter().any(|o| {
        matches!(
            o,
            nfs_argop4::OP_READ(_) | nfs_argop4::OP_READDIR(_) | nfs_argop4::OP_WRITE(_)
        )
    })
}

/// How OPEN creates a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow {
    Unchecked,
    Guarded,
    Exclusive([u8; 8]),
}

/// The results of a COMPOUND, SEQUENCE excluded. Index `i` is the i-th op pushed.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: nfsstat4,
    pub results: Vec<nfs_resop4>,
    /// How many ops were sent (results may be shorter when one failed).
    pub sent: usize,
}

pub(crate) fn status_of(r: &nfs_resop4) -> nfsstat4 {
    use txnfs_xdr::Encode;
    // Results that may carry file data or long lists say their status without being
    // encoded (encoding copied every 1 MiB READ's data once more, ADR 0063).
    match r {
        nfs_resop4::OP_READ(x) => return x.discriminant(),
        nfs_resop4::OP_READ_PLUS(x) => return x.discriminant(),
        nfs_resop4::OP_READDIR(x) => return x.discriminant(),
        nfs_resop4::OP_GETATTR(x) => return x.discriminant(),
        nfs_resop4::OP_GETXATTR(x) => return x.discriminant(),
        nfs_resop4::OP_LISTXATTRS(x) => return x.discriminant(),
        _ => {}
    }
    // Every other result is small and begins with its status after the opnum.
    let b = r.to_bytes();
    if b.len() < 8 {
        return nfsstat4::NFS4ERR_SERVERFAULT;
    }
    let v = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    nfsstat4::from_i32(v).unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT)
}

/// Accessors `name(i)` for the successful result of op `i` of one type: `Err` if the
/// op did not run or failed (as `Reply::get` says), or is of another type.
macro_rules! typed_results {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $op:ident($res:ident) |$r:ident| $val:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, i: usize) -> Result<$ty, ClientError> {
                match self.get(i)? {
                    nfs_resop4::$op($res::NFS4_OK($r)) => $val,
                    _ => Err(Self::unexpected(i)),
                }
            }
        )*
    };
}

/// The bytes a READ_PLUS reply covers from `offset` (where it was asked), holes as
/// zeros: one data segment at `offset` as it came, anything else assembled. A reply
/// that does not describe the range from `offset` on (segments out of order, data
/// before `offset`, empty data, nothing and no end of file) is refused: NFS-Ganesha
/// 4.3 answers every READ_PLUS with one empty data segment at offset 0.
fn plus_bytes(r: &read_plus_res4, offset: u64) -> Result<Bytes, ClientError> {
    let bad = |why: &str| ClientError::BadReadPlus(why.to_string());
    match r.rpr_contents.as_slice() {
        [] if r.rpr_eof => return Ok(Bytes::new()),
        [] => return Err(bad("no data, and not the end of file")),
        [read_plus_content::NFS4_CONTENT_DATA(d)]
            if d.d_offset == offset && !d.d_data.is_empty() =>
        {
            return Ok(d.d_data.clone())
        }
        _ => {}
    }
    let mut end = offset;
    for (i, c) in r.rpr_contents.iter().enumerate() {
        let (off, len) = match c {
            read_plus_content::NFS4_CONTENT_DATA(d) => (d.d_offset, d.d_data.len() as u64),
            read_plus_content::NFS4_CONTENT_HOLE(h) => (h.di_offset, h.di_length),
            read_plus_content::default(_) => return Err(bad("unknown segment type")),
        };
        // Only a first hole may start before the asked offset (it covers it).
        let hole_first = i == 0 && matches!(c, read_plus_content::NFS4_CONTENT_HOLE(_));
        if len == 0 || off > end || (off != end && !hole_first) {
            return Err(bad("segments do not cover the range in order"));
        }
        end = off
            .checked_add(len)
            .ok_or_else(|| bad("segment past 2^64"))?;
        if end <= offset {
            return Err(bad("a segment ends before the asked offset"));
        }
    }
    // A hole's length is the server's word: bound what it makes us allocate.
    let total = usize::try_from(end - offset)
        .ok()
        .filter(|n| *n <= 1 << 30)
        .ok_or_else(|| bad("more than 1 GiB"))?;
    let mut out = bytes::BytesMut::zeroed(total);
    for c in &r.rpr_contents {
        if let read_plus_content::NFS4_CONTENT_DATA(d) = c {
            // (data never starts before `offset`: checked above)
            let at = (d.d_offset - offset) as usize;
            out[at..at + d.d_data.len()].copy_from_slice(&d.d_data);
        }
    }
    Ok(out.freeze())
}

impl Reply {
    /// (index, status) of the op that failed, if one did.
    pub fn failed(&self) -> Option<(usize, nfsstat4)> {
        if self.status == nfsstat4::NFS4_OK {
            return None;
        }
        let i = self.results.len().saturating_sub(1);
        Some((i, self.status))
    }

    /// Whether op `i` ran and succeeded.
    pub fn succeeded(&self, i: usize) -> bool {
        match self.failed() {
            None => i < self.results.len(),
            Some((f, _)) => i < f,
        }
    }

    fn get(&self, i: usize) -> Result<&nfs_resop4, ClientError> {
        let r = self.results.get(i).ok_or(match self.failed() {
            Some((f, s)) => ClientError::nfs(
                self.results
                    .get(f)
                    .map(|r| op_name(r.discriminant()))
                    .unwrap_or("COMPOUND"),
                f,
                s,
            ),
            None => ClientError::Protocol(format!("no result for op {i}")),
        })?;
        let s = status_of(r);
        if s != nfsstat4::NFS4_OK {
            return Err(ClientError::nfs(op_name(r.discriminant()), i, s));
        }
        Ok(r)
    }

    fn unexpected(i: usize) -> ClientError {
        ClientError::Protocol(format!("result {i} has an unexpected type"))
    }

    /// Op `i` succeeded (any op).
    pub fn ok(&self, i: usize) -> Result<(), ClientError> {
        self.get(i).map(|_| ())
    }

    /// The bytes from `offset` (where op `i`, a READ_PLUS, was asked) and the EOF
    /// flag, with its holes as zeros (writers store zeros as holes).
    pub fn read_plus(&self, i: usize, offset: u64) -> Result<(Bytes, bool), ClientError> {
        match self.get(i)? {
            nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(r)) => {
                Ok((plus_bytes(r, offset)?, r.rpr_eof))
            }
            _ => Err(Self::unexpected(i)),
        }
    }

    typed_results! {
        /// The file handle of op `i`, a GETFH.
        fh: Bytes = OP_GETFH(GETFH4res) |r| Ok(r.object.clone());
        /// The attributes of op `i`, a GETATTR.
        attrs: Attributes = OP_GETATTR(GETATTR4res) |r| attrs::decode(&r.obj_attributes);
        /// The result of op `i`, an OPEN.
        open: OPEN4resok = OP_OPEN(OPEN4res) |r| Ok(OPEN4resok::clone(r));
        /// The data and EOF flag of op `i`, a READ.
        read: (Bytes, bool) = OP_READ(READ4res) |r| Ok((r.data.clone(), r.eof));
        /// The result of op `i`, a WRITE.
        write: WRITE4resok = OP_WRITE(WRITE4res) |r| Ok(r.clone());
        /// The link text of op `i`, a READLINK.
        readlink: Bytes = OP_READLINK(READLINK4res) |r| Ok(r.link.clone());
        /// The result of op `i`, a READDIR.
        readdir: READDIR4resok = OP_READDIR(READDIR4res) |r| Ok(r.clone());
    }

    /// The status of op `i` (NFS4_OK if it ran and succeeded; the failing status if it
    /// is the op that failed; None if it never ran).
    pub fn status(&self, i: usize) -> Option<nfsstat4> {
        self.results.get(i).map(status_of)
    }
}

pub(crate) fn compound_ops(ops: &[nfs_argop4]) -> impl Iterator<Item = nfs_opnum4> + '_ {
    ops.iter().map(opnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(off: u64, b: &[u8]) -> read_plus_content {
        read_plus_content::NFS4_CONTENT_DATA(data4 {
            d_offset: off,
            d_data: Bytes::copy_from_slice(b),
        })
    }

    fn hole(off: u64, len: u64) -> read_plus_content {
        read_plus_content::NFS4_CONTENT_HOLE(data_info4 {
            di_offset: off,
            di_length: len,
        })
    }

    fn res(contents: Vec<read_plus_content>) -> read_plus_res4 {
        read_plus_res4 {
            rpr_eof: false,
            rpr_contents: contents,
        }
    }

    #[test]
    fn read_plus_segments_become_the_bytes_from_the_asked_offset() {
        let one = res(vec![data(100, b"abc")]);
        assert_eq!(&plus_bytes(&one, 100).unwrap()[..], b"abc");
        let mixed = res(vec![hole(100, 4), data(104, b"xy"), hole(106, 2)]);
        assert_eq!(&plus_bytes(&mixed, 100).unwrap()[..], b"\0\0\0\0xy\0\0");
        // A hole reported from before the asked offset, then data.
        let early = res(vec![hole(90, 12), data(102, b"z")]);
        assert_eq!(&plus_bytes(&early, 100).unwrap()[..], b"\0\0z");
        let end = read_plus_res4 {
            rpr_eof: true,
            rpr_contents: vec![],
        };
        assert!(plus_bytes(&end, 5).unwrap().is_empty());
    }

    #[test]
    fn read_plus_replies_that_do_not_cover_the_range_are_refused() {
        let refused = |r: read_plus_res4, off: u64| {
            matches!(plus_bytes(&r, off), Err(ClientError::BadReadPlus(_)))
        };
        // NFS-Ganesha 4.3's answer to a READ_PLUS at 1 MiB.
        assert!(refused(res(vec![data(0, b"")]), 1 << 20));
        assert!(refused(res(vec![]), 5), "nothing, not at the end");
        assert!(refused(res(vec![data(90, b"0123456789AB")]), 100));
        assert!(refused(res(vec![data(100, b"a"), data(105, b"b")]), 100));
        assert!(refused(res(vec![data(101, b"a")]), 100));
        assert!(refused(res(vec![hole(10, 5)]), 100));
        let huge = res(vec![hole(0, u64::MAX / 2)]);
        assert!(plus_bytes(&huge, 0).is_err());
        let wraps = res(vec![hole(10, u64::MAX)]);
        assert!(plus_bytes(&wraps, 10).is_err());
    }

    /// The status of a result that carries data is read without encoding it, and
    /// agrees with what encoding says.
    #[test]
    fn status_of_data_results_matches_their_encoding() {
        use txnfs_xdr::Encode;
        let encoded = |r: &nfs_resop4| {
            let b = r.to_bytes();
            nfsstat4::from_i32(i32::from_be_bytes([b[4], b[5], b[6], b[7]]))
        };
        let cases = [
            nfs_resop4::OP_READ(READ4res::NFS4_OK(READ4resok {
                eof: false,
                data: Bytes::from(vec![1; 1 << 20]),
            })),
            nfs_resop4::OP_READ(READ4res::default(nfsstat4::NFS4ERR_OPENMODE)),
            nfs_resop4::OP_GETATTR(GETATTR4res::default(nfsstat4::NFS4ERR_STALE)),
            nfs_resop4::OP_PUTFH(PUTFH4res {
                status: nfsstat4::NFS4ERR_BADHANDLE,
            }),
        ];
        for r in &cases {
            assert_eq!(Some(status_of(r)), encoded(r));
        }
    }
}
