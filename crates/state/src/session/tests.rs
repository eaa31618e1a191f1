//! Unit tests of the client and session table.

use super::*;

fn table() -> SessionTable {
    table_with(true)
}

fn table_with(back_channel: bool) -> SessionTable {
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
            max_clients: 2,
            max_sessions_per_client: 2,
            server_fore: ch,
            server_back: ch,
            back_channel,
            reply_cache_bytes: usize::MAX,
        },
    )
}

fn ch(req: u32) -> ChannelAttrs {
    ChannelAttrs {
        max_request: 1 << 21,
        max_response: 1 << 21,
        max_response_cached: 1 << 20,
        max_ops: 5000,
        max_requests: req,
    }
}

fn create(clientid: ClientId, seq: u32, slots: u32, conn: u64) -> CreateSessionArgs {
    CreateSessionArgs {
        clientid,
        seq,
        flags: 0,
        fore: ch(slots),
        back: ch(1),
        conn,
    }
}

/// EXCHANGE_ID of a new client `owner` with verifier 1.
fn exchange(
    t: &mut SessionTable,
    owner: &'static [u8],
    now: Instant,
) -> Result<ExchangeIdOk, SessionError> {
    t.exchange_id(
        &Principal::default(),
        &Bytes::from_static(owner),
        [1; 8],
        false,
        now,
        |_| false,
    )
    .map(|(ok, _)| ok)
}

/// A client `owner` (verifier 1) and its session of 4 slots, created on connection 1
/// with `flags`.
fn client_with_session(
    t: &mut SessionTable,
    owner: &'static [u8],
    flags: u32,
    now: Instant,
) -> (ClientId, CreateSessionOutcome) {
    let e = exchange(t, owner, now).unwrap();
    let args = CreateSessionArgs {
        flags,
        ..create(e.clientid, 1, 4, 1)
    };
    let (out, _) = t
        .create_session(&Principal::default(), &args, CallbackParams::default(), now)
        .unwrap();
    (e.clientid, out)
}

fn seq(session: SessionId, slot: u32, seqid: u32, conn: u64) -> SequenceArgs {
    SequenceArgs {
        session,
        slot,
        seqid,
        request_hash: 1,
        nops: 2,
        request_len: 100,
        conn,
        cache_reply: None,
    }
}

#[test]
fn exchange_and_create_session() {
    let mut t = table();
    let now = Instant::now();
    let owner = Bytes::from_static(b"linux-host");
    let e = t
        .exchange_id(&Principal::default(), &owner, [1; 8], false, now, |_| false)
        .map(|(ok, _)| ok)
        .unwrap();
    assert!(!e.confirmed);
    // create with wrong seq
    assert_eq!(
        t.create_session(
            &Principal::default(),
            &create(e.clientid, 2, 200, 1),
            CallbackParams::default(),
            now
        )
        .unwrap_err(),
        SessionError::SeqMisordered
    );
    let (out, replaced) = t
        .create_session(
            &Principal::default(),
            &create(e.clientid, 1, 200, 1),
            CallbackParams::default(),
            now,
        )
        .unwrap();
    assert_eq!(replaced, None);
    assert_eq!(out.fore.max_requests, 64, "clamped to the server maximum");
    assert_eq!(out.fore.max_ops, 1000);
    let id = out.id;
    // replay of the same CREATE_SESSION returns the same session
    let (again, _) = t
        .create_session(
            &Principal::default(),
            &create(e.clientid, 1, 200, 1),
            CallbackParams::default(),
            now,
        )
        .unwrap();
    assert_eq!(again, out);
    assert!(t.session(&id).is_some());
    // same verifier again: same client, confirmed
    let e2 = t
        .exchange_id(&Principal::default(), &owner, [1; 8], false, now, |_| false)
        .map(|(ok, _)| ok)
        .unwrap();
    assert_eq!(e2.clientid, e.clientid);
    assert!(e2.confirmed);
    // client reboot: new verifier gives a new id; confirming it drops the old one
    let e3 = t
        .exchange_id(&Principal::default(), &owner, [2; 8], false, now, |_| false)
        .map(|(ok, _)| ok)
        .unwrap();
    assert_ne!(e3.clientid, e.clientid);
    let (_, replaced) = t
        .create_session(
            &Principal::default(),
            &create(e3.clientid, 1, 8, 2),
            CallbackParams::default(),
            now,
        )
        .unwrap();
    assert_eq!(replaced, Some(e.clientid));
    assert!(t.session(&id).is_none());
    assert_eq!(
        t.create_session(
            &Principal::default(),
            &create(e.clientid, 2, 8, 2),
            CallbackParams::default(),
            now
        )
        .unwrap_err(),
        SessionError::StaleClientId
    );
    // update with wrong verifier
    assert_eq!(
        t.exchange_id(&Principal::default(), &owner, [9; 8], true, now, |_| false)
            .map(|(ok, _)| ok)
            .unwrap_err(),
        SessionError::NotSame
    );
}

#[test]
fn lease_expiry_and_destroy() {
    let mut t = table();
    let now = Instant::now();
    let (cid, out) = client_with_session(&mut t, b"a", 0, now);
    let id = out.id;
    assert_eq!(
        t.destroy_client(cid).unwrap_err(),
        SessionError::ClientIdBusy
    );
    t.destroy_session(&id).unwrap();
    assert_eq!(
        t.destroy_session(&id).unwrap_err(),
        SessionError::BadSession
    );
    let later = now + Duration::from_secs(100);
    assert_eq!(t.expire(Duration::from_secs(60), later), vec![(cid, true)]);
    assert_eq!(t.counts(), (0, 0));
    // limits: two clients
    exchange(&mut t, b"x", now).unwrap();
    exchange(&mut t, b"y", now).unwrap();
    assert_eq!(
        exchange(&mut t, b"z", now).unwrap_err(),
        SessionError::Resource
    );
}

#[test]
fn sequence_renews_binds_and_checks_limits() {
    let mut t = table();
    let t0 = Instant::now();
    let (_, out) = client_with_session(&mut t, b"s", 0, t0);
    let t1 = t0 + Duration::from_secs(50);
    let ok = t.sequence(&seq(out.id, 0, 1, 7), t1).unwrap();
    assert_eq!(ok.verdict, SlotVerdict::Execute);
    assert_eq!(ok.highest_slot, 3);
    assert_eq!(t.connections(&out.id), vec![1, 7]);
    // Renewed at t1: not expired 60 s after t0 + 50 s - 1.
    assert!(t
        .expire(Duration::from_secs(60), t1 + Duration::from_secs(59))
        .is_empty());
    let mut too_many = seq(out.id, 1, 1, 7);
    too_many.nops = 1001;
    assert_eq!(
        t.sequence(&too_many, t1).unwrap_err(),
        SessionError::TooManyOps
    );
    let mut too_big = seq(out.id, 1, 1, 7);
    too_big.request_len = 1 << 21;
    assert_eq!(
        t.sequence(&too_big, t1).unwrap_err(),
        SessionError::ReqTooBig
    );
    assert_eq!(
        t.sequence(&seq([9; 16], 0, 1, 7), t1).unwrap_err(),
        SessionError::BadSession
    );
    t.finish_slot(&out.id, 0, Some(Bytes::from_static(b"r").into()));
    let again = t.sequence(&seq(out.id, 0, 1, 8), t1).unwrap();
    assert_eq!(
        again.verdict,
        SlotVerdict::Replay(Bytes::from_static(b"r").into())
    );
    t.connection_closed(1);
    assert_eq!(t.connections(&out.id), vec![7, 8]);
}

fn bind_all(t: &mut SessionTable, id: &SessionId) -> Vec<Result<ConnDir, SessionError>> {
    [
        ConnDirRequest::Fore,
        ConnDirRequest::ForeOrBoth,
        ConnDirRequest::BackOrBoth,
        ConnDirRequest::Back,
    ]
    .into_iter()
    .map(|d| t.bind_conn(id, d, 5, Instant::now()))
    .collect()
}

#[test]
fn without_a_back_channel_nothing_claims_one() {
    let mut t = table_with(false);
    let now = Instant::now();
    let (_, out) = client_with_session(&mut t, b"b", CREATE_SESSION4_FLAG_CONN_BACK_CHAN, now);
    assert_eq!(out.flags, 0, "CONN_BACK_CHAN is not granted");
    assert_eq!(
        bind_all(&mut t, &out.id),
        vec![
            Ok(ConnDir::Fore),
            Ok(ConnDir::Fore),
            Ok(ConnDir::Fore),
            Err(SessionError::Inval)
        ]
    );
    assert_eq!(t.connections(&out.id), vec![1, 5]);
    assert_eq!(
        t.bind_conn(&[0; 16], ConnDirRequest::Fore, 5, now),
        Err(SessionError::BadSession)
    );
}

#[test]
fn with_a_back_channel_binding_grants_what_was_asked() {
    let mut t = table_with(true);
    let now = Instant::now();
    let (_, out) =
        client_with_session(&mut t, b"b", CREATE_SESSION4_FLAG_CONN_BACK_CHAN | 0x1, now);
    assert_eq!(
        out.flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        "no PERSIST unless the server is configured for it"
    );
    assert_eq!(
        bind_all(&mut t, &out.id),
        vec![
            Ok(ConnDir::Fore),
            Ok(ConnDir::Both),
            Ok(ConnDir::Both),
            Ok(ConnDir::Back)
        ]
    );
}

/// The reply cache is a budget shared by all sessions: slots beyond it are not granted,
/// a session that cannot get one slot waits (DELAY), and a destroyed session gives its
/// share back.
#[test]
fn slots_are_granted_within_the_reply_cache_budget() {
    let mut t = table();
    let per_slot = 1 << 16; // the server's ca_maxresponsesize_cached in `table()`
    t.limits.reply_cache_bytes = 10 * per_slot;
    let now = Instant::now();
    let (_, a) = client_with_session(&mut t, b"a", 0, now);
    assert_eq!(a.fore.max_requests, 4);
    let b = exchange(&mut t, b"b", now).unwrap();
    let (b1, _) = t
        .create_session(
            &Principal::default(),
            &create(b.clientid, 1, 200, 2),
            CallbackParams::default(),
            now,
        )
        .unwrap();
    assert_eq!(b1.fore.max_requests, 6, "only what is left of the budget");
    assert_eq!(t.reply_cache_reserved(), 10 * per_slot);
    assert_eq!(
        t.create_session(
            &Principal::default(),
            &create(b.clientid, 2, 4, 2),
            CallbackParams::default(),
            now
        )
        .unwrap_err(),
        SessionError::Delay
    );
    t.destroy_session(&a.id).unwrap();
    let (b2, _) = t
        .create_session(
            &Principal::default(),
            &create(b.clientid, 2, 4, 2),
            CallbackParams::default(),
            now,
        )
        .unwrap();
    assert_eq!(b2.fore.max_requests, 4);
    t.destroy_session(&b1.id).unwrap();
    t.destroy_session(&b2.id).unwrap();
    assert_eq!(t.reply_cache_reserved(), 0);
}

// ---- durable sessions (ADR 0022) ------------------------------------------------------

/// PERSIST is granted only when the server offers it and the client asks; only such
/// sessions have durable records.
#[test]
fn persist_is_granted_only_when_offered_and_asked() {
    let mut t = table();
    t.set_persistence(true);
    let now = Instant::now();
    let (c1, asked) = client_with_session(
        &mut t,
        b"p",
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        now,
    );
    assert_eq!(
        asked.flags,
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    );
    assert!(t.session(&asked.id).unwrap().persistent);
    let (client, session) = t.durable(&asked.id).expect("durable records");
    assert_eq!(client.id, c1);
    assert_eq!(client.owner, Bytes::from_static(b"p"));
    assert_eq!(client.create_seq, 2);
    assert_eq!(client.last_create, Some((1, asked.clone())));
    assert_eq!(session.fore, asked.fore);
    assert_eq!(session.flags, asked.flags);
    assert!(t.has_persistent_session(c1));
    let (c2, not_asked) = client_with_session(&mut t, b"q", 0, now);
    assert_eq!(not_asked.flags, 0);
    assert!(t.durable(&not_asked.id).is_none());
    assert!(!t.has_persistent_session(c2));
}

/// A restarted table restores a persistent client and session: a retransmission of
/// the last request of a slot is answered with the stored reply byte for byte, the
/// next sequence id executes, the client is told to reclaim until RECLAIM_COMPLETE,
/// and the first request rebinds the back channel once.
#[test]
fn a_restored_session_replays_its_stored_replies() {
    let mut before = table();
    before.set_persistence(true);
    let now = Instant::now();
    let (cid, out) = client_with_session(
        &mut before,
        b"r",
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        now,
    );
    assert_eq!(
        before.sequence(&seq(out.id, 0, 1, 1), now).unwrap().verdict,
        SlotVerdict::Execute
    );
    let reply = Bytes::from_static(b"the original reply");
    before.finish_slot(&out.id, 0, Some(reply.clone().into()));
    let (client, session) = before.durable(&out.id).unwrap();
    let slots = vec![DurableSlot {
        slot: 0,
        seqid: 1,
        request_hash: seq(out.id, 0, 1, 1).request_hash,
        reply: Some(reply.clone()),
    }];

    // The next instance (another boot epoch).
    let mut after = SessionTable::new(8, before.limits);
    assert_eq!(
        after.restore_session(session.clone(), slots.clone()),
        Err(SessionError::StaleClientId),
        "a session needs its client"
    );
    after.restore_client(client, now);
    after.restore_session(session, slots).unwrap();
    assert_eq!(after.counts(), (1, 1));
    assert_eq!(after.confirmed_owners(), vec![Bytes::from_static(b"r")]);

    let first = after.sequence(&seq(out.id, 0, 1, 9), now).unwrap();
    assert_eq!(first.verdict, SlotVerdict::Replay(reply.into()));
    assert!(first.session.persistent);
    assert!(first.reclaim_needed);
    assert!(first.rebind_back_channel.is_some(), "bind the back channel");
    let next = after.sequence(&seq(out.id, 0, 2, 9), now).unwrap();
    assert_eq!(next.verdict, SlotVerdict::Execute);
    assert!(next.rebind_back_channel.is_none(), "only once");
    assert_eq!(
        after.sequence(&seq(out.id, 1, 2, 9), now).unwrap().verdict,
        SlotVerdict::Misordered,
        "untouched slots start fresh"
    );
    after.client_mut(cid).unwrap().reclaim_complete = true;
    after.finish_slot(&out.id, 0, None);
    let done = after.sequence(&seq(out.id, 0, 3, 9), now).unwrap();
    assert!(!done.reclaim_needed, "RECLAIM_COMPLETE ends it");
    // The restored client's next CREATE_SESSION continues its sequence.
    assert_eq!(
        after
            .create_session(
                &Principal::default(),
                &create(cid, 2, 4, 9),
                CallbackParams::default(),
                now
            )
            .map(|(o, _)| o.seq),
        Ok(2)
    );
    // EXCHANGE_ID of the same incarnation finds the restored record (case 2).
    let e = exchange(&mut after, b"r", now).unwrap();
    assert_eq!((e.clientid, e.confirmed), (cid, true));
}

/// A restored client replaces a record of the same owner (the store's later record
/// wins), and the slot table restores replies and uncached outcomes.
#[test]
fn restore_replaces_the_same_owner_and_keeps_uncached_slots() {
    let mut t = table();
    let now = Instant::now();
    let (old, _) = client_with_session(&mut t, b"o", 0, now);
    t.restore_client(
        DurableClient {
            id: (9u64 << 32) | 1,
            owner: Bytes::from_static(b"o"),
            verifier: [2; 8],
            principal: Principal::default(),
            create_seq: 5,
            last_create: None,
        },
        now,
    );
    assert!(!t.client_exists(old));
    assert_eq!(t.counts(), (1, 0));
    let mut slots = SlotTable::new(2);
    slots.restore(1, 7, 3, None);
    slots.restore(5, 1, 1, None);
    assert_eq!(slots.begin(1, 7, 3), SlotVerdict::RetryUncached);
    assert_eq!(slots.begin(1, 8, 4), SlotVerdict::Execute);
}

/// A restored session's back channel is bound once: by BIND_CONN_TO_SESSION if the
/// client sends one first, else by its first SEQUENCE.
#[test]
fn a_restored_back_channel_is_bound_once() {
    let mut before = table();
    before.set_persistence(true);
    let now = Instant::now();
    let (_, out) = client_with_session(
        &mut before,
        b"bc",
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        now,
    );
    let (client, session) = before.durable(&out.id).unwrap();
    let mut after = SessionTable::new(8, before.limits);
    after.restore_client(client, now);
    after.restore_session(session, []).unwrap();
    assert_eq!(
        after.bind_conn(&out.id, ConnDirRequest::BackOrBoth, 3, now),
        Ok(ConnDir::Both)
    );
    let ok = after.sequence(&seq(out.id, 0, 1, 3), now).unwrap();
    assert_eq!(ok.verdict, SlotVerdict::Execute);
    assert!(ok.rebind_back_channel.is_none(), "bound already");
}
