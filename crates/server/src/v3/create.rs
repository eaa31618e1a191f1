//! NFSv3 CREATE, MKDIR, SYMLINK and MKNOD (RFC 1813 §3.3.8–3.3.11).
//!
//! EXCLUSIVE CREATE stores the client's verifier in the new file's atime and mtime, as
//! knfsd does (the backend's `CreateMode::Exclusive`): a retransmission with the same
//! verifier finds the file and answers it as created, another verifier EXIST. The
//! client sets the real attributes with a SETATTR afterwards (§3.3.8).

use txnfs_backend::{Attrs, BackendError, CreateMode, NodeKind, SetAttrs};
use txnfs_proto::nfs3::*;
use txnfs_state::deleg::dir::notify_type::ADD_ENTRY;
use txnfs_state::Access;

use std::sync::Arc;

use crate::cstate::Compound;
use crate::errors::backend_status3;
use crate::export::Export;
use crate::ops::{deleg, notify};
use crate::v3::common::{
    be, check_new_name, handle3, obj, post_op, set_attrs, v4, writable_dir, Wcc, R,
};

/// What a creating procedure makes.
enum Making {
    File(CreateMode, SetAttrs),
    Node(NodeKind, SetAttrs),
}

/// The object made: its export, handle and attributes.
type Made = (Arc<Export>, nfs_fh3, Attrs);

fn make(c: &mut Compound, at: &diropargs3, what: Making, wcc: &mut Wcc) -> R<Made> {
    let d = obj(c, &at.dir)?;
    let dattrs = writable_dir(c, &d)?;
    *wcc = Wcc::dir(&d, &dattrs);
    check_new_name(&at.name)?;
    let set = match &what {
        Making::File(_, s) | Making::Node(_, s) => s,
    };
    v4(crate::ops::attr::check_new_owner(set, &c.creds))?;
    if let Making::File(CreateMode::Unchecked, s) = &what {
        // An existing file is opened and, with a size, truncated: its v4
        // delegations must go first.
        if s.size.is_some() {
            v4(deleg::clear_name(c, &d, &at.name, Access::Modify))?;
        }
    }
    v4(notify::before(c, &d, &dattrs, ADD_ENTRY))?;
    let be_ = &d.export.backend;
    let cx = be(c.scope.ctx_for(&d.export, &c.creds, None))?;
    let (key, attrs, change, created) = match &what {
        Making::File(mode, set) => {
            // §3.3.8: a name that exists as anything but a regular file is EXIST,
            // whatever the mode (knfsd answers so too).
            let made = be_
                .create_file(cx, &d.key, &at.name, *mode, set)
                .map_err(|e| match e {
                    BackendError::IsDir | BackendError::SymlinkLoop => nfsstat3::NFS3ERR_EXIST,
                    e => backend_status3(&e),
                })?;
            (made.key, made.attrs, made.dir, made.created)
        }
        Making::Node(kind, set) => {
            let made = be(be_.make_node(cx, &d.key, &at.name, kind, set))?;
            (made.key, made.attrs, made.dir, true)
        }
    };
    wcc.changed(change);
    if created {
        notify::added(c, &d, &dattrs, &at.name, Some((&key, &attrs)), false);
    }
    let fh = handle3(c, &d.export, key)?;
    Ok((d.export, fh, attrs))
}

/// The `(obj, obj_attributes)` of a creating procedure's reply.
fn made_reply(m: &Made) -> (post_op_fh3, post_op_attr) {
    let (export, fh, attrs) = m;
    (post_op_fh3::TRUE(fh.clone()), post_op(export, Some(attrs)))
}

pub fn create3(c: &mut Compound, a: CREATE3args) -> CREATE3res {
    let what = match &a.how {
        createhow3::UNCHECKED(s) => Making::File(CreateMode::Unchecked, set_attrs(s)),
        createhow3::GUARDED(s) => Making::File(CreateMode::Guarded, set_attrs(s)),
        createhow3::EXCLUSIVE(verf) => {
            Making::File(CreateMode::Exclusive(*verf), SetAttrs::default())
        }
    };
    let mut wcc = Wcc::default();
    match make(c, &a.r#where, what, &mut wcc) {
        Ok(m) => {
            let (obj, obj_attributes) = made_reply(&m);
            CREATE3res::NFS3_OK(CREATE3resok {
                obj,
                obj_attributes,
                dir_wcc: wcc.data(c),
            })
        }
        Err(s) => CREATE3res::default(
            s,
            CREATE3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}

pub fn mkdir3(c: &mut Compound, a: MKDIR3args) -> MKDIR3res {
    let what = Making::Node(NodeKind::Directory, set_attrs(&a.attributes));
    let mut wcc = Wcc::default();
    match make(c, &a.r#where, what, &mut wcc) {
        Ok(m) => {
            let (obj, obj_attributes) = made_reply(&m);
            MKDIR3res::NFS3_OK(MKDIR3resok {
                obj,
                obj_attributes,
                dir_wcc: wcc.data(c),
            })
        }
        Err(s) => MKDIR3res::default(
            s,
            MKDIR3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}

pub fn symlink3(c: &mut Compound, a: SYMLINK3args) -> SYMLINK3res {
    let target = a.symlink.symlink_data.clone();
    let mut wcc = Wcc::default();
    let r = if target.is_empty() || target.contains(&0) {
        Err(nfsstat3::NFS3ERR_INVAL)
    } else {
        let mut set = set_attrs(&a.symlink.symlink_attributes);
        // A symlink's size is its target's length: it cannot be set.
        set.size = None;
        make(
            c,
            &a.r#where,
            Making::Node(NodeKind::Symlink(target), set),
            &mut wcc,
        )
    };
    match r {
        Ok(m) => {
            let (obj, obj_attributes) = made_reply(&m);
            SYMLINK3res::NFS3_OK(SYMLINK3resok {
                obj,
                obj_attributes,
                dir_wcc: wcc.data(c),
            })
        }
        Err(s) => SYMLINK3res::default(
            s,
            SYMLINK3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}

pub fn mknod3(c: &mut Compound, a: MKNOD3args) -> MKNOD3res {
    // Device nodes are root's to make (mknod(2)); the backend makes FIFOs and sockets
    // where its file system can, else NOTSUPP.
    let what = match &a.what {
        mknoddata3::NF3CHR(_) | mknoddata3::NF3BLK(_) if c.creds.uid != 0 => {
            Err(nfsstat3::NFS3ERR_PERM)
        }
        mknoddata3::NF3CHR(d) => Ok(Making::Node(
            NodeKind::CharDev(d.spec.specdata1, d.spec.specdata2),
            set_attrs(&d.dev_attributes),
        )),
        mknoddata3::NF3BLK(d) => Ok(Making::Node(
            NodeKind::BlockDev(d.spec.specdata1, d.spec.specdata2),
            set_attrs(&d.dev_attributes),
        )),
        mknoddata3::NF3SOCK(s) => Ok(Making::Node(NodeKind::Socket, set_attrs(s))),
        mknoddata3::NF3FIFO(s) => Ok(Making::Node(NodeKind::Fifo, set_attrs(s))),
        mknoddata3::default(_) => Err(nfsstat3::NFS3ERR_BADTYPE),
    };
    let mut wcc = Wcc::default();
    match what.and_then(|w| make(c, &a.r#where, w, &mut wcc)) {
        Ok(m) => {
            let (obj, obj_attributes) = made_reply(&m);
            MKNOD3res::NFS3_OK(MKNOD3resok {
                obj,
                obj_attributes,
                dir_wcc: wcc.data(c),
            })
        }
        Err(s) => MKNOD3res::default(
            s,
            MKNOD3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}
