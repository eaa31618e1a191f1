//! The session back channel over real TCP (RFC 8881 §2.10.3.1, §18.34, §18.36, §20.9;
//! ADR 0016): a test peer that is both the NFS client and the callback service on one
//! connection, as the Linux client is, answering (or ignoring) the server's CALLs.

mod common;

use common::peer::*;
use common::*;
use std::time::Duration;
use txnfs_server::callback::{CallbackFailure, PathState};
use txnfs_server::nfs::*;
use txnfs_server::Config;

/// BIND_CONN_TO_SESSION of the connection it is sent on to `sid`, in `dir`.
fn bind_conn(sid: sessionid4, dir: channel_dir_from_client4) -> nfs_argop4 {
    nfs_argop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4args {
        bctsa_sessid: sid,
        bctsa_dir: dir,
        bctsa_use_conn_in_rdma_mode: false,
    })
}

/// A new connection that binds itself to `sid` for both channels, and the reply.
async fn bound_for_both(srv: &TestServer, sid: sessionid4) -> (Peer, COMPOUND4res) {
    let mut peer = Peer::connect(srv.addr, true).await;
    let r = peer
        .compound(vec![bind_conn(
            sid,
            channel_dir_from_client4::CDFC4_BACK_OR_BOTH,
        )])
        .await;
    (peer, r)
}

/// The next call on `peer` is the back channel's probe, and the path is up after it.
async fn probed_and_up(peer: &mut Peer, srv: &TestServer, sid: &sessionid4, on: &str) {
    let call = peer.next_call(T).await;
    assert_probe(&call.unwrap_or_else(|| panic!("no probe on {on}")));
    wait_path(srv, sid, PathState::Up).await;
}

/// The server's first CB_SEQUENCE of `sid` (sequence id 1) arrives on `peer`, and the
/// server's call succeeds.
async fn first_callback_arrives_on(peer: &mut Peer, srv: &TestServer, sid: sessionid4, on: &str) {
    let server = srv.server.clone();
    let task = tokio::spawn(async move { server.callback_sequence(&sid).await });
    let call = peer.next_call(T).await;
    let (_, seq) = cb_sequence_of(&call.unwrap_or_else(|| panic!("no CB_COMPOUND on {on}")));
    assert_eq!(seq.csa_sequenceid, 1);
    assert_eq!(task.await.expect("task"), Ok(vec![]));
}

#[tokio::test]
async fn back_channel_on_the_fore_connection_is_probed_and_up() {
    let srv = start_memory_server().await;
    let mut p = Peer::connect(srv.addr, true).await;
    let (sid, flags) = new_session(&mut p, b"bc-up", true).await;
    assert_eq!(flags & 0x2, 0x2, "CONN_BACK_CHAN granted");
    let probe = p
        .next_call(T)
        .await
        .expect("the server probes the back channel");
    assert_probe(&probe);
    wait_path(&srv, &sid, PathState::Up).await;
    assert_eq!(
        seq_flags(&mut p, sid, 1).await,
        0,
        "a working back channel is not down"
    );
    assert_eq!(p.calls.len(), 1, "one probe only: {:?}", p.calls);
}

#[tokio::test]
async fn a_silent_back_channel_is_reported_down_in_sequence() {
    let srv = start_server(|dir| Config {
        callback_timeout_ms: Some(200),
        ..memory_config(dir, false)
    })
    .await;
    let mut p = Peer::connect(srv.addr, false).await;
    let (sid, _) = new_session(&mut p, b"bc-silent", true).await;
    assert_probe(&p.next_call(T).await.expect("a probe is sent"));
    wait_path(&srv, &sid, PathState::Down).await;
    let flags = seq_flags(&mut p, sid, 1).await;
    assert_eq!(
        flags,
        SEQ4_STATUS_CB_PATH_DOWN_SESSION | SEQ4_STATUS_CB_PATH_DOWN,
        "the session's and the client's only back channel is down"
    );
    // A failed callback finds the path down too, and the slot is not advanced.
    let s = srv.server.callbacks.session(&sid).expect("back channel");
    let r = srv.server.callback_sequence(&sid).await;
    assert!(matches!(r, Err(CallbackFailure::Rpc(_))), "{r:?}");
    assert_eq!(s.next_seqid().await, 1);
}

#[tokio::test]
async fn a_probe_still_waiting_for_its_answer_is_not_reported_down() {
    // The Linux client may answer the probe after its first SEQUENCE: a pending probe
    // must not make the server call a working back channel down.
    let srv = start_server(|dir| Config {
        callback_timeout_ms: Some(30_000),
        ..memory_config(dir, false)
    })
    .await;
    let mut p = Peer::connect(srv.addr, false).await;
    let (sid, _) = new_session(&mut p, b"bc-pending", true).await;
    let probe = p.next_call(T).await.expect("a probe is sent");
    assert_probe(&probe);
    let s = srv.server.callbacks.session(&sid).expect("back channel");
    assert_eq!(s.path(), PathState::Probing);
    assert_eq!(seq_flags(&mut p, sid, 1).await, 0);
    // The late answer brings the path up.
    p.answer_call(&probe).await;
    wait_path(&srv, &sid, PathState::Up).await;
    assert_eq!(seq_flags(&mut p, sid, 2).await, 0);
}

#[tokio::test]
async fn cb_sequence_round_trips_and_advances_the_slot() {
    let srv = start_memory_server().await;
    let mut p = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut p, b"bc-seq", true).await;
    assert_probe(&p.next_call(T).await.expect("probe"));
    for want_seq in 1..=3u32 {
        let server = srv.server.clone();
        let task = tokio::spawn(async move { server.callback_sequence(&sid).await });
        let call = p.next_call(T).await.expect("a CB_COMPOUND");
        let (minor, seq) = cb_sequence_of(&call);
        assert_eq!(minor, 1);
        assert_eq!(seq.csa_sessionid, sid);
        assert_eq!(seq.csa_slotid, 0);
        assert_eq!(
            seq.csa_sequenceid, want_seq,
            "the back-channel slot advances"
        );
        assert!(!seq.csa_cachethis);
        let r = task.await.expect("task");
        assert_eq!(r, Ok(vec![]), "nothing after CB_SEQUENCE");
    }
    let s = srv.server.callbacks.session(&sid).expect("back channel");
    assert_eq!(s.next_seqid().await, 4);
    assert_eq!(s.path(), PathState::Up);
    assert_eq!(seq_flags(&mut p, sid, 1).await, 0);
}

#[tokio::test]
async fn a_session_without_a_back_channel_gets_no_flags_and_no_callbacks() {
    let srv = start_server(|dir| Config {
        callback_timeout_ms: Some(200),
        ..memory_config(dir, false)
    })
    .await;
    let mut p = Peer::connect(srv.addr, true).await;
    let (sid, flags) = new_session(&mut p, b"bc-none", false).await;
    assert_eq!(flags, 0);
    assert!(srv.server.callbacks.session(&sid).is_none());
    assert_eq!(
        srv.server.callback_sequence(&sid).await,
        Err(CallbackFailure::NoBackChannel)
    );
    // Well past the callback timeout: still nothing sent, still no flags.
    assert!(p.next_call(Duration::from_millis(600)).await.is_none());
    assert_eq!(seq_flags(&mut p, sid, 1).await, 0);
    assert!(p.calls.is_empty(), "{:?}", p.calls);
}

#[tokio::test]
async fn bind_conn_to_session_for_the_back_channel_is_probed() {
    let srv = start_memory_server().await;
    let mut fore = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut fore, b"bc-bind", false).await;
    let (mut back, r) = bound_for_both(&srv, sid).await;
    let nfs_resop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4res::NFS4_OK(ok)) = &r.resarray[0]
    else {
        panic!("BIND_CONN_TO_SESSION {:?}", r.resarray)
    };
    assert_eq!(ok.bctsr_dir, channel_dir_from_server4::CDFS4_BOTH);
    probed_and_up(&mut back, &srv, &sid, "the bound connection").await;
    assert!(fore.calls.is_empty(), "nothing on the fore-only connection");
    // The callback goes to the bound connection.
    first_callback_arrives_on(&mut back, &srv, sid, "the bound connection").await;
    assert_eq!(seq_flags(&mut fore, sid, 1).await, 0);
}

/// A client that lost its connection binds a new one, and the server may not have seen
/// the old one close yet: callbacks go to the connection bound last.
#[tokio::test]
async fn a_callback_goes_to_the_connection_bound_last() {
    let srv = start_memory_server().await;
    let mut first = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut first, b"bc-last", true).await;
    probed_and_up(&mut first, &srv, &sid, "the first connection").await;
    let (mut second, r) = bound_for_both(&srv, sid).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    probed_and_up(&mut second, &srv, &sid, "the second connection").await;
    first_callback_arrives_on(&mut second, &srv, sid, "the connection bound last").await;
    assert!(
        first.next_call(Duration::from_millis(200)).await.is_none(),
        "nothing on the connection bound first"
    );
}

#[tokio::test]
async fn closing_the_back_connection_reports_the_path_down() {
    let srv = start_memory_server().await;
    let mut fore = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut fore, b"bc-close", false).await;
    let mut back = Peer::connect(srv.addr, true).await;
    let r = back
        .compound(vec![bind_conn(sid, channel_dir_from_client4::CDFC4_BACK)])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_probe(&back.next_call(T).await.expect("probe"));
    wait_path(&srv, &sid, PathState::Up).await;
    drop(back);
    wait_path(&srv, &sid, PathState::Down).await;
    assert_eq!(
        seq_flags(&mut fore, sid, 1).await,
        SEQ4_STATUS_CB_PATH_DOWN_SESSION | SEQ4_STATUS_CB_PATH_DOWN
    );
}

#[tokio::test]
async fn backchannel_ctl_changes_the_program_and_probes_again() {
    let srv = start_memory_server().await;
    let mut p = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut p, b"bc-ctl", true).await;
    assert_probe(&p.next_call(T).await.expect("first probe"));
    let r = p
        .compound(vec![
            sequence(sid, 0, 1, false),
            nfs_argop4::OP_BACKCHANNEL_CTL(BACKCHANNEL_CTL4args {
                bca_cb_program: CB_PROG + 1,
                bca_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let c = p
        .next_call(T)
        .await
        .expect("a probe with the new parameters");
    assert_eq!((c.prog, c.vers, c.proc_num), (CB_PROG + 1, 1, 0));
    assert_eq!(c.cred.flavor, 0, "AUTH_NONE now");
    wait_path(&srv, &sid, PathState::Up).await;
    assert_eq!(seq_flags(&mut p, sid, 2).await, 0);
}
