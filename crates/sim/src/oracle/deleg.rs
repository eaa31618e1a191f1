//! The delegation rules: while another client holds a conflicting delegation a request
//! is DELAY'd (changing nothing) and the delegation recalled; the grant policy an OPEN's
//! delegation must follow; what the server must answer for delegation stateids.

use super::*;

/// The delegation rule for op `i` (`what`) of a request of client `ci` that does
/// `access` to `file`: while another client holds a live delegation it conflicts with,
/// the server must answer NFS4ERR_DELAY (it cannot hold the request without a
/// runtime) and ask for a CB_RECALL of each such delegation not yet recalled; it must
/// never answer DELAY otherwise. `Ok(true)`: the op was DELAY'd (and the caller checks
/// that it changed nothing).
#[allow(clippy::too_many_arguments)]
pub(super) fn delegation_rule(
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
    let mut conflicts = if regular {
        sim.model.deleg_conflicts(file, me, access)
    } else {
        Vec::new()
    };
    // A holder whose back channel is down cannot answer a recall: the server revokes
    // its delegation at once and the request goes ahead (ADR 0017). The holder learns
    // of it from SEQUENCE (RECALLABLE_STATE_REVOKED).
    // A request that failed on an injected fault may have failed before the check or
    // after it: the server's state says which.
    let s = st(res, i);
    let uncertain = faulted && matches!(s, Some(NFS4ERR_IO | NFS4ERR_NOSPC));
    let now = sim.call_now;
    let server = sim.server.as_ref();
    conflicts.retain(|&k| {
        let d = &sim.model.delegs[k];
        let holder = d.holder;
        let c = &sim.clients[holder.0];
        let mut unreachable =
            c.incarnation == holder.1 && !c.expect_dead && c.path == crate::client::CbPath::Down;
        if unreachable && uncertain {
            unreachable = match (server, c.session.as_ref()) {
                (Some(srv), Some(sess)) => srv.deleg_revoked(sess.clientid, &d.sid),
                _ => false,
            };
        }
        if unreachable {
            sim.model.delegs[k].phase = DelegPhase::Revoked;
            sim.model.last_conflict.insert((file.clone(), holder), now);
            sim.stats.deleg_revoked += 1;
            sim.stats.deleg_revoked_unreachable += 1;
        }
        !unreachable
    });
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
pub(super) fn delayed_changed_nothing(sim: &Sim, intent: &Intent) -> Result<(), Violation> {
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
pub(super) fn note_grant(
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
pub(super) fn predict_grant(sim: &Sim, ci: usize, file: &Fh, access: u32) -> Option<bool> {
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
pub(super) const COOL_DOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// What the server must answer for I/O (a write when `write`) with client `ci`'s
/// delegation stateid `sid`: a live delegation allows reads, and writes if it is a
/// write delegation (else OPENMODE); a revoked one is DELEG_REVOKED; a returned one
/// is no longer known (BAD_STATEID).
pub(super) fn deleg_io_status(sim: &Sim, ci: usize, sid: &stateid4, write: bool) -> nfsstat4 {
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
pub(super) fn deleg_status(sim: &Sim, ci: usize, sid: &stateid4, free: bool) -> nfsstat4 {
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
