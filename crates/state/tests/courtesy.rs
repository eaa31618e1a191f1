//! The courteous server (RFC 8881 §8.4.3; Linux nfsd's courtesy clients) on a
//! ManualClock: a client whose lease ran out keeps its opens, share reservations and
//! locks only until another client's OPEN or LOCK conflicts with them; then it is
//! released and the request succeeds. Without a conflict, renewing keeps everything.

use bytes::Bytes;
use std::time::Duration;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::session::{
    ChannelAttrs, CreateSessionArgs, SequenceArgs, SessionError, SessionId, SessionLimits,
};
use txnfs_state::*;

const LEASE: Duration = Duration::from_secs(60);
const SEC: Duration = Duration::from_secs(1);

fn ch(slots: u32) -> ChannelAttrs {
    ChannelAttrs {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 1 << 16,
        max_ops: 100,
        max_requests: slots,
    }
}

fn core() -> StateCore {
    StateCore::new(
        CoreConfig {
            boot_epoch: 3,
            lease: LEASE,
            sessions: SessionLimits {
                max_clients: 16,
                max_sessions_per_client: 4,
                server_fore: ch(8),
                server_back: ch(1),
                back_channel: false,
                reply_cache_bytes: usize::MAX,
            },
            state: StateLimits::default(),
        },
        Grace::none(),
    )
}

/// A confirmed client with one session, and the session's next seqid.
struct Client {
    id: ClientId,
    session: SessionId,
    seqid: u32,
}

fn client(c: &mut StateCore, clock: &ManualClock, owner: &'static [u8]) -> Client {
    let e = c
        .exchange_id(&Bytes::from_static(owner), [1; 8], false, clock.now())
        .unwrap();
    let (out, _) = c
        .create_session(
            &CreateSessionArgs {
                clientid: e.clientid,
                seq: e.sequenceid,
                flags: 0,
                fore: ch(4),
                back: ch(1),
                conn: 1,
            },
            clock.now(),
        )
        .unwrap();
    // Nothing to reclaim, said before any OPEN or LOCK (RFC 8881 §18.51.3).
    c.reclaim_complete(e.clientid, clock.now()).unwrap();
    Client {
        id: e.clientid,
        session: out.id,
        seqid: 1,
    }
}

/// One SEQUENCE (which renews the lease) and its slot completion.
fn renew(c: &mut StateCore, clock: &ManualClock, cl: &mut Client) -> Result<(), SessionError> {
    let r = c.sequence(
        &SequenceArgs {
            session: cl.session,
            slot: 0,
            seqid: cl.seqid,
            request_hash: u64::from(cl.seqid),
            nops: 2,
            request_len: 200,
            conn: 1,
        },
        clock.now(),
    );
    r?;
    c.finish_slot(&cl.session, 0, None);
    cl.seqid += 1;
    Ok(())
}

fn lock(file: FileId, open: Stateid, owner: &[u8], offset: u64) -> LockRequest {
    LockRequest {
        file,
        lock_type: LockType::Write,
        offset,
        length: 10,
        locker: Locker::NewOwner {
            open_stateid: open,
            lock_owner: owner.to_vec(),
        },
    }
}

fn released(effects: &[Effect]) -> Vec<(ClientId, ReleaseReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ClientReleased { client, reason, .. } => Some((*client, *reason)),
            _ => None,
        })
        .collect()
}

fn persisted_owners(effects: &[Effect]) -> Option<Vec<Bytes>> {
    effects.iter().find_map(|e| match e {
        Effect::PersistClients(l) => Some(l.owners.clone()),
        _ => None,
    })
}

const F: FileId = 7;

#[test]
fn expired_deny_write_open_yields_to_a_conflicting_open() {
    let clock = ManualClock::new();
    let mut c = core();
    let mut a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    let sa = c
        .open(
            clock.now(),
            false,
            a.id,
            OpenRequest {
                owner: b"oa",
                file: F,
                access: SHARE_ACCESS_BOTH,
                deny: SHARE_DENY_WRITE,
            },
        )
        .unwrap();

    // Within A's lease the deny holds.
    clock.advance(LEASE - SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    let denied = c.open(
        clock.now(),
        false,
        b.id,
        OpenRequest {
            owner: b"ob",
            file: F,
            access: SHARE_ACCESS_WRITE,
            deny: 0,
        },
    );
    assert_eq!(denied, Err(StateError::ShareDenied));
    assert!(
        c.take_effects().is_empty(),
        "a live conflict releases nothing"
    );

    // A's lease ran out (courtesy: the tick would keep it for another lease).
    clock.advance(2 * SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    assert!(
        c.tick(clock.now()).is_empty(),
        "still within the courtesy time"
    );
    let sb = c
        .open(
            clock.now(),
            false,
            b.id,
            OpenRequest {
                owner: b"ob",
                file: F,
                access: SHARE_ACCESS_WRITE,
                deny: 0,
            },
        )
        .expect("the expired client's deny-write yields");
    let effects = c.take_effects();
    assert_eq!(
        released(&effects),
        vec![(a.id, ReleaseReason::CourtesyConflict)]
    );
    assert_eq!(
        persisted_owners(&effects),
        Some(vec![Bytes::from_static(b"b")]),
        "a restart no longer waits for A"
    );
    assert!(c.take_effects().is_empty(), "effects are taken once");

    // A's state and session are gone: its stateid is unknown, its SEQUENCE refused.
    assert_eq!(
        c.table().test_stateid(a.id, &sa),
        Err(StateError::BadStateid)
    );
    assert_eq!(
        c.table().check_io(a.id, &sa, F, true),
        Err(StateError::BadStateid)
    );
    assert_eq!(renew(&mut c, &clock, &mut a), Err(SessionError::BadSession));
    c.table().check_io(b.id, &sb, F, true).expect("B writes");
    assert_eq!(c.table().stats().opens, 1);
}

#[test]
fn expired_lock_yields_to_a_conflicting_lock() {
    let clock = ManualClock::new();
    let mut c = core();
    let a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    let oa = c
        .open(
            clock.now(),
            false,
            a.id,
            OpenRequest {
                owner: b"oa",
                file: F,
                access: SHARE_ACCESS_BOTH,
                deny: 0,
            },
        )
        .unwrap();
    let la = c
        .lock(clock.now(), false, a.id, lock(F, oa, b"la", 0))
        .unwrap();
    let ob = c
        .open(
            clock.now(),
            false,
            b.id,
            OpenRequest {
                owner: b"ob",
                file: F,
                access: SHARE_ACCESS_BOTH,
                deny: 0,
            },
        )
        .unwrap();
    // B waits for the range (a blocking lock is polled: each attempt is a LOCK).
    let mut attempts = 0;
    let lb = loop {
        attempts += 1;
        clock.advance(10 * SEC);
        renew(&mut c, &clock, &mut b).unwrap();
        let r = c.lock(clock.now(), false, b.id, lock(F, ob, b"lb", 5));
        match r {
            Ok(sid) => break sid,
            Err(StateError::Denied(d)) => {
                assert_eq!(d.owner.client, a.id);
                // Denied only while A's lease runs; LOCKT agrees.
                assert!(attempts <= 6, "attempt {attempts}: still denied");
                assert!(c
                    .lockt(
                        clock.now(),
                        b.id,
                        LocktRequest {
                            owner: b"lb",
                            file: F,
                            lock_type: LockType::Write,
                            offset: 5,
                            length: 10
                        }
                    )
                    .is_err());
                assert!(c.take_effects().is_empty());
            }
            Err(e) => panic!("attempt {attempts}: {e:?}"),
        }
    };
    // 70 s after A's last renewal: the seventh attempt is the first after the lease.
    assert_eq!(attempts, 7);
    assert_eq!(
        released(&c.take_effects()),
        vec![(a.id, ReleaseReason::CourtesyConflict)]
    );
    assert_eq!(
        c.table().test_stateid(a.id, &la),
        Err(StateError::BadStateid)
    );
    c.table().test_stateid(b.id, &lb).expect("B's lock stateid");
    assert_eq!(c.table().stats().locks, 1);
}

#[test]
fn lockt_does_not_count_or_release_a_courtesy_lock() {
    let clock = ManualClock::new();
    let mut c = core();
    let a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    let oa = c
        .open(
            clock.now(),
            false,
            a.id,
            OpenRequest {
                owner: b"oa",
                file: F,
                access: SHARE_ACCESS_BOTH,
                deny: 0,
            },
        )
        .unwrap();
    c.lock(clock.now(), false, a.id, lock(F, oa, b"la", 0))
        .unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    c.lockt(
        clock.now(),
        b.id,
        LocktRequest {
            owner: b"lb",
            file: F,
            lock_type: LockType::Write,
            offset: 0,
            length: 10,
        },
    )
    .expect("a LOCK would get the range");
    assert!(c.take_effects().is_empty(), "a test changes nothing");
    assert_eq!(c.table().stats().locks, 1);
}

#[test]
fn renewing_in_time_keeps_everything() {
    let clock = ManualClock::new();
    let mut c = core();
    let mut a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    let sa = c
        .open(
            clock.now(),
            false,
            a.id,
            OpenRequest {
                owner: b"oa",
                file: F,
                access: SHARE_ACCESS_BOTH,
                deny: SHARE_DENY_WRITE,
            },
        )
        .unwrap();
    let la = c
        .lock(clock.now(), false, a.id, lock(F, sa, b"la", 0))
        .unwrap();
    // Silent past its lease, but nobody asks for its file; then it comes back.
    clock.advance(LEASE + LEASE / 2);
    assert!(c.tick(clock.now()).is_empty());
    renew(&mut c, &clock, &mut a).expect("the courtesy client's session still works");
    renew(&mut c, &clock, &mut b).unwrap();
    assert_eq!(
        c.open(
            clock.now(),
            false,
            b.id,
            OpenRequest {
                owner: b"ob",
                file: F,
                access: SHARE_ACCESS_WRITE,
                deny: 0
            }
        ),
        Err(StateError::ShareDenied)
    );
    let ob = c
        .open(
            clock.now(),
            false,
            b.id,
            OpenRequest {
                owner: b"ob",
                file: F,
                access: SHARE_ACCESS_READ,
                deny: 0,
            },
        )
        .unwrap();
    let mut req = lock(F, ob, b"lb", 0);
    req.lock_type = LockType::Read;
    assert!(matches!(
        c.lock(clock.now(), false, b.id, req),
        Err(StateError::Denied(_))
    ));
    assert!(c.take_effects().is_empty());
    // Well past the original two leases, A renewed: nothing expires.
    clock.advance(LEASE / 2 + SEC);
    assert!(c.tick(clock.now()).is_empty());
    c.table().test_stateid(a.id, &sa).expect("A's open");
    c.table().test_stateid(a.id, &la).expect("A's lock");
}

#[test]
fn a_live_conflict_releases_no_courtesy_client() {
    let clock = ManualClock::new();
    let mut c = core();
    let a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    let mut d = client(&mut c, &clock, b"d");
    let deny_w = (SHARE_ACCESS_READ, SHARE_DENY_WRITE);
    let sa = c
        .open(
            clock.now(),
            false,
            a.id,
            OpenRequest {
                owner: b"oa",
                file: F,
                access: deny_w.0,
                deny: deny_w.1,
            },
        )
        .unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    renew(&mut c, &clock, &mut d).unwrap();
    c.open(
        clock.now(),
        false,
        d.id,
        OpenRequest {
            owner: b"od",
            file: F,
            access: deny_w.0,
            deny: deny_w.1,
        },
    )
    .expect("no conflict: two readers denying writes");
    assert_eq!(
        c.open(
            clock.now(),
            false,
            b.id,
            OpenRequest {
                owner: b"ob",
                file: F,
                access: SHARE_ACCESS_WRITE,
                deny: 0
            }
        ),
        Err(StateError::ShareDenied),
        "D is live"
    );
    assert!(
        c.take_effects().is_empty(),
        "a failed request releases nobody"
    );
    c.table().test_stateid(a.id, &sa).expect("A keeps its open");
}

#[test]
fn the_tick_executes_effects_nobody_took() {
    let clock = ManualClock::new();
    let mut c = core();
    let a = client(&mut c, &clock, b"a");
    let mut b = client(&mut c, &clock, b"b");
    c.open(
        clock.now(),
        false,
        a.id,
        OpenRequest {
            owner: b"oa",
            file: F,
            access: SHARE_ACCESS_READ,
            deny: SHARE_DENY_WRITE,
        },
    )
    .unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    c.open(
        clock.now(),
        false,
        b.id,
        OpenRequest {
            owner: b"ob",
            file: F,
            access: SHARE_ACCESS_WRITE,
            deny: 0,
        },
    )
    .unwrap();
    assert_eq!(
        released(&c.tick(clock.now())),
        vec![(a.id, ReleaseReason::CourtesyConflict)]
    );
}
