//! What the delegation tests share: a holder (a test peer with a working back channel
//! and its own slot-0 sequence) and its requests, the op builders they send, and a
//! server whose recalls wait `recall_wait_ms`.

use super::peer::{
    cb_notify_of, cb_offload_of, cb_recall_of, new_session, wait_path, Peer, ServerCall, T,
};
use super::*;
use std::time::{Duration, Instant};
#[allow(unused_imports)] // each test uses some
pub use txnfs_rawclient::{delegreturn as delegreturn_op, open_plain, putfh};
use txnfs_server::callback::PathState;

/// A server on memory whose conflicting requests wait up to `recall_wait_ms` for a
/// recalled delegation, with a one-second callback timeout.
pub async fn deleg_server(recall_wait_ms: u32) -> TestServer {
    start_server(|dir| {
        let mut c = memory_config(dir, false);
        c.recall_wait_ms = Some(recall_wait_ms);
        c.callback_timeout_ms = Some(1000);
        c
    })
    .await
}

/// A holder: a peer with a working back channel and its own slot-0 sequence.
pub struct Holder {
    pub p: Peer,
    pub sid: sessionid4,
    pub seq: u32,
    pub owner: &'static [u8],
}

impl Holder {
    pub async fn new(srv: &TestServer, owner: &'static [u8]) -> Holder {
        Holder::with_minor(srv, owner, 1).await
    }

    /// A holder speaking NFSv4.`minor` (its callback service refuses other versions).
    pub async fn with_minor(srv: &TestServer, owner: &'static [u8], minor: u32) -> Holder {
        let mut p = Peer::connect(srv.addr, true).await;
        p.minor = minor;
        let (sid, _) = new_session(&mut p, owner, true).await;
        p.next_call(T).await.expect("the back channel is probed");
        wait_path(srv, &sid, PathState::Up).await;
        Holder {
            p,
            sid,
            seq: 0,
            owner,
        }
    }

    pub async fn run(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        self.seq += 1;
        let mut all = vec![sequence(self.sid, 0, self.seq, false)];
        all.extend(ops);
        self.p.compound(all).await
    }

    /// Like `run`, as RPC procedure `proc` (e.g. `txnfs_proto::PROC_TXN_COMPOUND`).
    pub async fn run_proc(&mut self, proc: u32, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        self.seq += 1;
        let mut all = vec![sequence(self.sid, 0, self.seq, false)];
        all.extend(ops);
        self.p.compound_proc(proc, all).await
    }

    /// Runs `ops`, which must all succeed.
    pub async fn run_ok(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let r = self.run(ops).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        r
    }

    /// The SEQUENCE status flags of an empty request.
    pub async fn flags(&mut self) -> u32 {
        let r = self.run(vec![]).await;
        let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)) = &r.resarray[0] else {
            panic!("SEQUENCE {:?}", r.resarray)
        };
        ok.sr_status_flags
    }

    /// OPEN `name` (no create) with `share_access` (want bits included): the open
    /// stateid, the delegation and the file handle.
    pub async fn open(
        &mut self,
        name: &str,
        share_access: u32,
    ) -> (stateid4, open_delegation4, Bytes) {
        let r = self
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_plain(name, share_access, self.owner),
                nfs_argop4::OP_GETFH,
            ])
            .await;
        let (sid, fh) = opened_stateid_and_fh(&r);
        let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)) = &r.resarray[2] else {
            panic!("OPEN {:?}", r.resarray)
        };
        (sid, ok.delegation.clone(), fh)
    }

    pub async fn delegreturn(&mut self, fh: &Bytes, d: &stateid4) -> nfsstat4 {
        self.run(vec![putfh(fh), delegreturn_op(d)]).await.status
    }

    /// TEST_STATEID of the one stateid `sid`: its status code.
    pub async fn test_stateid(&mut self, sid: &stateid4) -> nfsstat4 {
        let r = self
            .run(vec![nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
                ts_stateids: vec![sid.clone()],
            })])
            .await;
        let nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(t)) = &r.resarray[1] else {
            panic!("{:?}", r.resarray)
        };
        assert_eq!(t.tsr_status_codes.len(), 1, "{:?}", t.tsr_status_codes);
        t.tsr_status_codes[0]
    }

    /// FREE_STATEID of `sid`: the request's status.
    pub async fn free_stateid(&mut self, sid: &stateid4) -> nfsstat4 {
        self.run(vec![nfs_argop4::OP_FREE_STATEID(FREE_STATEID4args {
            fsa_stateid: sid.clone(),
        })])
        .await
        .status
    }

    /// The next CB_RECALL (the peer has answered it, unless told not to).
    pub async fn next_recall(&mut self, wait: Duration) -> Option<CB_RECALL4args> {
        self.next_of(wait, cb_recall_of).await
    }

    /// The next CB_OFFLOAD (the peer has answered it, unless told not to).
    pub async fn next_offload(&mut self, wait: Duration) -> Option<CB_OFFLOAD4args> {
        self.next_of(wait, cb_offload_of).await
    }

    /// The next CB_NOTIFY (the peer has answered it, unless told not to).
    pub async fn next_notify(&mut self, wait: Duration) -> Option<CB_NOTIFY4args> {
        self.next_of(wait, cb_notify_of).await
    }

    /// The first of the server's calls within `wait` that `pick` finds something in.
    async fn next_of<R>(
        &mut self,
        wait: Duration,
        pick: fn(&ServerCall) -> Option<R>,
    ) -> Option<R> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let call = self.p.next_call(left).await?;
            if let Some(r) = pick(&call) {
                return Some(r);
            }
        }
    }
}

impl Session {
    /// Runs `ops`, which must all succeed.
    pub async fn run_ok(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let r = self.run(ops).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        r
    }
}

/// RENAME `from` in the directory `src` to `to` in the directory `dst`.
pub fn rename_between(src: &Bytes, dst: &Bytes, from: &str, to: &str) -> Vec<nfs_argop4> {
    vec![
        putfh(src),
        nfs_argop4::OP_SAVEFH,
        putfh(dst),
        rename(from, to),
    ]
}
