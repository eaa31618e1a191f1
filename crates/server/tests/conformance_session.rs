//! Protocol conformance of the session layer over real TCP (issue 8). Every test
//! asserts the exact status the RFC asks for.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use txnfs_server::nfs::*;
use txnfs_xdr::{Decode, Encode};

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
