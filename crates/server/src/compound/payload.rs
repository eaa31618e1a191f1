//! Results that carry file data — v4 READ and READ_PLUS (RFC 8881 §18.22, RFC 7862
//! §15.10), v3 READ (RFC 1813 §3.3.6) — encoded with the data as its own part of the
//! reply, shared with the buffer the backend read it into (ADR 0052). The bytes on
//! the wire are exactly those of the generated encoders (a test compares them); every
//! other result is encoded into the reply's tail as before.

use bytes::Bytes;
use txnfs_proto::nfs3::READ3res;
use txnfs_xdr::{put_bool, put_i32, put_u32, put_u64, Encode, GatherBuf, Piped};

use crate::nfs::{nfs_opnum4, nfs_resop4, read_plus_content, READ4res, READ_PLUS4res};

/// Encodes op result `res` into `out`, file data as its own part: a READ's data from
/// `piped` if the op left it in a pipe (ADR 0065; the same bytes, the data the reply's
/// last part), else the buffer the backend read it into.
pub fn encode_v4(res: &nfs_resop4, piped: Option<Piped>, out: &mut GatherBuf) {
    match res {
        nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => {
            let tail = out.tail();
            put_i32(tail, nfs_opnum4::OP_READ as i32);
            put_i32(tail, 0);
            put_bool(tail, ok.eof);
            put_data(out, &ok.data, piped);
        }
        nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(ok)) => {
            let tail = out.tail();
            put_i32(tail, nfs_opnum4::OP_READ_PLUS as i32);
            put_i32(tail, 0);
            put_bool(tail, ok.rpr_eof);
            put_u32(tail, ok.rpr_contents.len() as u32);
            let last = ok.rpr_contents.len().saturating_sub(1);
            let mut piped = piped;
            for (i, content) in ok.rpr_contents.iter().enumerate() {
                match content {
                    read_plus_content::NFS4_CONTENT_DATA(d) => {
                        let tail = out.tail();
                        put_i32(tail, 0);
                        put_u64(tail, d.d_offset);
                        // (The op leaves a pipe only for its last content.)
                        let data = if i == last { piped.take() } else { None };
                        put_data(out, &d.d_data, data);
                    }
                    other => other.encode(out.tail()),
                }
            }
        }
        other => other.encode(out.tail()),
    }
}

/// Encodes v3 READ result `res` into `out`, file data as its own part (from `piped`
/// if the procedure left it in a pipe, as [`encode_v4`]).
pub fn encode_read3(res: &READ3res, piped: Option<Piped>, out: &mut GatherBuf) {
    match res {
        READ3res::NFS3_OK(ok) => {
            let tail = out.tail();
            put_i32(tail, 0);
            ok.file_attributes.encode(tail);
            put_u32(tail, ok.count);
            put_bool(tail, ok.eof);
            put_data(out, &ok.data, piped);
        }
        other => other.encode(out.tail()),
    }
}

/// A READ's `opaque<>` data: from the pipe if the op left it there, else `data`.
fn put_data(out: &mut GatherBuf, data: &Bytes, piped: Option<Piped>) {
    match piped {
        Some(p) => out.put_opaque_piped(p),
        None => out.put_opaque_shared(data.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::{data4, data_info4, read_plus_res4, READ4resok};
    use bytes::Bytes;
    use txnfs_proto::nfs3::{post_op_attr, READ3resok};
    use txnfs_xdr::SHARE_MIN;

    fn data(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i * 7) as u8).collect::<Vec<u8>>())
    }

    /// The bytes equal the generated encoder's, and data from `SHARE_MIN` bytes on is
    /// the very buffer it was (not a copy).
    fn check(res_v4: Option<&nfs_resop4>, res_v3: Option<&READ3res>, d: &Bytes) {
        let mut out = GatherBuf::default();
        let want = match (res_v4, res_v3) {
            (Some(r), _) => {
                encode_v4(r, None, &mut out);
                r.to_bytes()
            }
            (_, Some(r)) => {
                encode_read3(r, None, &mut out);
                r.to_bytes()
            }
            _ => unreachable!("a result to encode"),
        };
        let got = out.finish();
        assert_eq!(got.to_bytes(), want, "{} bytes of data", d.len());
        let shared = got.parts().iter().any(|p| p.as_ptr() == d.as_ptr());
        assert_eq!(shared, d.len() >= SHARE_MIN, "{} bytes shared", d.len());
    }

    #[test]
    fn reads_encode_as_generated_with_data_shared() {
        for n in [0, 5, 4096, 1 << 20] {
            let d = data(n);
            let read = nfs_resop4::OP_READ(READ4res::NFS4_OK(READ4resok {
                eof: true,
                data: d.clone(),
            }));
            check(Some(&read), None, &d);
            let plus = nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(read_plus_res4 {
                rpr_eof: false,
                rpr_contents: vec![
                    read_plus_content::NFS4_CONTENT_HOLE(data_info4 {
                        di_offset: 0,
                        di_length: 8192,
                    }),
                    read_plus_content::NFS4_CONTENT_DATA(data4 {
                        d_offset: 8192,
                        d_data: d.clone(),
                    }),
                ],
            }));
            check(Some(&plus), None, &d);
            let v3 = READ3res::NFS3_OK(READ3resok {
                file_attributes: post_op_attr::FALSE,
                count: n as u32,
                eof: false,
                data: d.clone(),
            });
            check(None, Some(&v3), &d);
        }
    }
}
