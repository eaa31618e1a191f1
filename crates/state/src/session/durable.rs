//! Persistent sessions (RFC 8881 §2.10.6.5, ADR 0022): the records the durable
//! session store keeps of a client and its persistent sessions, and how the table
//! exports them and restores them after a restart.

use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::slots::SlotTable;

/// What a restarted server needs to recognise a client that holds persistent sessions
/// (ADR 0022): written to the durable session store when such a session is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableClient {
    /// The client id (with the boot epoch of the instance that made it).
    pub id: ClientId,
    /// `co_ownerid`.
    pub owner: Bytes,
    /// `co_verifier`.
    pub verifier: [u8; 8],
    /// Who sent the EXCHANGE_ID.
    pub principal: Principal,
    /// `csa_sequence` the next CREATE_SESSION must carry.
    pub create_seq: u32,
    /// The last CREATE_SESSION's sequence id and reply, for its replay.
    pub last_create: Option<(u32, CreateSessionOutcome)>,
}

/// A persistent session as the durable session store keeps it (ADR 0022).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSession {
    /// The session id.
    pub id: SessionId,
    /// Its client.
    pub client: ClientId,
    /// `csr_flags` as granted.
    pub flags: u32,
    /// Negotiated fore channel (its `max_requests` is the slot count).
    pub fore: ChannelAttrs,
    /// Negotiated back channel.
    pub back: ChannelAttrs,
    /// Callback program and security.
    pub callback: CallbackParams,
}

/// One slot of a persistent session as stored: the last sequence id it executed, that
/// request's hash and its reply (`None`: executed, reply not cached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableSlot {
    /// The slot id.
    pub slot: u32,
    /// `sa_sequenceid` of the last request.
    pub seqid: u32,
    /// Its request hash.
    pub request_hash: u64,
    /// Its encoded COMPOUND4res.
    pub reply: Option<Bytes>,
}

impl SessionTable {
    /// The durable records of persistent session `id` and its client, if it is one.
    pub fn durable(&self, id: &SessionId) -> Option<(DurableClient, DurableSession)> {
        let s = self.sessions.get(id)?;
        if !s.shared.persistent {
            return None;
        }
        let client = self.durable_client(s.shared.client)?;
        Some((
            client,
            DurableSession {
                id: *id,
                client: s.shared.client,
                flags: s.flags,
                fore: s.shared.fore,
                back: s.back,
                callback: s.callback.clone(),
            },
        ))
    }

    /// The durable record of client `id` (confirmed or not).
    pub fn durable_client(&self, id: ClientId) -> Option<DurableClient> {
        let r = self.clients.get(&id)?;
        Some(DurableClient {
            id,
            owner: r.owner.clone(),
            verifier: r.verifier,
            principal: r.principal.clone(),
            create_seq: r.create_seq,
            last_create: r.last_create.clone(),
        })
    }

    /// Confirmed clients that hold a persistent session, with their owners.
    pub fn with_persistent_sessions(&self) -> Vec<(ClientId, Bytes)> {
        self.clients
            .iter()
            .filter(|(id, r)| r.confirmed && self.has_persistent_session(**id))
            .map(|(id, r)| (*id, r.owner.clone()))
            .collect()
    }

    /// Whether client `id` has a persistent session.
    pub fn has_persistent_session(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|r| {
            r.sessions
                .iter()
                .any(|s| self.sessions.get(s).is_some_and(|s| s.shared.persistent))
        })
    }

    /// Restores a confirmed client of a previous instance from the durable session
    /// store, renewed at `now`. It must reclaim its state (its opens, locks and
    /// delegations are not restored): until its global RECLAIM_COMPLETE, SEQUENCE
    /// reports SEQ4_STATUS_RESTART_RECLAIM_NEEDED. A record of the same owner already
    /// here is replaced (the store's later record wins).
    pub fn restore_client(&mut self, c: DurableClient, now: Instant) {
        if let Some((conf, unconf)) = self.by_owner.get(&c.owner).cloned() {
            for old in conf.into_iter().chain(unconf) {
                self.remove_client(old);
            }
        }
        self.remove_client(c.id);
        self.by_owner.insert(c.owner.clone(), (Some(c.id), None));
        self.clients.insert(
            c.id,
            ClientRecord {
                owner: c.owner,
                verifier: c.verifier,
                principal: c.principal,
                confirmed: true,
                create_seq: c.create_seq,
                last_create: c.last_create,
                last_renew: now,
                sessions: Vec::new(),
                reclaim_complete: false,
                restored: true,
                v40: None,
                activity: Default::default(),
            },
        );
    }

    /// Restores a persistent session of a restored client with its slots (each at
    /// its last sequence id and reply, so a retransmission is answered from them).
    /// Its reply cache is reserved even beyond the budget: the client was promised
    /// these slots. [`SessionError::StaleClientId`] when its client is not here.
    pub fn restore_session(
        &mut self,
        s: DurableSession,
        slots: impl IntoIterator<Item = DurableSlot>,
    ) -> Result<(), SessionError> {
        let rec = self
            .clients
            .get_mut(&s.client)
            .ok_or(SessionError::StaleClientId)?;
        if !rec.sessions.contains(&s.id) {
            rec.sessions.push(s.id);
        }
        let activity = rec.activity.clone();
        self.drop_session(&s.id);
        let mut table = SlotTable::new(s.fore.max_requests);
        for d in slots {
            table.restore(d.slot, d.seqid, d.request_hash, d.reply.map(Into::into));
        }
        let cache_reserved =
            s.fore.max_requests as usize * (s.fore.max_response_cached as usize).max(1);
        self.cache_reserved += cache_reserved;
        self.sessions.insert(
            s.id,
            SessionRecord {
                shared: Arc::new(Session {
                    id: s.id,
                    client: s.client,
                    fore: s.fore,
                    persistent: true,
                    activity,
                }),
                slots: table,
                conns: HashSet::new(),
                rebind_back: s.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0,
                callback: s.callback,
                cache_reserved,
                flags: s.flags,
                back: s.back,
            },
        );
        Ok(())
    }
}
