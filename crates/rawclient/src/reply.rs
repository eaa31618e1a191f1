//! Reading replies: decoding, statuses, and what the tests keep from results.

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_xdr::{Decode, Encode};

/// The reply to a COMPOUND, if it decodes.
pub fn decode(reply: &Bytes) -> Option<COMPOUND4res> {
    COMPOUND4res::from_bytes(reply.clone()).ok()
}

/// The status of one op result (every result starts with its status), if it is one
/// this protocol knows.
pub fn status(r: &nfs_resop4) -> Option<nfsstat4> {
    let b = r.to_bytes();
    let v = i32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
    nfsstat4::from_i32(v)
}

/// The status of one op result; SERVERFAULT if it names none.
pub fn status_of(r: &nfs_resop4) -> nfsstat4 {
    status(r).unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT)
}

/// The open stateid and the file handle of the first OPEN and the GETFH after it, if
/// both succeeded.
pub fn opened(r: &COMPOUND4res) -> Option<(stateid4, Bytes)> {
    let i = r
        .resarray
        .iter()
        .position(|o| matches!(o, nfs_resop4::OP_OPEN(_)))?;
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(open)) = &r.resarray[i] else {
        return None;
    };
    let Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh))) = r.resarray.get(i + 1) else {
        return None;
    };
    Some((open.stateid.clone(), fh.object.clone()))
}

/// The data of every READ in a reply, in order.
pub fn read_results(r: &COMPOUND4res) -> Vec<Bytes> {
    r.resarray
        .iter()
        .filter_map(|o| match o {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => Some(ok.data.clone()),
            _ => None,
        })
        .collect()
}

/// (change, size) of the attributes [`crate::getattr_change_size`] asked for.
pub fn decode_change_size(f: &fattr4) -> Option<(u64, u64)> {
    let want = (1 << crate::FATTR4_CHANGE) | (1 << crate::FATTR4_SIZE);
    if f.attrmask.first().copied().unwrap_or(0) & want != want || f.attr_vals.len() < 16 {
        return None;
    }
    let v = &f.attr_vals;
    let change = u64::from_be_bytes(v[..8].try_into().ok()?);
    let size = u64::from_be_bytes(v[8..16].try_into().ok()?);
    Some((change, size))
}

/// The delegation an OPEN reply grants: (stateid, write).
pub fn granted_delegation(d: &open_delegation4) -> Option<(stateid4, bool)> {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r)
        | open_delegation4::OPEN_DELEGATE_READ_ATTRS_DELEG(r) => Some((r.stateid.clone(), false)),
        open_delegation4::OPEN_DELEGATE_WRITE(w)
        | open_delegation4::OPEN_DELEGATE_WRITE_ATTRS_DELEG(w) => Some((w.stateid.clone(), true)),
        open_delegation4::OPEN_DELEGATE_NONE | open_delegation4::OPEN_DELEGATE_NONE_EXT(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_opens() {
        let open = nfs_resop4::OP_OPEN(OPEN4res::default(nfsstat4::NFS4ERR_EXIST));
        assert_eq!(status(&open), Some(nfsstat4::NFS4ERR_EXIST));
        assert_eq!(
            status_of(&nfs_resop4::OP_PUTROOTFH(PUTROOTFH4res {
                status: nfsstat4::NFS4_OK
            })),
            nfsstat4::NFS4_OK
        );
        let r = COMPOUND4res {
            status: nfsstat4::NFS4ERR_EXIST,
            tag: Bytes::new(),
            resarray: vec![open],
        };
        assert_eq!(opened(&r), None);
        assert!(read_results(&r).is_empty());
    }
}
