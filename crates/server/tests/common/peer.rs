//! A test peer that is both an NFSv4.1 client and the callback service on one TCP
//! connection, as the Linux client is: it answers (or ignores) the server's CB_NULL and
//! CB_COMPOUND calls (CB_SEQUENCE, CB_RECALL, CB_GETATTR, CB_NOTIFY) while it waits for its own
//! replies, and records every call.

use super::*;
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txnfs_rawclient::{create_session_for, sequence_ok};
use txnfs_rpc::msg::{
    encode_reply_header, AcceptedStatus, OpaqueAuth, ReplyHeader, AUTH_SYS, MSG_CALL, MSG_REPLY,
};
use txnfs_rpc::{decode_reply, encode_call, read_record, record, AuthSys};
use txnfs_server::callback::PathState;
use txnfs_xdr::{get_u32, Encode};

pub const CB_PROG: u32 = 0x4000_0123;
pub const T: Duration = Duration::from_secs(10);

/// A CALL the server sent to the peer.
#[derive(Debug, Clone)]
pub struct ServerCall {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub cred: OpaqueAuth,
    pub args: Bytes,
}

/// One NFS client connection that also serves the callback program.
pub struct Peer {
    s: TcpStream,
    xid: u32,
    /// The answer to CB_GETATTR: (size, change); `None` answers NFS4ERR_BADHANDLE.
    pub getattr_answer: Option<(u64, u64)>,
    /// With delegated timestamps (RFC 9754): the modify time CB_GETATTR also reports
    /// when the server asks `time_deleg_modify`.
    pub getattr_mtime: Option<(i64, u32)>,
    /// Answer the server's CALLs (CB_NULL, CB_COMPOUND with CB_SEQUENCE) or stay silent.
    pub answer: bool,
    /// The status CB_NOTIFY is answered with.
    pub notify_status: nfsstat4,
    /// The minor version of its COMPOUNDs, and the only one its callback service
    /// knows: like the Linux client, which finds the session of a CB_COMPOUND by its
    /// minor version, it answers CB_SEQUENCE of any other with NFS4ERR_BADSESSION.
    pub minor: u32,
    /// Every CALL received, in order.
    pub calls: Vec<ServerCall>,
    /// CALLs received but not yet taken by `next_call`.
    unseen: VecDeque<ServerCall>,
}

impl Peer {
    pub async fn connect(addr: SocketAddr, answer: bool) -> Peer {
        Peer {
            s: TcpStream::connect(addr).await.expect("connect"),
            xid: 1,
            answer,
            minor: 1,
            notify_status: nfsstat4::NFS4_OK,
            getattr_answer: None,
            getattr_mtime: None,
            calls: Vec::new(),
            unseen: VecDeque::new(),
        }
    }

    /// Read one record: a reply to us (xid, body) or a CALL from the server (handled).
    pub async fn read(&mut self, wait: Duration) -> Option<(u32, Bytes)> {
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
    pub async fn answer_call(&mut self, call: &ServerCall) {
        let results = match call.proc_num {
            0 => Bytes::new(),
            1 => {
                let args = CB_COMPOUND4args::from_bytes(call.args.clone()).expect("CB args");
                let mut resarray = Vec::new();
                let mut status = nfsstat4::NFS4_OK;
                for op in args.argarray {
                    match op {
                        nfs_cb_argop4::OP_CB_SEQUENCE(_) if args.minorversion != self.minor => {
                            status = nfsstat4::NFS4ERR_BADSESSION;
                            resarray.push(nfs_cb_resop4::OP_CB_SEQUENCE(CB_SEQUENCE4res::default(
                                status,
                            )));
                            break;
                        }
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
                        nfs_cb_argop4::OP_CB_RECALL(_) => {
                            resarray.push(nfs_cb_resop4::OP_CB_RECALL(CB_RECALL4res {
                                status: nfsstat4::NFS4_OK,
                            }))
                        }
                        nfs_cb_argop4::OP_CB_GETATTR(ga) => {
                            // time_deleg_modify (85) asked and known: reported too.
                            let mtime = self.getattr_mtime.filter(|_| {
                                ga.attr_request.get(2).is_some_and(|w| w & (1 << 21) != 0)
                            });
                            resarray.push(nfs_cb_resop4::OP_CB_GETATTR(match self.getattr_answer {
                                Some((size, change)) => {
                                    let mut v = BytesMut::new();
                                    v.put_u64(change);
                                    v.put_u64(size);
                                    let mut attrmask = vec![(1 << 3) | (1 << 4)];
                                    if let Some((sec, nsec)) = mtime {
                                        v.put_i64(sec);
                                        v.put_u32(nsec);
                                        attrmask.extend([0, 1 << 21]);
                                    }
                                    CB_GETATTR4res::NFS4_OK(CB_GETATTR4resok {
                                        obj_attributes: fattr4 {
                                            attrmask,
                                            attr_vals: v.freeze(),
                                        },
                                    })
                                }
                                None => CB_GETATTR4res::default(nfsstat4::NFS4ERR_BADHANDLE),
                            }))
                        }
                        nfs_cb_argop4::OP_CB_NOTIFY(_) => {
                            resarray.push(nfs_cb_resop4::OP_CB_NOTIFY(CB_NOTIFY4res {
                                cnr_status: self.notify_status,
                            }))
                        }
                        nfs_cb_argop4::OP_CB_OFFLOAD(_) => {
                            resarray.push(nfs_cb_resop4::OP_CB_OFFLOAD(CB_OFFLOAD4res {
                                cor_status: nfsstat4::NFS4_OK,
                            }))
                        }
                        other => panic!("unexpected callback op {other:?}"),
                    }
                }
                CB_COMPOUND4res {
                    status,
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
    pub async fn compound(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        self.compound_proc(1, ops).await
    }

    /// A COMPOUND sent as RPC procedure `proc` (1, or a transactional procedure such
    /// as `txnfs_proto::PROC_TXN_COMPOUND`).
    pub async fn compound_proc(&mut self, proc: u32, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let xid = self.xid;
        self.xid += 1;
        let args = encode_compound_minor(ops, self.minor);
        let msg = encode_call(xid, 100003, 4, proc, &root_cred(), &args);
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

    /// Several COMPOUNDs written in one go (one `write`, so the server finds them in
    /// its buffer together), each answered within `wait` after the last was sent:
    /// their replies in the order sent, and when each came, from the write. CALLs from
    /// the server arriving meanwhile are handled.
    pub async fn compounds_pipelined(
        &mut self,
        calls: Vec<Vec<nfs_argop4>>,
        wait: Duration,
    ) -> Vec<(COMPOUND4res, Duration)> {
        self.compounds_spaced(calls, Duration::ZERO, wait).await
    }

    /// [`Peer::compounds_pipelined`], with `gap` between one call's write and the next
    /// (zero: all in one write); times are from the first write.
    pub async fn compounds_spaced(
        &mut self,
        calls: Vec<Vec<nfs_argop4>>,
        gap: Duration,
        wait: Duration,
    ) -> Vec<(COMPOUND4res, Duration)> {
        let first = self.xid;
        let mut records = Vec::new();
        for ops in calls {
            let args = encode_compound_minor(ops, self.minor);
            records.push(record(&encode_call(
                self.xid,
                100003,
                4,
                1,
                &root_cred(),
                &args,
            )));
            self.xid += 1;
        }
        let sent = Instant::now();
        if gap.is_zero() {
            self.s
                .write_all(&records.concat())
                .await
                .expect("write calls");
        } else {
            for (i, r) in records.iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(gap).await;
                }
                self.s.write_all(r).await.expect("write call");
            }
        }
        let n = (self.xid - first) as usize;
        let mut replies: Vec<Option<(COMPOUND4res, Duration)>> = vec![None; n];
        while replies.iter().any(Option::is_none) {
            let left = (sent + wait).saturating_duration_since(Instant::now());
            match self.read(left).await {
                Some((x, body)) if x >= first && ((x - first) as usize) < n => {
                    let r = COMPOUND4res::from_bytes(body).expect("COMPOUND reply decodes");
                    replies[(x - first) as usize] = Some((r, sent.elapsed()));
                }
                Some(_) => {}
                None => panic!("no reply to every pipelined call within {wait:?}"),
            }
        }
        replies.into_iter().flatten().collect()
    }

    /// The next CALL from the server (within `wait`), if any.
    pub async fn next_call(&mut self, wait: Duration) -> Option<ServerCall> {
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
pub fn cb_sys() -> callback_sec_parms4 {
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
pub async fn new_session(p: &mut Peer, owner: &[u8], back_chan: bool) -> (sessionid4, u32) {
    let r = p.compound(vec![exchange_id(owner)]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("EXCHANGE_ID {:?}", r.resarray)
    };
    let nfs_argop4::OP_CREATE_SESSION(mut cs) = create_session_for(
        e.eir_clientid,
        e.eir_sequenceid,
        channel(64, 4),
        channel(8, 1),
        back_chan,
    ) else {
        unreachable!()
    };
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
            txnfs_rawclient::reclaim_complete(),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    (sid, s.csr_flags)
}

/// SEQUENCE alone on slot 0: its sr_status_flags.
pub async fn seq_flags(p: &mut Peer, sid: sessionid4, seqid: u32) -> u32 {
    let r = p.compound(vec![sequence(sid, 0, seqid, false)]).await;
    let Some(ok) = sequence_ok(&r) else {
        panic!("SEQUENCE {:?}", r.resarray)
    };
    ok.sr_status_flags
}

/// Waits until the server's view of `sid`'s back channel is `want`.
pub async fn wait_path(srv: &TestServer, sid: &sessionid4, want: PathState) {
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

pub fn assert_probe(c: &ServerCall) {
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

pub fn cb_sequence_of(c: &ServerCall) -> (u32, CB_SEQUENCE4args) {
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

/// The CB_NOTIFY of a CB_COMPOUND call, if it carries one.
pub fn cb_notify_of(c: &ServerCall) -> Option<CB_NOTIFY4args> {
    if c.proc_num != 1 {
        return None;
    }
    let a = CB_COMPOUND4args::from_bytes(c.args.clone()).expect("CB_COMPOUND args");
    a.argarray.into_iter().find_map(|op| match op {
        nfs_cb_argop4::OP_CB_NOTIFY(n) => Some(n),
        _ => None,
    })
}

/// The CB_RECALL of a CB_COMPOUND call, if it carries one.
pub fn cb_recall_of(c: &ServerCall) -> Option<CB_RECALL4args> {
    if c.proc_num != 1 {
        return None;
    }
    let a = CB_COMPOUND4args::from_bytes(c.args.clone()).expect("CB_COMPOUND args");
    a.argarray.into_iter().find_map(|op| match op {
        nfs_cb_argop4::OP_CB_RECALL(r) => Some(r),
        _ => None,
    })
}

/// The CB_OFFLOAD of a CB_COMPOUND call, if it carries one.
pub fn cb_offload_of(c: &ServerCall) -> Option<CB_OFFLOAD4args> {
    if c.proc_num != 1 {
        return None;
    }
    let a = CB_COMPOUND4args::from_bytes(c.args.clone()).expect("CB_COMPOUND args");
    a.argarray.into_iter().find_map(|op| match op {
        nfs_cb_argop4::OP_CB_OFFLOAD(o) => Some(o),
        _ => None,
    })
}
