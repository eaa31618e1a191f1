//! What the NFSv3 procedures share (RFC 1813 §2.5–2.6, §3.3 preamble): the file
//! handle of a request resolved to an export object, `fattr3` and `wcc_data` from the
//! backend's attributes, `sattr3` as the backend's `SetAttrs`, and the permission and
//! name checks the v4 ops use, with their statuses said as v3 says them.

use bytes::Bytes;
use txnfs_backend::{Attrs, DirChange, FileKey, FileType, SetAttrs, SetTime, Timestamp};
use txnfs_proto::nfs3::*;

use crate::cstate::Compound;
use crate::errors::{backend_status3, v3_status_of_v4};
use crate::export::Export;
use crate::fh::{Fh, ObjFh};

/// A v3 procedure's outcome before its reply body is built.
pub type R<T> = Result<T, nfsstat3>;

/// A backend result as v3 sees it.
pub fn be<T>(r: txnfs_backend::Result<T>) -> R<T> {
    r.map_err(|e| backend_status3(&e))
}

/// A result of a part shared with NFSv4 as v3 sees it.
pub fn v4<T>(r: Result<T, crate::nfs::nfsstat4>) -> R<T> {
    r.map_err(v3_status_of_v4)
}

/// The object a v3 file handle names. Its export is entered (`begin_compound`) before
/// anything else touches its backend. Pseudo-file-system handles are NFSv4's alone:
/// a v3 client never gets one from MOUNT, so one arriving here is not a v3 handle.
pub fn obj(c: &mut Compound, fh: &nfs_fh3) -> R<ObjFh> {
    let resolved = v4(c.srv.fh_from_wire(&fh.data))?;
    let Fh::Obj(o) = resolved else {
        return Err(nfsstat3::NFS3ERR_BADHANDLE);
    };
    // The export's rules admit the caller and set whom it acts as (ADR 0043).
    c.admit(&o.export)?;
    be(c.scope.enter(&o.export, &c.creds, None))?;
    Ok(o)
}

/// The attributes of `o`.
pub fn getattr(c: &Compound, o: &ObjFh) -> R<Attrs> {
    be(o.export.backend.getattr(c.scope.ctx(), &o.key))
}

/// The wire handle of the object `key` of `export`; a handle longer than NFSv3's 64
/// bytes (a backend key of more than 44 bytes, ADR 0038) cannot be given to a v3
/// client.
pub fn handle3(c: &Compound, export: &std::sync::Arc<Export>, key: FileKey) -> R<nfs_fh3> {
    let wire = c.srv.fh_wire(&c.srv.obj_fh(export, key));
    wire3(wire)
}

/// A wire handle as `nfs_fh3`, if it fits NFSv3's 64 bytes.
pub fn wire3(wire: Bytes) -> R<nfs_fh3> {
    if wire.len() > NFS3_FHSIZE as usize {
        tracing::warn!(
            len = wire.len(),
            "a file handle is too long for NFSv3 (backend key over 44 bytes)"
        );
        return Err(nfsstat3::NFS3ERR_SERVERFAULT);
    }
    Ok(nfs_fh3 { data: wire })
}

pub fn time3(t: Timestamp) -> nfstime3 {
    nfstime3 {
        seconds: t.sec.clamp(0, u32::MAX as i64) as u32,
        nseconds: t.nsec,
    }
}

pub fn timestamp(t: &nfstime3) -> Timestamp {
    Timestamp {
        sec: t.seconds as i64,
        nsec: t.nseconds.min(999_999_999),
    }
}

pub fn ftype3_of(t: FileType) -> ftype3 {
    match t {
        FileType::Regular => ftype3::NF3REG,
        FileType::Directory => ftype3::NF3DIR,
        FileType::Symlink => ftype3::NF3LNK,
        FileType::BlockDev => ftype3::NF3BLK,
        FileType::CharDev => ftype3::NF3CHR,
        FileType::Fifo => ftype3::NF3FIFO,
        FileType::Socket => ftype3::NF3SOCK,
    }
}

/// The v3 fsid of an export: its NFSv4 fsid's two halves in one number, so that v3
/// and v4 clients see one file system per export.
pub fn fsid3(export: &Export) -> u64 {
    let (major, minor) = export.fsid();
    (major << 32) ^ minor
}

pub fn fattr3_of(export: &Export, a: &Attrs) -> fattr3 {
    fattr3 {
        r#type: ftype3_of(a.ftype),
        mode: a.mode & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.space_used,
        rdev: specdata3 {
            specdata1: a.rdev.0,
            specdata2: a.rdev.1,
        },
        fsid: fsid3(export),
        fileid: a.fileid,
        atime: time3(a.atime),
        mtime: time3(a.mtime),
        ctime: time3(a.ctime),
    }
}

pub fn post_op(export: &Export, a: Option<&Attrs>) -> post_op_attr {
    match a {
        Some(a) => post_op_attr::TRUE(fattr3_of(export, a)),
        None => post_op_attr::FALSE,
    }
}

/// The current attributes of `o`, or none when they cannot be read (the object just
/// went away): post-op attributes are optional.
pub fn post_op_now(c: &Compound, o: &ObjFh) -> post_op_attr {
    post_op(&o.export, getattr(c, o).ok().as_ref())
}

pub fn wcc_attr_of(a: &Attrs) -> wcc_attr {
    wcc_attr {
        size: a.size,
        mtime: time3(a.mtime),
        ctime: time3(a.ctime),
    }
}

/// Weak cache consistency data of one object (RFC 1813 §2.6 `wcc_data`): its
/// attributes read before the change and the change info the backend reported.
///
/// The pre-op attributes are sent only when they are the state the change started
/// from as far as the backend can tell: for a directory, when their `change` equals
/// the `before` of the backend's [`DirChange`] (nothing came between our read and the
/// backend's; an `atomic` change info also rules out anything between the backend's
/// read and the change, the local backend's cannot, ADR 0038); for a procedure that
/// failed, when the object's `change` did not move across it. For a file (WRITE,
/// SETATTR, COMMIT) the backend reports no change info, so the attributes read just
/// before are sent as they are.
#[derive(Default)]
pub struct Wcc {
    obj: Option<ObjFh>,
    before: Option<Attrs>,
    change: Option<DirChange>,
    /// Attributes the change itself returned (a file's WRITE or SETATTR).
    after: Option<Attrs>,
    /// A file: pre-op attributes need no change info to be sent.
    file: bool,
}

impl Wcc {
    /// Before a change of the directory `o` whose attributes are `attrs`.
    pub fn dir(o: &ObjFh, attrs: &Attrs) -> Self {
        Wcc {
            obj: Some(o.clone()),
            before: Some(attrs.clone()),
            ..Wcc::default()
        }
    }

    /// Before a change of the file `o` whose attributes are `attrs`.
    pub fn file(o: &ObjFh, attrs: &Attrs) -> Self {
        Wcc {
            file: true,
            ..Wcc::dir(o, attrs)
        }
    }

    /// The directory's change as the backend reported it.
    pub fn changed(&mut self, d: DirChange) {
        self.change = Some(d);
    }

    /// The file's attributes as the change returned them.
    pub fn changed_to(&mut self, a: Attrs) {
        self.after = Some(a);
    }

    pub fn data(&self, c: &Compound) -> wcc_data {
        let Some(o) = &self.obj else {
            return wcc_data {
                before: pre_op_attr::FALSE,
                after: post_op_attr::FALSE,
            };
        };
        let after = match &self.after {
            Some(a) => Some(a.clone()),
            None => getattr(c, o).ok(),
        };
        let exact = match (&self.before, &self.change, &after) {
            (Some(b), Some(d), _) => b.change == d.before,
            (Some(_), None, _) if self.file => true,
            // Nothing was changed: the attributes read before are the state if the
            // object's change did not move meanwhile.
            (Some(b), None, Some(a)) => b.change == a.change,
            _ => false,
        };
        let before = match &self.before {
            Some(b) if exact => pre_op_attr::TRUE(wcc_attr_of(b)),
            _ => pre_op_attr::FALSE,
        };
        wcc_data {
            before,
            after: post_op(&o.export, after.as_ref()),
        }
    }
}

/// `sattr3` as the backend's attribute changes.
pub fn set_attrs(s: &sattr3) -> SetAttrs {
    SetAttrs {
        mode: match s.mode {
            set_mode3::TRUE(m) => Some(m & 0o7777),
            set_mode3::default(_) => None,
        },
        uid: match s.uid {
            set_uid3::TRUE(u) => Some(u),
            set_uid3::default(_) => None,
        },
        gid: match s.gid {
            set_gid3::TRUE(g) => Some(g),
            set_gid3::default(_) => None,
        },
        size: match s.size {
            set_size3::TRUE(n) => Some(n),
            set_size3::default(_) => None,
        },
        atime: match &s.atime {
            set_atime::SET_TO_CLIENT_TIME(t) => Some(SetTime::Client(timestamp(t))),
            set_atime::default(time_how::SET_TO_SERVER_TIME) => Some(SetTime::ServerNow),
            set_atime::default(_) => None,
        },
        mtime: match &s.mtime {
            set_mtime::SET_TO_CLIENT_TIME(t) => Some(SetTime::Client(timestamp(t))),
            set_mtime::default(time_how::SET_TO_SERVER_TIME) => Some(SetTime::ServerNow),
            set_mtime::default(_) => None,
        },
    }
}

/// A name to create or remove: one component, never "." or ".." (RFC 1813 §3.3.8:
/// creating those is EXIST as knfsd answers; other bad names ACCES).
pub fn check_new_name(name: &Bytes) -> R<()> {
    if &name[..] == b"." || &name[..] == b".." {
        return Err(nfsstat3::NFS3ERR_EXIST);
    }
    v4(crate::ops::fh::check_name(name))
}

/// The directory `o` as one a request may change: a writable export, a directory,
/// and write and search permission for the caller.
pub fn writable_dir(c: &Compound, o: &ObjFh) -> R<Attrs> {
    if c.read_only(&o.export) {
        return Err(nfsstat3::NFS3ERR_ROFS);
    }
    let attrs = getattr(c, o)?;
    if attrs.ftype != FileType::Directory {
        return Err(nfsstat3::NFS3ERR_NOTDIR);
    }
    use crate::ops::attr::{require, W, X};
    v4(require(&attrs, &c.creds, W | X))?;
    Ok(attrs)
}

/// The directory of a `diropargs3`, resolved, with its attributes.
pub fn dir_of(c: &mut Compound, a: &diropargs3) -> R<(ObjFh, Attrs)> {
    let o = obj(c, &a.dir)?;
    let attrs = getattr(c, &o)?;
    Ok((o, attrs))
}
