//! Judging replies: every op's status against what the model allows, then the model
//! and the client's view updated from what was executed.
//!
//! This file holds the judge of each request (opens, I/O, locks, namespace changes)
//! and what a client learns from a reply; `rules` the shared checks (statuses,
//! conflicts, effects applied once); `deleg` the delegation rules (DELAY and recalls
//! while a conflicting delegation is held, the grant policy, delegation stateids).

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

mod deleg;
mod rules;

use deleg::*;
use rules::*;

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
