//! RPCSEC_GSS on the client (RFC 2203 §5.2, §5.3.1-2): the context is created once per
//! connection with INIT / CONTINUE_INIT on the NULL procedure, then every call carries
//! a sequence number, the header's MIC, and its arguments signed or sealed; replies
//! are checked the same way.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use bytes::{BufMut, Bytes, BytesMut};

use super::gssapi::{self, Cred, SecContext, GSS_S_CONTINUE_NEEDED};
use super::wire::{self, GssCred, GssProc, GssService, InitRes, RPCSEC_GSS};
use crate::msg::{OpaqueAuth, LAST_FRAGMENT, MSG_CALL, RPC_VERSION};
use crate::RpcError;

/// How our client uses Kerberos on a connection.
#[derive(Debug, Clone)]
pub struct GssClientConfig {
    /// The server's service principal as `service@host` (`nfs@server.example`).
    pub target: String,
    pub service: GssService,
    /// The credential cache; `None`: `KRB5CCNAME`, else the library's default.
    pub ccache: Option<String>,
    /// The program and version whose NULL procedure carries the context creation.
    pub program: u32,
    pub version: u32,
}

/// An established context on one connection.
pub(crate) struct GssSession {
    ctx: Mutex<SecContext>,
    handle: Bytes,
    service: GssService,
    next_seq: AtomicU32,
    peer: SocketAddr,
    /// The program and version whose NULL procedure carried INIT (and carries DESTROY).
    program: (u32, u32),
    /// DESTROY was sent: no call may use the context any more.
    destroyed: std::sync::atomic::AtomicBool,
}

fn gss_err(peer: SocketAddr, why: impl std::fmt::Display) -> RpcError {
    RpcError::Gss {
        addr: peer,
        why: why.to_string(),
    }
}

/// The header of a call (xid to the end of the credential), which the verifier signs.
fn call_header(xid: u32, prog: u32, vers: u32, proc_num: u32, cred: &GssCred) -> BytesMut {
    let cred = cred.encode();
    let mut out = BytesMut::with_capacity(40 + cred.len());
    for v in [xid, MSG_CALL, RPC_VERSION, prog, vers, proc_num, RPCSEC_GSS] {
        out.put_u32(v);
    }
    wire::put_opaque(&mut out, &cred);
    out
}

/// A whole record: mark, header, verifier, arguments.
fn record(header: &[u8], verf: &OpaqueAuth, args: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(12 + header.len() + verf.body.len() + args.len());
    out.put_u32(0);
    out.put_slice(header);
    out.put_u32(verf.flavor);
    wire::put_opaque(&mut out, &verf.body);
    out.put_slice(args);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.freeze()
}

/// The outcome of a reply record as for AUTH_SYS, keeping the verifier.
fn split_reply(raw: Bytes) -> Result<(OpaqueAuth, Bytes), RpcError> {
    crate::client::decode_verified_reply(raw)?.1
}

/// A data call's reply: the verifier of every accepted reply (SUCCESS or not: RFC 2203
/// §5.3.3.2 signs them all) with its outcome, or a denied reply's error (no verifier).
fn split_accepted(raw: Bytes) -> Result<(OpaqueAuth, Result<Bytes, RpcError>), RpcError> {
    use crate::msg::{AcceptedStatus, RejectedReply, ReplyHeader};
    let (_, hdr, rest) = crate::msg::decode_reply_message(raw)?;
    let (verf, stat) = match hdr {
        ReplyHeader::Accepted { verf, stat } => (verf, stat),
        ReplyHeader::Denied(RejectedReply::RpcMismatch { low, high }) => {
            return Err(RpcError::RpcMismatch { low, high })
        }
        ReplyHeader::Denied(RejectedReply::AuthError(s)) => return Err(RpcError::AuthError(s)),
    };
    let outcome = match stat {
        AcceptedStatus::Success => Ok(rest),
        AcceptedStatus::ProgUnavail => Err(RpcError::ProgUnavail),
        AcceptedStatus::ProgMismatch { low, high } => Err(RpcError::ProgMismatch { low, high }),
        AcceptedStatus::ProcUnavail => Err(RpcError::ProcUnavail),
        AcceptedStatus::GarbageArgs => Err(RpcError::GarbageArgs),
        AcceptedStatus::SystemErr => Err(RpcError::SystemErr),
    };
    Ok((verf, outcome))
}

/// Sends one record and returns the whole reply record.
pub(crate) trait RawCaller {
    fn next_xid(&self) -> u32;
    fn call_whole(
        &self,
        xid: u32,
        wire: Bytes,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send;
    /// Like `call_whole`, with the record built by `make` and queued under one lock of
    /// the connection: records built this way leave in the order they were built.
    fn call_whole_built(
        &self,
        xid: u32,
        make: impl FnOnce() -> Result<Bytes, RpcError> + Send,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send;
}

/// Create a context with the server behind `rpc` (§5.2.2), on `prog`/`vers`'s NULL
/// procedure.
pub(crate) async fn establish<C: RawCaller + Sync>(
    rpc: &C,
    peer: SocketAddr,
    cfg: &GssClientConfig,
) -> Result<GssSession, RpcError> {
    let (prog, vers) = (cfg.program, cfg.version);
    let cred: Cred = gssapi::initiator_cred(cfg.ccache.as_deref()).map_err(|e| gss_err(peer, e))?;
    let mut ctx = SecContext::new();
    let mut input = Vec::new();
    let mut handle = Bytes::new();
    let mut done: Option<(OpaqueAuth, u32)> = None;
    // Kerberos needs one round trip (two with DCE-style); a few more are a broken peer.
    for round in 0..6 {
        let step = ctx
            .init(&cred, &cfg.target, &input)
            .map_err(|e| gss_err(peer, e))?;
        if !step.token.is_empty() {
            let gc = GssCred {
                proc_: if round == 0 {
                    GssProc::Init
                } else {
                    GssProc::ContinueInit
                },
                seq_num: 0,
                service: cfg.service,
                handle: handle.clone(),
            };
            let xid = rpc.next_xid();
            let header = call_header(xid, prog, vers, 0, &gc);
            let mut args = BytesMut::new();
            wire::put_opaque(&mut args, &step.token);
            let raw = rpc
                .call_whole(xid, record(&header, &OpaqueAuth::none(), &args))
                .await?;
            let (verf, results) = match split_reply(raw) {
                Err(RpcError::AuthError(s)) => {
                    return Err(gss_err(
                        peer,
                        format_args!(
                            "the server refused RPCSEC_GSS ({s:?}); it may not offer Kerberos"
                        ),
                    ))
                }
                r => r?,
            };
            let res = InitRes::decode(results)?;
            if res.gss_major != 0 && res.gss_major != GSS_S_CONTINUE_NEEDED {
                return Err(gss_err(
                    peer,
                    format_args!(
                        "the server could not accept our Kerberos ticket (GSS major {:#x}, minor {}): {}; \
                         its keytab may lack the current key of {} (its log says more)",
                        res.gss_major,
                        res.gss_minor,
                        gssapi::describe(res.gss_major, res.gss_minor),
                        cfg.target
                    ),
                ));
            }
            handle = res.handle;
            input = res.token.to_vec();
            if res.gss_major == 0 {
                done = Some((verf, res.seq_window));
            }
        }
        if !step.continue_needed {
            let Some((verf, window)) = done.take() else {
                if step.token.is_empty() {
                    return Err(gss_err(peer, "context creation stalled"));
                }
                continue;
            };
            ctx.verify_mic(&window.to_be_bytes(), &verf.body)
                .map_err(|e| gss_err(peer, format_args!("server's INIT verifier: {e}")))?;
            return Ok(GssSession {
                ctx: Mutex::new(ctx),
                handle,
                service: cfg.service,
                next_seq: AtomicU32::new(1),
                peer,
                program: (cfg.program, cfg.version),
                destroyed: std::sync::atomic::AtomicBool::new(false),
            });
        }
    }
    Err(gss_err(peer, "context creation did not finish in 6 rounds"))
}

impl GssSession {
    fn ctx(&self) -> std::sync::MutexGuard<'_, SecContext> {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The record of one call with this context (§5.3.1): signed header, arguments
    /// protected by the service; and its sequence number.
    fn record(
        &self,
        xid: u32,
        prog: u32,
        vers: u32,
        proc_num: u32,
        proc_: GssProc,
        args: &[u8],
    ) -> Result<(u32, Bytes), RpcError> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let gc = GssCred {
            proc_,
            seq_num: seq,
            service: self.service,
            handle: self.handle.clone(),
        };
        let header = call_header(xid, prog, vers, proc_num, &gc);
        let mut ctx = self.ctx();
        let mic = ctx.get_mic(&header).map_err(|e| gss_err(self.peer, e))?;
        let verf = OpaqueAuth {
            flavor: RPCSEC_GSS,
            body: Bytes::from(mic),
        };
        let body = match self.service {
            GssService::None => Bytes::copy_from_slice(args),
            GssService::Integrity => {
                let data = wire::seq_body(seq, args);
                let mic = ctx.get_mic(&data).map_err(|e| gss_err(self.peer, e))?;
                wire::encode_integ(&data, &mic)
            }
            GssService::Privacy => {
                let data = wire::seq_body(seq, args);
                let sealed = ctx.wrap(&data, true).map_err(|e| gss_err(self.peer, e))?;
                wire::encode_priv(&sealed)
            }
        };
        Ok((seq, record(&header, &verf, &body)))
    }

    /// The RPCSEC_GSS_DESTROY call of this context (RFC 2203 §5.4: the NULL procedure
    /// of the program that created it, no arguments) with transaction id `xid`, and
    /// its sequence number; `None` once made (the context is then unusable).
    pub(crate) fn destroy_record(&self, xid: u32) -> Option<(u32, Bytes)> {
        if self.destroyed.swap(true, Ordering::Relaxed) {
            return None;
        }
        let (prog, vers) = self.program;
        self.record(xid, prog, vers, 0, GssProc::Destroy, &[]).ok()
    }

    /// Whether the reply `raw` to the DESTROY call `seq` is the server's (its
    /// verifier is the MIC of `seq`).
    pub(crate) fn destroy_confirmed(&self, seq: u32, raw: Bytes) -> bool {
        match split_accepted(raw) {
            Ok((verf, Ok(_))) => self
                .ctx()
                .verify_mic(&seq.to_be_bytes(), &verf.body)
                .is_ok(),
            _ => false,
        }
    }

    /// One data call (§5.3.1): signed header, protected arguments; the results of a
    /// SUCCESS reply after checking its verifier and unsealing them.
    pub(crate) async fn call<C: RawCaller + Sync>(
        &self,
        rpc: &C,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: &[u8],
    ) -> Result<Bytes, RpcError> {
        if self.destroyed.load(Ordering::Relaxed) {
            return Err(gss_err(self.peer, "the RPCSEC_GSS context was destroyed"));
        }
        let xid = rpc.next_xid();
        // The server drops a call whose number has fallen below its window (RFC 2203
        // §5.3.3.1) without a reply, so calls must leave in the order of their numbers:
        // the number is taken and the record queued under one lock of the connection
        // (a thread preempted in between let 128 later calls overtake it under load).
        let mut seq = 0;
        let raw = rpc
            .call_whole_built(xid, || {
                let (s, wire) = self.record(xid, prog, vers, proc_num, GssProc::Data, args)?;
                seq = s;
                Ok(wire)
            })
            .await?;
        let (verf, outcome) = split_accepted(raw)?;
        let mut ctx = self.ctx();
        ctx.verify_mic(&seq.to_be_bytes(), &verf.body)
            .map_err(|e| gss_err(self.peer, format_args!("reply verifier: {e}")))?;
        let results = outcome?;
        let max = results.len();
        let data = match self.service {
            GssService::None => return Ok(results),
            GssService::Integrity => {
                let (data, mic) = wire::decode_integ(results, max)?;
                ctx.verify_mic(&data, &mic)
                    .map_err(|e| gss_err(self.peer, format_args!("reply MIC: {e}")))?;
                data.to_vec()
            }
            GssService::Privacy => {
                let sealed = wire::decode_priv(results, max)?;
                let (data, _) = ctx
                    .unwrap(&sealed)
                    .map_err(|e| gss_err(self.peer, format_args!("reply unwrap: {e}")))?;
                data
            }
        };
        match wire::split_seq(&data) {
            Some((s, body)) if s == seq => Ok(Bytes::copy_from_slice(body)),
            _ => Err(gss_err(
                self.peer,
                "reply body has the wrong sequence number",
            )),
        }
    }
}
