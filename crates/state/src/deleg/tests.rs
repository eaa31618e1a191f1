use super::*;

const C1: ClientId = 1;
const C2: ClientId = 2;
const F: FileId = 7;

fn req(access: u32) -> GrantRequest {
    GrantRequest {
        access,
        want: Want::NoPreference,
        callback_up: true,
        in_grace: false,
        others: crate::table::OthersUse::default(),
        fh: Bytes::from_static(b"fh"),
        change: 10,
        timestamps: false,
    }
}

#[test]
fn grant_recall_return_counts_latency() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let g = t.grant(t0, C1, F, req(1)).unwrap();
    assert_eq!(g.kind, DelegType::Read);
    assert!(DelegTable::is_deleg(&g.stateid));
    // A reader of another client does not conflict with a read delegation.
    let c = t.conflicts(t0, Some(C2), F, Access::Open { access: 1, deny: 0 }, |_| {
        false
    });
    assert!(c.waiting.is_empty() && c.recalls.is_empty());
    // A writer does: one recall, then waiting without a second recall.
    let c = t.conflicts(t0, Some(C2), F, Access::Open { access: 2, deny: 0 }, |_| {
        false
    });
    assert_eq!(c.recalls.len(), 1);
    assert_eq!(c.recalls[0].stateid, g.stateid);
    let again = t.conflicts(t0, Some(C2), F, Access::Modify, |_| false);
    assert!(again.recalls.is_empty());
    assert_eq!(again.waiting, c.waiting);
    // The holder's own accesses never conflict.
    assert!(t
        .conflicts(t0, Some(C1), F, Access::Namespace, |_| false)
        .waiting
        .is_empty());
    assert!(t.any_live(&c.waiting));
    let later = t0 + Duration::from_millis(30);
    assert_eq!(
        t.delegreturn(later, C2, &g.stateid, F),
        Err(StateError::BadStateid)
    );
    t.delegreturn(later, C1, &g.stateid, F).unwrap();
    assert!(!t.any_live(&c.waiting));
    let s = t.stats();
    assert_eq!((s.granted, s.recalled, s.returned, s.revoked), (1, 1, 1, 0));
    assert_eq!(s.recall_latency_us_sum, 30_000);
    assert_eq!(s.outstanding, 0);
    assert_eq!(t.client_stats(C1).returned, 1);
    // Cool-down: the file just saw a conflict.
    assert_eq!(t.grant(later, C1, F, req(1)), Err(NoDeleg::Contention));
    assert!(t.grant(later + policy::COOL_DOWN, C1, F, req(1)).is_ok());
}

#[test]
fn write_delegation_is_exclusive_and_revocation_is_reported() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let g = t.grant(t0, C1, F, req(3)).unwrap();
    assert_eq!(g.kind, DelegType::Write);
    assert_eq!(t.grant(t0, C2, F, req(1)), Err(NoDeleg::Contention));
    assert_eq!(t.write_holder(Some(C2), F).map(|h| h.client), Some(C1));
    assert_eq!(t.write_holder(Some(C1), F), None);
    let c = t.conflicts(t0, Some(C2), F, Access::Read, |_| false);
    assert_eq!(c.recalls.len(), 1);
    // Not returned within a lease: revoked, reported, freed by FREE_STATEID only.
    assert!(t.revoke_overdue(t0, Duration::from_secs(60)).is_empty());
    let r = t.revoke_overdue(t0 + Duration::from_secs(60), Duration::from_secs(60));
    assert_eq!(r, vec![(C1, g.stateid, F)]);
    assert!(!t.any_live(&c.waiting));
    assert!(t.has_revoked(C1));
    assert_eq!(t.check(C1, &g.stateid, F), Err(StateError::DelegRevoked));
    assert_eq!(t.test(C1, &g.stateid), Err(StateError::DelegRevoked));
    assert_eq!(
        t.delegreturn(t0, C1, &g.stateid, F),
        Err(StateError::DelegRevoked)
    );
    t.free(C1, &g.stateid).unwrap();
    assert!(!t.has_revoked(C1));
    assert_eq!(t.test(C1, &g.stateid), Err(StateError::BadStateid));
    let s = t.stats();
    assert_eq!(
        (s.revoked, s.revoked_unreachable, s.revoked_timeout),
        (1, 0, 1)
    );
}

#[test]
fn expired_holder_is_revoked_without_a_recall() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let g = t.grant(t0, C1, F, req(1)).unwrap();
    let c = t.conflicts(t0, None, F, Access::Namespace, |c| c == C1);
    assert!(c.recalls.is_empty() && c.waiting.is_empty());
    assert_eq!(c.revoked, vec![(C1, g.stateid, F)]);
    let s = t.stats();
    assert_eq!(
        (s.revoked, s.revoked_unreachable, s.revoked_timeout),
        (1, 1, 0)
    );
    assert_eq!(t.check(C1, &g.stateid, F), Err(StateError::DelegRevoked));
    // A live delegation cannot be freed; a stale epoch is stale.
    let g2 = t.grant(t0 + policy::COOL_DOWN, C2, F, req(1)).unwrap();
    assert_eq!(t.free(C2, &g2.stateid), Err(StateError::LocksHeld));
    let mut stale = g2.stateid;
    stale.other[0] ^= 1;
    assert_eq!(t.test(C2, &stale), Err(StateError::StaleStateid));
    assert_eq!(t.expire_client(C2), vec![F]);
    assert!(t.is_empty());
}

#[test]
fn the_limit_and_the_back_channel_gate_grants() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(
        5,
        DelegLimits {
            enabled: true,
            max_delegations: 1,
        },
    );
    let mut r = req(1);
    r.callback_up = false;
    assert_eq!(t.grant(t0, C1, F, r), Err(NoDeleg::Resource));
    t.grant(t0, C1, F, req(1)).unwrap();
    assert_eq!(t.grant(t0, C2, F + 1, req(1)), Err(NoDeleg::Resource));
}

#[test]
fn has_conflict_sees_other_clients_live_delegations_only() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let g = t.grant(t0, C1, F, req(1)).unwrap();
    assert!(t.has_conflict(C2, F, Access::Open { access: 2, deny: 0 }));
    assert!(!t.has_conflict(C2, F, Access::Open { access: 1, deny: 0 }));
    assert!(!t.has_conflict(C1, F, Access::Open { access: 3, deny: 0 }));
    t.delegreturn(t0, C1, &g.stateid, F).unwrap();
    assert!(!t.has_conflict(C2, F, Access::Open { access: 2, deny: 0 }));
}

mod directories {
    use super::*;
    use crate::deleg::dir::{notify_type as nt, MAX_CHILDREN, MAX_PENDING};

    const D: FileId = 100;
    const X: FileId = 200;

    fn params(types: u32) -> DirParams {
        DirParams {
            types,
            child_attrs: vec![1 << 4],
            dir_attrs: vec![],
            delay: Duration::from_secs(1),
        }
    }

    fn grant(t: &mut DelegTable, now: Instant, client: ClientId, types: u32) -> DirGranted {
        t.grant_dir(
            now,
            client,
            D,
            params(types),
            true,
            false,
            Bytes::from_static(b"dfh"),
        )
        .unwrap()
    }

    fn notice(kind: u32, body: &'static [u8]) -> Notice {
        Notice {
            kind,
            body: Bytes::from_static(body),
            coalesce: None,
        }
    }

    const ENTRIES: u32 = (1 << nt::ADD_ENTRY) | (1 << nt::REMOVE_ENTRY) | (1 << nt::RENAME_ENTRY);

    #[test]
    fn grant_policy_and_the_stateid() {
        let t0 = Instant::now();
        let mut t = DelegTable::new(5, DelegLimits::default());
        let no_cb = t.grant_dir(t0, C1, D, params(ENTRIES), false, false, Bytes::new());
        assert_eq!(no_cb, Err(NoDeleg::Resource));
        let in_grace = t.grant_dir(t0, C1, D, params(ENTRIES), true, true, Bytes::new());
        assert_eq!(in_grace, Err(NoDeleg::Resource));
        assert!(!t.has_dir_delegations());
        // Asked for everything: the cookie verifier never changes, so not that.
        let g = grant(&mut t, t0, C1, 0x3f);
        assert!(t.has_dir_delegations());
        assert_eq!(g.types, 0x1f);
        // The delay is bounded.
        assert_eq!(
            t.dir_state(C1, &g.stateid).unwrap().delay,
            dir::MAX_BATCH_DELAY
        );
        assert!(DelegTable::is_deleg(&g.stateid));
        // One per client and directory; another client's is no conflict.
        assert_eq!(
            t.grant_dir(t0, C1, D, params(0), true, false, Bytes::new()),
            Err(NoDeleg::Contention)
        );
        let g2 = grant(&mut t, t0, C2, ENTRIES);
        // Not a stateid for I/O or claims; fine for TEST_STATEID; DELEGRETURN on the
        // directory.
        assert_eq!(t.check(C1, &g.stateid, D), Err(StateError::BadStateid));
        assert_eq!(t.test(C1, &g.stateid), Ok(()));
        assert_eq!(t.free(C1, &g.stateid), Err(StateError::LocksHeld));
        assert_eq!(
            t.delegreturn(t0, C1, &g.stateid, X),
            Err(StateError::BadStateid)
        );
        t.delegreturn(t0, C1, &g.stateid, D).unwrap();
        assert!(t.has_dir_delegations(), "C2's is left");
        t.delegreturn(t0, C2, &g2.stateid, D).unwrap();
        assert!(!t.has_dir_delegations(), "counted down as they went");
        let s = t.stats();
        assert_eq!((s.granted, s.returned, s.outstanding), (2, 2, 0));
        assert!(t.is_empty());
    }

    #[test]
    fn file_accesses_never_conflict_and_uncovered_changes_recall() {
        let t0 = Instant::now();
        let mut t = DelegTable::new(5, DelegLimits::default());
        let g = grant(&mut t, t0, C1, 1 << nt::ADD_ENTRY);
        for a in [
            Access::Open { access: 3, deny: 0 },
            Access::Modify,
            Access::Namespace,
            Access::Read,
        ] {
            assert!(t
                .conflicts(t0, Some(C2), D, a, |_| false)
                .waiting
                .is_empty());
        }
        let add = Access::DirChange(nt::ADD_ENTRY);
        let remove = Access::DirChange(nt::REMOVE_ENTRY);
        assert!(t
            .conflicts(t0, Some(C2), D, add, |_| false)
            .waiting
            .is_empty());
        // The holder's own changes never conflict.
        assert!(t
            .conflicts(t0, Some(C1), D, remove, |_| false)
            .waiting
            .is_empty());
        let c = t.conflicts(t0, Some(C2), D, remove, |_| false);
        assert_eq!(c.recalls.len(), 1);
        assert_eq!(c.recalls[0].stateid, g.stateid);
        assert_eq!(&c.recalls[0].fh[..], b"dfh");
        // Recalling: every change waits now, without a second recall.
        let c2 = t.conflicts(t0, Some(C2), D, add, |_| false);
        assert!(c2.recalls.is_empty());
        assert_eq!(c2.waiting, c.waiting);
        // The cool-down keeps the directory out of delegations for a while.
        t.delegreturn(t0, C1, &g.stateid, D).unwrap();
        assert!(!t.any_live(&c.waiting));
        assert_eq!(
            t.grant_dir(t0, C1, D, params(0), true, false, Bytes::new()),
            Err(NoDeleg::Contention)
        );
    }

    #[test]
    fn notices_are_batched_taken_and_bounded() {
        let t0 = Instant::now();
        let mut t = DelegTable::new(5, DelegLimits::default());
        let g = grant(&mut t, t0, C1, ENTRIES);
        // The holder's own change: no target. Another client's: one.
        let (own, _) = t.notify_targets(t0, Some(C1), D, nt::ADD_ENTRY, &[]);
        assert!(own.is_empty());
        let (targets, recalls) = t.notify_targets(t0, Some(C2), D, nt::ADD_ENTRY, &[]);
        assert!(recalls.is_empty());
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].child_attrs, vec![1 << 4]);
        let id = targets[0].id;
        // First notice: a flush is due after the delay; the second joins the batch.
        let (due, _) = t.queue_notices(t0, vec![(id, notice(nt::ADD_ENTRY, b"a"))]);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].after, dir::MAX_BATCH_DELAY);
        let (due, _) = t.queue_notices(t0, vec![(id, notice(nt::REMOVE_ENTRY, b"bb"))]);
        assert!(due.is_empty());
        // Taken in size-bounded batches, oldest first.
        let b = t.take_notices(id, 1).unwrap();
        assert_eq!((b.client, b.stateid, b.more), (C1, g.stateid, true));
        assert_eq!(b.notices, vec![notice(nt::ADD_ENTRY, b"a")]);
        let b = t.take_notices(id, 1).unwrap();
        assert_eq!(b.notices, vec![notice(nt::REMOVE_ENTRY, b"bb")]);
        assert!(!b.more);
        assert!(t.take_notices(id, 1).is_none());
        // Idle again: the next notice asks for a flush again.
        let (due, _) = t.queue_notices(t0, vec![(id, notice(nt::ADD_ENTRY, b"c"))]);
        assert_eq!(due.len(), 1);
        // An overflowing queue recalls the delegation (and drops the queue).
        let many = (0..MAX_PENDING)
            .map(|_| (id, notice(nt::ADD_ENTRY, b"x")))
            .collect();
        let (_, recalls) = t.queue_notices(t0, many);
        assert_eq!(recalls.len(), 1);
        assert_eq!(recalls[0].stateid, g.stateid);
        assert!(t.take_notices(id, usize::MAX).is_none());
        assert_eq!(t.stats().recalled, 1);
        // A recalling delegation is not notified and cannot be recalled twice.
        let (targets, _) = t.notify_targets(t0, Some(C2), D, nt::ADD_ENTRY, &[]);
        assert!(targets.is_empty());
        assert!(t.recall_id(t0, id).is_none());
        // Revoked: gone from every list.
        assert_eq!(t.revoke_ids(&[id], RevokeReason::Timeout).len(), 1);
        assert!(!t.dir_live(id));
    }

    #[test]
    fn children_are_tracked_for_attribute_changes() {
        let t0 = Instant::now();
        let mut t = DelegTable::new(5, DelegLimits::default());
        let child_attrs = 1 << nt::CHANGE_CHILD_ATTRS;
        let g = grant(&mut t, t0, C1, child_attrs | (1 << nt::CHANGE_DIR_ATTRS));
        let n = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(
            t.track_children(g.id, Some(vec![(n("a"), X), (n("b"), X + 1)])),
            g.types
        );
        // Another client changes X: one CHANGE_CHILD_ATTRS for its name; D itself:
        // CHANGE_DIR_ATTRS with no name. The holder's own changes: nothing.
        let names = |t: &DelegTable, obj| {
            t.attr_targets(Some(C2), obj)
                .into_iter()
                .map(|a| (a.kind, a.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&t, X), vec![(nt::CHANGE_CHILD_ATTRS, n("a"))]);
        assert_eq!(names(&t, D), vec![(nt::CHANGE_DIR_ATTRS, Bytes::new())]);
        assert!(t.attr_targets(Some(C1), X).is_empty());
        // Entry changes (by anyone, the holder included) keep the index: a link, a
        // rename, a removal.
        let upd = [EntryUpdate::Add(n("l"), X)];
        t.notify_targets(t0, Some(C1), D, nt::ADD_ENTRY, &upd);
        assert_eq!(
            names(&t, X),
            vec![
                (nt::CHANGE_CHILD_ATTRS, n("a")),
                (nt::CHANGE_CHILD_ATTRS, n("l"))
            ]
        );
        let upd = [EntryUpdate::Remove(n("a")), EntryUpdate::Add(n("z"), X)];
        t.notify_targets(t0, Some(C1), D, nt::RENAME_ENTRY, &upd);
        let upd = [EntryUpdate::Remove(n("l"))];
        t.notify_targets(t0, Some(C1), D, nt::REMOVE_ENTRY, &upd);
        assert_eq!(names(&t, X), vec![(nt::CHANGE_CHILD_ATTRS, n("z"))]);
        let upd = [EntryUpdate::Remove(n("z"))];
        t.notify_targets(t0, Some(C1), D, nt::REMOVE_ENTRY, &upd);
        assert!(names(&t, X).is_empty());
        // Attribute notices of one object and name replace each other in the queue.
        let attr = |v: &'static [u8]| Notice {
            kind: nt::CHANGE_CHILD_ATTRS,
            body: Bytes::from_static(v),
            coalesce: Some((X + 1, n("b"))),
        };
        t.queue_notices(
            t0,
            vec![(g.id, attr(b"1")), (g.id, notice(nt::ADD_ENTRY, b"e"))],
        );
        t.queue_notices(t0, vec![(g.id, attr(b"2"))]);
        let b = t.take_notices(g.id, usize::MAX).unwrap();
        assert_eq!(b.notices, vec![notice(nt::ADD_ENTRY, b"e"), attr(b"2")]);
        // Returned: nothing is watched any more.
        t.delegreturn(t0, C1, &g.stateid, D).unwrap();
        assert!(t.watched.is_empty());
    }

    #[test]
    fn a_directory_too_large_to_track_is_granted_without_child_attributes() {
        let t0 = Instant::now();
        let mut t = DelegTable::new(5, DelegLimits::default());
        let types = (1 << nt::CHANGE_CHILD_ATTRS) | (1 << nt::ADD_ENTRY);
        let g = grant(&mut t, t0, C1, types);
        let big = (0..=MAX_CHILDREN as u128)
            .map(|i| (Bytes::from(format!("f{i}")), X + i))
            .collect();
        assert_eq!(t.track_children(g.id, Some(big)), 1 << nt::ADD_ENTRY);
        assert!(t.watched.is_empty());
        assert!(t.attr_targets(Some(C2), X).is_empty());
        // Unreadable: likewise.
        let g2 = grant(&mut t, t0, C2, types);
        assert_eq!(t.track_children(g2.id, None), 1 << nt::ADD_ENTRY);
    }
}

#[test]
fn the_revoked_count_follows_revocation_free_and_expiry() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let a = t.grant(t0, C1, F, req(1)).unwrap();
    let b = t.grant(t0, C1, F + 1, req(1)).unwrap();
    t.conflicts(t0, Some(C2), F, Access::Modify, |_| false);
    t.conflicts(t0, Some(C2), F + 1, Access::Modify, |_| false);
    let lease = Duration::from_secs(60);
    assert_eq!(t.revoke_overdue(t0 + lease, lease).len(), 2);
    assert!(t.has_revoked(C1) && !t.has_revoked(C2));
    t.free(C1, &a.stateid).unwrap();
    assert!(t.has_revoked(C1), "one of two still unfreed");
    t.expire_client(C1);
    assert!(!t.has_revoked(C1), "gone with its client");
    assert_eq!(t.test(C1, &b.stateid), Err(StateError::BadStateid));
}

#[test]
fn a_recall_ends_in_one_counted_outcome() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    const C3: ClientId = 3;
    // Returned after a recall; revoked because the holder cannot be reached (found
    // while waiting); revoked after the wait; released with its client.
    let files = [F, F + 1, F + 2, F + 3];
    let holders = [C1, C2, C3, C1];
    let g: Vec<Granted> = files
        .iter()
        .zip(holders)
        .map(|(&f, c)| t.grant(t0, c, f, req(1)).unwrap())
        .collect();
    let waits: Vec<Vec<u64>> = files
        .iter()
        .map(|&f| t.conflicts(t0, None, f, Access::Modify, |_| false).waiting)
        .collect();
    assert!(waits.iter().all(|w| w.len() == 1), "{waits:?}");
    t.delegreturn(t0, C1, &g[0].stateid, F).unwrap();
    assert!(
        t.unreachable_of(&waits[0], |_| true).is_empty(),
        "returned already"
    );
    let gone = t.unreachable_of(&waits[1], |c| c == C2);
    assert_eq!(gone, waits[1]);
    assert!(t.unreachable_of(&waits[2], |c| c == C2).is_empty());
    t.revoke_ids(&gone, RevokeReason::Unreachable);
    t.revoke_ids(&waits[2], RevokeReason::Timeout);
    assert_eq!(t.expire_client(C1), vec![F + 3]);
    let s = t.stats();
    assert_eq!(
        (
            s.recalled,
            s.recall_returns,
            s.revoked_unreachable,
            s.revoked_timeout
        ),
        (4, 1, 1, 1)
    );
    assert_eq!((s.revoked, s.released, s.outstanding), (2, 1, 0));
    assert_eq!(t.client_stats(C2).revoked_unreachable, 1);
    assert_eq!(t.client_stats(C3).revoked_timeout, 1);
}
