//! Judging replies: every op's status against what the model allows, then the model
//! and the client's view updated from what was executed.

use crate::client::{Intent, SimClient};
use crate::model::{range_end, Access, DelegPhase, DelegRec, LockOwner, Obj, OpenOwner};
use crate::sim::{Sim, Violation, ViolationKind as K};
use crate::wire::{decode_change_size, status_of, Fh};
use txnfs_proto::nfs4::*;

use nfsstat4::*;

/// The `NFS4_OK` result of op `$i` of `$res`, which must be a `$op` (`$what`): else
/// a harness violation, returned from the calling function.
macro_rules! ok_result {
    ($res:expr, $i:expr, $op:ident, $ty:ident, $what:literal) => {
        match $res.resarray.get($i) {
            Some(nfs_resop4::$op($ty::NFS4_OK(r))) => r,
            _ => return Err(Violation::new(K::Harness, concat!($what, " result shape"))),
        }
    };
}

fn st(res: &COMPOUND4res, i: usize) -> Option<nfsstat4> {
    res.resarray.get(i).map(status_of)
}

/// Check one op's status: `None` (not executed) only after an earlier failure.
fn expect(
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
fn closed(
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

fn cinfo(sim: &mut Sim, dir: &Fh, c: &change_info4, what: &str) -> Result<(), Violation> {
    sim.stats.cinfo_checked += 1;
    sim.model
        .check_cinfo(dir, c.before, c.after)
        .map_err(|e| Violation::new(K::CinfoBackwards, format!("{what}: {e}")))
}

/// The server's answer `s` against a conflict the model knows of (or `None`): granted
/// over a conflict, or refused with `refusal` though nothing conflicts, is a violation;
/// each refusal is counted in `refused`.
fn judge_conflict<C>(
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
fn applied_once(
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
fn enter_created(
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
fn judge_share(
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

/// The delegation rule for op `i` (`what`) of a request of client `ci` that does
/// `access` to `file`: while another client holds a live delegation it conflicts with,
/// the server must answer NFS4ERR_DELAY (it cannot hold the request without a
/// runtime) and ask for a CB_RECALL of each such delegation not yet recalled; it must
/// never answer DELAY otherwise. `Ok(true)`: the op was DELAY'd (and the caller checks
/// that it changed nothing).
#[allow(clippy::too_many_arguments)]
fn delegation_rule(
    sim: &mut Sim,
    ci: usize,
    file: &Fh,
    access: Access,
    res: &COMPOUND4res,
    i: usize,
    what: &str,
    faulted: bool,
) -> Result<bool, Violation> {
    let regular = sim.model.obj(file).is_some_and(|o| !o.is_dir);
    let me = (ci, sim.clients[ci].incarnation);
    let conflicts = if regular {
        sim.model.deleg_conflicts(file, me, access)
    } else {
        Vec::new()
    };
    let s = st(res, i);
    if conflicts.is_empty() {
        if s == Some(NFS4ERR_DELAY) {
            return Err(Violation::new(
                K::UnexpectedStatus,
                format!("{what} ({access:?}): answered DELAY, but no other client holds a conflicting delegation"),
            ));
        }
        return Ok(false);
    }
    if s == Some(NFS4ERR_DELAY) {
        let now = sim.call_now;
        for k in conflicts {
            let d = &mut sim.model.delegs[k];
            // The holder cools down: no delegation of this file for a while (ADR 0017).
            let holder = d.holder;
            if d.phase == DelegPhase::Active {
                d.phase = DelegPhase::Recalling { since: now };
                sim.expect_recalls.push(d.sid.other);
                sim.stats.deleg_recalled += 1;
            }
            sim.model.last_conflict.insert((file.clone(), holder), now);
        }
        sim.stats.deleg_delayed += 1;
        return Ok(true);
    }
    if faulted && matches!(s, Some(NFS4ERR_IO | NFS4ERR_NOSPC)) {
        // Failed before the conflict check (the backend lookup or stat it needs).
        return Ok(false);
    }
    let d = &sim.model.delegs[conflicts[0]];
    Err(Violation::new(
        K::DelegationConflict,
        format!(
            "{what} ({access:?}) by client {ci} answered {s:?} while client {} holds a conflicting {} delegation ({:?}): not DELAY",
            d.holder.0,
            if d.write { "write" } else { "read" },
            d.phase
        ),
    ))
}

/// A DELAY'd request must not have changed anything: none of its effect tokens may
/// have been applied.
fn delayed_changed_nothing(sim: &Sim, intent: &Intent) -> Result<(), Violation> {
    for t in intent.tokens() {
        if sim.ledger.applied(t) > 0 {
            return Err(Violation::new(
                K::DelegationConflict,
                format!("{intent:?} was answered DELAY but its effect was applied"),
            ));
        }
    }
    Ok(())
}

/// The delegation an OPEN (op 2 of `res`) by client `ci` granted on `file`, if any:
/// only to a client whose back channel works, never over another live client's open
/// or delegation it conflicts with; entered in the model.
fn note_grant(
    sim: &mut Sim,
    ci: usize,
    file: &Fh,
    access: u32,
    res: &COMPOUND4res,
) -> Result<(), Violation> {
    let Some(nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o))) = res.resarray.get(2) else {
        return Ok(());
    };
    let granted = crate::wire::granted_delegation(&o.delegation);
    if !sim.grants_uncertain {
        let want = predict_grant(sim, ci, file, access);
        sim.stats.grants_predicted += 1;
        if want != granted.as_ref().map(|g| g.1) {
            let name = |g: Option<bool>| match g {
                None => "none",
                Some(false) => "read",
                Some(true) => "write",
            };
            return Err(Violation::new(
                K::DelegationConflict,
                format!(
                    "OPEN (access {access}) by client {ci}: delegation {}, the grant policy says {}",
                    name(granted.as_ref().map(|g| g.1)),
                    name(want)
                ),
            ));
        }
    }
    let Some((sid, write)) = granted else {
        return Ok(());
    };
    let kind = if write { "write" } else { "read" };
    let path = sim.clients[ci].path;
    if path != crate::client::CbPath::Up {
        return Err(Violation::new(
            K::DelegationConflict,
            format!(
                "client {ci} was granted a {kind} delegation while its back channel is {path:?}"
            ),
        ));
    }
    let me = (ci, sim.clients[ci].incarnation);
    if let Some(other) = sim.model.opens.iter().find(|o| {
        o.file == *file
            && (o.owner.0, o.owner.1) != me
            && (write || o.access & OPEN4_SHARE_ACCESS_WRITE != 0)
    }) {
        return Err(Violation::new(
            K::DelegationConflict,
            format!("client {ci} was granted a {kind} delegation while {:?} has the file open with access {}", other.owner, other.access),
        ));
    }
    if let Some(d) = sim
        .model
        .delegs
        .iter()
        .find(|d| d.file == *file && d.live() && (d.holder == me || write || d.write))
    {
        return Err(Violation::new(
            K::DelegationConflict,
            format!(
                "client {ci} was granted a {kind} delegation while client {} holds a {} delegation of the file (one per client; a write delegation alone)",
                d.holder.0,
                if d.write { "write" } else { "read" }
            ),
        ));
    }
    if sim.model.deleg(&sid).is_some() {
        return Err(Violation::new(
            K::DelegationConflict,
            format!("a new delegation reuses the stateid of another: {sid:?}"),
        ));
    }
    sim.stats.delegations_granted += 1;
    if write {
        sim.stats.write_delegations += 1;
    }
    sim.model.delegs.push(DelegRec {
        file: file.clone(),
        holder: me,
        write,
        sid,
        phase: DelegPhase::Active,
    });
    Ok(())
}

/// The delegation the grant policy (ADR 0017) gives client `ci`'s OPEN of `file`
/// with share `access` (its own open already counted): `None`, or `Some(write)`.
/// None without a working back channel, with a delegation of its own on the file,
/// while a recall of the file is under way or within the cool-down after a conflict,
/// while another client holds locks on it; a write delegation for write access when no
/// other client has it open or delegated; else a read delegation unless another client
/// writes it or holds a write delegation.
fn predict_grant(sim: &Sim, ci: usize, file: &Fh, access: u32) -> Option<bool> {
    if sim.clients[ci].path != crate::client::CbPath::Up {
        return None;
    }
    let me = (ci, sim.clients[ci].incarnation);
    let m = &sim.model;
    let live: Vec<&DelegRec> = m
        .delegs
        .iter()
        .filter(|d| d.file == *file && d.live())
        .collect();
    if live.iter().any(|d| d.holder == me) {
        return None;
    }
    let recalling = live
        .iter()
        .any(|d| matches!(d.phase, DelegPhase::Recalling { .. }));
    let cooling = m
        .last_conflict
        .get(&(file.clone(), me))
        .is_some_and(|t| sim.call_now.saturating_sub(*t) < COOL_DOWN);
    let others_locks = m
        .locks
        .iter()
        .any(|l| l.file == *file && (l.owner.0, l.owner.1) != me);
    if recalling || cooling || others_locks {
        return None;
    }
    let others = || {
        m.opens
            .iter()
            .filter(|o| o.file == *file && (o.owner.0, o.owner.1) != me)
    };
    let others_deleg_write = live.iter().any(|d| d.write);
    if access & OPEN4_SHARE_ACCESS_WRITE != 0 && others().next().is_none() && live.is_empty() {
        return Some(true);
    }
    if others().any(|o| o.access & OPEN4_SHARE_ACCESS_WRITE != 0) || others_deleg_write {
        return None;
    }
    Some(false)
}

/// How long after a conflict a file gets no delegation (txnfs' policy: 5 s).
const COOL_DOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// What the server must answer for I/O (a write when `write`) with client `ci`'s
/// delegation stateid `sid`: a live delegation allows reads, and writes if it is a
/// write delegation (else OPENMODE); a revoked one is DELEG_REVOKED; a returned one
/// is no longer known (BAD_STATEID).
fn deleg_io_status(sim: &Sim, ci: usize, sid: &stateid4, write: bool) -> nfsstat4 {
    let me = (ci, sim.clients[ci].incarnation);
    match sim.model.deleg(sid).map(|i| &sim.model.delegs[i]) {
        Some(d) if d.holder == me && d.phase == DelegPhase::Revoked => NFS4ERR_DELEG_REVOKED,
        Some(d) if d.holder == me && write && !d.write => NFS4ERR_OPENMODE,
        Some(d) if d.holder == me => NFS4_OK,
        _ => NFS4ERR_BAD_STATEID,
    }
}

/// What the server must answer for `client`'s delegation stateid `sid` (DELEGRETURN,
/// TEST_STATEID; FREE_STATEID with `free`).
fn deleg_status(sim: &Sim, ci: usize, sid: &stateid4, free: bool) -> nfsstat4 {
    let me = (ci, sim.clients[ci].incarnation);
    match sim.model.deleg(sid).map(|i| &sim.model.delegs[i]) {
        Some(d) if d.holder == me && d.phase == DelegPhase::Revoked => {
            if free {
                NFS4_OK
            } else {
                NFS4ERR_DELEG_REVOKED
            }
        }
        Some(d) if d.holder == me => {
            if free {
                NFS4ERR_LOCKS_HELD
            } else {
                NFS4_OK
            }
        }
        _ => NFS4ERR_BAD_STATEID,
    }
}

fn getfh(res: &COMPOUND4res, i: usize) -> Option<Fh> {
    match res.resarray.get(i) {
        Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(g))) => Some(g.object.clone()),
        _ => None,
    }
}

fn lock_owner(sim: &Sim, ci: usize, k: usize) -> LockOwner {
    (ci, sim.clients[ci].incarnation, k)
}

/// The oracle's judgement of an executed compound (seen even if the client loses it).
pub fn judge(
    sim: &mut Sim,
    ci: usize,
    intent: &Intent,
    res: &COMPOUND4res,
    faulted: bool,
) -> Result<(), Violation> {
    let inc = sim.clients[ci].incarnation;
    let oo = (ci, inc, sim.clients[ci].open_owner());
    // Every request but RENEW first sets its object: PUTFH (RENAME: PUTFH, SAVEFH,
    // PUTFH), which must succeed.
    let (setup, what) = match intent {
        Intent::Renew | Intent::TestStateids { .. } | Intent::FreeStateid { .. } => (0, ""),
        Intent::Rename { .. } => (3, "PUTFH/SAVEFH"),
        _ => (1, "PUTFH"),
    };
    for i in 1..=setup {
        expect(what, st(res, i), &[NFS4_OK], faulted)?;
    }
    match intent {
        Intent::Renew => Ok(()),
        Intent::OpenCreate { dir, name } => {
            let done = applied_once(
                sim,
                "OPEN create",
                res,
                faulted,
                (crate::fault::TOKEN_CREATE, name),
                |n| format!("OPEN created {name:?} {n} times"),
                // Created, then a later step failed: the name exists unseen.
                |sim| sim.model.uncertain_dirs.push(dir.clone()),
            )?;
            if !done {
                return Ok(());
            }
            let o = ok_result!(res, 2, OP_OPEN, OPEN4res, "OPEN");
            let new = (dir, name, false);
            let fh = enter_created(sim, res, &o.cinfo, new, "OPEN create", "OPEN")?;
            note_grant(sim, ci, &fh, OPEN4_SHARE_ACCESS_BOTH, res)?;
            sim.model
                .add_open(&fh, oo, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE);
            Ok(())
        }
        Intent::Open { file } => {
            let both = Access::Open {
                access: OPEN4_SHARE_ACCESS_BOTH,
                deny: OPEN4_SHARE_DENY_NONE,
            };
            if delegation_rule(sim, ci, file, both, res, 2, "OPEN", faulted)? {
                return Ok(());
            }
            let conflict = sim
                .model
                .share_conflict(file, &oo, OPEN4_SHARE_ACCESS_BOTH, 0);
            let s = st(res, 2);
            judge_share(
                sim,
                s,
                conflict,
                "OPEN granted against a share reservation",
                "OPEN denied by a share reservation no live open holds",
            )?;
            if expect("OPEN", s, &[NFS4_OK, NFS4ERR_SHARE_DENIED], faulted)? {
                if getfh(res, 3).as_ref() != Some(file) {
                    return Err(Violation::new(
                        K::UnexpectedStatus,
                        "OPEN by name found another file handle",
                    ));
                }
                note_grant(sim, ci, file, OPEN4_SHARE_ACCESS_BOTH, res)?;
                sim.model.add_open(file, oo, OPEN4_SHARE_ACCESS_BOTH, 0);
            }
            Ok(())
        }
        Intent::DenyProbe { file, deny } => {
            let read = Access::Open {
                access: OPEN4_SHARE_ACCESS_READ,
                deny: *deny,
            };
            if delegation_rule(sim, ci, file, read, res, 2, "OPEN deny", faulted)? {
                return Ok(());
            }
            let probe = (ci, inc, sim.clients[ci].probe_owner());
            let conflict = sim
                .model
                .share_conflict(file, &probe, OPEN4_SHARE_ACCESS_READ, *deny);
            let s = st(res, 2);
            judge_share(
                sim,
                s,
                conflict,
                "probe OPEN granted against another owner's open or deny",
                "probe OPEN refused though no live open conflicts with it",
            )?;
            if expect("OPEN deny", s, &[NFS4_OK, NFS4ERR_SHARE_DENIED], faulted)? {
                note_grant(sim, ci, file, OPEN4_SHARE_ACCESS_READ, res)?;
                // The probe owner's open (perhaps upgraded from one an earlier probe
                // could not close) is gone only if this CLOSE worked.
                sim.model
                    .add_open(file, probe.clone(), OPEN4_SHARE_ACCESS_READ, *deny);
                closed(sim, "CLOSE probe", res, 3, (file, &probe), faulted)?;
            }
            Ok(())
        }
        Intent::Write {
            file,
            offset,
            data,
            commit,
            deleg,
        } => {
            if delegation_rule(sim, ci, file, Access::Modify, res, 2, "WRITE", faulted)? {
                return delayed_changed_nothing(sim, intent);
            }
            if let Some(sid) = deleg {
                let want = deleg_io_status(sim, ci, sid, true);
                if want != NFS4_OK {
                    expect(
                        "WRITE with a delegation stateid",
                        st(res, 2),
                        &[want],
                        faulted,
                    )?;
                    return delayed_changed_nothing(sim, intent);
                }
                sim.stats.deleg_io += 1;
            }
            let done = applied_once(
                sim,
                "WRITE",
                res,
                faulted,
                (crate::fault::TOKEN_WRITE, data),
                |n| format!("an acknowledged WRITE was applied {n} times"),
                |sim| sim.model.write_unknown(file, *offset, data.len()),
            )?;
            if !done {
                return Ok(());
            }
            let w = ok_result!(res, 2, OP_WRITE, WRITE4res, "WRITE");
            if w.count as usize != data.len() {
                return Err(Violation::new(K::UnexpectedStatus, "short WRITE"));
            }
            check_verf(sim, w.writeverf)?;
            let stable = w.committed != stable_how4::UNSTABLE4;
            sim.model.write(file, *offset, data, stable);
            if *commit && expect("COMMIT", st(res, 3), &[NFS4_OK], faulted)? {
                let c = ok_result!(res, 3, OP_COMMIT, COMMIT4res, "COMMIT");
                check_verf(sim, c.writeverf)?;
                if c.writeverf == w.writeverf {
                    sim.model.commit(file);
                }
            }
            Ok(())
        }
        Intent::Read {
            file,
            offset,
            count,
            anon,
            deleg,
        } => {
            if delegation_rule(sim, ci, file, Access::Read, res, 2, "READ", faulted)? {
                return Ok(());
            }
            if let Some(sid) = deleg {
                let want = deleg_io_status(sim, ci, sid, false);
                if want != NFS4_OK {
                    expect(
                        "READ with a delegation stateid",
                        st(res, 2),
                        &[want],
                        faulted,
                    )?;
                    return Ok(());
                }
                sim.stats.deleg_io += 1;
            }
            // I/O without an open (the anonymous stateid) is refused while another
            // owner's share reservation denies reading (RFC 8881 §9.7).
            let nobody = (usize::MAX, 0, bytes::Bytes::new());
            let denied = *anon
                && sim
                    .model
                    .share_conflict(file, &nobody, OPEN4_SHARE_ACCESS_READ, 0);
            let allowed = if denied { NFS4ERR_LOCKED } else { NFS4_OK };
            if expect("READ", st(res, 2), &[allowed], faulted)? {
                let r = ok_result!(res, 2, OP_READ, READ4res, "READ");
                sim.stats.bytes_verified += sim
                    .model
                    .check_read(file, *offset, *count, &r.data, r.eof)
                    .map_err(|e| Violation::new(K::DataLost, e))?;
            }
            Ok(())
        }
        Intent::Close { file } => closed(sim, "CLOSE", res, 2, (file, &oo), faulted),
        Intent::Lock {
            file,
            owner,
            offset,
            length,
            write,
        }
        | Intent::Lockt {
            file,
            owner,
            offset,
            length,
            write,
        } => {
            // LOCKT asks the same question as LOCK but takes nothing.
            let test = matches!(intent, Intent::Lockt { .. });
            let op = if test { "LOCKT" } else { "LOCK" };
            let me = lock_owner(sim, ci, *owner);
            let end = range_end(*offset, *length);
            let conflict = sim
                .model
                .lock_conflict(file, Some(&me), *offset, end, *write)
                .cloned();
            let s = st(res, 2);
            let asked = || format!("{op} {offset}+{length} write={write} by {me:?}");
            judge_conflict(
                s,
                NFS4ERR_DENIED,
                conflict,
                |c| match test {
                    true => format!("{} sees no lock, the model has {c:?}", asked()),
                    false => format!("{} granted over {c:?}", asked()),
                },
                || format!("{} denied, no live owner holds a conflicting lock", asked()),
                &mut sim.stats.locks_denied,
            )?;
            if expect(op, s, &[NFS4_OK, NFS4ERR_DENIED], faulted)? && !test {
                sim.stats.locks_granted += 1;
                sim.model.locks.push(crate::model::LockRec {
                    file: file.clone(),
                    owner: me,
                    start: *offset,
                    end,
                    write: *write,
                });
            }
            Ok(())
        }
        Intent::Locku {
            file,
            owner,
            offset,
            length,
            ..
        } => {
            if expect("LOCKU", st(res, 2), &[NFS4_OK], faulted)? {
                let me = lock_owner(sim, ci, *owner);
                let end = range_end(*offset, *length);
                sim.model.locks.retain(|l| {
                    !(l.file == *file && l.owner == me && l.start == *offset && l.end == end)
                });
            }
            Ok(())
        }
        Intent::Mkdir { dir, name } => {
            if !expect("CREATE dir", st(res, 2), &[NFS4_OK], faulted)? {
                return Ok(());
            }
            let c = ok_result!(res, 2, OP_CREATE, CREATE4res, "CREATE");
            enter_created(sim, res, &c.cinfo, (dir, name, true), "CREATE", "CREATE")?;
            Ok(())
        }
        Intent::Remove { obj } => {
            let Some(o) = sim.model.obj(obj).cloned() else {
                return Ok(());
            };
            if delegation_rule(sim, ci, obj, Access::Namespace, res, 2, "REMOVE", faulted)? {
                return Ok(());
            }
            let busy = o.is_dir && sim.model.children(obj) > 0;
            let unsure = o.is_dir && sim.model.uncertain_dirs.contains(obj);
            let allowed: &[nfsstat4] = if busy {
                &[NFS4ERR_NOTEMPTY]
            } else if unsure {
                &[NFS4_OK, NFS4ERR_NOTEMPTY]
            } else {
                &[NFS4_OK]
            };
            if expect("REMOVE", st(res, 2), allowed, faulted)? {
                let r = ok_result!(res, 2, OP_REMOVE, REMOVE4res, "REMOVE");
                cinfo(sim, &o.parent, &r.cinfo, "REMOVE")?;
                if let Some(m) = sim.model.obj_mut(obj) {
                    m.alive = false;
                }
            }
            Ok(())
        }
        Intent::Rename { obj, to_dir, name } => {
            let Some(o) = sim.model.obj(obj).cloned() else {
                return Ok(());
            };
            if delegation_rule(sim, ci, obj, Access::Namespace, res, 4, "RENAME", faulted)? {
                return delayed_changed_nothing(sim, intent);
            }
            if !expect("RENAME", st(res, 4), &[NFS4_OK], faulted)? {
                return Ok(());
            }
            let r = ok_result!(res, 4, OP_RENAME, RENAME4res, "RENAME");
            cinfo(sim, &o.parent, &r.source_cinfo, "RENAME source")?;
            cinfo(sim, to_dir, &r.target_cinfo, "RENAME target")?;
            if let Some(m) = sim.model.obj_mut(obj) {
                m.parent = to_dir.clone();
                m.name = name.clone();
            }
            Ok(())
        }
        Intent::Truncate { file, size } => {
            if delegation_rule(
                sim,
                ci,
                file,
                Access::Modify,
                res,
                2,
                "SETATTR size",
                faulted,
            )? {
                return Ok(());
            }
            match expect("SETATTR size", st(res, 2), &[NFS4_OK], faulted)? {
                true => sim.model.truncate(file, *size, true),
                false => sim.model.truncate(file, *size, false),
            }
            Ok(())
        }
        Intent::StaleWrite {
            file,
            data,
            after_restart,
        } => {
            if delegation_rule(
                sim,
                ci,
                file,
                Access::Modify,
                res,
                2,
                "stale WRITE",
                faulted,
            )? {
                return delayed_changed_nothing(sim, intent);
            }
            stale_write(sim, data, *after_restart, res, faulted)
        }
        Intent::DelegReturn { sid, .. } => {
            let want = deleg_status(sim, ci, sid, false);
            let s = st(res, 2);
            if expect("DELEGRETURN", s, &[want], faulted)? {
                sim.stats.deleg_returns += 1;
                if let Some(i) = sim.model.deleg(sid) {
                    sim.model.delegs.remove(i);
                }
            } else if s == Some(NFS4ERR_DELEG_REVOKED) {
                sim.stats.deleg_revoked_seen += 1;
            }
            Ok(())
        }
        Intent::TestStateids { sids } => {
            if !expect("TEST_STATEID", st(res, 1), &[NFS4_OK], faulted)? {
                return Ok(());
            }
            let t = ok_result!(res, 1, OP_TEST_STATEID, TEST_STATEID4res, "TEST_STATEID");
            if t.tsr_status_codes.len() != sids.len() {
                return Err(Violation::new(
                    K::UnexpectedStatus,
                    "TEST_STATEID answered a different number of codes",
                ));
            }
            for (sid, got) in sids.iter().zip(&t.tsr_status_codes) {
                let want = deleg_status(sim, ci, sid, false);
                if *got != want {
                    return Err(Violation::new(
                        K::DelegationConflict,
                        format!(
                            "TEST_STATEID of delegation {sid:?}: {got:?}, the model says {want:?}"
                        ),
                    ));
                }
            }
            Ok(())
        }
        Intent::FreeStateid { sid } => {
            let want = deleg_status(sim, ci, sid, true);
            if expect("FREE_STATEID", st(res, 1), &[want], faulted)? {
                sim.stats.deleg_freed += 1;
                if let Some(i) = sim.model.deleg(sid) {
                    sim.model.delegs.remove(i);
                }
            }
            Ok(())
        }
        Intent::Getattr { obj } => {
            if delegation_rule(sim, ci, obj, Access::Read, res, 2, "GETATTR", faulted)? {
                return Ok(());
            }
            if !expect("GETATTR", st(res, 2), &[NFS4_OK], faulted)? {
                return Ok(());
            }
            let g = ok_result!(res, 2, OP_GETATTR, GETATTR4res, "GETATTR");
            let (change, size) = decode_change_size(&g.obj_attributes).ok_or_else(|| {
                Violation::new(K::UnexpectedStatus, "GETATTR lacks change or size")
            })?;
            match sim.model.obj(obj).cloned() {
                Some(o) if !o.is_dir => {
                    if o.size_known && size != o.data.len() as u64 {
                        return Err(Violation::new(
                            K::DataLost,
                            format!("GETATTR size {size}, the model's size {}", o.data.len()),
                        ));
                    }
                    Ok(())
                }
                // A directory, or the root (which the model does not list): its change
                // counter must not go back either.
                dir => cinfo(
                    sim,
                    obj,
                    &change_info4 {
                        atomic: false,
                        before: change,
                        after: change,
                    },
                    if dir.is_some() {
                        "GETATTR dir"
                    } else {
                        "GETATTR root"
                    },
                ),
            }
        }
    }
}

/// Invariant 5 for stateids: a WRITE with a stateid of a session the server dropped is
/// refused and changes nothing.
fn stale_write(
    sim: &mut Sim,
    data: &bytes::Bytes,
    after_restart: bool,
    res: &COMPOUND4res,
    faulted: bool,
) -> Result<(), Violation> {
    let s = st(res, 2);
    let applied = sim
        .ledger
        .applied(crate::fault::token(crate::fault::TOKEN_WRITE, data));
    if s == Some(NFS4_OK) || applied > 0 {
        return Err(Violation::new(
            K::StaleStateSurvived,
            format!(
                "a WRITE with an open stateid from before the {} was accepted",
                if after_restart {
                    "restart"
                } else {
                    "lease expiry"
                }
            ),
        ));
    }
    // RFC 8881 §8.2: a stateid of an earlier server instance is STALE; one the server
    // released with an expired lease is BAD (or EXPIRED if it remembers it).
    let allowed: &[nfsstat4] = if after_restart {
        &[NFS4ERR_STALE_STATEID]
    } else {
        &[NFS4ERR_BAD_STATEID, NFS4ERR_EXPIRED]
    };
    sim.stats.stale_refused += 1;
    expect("stale WRITE", s, allowed, faulted).map(|_| ())
}

/// Within one server instance the write verifier never changes.
fn check_verf(sim: &mut Sim, v: [u8; 8]) -> Result<(), Violation> {
    match sim.model.boot_verf {
        None => {
            sim.model.boot_verf = Some(v);
            Ok(())
        }
        Some(b) if b == v => Ok(()),
        Some(b) => Err(Violation::new(
            K::DataLost,
            format!("write verifier changed from {b:?} to {v:?} without a restart"),
        )),
    }
}

/// The client learns what a reply it received tells it.
pub fn absorb(c: &mut SimClient, intent: &Intent, res: &COMPOUND4res) {
    match intent {
        Intent::OpenCreate { .. } | Intent::Open { .. } => {
            if let (Some(nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o))), Some(fh)) =
                (res.resarray.get(2), getfh(res, 3))
            {
                if let Some(d) = crate::wire::granted_delegation(&o.delegation) {
                    c.delegs.insert(fh.clone(), d);
                }
                c.opens.insert(fh, o.stateid.clone());
            }
        }
        Intent::DenyProbe { file, .. } => {
            if let Some(nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o))) = res.resarray.get(2) {
                if let Some(d) = crate::wire::granted_delegation(&o.delegation) {
                    c.delegs.insert(file.clone(), d);
                }
            }
        }
        Intent::DelegReturn { file, sid } => {
            let s = st(res, 2);
            if matches!(
                s,
                Some(NFS4_OK | NFS4ERR_BAD_STATEID | NFS4ERR_DELEG_REVOKED)
            ) && c.delegs.get(file).is_some_and(|d| d.0.other == sid.other)
            {
                c.delegs.remove(file);
            }
            if s == Some(NFS4ERR_DELEG_REVOKED) && !c.revoked.contains(sid) {
                c.revoked.push(sid.clone());
            }
        }
        Intent::TestStateids { sids } => {
            if let Some(nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(t))) =
                res.resarray.get(1)
            {
                for (sid, code) in sids.iter().zip(&t.tsr_status_codes) {
                    if matches!(code, NFS4ERR_DELEG_REVOKED | NFS4ERR_BAD_STATEID) {
                        c.delegs.retain(|_, d| d.0.other != sid.other);
                    }
                    if *code == NFS4ERR_DELEG_REVOKED && !c.revoked.contains(sid) {
                        c.revoked.push(sid.clone());
                    }
                }
                c.saw_revoked_flag = false;
            }
        }
        Intent::FreeStateid { sid } => {
            if matches!(st(res, 1), Some(NFS4_OK | NFS4ERR_BAD_STATEID)) {
                c.revoked.retain(|r| r.other != sid.other);
            }
        }
        Intent::Close { file } if st(res, 2) == Some(NFS4_OK) => {
            c.opens.remove(file);
            c.locks.retain(|(f, _), _| f != file);
        }
        Intent::Lock {
            file,
            owner,
            offset,
            length,
            write,
        } => {
            if let Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(l))) = res.resarray.get(2) {
                let h = c.locks.entry((file.clone(), *owner)).or_default();
                h.sid = Some(l.lock_stateid.clone());
                h.ranges.push((*offset, *length, *write));
            }
        }
        Intent::Locku {
            file,
            owner,
            offset,
            length,
            ..
        } => {
            if let Some(nfs_resop4::OP_LOCKU(LOCKU4res::NFS4_OK(sid))) = res.resarray.get(2) {
                if let Some(h) = c.locks.get_mut(&(file.clone(), *owner)) {
                    h.sid = Some(sid.clone());
                    h.ranges.retain(|r| !(r.0 == *offset && r.1 == *length));
                }
            }
        }
        _ => {}
    }
}
