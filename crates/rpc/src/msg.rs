//! The small ONC RPC v2 message types of RFC 5531 §9, hand-written over the XDR helpers.

use bytes::{BufMut, Bytes, BytesMut};
use txnfs_xdr::{
    get_array, get_opaque, get_u32, put_opaque, put_u32, Decode, Encode, Result as XdrResult,
    XdrError,
};

/// The only RPC protocol version (`rpcvers`) defined.
pub const RPC_VERSION: u32 = 2;

/// `msg_type`.
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;

/// `reply_stat`.
pub const MSG_ACCEPTED: u32 = 0;
pub const MSG_DENIED: u32 = 1;

/// `accept_stat`.
pub const SUCCESS: u32 = 0;
pub const PROG_UNAVAIL: u32 = 1;
pub const PROG_MISMATCH: u32 = 2;
pub const PROC_UNAVAIL: u32 = 3;
pub const GARBAGE_ARGS: u32 = 4;
pub const SYSTEM_ERR: u32 = 5;

/// `reject_stat`.
pub const RPC_MISMATCH: u32 = 0;
pub const AUTH_ERROR: u32 = 1;

/// `auth_flavor` values.
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
pub const AUTH_SHORT: u32 = 2;
pub const AUTH_DH: u32 = 3;
pub const RPCSEC_GSS: u32 = 6;
/// RFC 9289 §4.1: the credential flavour of the probe that asks for TLS.
pub const AUTH_TLS: u32 = 7;

/// Maximum length of an `opaque_auth` body (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;
/// `string machinename<255>` in `authsys_parms`.
pub const MAX_MACHINE_NAME: usize = 255;
/// `unsigned int gids<16>` in `authsys_parms`.
pub const MAX_AUTH_SYS_GIDS: usize = 16;

/// `auth_stat` (RFC 5531 §9 plus the RPCSEC_GSS values of RFC 2203).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AuthStat {
    Ok = 0,
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
    InvalidResp = 6,
    Failed = 7,
    KerbGeneric = 8,
    TimeExpire = 9,
    TktFile = 10,
    Decode = 11,
    NetAddr = 12,
    RpcsecGssCredProblem = 13,
    RpcsecGssCtxProblem = 14,
}

impl AuthStat {
    pub fn from_u32(v: u32) -> Option<Self> {
        const ALL: [AuthStat; 15] = [
            AuthStat::Ok,
            AuthStat::BadCred,
            AuthStat::RejectedCred,
            AuthStat::BadVerf,
            AuthStat::RejectedVerf,
            AuthStat::TooWeak,
            AuthStat::InvalidResp,
            AuthStat::Failed,
            AuthStat::KerbGeneric,
            AuthStat::TimeExpire,
            AuthStat::TktFile,
            AuthStat::Decode,
            AuthStat::NetAddr,
            AuthStat::RpcsecGssCredProblem,
            AuthStat::RpcsecGssCtxProblem,
        ];
        ALL.get(v as usize).copied()
    }
}

impl Encode for AuthStat {
    fn encode(&self, out: &mut BytesMut) {
        put_u32(out, *self as u32)
    }
}

impl Decode for AuthStat {
    fn decode(src: &mut Bytes) -> XdrResult<Self> {
        let v = get_u32(src)?;
        AuthStat::from_u32(v).ok_or(XdrError::BadDiscriminant {
            type_name: "auth_stat",
            value: v as i64,
        })
    }
}

/// `opaque_auth`: a flavor and an opaque body of at most 400 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpaqueAuth {
    pub flavor: u32,
    pub body: Bytes,
}

impl OpaqueAuth {
    pub fn none() -> Self {
        OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::new(),
        }
    }
}

impl Encode for OpaqueAuth {
    fn encode(&self, out: &mut BytesMut) {
        put_u32(out, self.flavor);
        put_opaque(out, &self.body);
    }
}

impl Decode for OpaqueAuth {
    fn decode(src: &mut Bytes) -> XdrResult<Self> {
        let flavor = get_u32(src)?;
        let body = get_opaque(src, MAX_AUTH_BYTES)?;
        Ok(OpaqueAuth { flavor, body })
    }
}

/// `authsys_parms` (RFC 5531 appendix A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSys {
    pub stamp: u32,
    pub machinename: Bytes,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl Encode for AuthSys {
    fn encode(&self, out: &mut BytesMut) {
        put_u32(out, self.stamp);
        put_opaque(out, &self.machinename);
        put_u32(out, self.uid);
        put_u32(out, self.gid);
        put_u32(out, self.gids.len() as u32);
        for g in &self.gids {
            put_u32(out, *g);
        }
    }
}

impl Decode for AuthSys {
    fn decode(src: &mut Bytes) -> XdrResult<Self> {
        let stamp = get_u32(src)?;
        let machinename = get_opaque(src, MAX_MACHINE_NAME)?;
        let uid = get_u32(src)?;
        let gid = get_u32(src)?;
        let gids = get_array::<u32>(src, MAX_AUTH_SYS_GIDS)?;
        Ok(AuthSys {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }
}

/// The credential of a call, as the server understood it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Credential {
    #[default]
    None,
    Sys(AuthSys),
}

impl Credential {
    /// The `opaque_auth` that carries this credential on the wire.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        match self {
            Credential::None => OpaqueAuth::none(),
            Credential::Sys(s) => OpaqueAuth {
                flavor: AUTH_SYS,
                body: s.to_bytes(),
            },
        }
    }
}

/// `call_body` up to (not including) the procedure arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub cred: OpaqueAuth,
    pub verf: OpaqueAuth,
}

impl CallHeader {
    /// The header of a CALL of `proc_num` in `prog` version `vers` with `cred` and a
    /// null verifier.
    pub fn new(xid: u32, prog: u32, vers: u32, proc_num: u32, cred: &Credential) -> Self {
        CallHeader {
            xid,
            rpcvers: RPC_VERSION,
            prog,
            vers,
            proc_num,
            cred: cred.to_opaque_auth(),
            verf: OpaqueAuth::none(),
        }
    }
}

impl Encode for CallHeader {
    fn encode(&self, out: &mut BytesMut) {
        put_u32(out, self.xid);
        put_u32(out, MSG_CALL);
        put_u32(out, self.rpcvers);
        put_u32(out, self.prog);
        put_u32(out, self.vers);
        put_u32(out, self.proc_num);
        self.cred.encode(out);
        self.verf.encode(out);
    }
}

/// `accepted_reply` status with its arms (the SUCCESS results follow separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptedStatus {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// `rejected_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectedReply {
    RpcMismatch { low: u32, high: u32 },
    AuthError(AuthStat),
}

/// A reply message header: `xid`, `REPLY`, and the `reply_body` up to the results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyHeader {
    Accepted {
        verf: OpaqueAuth,
        stat: AcceptedStatus,
    },
    Denied(RejectedReply),
}

/// How many bytes [`encode_reply_header`] writes for `hdr`: the reply's head is sized
/// exactly, so that it becomes `Bytes` without a shared header of its own (one
/// allocation fewer per reply, ADR 0064 addendum).
pub fn reply_header_len(hdr: &ReplyHeader) -> usize {
    // xid, message type, reply status
    12 + match hdr {
        ReplyHeader::Accepted { verf, stat } => {
            let verf = 8 + verf.body.len().div_ceil(4) * 4;
            let mismatch = matches!(stat, AcceptedStatus::ProgMismatch { .. });
            verf + 4 + if mismatch { 8 } else { 0 }
        }
        ReplyHeader::Denied(RejectedReply::RpcMismatch { .. }) => 12,
        ReplyHeader::Denied(RejectedReply::AuthError(_)) => 8,
    }
}

/// Encode `xid`, `REPLY` and the reply header (results, if any, are appended by the caller).
pub fn encode_reply_header(out: &mut BytesMut, xid: u32, hdr: &ReplyHeader) {
    put_u32(out, xid);
    put_u32(out, MSG_REPLY);
    match hdr {
        ReplyHeader::Accepted { verf, stat } => {
            put_u32(out, MSG_ACCEPTED);
            verf.encode(out);
            match *stat {
                AcceptedStatus::Success => put_u32(out, SUCCESS),
                AcceptedStatus::ProgUnavail => put_u32(out, PROG_UNAVAIL),
                AcceptedStatus::ProgMismatch { low, high } => {
                    put_u32(out, PROG_MISMATCH);
                    put_u32(out, low);
                    put_u32(out, high);
                }
                AcceptedStatus::ProcUnavail => put_u32(out, PROC_UNAVAIL),
                AcceptedStatus::GarbageArgs => put_u32(out, GARBAGE_ARGS),
                AcceptedStatus::SystemErr => put_u32(out, SYSTEM_ERR),
            }
        }
        ReplyHeader::Denied(r) => {
            put_u32(out, MSG_DENIED);
            match *r {
                RejectedReply::RpcMismatch { low, high } => {
                    put_u32(out, RPC_MISMATCH);
                    put_u32(out, low);
                    put_u32(out, high);
                }
                RejectedReply::AuthError(s) => {
                    put_u32(out, AUTH_ERROR);
                    s.encode(out);
                }
            }
        }
    }
}

/// Decode a reply message: returns the xid, the header, and (for SUCCESS) the results
/// that follow; `src` must start at the xid.
pub fn decode_reply_message(mut src: Bytes) -> XdrResult<(u32, ReplyHeader, Bytes)> {
    let xid = get_u32(&mut src)?;
    let mtype = get_u32(&mut src)?;
    if mtype != MSG_REPLY {
        return Err(XdrError::BadDiscriminant {
            type_name: "msg_type (expected REPLY)",
            value: mtype as i64,
        });
    }
    let hdr = match get_u32(&mut src)? {
        MSG_ACCEPTED => {
            let verf = OpaqueAuth::decode(&mut src)?;
            let stat = match get_u32(&mut src)? {
                SUCCESS => AcceptedStatus::Success,
                PROG_UNAVAIL => AcceptedStatus::ProgUnavail,
                PROG_MISMATCH => {
                    let low = get_u32(&mut src)?;
                    let high = get_u32(&mut src)?;
                    AcceptedStatus::ProgMismatch { low, high }
                }
                PROC_UNAVAIL => AcceptedStatus::ProcUnavail,
                GARBAGE_ARGS => AcceptedStatus::GarbageArgs,
                SYSTEM_ERR => AcceptedStatus::SystemErr,
                v => {
                    return Err(XdrError::BadDiscriminant {
                        type_name: "accept_stat",
                        value: v as i64,
                    })
                }
            };
            ReplyHeader::Accepted { verf, stat }
        }
        MSG_DENIED => match get_u32(&mut src)? {
            RPC_MISMATCH => {
                let low = get_u32(&mut src)?;
                let high = get_u32(&mut src)?;
                ReplyHeader::Denied(RejectedReply::RpcMismatch { low, high })
            }
            AUTH_ERROR => {
                ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::decode(&mut src)?))
            }
            v => {
                return Err(XdrError::BadDiscriminant {
                    type_name: "reject_stat",
                    value: v as i64,
                })
            }
        },
        v => {
            return Err(XdrError::BadDiscriminant {
                type_name: "reply_stat",
                value: v as i64,
            })
        }
    };
    Ok((xid, hdr, src))
}

/// Largest fragment length expressible in a record mark.
pub const MAX_FRAGMENT: usize = 0x7fff_ffff;
/// The last-fragment bit of a record mark.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// Prefix `msg` with a single record mark (last fragment). Messages longer than 2^31-1
/// bytes are split into several fragments.
pub fn record(msg: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + 4);
    let mut rest = msg;
    loop {
        let n = rest.len().min(MAX_FRAGMENT);
        let last = n == rest.len();
        out.put_u32(n as u32 | if last { LAST_FRAGMENT } else { 0 });
        out.put_slice(&rest[..n]);
        rest = &rest[n..];
        if last {
            break;
        }
    }
    out.freeze()
}

/// Completes the one-fragment record that `out` holds from its 4-byte placeholder
/// mark on, followed by `body`: the mark is set and `body` is copied into `out` when
/// `inline`, else returned as a second buffer (a large body gets an iovec of its own).
pub(crate) fn finish_record(mut out: BytesMut, body: Bytes, inline: bool) -> (Bytes, Bytes) {
    let len = out.len() - 4 + body.len();
    out[..4].copy_from_slice(&(len as u32 | LAST_FRAGMENT).to_be_bytes());
    if inline {
        out.put_slice(&body);
        (out.freeze(), Bytes::new())
    } else {
        (out.freeze(), body)
    }
}

/// Encode a complete CALL message (without record mark): header, null verifier, `args`.
pub fn encode_call(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    cred: &Credential,
    args: &[u8],
) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + args.len());
    encode_call_into(
        &mut out,
        &CallHeader::new(xid, prog, vers, proc_num, cred),
        args,
    );
    out.freeze()
}

pub(crate) fn encode_call_into(out: &mut BytesMut, header: &CallHeader, args: &[u8]) {
    header.encode(out);
    out.put_slice(args);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_stat_values() {
        for v in 0..15 {
            let s = AuthStat::from_u32(v).expect("defined");
            assert_eq!(s as u32, v);
        }
        assert_eq!(AuthStat::from_u32(15), None);
        assert_eq!(AuthStat::BadCred as u32, 1);
    }

    #[test]
    fn reply_headers_round_trip() {
        let hdrs = [
            ReplyHeader::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptedStatus::Success,
            },
            ReplyHeader::Accepted {
                verf: OpaqueAuth {
                    flavor: 9,
                    body: Bytes::from_static(b"xyz"),
                },
                stat: AcceptedStatus::ProgMismatch { low: 3, high: 7 },
            },
            ReplyHeader::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptedStatus::SystemErr,
            },
            ReplyHeader::Denied(RejectedReply::RpcMismatch { low: 2, high: 2 }),
            ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::TooWeak)),
        ];
        for (i, h) in hdrs.iter().enumerate() {
            let mut out = BytesMut::new();
            encode_reply_header(&mut out, i as u32, h);
            assert_eq!(out.len(), reply_header_len(h), "{h:?}");
            out.put_slice(b"results");
            let (xid, back, rest) = decode_reply_message(out.freeze()).expect("decode");
            assert_eq!(xid, i as u32);
            assert_eq!(&back, h);
            assert_eq!(&rest[..], b"results");
        }
    }

    #[test]
    fn auth_sys_bounds() {
        let s = AuthSys {
            stamp: 1,
            machinename: Bytes::from_static(b"host"),
            uid: 2,
            gid: 3,
            gids: (0..16).collect(),
        };
        assert_eq!(AuthSys::from_bytes(s.to_bytes()), Ok(s.clone()));
        let mut t = s.clone();
        t.gids.push(99);
        assert!(AuthSys::from_bytes(t.to_bytes()).is_err());
        let mut t = s;
        t.machinename = Bytes::from(vec![b'a'; 256]);
        assert!(AuthSys::from_bytes(t.to_bytes()).is_err());
    }

    #[test]
    fn record_mark() {
        let r = record(b"hello");
        assert_eq!(&r[..4], &(0x8000_0005u32).to_be_bytes());
        assert_eq!(&r[4..], b"hello");
        let r = record(b"");
        assert_eq!(&r[..], &LAST_FRAGMENT.to_be_bytes());
    }

    #[test]
    fn call_encoding() {
        let c = encode_call(5, 100003, 4, 1, &Credential::None, b"ab");
        let mut src = c;
        let words: Vec<u32> = (0..10).map(|_| get_u32(&mut src).expect("u32")).collect();
        assert_eq!(words, [5, MSG_CALL, 2, 100003, 4, 1, 0, 0, 0, 0]);
        assert_eq!(&src[..], b"ab");
    }
}
