//! Protocol rules of the state core on a ManualClock (issue 8): the lifetime of an
//! unconfirmed client record (RFC 8881 §18.35) and RECLAIM_COMPLETE before any
//! non-reclaim locking state (§18.51.3).

use bytes::Bytes;
use std::time::Duration;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::session::{CallbackParams, Principal};
use txnfs_state::session::{CreateSessionArgs, SessionError};
use txnfs_state::*;

mod common;

use common::{ch, core, LEASE};

fn session_args(clientid: ClientId, seq: u32) -> CreateSessionArgs {
    CreateSessionArgs {
        clientid,
        seq,
        flags: 0,
        fore: ch(4),
        back: ch(1),
        conn: 1,
    }
}

/// EXCHANGE_ID + CREATE_SESSION without RECLAIM_COMPLETE.
fn confirmed(c: &mut StateCore, clock: &ManualClock, owner: &'static [u8]) -> ClientId {
    let e = c
        .exchange_id(
            &Principal::default(),
            &Bytes::from_static(owner),
            [1; 8],
            false,
            clock.now(),
        )
        .map(|(ok, _)| ok)
        .expect("EXCHANGE_ID");
    c.create_session(
        &Principal::default(),
        &session_args(e.clientid, e.sequenceid),
        CallbackParams::default(),
        clock.now(),
    )
    .expect("CREATE_SESSION");
    e.clientid
}

#[test]
fn an_unconfirmed_record_is_gone_after_one_lease() {
    let clock = ManualClock::new();
    let mut c = core(Grace::none());
    let e = c
        .exchange_id(
            &Principal::default(),
            &Bytes::from_static(b"slow"),
            [1; 8],
            false,
            clock.now(),
        )
        .map(|(ok, _)| ok)
        .expect("EXCHANGE_ID");
    clock.advance(LEASE + Duration::from_millis(1));
    // Whether or not the timer has run: no courtesy lease for a record that holds
    // nothing.
    assert_eq!(
        c.create_session(
            &Principal::default(),
            &session_args(e.clientid, 1),
            CallbackParams::default(),
            clock.now()
        )
        .map(|_| ()),
        Err(SessionError::StaleClientId)
    );
    assert_eq!(c.sessions().counts(), (0, 0));

    // And the timer removes one nobody asks about.
    let e = c
        .exchange_id(
            &Principal::default(),
            &Bytes::from_static(b"slow"),
            [1; 8],
            false,
            clock.now(),
        )
        .map(|(ok, _)| ok)
        .expect("EXCHANGE_ID");
    clock.advance(LEASE);
    assert!(c.tick(clock.now()).is_empty(), "alive for one lease");
    assert_eq!(c.sessions().counts(), (1, 0));
    clock.advance(Duration::from_millis(1));
    let effects = c.tick(clock.now());
    assert_eq!(
        effects,
        vec![Effect::ClientReleased {
            client: e.clientid,
            reason: ReleaseReason::LeaseExpired,
            states: 0
        }]
    );
    assert_eq!(c.sessions().counts(), (0, 0));
}

#[test]
fn a_confirmed_client_keeps_its_courtesy_lease() {
    let clock = ManualClock::new();
    let mut c = core(Grace::none());
    confirmed(&mut c, &clock, b"steady");
    clock.advance(LEASE + Duration::from_millis(1));
    assert!(c.tick(clock.now()).is_empty());
    assert_eq!(c.sessions().counts(), (1, 1));
}

/// OPEN of `file` by owner "o" for reading and writing, denying nothing.
fn open(
    c: &mut StateCore,
    clock: &ManualClock,
    reclaim: bool,
    client: ClientId,
    file: FileId,
) -> Result<Stateid, StateError> {
    let req = OpenRequest {
        owner: b"o",
        file,
        access: SHARE_ACCESS_BOTH,
        deny: SHARE_DENY_NONE,
    };
    c.open(clock.now(), reclaim, client, req)
}

#[test]
fn open_before_reclaim_complete_is_grace_outside_grace() {
    let clock = ManualClock::new();
    let mut c = core(Grace::none());
    let a = confirmed(&mut c, &clock, b"a");
    let f = file_id(0, 1);
    assert!(!c.in_grace(clock.now()));
    assert_eq!(open(&mut c, &clock, false, a, f), Err(StateError::Grace));
    assert_eq!(
        c.check_locking(a, false, clock.now()),
        Err(StateError::Grace)
    );
    c.reclaim_complete(a, clock.now())
        .expect("RECLAIM_COMPLETE");
    open(&mut c, &clock, false, a, f).expect("OPEN after RECLAIM_COMPLETE");
}

#[test]
fn lock_before_reclaim_complete_is_grace_after_grace_timed_out() {
    let clock = ManualClock::new();
    let mut c = core(Grace::new(
        clock.now() + LEASE,
        vec![Bytes::from_static(b"a")],
    ));
    let a = confirmed(&mut c, &clock, b"a");
    let f = file_id(0, 1);
    // Reclaims its open during grace but never sends RECLAIM_COMPLETE.
    let opened = open(&mut c, &clock, true, a, f).expect("reclaim");
    clock.advance(LEASE);
    c.tick(clock.now());
    assert!(!c.in_grace(clock.now()));
    let req = LockRequest {
        file: f,
        lock_type: LockType::Write,
        offset: 0,
        length: 10,
        locker: Locker::NewOwner {
            open_stateid: opened,
            lock_owner: b"lo".to_vec(),
        },
    };
    assert_eq!(
        c.lock(clock.now(), false, a, req.clone()),
        Err(StateError::Grace)
    );
    c.reclaim_complete(a, clock.now())
        .expect("RECLAIM_COMPLETE");
    c.lock(clock.now(), false, a, req).expect("LOCK");
}

#[test]
fn reclaim_after_reclaim_complete_is_no_grace_even_in_grace() {
    let clock = ManualClock::new();
    let mut c = core(Grace::new(
        clock.now() + LEASE,
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
    ));
    let a = confirmed(&mut c, &clock, b"a");
    c.reclaim_complete(a, clock.now())
        .expect("RECLAIM_COMPLETE");
    assert!(c.in_grace(clock.now()), "b is still waited for");
    assert_eq!(
        open(&mut c, &clock, true, a, file_id(0, 1)),
        Err(StateError::NoGrace)
    );
}
