//! Directory operations: CREATE, REMOVE, RENAME, LINK, READLINK, READDIR.

use crate::cstate::Compound;
use crate::errors::status_from_u32;
use crate::errors::{OpError, OpResult};
use crate::export::PseudoChild;
use crate::fh::{Fh, ObjFh};
use crate::nfs::*;
use crate::ops::attr::{require, W, X};
use crate::ops::deleg;
use crate::ops::fh::check_name;
use crate::ops::notify;
use bytes::Bytes;
use txnfs_backend::{DirChange, FileType, NodeKind};
use txnfs_state::deleg::dir::notify_type::{ADD_ENTRY, REMOVE_ENTRY, RENAME_ENTRY};
use txnfs_state::Access;

/// The one place a backend's [`DirChange`] becomes a `change_info4` (RFC 8881 §3.3.4).
/// Guards the wire value even against a misbehaving layer: `after` is never 0 and never
/// below `before`; a value that had to be repaired is not claimed atomic.
pub fn change_info(d: DirChange) -> change_info4 {
    let after = d.after.max(d.before).max(1);
    change_info4 {
        atomic: d.atomic && after == d.after,
        before: d.before,
        after,
    }
}

/// The current filehandle as a writable directory of an export.
fn writable_dir(c: &Compound, fh: &Fh) -> Result<(ObjFh, txnfs_backend::Attrs), OpError> {
    let Fh::Obj(o) = fh else {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    };
    if c.read_only(&o.export) {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    }
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    if attrs.ftype != FileType::Directory {
        return Err(nfsstat4::NFS4ERR_NOTDIR.into());
    }
    require(&attrs, &c.creds, W | X)?;
    Ok((o.clone(), attrs))
}

pub fn create(c: &mut Compound, a: CREATE4args) -> OpResult {
    let fh = c.cfh()?.clone();
    let (dir, dattrs) = writable_dir(c, &fh)?;
    check_name(&a.objname)?;
    let kind = match a.objtype {
        createtype4::NF4LNK(target) => {
            if target.is_empty() {
                return Err(nfsstat4::NFS4ERR_INVAL.into());
            }
            NodeKind::Symlink(target)
        }
        createtype4::NF4BLK(d) | createtype4::NF4CHR(d) if c.creds.uid != 0 => {
            let _ = d;
            return Err(nfsstat4::NFS4ERR_PERM.into());
        }
        createtype4::NF4BLK(d) => NodeKind::BlockDev(d.specdata1, d.specdata2),
        createtype4::NF4CHR(d) => NodeKind::CharDev(d.specdata1, d.specdata2),
        createtype4::NF4SOCK => NodeKind::Socket,
        createtype4::NF4FIFO => NodeKind::Fifo,
        createtype4::NF4DIR => NodeKind::Directory,
        createtype4::default(_) => return Err(nfsstat4::NFS4ERR_BADTYPE.into()),
    };
    let (set, attrset) =
        txnfs_attr::decode_setattrs_in(&a.createattrs.attrmask, &a.createattrs.attr_vals, c.minor)
            .map_err(|e| status_from_u32(e.nfsstat()))?;
    crate::ops::attr::check_new_owner(&set, &c.creds)?;
    notify::before(c, &dir, &dattrs, ADD_ENTRY)?;
    let be = &dir.export.backend;
    let cx = c.scope.ctx_for(&dir.export, &c.creds, c.client)?;
    let made = be.make_node(cx, &dir.key, &a.objname, &kind, &set)?;
    notify::added(
        c,
        &dir,
        &dattrs,
        &a.objname,
        Some((&made.key, &made.attrs)),
        false,
    );
    c.cfh = Some(c.srv.obj_fh(&dir.export, made.key));
    Ok(nfs_resop4::OP_CREATE(CREATE4res::NFS4_OK(CREATE4resok {
        cinfo: change_info(made.dir),
        attrset,
    })))
}

pub fn remove(c: &mut Compound, a: &REMOVE4args) -> OpResult {
    let fh = c.cfh()?.clone();
    let (dir, dattrs) = writable_dir(c, &fh)?;
    check_name(&a.target)?;
    deleg::clear_name(c, &dir, &a.target, Access::Namespace)?;
    notify::before(c, &dir, &dattrs, REMOVE_ENTRY)?;
    let be = &dir.export.backend;
    let victim = notify::any(c)
        .then(|| be.lookup(c.scope.ctx(), &dir.key, &a.target).ok())
        .flatten();
    let cx = c.scope.ctx_for(&dir.export, &c.creds, c.client)?;
    let change = be.remove(cx, &dir.key, &a.target)?;
    notify::removed(c, &dir, &dattrs, &a.target);
    // A file with other names lost a link: entries naming it elsewhere changed.
    if let Some((k, _)) = &victim {
        notify::attrs_changed(c, &dir.export, k);
    }
    Ok(nfs_resop4::OP_REMOVE(REMOVE4res::NFS4_OK(REMOVE4resok {
        cinfo: change_info(change),
    })))
}

pub fn rename(c: &mut Compound, a: &RENAME4args) -> OpResult {
    let sfh = c.sfh.clone().ok_or(nfsstat4::NFS4ERR_NOFILEHANDLE)?;
    let tfh = c.cfh()?.clone();
    check_name(&a.oldname)?;
    check_name(&a.newname)?;
    let (src, sattrs) = writable_dir(c, &sfh)?;
    let (dst, dattrs) = writable_dir(c, &tfh)?;
    if src.export.id != dst.export.id {
        return Err(nfsstat4::NFS4ERR_XDEV.into());
    }
    // The file renamed and the one a RENAME would replace both change names.
    deleg::clear_name(c, &src, &a.oldname, Access::Namespace)?;
    deleg::clear_name(c, &dst, &a.newname, Access::Namespace)?;
    // Directory delegations: one directory sees a rename, two a remove and an add.
    let same_dir = sattrs.fileid == dattrs.fileid;
    if same_dir {
        notify::before(c, &src, &sattrs, RENAME_ENTRY)?;
    } else {
        notify::before(c, &src, &sattrs, REMOVE_ENTRY)?;
        notify::before(c, &dst, &dattrs, ADD_ENTRY)?;
    }
    let be = &src.export.backend;
    let notifying = notify::any(c);
    let replaced = notifying && be.lookup(c.scope.ctx(), &dst.key, &a.newname).is_ok();
    let cx = c.scope.ctx_for(&src.export, &c.creds, c.client)?;
    let change = be.rename(cx, &src.key, &a.oldname, &dst.key, &a.newname)?;
    if notifying && !(same_dir && a.oldname == a.newname) {
        let moved = be.lookup(c.scope.ctx(), &dst.key, &a.newname).ok();
        let obj = moved.as_ref().map(|(k, a)| (k, a));
        if same_dir {
            notify::renamed(c, &src, &sattrs, &a.oldname, &a.newname, obj, replaced);
        } else {
            notify::removed(c, &src, &sattrs, &a.oldname);
            notify::added(c, &dst, &dattrs, &a.newname, obj, replaced);
        }
        // Its ctime moved: directories it is an entry of elsewhere (hard links) hear.
        if let Some((k, _)) = &moved {
            notify::attrs_changed(c, &dst.export, k);
        }
    }
    Ok(nfs_resop4::OP_RENAME(RENAME4res::NFS4_OK(RENAME4resok {
        source_cinfo: change_info(change.from),
        target_cinfo: change_info(change.to),
    })))
}

pub fn link(c: &mut Compound, a: &LINK4args) -> OpResult {
    let sfh = c.sfh.clone().ok_or(nfsstat4::NFS4ERR_NOFILEHANDLE)?;
    let tfh = c.cfh()?.clone();
    check_name(&a.newname)?;
    let Fh::Obj(file) = &sfh else {
        return Err(nfsstat4::NFS4ERR_ISDIR.into());
    };
    let (dir, dattrs) = writable_dir(c, &tfh)?;
    if file.export.id != dir.export.id {
        return Err(nfsstat4::NFS4ERR_XDEV.into());
    }
    let be = &dir.export.backend;
    let fattrs = be.getattr(c.scope.ctx(), &file.key)?;
    if fattrs.ftype == FileType::Directory {
        return Err(nfsstat4::NFS4ERR_ISDIR.into());
    }
    deleg::clear(c, file, &fattrs, Access::Namespace)?;
    notify::before(c, &dir, &dattrs, ADD_ENTRY)?;
    let cx = c.scope.ctx_for(&dir.export, &c.creds, c.client)?;
    let linked = be.link(cx, &file.key, &dir.key, &a.newname)?;
    notify::added(
        c,
        &dir,
        &dattrs,
        &a.newname,
        Some((&file.key, &linked.attrs)),
        false,
    );
    // Its link count changed: so did every entry naming it.
    notify::attrs_changed(c, &file.export, &file.key);
    Ok(nfs_resop4::OP_LINK(LINK4res::NFS4_OK(LINK4resok {
        cinfo: change_info(linked.dir),
    })))
}

pub fn readlink(c: &mut Compound) -> OpResult {
    let Fh::Obj(o) = c.cfh()? else {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    };
    let be = &o.export.backend;
    match be.readlink(c.scope.ctx(), &o.key) {
        Ok(link) => Ok(nfs_resop4::OP_READLINK(READLINK4res::NFS4_OK(
            READLINK4resok { link },
        ))),
        Err(txnfs_backend::BackendError::NotSymlink | txnfs_backend::BackendError::Inval) => {
            Err(nfsstat4::NFS4ERR_INVAL.into())
        }
        Err(e) => Err(e.into()),
    }
}

/// XDR size of an entry4 in a READDIR reply (value-follows flag included).
fn entry_size(name: &Bytes, attrs: &fattr4) -> usize {
    4 + 8
        + 4
        + txnfs_xdr::pad_len(name.len())
        + name.len()
        + 4
        + 4 * attrs.attrmask.len()
        + 4
        + attrs.attr_vals.len()
        + txnfs_xdr::pad_len(attrs.attr_vals.len())
}

/// READDIR cookies 1 and 2 are reserved (RFC 8881 §18.23.4); backend cookie n is sent
/// as n + 2.
const COOKIE_SHIFT: u64 = 2;

pub fn readdir(c: &mut Compound, a: &READDIR4args) -> OpResult {
    let fh = c.cfh()?.clone();
    if a.cookie == 1 || a.cookie == 2 {
        return Err(nfsstat4::NFS4ERR_BAD_COOKIE.into());
    }
    let verf = c.srv.cookieverf(&fh);
    if a.cookie != 0 && a.cookieverf != [0u8; 8] && a.cookieverf != verf {
        return Err(nfsstat4::NFS4ERR_NOT_SAME.into());
    }
    // Reply budget: the client's maxcount and what is left in the COMPOUND reply.
    let limit = (a.maxcount as usize).min(c.reply_left.saturating_sub(8));
    let fixed = 8 + 4 + 4; // cookieverf + end-of-list marker + eof
    let dir_limit = if a.dircount == 0 {
        usize::MAX
    } else {
        a.dircount as usize
    };
    let mut entries: Vec<entry4> = Vec::new();
    let mut used = fixed;
    let mut dir_used = 0usize;
    let mut eof = false;
    let mut full = false;

    match &fh {
        Fh::Pseudo(n) => {
            let set = c.srv.exports.snapshot();
            let node = set.node(*n).ok_or(nfsstat4::NFS4ERR_STALE)?;
            let start = a.cookie.saturating_sub(COOKIE_SHIFT);
            let children: Vec<(Bytes, PseudoChild)> = node
                .children
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            eof = true;
            for (i, (name, child)) in children.iter().enumerate().skip(start as usize) {
                // Exports the caller may not use are not listed (ADR 0043).
                if !c.may_see(child) {
                    continue;
                }
                let cfh = match child {
                    PseudoChild::Node(m) => Fh::Pseudo(*m),
                    PseudoChild::Export(id) => {
                        let e = set.get(*id).ok_or(nfsstat4::NFS4ERR_STALE)?;
                        c.srv.obj_fh(e, e.root_key.clone())
                    }
                };
                let attrs = c
                    .srv
                    .fattr(c.scope.ctx(), &cfh, &a.attr_request, None, c.minor)?;
                let sz = entry_size(name, &attrs);
                if used + sz > limit || dir_used + 12 + name.len() > dir_limit {
                    eof = false;
                    full = true;
                    break;
                }
                used += sz;
                dir_used += 12 + name.len();
                entries.push(entry4 {
                    cookie: i as u64 + 1 + COOKIE_SHIFT,
                    name: name.clone(),
                    attrs,
                });
            }
        }
        Fh::Obj(o) => {
            let be = &o.export.backend;
            let dattrs = be.getattr(c.scope.ctx(), &o.key)?;
            if dattrs.ftype != FileType::Directory {
                return Err(nfsstat4::NFS4ERR_NOTDIR.into());
            }
            require(&dattrs, &c.creds, crate::ops::attr::R)?;
            let mut cookie = a.cookie.saturating_sub(COOKIE_SHIFT);
            'outer: loop {
                let (batch, at_end) = be.readdir(c.scope.ctx(), &o.key, cookie, 128)?;
                if batch.is_empty() {
                    eof = at_end;
                    break;
                }
                for e in batch {
                    let efh = c.srv.obj_fh(&o.export, e.key.clone());
                    let attrs = c.srv.fattr(
                        c.scope.ctx(),
                        &efh,
                        &a.attr_request,
                        Some(&e.attrs),
                        c.minor,
                    )?;
                    let sz = entry_size(&e.name, &attrs);
                    if used + sz > limit || dir_used + 12 + e.name.len() > dir_limit {
                        full = true;
                        break 'outer;
                    }
                    used += sz;
                    dir_used += 12 + e.name.len();
                    cookie = e.cookie;
                    entries.push(entry4 {
                        cookie: e.cookie.saturating_add(COOKIE_SHIFT),
                        name: e.name,
                        attrs,
                    });
                }
                if at_end {
                    eof = true;
                    break;
                }
            }
        }
    }
    if entries.is_empty() && full {
        return Err(nfsstat4::NFS4ERR_TOOSMALL.into());
    }
    Ok(nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(
        READDIR4resok {
            cookieverf: verf,
            reply: dirlist4 { entries, eof },
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_info_is_never_zero_or_backwards() {
        let exact = change_info(DirChange {
            before: 7,
            after: 9,
            atomic: true,
        });
        assert_eq!((exact.before, exact.after, exact.atomic), (7, 9, true));
        // A layer that could not read the directory afterwards (after = 0).
        let lost = change_info(DirChange {
            before: 7,
            after: 0,
            atomic: true,
        });
        assert_eq!((lost.before, lost.after, lost.atomic), (7, 7, false));
        let nothing = change_info(DirChange {
            before: 0,
            after: 0,
            atomic: false,
        });
        assert_eq!(nothing.after, 1);
    }
}
