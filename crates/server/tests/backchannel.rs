//! The session back channel over real TCP (RFC 8881 §2.10.3.1, §18.34, §18.36, §20.9;
//! ADR 0016): a test peer that is both the NFS client and the callback service on one
//! connection, as the Linux client is, answering (or ignoring) the server's CALLs.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txnfs_rpc::msg::{
    encode_reply_header, AcceptedStatus, OpaqueAuth, ReplyHeader, AUTH_SYS, MSG_CALL, MSG_REPLY,
};
use txnfs_rpc::{decode_reply, encode_call, read_record, record, AuthSys};
use txnfs_server::callback::{CallbackFailure, PathState};
use txnfs_server::nfs::*;
use txnfs_server::Config;
use txnfs_xdr::{get_u32, Decode, Encode};

const CB_PROG: u32 = 0x4000_0123;
const T: Duration = Duration::from_secs(10);

/// A CALL the server sent to the peer.
#[derive(Debug, Clone)]
struct ServerCall {
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    cred: OpaqueAuth,
    args: Bytes,
}

/// One NFS client connection that also serves the callback program.
struct Peer {
    s: TcpStream,
    xid: u32,
    /// Answer the server's CALLs (CB_NULL, CB_COMPOUND with CB_SEQUENCE) or stay silent.
    answer: bool,
    /// Every CALL received, in order.
    calls: Vec<ServerCall>,
    /// CALLs received but not yet taken by `next_call`.
    unseen: VecDeque<ServerCall>,
}

impl Peer {
    async fn connect(addr: SocketAddr, answer: bool) -> Peer {
        Peer {
            s: TcpStream::connect(addr).await.expect("connect"),
            xid: 1,
            answer,
            calls: Vec::new(),
            unseen: VecDeque::new(),
        }
    }

    /// Read one record: a reply to us (xid, body) or a CALL from the server (handled).
    async fn read(&mut self, wait: Duration) -> Option<(u32, Bytes)> {
        let rec = tokio::time::timeout(wait, read_record(&mut self.s, 4 << 20))
            .await
            .ok()?
            .expect("a record");
        let mut b = rec.clone();
        let xid = get_u32(&mut b).expect("xid");
        match get_u32(&mut b).expect("msg_type") {
            MSG_REPLY => {
                let (x, r) = decode_reply(rec).expect("reply decodes");
                assert_eq!(x, xid);
                Some((xid, r.expect("accepted reply")))
            }
            MSG_CALL => {
                assert_eq!(get_u32(&mut b).expect("rpcvers"), 2);
                let prog = get_u32(&mut b).expect("prog");
                let vers = get_u32(&mut b).expect("vers");
                let proc_num = get_u32(&mut b).expect("proc");
                let cred = OpaqueAuth::decode(&mut b).expect("cred");
                let _verf = OpaqueAuth::decode(&mut b).expect("verf");
                let call = ServerCall {
                    xid,
                    prog,
                    vers,
                    proc_num,
                    cred,
                    args: b,
                };
                self.calls.push(call.clone());
                self.unseen.push_back(call.clone());
                if self.answer {
                    self.answer_call(&call).await;
                }
                Some((0, Bytes::new()))
            }
            t => panic!("unknown msg_type {t}"),
        }
    }

    /// What a working callback service answers: CB_NULL empty; CB_COMPOUND with
    /// CB_SEQUENCE echoed as NFS4_OK.
    async fn answer_call(&mut self, call: &ServerCall) {
        let results = match call.proc_num {
            0 => Bytes::new(),
            1 => {
                let args = CB_COMPOUND4args::from_bytes(call.args.clone()).expect("CB args");
                let mut resarray = Vec::new();
                for op in args.argarray {
                    match op {
                        nfs_cb_argop4::OP_CB_SEQUENCE(a) => {
                            resarray.push(nfs_cb_resop4::OP_CB_SEQUENCE(CB_SEQUENCE4res::NFS4_OK(
                                CB_SEQUENCE4resok {
                                    csr_sessionid: a.csa_sessionid,
                                    csr_sequenceid: a.csa_sequenceid,
                                    csr_slotid: a.csa_slotid,
                                    csr_highest_slotid: 0,
                                    csr_target_highest_slotid: 0,
                                },
                            )))
                        }
                        other => panic!("unexpected callback op {other:?}"),
                    }
                }
                CB_COMPOUND4res {
                    status: nfsstat4::NFS4_OK,
                    tag: args.tag,
                    resarray,
                }
                .to_bytes()
            }
            p => panic!("unexpected callback procedure {p}"),
        };
        let mut out = BytesMut::new();
        encode_reply_header(
            &mut out,
            call.xid,
            &ReplyHeader::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptedStatus::Success,
            },
        );
        out.put_slice(&results);
        self.s
            .write_all(&record(&out))
            .await
            .expect("write callback reply");
    }

    /// A COMPOUND; CALLs from the server arriving meanwhile are handled.
    async fn compound(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let xid = self.xid;
        self.xid += 1;
        let msg = encode_call(xid, 100003, 4, 1, &root_cred(), &encode_compound(ops));
        self.s.write_all(&record(&msg)).await.expect("write call");
        loop {
            match self.read(T).await {
                Some((x, body)) if x == xid => {
                    return COMPOUND4res::from_bytes(body).expect("COMPOUND reply decodes")
                }
                Some(_) => {}
                None => panic!("no reply to xid {xid}"),
            }
        }
    }

    /// The next CALL from the server (within `wait`), if any.
    async fn next_call(&mut self, wait: Duration) -> Option<ServerCall> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(c) = self.unseen.pop_front() {
                return Some(c);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.read(left).await {
                Some((0, _)) => {}
                Some((x, _)) => panic!("reply to xid {x} nobody waits for"),
                None => return None,
            }
        }
    }
}

/// AUTH_SYS parameters the client asks callbacks to carry.
fn cb_sys() -> callback_sec_parms4 {
    callback_sec_parms4::AUTH_SYS(authsys_parms {
        stamp: 7,
        machinename: Bytes::from_static(b"cbhost"),
        uid: 4321,
        gid: 99,
        gids: vec![],
    })
}

/// EXCHANGE_ID + CREATE_SESSION (`back_chan`: with CONN_BACK_CHAN) + RECLAIM_COMPLETE:
/// the session id and the csr_flags the server answered.
async fn new_session(p: &mut Peer, owner: &[u8], back_chan: bool) -> (sessionid4, u32) {
    let r = p.compound(vec![exchange_id(owner)]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("EXCHANGE_ID {:?}", r.resarray)
    };
    let nfs_argop4::OP_CREATE_SESSION(mut cs) = create_session(e, channel(64, 4), channel(8, 1))
    else {
        unreachable!()
    };
    cs.csa_flags = if back_chan { 0x2 } else { 0 };
    cs.csa_cb_program = CB_PROG;
    cs.csa_sec_parms = vec![cb_sys()];
    let r = p.compound(vec![nfs_argop4::OP_CREATE_SESSION(cs)]).await;
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("CREATE_SESSION {:?}", r.resarray)
    };
    let sid = s.csr_sessionid;
    let r = p
        .compound(vec![
            sequence(sid, 1, 1, false),
            nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    (sid, s.csr_flags)
}

/// SEQUENCE alone on slot 0: its sr_status_flags.
async fn seq_flags(p: &mut Peer, sid: sessionid4, seqid: u32) -> u32 {
    let r = p.compound(vec![sequence(sid, 0, seqid, false)]).await;
    let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)) = &r.resarray[0] else {
        panic!("SEQUENCE {:?}", r.resarray)
    };
    ok.sr_status_flags
}

/// Waits until the server's view of `sid`'s back channel is `want`.
async fn wait_path(srv: &TestServer, sid: &sessionid4, want: PathState) {
    let deadline = Instant::now() + T;
    loop {
        let s = srv
            .server
            .callbacks
            .session(sid)
            .expect("session has a back channel");
        if s.path() == want {
            return;
        }
        assert!(Instant::now() < deadline, "path stays {:?}", s.path());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn assert_probe(c: &ServerCall) {
    assert_eq!(
        (c.prog, c.vers, c.proc_num),
        (CB_PROG, 1, 0),
        "a CB_NULL probe"
    );
    assert_eq!(
        c.cred.flavor, AUTH_SYS,
        "the callback credential the client asked for"
    );
    let sys = AuthSys::from_bytes(c.cred.body.clone()).expect("AUTH_SYS body");
    assert_eq!((sys.uid, sys.gid), (4321, 99));
    assert_eq!(&sys.machinename[..], b"cbhost");
}

fn cb_sequence_of(c: &ServerCall) -> (u32, CB_SEQUENCE4args) {
    assert_eq!(
        (c.prog, c.vers, c.proc_num),
        (CB_PROG, 1, 1),
        "a CB_COMPOUND"
    );
    let a = CB_COMPOUND4args::from_bytes(c.args.clone()).expect("CB_COMPOUND args");
    assert_eq!(a.argarray.len(), 1);
    let nfs_cb_argop4::OP_CB_SEQUENCE(s) = a.argarray[0].clone() else {
        panic!("CB_SEQUENCE first: {:?}", a.argarray)
    };
    (a.minorversion, s)
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
    let mut back = Peer::connect(srv.addr, true).await;
    let r = back
        .compound(vec![nfs_argop4::OP_BIND_CONN_TO_SESSION(
            BIND_CONN_TO_SESSION4args {
                bctsa_sessid: sid,
                bctsa_dir: channel_dir_from_client4::CDFC4_BACK_OR_BOTH,
                bctsa_use_conn_in_rdma_mode: false,
            },
        )])
        .await;
    let nfs_resop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4res::NFS4_OK(ok)) = &r.resarray[0]
    else {
        panic!("BIND_CONN_TO_SESSION {:?}", r.resarray)
    };
    assert_eq!(ok.bctsr_dir, channel_dir_from_server4::CDFS4_BOTH);
    assert_probe(
        &back
            .next_call(T)
            .await
            .expect("probe on the bound connection"),
    );
    wait_path(&srv, &sid, PathState::Up).await;
    assert!(fore.calls.is_empty(), "nothing on the fore-only connection");
    // The callback goes to the bound connection.
    let server = srv.server.clone();
    let task = tokio::spawn(async move { server.callback_sequence(&sid).await });
    let (_, seq) = cb_sequence_of(&back.next_call(T).await.expect("CB_COMPOUND"));
    assert_eq!(seq.csa_sequenceid, 1);
    assert_eq!(task.await.expect("task"), Ok(vec![]));
    assert_eq!(seq_flags(&mut fore, sid, 1).await, 0);
}

#[tokio::test]
async fn closing_the_back_connection_reports_the_path_down() {
    let srv = start_memory_server().await;
    let mut fore = Peer::connect(srv.addr, true).await;
    let (sid, _) = new_session(&mut fore, b"bc-close", false).await;
    let mut back = Peer::connect(srv.addr, true).await;
    let r = back
        .compound(vec![nfs_argop4::OP_BIND_CONN_TO_SESSION(
            BIND_CONN_TO_SESSION4args {
                bctsa_sessid: sid,
                bctsa_dir: channel_dir_from_client4::CDFC4_BACK,
                bctsa_use_conn_in_rdma_mode: false,
            },
        )])
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
