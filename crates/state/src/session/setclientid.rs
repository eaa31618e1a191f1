//! NFSv4.0 client records (RFC 7530 §9.1.1, §16.33, §16.34): SETCLIENTID and
//! SETCLIENTID_CONFIRM on the same client table as EXCHANGE_ID, and RENEW.
//!
//! A v4.0 client is a [`ClientRecord`] like a v4.1 one (same ids, leases, expiry and
//! release of its state) with a [`V40Client`] beside it: the callback address it gave
//! and the confirm verifier of its last SETCLIENTID. A callback update of a confirmed
//! client (same verifier) is kept as a pending update on the confirmed record rather
//! than as a second record with the same client id.

use bytes::Bytes;
use std::time::{Duration, Instant};

use super::*;

/// Where a v4.0 client takes callbacks (`cb_client4` and `callback_ident`, RFC 7530
/// §16.33.1): the callback program on the universal address `addr` of network `netid`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct V40Callback {
    /// `cb_program`.
    pub program: u32,
    /// `r_netid` ("tcp", "tcp6").
    pub netid: String,
    /// `r_addr`, a universal address ("h1.h2.h3.h4.p1.p2").
    pub addr: String,
    /// `callback_ident`, sent back in every CB_COMPOUND.
    pub ident: u32,
}

/// The v4.0 part of a client record.
#[derive(Debug, Clone)]
pub(crate) struct V40Client {
    callback: V40Callback,
    /// The `setclientid_confirm` verifier of the SETCLIENTID that made (or last
    /// confirmed) this record.
    confirm: [u8; 8],
    /// A callback update (SETCLIENTID of the confirmed client with the same verifier)
    /// waiting for its SETCLIENTID_CONFIRM.
    pending: Option<(V40Callback, [u8; 8])>,
}

/// SETCLIENTID's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetClientIdOk {
    /// The client id to confirm.
    pub clientid: ClientId,
    /// The `setclientid_confirm` verifier.
    pub confirm: [u8; 8],
}

/// SETCLIENTID_CONFIRM's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmOk {
    /// The callback address now in force (the server probes it).
    pub callback: V40Callback,
    /// Whether this confirmation changed anything (false for a retransmission).
    pub changed: bool,
    /// The confirmed incarnation this one replaced (a client restart): its record is
    /// gone, the caller releases its state.
    pub replaced: Option<ClientId>,
}

impl SessionTable {
    fn new_confirm_verifier(&mut self) -> [u8; 8] {
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&self.boot_epoch.to_be_bytes());
        v[4..].copy_from_slice(&self.next_session.to_be_bytes());
        self.next_session = self.next_session.wrapping_add(1);
        v
    }

    /// SETCLIENTID (RFC 7530 §16.33.5) sent by `principal` for the client `owner`
    /// (`nfs_client_id4.id`) with boot `verifier`. Returns the answer and, when a
    /// confirmed record of another principal holding nothing was dropped to make room,
    /// its id.
    ///
    /// | confirmed record           | outcome                                        |
    /// |----------------------------|------------------------------------------------|
    /// | none                       | new unconfirmed record (any old one replaced)  |
    /// | other principal, has state | NFS4ERR_CLID_INUSE                             |
    /// | other principal, no state  | dropped; new unconfirmed record                |
    /// | same verifier              | callback update: same client id, new confirm verifier |
    /// | other verifier             | client restart: new unconfirmed record beside it |
    pub fn setclientid(
        &mut self,
        principal: &Principal,
        owner: &Bytes,
        verifier: [u8; 8],
        callback: V40Callback,
        now: Instant,
        has_state: impl Fn(ClientId) -> bool,
    ) -> Result<(SetClientIdOk, Option<ClientId>), SessionError> {
        let (conf, unconf) = self.by_owner.get(owner).cloned().unwrap_or((None, None));
        let conf = conf.filter(|c| self.clients.contains_key(c));
        let mut removed = None;
        if let Some(cid) = conf {
            let (same_principal, same_verifier) = match self.clients.get(&cid) {
                Some(r) => (r.principal == *principal, r.verifier == verifier),
                None => (false, false),
            };
            if !same_principal {
                let busy = self
                    .clients
                    .get(&cid)
                    .is_some_and(|r| !r.sessions.is_empty())
                    || has_state(cid);
                if busy {
                    return Err(SessionError::ClidInUse);
                }
                removed = Some(cid);
            } else if same_verifier {
                if let Some(u) = unconf {
                    self.remove_client(u);
                    self.by_owner.insert(owner.clone(), (Some(cid), None));
                }
                let confirm = self.new_confirm_verifier();
                let rec = self
                    .clients
                    .get_mut(&cid)
                    .ok_or(SessionError::StaleClientId)?;
                rec.last_renew = now;
                match &mut rec.v40 {
                    Some(v) => v.pending = Some((callback, confirm)),
                    // A v4.1 client's owner string reused by v4.0: not ours to change.
                    None => return Err(SessionError::ClidInUse),
                }
                return Ok((
                    SetClientIdOk {
                        clientid: cid,
                        confirm,
                    },
                    None,
                ));
            }
        }
        if let Some(old) = removed {
            self.remove_client(old);
        }
        if let Some(u) = unconf {
            self.remove_client(u);
        }
        if self.clients.len() >= self.limits.max_clients {
            return Err(SessionError::Resource);
        }
        let id = self.new_client_id();
        let confirm = self.new_confirm_verifier();
        self.clients.insert(
            id,
            ClientRecord {
                owner: owner.clone(),
                verifier,
                principal: principal.clone(),
                confirmed: false,
                create_seq: 1,
                last_create: None,
                last_renew: now,
                sessions: Vec::new(),
                reclaim_complete: false,
                restored: false,
                v40: Some(V40Client {
                    callback,
                    confirm,
                    pending: None,
                }),
                activity: Default::default(),
            },
        );
        let conf = conf.filter(|c| Some(*c) != removed);
        self.by_owner.insert(owner.clone(), (conf, Some(id)));
        Ok((
            SetClientIdOk {
                clientid: id,
                confirm,
            },
            removed,
        ))
    }

    /// SETCLIENTID_CONFIRM (RFC 7530 §16.34.5) of `clientid` with `confirm` sent by
    /// `principal`: confirms a new record (releasing the incarnation it replaces),
    /// applies a pending callback update, or repeats the answer to a retransmission.
    /// A verifier that matches nothing, an unknown client id, and an unconfirmed
    /// record older than `lease` are NFS4ERR_STALE_CLIENTID; another principal is
    /// NFS4ERR_CLID_INUSE.
    pub fn setclientid_confirm(
        &mut self,
        principal: &Principal,
        clientid: ClientId,
        confirm: [u8; 8],
        lease: Duration,
        now: Instant,
    ) -> Result<ConfirmOk, SessionError> {
        if self.unconfirmed_expired(clientid, lease, now) {
            self.remove_client(clientid);
            return Err(SessionError::StaleClientId);
        }
        let rec = self
            .clients
            .get_mut(&clientid)
            .ok_or(SessionError::StaleClientId)?;
        if rec.principal != *principal {
            return Err(SessionError::ClidInUse);
        }
        let v = rec.v40.as_mut().ok_or(SessionError::StaleClientId)?;
        if rec.confirmed {
            rec.last_renew = now;
            if let Some((cb, verf)) = v.pending.take_if(|(_, verf)| *verf == confirm) {
                // A callback update.
                v.callback = cb;
                v.confirm = verf;
                return Ok(ConfirmOk {
                    callback: v.callback.clone(),
                    changed: true,
                    replaced: None,
                });
            }
            if v.confirm == confirm {
                // A retransmission.
                return Ok(ConfirmOk {
                    callback: v.callback.clone(),
                    changed: false,
                    replaced: None,
                });
            }
            return Err(SessionError::StaleClientId);
        }
        if v.confirm != confirm {
            return Err(SessionError::StaleClientId);
        }
        let callback = v.callback.clone();
        rec.confirmed = true;
        rec.last_renew = now;
        let owner = rec.owner.clone();
        let (old_conf, _) = self.by_owner.get(&owner).cloned().unwrap_or((None, None));
        let replaced = old_conf.filter(|o| *o != clientid);
        self.by_owner.insert(owner, (Some(clientid), None));
        if let Some(old) = replaced {
            self.remove_client(old);
        }
        Ok(ConfirmOk {
            callback,
            changed: true,
            replaced,
        })
    }

    /// RENEW (RFC 7530 §16.29): the lease of a confirmed client. Unknown and
    /// unconfirmed client ids are NFS4ERR_STALE_CLIENTID.
    pub fn renew_v40(&mut self, clientid: ClientId, now: Instant) -> Result<(), SessionError> {
        match self.clients.get_mut(&clientid) {
            Some(r) if r.confirmed => {
                r.last_renew = now;
                Ok(())
            }
            _ => Err(SessionError::StaleClientId),
        }
    }

    /// Whether `clientid` is a confirmed client (of either minor version).
    pub fn is_confirmed(&self, clientid: ClientId) -> bool {
        self.clients.get(&clientid).is_some_and(|r| r.confirmed)
    }

    /// Whether `clientid` is a v4.0 client (made by SETCLIENTID).
    pub fn is_v40(&self, clientid: ClientId) -> bool {
        self.clients.get(&clientid).is_some_and(|r| r.v40.is_some())
    }

    /// The callback address of the confirmed v4.0 client `clientid`.
    pub fn v40_callback(&self, clientid: ClientId) -> Option<&V40Callback> {
        let r = self.clients.get(&clientid).filter(|r| r.confirmed)?;
        r.v40.as_ref().map(|v| &v.callback)
    }
}
