//! The courteous server (RFC 8881 §8.4.3; Linux nfsd's courtesy clients) on a
//! ManualClock: a client whose lease ran out keeps its opens, share reservations and
//! locks only until another client's OPEN or LOCK conflicts with them; then it is
//! released and the request succeeds. Without a conflict, renewing keeps everything.

use bytes::Bytes;
use std::time::Duration;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::session::{SessionError, SessionId};
use txnfs_state::*;

mod common;
use common::*;

const SEC: Duration = Duration::from_secs(1);

fn core() -> StateCore {
    common::core(Grace::none())
}

/// A confirmed client with one session, and the session's next seqid.
struct Client {
    id: ClientId,
    session: SessionId,
    seqid: u32,
}

fn client(c: &mut StateCore, clock: &ManualClock, owner: &'static [u8]) -> Client {
    let (id, session, _) = common::client(c, clock, owner, 1);
    Client {
        id,
        session,
        seqid: 1,
    }
}

/// OPEN of `file` F by `owner` of `client`, with the share mode as (access, deny).
fn open(
    c: &mut StateCore,
    clock: &ManualClock,
    client: ClientId,
    owner: &[u8],
    mode: (u32, u32),
) -> Result<Stateid, StateError> {
    open_file(c, clock, false, client, owner, F, mode)
}

/// One SEQUENCE (which renews the lease) and its slot completion.
fn renew(c: &mut StateCore, clock: &ManualClock, cl: &mut Client) -> Result<(), SessionError> {
    c.sequence(&sequence_args(cl.session, cl.seqid), clock.now())?;
    c.finish_slot(&cl.session, 0, None);
    cl.seqid += 1;
    Ok(())
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

/// The newest client list among `effects` (the one the server keeps).
fn persisted_owners(effects: &[Effect]) -> Option<Vec<Bytes>> {
    effects.iter().rev().find_map(|e| match e {
        Effect::PersistClients(l) => Some(l.owners.clone()),
        _ => None,
    })
}

/// The effects left in the core besides client-list writes (a client's first open or
/// lock records it, ADR 0036): the releases these tests are about.
fn releases_and_more(c: &mut StateCore) -> Vec<Effect> {
    c.take_effects()
        .into_iter()
        .filter(|e| !matches!(e, Effect::PersistClients(_)))
        .collect()
}

const F: FileId = 7;

/// Share modes (access, deny) the tests open with.
const BOTH: (u32, u32) = (SHARE_ACCESS_BOTH, SHARE_DENY_NONE);
const BOTH_DENY_W: (u32, u32) = (SHARE_ACCESS_BOTH, SHARE_DENY_WRITE);
const READ: (u32, u32) = (SHARE_ACCESS_READ, SHARE_DENY_NONE);
const READ_DENY_W: (u32, u32) = (SHARE_ACCESS_READ, SHARE_DENY_WRITE);
const WRITE: (u32, u32) = (SHARE_ACCESS_WRITE, SHARE_DENY_NONE);

/// A core on a fresh clock with two confirmed clients, "a" and "b".
fn two_clients() -> (ManualClock, StateCore, Client, Client) {
    let clock = ManualClock::new();
    let mut c = core();
    let a = client(&mut c, &clock, b"a");
    let b = client(&mut c, &clock, b"b");
    (clock, c, a, b)
}

#[test]
fn expired_deny_write_open_yields_to_a_conflicting_open() {
    let (clock, mut c, mut a, mut b) = two_clients();
    let sa = open(&mut c, &clock, a.id, b"oa", BOTH_DENY_W).unwrap();

    // Within A's lease the deny holds.
    clock.advance(LEASE - SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    let denied = open(&mut c, &clock, b.id, b"ob", WRITE);
    assert_eq!(denied, Err(StateError::ShareDenied));
    assert!(
        releases_and_more(&mut c).is_empty(),
        "a live conflict releases nothing"
    );

    // A's lease ran out (courtesy: the tick would keep it for another lease).
    clock.advance(2 * SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    assert!(
        c.tick(clock.now()).is_empty(),
        "still within the courtesy time"
    );
    let sb =
        open(&mut c, &clock, b.id, b"ob", WRITE).expect("the expired client's deny-write yields");
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
    assert!(
        releases_and_more(&mut c).is_empty(),
        "effects are taken once"
    );

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
    let (clock, mut c, a, mut b) = two_clients();
    let oa = open(&mut c, &clock, a.id, b"oa", BOTH).unwrap();
    let la = c
        .lock(clock.now(), false, a.id, write_lock(F, oa, b"la", 0))
        .unwrap();
    let ob = open(&mut c, &clock, b.id, b"ob", BOTH).unwrap();
    // B waits for the range (a blocking lock is polled: each attempt is a LOCK).
    let mut attempts = 0;
    let lb = loop {
        attempts += 1;
        clock.advance(10 * SEC);
        renew(&mut c, &clock, &mut b).unwrap();
        let r = c.lock(clock.now(), false, b.id, write_lock(F, ob, b"lb", 5));
        match r {
            Ok(sid) => break sid,
            Err(StateError::Denied(d)) => {
                assert_eq!(d.owner.client, a.id);
                // Denied only while A's lease runs; LOCKT agrees.
                assert!(attempts <= 6, "attempt {attempts}: still denied");
                assert!(c
                    .lockt(clock.now(), b.id, lockt(b"lb", F, LockType::Write, 5, 10))
                    .is_err());
                assert!(releases_and_more(&mut c).is_empty());
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
    let (clock, mut c, a, mut b) = two_clients();
    let oa = open(&mut c, &clock, a.id, b"oa", BOTH).unwrap();
    c.lock(clock.now(), false, a.id, write_lock(F, oa, b"la", 0))
        .unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    c.lockt(clock.now(), b.id, lockt(b"lb", F, LockType::Write, 0, 10))
        .expect("a LOCK would get the range");
    assert!(
        releases_and_more(&mut c).is_empty(),
        "a test changes nothing"
    );
    assert_eq!(c.table().stats().locks, 1);
}

#[test]
fn renewing_in_time_keeps_everything() {
    let (clock, mut c, mut a, mut b) = two_clients();
    let sa = open(&mut c, &clock, a.id, b"oa", BOTH_DENY_W).unwrap();
    let la = c
        .lock(clock.now(), false, a.id, write_lock(F, sa, b"la", 0))
        .unwrap();
    assert!(releases_and_more(&mut c).is_empty());
    // Silent past its lease, but nobody asks for its file; then it comes back.
    clock.advance(LEASE + LEASE / 2);
    assert!(c.tick(clock.now()).is_empty());
    renew(&mut c, &clock, &mut a).expect("the courtesy client's session still works");
    renew(&mut c, &clock, &mut b).unwrap();
    assert_eq!(
        open(&mut c, &clock, b.id, b"ob", WRITE),
        Err(StateError::ShareDenied)
    );
    let ob = open(&mut c, &clock, b.id, b"ob", READ).unwrap();
    let mut req = write_lock(F, ob, b"lb", 0);
    req.lock_type = LockType::Read;
    assert!(matches!(
        c.lock(clock.now(), false, b.id, req),
        Err(StateError::Denied(_))
    ));
    assert!(releases_and_more(&mut c).is_empty());
    // Well past the original two leases, A renewed: nothing expires.
    clock.advance(LEASE / 2 + SEC);
    assert!(c.tick(clock.now()).is_empty());
    c.table().test_stateid(a.id, &sa).expect("A's open");
    c.table().test_stateid(a.id, &la).expect("A's lock");
}

#[test]
fn a_live_conflict_releases_no_courtesy_client() {
    let (clock, mut c, a, mut b) = two_clients();
    let mut d = client(&mut c, &clock, b"d");
    let sa = open(&mut c, &clock, a.id, b"oa", READ_DENY_W).unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    renew(&mut c, &clock, &mut d).unwrap();
    open(&mut c, &clock, d.id, b"od", READ_DENY_W)
        .expect("no conflict: two readers denying writes");
    assert_eq!(
        open(&mut c, &clock, b.id, b"ob", WRITE),
        Err(StateError::ShareDenied),
        "D is live"
    );
    assert!(
        releases_and_more(&mut c).is_empty(),
        "a failed request releases nobody"
    );
    c.table().test_stateid(a.id, &sa).expect("A keeps its open");
}

#[test]
fn the_tick_executes_effects_nobody_took() {
    let (clock, mut c, a, mut b) = two_clients();
    open(&mut c, &clock, a.id, b"oa", READ_DENY_W).unwrap();
    clock.advance(LEASE + SEC);
    renew(&mut c, &clock, &mut b).unwrap();
    open(&mut c, &clock, b.id, b"ob", WRITE).unwrap();
    assert_eq!(
        released(&c.tick(clock.now())),
        vec![(a.id, ReleaseReason::CourtesyConflict)]
    );
}
