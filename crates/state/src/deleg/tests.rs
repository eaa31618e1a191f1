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
    let c = t.conflicts(t0, Some(C2), F, Access::Open(1), |_| false);
    assert!(c.waiting.is_empty() && c.recalls.is_empty());
    // A writer does: one recall, then waiting without a second recall.
    let c = t.conflicts(t0, Some(C2), F, Access::Open(2), |_| false);
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
    assert_eq!(t.stats().revoked, 1);
}

#[test]
fn expired_holder_is_revoked_without_a_recall() {
    let t0 = Instant::now();
    let mut t = DelegTable::new(5, DelegLimits::default());
    let g = t.grant(t0, C1, F, req(1)).unwrap();
    let c = t.conflicts(t0, None, F, Access::Namespace, |c| c == C1);
    assert!(c.recalls.is_empty() && c.waiting.is_empty());
    assert_eq!(c.revoked, 1);
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
    assert!(t.has_conflict(C2, F, Access::Open(2)));
    assert!(!t.has_conflict(C2, F, Access::Open(1)));
    assert!(!t.has_conflict(C1, F, Access::Open(3)));
    t.delegreturn(t0, C1, &g.stateid, F).unwrap();
    assert!(!t.has_conflict(C2, F, Access::Open(2)));
}
