//! Unit tests of SETCLIENTID / SETCLIENTID_CONFIRM / RENEW (RFC 7530 §16.29, §16.33.5,
//! §16.34.5), case by case.

use super::*;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(90);

fn table() -> SessionTable {
    let ch = ChannelAttrs {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 1 << 16,
        max_ops: 1000,
        max_requests: 64,
    };
    SessionTable::new(
        7,
        SessionLimits {
            max_clients: 8,
            max_sessions_per_client: 2,
            server_fore: ch,
            server_back: ch,
            back_channel: true,
            reply_cache_bytes: usize::MAX,
        },
    )
}

fn me() -> Principal {
    Principal::default()
}

fn other() -> Principal {
    Principal {
        uid: 1000,
        gid: 1000,
        gids: vec![],
    }
}

fn cb(port: u8) -> V40Callback {
    V40Callback {
        program: 0x4000_0000,
        netid: "tcp".into(),
        addr: format!("127.0.0.1.0.{port}"),
        ident: 1,
    }
}

fn setclientid(
    t: &mut SessionTable,
    p: &Principal,
    verifier: u8,
    port: u8,
    now: Instant,
    has_state: bool,
) -> Result<SetClientIdOk, SessionError> {
    t.setclientid(
        p,
        &Bytes::from_static(b"linux-client"),
        [verifier; 8],
        cb(port),
        now,
        |_| has_state,
    )
    .map(|(ok, _)| ok)
}

#[test]
fn a_new_client_is_confirmed_once_and_a_retransmitted_confirm_is_ok() {
    let mut t = table();
    let now = Instant::now();
    let ok = setclientid(&mut t, &me(), 1, 1, now, false).unwrap();
    assert!(!t.is_confirmed(ok.clientid));
    // RENEW of an unconfirmed client id.
    assert_eq!(
        t.renew_v40(ok.clientid, now),
        Err(SessionError::StaleClientId)
    );
    // A wrong verifier confirms nothing.
    assert_eq!(
        t.setclientid_confirm(&me(), ok.clientid, [9; 8], LEASE, now),
        Err(SessionError::StaleClientId)
    );
    let c = t
        .setclientid_confirm(&me(), ok.clientid, ok.confirm, LEASE, now)
        .unwrap();
    assert!(c.changed && c.replaced.is_none() && c.callback == cb(1));
    assert!(t.is_confirmed(ok.clientid) && t.is_v40(ok.clientid));
    let again = t
        .setclientid_confirm(&me(), ok.clientid, ok.confirm, LEASE, now)
        .unwrap();
    assert!(!again.changed);
    assert_eq!(t.renew_v40(ok.clientid, now), Ok(()));
    assert_eq!(t.renew_v40(12345, now), Err(SessionError::StaleClientId));
}

#[test]
fn same_verifier_updates_the_callback_under_the_same_client_id() {
    let mut t = table();
    let now = Instant::now();
    let first = setclientid(&mut t, &me(), 1, 1, now, false).unwrap();
    t.setclientid_confirm(&me(), first.clientid, first.confirm, LEASE, now)
        .unwrap();
    let upd = setclientid(&mut t, &me(), 1, 2, now, true).unwrap();
    assert_eq!(upd.clientid, first.clientid);
    assert_ne!(upd.confirm, first.confirm);
    // Not in force before its confirmation.
    assert_eq!(t.v40_callback(first.clientid), Some(&cb(1)));
    let c = t
        .setclientid_confirm(&me(), upd.clientid, upd.confirm, LEASE, now)
        .unwrap();
    assert!(c.changed && c.replaced.is_none());
    assert_eq!(t.v40_callback(first.clientid), Some(&cb(2)));
}

#[test]
fn a_new_verifier_is_a_restart_that_replaces_the_old_client_on_confirm() {
    let mut t = table();
    let now = Instant::now();
    let old = setclientid(&mut t, &me(), 1, 1, now, false).unwrap();
    t.setclientid_confirm(&me(), old.clientid, old.confirm, LEASE, now)
        .unwrap();
    let new = setclientid(&mut t, &me(), 2, 1, now, true).unwrap();
    assert_ne!(new.clientid, old.clientid);
    // The old incarnation lives until the new one is confirmed.
    assert!(t.is_confirmed(old.clientid));
    let c = t
        .setclientid_confirm(&me(), new.clientid, new.confirm, LEASE, now)
        .unwrap();
    assert_eq!(c.replaced, Some(old.clientid));
    assert!(!t.client_exists(old.clientid));
    assert_eq!(
        t.renew_v40(old.clientid, now),
        Err(SessionError::StaleClientId)
    );
}

#[test]
fn another_principal_gets_clid_inuse_while_the_client_holds_state() {
    let mut t = table();
    let now = Instant::now();
    let ok = setclientid(&mut t, &me(), 1, 1, now, false).unwrap();
    t.setclientid_confirm(&me(), ok.clientid, ok.confirm, LEASE, now)
        .unwrap();
    assert_eq!(
        setclientid(&mut t, &other(), 1, 1, now, true),
        Err(SessionError::ClidInUse)
    );
    // Confirming someone else's record is refused too.
    let again = setclientid(&mut t, &me(), 1, 3, now, true).unwrap();
    assert_eq!(
        t.setclientid_confirm(&other(), again.clientid, again.confirm, LEASE, now),
        Err(SessionError::ClidInUse)
    );
    // Holding nothing, the record is simply replaced.
    let taken = setclientid(&mut t, &other(), 1, 1, now, false).unwrap();
    assert_ne!(taken.clientid, ok.clientid);
}

#[test]
fn an_unconfirmed_record_is_replaced_and_expires_after_a_lease() {
    let mut t = table();
    let now = Instant::now();
    let a = setclientid(&mut t, &me(), 1, 1, now, false).unwrap();
    let b = setclientid(&mut t, &me(), 2, 1, now, false).unwrap();
    assert!(!t.client_exists(a.clientid));
    assert_eq!(
        t.setclientid_confirm(&me(), b.clientid, b.confirm, LEASE, now + LEASE * 2),
        Err(SessionError::StaleClientId)
    );
}
