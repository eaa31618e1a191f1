//! Session operations: EXCHANGE_ID, CREATE_SESSION, SEQUENCE, DESTROY_SESSION,
//! DESTROY_CLIENTID, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL, SET_SSV,
//! RECLAIM_COMPLETE (RFC 8881 §18.33-18.51).

use crate::cstate::Compound;
use crate::errors::OpResult;
use crate::nfs::*;
use bytes::Bytes;
use std::sync::Arc;
use txnfs_state::session::{
    CallbackParams, CallbackSec, ChannelAttrs, ConnDir, ConnDirRequest, CreateSessionArgs,
    CreateSessionOutcome, Principal, SequenceArgs, Session, SessionError,
};
use txnfs_state::slots::SlotVerdict;

fn session_status(e: SessionError) -> nfsstat4 {
    use nfsstat4::*;
    match e {
        SessionError::StaleClientId => NFS4ERR_STALE_CLIENTID,
        SessionError::SeqMisordered => NFS4ERR_SEQ_MISORDERED,
        SessionError::BadSession => NFS4ERR_BADSESSION,
        SessionError::ClientIdBusy => NFS4ERR_CLIENTID_BUSY,
        SessionError::NoEnt => NFS4ERR_NOENT,
        SessionError::NotSame => NFS4ERR_NOT_SAME,
        SessionError::Resource => NFS4ERR_RESOURCE,
        SessionError::CompleteAlready => NFS4ERR_COMPLETE_ALREADY,
        SessionError::Inval => NFS4ERR_INVAL,
        SessionError::TooSmall => NFS4ERR_TOOSMALL,
        SessionError::TooManyOps => NFS4ERR_TOO_MANY_OPS,
        SessionError::ReqTooBig => NFS4ERR_REQ_TOO_BIG,
        SessionError::RepTooBigToCache => NFS4ERR_REP_TOO_BIG_TO_CACHE,
        SessionError::Perm => NFS4ERR_PERM,
        SessionError::ClidInUse => NFS4ERR_CLID_INUSE,
        SessionError::Delay => NFS4ERR_DELAY,
    }
}

/// Clients the core released (replaced by a new incarnation, destroyed) leave the
/// durable session store too (ADR 0022).
fn forget_released(c: &Compound, effects: &[txnfs_state::Effect]) {
    for e in effects {
        if let txnfs_state::Effect::ClientReleased { client, .. } = e {
            c.srv.forget_durable(None, Some(*client));
        }
    }
}

impl From<SessionError> for crate::errors::OpError {
    fn from(e: SessionError) -> Self {
        crate::errors::OpError::Status(session_status(e))
    }
}

/// The principal of the request, as client records compare it.
pub(crate) fn principal(c: &Compound) -> Principal {
    Principal {
        uid: c.creds.uid,
        gid: c.creds.gid,
        gids: c.creds.gids.clone(),
    }
}

/// The callback program and the first acceptable entry of the client's security list
/// (CREATE_SESSION, BACKCHANNEL_CTL). AUTH_NONE and AUTH_SYS are accepted; RPCSEC_GSS
/// is skipped (we have no GSS). A list with only GSS entries is NFS4ERR_ENCR_ALG_UNSUPP,
/// as knfsd answers (`nfsd4_check_cb_sec`): the server could never call back. An empty
/// list is taken as AUTH_NONE, as knfsd does too: clients send it when they want no
/// callbacks (the Python `nfs4fs` does), and refusing it would refuse their session.
fn callback_params(program: u32, sec: &[callback_sec_parms4]) -> Result<CallbackParams, nfsstat4> {
    if sec.is_empty() {
        return Ok(CallbackParams {
            program,
            sec: CallbackSec::None,
        });
    }
    sec.iter()
        .find_map(|p| match p {
            callback_sec_parms4::AUTH_NONE => Some(CallbackSec::None),
            callback_sec_parms4::AUTH_SYS(s) => Some(CallbackSec::Sys {
                stamp: s.stamp,
                machine: s.machinename.clone(),
                uid: s.uid,
                gid: s.gid,
                gids: s.gids.clone(),
            }),
            callback_sec_parms4::RPCSEC_GSS(_) => None,
        })
        .map(|sec| CallbackParams { program, sec })
        .ok_or(nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP)
}

pub fn exchange_id(c: &mut Compound, a: &EXCHANGE_ID4args) -> OpResult {
    let flags = a.eia_flags;
    let known = EXCHGID4_FLAG_SUPP_MOVED_REFER
        | EXCHGID4_FLAG_SUPP_MOVED_MIGR
        | EXCHGID4_FLAG_BIND_PRINC_STATEID
        | EXCHGID4_FLAG_USE_NON_PNFS
        | EXCHGID4_FLAG_USE_PNFS_MDS
        | EXCHGID4_FLAG_USE_PNFS_DS
        | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
    // SUPP_FENCE_OPS (0x4) and CONFIRMED_R are flags of the server's reply: a client
    // sending them gets NFS4ERR_INVAL, as from knfsd's EXCHGID4_FLAG_MASK_A.
    if flags & !known != 0 || flags & EXCHGID4_FLAG_CONFIRMED_R != 0 {
        return Err(nfsstat4::NFS4ERR_INVAL.into());
    }
    // SSV state protection is not offered; SP4_MACH_CRED and SP4_NONE both get
    // SP4_NONE (allowed: the server chooses, RFC 8881 §18.35.4).
    if let state_protect4_a::SP4_SSV(_) = a.eia_state_protect {
        return Err(nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP.into());
    }
    let owner = &a.eia_clientowner;
    let (ok, effects) = c.srv.core()?.exchange_id(
        &principal(c),
        &owner.co_ownerid,
        owner.co_verifier,
        flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0,
        c.now,
    )?;
    forget_released(c, &effects);
    c.srv.apply(effects);
    let mut eir_flags = EXCHGID4_FLAG_USE_NON_PNFS;
    if ok.confirmed {
        eir_flags |= EXCHGID4_FLAG_CONFIRMED_R;
    }
    Ok(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(
        Box::new(EXCHANGE_ID4resok {
            eir_clientid: ok.clientid,
            eir_sequenceid: ok.sequenceid,
            eir_flags,
            eir_state_protect: state_protect4_r::SP4_NONE,
            eir_server_owner: server_owner4 {
                so_minor_id: 0,
                so_major_id: c.srv.server_owner.clone(),
            },
            eir_server_scope: c.srv.server_owner.clone(),
            eir_server_impl_id: vec![nfs_impl_id4 {
                nii_domain: Bytes::from_static(b"txnfs.dev"),
                nii_name: Bytes::from(format!("txnfs {}", env!("CARGO_PKG_VERSION"))),
                nii_date: nfstime4 {
                    seconds: 0,
                    nseconds: 0,
                },
            }],
        }),
    )))
}

fn to_attrs(a: &channel_attrs4) -> ChannelAttrs {
    ChannelAttrs {
        max_request: a.ca_maxrequestsize,
        max_response: a.ca_maxresponsesize,
        max_response_cached: a.ca_maxresponsesize_cached,
        max_ops: a.ca_maxoperations,
        max_requests: a.ca_maxrequests,
    }
}

fn from_attrs(a: &ChannelAttrs) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: a.max_request,
        ca_maxresponsesize: a.max_response,
        ca_maxresponsesize_cached: a.max_response_cached,
        ca_maxoperations: a.max_ops,
        ca_maxrequests: a.max_requests,
        ca_rdma_ird: Vec::new(),
    }
}

pub fn create_session(c: &mut Compound, a: &CREATE_SESSION4args) -> OpResult {
    if a.csa_fore_chan_attrs.ca_rdma_ird.len() > 1 || a.csa_back_chan_attrs.ca_rdma_ird.len() > 1 {
        return Err(nfsstat4::NFS4ERR_BADXDR.into());
    }
    let args = CreateSessionArgs {
        clientid: a.csa_clientid,
        seq: a.csa_sequence,
        flags: a.csa_flags,
        fore: to_attrs(&a.csa_fore_chan_attrs),
        back: to_attrs(&a.csa_back_chan_attrs),
        conn: c.conn,
    };
    let callback = callback_params(a.csa_cb_program, &a.csa_sec_parms)?;
    let cb_for_channel = callback.clone();
    // Confirming a rebooted client's new incarnation releases the old one's opens and
    // locks in the same step (RFC 8881 §18.35.5 case 5 / §18.36.4).
    let (out, effects) = c
        .srv
        .core()?
        .create_session(&principal(c), &args, callback, c.now)?;
    forget_released(c, &effects);
    c.srv.apply(effects);
    let CreateSessionOutcome {
        id,
        seq,
        flags,
        fore,
        back,
    } = out;
    // A persistent session (and its client) is durable before the client learns of it.
    c.srv.persist_session(a.csa_clientid, &id)?;
    // The fore connection also carries callbacks (what the Linux client asks for):
    // record it and probe it in the background; the reply does not wait.
    if flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
        c.srv.callbacks.bind(
            a.csa_clientid,
            id,
            cb_for_channel,
            c.minor,
            c.conn,
            c.srv.cfg.callback_timeout(),
        );
    }
    Ok(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(
        Box::new(CREATE_SESSION4resok {
            csr_sessionid: id,
            csr_sequence: seq,
            csr_flags: flags,
            csr_fore_chan_attrs: from_attrs(&fore),
            csr_back_chan_attrs: from_attrs(&back),
        }),
    )))
}

/// Why SEQUENCE did not let the compound proceed.
pub enum SeqFail {
    /// A retransmission: send the cached reply as the whole COMPOUND reply.
    Replay(txnfs_xdr::Gathered),
    Status(nfsstat4),
}

/// SEQUENCE (RFC 8881 §18.46): find the session, apply the slot rules, renew the lease.
pub fn sequence(
    c: &mut Compound,
    a: &SEQUENCE4args,
    nops: u32,
    req_len: usize,
    req_hash: u64,
    reply_head: usize,
) -> Result<(SEQUENCE4resok, Arc<Session>), SeqFail> {
    // SEQUENCE's own result: opcode, status, SEQUENCE4resok (session id, five u32s).
    const SEQUENCE_RESULT: usize = 4 + 4 + 16 + 5 * 4;
    let args = SequenceArgs {
        session: a.sa_sessionid,
        slot: a.sa_slotid,
        seqid: a.sa_sequenceid,
        request_hash: req_hash,
        nops,
        request_len: req_len,
        conn: c.conn,
        cache_reply: a.sa_cachethis.then_some(reply_head + SEQUENCE_RESULT),
    };
    // One acquisition: session lookup, limits, slot rules, renewal and binding.
    let ok = c
        .srv
        .core()
        .map_err(SeqFail::Status)?
        .sequence(&args, c.now)
        .map_err(|e| SeqFail::Status(session_status(e)))?;
    let (session, verdict) = (ok.session, ok.verdict);
    let mut revoked = if ok.delegations_revoked {
        SEQ4_STATUS_RECALLABLE_STATE_REVOKED
    } else {
        0
    };
    // A client restored with its persistent session after a restart must reclaim its
    // opens and locks (which were not restored) until its RECLAIM_COMPLETE (RFC 8881
    // §18.46.3); its old stateids are stale.
    if ok.reclaim_needed {
        revoked |= SEQ4_STATUS_RESTART_RECLAIM_NEEDED;
    }
    // A restored session's back channel: the connection of its first request, as
    // CREATE_SESSION bound it.
    if let Some(params) = ok.rebind_back_channel {
        c.srv.callbacks.bind(
            session.client,
            a.sa_sessionid,
            params,
            c.minor,
            c.conn,
            c.srv.cfg.callback_timeout(),
        );
    }
    match verdict {
        SlotVerdict::Execute => {}
        // Test-only mutation: run the retransmission again (what a broken cache does).
        SlotVerdict::Replay(_) if c.srv.cfg.mutations.break_reply_cache => {}
        SlotVerdict::Replay(b) => {
            c.srv
                .stats
                .replays
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(SeqFail::Replay(b));
        }
        SlotVerdict::InProgress => return Err(SeqFail::Status(nfsstat4::NFS4ERR_DELAY)),
        SlotVerdict::RetryUncached => {
            return Err(SeqFail::Status(nfsstat4::NFS4ERR_RETRY_UNCACHED_REP))
        }
        SlotVerdict::FalseRetry => return Err(SeqFail::Status(nfsstat4::NFS4ERR_SEQ_FALSE_RETRY)),
        SlotVerdict::Misordered => return Err(SeqFail::Status(nfsstat4::NFS4ERR_SEQ_MISORDERED)),
        SlotVerdict::BadSlot => return Err(SeqFail::Status(nfsstat4::NFS4ERR_BADSLOT)),
    }
    c.client = Some(session.client);
    // `txnfs stats --clients` (ADR 0045): the COMPOUND and its SEQUENCE; the op loop
    // counts the ops after it.
    let activity = &session.activity;
    activity
        .compounds
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    activity
        .ops
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    c.session = Some(session.clone());
    let highest = ok.highest_slot;
    Ok((
        SEQUENCE4resok {
            sr_sessionid: a.sa_sessionid,
            sr_sequenceid: a.sa_sequenceid,
            sr_slotid: a.sa_slotid,
            sr_highest_slotid: highest,
            sr_target_highest_slotid: highest,
            sr_status_flags: revoked
                | c.srv
                    .callbacks
                    .status_flags(&a.sa_sessionid, session.client),
        },
        session,
    ))
}

pub fn destroy_session(c: &mut Compound, a: &DESTROY_SESSION4args) -> OpResult {
    c.srv.core()?.destroy_session(&a.dsa_sessionid)?;
    c.srv.callbacks.forget(&a.dsa_sessionid);
    c.srv.forget_durable(Some(&a.dsa_sessionid), None);
    // Its delegations stay (RFC 8881 §18.37.3), but if this was the client's last
    // session with a back channel, a recall can no longer reach it: requests held
    // for one revoke at once instead of waiting out the recall wait.
    c.srv.back_channel_lost();
    Ok(nfs_resop4::OP_DESTROY_SESSION(DESTROY_SESSION4res {
        dsr_status: nfsstat4::NFS4_OK,
    }))
}

pub fn destroy_clientid(c: &mut Compound, a: &DESTROY_CLIENTID4args) -> OpResult {
    // Sessions, opens and locks are checked and the client removed in one step.
    let effects = c.srv.core()?.destroy_client(a.dca_clientid)?;
    forget_released(c, &effects);
    c.srv.apply(effects);
    Ok(nfs_resop4::OP_DESTROY_CLIENTID(DESTROY_CLIENTID4res {
        dcr_status: nfsstat4::NFS4_OK,
    }))
}

pub fn bind_conn_to_session(c: &mut Compound, a: &BIND_CONN_TO_SESSION4args) -> OpResult {
    // We have no RDMA transport: bctsa_use_conn_in_rdma_mode is a hint we answer
    // false to.
    use channel_dir_from_client4 as D;
    let dir = match a.bctsa_dir {
        D::CDFC4_FORE => ConnDirRequest::Fore,
        D::CDFC4_BACK => ConnDirRequest::Back,
        D::CDFC4_FORE_OR_BOTH => ConnDirRequest::ForeOrBoth,
        D::CDFC4_BACK_OR_BOTH => ConnDirRequest::BackOrBoth,
    };
    let (granted, bound) = {
        let mut core = c.srv.core()?;
        let granted = core.bind_conn(&a.bctsa_sessid, dir, c.conn, c.now)?;
        let bound = core
            .sessions()
            .session(&a.bctsa_sessid)
            .map(|s| s.client)
            .zip(core.sessions().callback(&a.bctsa_sessid).cloned());
        (granted, bound)
    };
    // A connection granted the back channel carries callbacks from now on: probe it.
    if let (ConnDir::Back | ConnDir::Both, Some((client, params))) = (granted, bound) {
        c.srv.callbacks.bind(
            client,
            a.bctsa_sessid,
            params,
            c.minor,
            c.conn,
            c.srv.cfg.callback_timeout(),
        );
    }
    let dir = match granted {
        ConnDir::Fore => channel_dir_from_server4::CDFS4_FORE,
        ConnDir::Back => channel_dir_from_server4::CDFS4_BACK,
        ConnDir::Both => channel_dir_from_server4::CDFS4_BOTH,
    };
    Ok(nfs_resop4::OP_BIND_CONN_TO_SESSION(
        BIND_CONN_TO_SESSION4res::NFS4_OK(BIND_CONN_TO_SESSION4resok {
            bctsr_sessid: a.bctsa_sessid,
            bctsr_dir: dir,
            bctsr_use_conn_in_rdma_mode: false,
        }),
    ))
}

/// BACKCHANNEL_CTL (RFC 8881 §18.33): the session's callback program and security
/// from now on.
pub fn backchannel_ctl(c: &mut Compound, a: &BACKCHANNEL_CTL4args) -> OpResult {
    let session = c
        .session
        .as_ref()
        .ok_or(nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)?
        .id;
    let callback = callback_params(a.bca_cb_program, &a.bca_sec_parms)?;
    c.srv.core()?.set_callback(&session, callback.clone())?;
    c.srv.persist_session_update(&session);
    // New program or security: probe again with them (as knfsd does).
    c.srv
        .callbacks
        .set_params(&session, callback, c.srv.cfg.callback_timeout());
    Ok(nfs_resop4::OP_BACKCHANNEL_CTL(BACKCHANNEL_CTL4res {
        bcr_status: nfsstat4::NFS4_OK,
    }))
}

/// SET_SSV (RFC 8881 §18.47): EXCHANGE_ID never grants SP4_SSV here, and §18.47.3
/// answers SET_SSV for a client ID without SSV state protection with NFS4ERR_INVAL.
pub fn set_ssv(_c: &mut Compound, _a: &SET_SSV4args) -> OpResult {
    Err(nfsstat4::NFS4ERR_INVAL.into())
}

pub fn reclaim_complete(c: &mut Compound, a: &RECLAIM_COMPLETE4args) -> OpResult {
    let client = c.client()?;
    if a.rca_one_fs {
        // Per-file-system reclaim completion: nothing to track (no migration).
        return Ok(nfs_resop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4res {
            rcr_status: nfsstat4::NFS4_OK,
        }));
    }
    let effects = c.srv.core()?.reclaim_complete(client, c.now)?;
    c.srv.apply(effects);
    Ok(nfs_resop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4res {
        rcr_status: nfsstat4::NFS4_OK,
    }))
}
