//! Delegations on the wire (RFC 8881 §10.4, §18.6, §18.5, §18.49): the delegation an
//! OPEN grants, DELEGRETURN, DELEGPURGE, WANT_DELEGATION, and the conflict checks the
//! other ops call before they change or read a file another client may have delegated.
//! The decision is the state core's (`txnfs_state::deleg::policy`); holding a
//! conflicting request while the delegation is recalled is `crate::recall`'s.

use crate::compound::{Compound, Fh, ObjFh, OpResult};
use crate::errors::state_status;
use crate::nfs::*;
use crate::statecore::{stateid_from_wire, stateid_to_wire};
use txnfs_backend::{Attrs, FileType};
use txnfs_state::{Access, DelegType, FileId, NoDeleg, Want};

/// The ACE a delegation carries: nobody is exempt from ACCESS checks (the client
/// asks, as knfsd's clients do).
fn no_permissions() -> nfsace4 {
    nfsace4 {
        r#type: ACE4_ACCESS_ALLOWED_ACE_TYPE,
        flag: 0,
        access_mask: 0,
        who: Default::default(),
    }
}

/// The reply form of a refusal: plain NONE when the client expressed no want (and
/// for every v4.0-style OPEN), NONE_EXT with the reason otherwise (§18.16.3).
fn refusal(want: Want, why: NoDeleg) -> open_delegation4 {
    if want == Want::NoPreference {
        return open_delegation4::OPEN_DELEGATE_NONE;
    }
    let why = match why {
        NoDeleg::NotWanted => open_none_delegation4::default(why_no_delegation4::WND4_NOT_WANTED),
        NoDeleg::Cancelled => open_none_delegation4::default(why_no_delegation4::WND4_CANCELLED),
        NoDeleg::NotSuppUpgrade => {
            open_none_delegation4::default(why_no_delegation4::WND4_NOT_SUPP_UPGRADE)
        }
        NoDeleg::Contention => open_none_delegation4::WND4_CONTENTION(false),
        NoDeleg::Resource => open_none_delegation4::WND4_RESOURCE(false),
    };
    open_delegation4::OPEN_DELEGATE_NONE_EXT(why)
}

/// The delegation to put in an OPEN (or WANT_DELEGATION) reply for `o`, whose
/// attributes are `attrs`, opened with share access `access`.
pub(crate) fn grant(
    c: &Compound,
    o: &ObjFh,
    attrs: &Attrs,
    access: u32,
    want: Want,
    reclaim: bool,
) -> Result<open_delegation4, nfsstat4> {
    let client = c.client()?;
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    let callback_up = c.srv.callbacks.client_up(client);
    let granted = c.srv.core()?.grant_delegation(
        c.now,
        client,
        file,
        access,
        want,
        callback_up,
        reclaim,
        o.wire.clone(),
        attrs.change,
    );
    Ok(match granted {
        Ok(g) => {
            let stateid = stateid_to_wire(&g.stateid);
            match g.kind {
                DelegType::Read => open_delegation4::OPEN_DELEGATE_READ(open_read_delegation4 {
                    stateid,
                    recall: false,
                    permissions: no_permissions(),
                }),
                DelegType::Write => {
                    open_delegation4::OPEN_DELEGATE_WRITE(open_write_delegation4 {
                        stateid,
                        recall: false,
                        // No space limit: the client may write as far as it likes
                        // before it must flush on close.
                        space_limit: nfs_space_limit4::NFS_LIMIT_SIZE(u64::MAX),
                        permissions: no_permissions(),
                    })
                }
            }
        }
        Err(why) => refusal(want, why),
    })
}

/// The want bits of an OPEN's share access (§18.16.3); undefined values are INVAL.
pub(crate) fn want_of(share_access: u32) -> Result<Want, nfsstat4> {
    Want::from_bits(share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK)
        .ok_or(nfsstat4::NFS4ERR_INVAL)
}

/// Wait until no other client's delegation of the object `o` (with attributes
/// `attrs`) conflicts with `access`; only regular files carry delegations.
pub(crate) fn clear(
    c: &Compound,
    o: &ObjFh,
    attrs: &Attrs,
    access: Access,
) -> Result<(), nfsstat4> {
    if attrs.ftype != FileType::Regular {
        return Ok(());
    }
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    c.srv.clear_delegations(c.now, c.client, file, access)
}

/// [`clear`] for the object named `name` in the directory `dir`, if it exists (REMOVE,
/// RENAME, the target of a RENAME). Skips the lookup while no delegation exists.
pub(crate) fn clear_name(
    c: &Compound,
    dir: &ObjFh,
    name: &[u8],
    access: Access,
) -> Result<(), nfsstat4> {
    if c.srv.core()?.delegations().is_empty() {
        return Ok(());
    }
    let be = &dir.export.backend;
    let Ok((key, _)) = be.lookup(&dir.key, name) else {
        return Ok(());
    };
    let Ok(attrs) = be.getattr(&key) else {
        return Ok(());
    };
    if attrs.ftype != FileType::Regular {
        return Ok(());
    }
    let file: FileId = c.srv.state_file_id(&dir.export, attrs.fileid);
    c.srv.clear_delegations(c.now, c.client, file, access)
}

/// DELEGRETURN (RFC 8881 §18.6).
pub fn delegreturn(c: &mut Compound, a: &DELEGRETURN4args) -> OpResult {
    let client = c.client()?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.deleg_stateid)?);
    let file = c.srv.cfh_file_id(c.cfh()?)?;
    c.srv
        .core()?
        .delegreturn(c.now, client, &sid, file)
        .map_err(|e| state_status(&e))?;
    Ok(nfs_resop4::OP_DELEGRETURN(DELEGRETURN4res {
        status: nfsstat4::NFS4_OK,
    }))
}

/// DELEGPURGE (RFC 8881 §18.5): it exists for CLAIM_DELEGATE_PREV, which txnfs does
/// not support (delegations do not survive a client restart), so NOTSUPP as the RFC
/// requires of such servers.
pub fn delegpurge(_c: &mut Compound, _a: &DELEGPURGE4args) -> OpResult {
    Err(nfsstat4::NFS4ERR_NOTSUPP.into())
}

/// WANT_DELEGATION (RFC 8881 §18.49): a delegation of the current file without an
/// OPEN. Only CLAIM_FH wants are served (CLAIM_PREVIOUS reclaims go through OPEN).
pub fn want_delegation(c: &mut Compound, a: &WANT_DELEGATION4args) -> OpResult {
    let want = Want::from_bits(a.wda_want).ok_or(nfsstat4::NFS4ERR_INVAL)?;
    if !matches!(a.wda_claim, deleg_claim4::CLAIM_FH) {
        return Err(nfsstat4::NFS4ERR_NOTSUPP.into());
    }
    let o = match c.cfh()? {
        Fh::Obj(o) => o.clone(),
        Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_ISDIR.into()),
    };
    let attrs = o.export.backend.getattr(&o.key)?;
    match attrs.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(nfsstat4::NFS4ERR_ISDIR.into()),
        _ => return Err(nfsstat4::NFS4ERR_WRONG_TYPE.into()),
    }
    let access = match want {
        Want::Write | Want::Any => OPEN4_SHARE_ACCESS_BOTH,
        _ => OPEN4_SHARE_ACCESS_READ,
    };
    let d = grant(c, &o, &attrs, access, want, false)?;
    Ok(nfs_resop4::OP_WANT_DELEGATION(
        WANT_DELEGATION4res::NFS4_OK(d),
    ))
}
