//! NFSv3 FSSTAT, FSINFO and PATHCONF (RFC 1813 §3.3.18–3.3.20): the file system of
//! an export as the backend and the server's limits describe it.

use txnfs_proto::nfs3::*;

use crate::cstate::Compound;
use crate::fh::ObjFh;
use crate::v3::common::{be, getattr, obj, post_op_now, R};

/// Runs `f` on the object of `fh`; the post-op attributes for either outcome.
fn with_obj<T>(
    c: &mut Compound,
    fh: &nfs_fh3,
    f: impl FnOnce(&mut Compound, &ObjFh) -> R<T>,
) -> (R<T>, post_op_attr) {
    let o = match obj(c, fh) {
        Ok(o) => o,
        Err(s) => return (Err(s), post_op_attr::FALSE),
    };
    let r = f(c, &o);
    let attrs = post_op_now(c, &o);
    (r, attrs)
}

pub fn fsstat3(c: &mut Compound, a: FSSTAT3args) -> FSSTAT3res {
    let (r, obj_attributes) = with_obj(c, &a.fsroot, |c, o| {
        be(o.export.backend.statfs(c.scope.ctx(), &o.key))
    });
    match r {
        Ok(s) => FSSTAT3res::NFS3_OK(FSSTAT3resok {
            obj_attributes,
            tbytes: s.total_bytes,
            fbytes: s.free_bytes,
            abytes: s.avail_bytes,
            tfiles: s.total_files,
            ffiles: s.free_files,
            afiles: s.avail_files,
            // The numbers move with every write: clients should not cache them.
            invarsec: 0,
        }),
        Err(s) => FSSTAT3res::default(s, FSSTAT3resfail { obj_attributes }),
    }
}

/// The preferred READDIR size: what Linux asks for by default, within our limit.
const DTPREF: u32 = 64 << 10;

pub fn fsinfo3(c: &mut Compound, a: FSINFOargs) -> FSINFO3res {
    let (r, obj_attributes) = with_obj(c, &a.fsroot, |c, o| getattr(c, o).map(|_| ()));
    let io = c.srv.cfg.max_io_size;
    match r {
        Ok(()) => FSINFO3res::NFS3_OK(FSINFO3resok {
            obj_attributes,
            rtmax: io,
            rtpref: io,
            rtmult: 4096,
            wtmax: io,
            wtpref: io,
            wtmult: 4096,
            dtpref: DTPREF.min(io),
            maxfilesize: i64::MAX as u64,
            time_delta: nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        }),
        Err(s) => FSINFO3res::default(s, FSINFO3resfail { obj_attributes }),
    }
}

pub fn pathconf3(c: &mut Compound, a: PATHCONF3args) -> PATHCONF3res {
    let (r, obj_attributes) = with_obj(c, &a.object, |c, o| {
        be(o.export.backend.statfs(c.scope.ctx(), &o.key))
    });
    match r {
        Ok(stats) => PATHCONF3res::NFS3_OK(PATHCONF3resok {
            obj_attributes,
            // ext4's limit; the backend reports none, and a link past the real one
            // fails with MLINK all the same.
            linkmax: 65000,
            name_max: if stats.max_name_len == 0 {
                txnfs_backend::NAME_MAX as u32
            } else {
                stats.max_name_len
            },
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        }),
        Err(s) => PATHCONF3res::default(s, PATHCONF3resfail { obj_attributes }),
    }
}
