//! A read-only view of the client records for an administrator (`txnfs stats
//! --clients`): who is there, since when it was last heard, and what it holds here.

use super::{ClientId, SessionTable};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One client record as [`SessionTable::client_summaries`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSummary {
    /// The client id.
    pub id: ClientId,
    /// `co_ownerid` as the client sent it (Linux puts its host name there).
    pub owner: Bytes,
    /// Confirmed by its first CREATE_SESSION.
    pub confirmed: bool,
    /// The uid of the principal that created the record.
    pub uid: u32,
    /// Its sessions.
    pub sessions: usize,
    /// Connections bound to its sessions.
    pub connections: usize,
    /// Reply-cache bytes its sessions reserve.
    pub reply_cache_bytes: usize,
    /// How long since it last renewed its lease.
    pub idle: Duration,
    /// Restored from the durable session store and not yet done reclaiming.
    pub restored: bool,
    /// Fore-channel slots of its sessions executing a request now.
    pub slots_in_use: u64,
    /// COMPOUNDs executed through its sessions (NFSv4.1+; replays not counted).
    pub compounds: u64,
    /// Ops executed in them, SEQUENCE included.
    pub ops: u64,
    /// READ payload bytes sent to it.
    pub read_bytes: u64,
    /// WRITE payload bytes it wrote.
    pub write_bytes: u64,
}

impl SessionTable {
    /// Every client record, by id.
    pub fn client_summaries(&self, now: Instant) -> Vec<ClientSummary> {
        let mut v: Vec<ClientSummary> = self
            .clients
            .iter()
            .map(|(id, c)| {
                let sessions = c.sessions.iter().filter_map(|s| self.sessions.get(s));
                let (mut conns, mut cache, mut slots) = (0, 0, 0);
                for s in sessions {
                    conns += s.conns.len();
                    cache += s.cache_reserved;
                    slots += u64::from(s.slots.in_use());
                }
                let a = &c.activity;
                ClientSummary {
                    id: *id,
                    owner: c.owner.clone(),
                    confirmed: c.confirmed,
                    uid: c.principal.uid,
                    sessions: c.sessions.len(),
                    connections: conns,
                    reply_cache_bytes: cache,
                    idle: now.saturating_duration_since(c.last_renew),
                    restored: c.restored,
                    slots_in_use: slots,
                    compounds: a.compounds.load(Ordering::Relaxed),
                    ops: a.ops.load(Ordering::Relaxed),
                    read_bytes: a.read_bytes.load(Ordering::Relaxed),
                    write_bytes: a.write_bytes.load(Ordering::Relaxed),
                }
            })
            .collect();
        v.sort_by_key(|c| c.id);
        v
    }
}
