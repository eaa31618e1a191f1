//! Attribute operations: GETATTR, SETATTR, VERIFY, NVERIFY, ACCESS.

use crate::cstate::Compound;
use crate::errors::status_from_u32;
use crate::errors::{OpError, OpResult};
use crate::fh::Fh;
use crate::nfs::*;
use txnfs_backend::{Attrs, Creds, FileType};

/// Permission bits a caller has on an object (POSIX owner/group/other, root bypasses
/// read/write, and execute when any x bit is set).
pub fn perms(attrs: &Attrs, creds: &Creds) -> u32 {
    if creds.uid == 0 {
        let x = if attrs.mode & 0o111 != 0 || attrs.ftype == FileType::Directory {
            1
        } else {
            0
        };
        return 6 | x;
    }
    let m = attrs.mode;
    if creds.uid == attrs.uid {
        (m >> 6) & 7
    } else if creds.gid == attrs.gid || creds.gids.contains(&attrs.gid) {
        (m >> 3) & 7
    } else {
        m & 7
    }
}

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// Require permission bits `want` on `attrs` for the caller.
pub fn require(attrs: &Attrs, creds: &Creds, want: u32) -> Result<(), nfsstat4> {
    if perms(attrs, creds) & want == want {
        Ok(())
    } else {
        Err(nfsstat4::NFS4ERR_ACCESS)
    }
}

/// Owner and group a caller may give a new object (non-root: only itself and its groups).
pub fn check_new_owner(set: &txnfs_backend::SetAttrs, creds: &Creds) -> Result<(), nfsstat4> {
    if creds.uid == 0 {
        return Ok(());
    }
    if set.uid.is_some_and(|u| u != creds.uid) {
        return Err(nfsstat4::NFS4ERR_PERM);
    }
    if set
        .gid
        .is_some_and(|g| g != creds.gid && !creds.gids.contains(&g))
    {
        return Err(nfsstat4::NFS4ERR_PERM);
    }
    Ok(())
}

pub fn getattr(c: &mut Compound, a: &GETATTR4args) -> OpResult {
    let fh = c.cfh()?.clone();
    let known = delegated_attrs(c, &fh, &a.attr_request)?;
    let attrs = c
        .srv
        .fattr(c.scope.ctx(), &fh, &a.attr_request, known.as_ref(), c.minor)?;
    Ok(nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(
        GETATTR4resok {
            obj_attributes: attrs,
        },
    )))
}

/// The attributes of a file another client holds a write delegation on, when the
/// request asks for its size or change (RFC 8881 §10.4.3): that client may have
/// written without telling the server, so the server asks it (CB_GETATTR). If it
/// modified the file, the reply carries its size and a change attribute past the one
/// it was granted at; if it does not answer, the delegation is recalled instead and
/// this GETATTR waits for the flushed data. `None`: read our own attributes (again).
fn delegated_attrs(c: &Compound, fh: &Fh, request: &[u32]) -> Result<Option<Attrs>, OpError> {
    let times = (1u64 << FATTR4_TIME_ACCESS)
        | (1u64 << FATTR4_TIME_MODIFY)
        | (1u64 << FATTR4_TIME_METADATA);
    let word01 = u64::from(request.first().copied().unwrap_or(0))
        | u64::from(request.get(1).copied().unwrap_or(0)) << 32;
    let wanted = word01 & ((1 << FATTR4_SIZE) | (1 << FATTR4_CHANGE) | times) != 0;
    let Fh::Obj(o) = fh else {
        return Ok(None);
    };
    if !wanted {
        return Ok(None);
    }
    if c.srv.core()?.delegations().is_empty() {
        return Ok(None);
    }
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    if attrs.ftype == FileType::Regular {
        let file = c.srv.state_file_id(&o.export, attrs.fileid);
        if c.srv
            .core()?
            .delegations()
            .write_holder(c.client, file)
            .is_some()
        {
            return held_attrs(c, o, attrs);
        }
    }
    // Nobody else may have written it unseen: the attributes just read are the answer
    // (no second GETATTR of the backend).
    Ok(Some(attrs))
}

/// The attributes `attrs` of the file `o` as another client's write delegation may
/// have changed them ([`delegated_attrs`]; NFSv3 GETATTR asks the same): `None` when
/// no other client holds one, or the holder did not answer and returned it instead.
pub(crate) fn held_attrs(
    c: &Compound,
    o: &crate::fh::ObjFh,
    mut attrs: Attrs,
) -> Result<Option<Attrs>, OpError> {
    if attrs.ftype != FileType::Regular {
        return Ok(None);
    }
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    let holder = c.srv.core()?.delegations().write_holder(c.client, file);
    let Some(h) = holder else {
        return Ok(None);
    };
    if let Some(held) = c.srv.cb_getattr(h.client, &h.fh, h.timestamps, c.waited) {
        if held.change != h.change {
            attrs.size = held.size;
            attrs.change = attrs.change.max(h.change) + 1;
        }
        // The holder of delegated timestamps keeps the file's times (RFC 9754 §5).
        if let Some(t) = held.mtime {
            attrs.mtime = attrs.mtime.max(t);
        }
        if let Some(t) = held.atime {
            attrs.atime = attrs.atime.max(t);
        }
        return Ok(Some(attrs));
    }
    c.srv
        .clear_delegations(c.now, c.client, file, txnfs_state::Access::Read, c.waited)?;
    Ok(None)
}

pub fn setattr(c: &mut Compound, a: &SETATTR4args) -> OpResult {
    let fh = c.cfh()?.clone();
    let Fh::Obj(o) = &fh else {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    };
    if c.read_only(&o.export) {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    }
    let (mut set, attrsset) = txnfs_attr::decode_setattrs_in(
        &a.obj_attributes.attrmask,
        &a.obj_attributes.attr_vals,
        c.minor,
    )
    .map_err(|e| status_from_u32(e.nfsstat()))?;
    // RFC 8275 §3: mode_umask is for creating operations only.
    if txnfs_attr::bitmap_isset(&attrsset, txnfs_attr::fattr::MODE_UMASK) {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    }
    let cur = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    // Checked first: a stateid that does not allow them recalls nothing.
    let delegated_times = delegated_times(c, o, &cur, &a.stateid, &attrsset, &mut set)?;
    // Another client's delegation caches these attributes (and, for size, the data).
    crate::ops::deleg::clear(c, o, &cur, txnfs_state::Access::Modify)?;
    if set.size.is_some() {
        if cur.ftype == FileType::Directory {
            return Err(nfsstat4::NFS4ERR_ISDIR.into());
        }
        if cur.ftype != FileType::Regular {
            return Err(nfsstat4::NFS4ERR_INVAL.into());
        }
        let sid = c.resolve_sid(&a.stateid)?;
        crate::ops::file::check_io_access(c, o, &sid, &cur, true)?;
        // Truncation needs write permission whatever the stateid.
        require(&cur, &c.creds, W)?;
    }
    check_owner_changes(&cur, &set, &c.creds, delegated_times)?;
    if !set.is_empty() {
        let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
        let _one_change = c.srv.file_changes.lock(o.export.id, &o.key);
        o.export.backend.setattr(cx, &o.key, &set)?;
    }
    Ok(nfs_resop4::OP_SETATTR(SETATTR4res {
        status: nfsstat4::NFS4_OK,
        attrsset,
    }))
}

/// Whether `creds` may make the changes of `set` other than the size to an object
/// whose attributes are `cur` (chmod, chown, chgrp and utimes rules; NFSv3 SETATTR
/// asks the same). `delegated_times`: the times are a delegation holder's, its right.
pub fn check_owner_changes(
    cur: &Attrs,
    set: &txnfs_backend::SetAttrs,
    creds: &Creds,
    delegated_times: bool,
) -> Result<(), nfsstat4> {
    let owner_or_root = creds.uid == 0 || creds.uid == cur.uid;
    if (set.mode.is_some() || set.gid.is_some()) && !owner_or_root {
        return Err(nfsstat4::NFS4ERR_PERM);
    }
    if let Some(uid) = set.uid {
        if creds.uid != 0 && uid != cur.uid {
            return Err(nfsstat4::NFS4ERR_PERM);
        }
    }
    if (set.atime.is_some() || set.mtime.is_some()) && !owner_or_root && !delegated_times {
        // Setting times to "now" needs only write permission (utimes(NULL) rules).
        let only_now = [set.atime, set.mtime]
            .iter()
            .all(|t| !matches!(t, Some(txnfs_backend::SetTime::Client(_))));
        if !only_now {
            return Err(nfsstat4::NFS4ERR_PERM);
        }
        require(cur, creds, W)?;
    }
    Ok(())
}

/// SETATTR of `time_deleg_access` / `time_deleg_modify` (RFC 9754 §5): only the holder
/// of a delegation with delegated timestamps on this file sets them, with that
/// delegation's stateid (else BAD_STATEID), a read one the access time only (else
/// INVAL). A time older than the file's is dropped, as knfsd drops it: the holder's
/// clock never moves the file's times back. Returns whether such times were given
/// (the holder needs no ownership to set them: the delegation is its right).
fn delegated_times(
    c: &Compound,
    o: &crate::fh::ObjFh,
    cur: &Attrs,
    stateid: &stateid4,
    attrsset: &[u32],
    set: &mut txnfs_backend::SetAttrs,
) -> Result<bool, OpError> {
    use txnfs_attr::{bitmap_isset, fattr};
    use txnfs_backend::SetTime;
    let access = bitmap_isset(attrsset, fattr::TIME_DELEG_ACCESS);
    let modify = bitmap_isset(attrsset, fattr::TIME_DELEG_MODIFY);
    if !access && !modify {
        return Ok(false);
    }
    let client = c.client()?;
    let sid = crate::statecore::stateid_from_wire(&c.resolve_sid(stateid)?);
    let file = c.srv.state_file_id(&o.export, cur.fileid);
    let kind = c
        .srv
        .core()?
        .delegations()
        .timestamps_holder(client, &sid, file)
        .map_err(|e| crate::errors::state_status(&e))?;
    if modify && kind != txnfs_state::DelegType::Write {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    }
    let newer = |t: Option<SetTime>, now: txnfs_backend::Timestamp| match t {
        Some(SetTime::Client(t)) if t > now => Some(SetTime::Client(t)),
        _ => None,
    };
    if access {
        set.atime = newer(set.atime, cur.atime);
    }
    if modify {
        set.mtime = newer(set.mtime, cur.mtime);
    }
    Ok(true)
}

fn compare(c: &mut Compound, f: &fattr4) -> Result<bool, OpError> {
    let fh = c.cfh()?.clone();
    c.srv.compare_attrs(c.scope.ctx(), &fh, f, c.minor)
}

pub fn verify(c: &mut Compound, a: &VERIFY4args) -> OpResult {
    if !compare(c, &a.obj_attributes)? {
        return Err(nfsstat4::NFS4ERR_NOT_SAME.into());
    }
    Ok(nfs_resop4::OP_VERIFY(VERIFY4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn nverify(c: &mut Compound, a: &NVERIFY4args) -> OpResult {
    if compare(c, &a.obj_attributes)? {
        return Err(nfsstat4::NFS4ERR_SAME.into());
    }
    Ok(nfs_resop4::OP_NVERIFY(NVERIFY4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn access(c: &mut Compound, a: &ACCESS4args) -> OpResult {
    let fh = c.cfh()?.clone();
    let attrs = c.srv.attrs_of(c.scope.ctx(), &fh)?;
    let p = perms(&attrs, &c.creds);
    let ro = match &fh {
        Fh::Pseudo(_) => true,
        Fh::Obj(o) => c.read_only(&o.export),
    };
    let dir = attrs.ftype == FileType::Directory;
    let mut granted = 0;
    if p & R != 0 {
        granted |= ACCESS4_READ;
    }
    if dir && p & X != 0 {
        granted |= ACCESS4_LOOKUP;
    }
    if !ro && p & W != 0 {
        granted |= ACCESS4_MODIFY | ACCESS4_EXTEND;
        if dir {
            granted |= ACCESS4_DELETE;
        }
    }
    if !dir && p & X != 0 {
        granted |= ACCESS4_EXECUTE;
    }
    let mut supported = ACCESS4_READ
        | ACCESS4_LOOKUP
        | ACCESS4_MODIFY
        | ACCESS4_EXTEND
        | ACCESS4_DELETE
        | ACCESS4_EXECUTE;
    // RFC 8276 §8.4.3: the extended-attribute bits, in NFSv4.2, where the export
    // keeps extended attributes (files and directories): reading and listing need
    // read permission, changing them write permission.
    use crate::ops::v42::{ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE};
    let xattrs = match &fh {
        Fh::Obj(o) => o.export.backend.xattr_support(),
        Fh::Pseudo(_) => false,
    };
    if c.minor >= 2 && xattrs && matches!(attrs.ftype, FileType::Regular | FileType::Directory) {
        supported |= ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;
        if p & R != 0 {
            granted |= ACCESS4_XAREAD | ACCESS4_XALIST;
        }
        if !ro && p & W != 0 {
            granted |= ACCESS4_XAWRITE;
        }
    }
    let asked = a.access & supported;
    Ok(nfs_resop4::OP_ACCESS(ACCESS4res::NFS4_OK(ACCESS4resok {
        supported: asked,
        access: granted & asked,
    })))
}
