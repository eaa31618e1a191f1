//! EXCHANGE_ID (RFC 8881 §18.35): finding, replacing or creating the client record
//! of an owner.

use bytes::Bytes;
use std::time::Instant;

use super::*;

impl SessionTable {
    /// EXCHANGE_ID (RFC 8881 §18.35.5), the nine cases of the table, as knfsd orders
    /// them. `has_state` says whether a client holds opens or locks (the caller's
    /// table); sessions are counted here. Returns the answer and, in case 3, the
    /// confirmed client of another principal that held no state and was removed to
    /// make room (the caller persists the client list). A confirmed record replaced by
    /// a client restart (case 5) stays until the new record is confirmed
    /// ([`SessionTable::create_session`]).
    pub fn exchange_id(
        &mut self,
        principal: &Principal,
        owner: &Bytes,
        verifier: [u8; 8],
        update: bool,
        now: Instant,
        has_state: impl Fn(ClientId) -> bool,
    ) -> Result<(ExchangeIdOk, Option<ClientId>), SessionError> {
        let (conf, unconf) = self.by_owner.get(owner).cloned().unwrap_or((None, None));
        let conf = conf.filter(|c| self.clients.contains_key(c));
        if update {
            // Case 7: nothing to update.
            let Some(cid) = conf else {
                return Err(SessionError::NoEnt);
            };
            let rec = self
                .clients
                .get_mut(&cid)
                .ok_or(SessionError::StaleClientId)?;
            // Case 9: only the record's own principal may update it.
            if rec.principal != *principal {
                return Err(SessionError::Perm);
            }
            // Case 8: an update names the incarnation it updates.
            if rec.verifier != verifier {
                return Err(SessionError::NotSame);
            }
            // Case 6.
            return Ok((rec.renew_confirmed(cid, now), None));
        }
        let mut removed = None;
        if let Some(cid) = conf {
            let has_sessions = self
                .clients
                .get(&cid)
                .is_some_and(|r| !r.sessions.is_empty());
            if let Some(rec) = self.clients.get_mut(&cid) {
                if rec.principal != *principal {
                    // Case 3, a collision of two clients using one owner string: the
                    // other principal's state is not ours to destroy; a record holding
                    // none is simply replaced (knfsd does the same).
                    if has_sessions || has_state(cid) {
                        return Err(SessionError::ClidInUse);
                    }
                    removed = Some(cid);
                } else if rec.verifier == verifier {
                    // Case 2: a retry or a second EXCHANGE_ID of a live client.
                    return Ok((rec.renew_confirmed(cid, now), None));
                }
                // Case 5 (same principal, new verifier: the client restarted): a new
                // unconfirmed record beside the confirmed one.
            }
        }
        if let Some(old) = removed {
            self.remove_client(old);
        }
        // Case 4: an unconfirmed record is replaced, whoever sent it (its client id
        // becomes stale); case 1: a new owner.
        if let Some(u) = unconf {
            self.remove_client(u);
        }
        if self.clients.len() >= self.limits.max_clients {
            return Err(SessionError::Resource);
        }
        let id = self.new_client_id();
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
                v40: None,
                activity: Default::default(),
            },
        );
        let conf = conf.filter(|c| Some(*c) != removed);
        self.by_owner.insert(owner.clone(), (conf, Some(id)));
        Ok((
            ExchangeIdOk {
                clientid: id,
                sequenceid: 1,
                confirmed: false,
            },
            removed,
        ))
    }
}
