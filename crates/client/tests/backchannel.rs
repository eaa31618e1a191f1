//! The client's back channel against the real txnfs server in process: the server's
//! CB_NULL probe and CB_SEQUENCEs are answered by the client's callback service, on the
//! connection the client opened, also after the connection was cut and re-established.

mod common;

use common::*;
use std::time::{Duration, Instant};
use txnfs_server::callback::PathState;
use txnfs_server::nfs::*;

/// Wait until the server's probe of the session's back channel has an answer.
async fn path_state(srv: &TestServer, sid: &[u8; 16]) -> PathState {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = srv
            .server
            .callbacks
            .session(sid)
            .map(|s| s.path())
            .unwrap_or(PathState::Down);
        if p != PathState::Probing || Instant::now() > deadline {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Send a CB_COMPOUND of CB_SEQUENCE alone; the server checked the client's CB_SEQUENCE
/// answer (session, slot, sequence id) and returns what followed it (nothing). Returns
/// the sequence id the slot moved on to.
async fn callback_sequence(srv: &TestServer, sid: &[u8; 16]) -> u32 {
    let r: Vec<nfs_cb_resop4> = srv
        .server
        .callback_sequence(sid)
        .await
        .expect("CB_SEQUENCE answered NFS4_OK");
    assert!(r.is_empty(), "{r:?}");
    srv.server
        .callbacks
        .session(sid)
        .expect("session")
        .next_seqid()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_reaches_the_client_on_its_back_channel() {
    let srv = start_memory_server().await;
    let client = connect(srv.addr, true).await;
    assert!(client.back_channel(), "CONN_BACK_CHAN granted");
    let sid = client.session_id();
    assert_eq!(path_state(&srv, &sid).await, PathState::Up);
    assert!(
        client.callback_stats().cb_null >= 1,
        "the probe was answered"
    );

    // Three CB_SEQUENCEs in a row: each answered OK, sequence ids 1, 2, 3 in slot 0.
    for want in 2..=4 {
        assert_eq!(callback_sequence(&srv, &sid).await, want);
    }
    let st = client.callback_stats();
    assert_eq!(st.cb_compound, 3);
    assert_eq!(st.ops.get("CB_SEQUENCE"), Some(&3));
    assert_eq!(st.replays, 0);

    // The connection breaks: the client reconnects on its next call and binds the new
    // connection (BIND_CONN_TO_SESSION), so callbacks reach it again.
    client.sever_connection().await;
    let fs = txnfs_client::Fs::new(client.clone());
    for r in fs.vgetattrs(&[""]).await {
        r.expect("getattr after reconnect");
    }
    let stats = client.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert!(stats.binds >= 1, "the new connection was bound: {stats:?}");
    assert_eq!(client.session_id(), sid, "same session");
    assert_eq!(callback_sequence(&srv, &sid).await, 5);
    client.close().await.expect("close");
}

/// Two clients, each with its own back channel: a callback goes to the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_has_its_own_back_channel() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let b = connect(srv.addr, true).await;
    let (sa, sb) = (a.session_id(), b.session_id());
    assert_ne!(sa, sb);
    assert_eq!(path_state(&srv, &sa).await, PathState::Up);
    assert_eq!(path_state(&srv, &sb).await, PathState::Up);
    assert_eq!(callback_sequence(&srv, &sb).await, 2);
    assert_eq!(b.callback_stats().cb_compound, 1);
    assert_eq!(a.callback_stats().cb_compound, 0);
    a.close().await.expect("close a");
    b.close().await.expect("close b");
}

/// When SEQUENCE reports the back channel down (SEQ4_STATUS_CB_PATH_DOWN_SESSION), the
/// client binds its connection again. Here the path goes down because BACKCHANNEL_CTL
/// names a program the client does not serve (the server's probe gets PROG_UNAVAIL);
/// naming ours again brings it back up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_reported_down_is_bound_again() {
    let srv = start_memory_server().await;
    let client = connect(srv.addr, true).await;
    let sid = client.session_id();
    assert_eq!(path_state(&srv, &sid).await, PathState::Up);
    let ctl = |prog: u32| {
        let mut q = txnfs_client::Compound::new();
        q.op(nfs_argop4::OP_BACKCHANNEL_CTL(BACKCHANNEL_CTL4args {
            bca_cb_program: prog,
            bca_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
        }));
        q
    };
    let r = client
        .compound(&ctl(0x4000_0099))
        .await
        .expect("BACKCHANNEL_CTL");
    assert!(r.failed().is_none(), "{r:?}");
    assert_eq!(path_state(&srv, &sid).await, PathState::Down);
    let binds = client.stats().binds;
    // The next SEQUENCE carries the flag; the client rebinds right after it.
    client
        .compound(&txnfs_client::Compound::new())
        .await
        .expect("SEQUENCE");
    assert_eq!(client.stats().binds, binds + 1, "rebound on CB_PATH_DOWN");
    // At most one rebind per 5 s while the path stays down.
    client
        .compound(&txnfs_client::Compound::new())
        .await
        .expect("SEQUENCE");
    assert_eq!(client.stats().binds, binds + 1);
    let r = client
        .compound(&ctl(txnfs_client::callback::CB_PROGRAM))
        .await;
    assert!(r.expect("BACKCHANNEL_CTL").failed().is_none());
    assert_eq!(path_state(&srv, &sid).await, PathState::Up);
    client.close().await.expect("close");
}
