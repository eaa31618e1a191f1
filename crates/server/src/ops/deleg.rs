//! Delegations on the wire (RFC 8881 §10.4, §18.6, §18.5, §18.39, §18.49): the
//! delegation an OPEN grants, DELEGRETURN, DELEGPURGE, WANT_DELEGATION,
//! GET_DIR_DELEGATION, and the conflict checks the other ops call before they change or
//! read a file another client may have delegated.
//! The decision is the state core's (`txnfs_state::deleg::policy`); holding a
//! conflicting request while the delegation is recalled is `crate::recall`'s.

use crate::cstate::Compound;
use crate::errors::state_status;
use crate::errors::OpResult;
use crate::fh::{Fh, ObjFh};
use crate::nfs::*;
use crate::statecore::{stateid_from_wire, stateid_to_wire};
use crate::watches::WatchRefused;
use txnfs_backend::{Attrs, FileType};
use txnfs_state::deleg::dir::{notify_type, MAX_CHILDREN};
use txnfs_state::deleg::DirParams;
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

/// Does an OPEN's share access (or WANT_DELEGATION's want) ask for delegated
/// timestamps (RFC 9754 §3)? Only NFSv4.2 has them.
pub(crate) fn wants_timestamps(c: &Compound, share_access: u32) -> bool {
    c.minor >= 2 && share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS != 0
}

/// The delegation to put in an OPEN (or WANT_DELEGATION) reply for `o`, whose
/// attributes are `attrs`, opened with share access `access`; `timestamps`: the
/// client asked for delegated timestamps ([`wants_timestamps`]).
pub(crate) fn grant(
    c: &Compound,
    o: &ObjFh,
    attrs: &Attrs,
    access: u32,
    want: Want,
    reclaim: bool,
    timestamps: bool,
) -> Result<open_delegation4, nfsstat4> {
    let client = c.client()?;
    if c.scope.ctx().txn {
        // A transaction may still roll the OPEN back; a delegation handed out with it
        // would outlive the file it names (ADR 0021).
        return Ok(refusal(want, NoDeleg::Resource));
    }
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    let callback_up = c.srv.callbacks.client_up(client);
    let mut core = c.srv.core()?;
    let granted = core.grant_delegation(
        c.now,
        client,
        file,
        access,
        want,
        callback_up,
        reclaim,
        o.wire.clone(),
        attrs.change,
        timestamps,
    );
    drop(core);
    // A delegation the backend cannot protect from access outside the server (a
    // local file open for writing elsewhere) is taken back before anyone saw it
    // (ADR 0027). The watch is taken without the core's lock (ADR 0029).
    let granted = match granted {
        Ok(g) => match c
            .srv
            .watches
            .watch(c.srv, c.scope.ctx(), &o.export, &o.key, file, g.kind)
        {
            Ok(()) => Ok(g),
            Err(why) => {
                tracing::debug!(file = format_args!("{file:#x}"), "no delegation: {why}");
                c.srv.core()?.withdraw_delegation(client, &g.stateid, file);
                Err(match why {
                    WatchRefused::Contention => NoDeleg::Contention,
                    WatchRefused::Backend(_) => NoDeleg::Resource,
                })
            }
        },
        Err(why) => Err(why),
    };
    Ok(match granted {
        Ok(g) => {
            let stateid = stateid_to_wire(&g.stateid);
            match g.kind {
                DelegType::Read => {
                    let read = open_read_delegation4 {
                        stateid,
                        recall: false,
                        permissions: no_permissions(),
                    };
                    if g.timestamps {
                        open_delegation4::OPEN_DELEGATE_READ_ATTRS_DELEG(read)
                    } else {
                        open_delegation4::OPEN_DELEGATE_READ(read)
                    }
                }
                // `grant_delegation` never grants a directory delegation.
                DelegType::Directory => open_delegation4::OPEN_DELEGATE_NONE,
                DelegType::Write => {
                    let write = open_write_delegation4 {
                        stateid,
                        recall: false,
                        // No space limit: the client may write as far as it likes
                        // before it must flush on close.
                        space_limit: nfs_space_limit4::NFS_LIMIT_SIZE(u64::MAX),
                        permissions: no_permissions(),
                    };
                    if g.timestamps {
                        open_delegation4::OPEN_DELEGATE_WRITE_ATTRS_DELEG(write)
                    } else {
                        open_delegation4::OPEN_DELEGATE_WRITE(write)
                    }
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
    c.srv
        .clear_delegations(c.now, c.client, file, access, c.waited)
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
    // No such name: nothing to recall (the op itself reports NOENT). Any other failure
    // is the op's answer too: going ahead unchecked could change a delegated file.
    let key = match be.lookup(c.scope.ctx(), &dir.key, name) {
        Ok((key, _)) => key,
        Err(txnfs_backend::BackendError::NotFound) => return Ok(()),
        Err(e) => return Err(crate::errors::backend_status(&e)),
    };
    let attrs = be
        .getattr(c.scope.ctx(), &key)
        .map_err(|e| crate::errors::backend_status(&e))?;
    if attrs.ftype != FileType::Regular {
        return Ok(());
    }
    let file: FileId = c.srv.state_file_id(&dir.export, attrs.fileid);
    c.srv
        .clear_delegations(c.now, c.client, file, access, c.waited)
}

/// DELEGRETURN (RFC 8881 §18.6) of a file or directory delegation.
pub fn delegreturn(c: &mut Compound, a: &DELEGRETURN4args) -> OpResult {
    let client = c.client()?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.deleg_stateid)?);
    let file = match c.cfh()? {
        Fh::Obj(o) => {
            let attrs = match o.export.backend.getattr(c.scope.ctx(), &o.key) {
                Ok(a) => a,
                // The holder removed the file itself (no open kept it): the handle is
                // stale, but the delegation is still returned, by its stateid.
                Err(txnfs_backend::BackendError::Stale) => {
                    let file = c.srv.core()?.delegations().file_of(client, &sid);
                    let file = file.ok_or(nfsstat4::NFS4ERR_BAD_STATEID)?;
                    c.srv
                        .core()?
                        .delegreturn(c.now, client, &sid, file)
                        .map_err(|e| state_status(&e))?;
                    return Ok(nfs_resop4::OP_DELEGRETURN(DELEGRETURN4res {
                        status: nfsstat4::NFS4_OK,
                    }));
                }
                Err(e) => return Err(e.into()),
            };
            match attrs.ftype {
                FileType::Regular | FileType::Directory => {
                    c.srv.state_file_id(&o.export, attrs.fileid)
                }
                _ => return Err(nfsstat4::NFS4ERR_INVAL.into()),
            }
        }
        Fh::Pseudo(_) => return Err(nfsstat4::NFS4ERR_BAD_STATEID.into()),
    };
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
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    match attrs.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(nfsstat4::NFS4ERR_ISDIR.into()),
        _ => return Err(nfsstat4::NFS4ERR_WRONG_TYPE.into()),
    }
    let access = match want {
        Want::Write | Want::Any => OPEN4_SHARE_ACCESS_BOTH,
        _ => OPEN4_SHARE_ACCESS_READ,
    };
    let timestamps = wants_timestamps(c, a.wda_want);
    let d = grant(c, &o, &attrs, access, want, false, timestamps)?;
    Ok(nfs_resop4::OP_WANT_DELEGATION(Box::new(
        WANT_DELEGATION4res::NFS4_OK(d),
    )))
}

/// The entries of the directory `o` as (name, state id), or `None` if it cannot be
/// read or has more than `MAX_CHILDREN` entries.
fn list_children(c: &Compound, o: &ObjFh) -> Option<Vec<(bytes::Bytes, FileId)>> {
    let be = &o.export.backend;
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let (batch, at_end) = be.readdir(c.scope.ctx(), &o.key, cookie, 256).ok()?;
        if batch.is_empty() {
            return at_end.then_some(out);
        }
        for e in batch {
            cookie = e.cookie;
            out.push((e.name, c.srv.state_file_id(&o.export, e.attrs.fileid)));
        }
        if out.len() > MAX_CHILDREN {
            return None;
        }
        if at_end {
            return Some(out);
        }
    }
}

/// A `bitmap4`'s first word (the notification types fit in it).
fn word0(b: &[u32]) -> u32 {
    b.first().copied().unwrap_or(0)
}

/// `nfstime4` as a delay (negative: none).
fn delay_of(t: &nfstime4) -> std::time::Duration {
    if t.seconds < 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(t.seconds as u64, t.nseconds.min(999_999_999))
}

/// `a` ∩ `b` as bitmaps, without trailing zero words.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = a.iter().zip(b).map(|(x, y)| x & y).collect();
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

/// GET_DIR_DELEGATION (RFC 8881 §18.39): a directory delegation of the current
/// filehandle with the notifications the client asked for, as far as txnfs sends
/// them (`txnfs_state::deleg::dir::SUPPORTED_NOTIFICATIONS`); GDD4_UNAVAIL when the
/// policy refuses (`txnfs_state::deleg::policy::decide_dir`). txnfs never signals a
/// delegation becoming available later.
pub fn get_dir_delegation(c: &mut Compound, a: &GET_DIR_DELEGATION4args) -> OpResult {
    let client = c.client()?;
    let unavail = || {
        Ok(nfs_resop4::OP_GET_DIR_DELEGATION(
            GET_DIR_DELEGATION4res::NFS4_OK(GET_DIR_DELEGATION4res_non_fatal::GDD4_UNAVAIL(false)),
        ))
    };
    let o = match c.cfh()? {
        Fh::Obj(o) => o.clone(),
        // The pseudo file system never changes; nothing to delegate.
        Fh::Pseudo(_) => return unavail(),
    };
    let attrs = o.export.backend.getattr(c.scope.ctx(), &o.key)?;
    if attrs.ftype != FileType::Directory {
        return Err(nfsstat4::NFS4ERR_NOTDIR.into());
    }
    crate::ops::attr::require(&attrs, &c.creds, crate::ops::attr::R)?;
    let supported = txnfs_attr::supported_attrs();
    let params = DirParams {
        types: word0(&a.gdda_notification_types),
        child_attrs: intersect(&a.gdda_child_attributes, &supported),
        dir_attrs: intersect(&a.gdda_dir_attributes, &supported),
        delay: delay_of(&a.gdda_child_attr_delay).max(delay_of(&a.gdda_dir_attr_delay)),
    };
    let dir = c.srv.state_file_id(&o.export, attrs.fileid);
    // A directory the backend cannot watch for changes from outside the server gets
    // no delegation; the watch starts before the grant, without the core's lock
    // (ADR 0047).
    let watch = match c.srv.dir_watches.prepare(c.scope.ctx(), &o.export, &o.key) {
        Ok(w) => w,
        Err(why) => {
            tracing::debug!(
                dir = format_args!("{dir:#x}"),
                "no directory delegation: {why}"
            );
            return unavail();
        }
    };
    let callback_up = c.srv.callbacks.client_up(client);
    let granted =
        c.srv
            .core()?
            .grant_dir_delegation(c.now, client, dir, params, callback_up, o.wire.clone());
    let Ok(mut g) = granted else {
        return unavail();
    };
    c.srv
        .dir_watches
        .adopt(c.srv, &o.export, &o.key, dir, watch);
    if g.types & (1 << notify_type::CHANGE_CHILD_ATTRS) != 0 {
        // CHANGE_CHILD_ATTRS: which objects are entries here, so that a change of one
        // finds this delegation.
        let entries = list_children(c, &o);
        g.types = c.srv.core()?.track_dir_children(g.id, entries);
    }
    let entries = (1 << notify_type::ADD_ENTRY)
        | (1 << notify_type::RENAME_ENTRY)
        | (1 << notify_type::CHANGE_CHILD_ATTRS);
    let dir_attrs = 1 << notify_type::CHANGE_DIR_ATTRS;
    Ok(nfs_resop4::OP_GET_DIR_DELEGATION(
        GET_DIR_DELEGATION4res::NFS4_OK(GET_DIR_DELEGATION4res_non_fatal::GDD4_OK(Box::new(
            GET_DIR_DELEGATION4resok {
                gddr_cookieverf: c.srv.cookieverf(&Fh::Obj(o)),
                gddr_stateid: stateid_to_wire(&g.stateid),
                gddr_notification: if g.types == 0 {
                    Vec::new()
                } else {
                    vec![g.types]
                },
                // Attributes go with entries only when entries are notified.
                gddr_child_attributes: if g.types & entries != 0 {
                    g.child_attrs
                } else {
                    Vec::new()
                },
                gddr_dir_attributes: if g.types & dir_attrs != 0 {
                    g.dir_attrs
                } else {
                    Vec::new()
                },
            },
        ))),
    ))
}
