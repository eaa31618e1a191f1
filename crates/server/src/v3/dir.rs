//! NFSv3 LOOKUP, READLINK, REMOVE, RMDIR, RENAME and LINK (RFC 1813 §3.3.3, §3.3.5,
//! §3.3.12–3.3.15). Each change first recalls the v4 delegations it conflicts with
//! and the directory delegations that would not hear of it, and afterwards tells the
//! directory delegations that do (`crate::ops::deleg`, `crate::ops::notify`), as a
//! v4 REMOVE, RENAME or LINK of another client would.

use bytes::Bytes;
use txnfs_backend::{Attrs, BackendError, FileType};
use txnfs_proto::nfs3::*;
use txnfs_state::deleg::dir::notify_type::{ADD_ENTRY, REMOVE_ENTRY, RENAME_ENTRY};
use txnfs_state::Access;

use crate::cstate::Compound;
use crate::fh::ObjFh;
use crate::ops::{deleg, notify};
use crate::v3::common::{
    be, dir_of, getattr, handle3, obj, post_op, post_op_now, v4, writable_dir, Wcc, R,
};

pub fn lookup3(c: &mut Compound, a: LOOKUP3args) -> LOOKUP3res {
    let mut dir: Option<(ObjFh, Attrs)> = None;
    let r = lookup_in(c, &a.what, &mut dir);
    // A lookup changes nothing: the directory's attributes read for it are current.
    let dir_attributes = match &dir {
        Some((d, attrs)) => post_op(&d.export, Some(attrs)),
        None => post_op_attr::FALSE,
    };
    match r {
        Ok((object, attrs)) => LOOKUP3res::NFS3_OK(LOOKUP3resok {
            object,
            obj_attributes: attrs,
            dir_attributes,
        }),
        Err(s) => LOOKUP3res::default(s, LOOKUP3resfail { dir_attributes }),
    }
}

fn lookup_in(
    c: &mut Compound,
    what: &diropargs3,
    seen: &mut Option<(ObjFh, Attrs)>,
) -> R<(nfs_fh3, post_op_attr)> {
    let (d, dattrs) = dir_of(c, what)?;
    *seen = Some((d.clone(), dattrs.clone()));
    if dattrs.ftype != FileType::Directory {
        return Err(nfsstat3::NFS3ERR_NOTDIR);
    }
    use crate::ops::attr::{require, X};
    v4(require(&dattrs, &c.creds, X))?;
    let be_ = &d.export.backend;
    let (key, attrs) = match &what.name[..] {
        b"." => (d.key.clone(), dattrs),
        // The parent of an export's root is the root itself: a v3 client never
        // leaves its export by name.
        b".." if d.key == d.export.root_key => (d.key.clone(), dattrs),
        b".." => be(be_.lookup_parent(c.scope.ctx(), &d.key))?,
        _ => {
            v4(crate::ops::fh::check_name(&what.name))?;
            be(be_.lookup(c.scope.ctx(), &d.key, &what.name))?
        }
    };
    let fh = handle3(c, &d.export, key)?;
    Ok((fh, post_op(&d.export, Some(&attrs))))
}

pub fn readlink3(c: &mut Compound, a: READLINK3args) -> READLINK3res {
    let mut seen: Option<ObjFh> = None;
    let mut run = |c: &mut Compound| -> R<Bytes> {
        let o = obj(c, &a.symlink)?;
        seen = Some(o.clone());
        let attrs = getattr(c, &o)?;
        if attrs.ftype != FileType::Symlink {
            return Err(nfsstat3::NFS3ERR_INVAL);
        }
        match o.export.backend.readlink(c.scope.ctx(), &o.key) {
            Ok(data) => Ok(data),
            Err(BackendError::NotSymlink) => Err(nfsstat3::NFS3ERR_INVAL),
            Err(e) => be(Err(e)),
        }
    };
    let r = run(c);
    let symlink_attributes = match &seen {
        Some(o) => post_op_now(c, o),
        None => post_op_attr::FALSE,
    };
    match r {
        Ok(data) => READLINK3res::NFS3_OK(READLINK3resok {
            symlink_attributes,
            data,
        }),
        Err(s) => READLINK3res::default(s, READLINK3resfail { symlink_attributes }),
    }
}

/// What REMOVE and RMDIR may remove.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Removing {
    NonDirectory,
    Directory,
}

pub fn remove3(c: &mut Compound, a: REMOVE3args) -> REMOVE3res {
    let mut wcc = Wcc::default();
    match remove_in(c, &a.object, Removing::NonDirectory, &mut wcc) {
        Ok(()) => REMOVE3res::NFS3_OK(REMOVE3resok {
            dir_wcc: wcc.data(c),
        }),
        Err(s) => REMOVE3res::default(
            s,
            REMOVE3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}

pub fn rmdir3(c: &mut Compound, a: RMDIR3args) -> RMDIR3res {
    let mut wcc = Wcc::default();
    match remove_in(c, &a.object, Removing::Directory, &mut wcc) {
        Ok(()) => RMDIR3res::NFS3_OK(RMDIR3resok {
            dir_wcc: wcc.data(c),
        }),
        Err(s) => RMDIR3res::default(
            s,
            RMDIR3resfail {
                dir_wcc: wcc.data(c),
            },
        ),
    }
}

fn remove_in(c: &mut Compound, what: &diropargs3, kind: Removing, wcc: &mut Wcc) -> R<()> {
    let d = obj(c, &what.dir)?;
    let dattrs = writable_dir(c, &d)?;
    *wcc = Wcc::dir(&d, &dattrs);
    // rmdir(2): "." is INVAL, ".." NOTEMPTY; unlink(2) of either is refused as a
    // bad name (ACCES).
    match (&what.name[..], kind) {
        (b".", Removing::Directory) => return Err(nfsstat3::NFS3ERR_INVAL),
        (b"..", Removing::Directory) => return Err(nfsstat3::NFS3ERR_NOTEMPTY),
        _ => v4(crate::ops::fh::check_name(&what.name))?,
    }
    let be_ = &d.export.backend;
    // The backend removes empty directories and other objects alike; v3 keeps
    // REMOVE (§3.3.12) and RMDIR (§3.3.13) apart.
    let (victim, vattrs) = be(be_.lookup(c.scope.ctx(), &d.key, &what.name))?;
    match (vattrs.ftype == FileType::Directory, kind) {
        (true, Removing::NonDirectory) => return Err(nfsstat3::NFS3ERR_ISDIR),
        (false, Removing::Directory) => return Err(nfsstat3::NFS3ERR_NOTDIR),
        _ => {}
    }
    v4(deleg::clear_name(c, &d, &what.name, Access::Namespace))?;
    v4(notify::before(c, &d, &dattrs, REMOVE_ENTRY))?;
    let cx = be(c.scope.ctx_for(&d.export, &c.creds, None))?;
    let change = be(be_.remove(cx, &d.key, &what.name))?;
    wcc.changed(change);
    notify::removed(c, &d, &dattrs, &what.name);
    // A file with other names lost a link: entries naming it elsewhere changed.
    notify::attrs_changed(c, &d.export, &victim);
    Ok(())
}

pub fn rename3(c: &mut Compound, a: RENAME3args) -> RENAME3res {
    let mut from = Wcc::default();
    let mut to = Wcc::default();
    let r = rename_in(c, &a, &mut from, &mut to);
    let fromdir_wcc = from.data(c);
    let todir_wcc = to.data(c);
    match r {
        Ok(()) => RENAME3res::NFS3_OK(RENAME3resok {
            fromdir_wcc,
            todir_wcc,
        }),
        Err(s) => RENAME3res::default(
            s,
            RENAME3resfail {
                fromdir_wcc,
                todir_wcc,
            },
        ),
    }
}

fn rename_in(c: &mut Compound, a: &RENAME3args, from: &mut Wcc, to: &mut Wcc) -> R<()> {
    let src = obj(c, &a.fromfile.dir)?;
    let dst = obj(c, &a.tofile.dir)?;
    let sattrs = writable_dir(c, &src)?;
    *from = Wcc::dir(&src, &sattrs);
    let dattrs = writable_dir(c, &dst)?;
    *to = Wcc::dir(&dst, &dattrs);
    if src.export.id != dst.export.id {
        return Err(nfsstat3::NFS3ERR_XDEV);
    }
    let (old, new) = (&a.fromfile.name, &a.tofile.name);
    v4(crate::ops::fh::check_name(old))?;
    v4(crate::ops::fh::check_name(new))?;
    // The file renamed and the one a RENAME would replace both change names.
    v4(deleg::clear_name(c, &src, old, Access::Namespace))?;
    v4(deleg::clear_name(c, &dst, new, Access::Namespace))?;
    let same_dir = sattrs.fileid == dattrs.fileid;
    if same_dir {
        v4(notify::before(c, &src, &sattrs, RENAME_ENTRY))?;
    } else {
        v4(notify::before(c, &src, &sattrs, REMOVE_ENTRY))?;
        v4(notify::before(c, &dst, &dattrs, ADD_ENTRY))?;
    }
    let be_ = &src.export.backend;
    let notifying = notify::any(c);
    let replaced = notifying && be_.lookup(c.scope.ctx(), &dst.key, new).is_ok();
    let cx = be(c.scope.ctx_for(&src.export, &c.creds, None))?;
    let change = be(be_.rename(cx, &src.key, old, &dst.key, new))?;
    from.changed(change.from);
    to.changed(change.to);
    if notifying && !(same_dir && old == new) {
        let moved = be_.lookup(c.scope.ctx(), &dst.key, new).ok();
        let obj = moved.as_ref().map(|(k, a)| (k, a));
        if same_dir {
            notify::renamed(c, &src, &sattrs, old, new, obj, replaced);
        } else {
            notify::removed(c, &src, &sattrs, old);
            notify::added(c, &dst, &dattrs, new, obj, replaced);
        }
        if let Some((k, _)) = &moved {
            notify::attrs_changed(c, &dst.export, k);
        }
    }
    Ok(())
}

pub fn link3(c: &mut Compound, a: LINK3args) -> LINK3res {
    let mut file: Option<ObjFh> = None;
    let mut wcc = Wcc::default();
    let r = link_in(c, &a, &mut file, &mut wcc);
    let file_attributes = match &file {
        Some(f) => post_op_now(c, f),
        None => post_op_attr::FALSE,
    };
    let linkdir_wcc = wcc.data(c);
    match r {
        Ok(()) => LINK3res::NFS3_OK(LINK3resok {
            file_attributes,
            linkdir_wcc,
        }),
        Err(s) => LINK3res::default(
            s,
            LINK3resfail {
                file_attributes,
                linkdir_wcc,
            },
        ),
    }
}

fn link_in(c: &mut Compound, a: &LINK3args, file: &mut Option<ObjFh>, wcc: &mut Wcc) -> R<()> {
    let f = obj(c, &a.file)?;
    *file = Some(f.clone());
    let d = obj(c, &a.link.dir)?;
    let dattrs = writable_dir(c, &d)?;
    *wcc = Wcc::dir(&d, &dattrs);
    crate::v3::common::check_new_name(&a.link.name)?;
    if f.export.id != d.export.id {
        return Err(nfsstat3::NFS3ERR_XDEV);
    }
    let fattrs = getattr(c, &f)?;
    if fattrs.ftype == FileType::Directory {
        return Err(nfsstat3::NFS3ERR_ISDIR);
    }
    v4(deleg::clear(c, &f, &fattrs, Access::Namespace))?;
    v4(notify::before(c, &d, &dattrs, ADD_ENTRY))?;
    let be_ = &d.export.backend;
    let cx = be(c.scope.ctx_for(&d.export, &c.creds, None))?;
    let linked = be(be_.link(cx, &f.key, &d.key, &a.link.name))?;
    wcc.changed(linked.dir);
    notify::added(
        c,
        &d,
        &dattrs,
        &a.link.name,
        Some((&f.key, &linked.attrs)),
        false,
    );
    notify::attrs_changed(c, &f.export, &f.key);
    Ok(())
}
