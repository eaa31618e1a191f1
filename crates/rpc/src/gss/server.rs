//! RPCSEC_GSS on the server (RFC 2203 §5.2-5.3): context creation on the NULL
//! procedure (INIT, CONTINUE_INIT), DESTROY, and for data calls the header MIC, the
//! sequence window, the arguments' integrity or privacy, and the reply's verifier and
//! sealed results.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, info, warn};

use super::context::{ContextCache, ServerContext};
use super::gssapi::{self, Cred, GssError, SecContext, GSS_S_CONTEXT_EXPIRED};
use super::window::{SeqVerdict, SEQ_WINDOW};
use super::wire::{self, GssCred, GssProc, GssService, InitRes, MAX_TOKEN, RPCSEC_GSS};
use crate::msg::{AuthStat, OpaqueAuth};
use crate::server::ReplyBody;

/// Server-side RPCSEC_GSS settings.
#[derive(Debug, Clone, Default)]
pub struct GssServerConfig {
    /// The keytab with the service keys (`nfs/host@REALM`); `None`: the library's
    /// default (`KRB5_KTNAME`, else `/etc/krb5.keytab`).
    pub keytab: Option<PathBuf>,
}

/// The server's acceptor credential and its contexts.
pub struct GssServer {
    cred: Cred,
    contexts: ContextCache,
}

impl std::fmt::Debug for GssServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GssServer")
            .field("contexts", &self.contexts.len())
            .finish()
    }
}

/// Who a verified RPCSEC_GSS call comes from, and how it was protected.
#[derive(Debug, Clone)]
pub struct GssCaller {
    /// The client principal, e.g. `alice@TXNFS.TEST`.
    pub principal: String,
    pub service: GssService,
    pub(crate) seal: ReplySeal,
}

/// What the reply of a data call needs: its context and sequence number.
#[derive(Clone)]
pub(crate) struct ReplySeal {
    ctx: Arc<ServerContext>,
    seq_num: u32,
    service: GssService,
}

impl std::fmt::Debug for ReplySeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReplySeal(seq {})", self.seq_num)
    }
}

/// What the transport does with an RPCSEC_GSS call.
pub(crate) enum GssVerdict {
    /// Answer without the service: a control reply (with its verifier) or an error.
    Reply { verf: OpaqueAuth, body: ReplyBody },
    /// RFC 2203 §5.3.3.1: a replayed or too old sequence number gets no reply.
    Drop,
    /// A verified data call with its plain arguments.
    Call { caller: Arc<GssCaller>, args: Bytes },
}

fn deny(stat: AuthStat) -> GssVerdict {
    GssVerdict::Reply {
        verf: OpaqueAuth::none(),
        body: ReplyBody::AuthError(stat),
    }
}

fn gss_verf(mic: Vec<u8>) -> OpaqueAuth {
    OpaqueAuth {
        flavor: RPCSEC_GSS,
        body: Bytes::from(mic),
    }
}

impl GssServer {
    /// Load the library and the keytab's keys; fails naming what is missing.
    pub fn new(cfg: &GssServerConfig) -> Result<Arc<Self>, GssError> {
        let cred = gssapi::acceptor_cred(cfg.keytab.as_deref())?;
        info!(keytab = ?cfg.keytab, "RPCSEC_GSS (Kerberos v5) enabled");
        Ok(Arc::new(GssServer {
            cred,
            contexts: ContextCache::default(),
        }))
    }

    /// The contexts established or being established now (freed by DESTROY, expiry
    /// or eviction).
    pub fn contexts(&self) -> usize {
        self.contexts.len()
    }

    /// Forget every context (an administrator revoking all Kerberos sessions, or a
    /// test of the clients' recovery): their next calls get RPCSEC_GSS_CREDPROBLEM,
    /// and a client creates a new context.
    pub fn forget_contexts(&self) {
        self.contexts.clear();
    }

    /// Handle one call with an RPCSEC_GSS credential: `header` is the call from its xid
    /// to the end of the credential (what the verifier signs).
    pub(crate) fn accept(
        &self,
        header: &[u8],
        cred_body: Bytes,
        verf: OpaqueAuth,
        proc_num: u32,
        args: Bytes,
    ) -> GssVerdict {
        let cred = match GssCred::decode(cred_body) {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "bad RPCSEC_GSS credential");
                return deny(AuthStat::BadCred);
            }
        };
        match cred.proc_ {
            GssProc::Init | GssProc::ContinueInit if proc_num != 0 => deny(AuthStat::BadCred),
            GssProc::Init | GssProc::ContinueInit => self.establish(&cred, args),
            GssProc::Data | GssProc::Destroy => self.data(header, &cred, verf, proc_num, args),
        }
    }

    /// INIT / CONTINUE_INIT (RFC 2203 §5.2.2-5.2.3.1).
    fn establish(&self, cred: &GssCred, mut args: Bytes) -> GssVerdict {
        let token = match txnfs_xdr::get_opaque(&mut args, MAX_TOKEN) {
            Ok(t) => t,
            Err(_) => {
                return GssVerdict::Reply {
                    verf: OpaqueAuth::none(),
                    body: ReplyBody::GarbageArgs,
                }
            }
        };
        let ctx = match cred.proc_ {
            GssProc::Init => self.contexts.insert_new(SecContext::new()),
            _ => match self.contexts.get(&cred.handle) {
                Some(c) => c,
                None => return deny(AuthStat::RpcsecGssCredProblem),
            },
        };
        let mut state = ctx.lock();
        let failed = |e: &GssError| {
            let (major, minor) = match e {
                GssError::Failed { major, minor, .. } => (*major, *minor),
                _ => (gssapi::GSS_S_NO_CONTEXT, 0),
            };
            InitRes {
                handle: Bytes::new(),
                gss_major: major,
                gss_minor: minor,
                seq_window: 0,
                token: Bytes::new(),
            }
            .encode()
        };
        let accepted = match state.gss.accept(&self.cred, &token) {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "RPCSEC_GSS context creation failed");
                drop(state);
                self.contexts.remove(&ctx.handle);
                return GssVerdict::Reply {
                    verf: OpaqueAuth::none(),
                    body: ReplyBody::Success(failed(&e)),
                };
            }
        };
        if accepted.step.continue_needed {
            let res = InitRes {
                handle: ctx.handle.clone(),
                gss_major: gssapi::GSS_S_CONTINUE_NEEDED,
                gss_minor: 0,
                seq_window: 0,
                token: Bytes::from(accepted.step.token),
            };
            return GssVerdict::Reply {
                verf: OpaqueAuth::none(),
                body: ReplyBody::Success(res.encode()),
            };
        }
        // Complete: the verifier is the MIC of the window size (§5.2.3.1).
        let mic = match state.gss.get_mic(&SEQ_WINDOW.to_be_bytes()) {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "RPCSEC_GSS: cannot sign the INIT reply");
                drop(state);
                self.contexts.remove(&ctx.handle);
                return GssVerdict::Reply {
                    verf: OpaqueAuth::none(),
                    body: ReplyBody::Success(failed(&e)),
                };
            }
        };
        let lifetime = Duration::from_secs(u64::from(accepted.lifetime_secs.max(1)));
        state.expires = Instant::now() + lifetime;
        debug!(principal = ?accepted.principal, lifetime_s = lifetime.as_secs(),
            "RPCSEC_GSS context established");
        state.principal = accepted.principal.or(Some(String::new()));
        let res = InitRes {
            handle: ctx.handle.clone(),
            gss_major: 0,
            gss_minor: 0,
            seq_window: SEQ_WINDOW,
            token: Bytes::from(accepted.step.token),
        };
        GssVerdict::Reply {
            verf: gss_verf(mic),
            body: ReplyBody::Success(res.encode()),
        }
    }

    /// DATA and DESTROY (§5.3.3): verifier, window, arguments.
    fn data(
        &self,
        header: &[u8],
        cred: &GssCred,
        verf: OpaqueAuth,
        proc_num: u32,
        args: Bytes,
    ) -> GssVerdict {
        let Some(ctx) = self.contexts.get(&cred.handle) else {
            return deny(AuthStat::RpcsecGssCredProblem);
        };
        let mut state = ctx.lock();
        let Some(principal) = state.principal.clone() else {
            // Not established yet.
            return deny(AuthStat::RpcsecGssCredProblem);
        };
        if state.expires <= Instant::now() {
            drop(state);
            self.contexts.remove(&ctx.handle);
            return deny(AuthStat::RpcsecGssCtxProblem);
        }
        if verf.flavor != RPCSEC_GSS {
            return deny(AuthStat::BadVerf);
        }
        if let Err(e) = state.gss.verify_mic(header, &verf.body) {
            debug!(error = %e, "RPCSEC_GSS header MIC does not verify");
            let expired = e.major() & 0x00ff_0000 == GSS_S_CONTEXT_EXPIRED;
            drop(state);
            if expired {
                self.contexts.remove(&ctx.handle);
                return deny(AuthStat::RpcsecGssCtxProblem);
            }
            return deny(AuthStat::RpcsecGssCredProblem);
        }
        match state.window.check(cred.seq_num) {
            SeqVerdict::Accept => {}
            SeqVerdict::Drop => {
                debug!(
                    seq = cred.seq_num,
                    "RPCSEC_GSS replay or old sequence number dropped"
                );
                return GssVerdict::Drop;
            }
            SeqVerdict::Exhausted => {
                drop(state);
                self.contexts.remove(&ctx.handle);
                return deny(AuthStat::RpcsecGssCtxProblem);
            }
        }
        let seal = ReplySeal {
            ctx: ctx.clone(),
            seq_num: cred.seq_num,
            service: cred.service,
        };
        if cred.proc_ == GssProc::Destroy {
            let verf = state.gss.get_mic(&cred.seq_num.to_be_bytes());
            drop(state);
            self.contexts.remove(&ctx.handle);
            debug!(%principal, "RPCSEC_GSS context destroyed by the client");
            return match verf {
                Ok(mic) if proc_num == 0 => GssVerdict::Reply {
                    verf: gss_verf(mic),
                    body: ReplyBody::Success(Bytes::new()),
                },
                _ => deny(AuthStat::RpcsecGssCtxProblem),
            };
        }
        let args = match unseal_args(&mut state.gss, cred, args) {
            Ok(a) => a,
            Err(why) => {
                debug!(%principal, why, "RPCSEC_GSS arguments rejected");
                // The header verified: an accepted reply of the context, signed
                // (§5.3.3.2).
                let verf = state
                    .gss
                    .get_mic(&cred.seq_num.to_be_bytes())
                    .map_or_else(|_| OpaqueAuth::none(), gss_verf);
                drop(state);
                return GssVerdict::Reply {
                    verf,
                    body: ReplyBody::GarbageArgs,
                };
            }
        };
        drop(state);
        GssVerdict::Call {
            caller: Arc::new(GssCaller {
                principal,
                service: cred.service,
                seal,
            }),
            args,
        }
    }
}

/// The plain arguments of a data call (§5.3.2.2, §5.3.2.3).
fn unseal_args(gss: &mut SecContext, cred: &GssCred, args: Bytes) -> Result<Bytes, &'static str> {
    let max = args.len();
    let data = match cred.service {
        GssService::None => return Ok(args),
        GssService::Integrity => {
            let (data, mic) = wire::decode_integ(args, max).map_err(|_| "malformed integ data")?;
            gss.verify_mic(&data, &mic)
                .map_err(|_| "MIC of the arguments does not verify")?;
            data.to_vec()
        }
        GssService::Privacy => {
            let sealed = wire::decode_priv(args, max).map_err(|_| "malformed priv data")?;
            let (data, conf) = gss.unwrap(&sealed).map_err(|_| "arguments do not unwrap")?;
            if !conf {
                return Err("privacy call not encrypted");
            }
            data
        }
    };
    let (seq, body) = wire::split_seq(&data).ok_or("no sequence number in the body")?;
    if seq != cred.seq_num {
        return Err("sequence number of the body differs from the credential's");
    }
    Ok(Bytes::copy_from_slice(body))
}

impl GssCaller {
    /// The verifier and body of this call's reply (§5.3.3.2, §5.3.2.2-3): accepted
    /// replies carry the MIC of the sequence number, and successful results are
    /// signed or sealed as the arguments were.
    pub(crate) fn seal_reply(&self, body: ReplyBody) -> (OpaqueAuth, ReplyBody) {
        if matches!(body, ReplyBody::AuthError(_) | ReplyBody::Drop) {
            return (OpaqueAuth::none(), body);
        }
        let seal = &self.seal;
        let mut state = seal.ctx.lock();
        let verf = match state.gss.get_mic(&seal.seq_num.to_be_bytes()) {
            Ok(m) => gss_verf(m),
            Err(e) => {
                warn!(error = %e, "RPCSEC_GSS: cannot sign a reply");
                return (
                    OpaqueAuth::none(),
                    ReplyBody::AuthError(AuthStat::RpcsecGssCtxProblem),
                );
            }
        };
        let results = match body {
            ReplyBody::Success(results) => results,
            // No service: the results go as they are, parts and all.
            ReplyBody::SuccessParts(parts) if matches!(seal.service, GssService::None) => {
                return (verf, ReplyBody::SuccessParts(parts));
            }
            // Integrity and privacy work on the whole results: one copy (ADR 0052).
            ReplyBody::SuccessParts(parts) => parts.to_bytes(),
            other => return (verf, other),
        };
        let data = wire::seq_body(seal.seq_num, &results);
        let sealed = match seal.service {
            GssService::None => Ok(results),
            GssService::Integrity => state
                .gss
                .get_mic(&data)
                .map(|mic| wire::encode_integ(&data, &mic)),
            GssService::Privacy => state.gss.wrap(&data, true).map(|s| wire::encode_priv(&s)),
        };
        match sealed {
            Ok(b) => (verf, ReplyBody::Success(b)),
            Err(e) => {
                warn!(error = %e, "RPCSEC_GSS: cannot seal a reply");
                (verf, ReplyBody::SystemErr)
            }
        }
    }
}
