//! The NFSv4.2 operations of a server without pNFS (RFC 7862, RFC 8276): ALLOCATE,
//! DEALLOCATE, SEEK, READ_PLUS, IO_ADVISE, COPY (intra-server; ADR 0025), CLONE,
//! OFFLOAD_STATUS / OFFLOAD_CANCEL, and the extended-attribute operations.
//!
//! COPY runs within its COMPOUND unless the client lets it run asynchronously and it
//! is large (`Config::async_copy_threshold`), the COMPOUND is no transaction and the
//! session's back channel is up: then the reply carries a copy stateid
//! (`wr_callback_id`, `cr_synchronous` false), the bytes move on a thread of their own
//! in steps, and CB_OFFLOAD reports the outcome (`crate::offload`, ADR 0026).
//! OFFLOAD_STATUS and OFFLOAD_CANCEL name such a copy by its stateid and destination.

use crate::cstate::Compound;
use crate::errors::{OpError, OpResult};
use crate::fh::{Fh, ObjFh};
use crate::nfs::*;
use crate::ops::attr::{require, R, W};
use crate::ops::deleg;
use crate::ops::dir::change_info;
use crate::ops::file::{check_io_access, type_check};
use bytes::Bytes;
use txnfs_attr::{bitmap_isset, bitmap_set};
use txnfs_backend::{Advice, Attrs, BackendError, CloneMethod, FileType, SeekWhat, XattrSet};
use txnfs_state::Access;

/// RFC 8276 §8.4.3: the ACCESS bits of extended attributes.
pub const ACCESS4_XAREAD: u32 = 0x40;
pub const ACCESS4_XAWRITE: u32 = 0x80;
pub const ACCESS4_XALIST: u32 = 0x100;

/// The regular file `fh` for I/O with `stateid` (`write`: a change): its export
/// object and attributes after the state and permission checks (and, for a change,
/// after other clients' conflicting delegations were recalled).
fn io_file(
    c: &mut Compound,
    fh: &Fh,
    stateid: &stateid4,
    write: bool,
) -> Result<(ObjFh, Attrs), OpError> {
    let Fh::Obj(o) = fh else {
        return Err(nfsstat4::NFS4ERR_ISDIR.into());
    };
    if write && c.read_only(&o.export) {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    }
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    type_check(attrs.ftype)?;
    let sid = c.resolve_sid(stateid)?;
    check_io_access(c, o, &sid, &attrs, write)?;
    Ok((o.clone(), attrs))
}

/// The current filehandle for I/O.
fn current_file(
    c: &mut Compound,
    stateid: &stateid4,
    write: bool,
) -> Result<(ObjFh, Attrs), OpError> {
    let fh = c.cfh()?.clone();
    io_file(c, &fh, stateid, write)
}

fn end_of(offset: u64, len: u64) -> Result<u64, nfsstat4> {
    offset.checked_add(len).ok_or(nfsstat4::NFS4ERR_INVAL)
}

/// ALLOCATE and DEALLOCATE: a change of `len` bytes at `offset` of the current file,
/// with the checks and the notification of a WRITE.
fn change_range(
    c: &mut Compound,
    stateid: &stateid4,
    offset: u64,
    len: u64,
    change: impl FnOnce(
        &dyn txnfs_backend::Backend,
        &txnfs_backend::OpCtx,
        &txnfs_backend::FileKey,
    ) -> txnfs_backend::Result<Attrs>,
) -> Result<(), OpError> {
    end_of(offset, len)?;
    let (o, _) = current_file(c, stateid, true)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    {
        let _one_change = c.srv.file_changes.lock(o.export.id, &o.key);
        change(&*o.export.backend, cx, &o.key)?;
    }
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    Ok(())
}

pub fn allocate(c: &mut Compound, a: &ALLOCATE4args) -> OpResult {
    change_range(c, &a.aa_stateid, a.aa_offset, a.aa_length, |be, cx, key| {
        be.allocate(cx, key, a.aa_offset, a.aa_length)
    })?;
    Ok(nfs_resop4::OP_ALLOCATE(ALLOCATE4res {
        ar_status: nfsstat4::NFS4_OK,
    }))
}

pub fn deallocate(c: &mut Compound, a: &DEALLOCATE4args) -> OpResult {
    change_range(c, &a.da_stateid, a.da_offset, a.da_length, |be, cx, key| {
        be.deallocate(cx, key, a.da_offset, a.da_length)
    })?;
    Ok(nfs_resop4::OP_DEALLOCATE(DEALLOCATE4res {
        dr_status: nfsstat4::NFS4_OK,
    }))
}

fn seek_what(w: data_content4) -> SeekWhat {
    match w {
        data_content4::NFS4_CONTENT_DATA => SeekWhat::Data,
        data_content4::NFS4_CONTENT_HOLE => SeekWhat::Hole,
    }
}

pub fn seek(c: &mut Compound, a: &SEEK4args) -> OpResult {
    let (o, attrs) = current_file(c, &a.sa_stateid, false)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    let pos = o
        .export
        .backend
        .seek(cx, &o.key, a.sa_offset, seek_what(a.sa_what))?;
    Ok(nfs_resop4::OP_SEEK(SEEK4res::NFS4_OK(seek_res4 {
        sr_eof: pos >= attrs.size,
        sr_offset: pos,
    })))
}

/// Encoded bytes of a READ_PLUS segment besides its data: the content type, the
/// offset and the length (a hole) or the data's length (data).
const SEGMENT: usize = 4 + 8 + 8;

/// READ_PLUS: the range as data and hole segments (RFC 7862 §15.10), found with SEEK
/// on the backend, within what is left of the reply.
pub fn read_plus(c: &mut Compound, a: &READ_PLUS4args) -> OpResult {
    let (o, attrs) = current_file(c, &a.rpa_stateid, false)?;
    let be = o.export.backend.clone();
    let room = c.reply_left.saturating_sub(16);
    let count = a.rpa_count.min(c.srv.cfg.max_io_size) as u64;
    let end = a.rpa_offset.saturating_add(count).min(attrs.size);
    let mut pos = a.rpa_offset;
    let mut used = 0usize;
    let mut contents = Vec::new();
    // The range's last segment, if data, may stay in the page cache (ADR 0065): the
    // index of its content and the pipe.
    let mut piped = None;
    let may_pipe = c.may_pipe;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    while pos < end && used + SEGMENT < room {
        let data_at = match be.seek(cx, &o.key, pos, SeekWhat::Data) {
            Ok(p) => p,
            Err(BackendError::Nxio) => u64::MAX, // a hole to the end of file
            Err(BackendError::NotSupp) => pos,   // no hole information: all data
            Err(e) => return Err(e.into()),
        };
        if data_at > pos {
            let hole_end = data_at.min(end);
            contents.push(read_plus_content::NFS4_CONTENT_HOLE(data_info4 {
                di_offset: pos,
                di_length: hole_end - pos,
            }));
            used += SEGMENT;
            pos = hole_end;
            continue;
        }
        let data_end = match be.seek(cx, &o.key, pos, SeekWhat::Hole) {
            Ok(p) => p.min(end),
            Err(BackendError::NotSupp | BackendError::Nxio) => end,
            Err(e) => return Err(e.into()),
        };
        let want = (data_end - pos).min((room - used - SEGMENT) as u64) as u32;
        if want == 0 {
            break;
        }
        let last = pos + u64::from(want) >= end;
        if may_pipe && last && want >= txnfs_backend::PIPED_READ_MIN {
            if let Some((p, _)) = be.read_piped(cx, &o.key, pos, want)? {
                let n = p.len();
                used += SEGMENT + n.div_ceil(4) * 4;
                piped = Some((contents.len(), p));
                contents.push(read_plus_content::NFS4_CONTENT_DATA(data4 {
                    d_offset: pos,
                    d_data: Bytes::new(),
                }));
                pos += n as u64;
                continue;
            }
        }
        let (data, _) = be.read(cx, &o.key, pos, want)?;
        if data.is_empty() {
            break; // the file shrank meanwhile
        }
        used += SEGMENT + data.len().div_ceil(4) * 4;
        let n = data.len() as u64;
        contents.push(read_plus_content::NFS4_CONTENT_DATA(data4 {
            d_offset: pos,
            d_data: data,
        }));
        pos += n;
    }
    if let Some((at, p)) = piped {
        if at + 1 == contents.len() {
            // The encoder puts the pipe in the last content.
            c.piped = Some(p);
        } else if let Some(read_plus_content::NFS4_CONTENT_DATA(d)) = contents.get_mut(at) {
            // The file shrank under the read and more segments followed: in memory.
            d.d_data = p.to_bytes().map_err(|_| nfsstat4::NFS4ERR_IO)?;
        }
    }
    Ok(nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(
        read_plus_res4 {
            rpr_eof: pos >= attrs.size,
            rpr_contents: contents,
        },
    )))
}

/// IO_ADVISE: every hint is accepted (RFC 7862 §15.5.3: a server must not fail for
/// advice it does not follow); the reply's bitmap names those acted on. The server
/// acts on WILLNEED (and WILLNEED_OPPORTUNISTIC) and DONTNEED, which move the file's
/// cached pages for every reader alike (`posix_fadvise`); not on both at once, which
/// contradict each other. The stateid and file are checked as for READ.
pub fn io_advise(c: &mut Compound, a: &IO_ADVISE4args) -> OpResult {
    let (o, _) = current_file(c, &a.iaa_stateid, false)?;
    let asked = |hint: IO_ADVISE_type4| bitmap_isset(&a.iaa_hints, hint as u32);
    let willneed = asked(IO_ADVISE_type4::IO_ADVISE4_WILLNEED);
    let opportunistic = asked(IO_ADVISE_type4::IO_ADVISE4_WILLNEED_OPPORTUNISTIC);
    let dontneed = asked(IO_ADVISE_type4::IO_ADVISE4_DONTNEED);
    let (advice, followed) = match (willneed || opportunistic, dontneed) {
        (true, false) => {
            let mut f = Vec::new();
            for (hint, on) in [
                (IO_ADVISE_type4::IO_ADVISE4_WILLNEED, willneed),
                (
                    IO_ADVISE_type4::IO_ADVISE4_WILLNEED_OPPORTUNISTIC,
                    opportunistic,
                ),
            ] {
                if on {
                    bitmap_set(&mut f, hint as u32);
                }
            }
            (Some(Advice::WillNeed), f)
        }
        (false, true) => {
            let mut f = Vec::new();
            bitmap_set(&mut f, IO_ADVISE_type4::IO_ADVISE4_DONTNEED as u32);
            (Some(Advice::DontNeed), f)
        }
        _ => (None, Vec::new()),
    };
    let acted = match advice {
        // A hint that could not be followed is still no error.
        Some(advice) => o
            .export
            .backend
            .advise(c.scope.ctx(), &o.key, a.iaa_offset, a.iaa_count, advice)
            .unwrap_or(false),
        None => false,
    };
    Ok(nfs_resop4::OP_IO_ADVISE(IO_ADVISE4res::NFS4_OK(
        IO_ADVISE4resok {
            ior_hints: if acted { followed } else { Vec::new() },
        },
    )))
}

/// The arguments COPY and CLONE share: source (saved filehandle) and destination
/// (current) stateids, offsets, and the count (0: to the source's end of file).
struct RangeCopy<'a> {
    src_sid: &'a stateid4,
    dst_sid: &'a stateid4,
    src_off: u64,
    dst_off: u64,
    count: u64,
}

/// A range of COPY or CLONE after the checks: the files and the bytes to copy.
struct CheckedCopy {
    src: ObjFh,
    dst: ObjFh,
    /// The destination's attributes before the copy.
    dattrs: Attrs,
    src_off: u64,
    dst_off: u64,
    /// Bytes to copy (the count, or what the source holds after `src_off` for 0).
    n: u64,
}

/// The checks COPY and CLONE share: same export, regular files, stateids that allow
/// reading the source and writing the destination (other clients' conflicting
/// delegations recalled), a source range within its end of file (RFC 7862 §15.2.3:
/// an error, not a short copy) and no overlap within one file (§15.2.3, §15.13.3).
fn check_copy(c: &mut Compound, r: RangeCopy<'_>) -> Result<CheckedCopy, OpError> {
    end_of(r.dst_off, r.count)?;
    let sfh = c.sfh.clone().ok_or(nfsstat4::NFS4ERR_NOFILEHANDLE)?;
    let dfh = c.cfh()?.clone();
    let (src, sattrs) = io_file(c, &sfh, r.src_sid, false)?;
    let (dst, dattrs) = io_file(c, &dfh, r.dst_sid, true)?;
    if src.export.id != dst.export.id {
        return Err(nfsstat4::NFS4ERR_XDEV.into());
    }
    let n = if r.count == 0 {
        sattrs
            .size
            .checked_sub(r.src_off)
            .ok_or(nfsstat4::NFS4ERR_INVAL)?
    } else {
        r.count
    };
    if end_of(r.src_off, n)? > sattrs.size {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    }
    end_of(r.dst_off, n)?;
    let overlap =
        r.src_off < r.dst_off.saturating_add(n) && r.dst_off < r.src_off.saturating_add(n);
    if src.key == dst.key && n > 0 && overlap {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    }
    Ok(CheckedCopy {
        src,
        dst,
        dattrs,
        src_off: r.src_off,
        dst_off: r.dst_off,
        n,
    })
}

/// Copies a checked range within this COMPOUND through the backend's `clone_range`.
/// Returns the bytes copied.
fn copy_now(c: &mut Compound, k: &CheckedCopy) -> Result<u64, OpError> {
    if k.n > 0 {
        let cx = c.scope.ctx_for(&k.dst.export, &c.creds, c.client)?;
        k.dst
            .export
            .backend
            .clone_range(cx, &k.src.key, k.src_off, &k.dst.key, k.dst_off, k.n)?;
        crate::ops::notify::attrs_changed(c, &k.dst.export, &k.dst.key);
    }
    Ok(k.n)
}

/// Starts the checked copy `k` in the background when it may run asynchronously
/// (ADR 0026): the client allowed it, it is at least `Config::async_copy_threshold`
/// bytes, the COMPOUND is no transaction (its changes must be undoable and end with
/// it), and the session's back channel works (CB_OFFLOAD needs it). The copy
/// stateid, or `None` to copy synchronously.
fn start_async(c: &Compound, a: &COPY4args, k: &CheckedCopy) -> Option<stateid4> {
    if a.ca_synchronous || k.n == 0 || k.n < c.srv.cfg.async_copy_threshold {
        return None;
    }
    if c.scope.ctx().txn {
        return None;
    }
    let client = c.client?;
    let session = c.session.as_ref()?;
    let cb = c.srv.callbacks.session(&session.id)?;
    if cb.path() != crate::callback::PathState::Up {
        return None;
    }
    let srv = c.srv.arc()?;
    let cx = txnfs_backend::OpCtx {
        creds: c.creds.clone(),
        client: Some(client),
        // Outside any COMPOUND: the copy outlives this one.
        compound: 0,
        txn: false,
        span: Default::default(),
        waited: Default::default(),
    };
    srv.offloads.start(
        srv.clone(),
        crate::offload::CopyRequest {
            client,
            export: k.dst.export.clone(),
            src: k.src.key.clone(),
            dst: k.dst.key.clone(),
            dst_fh: k.dst.wire.clone(),
            dst_file: c.srv.state_file_id(&k.dst.export, k.dattrs.fileid),
            src_off: k.src_off,
            dst_off: k.dst_off,
            len: k.n,
            cx,
        },
    )
}

/// COPY within this server through the backend's `clone_range` (a reflink where the
/// file system shares blocks, else an in-kernel copy): synchronously, or in the
/// background with CB_OFFLOAD when the client allows it and the copy is large
/// (`start_async`, `crate::offload`). Inter-server copies (a source server given)
/// are not offered (ADR 0025).
pub fn copy(c: &mut Compound, a: &COPY4args) -> OpResult {
    if !a.ca_source_server.is_empty() {
        return Err(nfsstat4::NFS4ERR_NOTSUPP.into());
    }
    let k = check_copy(
        c,
        RangeCopy {
            src_sid: &a.ca_src_stateid,
            dst_sid: &a.ca_dst_stateid,
            src_off: a.ca_src_offset,
            dst_off: a.ca_dst_offset,
            count: a.ca_count,
        },
    )?;
    let (callback, n) = match start_async(c, a, &k) {
        // The bytes follow in CB_OFFLOAD (RFC 7862 §15.2.3).
        Some(sid) => (vec![sid], 0),
        None => (Vec::new(), copy_now(c, &k)?),
    };
    let synchronous = callback.is_empty();
    Ok(nfs_resop4::OP_COPY(COPY4res::NFS4_OK(COPY4resok {
        cr_response: write_response4 {
            wr_callback_id: callback,
            wr_count: n,
            // The copied bytes may still be in the page cache: the client COMMITs.
            wr_committed: stable_how4::UNSTABLE4,
            wr_writeverf: c.srv.write_verf,
        },
        cr_requirements: copy_requirements4 {
            cr_consecutive: true,
            cr_synchronous: synchronous,
        },
    })))
}

/// CLONE: only where the export's file system shares blocks (probed when the export
/// was opened); elsewhere NFS4ERR_NOTSUPP, and the client falls back to COPY or to
/// reading and writing.
pub fn clone(c: &mut Compound, a: &CLONE4args) -> OpResult {
    let o = c.cobj()?.clone();
    if o.export.backend.clone_method() != CloneMethod::Reflink {
        return Err(nfsstat4::NFS4ERR_NOTSUPP.into());
    }
    let k = check_copy(
        c,
        RangeCopy {
            src_sid: &a.cl_src_stateid,
            dst_sid: &a.cl_dst_stateid,
            src_off: a.cl_src_offset,
            dst_off: a.cl_dst_offset,
            count: a.cl_count,
        },
    )?;
    copy_now(c, &k)?;
    Ok(nfs_resop4::OP_CLONE(CLONE4res {
        cl_status: nfsstat4::NFS4_OK,
    }))
}

/// The client and destination an OFFLOAD_STATUS or OFFLOAD_CANCEL names a copy by:
/// the copy stateid is looked up for the current filehandle (RFC 7862 §15.8.3,
/// §15.9.3); a filehandle that is no file of an export names no copy.
fn offload_target(c: &Compound) -> Result<(u64, txnfs_backend::FileKey), nfsstat4> {
    let client = c.client()?;
    match c.cfh()? {
        Fh::Obj(o) => Ok((client, o.key.clone())),
        Fh::Pseudo(_) => Err(nfsstat4::NFS4ERR_BAD_STATEID),
    }
}

/// OFFLOAD_STATUS: the bytes an asynchronous copy has copied, and its status once it
/// finished (kept two leases after that, `crate::offload`).
pub fn offload_status(c: &mut Compound, a: &OFFLOAD_STATUS4args) -> OpResult {
    let (client, dst) = offload_target(c)?;
    let sid = c.resolve_sid(&a.osa_stateid)?;
    let st = c
        .srv
        .offloads
        .status(c.srv.boot_epoch, client, &sid, &dst)?;
    Ok(nfs_resop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4res::NFS4_OK(
        OFFLOAD_STATUS4resok {
            osr_count: st.copied,
            osr_complete: st.done.into_iter().collect(),
        },
    )))
}

/// OFFLOAD_CANCEL: a running copy stops before its next step and sends no CB_OFFLOAD
/// (the client that cancelled knows); a finished one is forgotten. The stateid is
/// gone afterwards (as knfsd).
pub fn offload_cancel(c: &mut Compound, a: &OFFLOAD_CANCEL4args) -> OpResult {
    let (client, dst) = offload_target(c)?;
    let sid = c.resolve_sid(&a.oca_stateid)?;
    c.srv
        .offloads
        .cancel(c.srv.boot_epoch, client, &sid, &dst)?;
    Ok(nfs_resop4::OP_OFFLOAD_CANCEL(OFFLOAD_CANCEL4res {
        ocr_status: nfsstat4::NFS4_OK,
    }))
}

// ---- Extended attributes (RFC 8276) ---------------------------------------------------

/// The current object for an extended-attribute call: a file or directory of an
/// export whose backend keeps extended attributes, with its attributes, after the
/// permission check (`want`: R to read or list, W to change).
fn xattr_object(c: &mut Compound, want: u32) -> Result<(ObjFh, Attrs), OpError> {
    let fh = c.cfh()?.clone();
    let Fh::Obj(o) = &fh else {
        return Err(nfsstat4::NFS4ERR_NOTSUPP.into());
    };
    if !o.export.backend.xattr_support() {
        return Err(nfsstat4::NFS4ERR_NOTSUPP.into());
    }
    if want == W && c.read_only(&o.export) {
        return Err(nfsstat4::NFS4ERR_ROFS.into());
    }
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    if !matches!(attrs.ftype, FileType::Regular | FileType::Directory) {
        return Err(nfsstat4::NFS4ERR_WRONG_TYPE.into());
    }
    require(&attrs, &c.creds, want)?;
    // A holder of a write delegation may cache extended attributes; a change needs
    // every other delegation back.
    let access = if want == W {
        Access::Modify
    } else {
        Access::Read
    };
    deleg::clear(c, o, &attrs, access)?;
    Ok((o.clone(), attrs))
}

fn xattr_name(name: &Bytes) -> Result<&[u8], nfsstat4> {
    if name.is_empty() {
        return Err(nfsstat4::NFS4ERR_INVAL);
    }
    std::str::from_utf8(name).map_err(|_| nfsstat4::NFS4ERR_INVAL)?;
    Ok(name)
}

pub fn getxattr(c: &mut Compound, a: &GETXATTR4args) -> OpResult {
    let name = xattr_name(&a.gxa_name)?;
    let (o, _) = xattr_object(c, R)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    let value = o.export.backend.getxattr(cx, &o.key, name)?;
    // The value and its length must fit what is left of the reply.
    if value.len() + 8 > c.reply_left {
        return Err(nfsstat4::NFS4ERR_XATTR2BIG.into());
    }
    Ok(nfs_resop4::OP_GETXATTR(GETXATTR4res::NFS4_OK(value)))
}

pub fn setxattr(c: &mut Compound, a: &SETXATTR4args) -> OpResult {
    let name = xattr_name(&a.sxa_key)?;
    let how = match a.sxa_option {
        setxattr_option4::SETXATTR4_EITHER => XattrSet::Either,
        setxattr_option4::SETXATTR4_CREATE => XattrSet::Create,
        setxattr_option4::SETXATTR4_REPLACE => XattrSet::Replace,
    };
    let (o, _) = xattr_object(c, W)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    let ch = o
        .export
        .backend
        .setxattr(cx, &o.key, name, &a.sxa_value, how)?;
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    Ok(nfs_resop4::OP_SETXATTR(SETXATTR4res::NFS4_OK(change_info(
        ch,
    ))))
}

pub fn removexattr(c: &mut Compound, a: &REMOVEXATTR4args) -> OpResult {
    let name = xattr_name(&a.rxa_name)?;
    let (o, _) = xattr_object(c, W)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    let ch = o.export.backend.removexattr(cx, &o.key, name)?;
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    Ok(nfs_resop4::OP_REMOVEXATTR(REMOVEXATTR4res::NFS4_OK(
        change_info(ch),
    )))
}

/// LISTXATTRS: the names after `cookie` (the number of names already returned, in the
/// backend's stable order) that fit `lxa_maxcount` bytes of cookie, names and eof.
pub fn listxattrs(c: &mut Compound, a: &LISTXATTRS4args) -> OpResult {
    let (o, _) = xattr_object(c, R)?;
    let cx = c.scope.ctx_for(&o.export, &c.creds, c.client)?;
    let names = o.export.backend.listxattrs(cx, &o.key)?;
    let start = usize::try_from(a.lxa_cookie).map_err(|_| nfsstat4::NFS4ERR_BAD_COOKIE)?;
    if start > names.len() {
        return Err(nfsstat4::NFS4ERR_BAD_COOKIE.into());
    }
    let limit = (a.lxa_maxcount as usize).min(c.reply_left.saturating_sub(8));
    // cookie (8), the array's length (4), eof (4)
    let mut used = 8 + 4 + 4;
    let mut out = Vec::new();
    for n in &names[start..] {
        let size = 4 + n.len().div_ceil(4) * 4;
        if used + size > limit {
            break;
        }
        used += size;
        out.push(n.clone());
    }
    let next = start + out.len();
    if out.is_empty() && next < names.len() {
        return Err(nfsstat4::NFS4ERR_TOOSMALL.into());
    }
    Ok(nfs_resop4::OP_LISTXATTRS(LISTXATTRS4res::NFS4_OK(
        LISTXATTRS4resok {
            lxr_cookie: next as u64,
            lxr_names: out,
            lxr_eof: next == names.len(),
        },
    )))
}
