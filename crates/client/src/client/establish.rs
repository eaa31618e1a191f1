//! Session establishment (RFC 8881 §18.35, §18.36, §18.51): EXCHANGE_ID with minor
//! version negotiation, CREATE_SESSION asking for a back channel and persistence, and
//! RECLAIM_COMPLETE; and the session-less COMPOUNDs of one op.

use bytes::Bytes;
use txnfs_proto::nfs4::*;

use super::{decode_reply, encode, ClientConfig, Limits, SessionState, MINOR_VERSIONS};
use crate::callback::{back_channel_attrs, CallbackService, CB_PROGRAM};
use crate::slots::SlotTable;
use crate::transport::Transport;
use crate::ClientError;

fn channel(max_requests: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: (1 << 20) + (64 << 10),
        ca_maxresponsesize: (1 << 20) + (64 << 10),
        ca_maxresponsesize_cached: 64 << 10,
        ca_maxoperations: 16384,
        ca_maxrequests: max_requests,
        ca_rdma_ird: vec![],
    }
}

/// A COMPOUND of `op` alone (no SEQUENCE), which must succeed; `name` names it in the
/// error.
pub(super) async fn solo(
    t: &Transport,
    minor: u32,
    name: &'static str,
    op: nfs_argop4,
) -> Result<(), ClientError> {
    let r = decode_reply(t.compound(encode(minor, &[op])).await?)?;
    if r.status != nfsstat4::NFS4_OK {
        return Err(ClientError::nfs(name, 0, r.status));
    }
    Ok(())
}

/// EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE.
pub(super) async fn establish(
    t: &Transport,
    cfg: &ClientConfig,
    owner: &Bytes,
    verifier: [u8; 8],
    epoch: u64,
    callbacks: &CallbackService,
) -> Result<(SessionState, ()), ClientError> {
    let exchange_id = nfs_argop4::OP_EXCHANGE_ID(Box::new(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: verifier,
            co_ownerid: owner.clone(),
        },
        eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_SUPP_MOVED_MIGR,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![nfs_impl_id4 {
            nii_domain: Bytes::from_static(b"txnfs.dev"),
            nii_name: Bytes::from(format!("txnfs-client {}", env!("CARGO_PKG_VERSION"))),
            nii_date: nfstime4 {
                seconds: 0,
                nseconds: 0,
            },
        }],
    }));
    // The highest minor version the server accepts (RFC 8881 §2.7: a server answers
    // a minor version it does not know with NFS4ERR_MINOR_VERS_MISMATCH).
    let wanted: &[u32] = match &cfg.minor {
        Some(m) => std::slice::from_ref(m),
        None => &MINOR_VERSIONS,
    };
    let mut answer = None;
    for &minor in wanted {
        let r = decode_reply(
            t.compound(encode(minor, std::slice::from_ref(&exchange_id)))
                .await?,
        )?;
        if r.status == nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH {
            answer = Some(Err(r.status));
            continue;
        }
        answer = Some(match r.resarray.first() {
            Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) => Ok((minor, e.clone())),
            _ => Err(r.status),
        });
        break;
    }
    let (minor, eid) = match answer {
        Some(Ok(found)) => found,
        Some(Err(status)) => return Err(ClientError::nfs("EXCHANGE_ID", 0, status)),
        None => {
            return Err(ClientError::Protocol(
                "no NFSv4 minor version to try".into(),
            ))
        }
    };
    let r = decode_reply(
        t.compound(encode(
            minor,
            &[nfs_argop4::OP_CREATE_SESSION(Box::new(
                CREATE_SESSION4args {
                    csa_clientid: eid.eir_clientid,
                    csa_sequence: eid.eir_sequenceid,
                    // Callbacks ride this connection (RFC 8881 §2.10.3.1). PERSIST: a server
                    // that grants it answers a request re-sent after its restart from the
                    // reply it kept, so a transaction whose reply was lost to the crash is
                    // answered, not run again (ADR 0022).
                    csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN | CREATE_SESSION4_FLAG_PERSIST,
                    csa_fore_chan_attrs: channel(cfg.slots),
                    csa_back_chan_attrs: back_channel_attrs(),
                    csa_cb_program: CB_PROGRAM,
                    csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
                },
            ))],
        ))
        .await?,
    )?;
    let cs = match r.resarray.first() {
        Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) => s.clone(),
        _ => return Err(ClientError::nfs("CREATE_SESSION", 0, r.status)),
    };
    let fore = &cs.csr_fore_chan_attrs;
    callbacks.set_session(cs.csr_sessionid, minor, &cs.csr_back_chan_attrs);
    let st = SessionState {
        minor,
        clientid: eid.eir_clientid,
        sessionid: cs.csr_sessionid,
        back_channel: cs.csr_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0,
        persistent: cs.csr_flags & CREATE_SESSION4_FLAG_PERSIST != 0,
        txnfs: eid
            .eir_server_impl_id
            .first()
            .is_some_and(|i| i.nii_name.starts_with(b"txnfs ")),
        limits: Limits {
            max_ops: fore.ca_maxoperations,
            max_request: fore.ca_maxrequestsize,
            max_response: fore.ca_maxresponsesize,
            max_response_cached: fore.ca_maxresponsesize_cached,
            slots: fore.ca_maxrequests,
        },
        slots: SlotTable::new(fore.ca_maxrequests),
        epoch,
    };
    // RECLAIM_COMPLETE: we hold no state to reclaim.
    let mut ops = vec![nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
        sa_sessionid: st.sessionid,
        sa_sequenceid: 1,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    })];
    ops.push(nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
        rca_one_fs: false,
    }));
    let slot = st.slots.acquire().await.map_or(0, |(s, _, _)| s);
    let r = decode_reply(t.compound(encode(minor, &ops)).await?)?;
    st.slots.release(slot, true, None);
    if r.status != nfsstat4::NFS4_OK && r.status != nfsstat4::NFS4ERR_COMPLETE_ALREADY {
        return Err(ClientError::nfs("RECLAIM_COMPLETE", 0, r.status));
    }
    Ok((st, ()))
}
