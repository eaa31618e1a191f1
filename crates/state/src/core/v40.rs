//! The NFSv4.0 side of the state core (RFC 7530 §9, §16.29, §16.33, §16.34): client
//! records made by SETCLIENTID on the same client table as EXCHANGE_ID, RENEW and
//! implicit renewal, the client behind a stateid, and the owners' sequence ids
//! ([`crate::v40`]).

use bytes::Bytes;
use std::time::Instant;

use super::StateCore;
use crate::deleg::DelegTable;
use crate::effect::{Effect, ReleaseReason};
use crate::session::{ConfirmOk, Principal, SessionError, SetClientIdOk, V40Callback};
use crate::types::{ClientId, Stateid};
use crate::v40::OwnerSeqids;

impl StateCore {
    /// SETCLIENTID (RFC 7530 §16.33) sent by `principal`
    /// ([`crate::session::SessionTable::setclientid`]). A confirmed record of another
    /// principal holding nothing that was dropped is released here.
    pub fn setclientid(
        &mut self,
        principal: &Principal,
        owner: &Bytes,
        verifier: [u8; 8],
        callback: V40Callback,
        now: Instant,
    ) -> Result<(SetClientIdOk, Vec<Effect>), SessionError> {
        let (table, delegs) = (&self.table, &self.delegs);
        let (ok, removed) =
            self.sessions
                .setclientid(principal, owner, verifier, callback, now, |c| {
                    table.client_has_state(c) || delegs.client_has_delegations(c)
                })?;
        let mut effects = Vec::new();
        if let Some(old) = removed {
            effects.push(self.release(old, ReleaseReason::Replaced));
            effects.push(self.snapshot());
        }
        Ok((ok, effects))
    }

    /// SETCLIENTID_CONFIRM (RFC 7530 §16.34) sent by `principal`. Confirming a client
    /// that replaced an older incarnation (a client restart) releases that one's
    /// opens, locks and delegations in the same step.
    pub fn setclientid_confirm(
        &mut self,
        principal: &Principal,
        clientid: ClientId,
        confirm: [u8; 8],
        now: Instant,
    ) -> Result<(ConfirmOk, Vec<Effect>), SessionError> {
        let ok = self
            .sessions
            .setclientid_confirm(principal, clientid, confirm, self.lease, now)?;
        let mut effects = Vec::new();
        if let Some(old) = ok.replaced {
            effects.push(self.release(old, ReleaseReason::Replaced));
            effects.push(self.snapshot());
        }
        Ok((ok, effects))
    }

    /// RENEW (RFC 7530 §16.29): NFS4ERR_STALE_CLIENTID for a client id that is not a
    /// confirmed client (unknown, of an earlier instance, or released after its lease
    /// ran out). A courtesy client (lease over, state still kept) is live again.
    pub fn renew(&mut self, clientid: ClientId, now: Instant) -> Result<(), SessionError> {
        self.sessions.renew_v40(clientid, now)
    }

    /// Implicit renewal (RFC 7530 §9.5): a request that names `client` through a
    /// client id or a stateid renews its lease. False if there is no such confirmed
    /// client.
    pub fn renew_implicitly(&mut self, client: ClientId, now: Instant) -> bool {
        self.sessions.renew_v40(client, now).is_ok()
    }

    /// The client holding the open, lock or delegation stateid `sid` (a v4.0 request
    /// names its client only so).
    pub fn client_of_stateid(&self, sid: &Stateid) -> Option<ClientId> {
        if DelegTable::is_deleg(sid) {
            let (epoch, id) = sid.epoch_and_id();
            if epoch != self.table.boot_epoch() {
                return None;
            }
            return self.delegs.holder(id);
        }
        self.table.client_of(sid)
    }

    /// The v4.0 owners' sequence ids and replay cache.
    pub fn owner_seqids(&self) -> &OwnerSeqids {
        &self.owners40
    }

    /// The v4.0 owners' sequence ids and replay cache, to record in.
    pub fn owner_seqids_mut(&mut self) -> &mut OwnerSeqids {
        &mut self.owners40
    }
}
