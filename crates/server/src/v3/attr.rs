//! NFSv3 GETATTR, SETATTR and ACCESS (RFC 1813 §3.3.1, §3.3.2, §3.3.4).

use txnfs_backend::FileType;
use txnfs_proto::nfs3::*;
use txnfs_state::Access;

use crate::cstate::Compound;
use crate::errors::{op_status3, v3_status_of_v4};
use crate::ops::attr::{perms, require, R as READ, W, X};
use crate::v3::common::{be, fattr3_of, getattr, obj, post_op, set_attrs, time3, v4, Wcc, R};

pub fn getattr3(c: &mut Compound, a: GETATTR3args) -> GETATTR3res {
    let run = |c: &mut Compound| -> R<fattr3> {
        let o = obj(c, &a.object)?;
        let mut attrs = getattr(c, &o)?;
        // A v4 client's write delegation may hold writes the server has not seen: its
        // holder is asked (CB_GETATTR), as for a v4 GETATTR (RFC 8881 §10.4.3).
        if !c
            .srv
            .core()
            .map_err(v3_status_of_v4)?
            .delegations()
            .is_empty()
        {
            let held = crate::ops::attr::held_attrs(c, &o, attrs.clone());
            if let Some(h) = held.map_err(op_status3)? {
                attrs = h;
            }
        }
        Ok(fattr3_of(&o.export, &attrs))
    };
    match run(c) {
        Ok(obj_attributes) => GETATTR3res::NFS3_OK(GETATTR3resok { obj_attributes }),
        Err(s) => GETATTR3res::default(s),
    }
}

pub fn setattr3(c: &mut Compound, a: SETATTR3args) -> SETATTR3res {
    let mut wcc = Wcc::default();
    match setattr_in(c, &a, &mut wcc) {
        Ok(()) => SETATTR3res::NFS3_OK(SETATTR3resok {
            obj_wcc: wcc.data(c),
        }),
        Err(s) => SETATTR3res::default(
            s,
            SETATTR3resfail {
                obj_wcc: wcc.data(c),
            },
        ),
    }
}

fn setattr_in(c: &mut Compound, a: &SETATTR3args, wcc: &mut Wcc) -> R<()> {
    let o = obj(c, &a.object)?;
    let cur = getattr(c, &o)?;
    *wcc = Wcc::file(&o, &cur);
    if c.read_only(&o.export) {
        return Err(nfsstat3::NFS3ERR_ROFS);
    }
    let set = set_attrs(&a.new_attributes);
    if set.size.is_some() {
        match cur.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(nfsstat3::NFS3ERR_ISDIR),
            _ => return Err(nfsstat3::NFS3ERR_INVAL),
        }
        v4(require(&cur, &c.creds, W))?;
    }
    v4(crate::ops::attr::check_owner_changes(
        &cur, &set, &c.creds, false,
    ))?;
    // A v4 client's delegation caches these attributes (and, for size, the data).
    v4(crate::ops::deleg::clear(c, &o, &cur, Access::Modify))?;
    // Pre-op attributes read again under the file's change lock (crate::filechange).
    // §3.3.2: the guard is the ctime the client last saw; another is NOT_SYNC (checked
    // against these attributes, so no NFS change slips between check and change).
    let srv = c.srv;
    let _one_change = srv.file_changes.lock(o.export.id, &o.key);
    let cur = getattr(c, &o)?;
    *wcc = Wcc::file(&o, &cur);
    if let sattrguard3::TRUE(ctime) = &a.guard {
        if *ctime != time3(cur.ctime) {
            return Err(nfsstat3::NFS3ERR_NOT_SYNC);
        }
    }
    if set.is_empty() {
        return Ok(());
    }
    let cx = be(c.scope.ctx_for(&o.export, &c.creds, None))?;
    let after = be(o.export.backend.setattr(cx, &o.key, &set))?;
    wcc.changed_to(after);
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    Ok(())
}

pub fn access3(c: &mut Compound, a: ACCESS3args) -> ACCESS3res {
    let mut seen = None;
    let mut run = |c: &mut Compound| -> R<u32> {
        let o = obj(c, &a.object)?;
        let attrs = getattr(c, &o)?;
        let granted = granted(&attrs, &c.creds, c.read_only(&o.export));
        seen = Some((o, attrs));
        Ok(granted & a.access)
    };
    let r = run(c);
    let obj_attributes = match &seen {
        Some((o, attrs)) => post_op(&o.export, Some(attrs)),
        None => post_op_attr::FALSE,
    };
    match r {
        Ok(access) => ACCESS3res::NFS3_OK(ACCESS3resok {
            obj_attributes,
            access,
        }),
        Err(s) => ACCESS3res::default(s, ACCESS3resfail { obj_attributes }),
    }
}

/// The ACCESS3 bits the mode bits give `creds` (§3.3.4), as NFSv4 ACCESS grants
/// them: nothing that modifies on a read-only export.
fn granted(attrs: &txnfs_backend::Attrs, creds: &txnfs_backend::Creds, read_only: bool) -> u32 {
    let p = perms(attrs, creds);
    let dir = attrs.ftype == FileType::Directory;
    let mut granted = 0;
    if p & READ != 0 {
        granted |= ACCESS3_READ;
    }
    if dir && p & X != 0 {
        granted |= ACCESS3_LOOKUP;
    }
    if !read_only && p & W != 0 {
        granted |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        if dir {
            granted |= ACCESS3_DELETE;
        }
    }
    if !dir && p & X != 0 {
        granted |= ACCESS3_EXECUTE;
    }
    granted
}
