//! Fixtures shared by the state core's integration tests (core.rs, courtesy.rs):
//! a core on a ManualClock, confirmed clients with a session, and request builders.
#![allow(dead_code)]

use bytes::Bytes;
use std::time::Duration;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::session::{CallbackParams, Principal};
use txnfs_state::session::{
    ChannelAttrs, CreateSessionArgs, SequenceArgs, SessionId, SessionLimits,
};
use txnfs_state::*;

pub const LEASE: Duration = Duration::from_secs(60);

pub fn ch(slots: u32) -> ChannelAttrs {
    ChannelAttrs {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 1 << 16,
        max_ops: 100,
        max_requests: slots,
    }
}

pub fn core(grace: Grace) -> StateCore {
    StateCore::new(
        CoreConfig {
            boot_epoch: 3,
            lease: LEASE,
            sessions: SessionLimits {
                max_clients: 16,
                max_sessions_per_client: 4,
                server_fore: ch(8),
                server_back: ch(1),
                back_channel: false,
                reply_cache_bytes: usize::MAX,
            },
            state: StateLimits::default(),
            deleg: txnfs_state::DelegLimits::default(),
        },
        grace,
    )
}

/// EXCHANGE_ID + CREATE_SESSION: a confirmed client with one session.
pub fn client(
    c: &mut StateCore,
    clock: &ManualClock,
    owner: &'static [u8],
    verifier: u8,
) -> (ClientId, SessionId, Vec<Effect>) {
    let e = c
        .exchange_id(
            &Principal::default(),
            &Bytes::from_static(owner),
            [verifier; 8],
            false,
            clock.now(),
        )
        .map(|(ok, _)| ok)
        .unwrap();
    let (out, effects) = c
        .create_session(
            &Principal::default(),
            &CreateSessionArgs {
                clientid: e.clientid,
                seq: e.sequenceid,
                flags: 0,
                fore: ch(4),
                back: ch(1),
                conn: 1,
            },
            CallbackParams::default(),
            clock.now(),
        )
        .unwrap();
    // Outside grace there is nothing to reclaim, and a client says so before it opens
    // or locks (RFC 8881 §18.51.3); the grace tests reclaim first and complete later.
    if !c.in_grace(clock.now()) {
        c.reclaim_complete(e.clientid, clock.now()).unwrap();
    }
    (e.clientid, out.id, effects)
}

/// `StateCore::open` now, with the share mode as one (access, deny) pair.
pub fn open_file(
    c: &mut StateCore,
    clock: &ManualClock,
    reclaim: bool,
    client: ClientId,
    owner: &[u8],
    file: FileId,
    (access, deny): (u32, u32),
) -> Result<Stateid, StateError> {
    let req = OpenRequest {
        owner,
        file,
        access,
        deny,
    };
    c.open(clock.now(), reclaim, client, req)
}

/// The SEQUENCE of a two-op request on slot 0 of `session`.
pub fn sequence_args(session: SessionId, seqid: u32) -> SequenceArgs {
    SequenceArgs {
        session,
        slot: 0,
        seqid,
        request_hash: u64::from(seqid),
        nops: 2,
        request_len: 200,
        conn: 1,
        cache_reply: None,
    }
}

/// A write lock on `offset..offset + 10` of `file` for a new lock owner `owner`.
pub fn write_lock(file: FileId, open: Stateid, owner: &[u8], offset: u64) -> LockRequest {
    LockRequest {
        file,
        lock_type: LockType::Write,
        offset,
        length: 10,
        locker: Locker::NewOwner {
            open_stateid: open,
            lock_owner: owner.to_vec(),
        },
    }
}

/// LOCKT of `owner` for `lock_type` on `offset..offset + length` of `file`.
pub fn lockt(
    owner: &[u8],
    file: FileId,
    lock_type: LockType,
    offset: u64,
    length: u64,
) -> LocktRequest<'_> {
    LocktRequest {
        owner,
        file,
        lock_type,
        offset,
        length,
    }
}

pub fn persisted(effects: &[Effect]) -> Option<&ClientList> {
    effects.iter().find_map(|e| match e {
        Effect::PersistClients(l) => Some(l),
        _ => None,
    })
}
