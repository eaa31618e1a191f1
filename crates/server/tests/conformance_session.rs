//! Protocol conformance of the session layer over real TCP (issue 8): illegal opcodes
//! (RFC 8881 §15.2, §16.2.3), RECLAIM_COMPLETE before locking state (§18.51.3).
//! Every test asserts the exact status the RFC asks for.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use txnfs_rpc::RpcClient;
use txnfs_server::nfs::*;
use txnfs_xdr::{Decode, Encode};

fn exchange_id_with(owner: &[u8], verifier: u8, flags: u32) -> nfs_argop4 {
    nfs_argop4::OP_EXCHANGE_ID(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: [verifier; 8],
            co_ownerid: Bytes::copy_from_slice(owner),
        },
        eia_flags: flags,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![],
    })
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
            (r.status, Some(e.clone()))
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
    let op = nfs_argop4::OP_CREATE_SESSION(CREATE_SESSION4args {
        csa_clientid: clientid,
        csa_sequence: seq,
        csa_flags: flags,
        csa_fore_chan_attrs: fore,
        csa_back_chan_attrs: channel(16, 1),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
    });
    let r = call(cl, vec![op]).await;
    match r.resarray.first() {
        Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) => {
            (r.status, Some(s.clone()))
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
