//! Filehandle operations: PUTFH, PUTROOTFH, PUTPUBFH, GETFH, SAVEFH, RESTOREFH, LOOKUP,
//! LOOKUPP, SECINFO, SECINFO_NO_NAME.

use crate::access::Refusal;
use crate::cstate::Compound;
use crate::errors::OpResult;
use crate::export::PseudoChild;
use crate::fh::Fh;
use crate::nfs::*;
use bytes::Bytes;

/// Validate one name component (RFC 8881 §14.2): never a path, never "." or "..".
pub fn check_name(name: &Bytes) -> Result<(), nfsstat4> {
    if name.is_empty() {
        return Err(nfsstat4::NFS4ERR_INVAL);
    }
    if name.len() > 255 {
        return Err(nfsstat4::NFS4ERR_NAMETOOLONG);
    }
    if &name[..] == b"." || &name[..] == b".." || name.iter().any(|b| *b == b'/' || *b == 0) {
        return Err(nfsstat4::NFS4ERR_BADNAME);
    }
    Ok(())
}

/// Makes `fh` the current filehandle: the export's rules admit the caller (or refuse
/// it: NFS4ERR_ACCESS, NFS4ERR_WRONGSEC; ADR 0043) and set the identity it acts as;
/// the first time this COMPOUND reaches an export, that export's backend hears
/// `begin_compound` (a refusal fails this op).
///
/// A put-filehandle op (`put`: PUTFH, PUTROOTFH, PUTPUBFH, RESTOREFH) does not fail
/// NFS4ERR_WRONGSEC when the op after it is one RFC 8881 §2.6.3.1.1 exempts (SECINFO,
/// SECINFO_NO_NAME, SAVEFH, LOOKUP, LOOKUPP, OPEN by name, another put-filehandle op,
/// or none): the filehandle becomes current unadmitted (`Compound::cfh_wrongsec`),
/// the export's backend is not entered, and only those ops may use it.
fn set_cfh(c: &mut Compound, fh: Fh, put: bool) -> Result<(), crate::errors::OpError> {
    c.cfh_wrongsec = false;
    if let Fh::Obj(o) = &fh {
        match c.admit(&o.export) {
            Ok(()) => {}
            Err(Refusal::WrongSec) if put && c.next_defers_wrongsec => {
                c.cfh = Some(fh);
                c.cfh_wrongsec = true;
                return Ok(());
            }
            Err(r) => return Err(r.into()),
        }
        c.scope.enter(&o.export, &c.creds, c.client)?;
    }
    c.cfh = Some(fh);
    Ok(())
}

pub fn putfh(c: &mut Compound, a: &PUTFH4args) -> OpResult {
    let fh = c.srv.fh_from_wire(&a.object)?;
    set_cfh(c, fh, true)?;
    Ok(nfs_resop4::OP_PUTFH(PUTFH4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn putrootfh(c: &mut Compound) -> OpResult {
    set_cfh(c, c.srv.root_fh(), true)?;
    Ok(nfs_resop4::OP_PUTROOTFH(PUTROOTFH4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn putpubfh(c: &mut Compound) -> OpResult {
    set_cfh(c, c.srv.root_fh(), true)?;
    Ok(nfs_resop4::OP_PUTPUBFH(PUTPUBFH4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn getfh(c: &mut Compound) -> OpResult {
    let wire = c.srv.fh_wire(c.cfh()?);
    Ok(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(GETFH4resok {
        object: wire,
    })))
}

pub fn savefh(c: &mut Compound) -> OpResult {
    // (RFC 8881 §2.6.3.1.1.1: SAVEFH does not fail NFS4ERR_WRONGSEC; RESTOREFH
    // checks again, and the ops that use the saved filehandle refuse an unadmitted one.)
    c.sfh = c.cfh.clone();
    c.sfh_wrongsec = c.cfh_wrongsec;
    Ok(nfs_resop4::OP_SAVEFH(SAVEFH4res {
        status: nfsstat4::NFS4_OK,
    }))
}

pub fn restorefh(c: &mut Compound) -> OpResult {
    let s = c.sfh.clone().ok_or(nfsstat4::NFS4ERR_RESTOREFH)?;
    set_cfh(c, s, true)?;
    Ok(nfs_resop4::OP_RESTOREFH(RESTOREFH4res {
        status: nfsstat4::NFS4_OK,
    }))
}

/// Resolve `name` inside the directory `dir` (pseudo or real).
pub fn lookup_in(c: &Compound, dir: &Fh, name: &Bytes) -> Result<Fh, crate::errors::OpError> {
    check_name(name)?;
    match dir {
        Fh::Pseudo(n) => {
            let set = c.srv.exports.snapshot();
            let node = set.node(*n).ok_or(nfsstat4::NFS4ERR_STALE)?;
            // Exports the caller may not use are not there for it (ADR 0043).
            match node.children.get(name).filter(|child| c.may_see(child)) {
                Some(PseudoChild::Node(m)) => Ok(Fh::Pseudo(*m)),
                Some(PseudoChild::Export(id)) => {
                    let e = set.get(*id).ok_or(nfsstat4::NFS4ERR_STALE)?;
                    Ok(c.srv.obj_fh(e, e.root_key.clone()))
                }
                None => Err(nfsstat4::NFS4ERR_NOENT.into()),
            }
        }
        Fh::Obj(o) => {
            let (key, _attrs) = o.export.backend.lookup(c.scope.ctx(), &o.key, name)?;
            Ok(c.srv.obj_fh(&o.export, key))
        }
    }
}

pub fn lookup(c: &mut Compound, a: &LOOKUP4args) -> OpResult {
    let dir = c.cfh()?.clone();
    let fh = lookup_in(c, &dir, &a.objname)?;
    set_cfh(c, fh, false)?;
    Ok(nfs_resop4::OP_LOOKUP(LOOKUP4res {
        status: nfsstat4::NFS4_OK,
    }))
}

/// The parent of a directory, crossing from an export root into the pseudo tree.
pub fn parent_of(c: &Compound, fh: &Fh) -> Result<Fh, crate::errors::OpError> {
    match fh {
        Fh::Pseudo(0) => Err(nfsstat4::NFS4ERR_NOENT.into()),
        Fh::Pseudo(n) => {
            let set = c.srv.exports.snapshot();
            let node = set.node(*n).ok_or(nfsstat4::NFS4ERR_STALE)?;
            Ok(Fh::Pseudo(node.parent))
        }
        Fh::Obj(o) => {
            if o.key == o.export.root_key {
                return match o.export.parent_node {
                    Some(p) => Ok(Fh::Pseudo(p)),
                    None => Err(nfsstat4::NFS4ERR_NOENT.into()),
                };
            }
            let (key, _) = o.export.backend.lookup_parent(c.scope.ctx(), &o.key)?;
            Ok(c.srv.obj_fh(&o.export, key))
        }
    }
}

pub fn lookupp(c: &mut Compound) -> OpResult {
    let fh = c.cfh()?.clone();
    if c.cfh_wrongsec {
        // An unadmitted filehandle (RFC 8881 §2.6.3.1.1.4): its parent is in the same
        // export (NFS4ERR_WRONGSEC, without touching the backend) unless it is the
        // export's root, whose parent is in the pseudo file system.
        let parent = unadmitted_parent(&fh)?.ok_or(nfsstat4::NFS4ERR_WRONGSEC)?;
        set_cfh(c, parent, false)?;
        return Ok(nfs_resop4::OP_LOOKUPP(LOOKUPP4res {
            status: nfsstat4::NFS4_OK,
        }));
    }
    if let Fh::Obj(o) = &fh {
        let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
        if attrs.ftype != txnfs_backend::FileType::Directory {
            return Err(if attrs.ftype == txnfs_backend::FileType::Symlink {
                nfsstat4::NFS4ERR_SYMLINK
            } else {
                nfsstat4::NFS4ERR_NOTDIR
            }
            .into());
        }
    }
    let parent = parent_of(c, &fh)?;
    set_cfh(c, parent, false)?;
    Ok(nfs_resop4::OP_LOOKUPP(LOOKUPP4res {
        status: nfsstat4::NFS4_OK,
    }))
}

/// The flavours the caller may use on `fh`: its export rule's (ADR 0043), AUTH_SYS on
/// the pseudo file system (AUTH_NONE is accepted where AUTH_SYS is, as nobody). `tls`
/// and `mtls` are AUTH_SYS over a TLS connection (RFC 9289 has no SECINFO entry of
/// its own for them): listed as AUTH_SYS once. Kerberos flavours are RPCSEC_GSS
/// entries with the krb5 mechanism's OID, QOP 0 and their service (ADR 0051).
fn flavors(c: &Compound, fh: &Fh) -> SECINFO4resok {
    use crate::exportrules::Flavor;
    let allowed = match fh {
        Fh::Obj(o) => c.flavors(&o.export),
        Fh::Pseudo(_) => vec![Flavor::Sys],
    };
    let gss = |service| {
        secinfo4::RPCSEC_GSS(rpcsec_gss_info {
            oid: bytes::Bytes::from_static(txnfs_rpc::gss::KRB5_MECH_OID),
            qop: 0,
            service,
        })
    };
    Flavor::advertised(&allowed)
        .into_iter()
        .map(|f| match f {
            Flavor::Krb5 => gss(rpc_gss_svc_t::RPC_GSS_SVC_NONE),
            Flavor::Krb5i => gss(rpc_gss_svc_t::RPC_GSS_SVC_INTEGRITY),
            Flavor::Krb5p => gss(rpc_gss_svc_t::RPC_GSS_SVC_PRIVACY),
            Flavor::Sys | Flavor::Tls | Flavor::Mtls => secinfo4::default(AUTH_SYS),
        })
        .collect()
}

/// The parent of an unadmitted filehandle (`Compound::cfh_wrongsec`, always an
/// object) where it is outside the export: the pseudo directory above the export's
/// root (NFS4ERR_NOENT for an export at the root); `None` for any other object, whose
/// parent is in the same export.
fn unadmitted_parent(fh: &Fh) -> Result<Option<Fh>, nfsstat4> {
    match fh {
        Fh::Obj(o) if o.key == o.export.root_key => match o.export.parent_node {
            Some(p) => Ok(Some(Fh::Pseudo(p))),
            None => Err(nfsstat4::NFS4ERR_NOENT),
        },
        _ => Ok(None),
    }
}

/// SECINFO and SECINFO_NO_NAME consume the current filehandle in NFSv4.1 and later
/// (RFC 8881 §2.6.3.1.1.8: so an op after them cannot use a filehandle the caller's
/// flavour was never checked against); NFSv4.0's SECINFO leaves it (RFC 7530).
fn consume_cfh(c: &mut Compound) {
    if c.minor >= 1 {
        c.cfh = None;
        c.cfh_wrongsec = false;
    }
}

pub fn secinfo(c: &mut Compound, a: &SECINFO4args) -> OpResult {
    let dir = c.cfh()?.clone();
    let fh = if c.cfh_wrongsec {
        // A directory of an export whose rules refuse the caller's flavour
        // (RFC 8881 §2.6.3.1.1.5): its entries are in the same export, whose
        // flavours are the answer; the backend is not asked whether the name exists
        // on behalf of a caller it does not admit.
        check_name(&a.name)?;
        dir
    } else {
        lookup_in(c, &dir, &a.name)?
    };
    consume_cfh(c);
    Ok(nfs_resop4::OP_SECINFO(SECINFO4res::NFS4_OK(flavors(
        c, &fh,
    ))))
}

pub fn secinfo_no_name(c: &mut Compound, a: &SECINFO_NO_NAME4args) -> OpResult {
    let mut fh = c.cfh()?.clone();
    if *a == secinfo_style4::SECINFO_STYLE4_PARENT {
        fh = if c.cfh_wrongsec {
            // (Not the export's root: the parent is in the same export.)
            unadmitted_parent(&fh)?.unwrap_or(fh)
        } else {
            parent_of(c, &fh)?
        };
    }
    consume_cfh(c);
    Ok(nfs_resop4::OP_SECINFO_NO_NAME(SECINFO4res::NFS4_OK(
        flavors(c, &fh),
    )))
}
