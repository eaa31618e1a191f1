//! RPCSEC_GSS v1 wire formats (RFC 2203 §5): the credential, the context creation
//! arguments and results, and the integrity and privacy bodies.

use bytes::{BufMut, Bytes, BytesMut};
use txnfs_xdr::{get_opaque, get_u32, XdrError};

/// The RPCSEC_GSS auth flavour (RFC 2203 §5).
pub const RPCSEC_GSS: u32 = 6;
pub const RPCSEC_GSS_VERS_1: u32 = 1;
/// MAXSEQ (RFC 2203 §5.3.3.1): a sequence number above it ends the context.
pub const MAXSEQ: u32 = 0x8000_0000;
/// Largest context handle, token, MIC or sealed body this side accepts in a credential
/// or a control call (a Kerberos AP-REQ with a PAC is a few KiB).
pub const MAX_TOKEN: usize = 64 * 1024;

/// `rpc_gss_proc_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GssProc {
    Data = 0,
    Init = 1,
    ContinueInit = 2,
    Destroy = 3,
}

/// `rpc_gss_service_t`: what protects the arguments and results of a data call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GssService {
    /// krb5: only the header is signed.
    None = 1,
    /// krb5i: arguments and results carry a MIC.
    Integrity = 2,
    /// krb5p: arguments and results are encrypted.
    Privacy = 3,
}

impl GssService {
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => GssService::None,
            2 => GssService::Integrity,
            3 => GssService::Privacy,
            _ => return None,
        })
    }

    /// The pseudo-flavour number of krb5 with this service (RFC 2623 §2.2).
    pub fn pseudo_flavor(self) -> u32 {
        match self {
            GssService::None => 390003,
            GssService::Integrity => 390004,
            GssService::Privacy => 390005,
        }
    }
}

/// `rpc_gss_cred_vers_1_t` (after the version word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssCred {
    pub proc_: GssProc,
    pub seq_num: u32,
    pub service: GssService,
    pub handle: Bytes,
}

/// Why a credential body is not an RPCSEC_GSS v1 credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredError {
    #[error("RPCSEC_GSS version {0} (only 1 is known)")]
    Version(u32),
    #[error("unknown gss_proc {0}")]
    Proc(u32),
    #[error("unknown service {0}")]
    Service(u32),
    #[error("malformed credential: {0}")]
    Xdr(#[from] XdrError),
    #[error("trailing bytes after the credential")]
    Trailing,
}

impl GssCred {
    pub fn decode(mut body: Bytes) -> Result<Self, CredError> {
        let version = get_u32(&mut body)?;
        if version != RPCSEC_GSS_VERS_1 {
            return Err(CredError::Version(version));
        }
        let proc_ = match get_u32(&mut body)? {
            0 => GssProc::Data,
            1 => GssProc::Init,
            2 => GssProc::ContinueInit,
            3 => GssProc::Destroy,
            p => return Err(CredError::Proc(p)),
        };
        let seq_num = get_u32(&mut body)?;
        let s = get_u32(&mut body)?;
        let service = GssService::from_u32(s).ok_or(CredError::Service(s))?;
        let handle = get_opaque(&mut body, MAX_TOKEN)?;
        if !body.is_empty() {
            return Err(CredError::Trailing);
        }
        Ok(GssCred {
            proc_,
            seq_num,
            service,
            handle,
        })
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(24 + self.handle.len());
        out.put_u32(RPCSEC_GSS_VERS_1);
        out.put_u32(self.proc_ as u32);
        out.put_u32(self.seq_num);
        out.put_u32(self.service as u32);
        put_opaque(&mut out, &self.handle);
        out.freeze()
    }
}

/// XDR variable-length opaque: length, bytes, zero padding to 4.
pub fn put_opaque(out: &mut BytesMut, data: &[u8]) {
    out.put_u32(data.len() as u32);
    out.put_slice(data);
    out.put_bytes(0, (4 - data.len() % 4) % 4);
}

/// `rpc_gss_init_res` (RFC 2203 §5.2.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitRes {
    pub handle: Bytes,
    pub gss_major: u32,
    pub gss_minor: u32,
    pub seq_window: u32,
    pub token: Bytes,
}

impl InitRes {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(24 + self.handle.len() + self.token.len());
        put_opaque(&mut out, &self.handle);
        out.put_u32(self.gss_major);
        out.put_u32(self.gss_minor);
        out.put_u32(self.seq_window);
        put_opaque(&mut out, &self.token);
        out.freeze()
    }

    pub fn decode(mut src: Bytes) -> Result<Self, XdrError> {
        Ok(InitRes {
            handle: get_opaque(&mut src, MAX_TOKEN)?,
            gss_major: get_u32(&mut src)?,
            gss_minor: get_u32(&mut src)?,
            seq_window: get_u32(&mut src)?,
            token: get_opaque(&mut src, MAX_TOKEN)?,
        })
    }
}

/// `seq_num` followed by `body`: what is signed (`rpc_gss_data_t`, §5.3.2.2) or sealed.
pub fn seq_body(seq_num: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&seq_num.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Split `rpc_gss_data_t` into its sequence number and body.
pub fn split_seq(data: &[u8]) -> Option<(u32, &[u8])> {
    let (seq, body) = data.split_at_checked(4)?;
    Some((u32::from_be_bytes(seq.try_into().ok()?), body))
}

/// `rpc_gss_integ_data`: the signed data and its MIC.
pub fn encode_integ(data: &[u8], mic: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + data.len() + mic.len());
    put_opaque(&mut out, data);
    put_opaque(&mut out, mic);
    out.freeze()
}

pub fn decode_integ(mut src: Bytes, max: usize) -> Result<(Bytes, Bytes), XdrError> {
    let data = get_opaque(&mut src, max)?;
    let mic = get_opaque(&mut src, MAX_TOKEN)?;
    Ok((data, mic))
}

/// `rpc_gss_priv_data`: the sealed data.
pub fn encode_priv(sealed: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + sealed.len());
    put_opaque(&mut out, sealed);
    out.freeze()
}

pub fn decode_priv(mut src: Bytes, max: usize) -> Result<Bytes, XdrError> {
    get_opaque(&mut src, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_round_trips_and_matches_the_rfc_layout() {
        let cred = GssCred {
            proc_: GssProc::Data,
            seq_num: 7,
            service: GssService::Privacy,
            handle: Bytes::from_static(b"\x01\x02\x03"),
        };
        let wire = cred.encode();
        assert_eq!(
            &wire[..],
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 3, 0, 0, 0, 3, 1, 2, 3, 0][..]
        );
        assert_eq!(GssCred::decode(wire).unwrap(), cred);
    }

    #[test]
    fn credential_errors_are_typed() {
        let mut bad = BytesMut::new();
        bad.put_u32(2);
        assert_eq!(GssCred::decode(bad.freeze()), Err(CredError::Version(2)));
        let mut bad = BytesMut::new();
        bad.put_u32(1);
        bad.put_u32(9);
        assert_eq!(GssCred::decode(bad.freeze()), Err(CredError::Proc(9)));
        let mut bad = BytesMut::new();
        for v in [1, 0, 1, 4] {
            bad.put_u32(v);
        }
        put_opaque(&mut bad, b"");
        assert_eq!(GssCred::decode(bad.freeze()), Err(CredError::Service(4)));
        let mut trailing = GssCred {
            proc_: GssProc::Init,
            seq_num: 0,
            service: GssService::None,
            handle: Bytes::new(),
        }
        .encode()
        .to_vec();
        trailing.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            GssCred::decode(Bytes::from(trailing)),
            Err(CredError::Trailing)
        );
    }

    #[test]
    fn init_res_round_trips() {
        let res = InitRes {
            handle: Bytes::from_static(b"ctx1"),
            gss_major: 1,
            gss_minor: 0,
            seq_window: 128,
            token: Bytes::from_static(b"tokenbytes"),
        };
        let wire = res.encode();
        assert_eq!(&wire[..8], &[0, 0, 0, 4, b'c', b't', b'x', b'1']);
        assert_eq!(InitRes::decode(wire).unwrap(), res);
    }

    #[test]
    fn integrity_and_privacy_bodies() {
        let data = seq_body(5, b"args");
        assert_eq!(split_seq(&data), Some((5, &b"args"[..])));
        assert_eq!(split_seq(b"ab"), None);
        let integ = encode_integ(&data, b"mic");
        let (d, m) = decode_integ(integ, 1024).unwrap();
        assert_eq!((&d[..], &m[..]), (&data[..], &b"mic"[..]));
        let sealed = encode_priv(b"sealed");
        assert_eq!(&decode_priv(sealed, 1024).unwrap()[..], b"sealed");
    }

    #[test]
    fn pseudo_flavors_are_rfc_2623s() {
        assert_eq!(GssService::None.pseudo_flavor(), 390003);
        assert_eq!(GssService::Integrity.pseudo_flavor(), 390004);
        assert_eq!(GssService::Privacy.pseudo_flavor(), 390005);
    }
}
