//! Protocol conformance of the session layer over real TCP (issue 8): EXCHANGE_ID's
//! case table and flags (RFC 8881 §18.35), CREATE_SESSION's flags, principal and
//! negotiated channel sizes (§18.36), illegal opcodes (§15.2, §16.2.3), RECLAIM_COMPLETE
//! before locking state (§18.51.3), BACKCHANNEL_CTL (§18.33) and SET_SSV (§18.47).
//! Every test asserts the exact status the RFC asks for.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use txnfs_rpc::RpcClient;
use txnfs_server::nfs::*;
use txnfs_server::session::{CallbackParams, CallbackSec};
use txnfs_xdr::{Decode, Encode};

/// A connection whose calls carry AUTH_SYS uid/gid 1000: another principal than
/// `connect`'s root.
async fn connect_as_user(addr: std::net::SocketAddr) -> RpcClient {
    RpcClient::connect(addr, sys_cred(1000, 1000))
        .await
        .expect("connect")
}

fn exchange_id_with(owner: &[u8], verifier: u8, flags: u32) -> nfs_argop4 {
    nfs_argop4::OP_EXCHANGE_ID(Box::new(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: [verifier; 8],
            co_ownerid: Bytes::copy_from_slice(owner),
        },
        eia_flags: flags,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![],
    }))
}

/// EXCHANGE_ID over `cl`: its status and, on success, its result.
async fn exchange(
    cl: &RpcClient,
    owner: &[u8],
    verifier: u8,
    flags: u32,
) -> (nfsstat4, Option<EXCHANGE_ID4resok>) {
    let r = call(cl, vec![exchange_id_with(owner, verifier, flags)]).await;
    match r.resarray.first() {
        Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) => {
            (r.status, Some(EXCHANGE_ID4resok::clone(e)))
        }
        _ => (r.status, None),
    }
}

/// CREATE_SESSION for the client id and sequence id of `e`, with the given fore
/// channel and flags: its status and, on success, its result.
async fn create(
    cl: &RpcClient,
    clientid: clientid4,
    seq: u32,
    fore: channel_attrs4,
    flags: u32,
) -> (nfsstat4, Option<CREATE_SESSION4resok>) {
    let op = nfs_argop4::OP_CREATE_SESSION(Box::new(CREATE_SESSION4args {
        csa_clientid: clientid,
        csa_sequence: seq,
        csa_flags: flags,
        csa_fore_chan_attrs: fore,
        csa_back_chan_attrs: channel(16, 1),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
    }));
    let r = call(cl, vec![op]).await;
    match r.resarray.first() {
        Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) => {
            (r.status, Some(CREATE_SESSION4resok::clone(s)))
        }
        _ => (r.status, None),
    }
}

/// EXCHANGE_ID + CREATE_SESSION over `cl`; panics unless both succeed.
async fn confirmed(cl: &RpcClient, owner: &[u8], verifier: u8) -> (clientid4, sessionid4) {
    let (st, e) = exchange(cl, owner, verifier, 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    let e = e.expect("EXCHANGE_ID result");
    let (st, s) = create(cl, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    (
        e.eir_clientid,
        s.expect("CREATE_SESSION result").csr_sessionid,
    )
}

// ---- EXCHANGE_ID (§18.35) -------------------------------------------------------------

#[tokio::test]
async fn exchange_id_with_an_undefined_flag_is_inval() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    // 0x8 and 0x1000_0000 are not defined by §18.35.1; 0x4 (SUPP_FENCE_OPS) is only
    // a server's flag, outside the mask of flags a client may send (as in knfsd).
    for flags in [0x4, 0x8, 0x1000_0000] {
        let (st, _) = exchange(&cl, b"flags", 1, flags).await;
        assert_eq!(st, nfsstat4::NFS4ERR_INVAL, "eia_flags {flags:#x}");
    }
    let (st, _) = exchange(&cl, b"flags", 1, EXCHGID4_FLAG_SUPP_MOVED_REFER).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
}

#[tokio::test]
async fn exchange_id_update_from_another_principal_is_perm() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let (cid, _) = confirmed(&root, b"upd", 1).await;
    let user = connect_as_user(srv.addr).await;
    // Case 9.
    let (st, _) = exchange(&user, b"upd", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A).await;
    assert_eq!(st, nfsstat4::NFS4ERR_PERM);
    // Case 6, from the record's own principal.
    let (st, e) = exchange(&root, b"upd", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    let e = e.expect("result");
    assert_eq!(e.eir_clientid, cid);
    assert_ne!(e.eir_flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
}

#[tokio::test]
async fn exchange_id_of_another_principal_for_a_client_with_state_is_clid_inuse() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let (cid, sid) = confirmed(&root, b"collide", 1).await;
    let user = connect_as_user(srv.addr).await;
    // Case 3 with a session: the other principal's client is not ours to destroy.
    let (st, _) = exchange(&user, b"collide", 1, 0).await;
    assert_eq!(st, nfsstat4::NFS4ERR_CLID_INUSE);
    // The client lives on.
    let r = call(&root, vec![sequence(sid, 0, 1, false)]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let (st, e) = exchange(&root, b"collide", 1, 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    assert_eq!(e.expect("result").eir_clientid, cid);
}

#[tokio::test]
async fn exchange_id_of_another_principal_for_a_client_without_state_makes_a_new_client_id() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let (old, sid) = confirmed(&root, b"takeover", 1).await;
    let r = call(
        &root,
        vec![nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: sid,
        })],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let user = connect_as_user(srv.addr).await;
    // Case 3 without state: the record is replaced by a new, unconfirmed one.
    let (st, e) = exchange(&user, b"takeover", 1, 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    let e = e.expect("result");
    assert_ne!(e.eir_clientid, old);
    assert_eq!(e.eir_flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    let (st, _) = create(&root, old, 2, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4ERR_STALE_CLIENTID);
    let (st, _) = create(&user, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
}

#[tokio::test]
async fn exchange_id_with_a_new_verifier_replaces_the_client_once_confirmed() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let (old, _) = confirmed(&root, b"reboot", 1).await;
    // Case 5: the client restarted.
    let (st, e) = exchange(&root, b"reboot", 2, 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    let e = e.expect("result");
    assert_ne!(e.eir_clientid, old);
    assert_eq!(e.eir_flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    let (st, _) = create(&root, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    // Confirming the new incarnation purged the old one.
    let (st, _) = create(&root, old, 2, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4ERR_STALE_CLIENTID);
}

#[tokio::test]
async fn exchange_id_replaces_an_unconfirmed_record_whoever_sends_it() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let user = connect_as_user(srv.addr).await;
    // Case 4 with a new verifier, then with a new principal.
    let (_, first) = exchange(&root, b"unconf", 1, 0).await;
    let first = first.expect("result");
    let (_, second) = exchange(&root, b"unconf", 2, 0).await;
    let second = second.expect("result");
    let (_, third) = exchange(&user, b"unconf", 2, 0).await;
    let third = third.expect("result");
    assert_ne!(first.eir_clientid, second.eir_clientid);
    assert_ne!(second.eir_clientid, third.eir_clientid);
    for stale in [first.eir_clientid, second.eir_clientid] {
        let (st, _) = create(&root, stale, 1, channel(64, 4), 0).await;
        assert_eq!(st, nfsstat4::NFS4ERR_STALE_CLIENTID);
    }
    let (st, _) = create(&user, third.eir_clientid, 1, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
}

// ---- CREATE_SESSION (§18.36) ----------------------------------------------------------

#[tokio::test]
async fn create_session_with_an_undefined_flag_is_inval() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    let (_, e) = exchange(&cl, b"csflags", 1, 0).await;
    let e = e.expect("result");
    let (st, _) = create(&cl, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0x8).await;
    assert_eq!(st, nfsstat4::NFS4ERR_INVAL);
    let (st, _) = create(
        &cl,
        e.eir_clientid,
        e.eir_sequenceid,
        channel(64, 4),
        CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    )
    .await;
    assert_eq!(st, nfsstat4::NFS4_OK);
}

#[tokio::test]
async fn create_session_for_an_unconfirmed_client_of_another_principal_is_clid_inuse() {
    let srv = start_memory_server().await;
    let root = connect(srv.addr).await;
    let user = connect_as_user(srv.addr).await;
    let (_, e) = exchange(&root, b"csprinc", 1, 0).await;
    let e = e.expect("result");
    let (st, _) = create(&user, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4ERR_CLID_INUSE);
    let (st, _) = create(&root, e.eir_clientid, e.eir_sequenceid, channel(64, 4), 0).await;
    assert_eq!(st, nfsstat4::NFS4_OK);
}

/// A fore channel of `request` / `response` / `cached` bytes.
fn small_channel(request: u32, response: u32, cached: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_maxrequestsize: request,
        ca_maxresponsesize: response,
        ca_maxresponsesize_cached: cached,
        ..channel(64, 1)
    }
}

#[tokio::test]
async fn small_channel_sizes_are_granted_and_enforced() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    let (_, e) = exchange(&cl, b"small", 1, 0).await;
    let e = e.expect("result");
    let (st, s) = create(
        &cl,
        e.eir_clientid,
        e.eir_sequenceid,
        small_channel(300, 300, 200),
        0,
    )
    .await;
    assert_eq!(
        st,
        nfsstat4::NFS4_OK,
        "small sizes are negotiated, not refused"
    );
    let s = s.expect("result");
    let fore = &s.csr_fore_chan_attrs;
    assert_eq!(
        (
            fore.ca_maxrequestsize,
            fore.ca_maxresponsesize,
            fore.ca_maxresponsesize_cached
        ),
        (300, 300, 200)
    );
    let sid = s.csr_sessionid;
    let mut seq = 0;
    let mut next = |cache: bool, advance: bool| {
        seq += u32::from(advance);
        sequence(sid, 0, seq + u32::from(!advance), cache)
    };

    // A request over 300 bytes.
    // SEQUENCE refuses it, so the slot does not advance.
    let r = call(
        &cl,
        vec![
            next(false, false),
            nfs_argop4::OP_PUTROOTFH,
            lookup(&"x".repeat(300)),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REQ_TOO_BIG);
    assert_eq!(r.resarray.len(), 1);

    // How long is a filehandle?
    let r = call(
        &cl,
        vec![
            next(false, true),
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETFH,
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let getfh = nfs_resop4::OP_GETFH(match &r.resarray[2] {
        nfs_resop4::OP_GETFH(g) => g.clone(),
        other => panic!("{other:?}"),
    })
    .to_bytes()
    .len();
    // Reply: status, tag "t", count (16); SEQUENCE (44); PUTROOTFH (8).
    let head = 16 + 44 + 8;
    // GETFHs that overflow the cache (200) but not the reply (300)...
    let cached_over = (200 - head) / getfh + 1;
    assert!(head + cached_over * getfh <= 300, "handle of {getfh} bytes");
    // ...and GETFHs that overflow the reply.
    let reply_over = (300 - head) / getfh + 1;

    let mut ops = vec![next(true, true), nfs_argop4::OP_PUTROOTFH];
    ops.extend(std::iter::repeat_n(nfs_argop4::OP_GETFH, cached_over));
    let r = call(&cl, ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
    assert_eq!(
        status_of(r.resarray.last().expect("results")),
        nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE
    );

    // The same without caching fits.
    let mut ops = vec![next(false, true), nfs_argop4::OP_PUTROOTFH];
    ops.extend(std::iter::repeat_n(nfs_argop4::OP_GETFH, cached_over));
    let r = call(&cl, ops).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);

    let mut ops = vec![next(false, true), nfs_argop4::OP_PUTROOTFH];
    ops.extend(std::iter::repeat_n(nfs_argop4::OP_GETFH, reply_over));
    let r = call(&cl, ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG);
    assert_eq!(
        status_of(r.resarray.last().expect("results")),
        nfsstat4::NFS4ERR_REP_TOO_BIG
    );
}

/// A reply cache too small for any reply (§18.36.3: the server may not raise what the
/// client asked to be smaller) is granted as asked; a request that asks to be cached
/// then gets NFS4ERR_REP_TOO_BIG_TO_CACHE from SEQUENCE, and the same request without
/// caching runs.
#[tokio::test]
async fn a_reply_cache_too_small_for_any_reply_is_granted_and_refuses_cachethis() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    let (_, e) = exchange(&cl, b"tiny-cache", 1, 0).await;
    let e = e.expect("result");
    let (st, s) = create(
        &cl,
        e.eir_clientid,
        e.eir_sequenceid,
        small_channel(1 << 20, 1 << 20, 16),
        0,
    )
    .await;
    assert_eq!(st, nfsstat4::NFS4_OK);
    let s = s.expect("result");
    assert_eq!(s.csr_fore_chan_attrs.ca_maxresponsesize_cached, 16);
    let sid = s.csr_sessionid;
    let r = call(
        &cl,
        vec![sequence(sid, 0, 1, true), nfs_argop4::OP_PUTROOTFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
    assert_eq!(r.resarray.len(), 1, "{:?}", r.resarray);
    let r = call(
        &cl,
        vec![sequence(sid, 0, 1, false), nfs_argop4::OP_PUTROOTFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

// ---- Illegal operations (§15.2, §16.2.3) ----------------------------------------------

/// A COMPOUND of `ops` whose entries are either an encoded op or a bare opcode.
fn raw_compound(ops: &[Result<nfs_argop4, u32>]) -> Bytes {
    let mut b = BytesMut::new();
    txnfs_xdr::put_opaque(&mut b, b"t");
    b.put_u32(1);
    b.put_u32(ops.len() as u32);
    for op in ops {
        match op {
            Ok(op) => op.encode(&mut b),
            Err(opcode) => b.put_u32(*opcode),
        }
    }
    b.freeze()
}

fn assert_illegal(r: &COMPOUND4res, at: usize) {
    assert_eq!(r.status, nfsstat4::NFS4ERR_OP_ILLEGAL);
    assert_eq!(r.resarray.len(), at + 1);
    assert_eq!(
        r.resarray[at],
        nfs_resop4::OP_ILLEGAL(ILLEGAL4res {
            status: nfsstat4::NFS4ERR_OP_ILLEGAL
        })
    );
}

/// Opcodes RFC 8881 does not define: 0-2 are reserved, 10044 is OP_ILLEGAL itself.
const UNDEFINED: [u32; 5] = [0, 2, 9999, nfs_opnum4::OP_ILLEGAL as u32, u32::MAX];

#[tokio::test]
async fn an_illegal_op_without_sequence_is_op_illegal() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    for opcode in UNDEFINED {
        let r = COMPOUND4res::from_bytes(call_raw(&cl, raw_compound(&[Err(opcode)])).await)
            .expect("decodes");
        assert_illegal(&r, 0);
    }
}

#[tokio::test]
async fn an_illegal_op_after_sequence_is_op_illegal() {
    let (_srv, mut s) = start_with_session(b"illegal").await;
    for opcode in UNDEFINED {
        s.seq += 1;
        let ops = [
            Ok(s.sequence(0, s.seq)),
            Ok(nfs_argop4::OP_PUTROOTFH),
            Err(opcode),
        ];
        let r =
            COMPOUND4res::from_bytes(call_raw(&s.cl, raw_compound(&ops)).await).expect("decodes");
        assert_illegal(&r, 2);
    }
}

/// An NFSv4.2 opcode is undefined in a v4.1 COMPOUND: OP_ILLEGAL like any undefined
/// one (as knfsd answers), not NOTSUPP, which is for v4.0 ops that v4.1 retired.
#[tokio::test]
async fn a_v42_op_in_a_v41_compound_is_op_illegal() {
    let (_srv, mut s) = start_with_session(b"v42-in-v41").await;
    for opcode in [
        nfs_opnum4::OP_COPY,
        nfs_opnum4::OP_SEEK,
        nfs_opnum4::OP_SETXATTR,
    ] {
        s.seq += 1;
        let ops = [
            Ok(s.sequence(0, s.seq)),
            Ok(nfs_argop4::OP_PUTROOTFH),
            Err(opcode as u32),
        ];
        let r =
            COMPOUND4res::from_bytes(call_raw(&s.cl, raw_compound(&ops)).await).expect("decodes");
        assert_illegal(&r, 2);
    }
}

// ---- RECLAIM_COMPLETE first (§18.51.3) ------------------------------------------------

#[tokio::test]
async fn open_before_reclaim_complete_is_grace_even_outside_grace() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    let (_, sid) = confirmed(&cl, b"norc", 1).await;
    assert!(!srv
        .server
        .core()
        .expect("core")
        .in_grace(std::time::Instant::now()));
    let r = call(
        &cl,
        vec![
            sequence(sid, 0, 1, true),
            nfs_argop4::OP_PUTROOTFH,
            open_new("early"),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_GRACE);
    // Nothing was created.
    let r = call(
        &cl,
        vec![
            sequence(sid, 0, 2, false),
            nfs_argop4::OP_PUTROOTFH,
            lookup("early"),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let r = call(
        &cl,
        vec![
            sequence(sid, 0, 3, false),
            nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false }),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let r = call(
        &cl,
        vec![
            sequence(sid, 0, 4, true),
            nfs_argop4::OP_PUTROOTFH,
            open_new("early"),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

// ---- BACKCHANNEL_CTL (§18.33) and SET_SSV (§18.47) ------------------------------------

fn backchannel_ctl(program: u32, sec: Vec<callback_sec_parms4>) -> nfs_argop4 {
    nfs_argop4::OP_BACKCHANNEL_CTL(BACKCHANNEL_CTL4args {
        bca_cb_program: program,
        bca_sec_parms: sec,
    })
}

#[tokio::test]
async fn backchannel_ctl_records_the_callback_program_and_security() {
    let (srv, mut s) = start_with_session(b"bcctl").await;
    let recorded = |srv: &TestServer, sid: &sessionid4| {
        srv.server
            .core()
            .expect("core")
            .sessions()
            .callback(sid)
            .cloned()
    };
    // CREATE_SESSION's program and AUTH_NONE (common::create_session).
    assert_eq!(
        recorded(&srv, &s.sid),
        Some(CallbackParams {
            program: 0x4000_0000,
            sec: CallbackSec::None
        })
    );
    let sys = authsys_parms {
        stamp: 7,
        machinename: Bytes::from_static(b"client"),
        uid: 10,
        gid: 20,
        gids: vec![30],
    };
    let gss = callback_sec_parms4::RPCSEC_GSS(gss_cb_handles4 {
        gcbp_service: rpc_gss_svc_t::RPC_GSS_SVC_NONE,
        gcbp_handle_from_server: Bytes::new(),
        gcbp_handle_from_client: Bytes::new(),
    });
    // GSS is skipped; the first acceptable entry is taken.
    let r = s
        .run(vec![backchannel_ctl(
            0x4000_0001,
            vec![
                gss.clone(),
                callback_sec_parms4::AUTH_SYS(sys),
                callback_sec_parms4::AUTH_NONE,
            ],
        )])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(
        recorded(&srv, &s.sid),
        Some(CallbackParams {
            program: 0x4000_0001,
            sec: CallbackSec::Sys {
                stamp: 7,
                machine: Bytes::from_static(b"client"),
                uid: 10,
                gid: 20,
                gids: vec![30],
            }
        })
    );
    // Only GSS: the server could never call back.
    let r = s.run(vec![backchannel_ctl(0x4000_0002, vec![gss])]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP);
    assert_eq!(
        recorded(&srv, &s.sid).map(|c| c.program),
        Some(0x4000_0001),
        "a refused BACKCHANNEL_CTL changes nothing"
    );
    // An empty list is AUTH_NONE, as knfsd takes it (nfs4fs sends one at CREATE_SESSION).
    let r = s.run(vec![backchannel_ctl(0x4000_0003, vec![])]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(
        recorded(&srv, &s.sid),
        Some(CallbackParams {
            program: 0x4000_0003,
            sec: CallbackSec::None
        })
    );
}

#[tokio::test]
async fn set_ssv_without_ssv_protection_is_inval() {
    let (_srv, mut s) = start_with_session(b"ssv").await;
    let r = s
        .run(vec![nfs_argop4::OP_SET_SSV(SET_SSV4args {
            ssa_ssv: Bytes::from_static(&[1; 16]),
            ssa_digest: Bytes::from_static(&[2; 16]),
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
    assert_eq!(status_of(&r.resarray[1]), nfsstat4::NFS4ERR_INVAL);
}
