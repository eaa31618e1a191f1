//! The AUTH_TLS probe and the upgrade of a connection to TLS (RFC 9289 §4.1): the
//! client sends a NULL call whose credential flavour is AUTH_TLS; a server willing to
//! speak TLS answers SUCCESS with an AUTH_NONE verifier whose body is "STARTTLS", and
//! the TLS handshake follows on the same TCP connection; RPC record marking then runs
//! inside TLS. A server that is not willing answers as for any unknown flavour
//! (AUTH_ERROR, AUTH_BADCRED; `server.rs` does that).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info};

use crate::msg::*;
use crate::record::RecordReader;
use crate::tls::{identity_of, ClientTls, ServerTls, TlsPeer};
use crate::RpcError;

/// The verifier body of the server's answer to the probe.
pub const STARTTLS: &[u8; 8] = b"STARTTLS";

/// How long the probe's answer and the TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a call up to and including its credential flavour: record mark, xid,
/// msg_type, rpcvers, prog, vers, proc, flavour. Every valid call is longer (it has a
/// credential length and a verifier after), so reading them never waits for bytes a
/// client will not send.
pub(crate) const PROBE_PREFIX: usize = 32;

/// Largest probe record accepted: a call header with the largest credential and
/// verifier bodies.
const MAX_PROBE_RECORD: usize = 28 + 2 * (8 + MAX_AUTH_BYTES);

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Whether the first [`PROBE_PREFIX`] bytes of a connection open an AUTH_TLS probe: a
/// NULL call (procedure 0) of RPC version 2 with credential flavour AUTH_TLS, as one
/// last fragment.
pub(crate) fn is_probe(head: &[u8; PROBE_PREFIX]) -> bool {
    word(head, 0) & LAST_FRAGMENT != 0
        && word(head, 8) == MSG_CALL
        && word(head, 12) == RPC_VERSION
        && word(head, 24) == 0
        && word(head, 28) == AUTH_TLS
}

/// A server connection after its first bytes were looked at.
pub(crate) enum Negotiated {
    /// No probe: the bytes already read, to be parsed as the start of the first record.
    Plain(TcpStream, Bytes),
    /// Upgraded: the TLS stream, and what is known of the client.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, TlsPeer),
    /// The client went away, sent a malformed probe, or failed the handshake.
    Closed,
}

/// The server's side: read the connection's first bytes; if they open an AUTH_TLS
/// probe, read the rest of it, answer STARTTLS and run the TLS handshake.
pub(crate) async fn accept(mut stream: TcpStream, tls: &ServerTls, peer: SocketAddr) -> Negotiated {
    let mut head = [0u8; PROBE_PREFIX];
    if stream.read_exact(&mut head).await.is_err() {
        debug!(%peer, "connection closed before its first call");
        return Negotiated::Closed;
    }
    if !is_probe(&head) {
        return Negotiated::Plain(stream, Bytes::copy_from_slice(&head));
    }
    let xid = word(&head, 4);
    let len = (word(&head, 0) & !LAST_FRAGMENT) as usize;
    if !(PROBE_PREFIX - 4..=MAX_PROBE_RECORD).contains(&len) {
        info!(%peer, len, "AUTH_TLS probe of an impossible size; closing connection");
        return Negotiated::Closed;
    }
    // The credential and verifier after the flavour: not looked at (RFC 9289 §4.1:
    // the probe's credential body is empty; a client that sends one is still served).
    let mut rest = vec![0u8; len - (PROBE_PREFIX - 4)];
    let upgraded = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        stream.read_exact(&mut rest).await?;
        stream.write_all(&starttls_reply(xid)).await?;
        tls.acceptor().accept(stream).await
    })
    .await;
    match upgraded {
        Ok(Ok(stream)) => {
            let (_, session) = stream.get_ref();
            let client_identity = session
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(identity_of);
            debug!(%peer, client = ?client_identity, "connection upgraded to TLS");
            Negotiated::Tls(Box::new(stream), TlsPeer { client_identity })
        }
        Ok(Err(e)) => {
            info!(%peer, error = %e, "TLS handshake failed; closing connection");
            Negotiated::Closed
        }
        Err(_) => {
            info!(%peer, "TLS handshake timed out; closing connection");
            Negotiated::Closed
        }
    }
}

/// The answer to a probe: SUCCESS, verifier AUTH_NONE with body "STARTTLS", no results.
fn starttls_reply(xid: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(40);
    out.put_u32(0);
    let hdr = ReplyHeader::Accepted {
        verf: OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::from_static(STARTTLS),
        },
        stat: AcceptedStatus::Success,
    };
    encode_reply_header(&mut out, xid, &hdr);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.freeze()
}

/// The AUTH_TLS probe: a NULL call of `prog`/`vers` with an empty AUTH_TLS
/// credential and a null verifier.
fn probe_record(xid: u32, (prog, vers): (u32, u32)) -> Bytes {
    let header = CallHeader {
        xid,
        rpcvers: RPC_VERSION,
        prog,
        vers,
        proc_num: 0,
        cred: OpaqueAuth {
            flavor: AUTH_TLS,
            body: Bytes::new(),
        },
        verf: OpaqueAuth::none(),
    };
    let mut out = BytesMut::with_capacity(48);
    out.put_u32(0);
    encode_call_into(&mut out, &header, &[]);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.freeze()
}

/// The client's side: send the probe on `stream`, check that the answer is
/// STARTTLS, and run the TLS handshake, verifying the server's certificate against
/// the configured name (else `addr`'s IP address).
pub(crate) async fn connect(
    mut stream: TcpStream,
    tls: &ClientTls,
    addr: SocketAddr,
    xid: u32,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, RpcError> {
    let refused = |why: String| RpcError::TlsRefused { addr, why };
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        stream
            .write_all(&probe_record(xid, tls.probe_program))
            .await?;
        let mut reader = RecordReader::new(&mut stream, MAX_PROBE_RECORD);
        let rec = reader.next_record().await;
        let stray = reader.buffered();
        Ok::<_, std::io::Error>((rec, stray))
    })
    .await;
    let (rec, stray) = match answer {
        Err(_) => {
            return Err(refused(format!(
                "no answer to the AUTH_TLS probe within {HANDSHAKE_TIMEOUT:?}"
            )))
        }
        Ok(Err(e)) => return Err(RpcError::Io(e)),
        Ok(Ok(r)) => r,
    };
    let rec = match rec {
        Ok(Some(rec)) => rec,
        Ok(None) => {
            return Err(refused(
                "it closed the connection on the AUTH_TLS probe".into(),
            ))
        }
        Err(e) => return Err(refused(format!("bad answer to the AUTH_TLS probe: {e}"))),
    };
    if stray > 0 {
        return Err(refused(
            "it sent bytes after its answer to the AUTH_TLS probe".into(),
        ));
    }
    check_starttls(rec, xid).map_err(refused)?;
    let name = match &tls.server_name {
        Some(name) => name.clone(),
        None => rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
    };
    let handshake =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connector.connect(name, stream)).await;
    match handshake {
        Err(_) => Err(RpcError::TlsHandshake {
            addr,
            why: format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
        }),
        Ok(Err(e)) => Err(RpcError::TlsHandshake {
            addr,
            why: e.to_string(),
        }),
        Ok(Ok(s)) => Ok(s),
    }
}

/// The probe's answer must be an accepted SUCCESS for `xid` with the STARTTLS verifier.
fn check_starttls(rec: Bytes, xid: u32) -> Result<(), String> {
    let (got, hdr, _) = decode_reply_message(rec)
        .map_err(|e| format!("undecodable answer to the AUTH_TLS probe: {e}"))?;
    if got != xid {
        return Err(format!(
            "answer to the AUTH_TLS probe has xid {got}, not {xid}"
        ));
    }
    match hdr {
        ReplyHeader::Accepted {
            verf,
            stat: AcceptedStatus::Success,
        } if verf.flavor == AUTH_NONE && verf.body[..] == STARTTLS[..] => Ok(()),
        ReplyHeader::Accepted { verf, stat } => Err(format!(
            "it answered the AUTH_TLS probe with {stat:?} and a verifier of flavour {} instead of STARTTLS",
            verf.flavor
        )),
        ReplyHeader::Denied(r) => Err(format!(
            "it does not offer RPC-with-TLS (the AUTH_TLS probe was refused: {r:?})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_recognised_by_its_first_bytes_only() {
        let probe = probe_record(42, (100003, 4));
        let head: [u8; PROBE_PREFIX] = probe[..PROBE_PREFIX].try_into().unwrap();
        assert!(is_probe(&head));
        // An AUTH_SYS NULL call, and an AUTH_TLS call of another procedure, are not.
        let sys = encode_call(7, 100003, 4, 0, &Credential::None, &[]);
        let framed = record(&sys);
        assert!(!is_probe(&framed[..PROBE_PREFIX].try_into().unwrap()));
        let mut other = BytesMut::from(&probe[..]);
        other[24..28].copy_from_slice(&1u32.to_be_bytes());
        assert!(!is_probe(&other[..PROBE_PREFIX].try_into().unwrap()));
    }

    #[test]
    fn starttls_answer_is_checked() {
        let reply = starttls_reply(9);
        assert!(reply.windows(8).any(|w| w == STARTTLS));
        assert_eq!(check_starttls(reply.slice(4..), 9), Ok(()));
        let err = check_starttls(reply.slice(4..), 10).unwrap_err();
        assert!(err.contains("xid"), "{err}");
        let mut denied = BytesMut::new();
        encode_reply_header(
            &mut denied,
            9,
            &ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::BadCred)),
        );
        let err = check_starttls(denied.freeze(), 9).unwrap_err();
        assert!(err.contains("does not offer RPC-with-TLS"), "{err}");
    }
}
