//! Open files and their data: OPEN, OPEN_DOWNGRADE, CLOSE, READ, WRITE, COMMIT.

use bytes::Bytes;

use crate::cstate::Compound;
use crate::errors::status_from_u32;
use crate::errors::{OpError, OpResult};
use crate::fh::{Fh, ObjFh};
use crate::nfs::*;
use crate::ops::attr::{require, R, W, X};
use crate::ops::dir::change_info;
use crate::ops::fh::check_name;
use crate::statecore::{stateid_from_wire, stateid_to_wire};
use txnfs_backend::{Attrs, CreateMode, DirChange, FileType, SetAttrs};
use txnfs_state::deleg::dir::notify_type::ADD_ENTRY;
use txnfs_state::{Access, OpenRequest, Stateid};

/// Map the wire share bits, ignoring the v4.1 WANT/signal flags in the upper bits.
fn share_bits(access: u32, deny: u32) -> Result<(u32, u32), nfsstat4> {
    let acc = access & OPEN4_SHARE_ACCESS_BOTH;
    if acc == 0 || deny > OPEN4_SHARE_DENY_BOTH {
        return Err(nfsstat4::NFS4ERR_INVAL);
    }
    Ok((acc, deny))
}

pub(crate) fn type_check(t: FileType) -> Result<(), nfsstat4> {
    match t {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(nfsstat4::NFS4ERR_ISDIR),
        FileType::Symlink => Err(nfsstat4::NFS4ERR_SYMLINK),
        _ => Err(nfsstat4::NFS4ERR_WRONG_TYPE),
    }
}

/// READ and WRITE take regular files only; a symlink is INVAL here, not SYMLINK.
fn io_type_check(t: FileType) -> Result<(), nfsstat4> {
    type_check(t).map_err(|e| {
        if e == nfsstat4::NFS4ERR_SYMLINK {
            nfsstat4::NFS4ERR_INVAL
        } else {
            e
        }
    })
}

/// I/O (a write when `write`) with `sid` on `o`, whose attributes are `attrs`: the
/// state must allow it and, with a special stateid, the caller's permissions too, since
/// no OPEN checked them.
pub(crate) fn check_io_access(
    c: &Compound,
    o: &ObjFh,
    sid: &stateid4,
    attrs: &Attrs,
    write: bool,
) -> Result<(), nfsstat4> {
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    c.srv
        .check_io(c.now, c.client, sid, file, write, c.waited)?;
    if stateid_from_wire(sid).is_special() {
        require(attrs, &c.creds, if write { W } else { R })?;
    }
    Ok(())
}

/// The checks before a READ or WRITE (`write`) of `o` with the wire stateid `wire`: the
/// object must be a regular file, and its state (with a special stateid, the caller's
/// permissions too) must allow the I/O. Under an open, lock or delegation stateid the
/// file's type and fileid are all it takes, and the backend may know them without an
/// `fstat` (one per 4 KiB READ was about 5 % of the server's CPU).
fn io_allowed(c: &Compound, o: &ObjFh, wire: &stateid4, write: bool) -> Result<(), OpError> {
    let sid = c.resolve_sid(wire);
    if matches!(&sid, Ok(s) if !stateid_from_wire(s).is_special()) {
        let (ftype, fileid) = o.export.backend.identity(c.scope.ctx(), &o.key)?;
        io_type_check(ftype)?;
        let file = c.srv.state_file_id(&o.export, fileid);
        c.srv
            .check_io(c.now, c.client, &sid?, file, write, c.waited)?;
        return Ok(());
    }
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    io_type_check(attrs.ftype)?;
    check_io_access(c, o, &sid?, &attrs, write)?;
    Ok(())
}

pub fn open(c: &mut Compound, a: OPEN4args) -> OpResult {
    let client = c.client()?;
    let (access, deny) = share_bits(a.share_access, a.share_deny)?;
    let mut want = crate::ops::deleg::want_of(a.share_access)?;
    let fh = c.cfh()?.clone();
    let reclaim = matches!(a.claim, open_claim4::CLAIM_PREVIOUS(_));
    // An open under the client's own delegation (CLAIM_DELEGATE_CUR, CLAIM_DELEG_CUR_FH):
    // the holder turns its local opens into server opens before it returns the
    // delegation; it conflicts with nothing and gets no second delegation.
    let mut under_delegation = None;
    // Refuse early (before creating anything); the core checks again when it decides.
    c.srv
        .core()?
        .check_locking(client, reclaim, c.now)
        .map_err(|e| crate::errors::state_status(&e))?;
    let create = match &a.openhow {
        openflag4::OPEN4_CREATE(how) => Some(how),
        openflag4::default(_) => None,
    };

    let mut attrset: bitmap4 = Vec::new();
    let mut dir_change = DirChange {
        before: 0,
        after: 0,
        atomic: false,
    };
    let mut created = false;
    // The object, with its attributes when finding it read them already (a lookup or
    // a create): OPEN then needs no GETATTR of its own.
    let (target, found): (ObjFh, Option<Attrs>) = match &a.claim {
        open_claim4::CLAIM_NULL(name) => {
            check_name(name)?;
            let Fh::Obj(dir) = &fh else {
                // Opening inside the pseudo file system: nothing there is a file.
                return Err(if create.is_some() {
                    nfsstat4::NFS4ERR_ROFS
                } else {
                    nfsstat4::NFS4ERR_ISDIR
                }
                .into());
            };
            let be = &dir.export.backend;
            let dattrs = be.getattr(c.scope.ctx(), &dir.key)?;
            if dattrs.ftype != FileType::Directory {
                return Err(nfsstat4::NFS4ERR_NOTDIR.into());
            }
            match create {
                Some(how) => {
                    if c.read_only(&dir.export) {
                        return Err(nfsstat4::NFS4ERR_ROFS.into());
                    }
                    let (mode, fattr) = match how {
                        createhow4::UNCHECKED4(f) => (CreateMode::Unchecked, Some(f)),
                        createhow4::GUARDED4(f) => (CreateMode::Guarded, Some(f)),
                        createhow4::EXCLUSIVE4(v) => (CreateMode::Exclusive(*v), None),
                        createhow4::EXCLUSIVE4_1(cv) => {
                            (CreateMode::Exclusive(cv.cva_verf), Some(&cv.cva_attrs))
                        }
                    };
                    let set = match fattr {
                        Some(f) => {
                            let (s, bits) =
                                txnfs_attr::decode_setattrs_in(&f.attrmask, &f.attr_vals, c.minor)
                                    .map_err(|e| status_from_u32(e.nfsstat()))?;
                            attrset = bits;
                            s
                        }
                        None => SetAttrs::default(),
                    };
                    if matches!(mode, CreateMode::Exclusive(_))
                        && (set.atime.is_some() || set.mtime.is_some())
                    {
                        // The verifier lives in the times (RFC 8881 §18.16.3).
                        return Err(nfsstat4::NFS4ERR_INVAL.into());
                    }
                    crate::ops::attr::check_new_owner(&set, &c.creds)?;
                    let existing = be.lookup(c.scope.ctx(), &dir.key, name);
                    if existing.is_err() {
                        require(&dattrs, &c.creds, W | X)?;
                        // Another client's directory delegation on `dir` hears of
                        // the new entry, or is recalled first.
                        crate::ops::notify::before(c, dir, &dattrs, ADD_ENTRY)?;
                    }
                    let cx = c.scope.ctx_for(&dir.export, &c.creds, c.client)?;
                    let made = be.create_file(cx, &dir.key, name, mode, &set)?;
                    if made.created {
                        let obj = Some((&made.key, &made.attrs));
                        crate::ops::notify::added(c, dir, &dattrs, name, obj, false);
                    } else if !set.is_empty() {
                        // An UNCHECKED create of an existing file set its attributes.
                        crate::ops::notify::attrs_changed(c, &dir.export, &made.key);
                    }
                    type_check(made.attrs.ftype)?;
                    created = made.created;
                    if !made.created {
                        attrset.clear();
                    }
                    dir_change = made.dir;
                    match c.srv.obj_fh(&dir.export, made.key) {
                        Fh::Obj(o) => (o, Some(made.attrs)),
                        Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_SERVERFAULT.into()),
                    }
                }
                None => {
                    require(&dattrs, &c.creds, X)?;
                    let (key, found) = be.lookup(c.scope.ctx(), &dir.key, name)?;
                    dir_change = DirChange {
                        before: dattrs.change,
                        after: dattrs.change,
                        atomic: true,
                    };
                    match c.srv.obj_fh(&dir.export, key) {
                        Fh::Obj(o) => (o, Some(found)),
                        Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_SERVERFAULT.into()),
                    }
                }
            }
        }
        open_claim4::CLAIM_FH
        | open_claim4::CLAIM_PREVIOUS(_)
        | open_claim4::CLAIM_DELEG_CUR_FH(_) => {
            if create.is_some() {
                return Err(nfsstat4::NFS4ERR_INVAL.into());
            }
            match &a.claim {
                // Reclaiming a delegation held before the restart (§10.2.1): asked
                // for as that type; the policy may still refuse.
                open_claim4::CLAIM_PREVIOUS(kind) => {
                    want = match kind {
                        open_delegation_type4::OPEN_DELEGATE_READ => txnfs_state::Want::Read,
                        open_delegation_type4::OPEN_DELEGATE_WRITE => txnfs_state::Want::Write,
                        _ => txnfs_state::Want::NoDeleg,
                    }
                }
                open_claim4::CLAIM_DELEG_CUR_FH(sid) => {
                    under_delegation = Some(stateid_from_wire(sid));
                }
                _ => {}
            }
            match &fh {
                Fh::Obj(o) => (o.clone(), None),
                Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_ISDIR.into()),
            }
        }
        open_claim4::CLAIM_DELEGATE_CUR(cur) => {
            if create.is_some() {
                return Err(nfsstat4::NFS4ERR_INVAL.into());
            }
            check_name(&cur.file)?;
            let Fh::Obj(dir) = &fh else {
                return Err(nfsstat4::NFS4ERR_BAD_STATEID.into());
            };
            under_delegation = Some(stateid_from_wire(&cur.delegate_stateid));
            let (key, _) = dir
                .export
                .backend
                .lookup(c.scope.ctx(), &dir.key, &cur.file)?;
            match c.srv.obj_fh(&dir.export, key) {
                Fh::Obj(o) => (o, None),
                Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_SERVERFAULT.into()),
            }
        }
        _ => return Err(nfsstat4::NFS4ERR_RECLAIM_BAD.into()),
    };

    let be = &target.export.backend;
    let attrs = match found {
        Some(attrs) => attrs,
        None => be.getattr(c.scope.ctx(), &target.key)?,
    };
    type_check(attrs.ftype)?;
    if !created {
        let mut want = 0;
        if access & OPEN4_SHARE_ACCESS_READ != 0 {
            want |= R;
        }
        if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
            if c.read_only(&target.export) {
                return Err(nfsstat4::NFS4ERR_ROFS.into());
            }
            want |= W;
        }
        // The owner may open their own file (POSIX open checks happen client-side for
        // the owner; e.g. a 0444 file being written by its creator is refused there).
        require(&attrs, &c.creds, want)?;
    }
    let file = c.srv.state_file_id(&target.export, attrs.fileid);
    match &under_delegation {
        Some(d) => c
            .srv
            .core()?
            .check_delegation_claim(client, d, file, access)
            .map_err(|e| crate::errors::state_status(&e))?,
        // Another client's delegation is recalled first (and this OPEN held until it
        // comes back).
        None if !created => {
            crate::ops::deleg::clear(c, &target, &attrs, Access::Open { access, deny })?
        }
        None => {}
    }
    let sid = c
        .srv
        .core()?
        .open(
            c.now,
            reclaim,
            client,
            OpenRequest {
                owner: &a.owner.owner,
                file,
                access,
                deny,
            },
        )
        .map_err(|e| crate::errors::state_status(&e))?;
    if c.scope.ctx().txn && sid.seqid == 1 {
        // A new open: closed again if the transaction rolls back (its file may be gone).
        c.txn_opens.push((sid, file));
    }
    // The open keeps the file alive through a REMOVE or RENAME over it (`crate::held`).
    if c.srv
        .held
        .hold(c.scope.ctx(), file, &target.export, &target.key)
    {
        // A CLOSE between the OPEN above and the new hold found nothing to give back:
        // look again, under the core's lock, and give the hold back after it.
        let released = {
            let core = c.srv.core()?;
            c.srv.held.release_closed(&core, Some(file), c.scope.ctx())
        };
        drop(released);
    }
    let sid = stateid_to_wire(&sid);
    let delegation = match under_delegation {
        Some(_) => open_delegation4::OPEN_DELEGATE_NONE,
        None => {
            let timestamps = crate::ops::deleg::wants_timestamps(c, a.share_access);
            crate::ops::deleg::grant(c, &target, &attrs, access, want, reclaim, timestamps)?
        }
    };
    c.cfh = Some(Fh::Obj(target));
    Ok(nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(Box::new(
        OPEN4resok {
            stateid: sid,
            cinfo: change_info(dir_change),
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset,
            delegation,
        },
    ))))
}

pub fn open_downgrade(c: &mut Compound, a: &OPEN_DOWNGRADE4args) -> OpResult {
    let client = c.client()?;
    let (access, deny) = share_bits(a.share_access, a.share_deny)?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.open_stateid)?);
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let new = c
        .srv
        .core()?
        .table_mut()
        .open_downgrade(client, &sid, file, access, deny)
        .map_err(|e| crate::errors::state_status(&e))?;
    let new = stateid_to_wire(&new);
    Ok(nfs_resop4::OP_OPEN_DOWNGRADE(OPEN_DOWNGRADE4res::NFS4_OK(
        OPEN_DOWNGRADE4resok { open_stateid: new },
    )))
}

pub fn close(c: &mut Compound, a: &CLOSE4args) -> OpResult {
    let client = c.client()?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.open_stateid)?);
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let released = {
        let mut core = c.srv.core()?;
        core.table_mut()
            .close(client, &sid, file)
            .map_err(|e| crate::errors::state_status(&e))?;
        c.srv.held.release_closed(&core, Some(file), c.scope.ctx())
    };
    // Given back after the core's lock: the last CLOSE frees a file with no name left.
    drop(released);
    // RFC 8881 §18.2.4: the returned stateid SHOULD be the invalid special stateid.
    let gone = stateid_to_wire(&Stateid::INVALID);
    Ok(nfs_resop4::OP_CLOSE(CLOSE4res::NFS4_OK(gone)))
}

pub fn read(c: &mut Compound, a: &READ4args) -> OpResult {
    let o = c.cobj().map_err(|_| nfsstat4::NFS4ERR_ISDIR)?.clone();
    io_allowed(c, &o, &a.stateid, false)?;
    // Fit the data into what is left of the reply (eof + length + padding overhead).
    let room = c.reply_left.saturating_sub(16) as u32;
    let count = a.count.min(c.srv.cfg.max_io_size).min(room);
    let backend = &o.export.backend;
    // The COMPOUND's last op, its reply not kept: the data may stay in the page cache
    // and go to the socket from there (ADR 0065).
    let piped = if c.may_pipe && count >= txnfs_backend::PIPED_READ_MIN {
        backend.read_piped(c.scope.ctx(), &o.key, a.offset, count)?
    } else {
        None
    };
    let (data, eof, len) = match piped {
        Some((p, eof)) => {
            let len = p.len();
            c.piped = Some(p);
            (Bytes::new(), eof, len)
        }
        None => {
            let (data, eof) = backend.read(c.scope.ctx(), &o.key, a.offset, count)?;
            let len = data.len();
            (data, eof, len)
        }
    };
    c.srv.metrics.read(o.export.id, len);
    if let Some(s) = &c.session {
        s.activity
            .read_bytes
            .fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(nfs_resop4::OP_READ(READ4res::NFS4_OK(READ4resok {
        eof,
        data,
    })))
}

pub fn write(c: &mut Compound, a: WRITE4args) -> OpResult {
    let o = c.cobj()?.clone();
    if c.read_only(&o.export) {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    }
    // A WRITE larger than the maxwrite we advertise is written up to maxwrite and
    // answered with the short count (RFC 8881 18.32.3 allows a short write; knfsd and
    // Ganesha do the same). Clients that fill their negotiated request size, such as
    // nfs4fs, send a little more than maxwrite and resend the rest.
    let data = a
        .data
        .slice(..a.data.len().min(c.srv.cfg.max_io_size as usize));
    if a.offset.checked_add(data.len() as u64).is_none() {
        return Err(nfsstat4::NFS4ERR_FBIG.into());
    }
    io_allowed(c, &o, &a.stateid, true)?;
    let sync = a.stable != stable_how4::UNSTABLE4;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    {
        let _one_change = c.srv.file_changes.lock(o.export.id, &o.key);
        o.export.backend.write(cx, &o.key, a.offset, &data, sync)?;
    }
    c.srv.metrics.wrote(o.export.id, data.len());
    if let Some(s) = &c.session {
        s.activity
            .write_bytes
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
    // Size, times and change moved: delegated directories naming the file hear.
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    Ok(nfs_resop4::OP_WRITE(WRITE4res::NFS4_OK(WRITE4resok {
        count: data.len() as u32,
        committed: a.stable,
        writeverf: c.srv.write_verf,
    })))
}

pub fn commit(c: &mut Compound, _a: &COMMIT4args) -> OpResult {
    let o = c.cobj().map_err(|_| nfsstat4::NFS4ERR_ISDIR)?.clone();
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    match o.export.backend.commit(cx, &o.key) {
        Ok(()) => {}
        Err(txnfs_backend::BackendError::IsDir) => return Err(nfsstat4::NFS4ERR_ISDIR.into()),
        Err(e) => return Err(e.into()),
    }
    Ok(nfs_resop4::OP_COMMIT(COMMIT4res::NFS4_OK(COMMIT4resok {
        writeverf: c.srv.write_verf,
    })))
}
