//! Clients, sessions and leases (RFC 8881 §2.4, §2.10, §18.35-18.37, §18.46-18.51).
//!
//! Sans-IO: every method takes `now` and returns a decision; the executor turns the
//! decisions into wire results. The whole table sits behind one mutex held only for
//! these short bookkeeping steps (never while an operation touches storage).

pub mod slots;

use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use slots::{SlotTable, SlotVerdict};

pub type ClientId = u64;
pub type SessionId = [u8; 16];

/// Negotiated channel limits (channel_attrs4 without RDMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAttrs {
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_ops: u32,
    pub max_requests: u32,
}

#[derive(Debug)]
pub struct Session {
    pub id: SessionId,
    pub client: ClientId,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    pub flags: u32,
    pub cb_program: u32,
    pub slots: Mutex<SlotTable>,
    /// Connections bound to this session (by transport connection id).
    pub conns: Mutex<HashSet<u64>>,
}

#[derive(Debug)]
pub struct ClientRecord {
    pub id: ClientId,
    pub owner: Bytes,
    pub verifier: [u8; 8],
    pub confirmed: bool,
    /// csa_sequence the next CREATE_SESSION must carry.
    pub create_seq: u32,
    /// The reply to the last CREATE_SESSION, for its replay.
    pub last_create: Option<(u32, CreateSessionOutcome)>,
    pub last_renew: Instant,
    pub sessions: Vec<SessionId>,
    pub reclaim_complete: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateSessionOutcome {
    Created {
        id: SessionId,
        seq: u32,
        flags: u32,
        fore: ChannelAttrs,
        back: ChannelAttrs,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeIdOk {
    pub clientid: ClientId,
    pub sequenceid: u32,
    pub confirmed: bool,
}

/// Session-layer failures; each maps to one NFS4ERR_*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("NFS4ERR_STALE_CLIENTID")]
    StaleClientId,
    #[error("NFS4ERR_SEQ_MISORDERED")]
    SeqMisordered,
    #[error("NFS4ERR_BADSESSION")]
    BadSession,
    #[error("NFS4ERR_CLIENTID_BUSY")]
    ClientIdBusy,
    #[error("NFS4ERR_NOENT")]
    NoEnt,
    #[error("NFS4ERR_NOT_SAME")]
    NotSame,
    #[error("NFS4ERR_RESOURCE")]
    Resource,
    #[error("NFS4ERR_COMPLETE_ALREADY")]
    CompleteAlready,
    #[error("NFS4ERR_INVAL")]
    Inval,
    #[error("NFS4ERR_TOOSMALL")]
    TooSmall,
}

pub struct Limits {
    pub max_clients: usize,
    pub max_sessions_per_client: usize,
    pub server_fore: ChannelAttrs,
    pub server_back: ChannelAttrs,
}

/// All clients and sessions of one server instance.
pub struct SessionTable {
    boot_epoch: u32,
    next_client: u32,
    next_session: u32,
    clients: HashMap<ClientId, ClientRecord>,
    /// Owner -> (confirmed id, unconfirmed id).
    by_owner: HashMap<Bytes, (Option<ClientId>, Option<ClientId>)>,
    sessions: HashMap<SessionId, Arc<Session>>,
    limits: Limits,
}

/// Smallest request/response sizes we accept: a SEQUENCE + PUTFH + GETATTR must fit.
const MIN_CHANNEL_SIZE: u32 = 1024;

impl SessionTable {
    pub fn new(boot_epoch: u32, limits: Limits) -> Self {
        SessionTable {
            boot_epoch,
            next_client: 1,
            next_session: 1,
            clients: HashMap::new(),
            by_owner: HashMap::new(),
            sessions: HashMap::new(),
            limits,
        }
    }

    fn new_client_id(&mut self) -> ClientId {
        let id = ((self.boot_epoch as u64) << 32) | self.next_client as u64;
        self.next_client = self.next_client.wrapping_add(1).max(1);
        id
    }

    pub fn client_mut(&mut self, id: ClientId) -> Option<&mut ClientRecord> {
        self.clients.get_mut(&id)
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.5), cases 1-8 for a single principal (AUTH_SYS
    /// principals are not authenticated, so "different principal" cases do not arise).
    /// Returns the result and a client whose state must be purged (none here; purging
    /// happens when the new record is confirmed).
    pub fn exchange_id(
        &mut self,
        owner: &Bytes,
        verifier: [u8; 8],
        update: bool,
        now: Instant,
    ) -> Result<ExchangeIdOk, SessionError> {
        let (conf, unconf) = self.by_owner.get(owner).cloned().unwrap_or((None, None));
        if update {
            let Some(cid) = conf else {
                return Err(SessionError::NoEnt);
            };
            let rec = self
                .clients
                .get_mut(&cid)
                .ok_or(SessionError::StaleClientId)?;
            if rec.verifier != verifier {
                return Err(SessionError::NotSame);
            }
            rec.last_renew = now;
            return Ok(ExchangeIdOk {
                clientid: cid,
                sequenceid: rec.create_seq,
                confirmed: true,
            });
        }
        if let Some(cid) = conf {
            if let Some(rec) = self.clients.get_mut(&cid) {
                if rec.verifier == verifier {
                    // Case 2: a retry or a second EXCHANGE_ID of a live client.
                    rec.last_renew = now;
                    return Ok(ExchangeIdOk {
                        clientid: cid,
                        sequenceid: rec.create_seq,
                        confirmed: true,
                    });
                }
            }
        }
        // Cases 1, 3 (client rebooted: new unconfirmed record beside the confirmed one)
        // and 4 (replace an unconfirmed record).
        if let Some(u) = unconf {
            self.clients.remove(&u);
        }
        if self.clients.len() >= self.limits.max_clients {
            return Err(SessionError::Resource);
        }
        let id = self.new_client_id();
        self.clients.insert(
            id,
            ClientRecord {
                id,
                owner: owner.clone(),
                verifier,
                confirmed: false,
                create_seq: 1,
                last_create: None,
                last_renew: now,
                sessions: Vec::new(),
                reclaim_complete: false,
            },
        );
        self.by_owner.insert(owner.clone(), (conf, Some(id)));
        Ok(ExchangeIdOk {
            clientid: id,
            sequenceid: 1,
            confirmed: false,
        })
    }

    fn negotiate(req: &ChannelAttrs, max: &ChannelAttrs) -> Result<ChannelAttrs, SessionError> {
        if req.max_request < MIN_CHANNEL_SIZE || req.max_response < MIN_CHANNEL_SIZE {
            return Err(SessionError::TooSmall);
        }
        Ok(ChannelAttrs {
            max_request: req.max_request.min(max.max_request),
            max_response: req.max_response.min(max.max_response),
            max_response_cached: req.max_response_cached.min(max.max_response_cached),
            max_ops: req.max_ops.clamp(1, max.max_ops),
            max_requests: req.max_requests.clamp(1, max.max_requests),
        })
    }

    /// CREATE_SESSION (RFC 8881 §18.36). On success returns the outcome and, if this
    /// confirmed a client that replaced an older incarnation, that old client id, whose
    /// opens and locks the caller must release.
    #[allow(clippy::too_many_arguments)]
    pub fn create_session(
        &mut self,
        clientid: ClientId,
        seq: u32,
        flags: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
        cb_program: u32,
        conn: u64,
        now: Instant,
    ) -> Result<(CreateSessionOutcome, Option<ClientId>), SessionError> {
        let rec = self
            .clients
            .get(&clientid)
            .ok_or(SessionError::StaleClientId)?;
        if let Some((s, out)) = &rec.last_create {
            if seq == *s {
                return Ok((out.clone(), None));
            }
        }
        if seq != rec.create_seq {
            return Err(SessionError::SeqMisordered);
        }
        if rec.sessions.len() >= self.limits.max_sessions_per_client {
            return Err(SessionError::Resource);
        }
        let fore = Self::negotiate(fore, &self.limits.server_fore)?;
        let back = Self::negotiate(back, &self.limits.server_back)?;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&clientid.to_be_bytes());
        id[8..12].copy_from_slice(&self.boot_epoch.to_be_bytes());
        id[12..].copy_from_slice(&self.next_session.to_be_bytes());
        self.next_session = self.next_session.wrapping_add(1);
        // We honour the back-channel flag (callbacks may later use this connection) and
        // never offer persistence or RDMA.
        let flags = flags & crate::nfs::CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
        let session = Arc::new(Session {
            id,
            client: clientid,
            fore,
            back,
            flags,
            cb_program,
            slots: Mutex::new(SlotTable::new(fore.max_requests)),
            conns: Mutex::new(HashSet::from([conn])),
        });
        self.sessions.insert(id, session);
        let outcome = CreateSessionOutcome::Created {
            id,
            seq,
            flags,
            fore,
            back,
        };
        let mut replaced = None;
        let owner;
        {
            let rec = self
                .clients
                .get_mut(&clientid)
                .ok_or(SessionError::StaleClientId)?;
            rec.create_seq = seq.wrapping_add(1);
            rec.last_create = Some((seq, outcome.clone()));
            rec.sessions.push(id);
            rec.last_renew = now;
            owner = rec.owner.clone();
            if !rec.confirmed {
                rec.confirmed = true;
                let (old_conf, _) = self.by_owner.get(&owner).cloned().unwrap_or((None, None));
                if let Some(old) = old_conf.filter(|o| *o != clientid) {
                    replaced = Some(old);
                }
                self.by_owner.insert(owner.clone(), (Some(clientid), None));
            }
        }
        if let Some(old) = replaced {
            self.remove_client(old);
        }
        Ok((outcome, replaced))
    }

    pub fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.sessions.get(id).cloned()
    }

    pub fn renew(&mut self, client: ClientId, now: Instant) {
        if let Some(r) = self.clients.get_mut(&client) {
            r.last_renew = now;
        }
    }

    pub fn destroy_session(&mut self, id: &SessionId) -> Result<(), SessionError> {
        let s = self.sessions.remove(id).ok_or(SessionError::BadSession)?;
        if let Some(r) = self.clients.get_mut(&s.client) {
            r.sessions.retain(|x| x != id);
        }
        Ok(())
    }

    /// DESTROY_CLIENTID: refused while the client has sessions; the caller checks that
    /// it holds no opens/locks.
    pub fn destroy_client(&mut self, id: ClientId) -> Result<(), SessionError> {
        let r = self.clients.get(&id).ok_or(SessionError::StaleClientId)?;
        if !r.sessions.is_empty() {
            return Err(SessionError::ClientIdBusy);
        }
        self.remove_client(id);
        Ok(())
    }

    fn remove_client(&mut self, id: ClientId) {
        if let Some(r) = self.clients.remove(&id) {
            for s in &r.sessions {
                self.sessions.remove(s);
            }
            if let Some((c, u)) = self.by_owner.get_mut(&r.owner) {
                if *c == Some(id) {
                    *c = None;
                }
                if *u == Some(id) {
                    *u = None;
                }
                if c.is_none() && u.is_none() {
                    self.by_owner.remove(&r.owner);
                }
            }
        }
    }

    /// Clients whose lease ran out; they and their sessions are removed and returned so
    /// the caller can free their state.
    pub fn expire(&mut self, lease: Duration, now: Instant) -> Vec<ClientId> {
        let dead: Vec<ClientId> = self
            .clients
            .values()
            .filter(|r| now.saturating_duration_since(r.last_renew) > lease)
            .map(|r| r.id)
            .collect();
        for id in &dead {
            self.remove_client(*id);
        }
        dead
    }

    /// Owners of confirmed clients (persisted so a restarted server knows whom to wait
    /// for during its grace period).
    pub fn confirmed_owners(&self) -> Vec<Bytes> {
        self.clients
            .values()
            .filter(|r| r.confirmed)
            .map(|r| r.owner.clone())
            .collect()
    }

    /// Connection closed: unbind it from every session.
    pub fn connection_closed(&self, conn: u64) {
        for s in self.sessions.values() {
            if let Ok(mut c) = s.conns.lock() {
                c.remove(&conn);
            }
        }
    }

    pub fn counts(&self) -> (usize, usize) {
        (self.clients.len(), self.sessions.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> SessionTable {
        let ch = ChannelAttrs {
            max_request: 1 << 20,
            max_response: 1 << 20,
            max_response_cached: 1 << 16,
            max_ops: 1000,
            max_requests: 64,
        };
        SessionTable::new(
            7,
            Limits {
                max_clients: 2,
                max_sessions_per_client: 2,
                server_fore: ch,
                server_back: ch,
            },
        )
    }

    fn ch(req: u32) -> ChannelAttrs {
        ChannelAttrs {
            max_request: 1 << 21,
            max_response: 1 << 21,
            max_response_cached: 1 << 20,
            max_ops: 5000,
            max_requests: req,
        }
    }

    #[test]
    fn exchange_and_create_session() {
        let mut t = table();
        let now = Instant::now();
        let owner = Bytes::from_static(b"linux-host");
        let e = t.exchange_id(&owner, [1; 8], false, now).unwrap();
        assert!(!e.confirmed);
        // create with wrong seq
        assert_eq!(
            t.create_session(e.clientid, 2, 0, &ch(200), &ch(1), 0, 1, now)
                .unwrap_err(),
            SessionError::SeqMisordered
        );
        let (out, replaced) = t
            .create_session(e.clientid, 1, 0, &ch(200), &ch(1), 0, 1, now)
            .unwrap();
        assert_eq!(replaced, None);
        let CreateSessionOutcome::Created { fore, id, .. } = out.clone();
        assert_eq!(fore.max_requests, 64, "clamped to the server maximum");
        assert_eq!(fore.max_ops, 1000);
        // replay of the same CREATE_SESSION returns the same session
        let (again, _) = t
            .create_session(e.clientid, 1, 0, &ch(200), &ch(1), 0, 1, now)
            .unwrap();
        assert_eq!(again, out);
        assert!(t.session(&id).is_some());
        // same verifier again: same client, confirmed
        let e2 = t.exchange_id(&owner, [1; 8], false, now).unwrap();
        assert_eq!(e2.clientid, e.clientid);
        assert!(e2.confirmed);
        // client reboot: new verifier gives a new id; confirming it drops the old one
        let e3 = t.exchange_id(&owner, [2; 8], false, now).unwrap();
        assert_ne!(e3.clientid, e.clientid);
        let (_, replaced) = t
            .create_session(e3.clientid, 1, 0, &ch(8), &ch(1), 0, 2, now)
            .unwrap();
        assert_eq!(replaced, Some(e.clientid));
        assert!(t.session(&id).is_none());
        assert_eq!(
            t.create_session(e.clientid, 2, 0, &ch(8), &ch(1), 0, 2, now)
                .unwrap_err(),
            SessionError::StaleClientId
        );
        // update with wrong verifier
        assert_eq!(
            t.exchange_id(&owner, [9; 8], true, now).unwrap_err(),
            SessionError::NotSame
        );
    }

    #[test]
    fn lease_expiry_and_destroy() {
        let mut t = table();
        let now = Instant::now();
        let e = t
            .exchange_id(&Bytes::from_static(b"a"), [1; 8], false, now)
            .unwrap();
        let (CreateSessionOutcome::Created { id, .. }, _) = t
            .create_session(e.clientid, 1, 0, &ch(4), &ch(1), 0, 1, now)
            .unwrap();
        assert_eq!(
            t.destroy_client(e.clientid).unwrap_err(),
            SessionError::ClientIdBusy
        );
        t.destroy_session(&id).unwrap();
        assert_eq!(
            t.destroy_session(&id).unwrap_err(),
            SessionError::BadSession
        );
        let later = now + Duration::from_secs(100);
        assert_eq!(t.expire(Duration::from_secs(60), later), vec![e.clientid]);
        assert_eq!(t.counts(), (0, 0));
        // limits
        t.exchange_id(&Bytes::from_static(b"x"), [1; 8], false, now)
            .unwrap();
        t.exchange_id(&Bytes::from_static(b"y"), [1; 8], false, now)
            .unwrap();
        assert_eq!(
            t.exchange_id(&Bytes::from_static(b"z"), [1; 8], false, now)
                .unwrap_err(),
            SessionError::Resource
        );
    }
}
