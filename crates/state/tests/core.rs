//! Outcome tests for the state core on a ManualClock: leases, grace, atomic
//! DESTROY_CLIENTID, client replacement, effects.

use bytes::Bytes;
use std::time::Duration;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::session::{CallbackParams, Principal};
use txnfs_state::session::{CreateSessionArgs, SequenceArgs, SessionError, SessionId};
use txnfs_state::slots::SlotVerdict;
use txnfs_state::*;

mod common;
use common::*;

/// Share modes (access, deny) the tests open with.
const READ_DENY_NONE: (u32, u32) = (SHARE_ACCESS_READ, SHARE_DENY_NONE);
const BOTH_DENY_NONE: (u32, u32) = (SHARE_ACCESS_BOTH, SHARE_DENY_NONE);
const BOTH_DENY_BOTH: (u32, u32) = (SHARE_ACCESS_BOTH, SHARE_DENY_BOTH);

/// LOCKT of `owner` for a read lock on byte 0 of `file`.
fn read_lockt(owner: &[u8], file: FileId) -> LocktRequest<'_> {
    lockt(owner, file, LockType::Read, 0, 1)
}

fn owners(names: &[&'static [u8]]) -> Vec<Bytes> {
    names.iter().map(|n| Bytes::from_static(n)).collect()
}

/// A core in a grace period of one lease from now, waiting for the clients `names`.
fn core_in_grace(clock: &ManualClock, names: &[&'static [u8]]) -> StateCore {
    core(Grace::new(clock.now() + LEASE, owners(names)))
}

/// A fresh clock and a core out of grace with the one confirmed client `owner`:
/// (clock, core, client, its session).
fn one_client(owner: &'static [u8]) -> (ManualClock, StateCore, ClientId, SessionId) {
    let clock = ManualClock::new();
    let mut c = core(Grace::none());
    let (a, sa, _) = client(&mut c, &clock, owner, 1);
    (clock, c, a, sa)
}

/// A core in grace waiting for the clients `names`, with the client "a" confirmed
/// (and the effects of its confirmation).
fn grace_and_a(clock: &ManualClock, names: &[&'static [u8]]) -> (StateCore, ClientId, Vec<Effect>) {
    let mut c = core_in_grace(clock, names);
    let (a, _, effects) = client(&mut c, clock, b"a", 1);
    (c, a, effects)
}

fn released(effects: &[Effect]) -> Vec<(ClientId, ReleaseReason, usize)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ClientReleased {
                client,
                reason,
                states,
            } => Some((*client, *reason, *states)),
            _ => None,
        })
        .collect()
}

fn sequence(c: &mut StateCore, clock: &ManualClock, s: SessionId, seqid: u32) -> SlotVerdict {
    c.sequence(&sequence_args(s, seqid), clock.now())
        .unwrap()
        .verdict
}

fn lock_req(file: FileId, open: Stateid) -> LockRequest {
    write_lock(file, open, b"lo", 0)
}

/// A client is recorded in the client list when it first holds state (an open, a
/// lock, a file delegation), not when it is confirmed, and dropped once it holds none
/// (ADR 0036): a restart waits only for clients that may have something to reclaim.
#[test]
fn a_client_is_recorded_while_it_holds_state() {
    let clock = ManualClock::new();
    let mut c = core(Grace::none());
    let (a, _, effects) = client(&mut c, &clock, b"host-a", 1);
    assert_eq!(
        persisted(&effects),
        None,
        "a client that only looks is not recorded"
    );
    let (b, _, _) = client(&mut c, &clock, b"host-b", 1);
    let f = file_id(0, 3);
    let open = open_file(&mut c, &clock, false, a, b"o", f, READ_DENY_NONE).unwrap();
    let list = persisted(&c.take_effects())
        .cloned()
        .expect("the first open records the client");
    assert_eq!(list.owners, vec![Bytes::from_static(b"host-a")]);
    open_file(
        &mut c,
        &clock,
        false,
        a,
        b"o2",
        file_id(0, 4),
        READ_DENY_NONE,
    )
    .unwrap();
    assert_eq!(
        persisted(&c.take_effects()),
        None,
        "written once, not per open"
    );
    let ob = open_file(&mut c, &clock, false, b, b"o", f, READ_DENY_NONE).unwrap();
    let list2 = persisted(&c.take_effects()).cloned().unwrap();
    assert!(list2.generation > list.generation, "generations increase");
    assert_eq!(list2.owners.len(), 2);
    // b closes its only open: the tick drops it from the list.
    c.table_mut().close(b, &ob, f).unwrap();
    let _ = open;
    let list3 = persisted(&c.tick(clock.now()))
        .cloned()
        .expect("b no longer holds state");
    assert_eq!(list3.owners, vec![Bytes::from_static(b"host-a")]);
    assert_eq!(persisted(&c.tick(clock.now())), None, "nothing changed");
}

#[test]
fn lease_expiry_releases_opens_and_locks_and_persists() {
    let (clock, mut c, a, sa) = one_client(b"a");
    let (b, sb, _) = client(&mut c, &clock, b"b", 1);
    let f = file_id(1, 7);
    let open = open_file(&mut c, &clock, false, a, b"oa", f, BOTH_DENY_NONE).unwrap();
    c.lock(clock.now(), false, a, lock_req(f, open)).unwrap();
    assert_eq!(c.table().stats().locks, 1);
    // (The open recorded a in the client list; the server takes that at once.)
    assert!(persisted(&c.take_effects()).is_some());

    // b keeps renewing; a goes silent. Two leases (one courtesy) must pass.
    for seqid in 1..=4 {
        clock.advance(Duration::from_secs(40));
        assert_eq!(sequence(&mut c, &clock, sb, seqid), SlotVerdict::Execute);
        c.finish_slot(&sb, 0, None);
        let effects = c.tick(clock.now());
        if seqid < 4 {
            assert!(effects.is_empty(), "{seqid}: {effects:?}");
        } else {
            // 160 s of silence > 2 leases.
            assert_eq!(
                released(&effects),
                vec![(a, ReleaseReason::LeaseExpired, 2)]
            );
            let list = persisted(&effects).expect("persist after a confirmed client went");
            assert_eq!(list.owners, Vec::<Bytes>::new(), "b holds nothing");
        }
    }
    assert_eq!(
        c.table().stats(),
        StateStats::default(),
        "opens and locks are gone"
    );
    assert!(c.sessions().session(&sa).is_none());
    // b can now take the lock a held.
    let ob = open_file(&mut c, &clock, false, b, b"ob", f, BOTH_DENY_NONE).unwrap();
    c.lock(clock.now(), false, b, lock_req(f, ob)).unwrap();
    // a's stateid is dead; a's client id is stale.
    assert_eq!(
        c.table().test_stateid(a, &open),
        Err(StateError::BadStateid)
    );
    assert_eq!(
        open_file(&mut c, &clock, false, a, b"oa", f, READ_DENY_NONE),
        Err(StateError::StaleClientId)
    );
}

#[test]
fn destroy_clientid_with_state_is_busy_and_changes_nothing() {
    let (clock, mut c, a, sa) = one_client(b"a");
    let f = file_id(0, 1);
    let open = open_file(&mut c, &clock, false, a, b"o", f, READ_DENY_NONE).unwrap();
    c.destroy_session(&sa).unwrap();
    // No session left, but an open: busy, and the client and its open survive.
    assert_eq!(c.destroy_client(a), Err(SessionError::ClientIdBusy));
    assert_eq!(c.sessions().counts(), (1, 0));
    c.table().test_stateid(a, &open).unwrap();
    c.table_mut().close(a, &open, f).unwrap();
    let effects = c.destroy_client(a).unwrap();
    assert_eq!(released(&effects), vec![(a, ReleaseReason::Destroyed, 0)]);
    assert_eq!(persisted(&effects).unwrap().owners, Vec::<Bytes>::new());
    assert_eq!(c.sessions().counts(), (0, 0));
    assert_eq!(c.destroy_client(a), Err(SessionError::StaleClientId));
    // A request of the destroyed client that was already past SEQUENCE creates nothing.
    assert_eq!(
        open_file(&mut c, &clock, false, a, b"o", f, READ_DENY_NONE),
        Err(StateError::StaleClientId)
    );
    assert_eq!(c.table().stats().opens, 0);
}

#[test]
fn destroy_clientid_with_a_session_is_busy() {
    let (_, mut c, a, _) = one_client(b"a");
    assert_eq!(c.destroy_client(a), Err(SessionError::ClientIdBusy));
    assert_eq!(c.sessions().counts(), (1, 1));
}

#[test]
fn a_rebooted_client_replaces_its_old_state_in_one_step() {
    let (clock, mut c, old, _) = one_client(b"host");
    let f = file_id(0, 5);
    open_file(&mut c, &clock, false, old, b"o", f, BOTH_DENY_BOTH).unwrap();
    let (new, _, effects) = client(&mut c, &clock, b"host", 2);
    assert_ne!(new, old);
    assert_eq!(released(&effects), vec![(old, ReleaseReason::Replaced, 1)]);
    assert_eq!(
        persisted(&effects).unwrap().owners,
        Vec::<Bytes>::new(),
        "the new incarnation holds nothing yet"
    );
    // The old deny-both open is gone: the new incarnation opens the file.
    open_file(&mut c, &clock, false, new, b"o", f, BOTH_DENY_BOTH).unwrap();
}

#[test]
fn grace_ends_when_all_reclaimed() {
    let clock = ManualClock::new();
    let (mut c, a, _) = grace_and_a(&clock, &[b"a", b"b"]);
    let (b, _, _) = client(&mut c, &clock, b"b", 1);
    let f = file_id(0, 9);
    assert_eq!(
        open_file(&mut c, &clock, false, a, b"o", f, READ_DENY_NONE),
        Err(StateError::Grace)
    );
    open_file(&mut c, &clock, true, a, b"o", f, READ_DENY_NONE).unwrap();
    // During grace the persisted list still names b, which has not reclaimed yet.
    let list = persisted(&c.take_effects())
        .cloned()
        .expect("a reclaimed an open");
    assert_eq!(list.owners, owners(&[b"a", b"b"]));
    assert!(c.reclaim_complete(a, clock.now()).unwrap().is_empty());
    assert_eq!(
        c.reclaim_complete(a, clock.now()),
        Err(SessionError::CompleteAlready)
    );
    assert!(c.in_grace(clock.now()));
    let effects = c.reclaim_complete(b, clock.now()).unwrap();
    assert_eq!(effects, vec![Effect::GraceEnded(GraceEnd::AllReclaimed)]);
    assert!(!c.in_grace(clock.now()));
    assert_eq!(
        open_file(&mut c, &clock, true, b, b"o", f, READ_DENY_NONE),
        Err(StateError::NoGrace)
    );
    open_file(&mut c, &clock, false, b, b"o", f, READ_DENY_NONE).unwrap();
}

/// A client waited for that ends its client ID (DESTROY_CLIENTID) is known gone: it
/// has nothing left to reclaim, and grace does not wait for it (ADR 0036).
#[test]
fn grace_does_not_wait_for_a_client_that_destroyed_its_id() {
    let clock = ManualClock::new();
    let (mut c, a, _) = grace_and_a(&clock, &[b"a", b"b"]);
    c.reclaim_complete(a, clock.now()).unwrap();
    let (b, sb, _) = client(&mut c, &clock, b"b", 1);
    assert!(c.in_grace(clock.now()));
    c.destroy_session(&sb).unwrap();
    c.destroy_client(b).unwrap();
    assert!(!c.in_grace(clock.now()), "nobody left to wait for");
    let effects = c.tick(clock.now());
    assert_eq!(effects[0], Effect::GraceEnded(GraceEnd::AllReclaimed));
}

#[test]
fn grace_ends_on_time_and_forgets_the_absent() {
    let clock = ManualClock::new();
    let (mut c, a, _) = grace_and_a(&clock, &[b"gone", b"a"]);
    assert_eq!(
        c.lockt(clock.now(), a, read_lockt(b"o", file_id(0, 1))),
        Err(StateError::Grace)
    );
    clock.advance(LEASE - Duration::from_millis(1));
    assert!(c.tick(clock.now()).is_empty());
    assert!(c.in_grace(clock.now()));
    clock.advance(Duration::from_millis(1));
    let effects = c.tick(clock.now());
    assert_eq!(
        effects[0],
        Effect::GraceEnded(GraceEnd::TimedOut { unreclaimed: 2 })
    );
    assert_eq!(
        persisted(&effects).unwrap().owners,
        Vec::<Bytes>::new(),
        "the client that never came back is no longer waited for (and a holds nothing)"
    );
    c.lockt(clock.now(), a, read_lockt(b"o", file_id(0, 1)))
        .unwrap();
}

#[test]
fn state_of_different_exports_never_collides() {
    // With fileid ^ (export << 48) these two were the same file.
    let x = file_id(0, 1 << 48);
    let y = file_id(1, 0);
    assert_ne!(x, y);
    let (clock, mut c, a, _) = one_client(b"a");
    let (b, _, _) = client(&mut c, &clock, b"b", 1);
    open_file(&mut c, &clock, false, a, b"o", x, BOTH_DENY_BOTH).unwrap();
    open_file(&mut c, &clock, false, b, b"o", y, BOTH_DENY_BOTH).unwrap();
    assert_eq!(
        open_file(&mut c, &clock, false, b, b"p", x, READ_DENY_NONE),
        Err(StateError::ShareDenied)
    );
    assert_ne!(file_id(u16::MAX, u64::MAX), file_id(u16::MAX - 1, u64::MAX));
}

mod random_events {
    //! Random interleavings of client creation, opens, locks, renewals, the passage of
    //! time, housekeeping and DESTROY_CLIENTID: the core never keeps state of a client
    //! that is gone, and releases a client for its lease only after two silent leases.

    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::time::Instant;

    #[derive(Debug, Clone)]
    enum Event {
        Client(usize, u8),
        Open(usize, u64),
        Lock(usize, u64),
        Renew(usize),
        Advance(u64),
        Tick,
        Destroy(usize),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0..3usize, 1..3u8).prop_map(|(k, v)| Event::Client(k, v)),
            (0..3usize, 0..3u64).prop_map(|(k, f)| Event::Open(k, f)),
            (0..3usize, 0..3u64).prop_map(|(k, f)| Event::Lock(k, f)),
            (0..3usize).prop_map(Event::Renew),
            (0..90u64).prop_map(Event::Advance),
            Just(Event::Tick),
            (0..3usize).prop_map(Event::Destroy),
        ]
    }

    const OWNERS: [&[u8]; 3] = [b"k0", b"k1", b"k2"];

    #[derive(Default)]
    struct Model {
        /// Per owner: client id, session, last renewal, open stateids by file.
        live: HashMap<usize, (ClientId, SessionId, Instant, HashMap<u64, Stateid>)>,
        seqids: HashMap<SessionId, u32>,
        /// Every session each client made.
        sessions: HashMap<ClientId, Vec<SessionId>>,
        ever: Vec<ClientId>,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn no_orphaned_state_and_no_early_expiry(events in proptest::collection::vec(event(), 1..80)) {
            let clock = ManualClock::new();
            let mut c = core(Grace::none());
            let mut m = Model::default();
            for ev in events {
                let now = clock.now();
                let mut effects = Vec::new();
                match ev {
                    Event::Client(k, v) => {
                        let e = c.exchange_id(&Principal::default(), &Bytes::from_static(OWNERS[k]), [v; 8], false, now).map(|(ok, _)| ok).unwrap();
                        let res = c.create_session(&Principal::default(), &CreateSessionArgs {
                            clientid: e.clientid, seq: e.sequenceid, flags: 0,
                            fore: ch(2), back: ch(1), conn: 1,
                        }, CallbackParams::default(), now);
                        if let Ok((out, fx)) = res {
                            effects = fx;
                            // A second session of a live client has completed already.
                            prop_assert!(matches!(
                                c.reclaim_complete(e.clientid, now),
                                Ok(_) | Err(SessionError::CompleteAlready)
                            ));
                            m.ever.push(e.clientid);
                            m.sessions.entry(e.clientid).or_default().push(out.id);
                            let old = m.live.insert(k, (e.clientid, out.id, now, HashMap::new()));
                            if let Some((old_id, ..)) = old.filter(|o| o.0 != e.clientid) {
                                // Replaced incarnation: released in the same step.
                                prop_assert!(released(&effects).iter().any(|r| r.0 == old_id));
                            }
                        }
                    }
                    Event::Open(k, f) => {
                        // Any client ever seen, gone ones included: a request that
                        // passed SEQUENCE before its client went must create nothing.
                        if let Some(&cid) = m.ever.get(k % m.ever.len().max(1)) {
                            let req = OpenRequest { owner: b"o", file: file_id(0, f), access: SHARE_ACCESS_BOTH, deny: SHARE_DENY_NONE };
                            let res = c.open(now, false, cid, req);
                            if let Some((_, _, _, opens)) = m.live.values_mut().find(|v| v.0 == cid) {
                                if let Ok(sid) = res {
                                    opens.insert(f, sid);
                                }
                            }
                        }
                    }
                    Event::Lock(k, f) => {
                        if let Some((cid, _, _, opens)) = m.live.get(&k) {
                            if let Some(sid) = opens.get(&f) {
                                let _ = c.lock(now, false, *cid, lock_req(file_id(0, f), Stateid { seqid: 0, ..*sid }));
                            }
                        }
                    }
                    Event::Renew(k) => {
                        if let Some((_, sid, last, _)) = m.live.get_mut(&k) {
                            let seq = m.seqids.entry(*sid).or_insert(0);
                            *seq += 1;
                            let args = SequenceArgs {
                                session: *sid,
                                slot: 0,
                                seqid: *seq,
                                request_hash: 0,
                                nops: 1,
                                request_len: 100,
                                conn: 1,
                                cache_reply: None,
                            };
                            // BADSESSION after a refused DESTROY_CLIENTID destroyed it.
                            if let Ok(ok) = c.sequence(&args, now) {
                                prop_assert_eq!(ok.verdict, SlotVerdict::Execute);
                                c.finish_slot(sid, 0, None);
                                *last = now;
                            }
                        }
                    }
                    Event::Advance(s) => clock.advance(Duration::from_secs(s)),
                    Event::Tick => effects = c.tick(now),
                    Event::Destroy(k) => {
                        if let Some((cid, _, _, _)) = m.live.get(&k).cloned() {
                            for sid in m.sessions.get(&cid).into_iter().flatten() {
                                let _ = c.destroy_session(sid);
                            }
                            match c.destroy_client(cid) {
                                Ok(fx) => { effects = fx; m.live.remove(&k); }
                                Err(e) => {
                                    prop_assert_eq!(e, SessionError::ClientIdBusy);
                                    prop_assert!(c.table().client_has_state(cid));
                                    // Sessionless now: the model keeps it until it expires.
                                }
                            }
                        }
                    }
                }
                // A LOCK may release a courtesy client in its way.
                effects.extend(c.take_effects());
                for (client, reason, _) in released(&effects) {
                    // Silent past two leases, or past one for another client's conflict.
                    let min_silence = match reason {
                        ReleaseReason::LeaseExpired => LEASE * 2,
                        ReleaseReason::CourtesyConflict => LEASE,
                        _ => continue,
                    };
                    let (k, (_, _, last, _)) = m.live.iter().find(|(_, v)| v.0 == client).unwrap();
                    prop_assert!(now.duration_since(*last) > min_silence, "released early: {:?}", reason);
                    let k = *k;
                    m.live.remove(&k);
                }
                for id in &m.ever {
                    prop_assert!(
                        !c.table().client_has_state(*id) || c.sessions().client_exists(*id),
                        "state of a client that is gone"
                    );
                }
            }
        }
    }
}
