//! NFSv3 READ, WRITE and COMMIT (RFC 1813 §3.3.6, §3.3.7, §3.3.21).
//!
//! A v3 client has no open state: the permission check is the object's mode bits at
//! each call, with knfsd's owner override (the owner may read and write a file whose
//! mode no longer lets it, as a local process that opened it before a chmod could).
//! A READ recalls v4 write delegations of the file, a WRITE every v4 delegation of it
//! (`Server::clear_delegations`, the path a conflicting v4 client takes).

use txnfs_backend::{Attrs, Creds, FileType};
use txnfs_proto::nfs3::*;
use txnfs_state::Access;

use crate::cstate::Compound;
use crate::fh::ObjFh;
use crate::ops::attr::{perms, R as READ, W, X};
use crate::v3::common::{be, getattr, obj, post_op, v4, Wcc, R};

/// Regular files only: a directory is ISDIR, anything else INVAL.
fn regular(a: &Attrs) -> R<()> {
    match a.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(nfsstat3::NFS3ERR_ISDIR),
        _ => Err(nfsstat3::NFS3ERR_INVAL),
    }
}

/// The owner override of knfsd (`NFSD_MAY_OWNER_OVERRIDE`), else the mode bits.
fn may(a: &Attrs, creds: &Creds, bits: u32) -> R<()> {
    if creds.uid == a.uid || perms(a, creds) & bits != 0 {
        Ok(())
    } else {
        Err(nfsstat3::NFS3ERR_ACCES)
    }
}

pub fn read3(c: &mut Compound, a: READ3args) -> READ3res {
    let mut seen: Option<(ObjFh, Attrs)> = None;
    let r = read_in(c, &a, &mut seen);
    let file_attributes = match &seen {
        Some((o, attrs)) => post_op(&o.export, Some(attrs)),
        None => post_op_attr::FALSE,
    };
    match r {
        Ok((data, eof, count)) => READ3res::NFS3_OK(READ3resok {
            file_attributes,
            count: count as u32,
            eof,
            data,
        }),
        Err(s) => READ3res::default(s, READ3resfail { file_attributes }),
    }
}

fn read_in(
    c: &mut Compound,
    a: &READ3args,
    seen: &mut Option<(ObjFh, Attrs)>,
) -> R<(bytes::Bytes, bool, usize)> {
    let o = obj(c, &a.file)?;
    let attrs = getattr(c, &o)?;
    *seen = Some((o.clone(), attrs.clone()));
    regular(&attrs)?;
    // Reading what an executable's mode allows is reading too (knfsd's
    // NFSD_MAY_READ_IF_EXEC): a client pages a program in with READ.
    may(&attrs, &c.creds, READ | X)?;
    v4(crate::ops::deleg::clear(c, &o, &attrs, Access::Read))?;
    let count = a.count.min(c.srv.cfg.max_io_size);
    // The attributes read before answer for after: a read changes none but the
    // access time, and a second stat on every READ is not worth that.
    // A READ's reply is never kept (the DRC keeps what is not idempotent), so a large
    // one may leave the page cache by splice (ADR 0065); its data is then in `c.piped`.
    let backend = &o.export.backend;
    let piped = if count >= txnfs_backend::PIPED_READ_MIN {
        be(backend.read_piped(c.scope.ctx(), &o.key, a.offset, count))?
    } else {
        None
    };
    if let Some((p, eof)) = piped {
        let len = p.len();
        c.piped = Some(p);
        c.srv.metrics.read(o.export.id, len);
        return Ok((bytes::Bytes::new(), eof, len));
    }
    let (data, eof) = be(backend.read(c.scope.ctx(), &o.key, a.offset, count))?;
    c.srv.metrics.read(o.export.id, data.len());
    let len = data.len();
    Ok((data, eof, len))
}

pub fn write3(c: &mut Compound, a: WRITE3args) -> WRITE3res {
    let mut wcc = Wcc::default();
    match write_in(c, &a, &mut wcc) {
        Ok((count, committed)) => WRITE3res::NFS3_OK(WRITE3resok {
            file_wcc: wcc.data(c),
            count,
            committed,
            verf: c.srv.write_verf,
        }),
        Err(s) => WRITE3res::default(
            s,
            WRITE3resfail {
                file_wcc: wcc.data(c),
            },
        ),
    }
}

fn write_in(c: &mut Compound, a: &WRITE3args, wcc: &mut Wcc) -> R<(u32, stable_how)> {
    let o = obj(c, &a.file)?;
    let attrs = getattr(c, &o)?;
    *wcc = Wcc::file(&o, &attrs);
    if c.read_only(&o.export) {
        return Err(nfsstat3::NFS3ERR_ROFS);
    }
    regular(&attrs)?;
    // §3.3.7: `count` bytes of `data`; more data than count is ignored, less is a
    // malformed request (knfsd answers INVAL). A WRITE above our wtmax is written up
    // to it and answered with the short count.
    if (a.count as usize) > a.data.len() {
        return Err(nfsstat3::NFS3ERR_INVAL);
    }
    let len = (a.count as usize).min(c.srv.cfg.max_io_size as usize);
    let data = a.data.slice(..len);
    if a.offset.checked_add(len as u64).is_none() {
        return Err(nfsstat3::NFS3ERR_FBIG);
    }
    may(&attrs, &c.creds, W)?;
    v4(crate::ops::deleg::clear(c, &o, &attrs, Access::Modify))?;
    // The backend's `sync` puts the data and the size on stable storage: FILE_SYNC,
    // which also answers a DATA_SYNC request (§3.3.7 allows more than was asked).
    let sync = a.stable != stable_how::UNSTABLE;
    // The pre-op attributes are read again under the file's change lock, held to the
    // end of the write: no NFS change of the file comes between (crate::filechange).
    let srv = c.srv;
    let _one_change = srv.file_changes.lock(o.export.id, &o.key);
    *wcc = Wcc::file(&o, &getattr(c, &o)?);
    let cx = be(c.scope.ctx_for(&o.export, &c.creds, None))?;
    let after = be(o.export.backend.write(cx, &o.key, a.offset, &data, sync))?;
    c.srv.metrics.wrote(o.export.id, data.len());
    wcc.changed_to(after);
    crate::ops::notify::attrs_changed(c, &o.export, &o.key);
    let committed = if sync {
        stable_how::FILE_SYNC
    } else {
        stable_how::UNSTABLE
    };
    Ok((len as u32, committed))
}

pub fn commit3(c: &mut Compound, a: COMMIT3args) -> COMMIT3res {
    let mut wcc = Wcc::default();
    let mut run = |c: &mut Compound| -> R<()> {
        let o = obj(c, &a.file)?;
        let attrs = getattr(c, &o)?;
        wcc = Wcc::file(&o, &attrs);
        regular(&attrs)?;
        // The whole file is flushed whatever the range (§3.3.21 allows it).
        let cx = be(c.scope.ctx_for(&o.export, &c.creds, None))?;
        be(o.export.backend.commit(cx, &o.key))
    };
    match run(c) {
        Ok(()) => COMMIT3res::NFS3_OK(COMMIT3resok {
            file_wcc: wcc.data(c),
            verf: c.srv.write_verf,
        }),
        Err(s) => COMMIT3res::default(
            s,
            COMMIT3resfail {
                file_wcc: wcc.data(c),
            },
        ),
    }
}
