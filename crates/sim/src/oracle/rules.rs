//! The oracle's shared checks: an op's status against the statuses allowed, CLOSEs,
//! change info, conflicts the model knows of (share reservations), and effects the
//! backend must have applied exactly once.

use super::*;

pub(super) fn st(res: &COMPOUND4res, i: usize) -> Option<nfsstat4> {
    res.resarray.get(i).map(status_of)
}

/// Check one op's status: `None` (not executed) only after an earlier failure.
pub(super) fn expect(
    what: &str,
    got: Option<nfsstat4>,
    allowed: &[nfsstat4],
    faulted: bool,
) -> Result<bool, Violation> {
    let Some(s) = got else {
        return Err(Violation::new(
            K::UnexpectedStatus,
            format!("{what}: not executed although every earlier op succeeded"),
        ));
    };
    if allowed.contains(&s) {
        return Ok(s == NFS4_OK);
    }
    if faulted && matches!(s, NFS4ERR_IO | NFS4ERR_NOSPC) {
        return Ok(false);
    }
    Err(Violation::new(
        K::UnexpectedStatus,
        format!("{what}: answered {s:?}, allowed {allowed:?}"),
    ))
}

/// A CLOSE (op `i`) of `owner`'s open of `file`: checked, and once it worked the
/// model forgets the open.
pub(super) fn closed(
    sim: &mut Sim,
    what: &str,
    res: &COMPOUND4res,
    i: usize,
    (file, owner): (&Fh, &OpenOwner),
    faulted: bool,
) -> Result<(), Violation> {
    if expect(what, st(res, i), &[NFS4_OK], faulted)? {
        sim.model.remove_open(file, owner);
    }
    Ok(())
}

pub(super) fn cinfo(
    sim: &mut Sim,
    dir: &Fh,
    c: &change_info4,
    what: &str,
) -> Result<(), Violation> {
    sim.stats.cinfo_checked += 1;
    sim.model
        .check_cinfo(dir, c.before, c.after)
        .map_err(|e| Violation::new(K::CinfoBackwards, format!("{what}: {e}")))
}

/// The server's answer `s` against a conflict the model knows of (or `None`): granted
/// over a conflict, or refused with `refusal` though nothing conflicts, is a violation;
/// each refusal is counted in `refused`.
pub(super) fn judge_conflict<C>(
    s: Option<nfsstat4>,
    refusal: nfsstat4,
    conflict: Option<C>,
    granted_over: impl FnOnce(C) -> String,
    refused_for_nothing: impl FnOnce() -> String,
    refused: &mut u64,
) -> Result<(), Violation> {
    match conflict {
        Some(c) if s == Some(NFS4_OK) => {
            return Err(Violation::new(K::LockConflict, granted_over(c)));
        }
        None if s == Some(refusal) => {
            return Err(Violation::new(K::StaleStateSurvived, refused_for_nothing()));
        }
        _ => {}
    }
    if s == Some(refusal) {
        *refused += 1;
    }
    Ok(())
}

/// Op 2 of `res` (checked as `what`) against the ledger's count of the backend applying
/// the request with the token of `(kind, key)`: acknowledged means applied exactly once,
/// else `twice` describes the violation. Not acknowledged: `Ok(false)`, after `unseen`
/// if it took effect anyway.
pub(super) fn applied_once(
    sim: &mut Sim,
    what: &str,
    res: &COMPOUND4res,
    faulted: bool,
    (kind, key): (u8, &[u8]),
    twice: impl FnOnce(u32) -> String,
    unseen: impl FnOnce(&mut Sim),
) -> Result<bool, Violation> {
    let ok = expect(what, st(res, 2), &[NFS4_OK], faulted)?;
    let applied = sim.ledger.applied(crate::fault::token(kind, key));
    if !ok {
        if applied > 0 {
            unseen(sim);
        }
        return Ok(false);
    }
    if applied != 1 {
        return Err(Violation::new(K::ExecutedTwice, twice(applied)));
    }
    Ok(true)
}

/// The object `new` = (directory, name, is_dir) that op 2 of `res` created (with the
/// change info `c`, checked as `what`) and op 3 (GETFH) named: entered in the model;
/// its handle.
pub(super) fn enter_created(
    sim: &mut Sim,
    res: &COMPOUND4res,
    c: &change_info4,
    (dir, name, is_dir): (&Fh, &bytes::Bytes, bool),
    what: &str,
    op: &str,
) -> Result<Fh, Violation> {
    cinfo(sim, dir, c, what)?;
    let fh = getfh(res, 3)
        .ok_or_else(|| Violation::new(K::UnexpectedStatus, format!("GETFH after {op} failed")))?;
    sim.model
        .objs
        .push(Obj::created(fh.clone(), dir.clone(), name.clone(), is_dir));
    Ok(fh)
}

/// [`judge_conflict`] for an OPEN against the model's share reservations.
pub(super) fn judge_share(
    sim: &mut Sim,
    s: Option<nfsstat4>,
    conflict: bool,
    granted_over: &str,
    refused_for_nothing: &str,
) -> Result<(), Violation> {
    judge_conflict(
        s,
        NFS4ERR_SHARE_DENIED,
        conflict.then_some(()),
        |()| granted_over.into(),
        || refused_for_nothing.into(),
        &mut sim.stats.share_denied,
    )
}

pub(super) fn getfh(res: &COMPOUND4res, i: usize) -> Option<Fh> {
    match res.resarray.get(i) {
        Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(g))) => Some(g.object.clone()),
        _ => None,
    }
}

pub(super) fn lock_owner(sim: &Sim, ci: usize, k: usize) -> LockOwner {
    (ci, sim.clients[ci].incarnation, k)
}
