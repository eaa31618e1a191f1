//! The bytes of a COMPOUND: requests built with each WRITE's data as a part of its own
//! (sent from the caller's buffer, ADR 0063), replies decoded in place.

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_xdr::{Decode, Encode, Gathered};

use crate::ClientError;

/// COMPOUND4args with tag "txnfs": the data of every WRITE is a part of its own, sent
/// from the caller's buffer and never copied into the request (ADR 0063).
pub(super) fn encode(minor: u32, ops: &[nfs_argop4]) -> Gathered {
    let mut out = txnfs_xdr::GatherBuf::with_capacity(256);
    txnfs_xdr::put_opaque(out.tail(), b"txnfs");
    txnfs_xdr::put_u32(out.tail(), minor);
    txnfs_xdr::put_u32(out.tail(), ops.len() as u32);
    for op in ops {
        match op {
            nfs_argop4::OP_WRITE(w) => {
                txnfs_xdr::put_u32(out.tail(), nfs_opnum4::OP_WRITE as u32);
                w.stateid.encode(out.tail());
                txnfs_xdr::put_u64(out.tail(), w.offset);
                w.stable.encode(out.tail());
                out.put_opaque_shared(w.data.clone());
            }
            other => other.encode(out.tail()),
        }
    }
    out.finish()
}

pub(super) fn decode_reply(b: Bytes) -> Result<COMPOUND4res, ClientError> {
    COMPOUND4res::from_bytes(b).map_err(|e| ClientError::Protocol(format!("COMPOUND reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(data: Bytes) -> nfs_argop4 {
        nfs_argop4::OP_WRITE(WRITE4args {
            stateid: stateid4 {
                seqid: 1,
                other: [7; 12],
            },
            offset: 4096,
            stable: stable_how4::FILE_SYNC4,
            data,
        })
    }

    /// The request is byte for byte what the generated encoder makes, and a WRITE's
    /// data (1 KiB or more) is sent from the caller's own buffer: no copy. Small data
    /// is copied (an iovec costs more).
    #[test]
    fn write_data_goes_out_from_the_callers_buffer() {
        let big = Bytes::from(vec![0xab; (1 << 20) + 3]);
        let small = Bytes::from_static(b"tiny");
        let ops = vec![
            nfs_argop4::OP_PUTROOTFH,
            write(big.clone()),
            write(small.clone()),
            nfs_argop4::OP_GETFH,
        ];
        let got = encode(2, &ops);
        let want = COMPOUND4args {
            tag: Bytes::from_static(b"txnfs"),
            minorversion: 2,
            argarray: ops,
        }
        .to_bytes();
        assert_eq!(got.to_bytes(), want);
        let shared: Vec<&Bytes> = got
            .parts()
            .iter()
            .filter(|p| p.as_ptr() == big.as_ptr())
            .collect();
        assert_eq!(
            shared.len(),
            1,
            "the 1 MiB data is its own part, not a copy"
        );
        assert_eq!(shared[0].len(), big.len());
        assert!(got.parts().iter().all(|p| p.as_ptr() != small.as_ptr()));
    }
}
