//! The state core: clients, sessions (with their slots and reply caches), leases,
//! the grace period, opens, locks and delegations, owned by one value so that every
//! decision that spans them is one critical section.
//!
//! Sans-IO (ADR 0008): methods take an injected `now` and return results plus
//! [`Effect`]s for the server to execute (persisting the client list, logging a
//! released client, callbacks, revocations, wake-ups, due notifications). The core never
//! reads a clock, never touches a file and never logs; the server holds it in one
//! mutex, only for bookkeeping, never across storage calls.

use bytes::Bytes;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use txnfs_xdr::Gathered;

use crate::deleg::{Access, DelegLimits, DelegTable, RevokeReason};
use crate::effect::{ClientList, Effect, ReleaseReason};
use crate::grace::{Grace, GraceEnd};
use crate::session::{
    CallbackParams, ConnDir, ConnDirRequest, CreateSessionArgs, CreateSessionOutcome,
    DurableClient, DurableSession, DurableSlot, ExchangeIdOk, Principal, SequenceArgs, SequenceOk,
    SessionError, SessionId, SessionLimits, SessionTable,
};
use crate::table::StateTable;
use crate::types::{
    ClientId, LockRequest, LocktRequest, OpenRequest, StateError, StateLimits, Stateid,
};

mod delegations;
mod nlm;

pub use nlm::NlmLock;
mod v40;

/// How to build a [`StateCore`].
#[derive(Debug, Clone, Copy)]
pub struct CoreConfig {
    /// Differs between server instances; carried by client ids, session ids and
    /// stateids so that those of an earlier instance are stale.
    pub boot_epoch: u32,
    /// The lease time. A client silent for two leases (one courtesy lease) loses its
    /// state at the next [`StateCore::tick`]; after one lease its opens and locks yield
    /// to any other client's conflicting OPEN or LOCK (the courteous server).
    pub lease: Duration,
    /// Client and session limits.
    pub sessions: SessionLimits,
    /// Open and lock limits.
    pub state: StateLimits,
    /// Delegations on or off, and their limit.
    pub deleg: DelegLimits,
}

/// All protocol state of one server instance.
#[derive(Debug)]
pub struct StateCore {
    sessions: SessionTable,
    table: StateTable,
    delegs: DelegTable,
    grace: Grace,
    lease: Duration,
    /// Generation of the last client-list snapshot.
    persist_generation: u64,
    /// Clients recorded in the client list as holding state (ADR 0036): added when a
    /// client is first granted an open, a lock or a file delegation (that snapshot is
    /// written before the reply), dropped by the tick once it holds none. Only they are
    /// waited for after a restart; a client that only looked (ls, stat) is not.
    stateful: BTreeSet<ClientId>,
    /// Effects of events whose results carry none (an OPEN or LOCK that released a
    /// courtesy client); see [`StateCore::take_effects`].
    pending: Vec<Effect>,
    /// The v4.0 owners' sequence ids and replay cache (`crate::v40`).
    owners40: crate::v40::OwnerSeqids,
}

impl StateCore {
    /// A core with no clients, in the given grace period ([`Grace::none`] for none).
    pub fn new(cfg: CoreConfig, grace: Grace) -> Self {
        StateCore {
            sessions: SessionTable::new(cfg.boot_epoch, cfg.sessions),
            table: StateTable::new(cfg.boot_epoch, cfg.state),
            delegs: DelegTable::new(cfg.boot_epoch, cfg.deleg),
            grace,
            lease: cfg.lease,
            persist_generation: 0,
            stateful: BTreeSet::new(),
            pending: Vec::new(),
            owners40: crate::v40::OwnerSeqids::default(),
        }
    }

    // ---- clients and sessions --------------------------------------------------------

    /// EXCHANGE_ID (RFC 8881 §18.35.5) sent by `principal`. A confirmed record of
    /// another principal that holds no sessions, opens or locks is replaced (case 3):
    /// that is a confirmed client gone, so the client list is persisted again.
    pub fn exchange_id(
        &mut self,
        principal: &Principal,
        owner: &Bytes,
        verifier: [u8; 8],
        update: bool,
        now: Instant,
    ) -> Result<(ExchangeIdOk, Vec<Effect>), SessionError> {
        let (table, delegs) = (&self.table, &self.delegs);
        let (ok, removed) =
            self.sessions
                .exchange_id(principal, owner, verifier, update, now, |c| {
                    table.client_has_state(c) || delegs.client_has_delegations(c)
                })?;
        let mut effects = Vec::new();
        if let Some(old) = removed {
            effects.push(self.release(old, ReleaseReason::Replaced));
            effects.push(self.snapshot());
        }
        Ok((ok, effects))
    }

    /// CREATE_SESSION (RFC 8881 §18.36) sent by `principal`. Confirming a client that
    /// replaced an older incarnation releases that incarnation's opens and locks in
    /// the same step, so no request of the old incarnation can slip in between. An
    /// unconfirmed record whose lease ran out is gone: NFS4ERR_STALE_CLIENTID.
    pub fn create_session(
        &mut self,
        principal: &Principal,
        args: &CreateSessionArgs,
        callback: CallbackParams,
        now: Instant,
    ) -> Result<(CreateSessionOutcome, Vec<Effect>), SessionError> {
        if self
            .sessions
            .unconfirmed_expired(args.clientid, self.lease, now)
        {
            self.sessions.remove_client(args.clientid);
            return Err(SessionError::StaleClientId);
        }
        let (out, replaced) = self
            .sessions
            .create_session(principal, args, callback, now)?;
        let mut effects = Vec::new();
        // A client is recorded as waited for when it first holds state, not when it
        // is confirmed (ADR 0036); one with a persistent session is recorded as alive
        // now; the incarnation it replaced may have been recorded.
        let persistent = self.sessions.has_persistent_session(args.clientid);
        if let Some(old) = replaced {
            effects.push(self.release(old, ReleaseReason::Replaced));
        }
        if replaced.is_some() || persistent {
            effects.push(self.snapshot());
        }
        Ok((out, effects))
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33): record the callback program and security.
    pub fn set_callback(
        &mut self,
        session: &SessionId,
        callback: CallbackParams,
    ) -> Result<(), SessionError> {
        self.sessions.set_callback(session, callback)
    }

    /// SEQUENCE (RFC 8881 §18.46): session, channel limits, slot rules, lease renewal
    /// and connection binding, in one step.
    pub fn sequence(
        &mut self,
        args: &SequenceArgs,
        now: Instant,
    ) -> Result<SequenceOk, SessionError> {
        let mut ok = self.sessions.sequence(args, now)?;
        ok.delegations_revoked = self.delegs.has_revoked(ok.session.client);
        Ok(ok)
    }

    /// Completes the slot SEQUENCE opened: stores the reply for replays (`None`: not
    /// cached).
    pub fn finish_slot(&mut self, session: &SessionId, slot: u32, reply: Option<Gathered>) {
        self.sessions.finish_slot(session, slot, reply);
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34); see [`SessionTable::bind_conn`].
    pub fn bind_conn(
        &mut self,
        session: &SessionId,
        dir: ConnDirRequest,
        conn: u64,
        now: Instant,
    ) -> Result<ConnDir, SessionError> {
        self.sessions.bind_conn(session, dir, conn, now)
    }

    /// DESTROY_SESSION (RFC 8881 §18.37).
    pub fn destroy_session(&mut self, id: &SessionId) -> Result<(), SessionError> {
        self.sessions.destroy_session(id)
    }

    /// DESTROY_CLIENTID (RFC 8881 §18.50): refused with
    /// [`SessionError::ClientIdBusy`] while the client has sessions, opens, locks or
    /// delegations.
    /// The checks and the removal are one step: no session or OPEN can appear between
    /// them.
    /// Delegations make it busy too (RFC 8881 §18.50.3, as knfsd): a client that
    /// destroyed its last session without returning them is unreachable, so the
    /// first conflicting request revokes them at once instead of waiting.
    pub fn destroy_client(&mut self, id: ClientId) -> Result<Vec<Effect>, SessionError> {
        let confirmed = self
            .sessions
            .client(id)
            .ok_or(SessionError::StaleClientId)?
            .confirmed;
        if self.table.client_has_state(id) || self.delegs.client_has_delegations(id) {
            return Err(SessionError::ClientIdBusy);
        }
        let owner = self.sessions.client(id).map(|r| r.owner.clone());
        self.sessions.destroy_client(id)?;
        // A client that ends its client ID has nothing left to reclaim.
        if let Some(owner) = owner {
            self.grace.reclaim_complete(&owner);
        }
        let mut effects = vec![Effect::ClientReleased {
            client: id,
            reason: ReleaseReason::Destroyed,
            states: 0,
        }];
        if confirmed {
            effects.push(self.snapshot());
        }
        // (If that was the last one waited for, grace is over now: `in_grace` says so,
        // and the next tick reports it.)
        Ok(effects)
    }

    /// RECLAIM_COMPLETE for the whole server (RFC 8881 §18.51, `rca_one_fs` false).
    pub fn reclaim_complete(
        &mut self,
        client: ClientId,
        now: Instant,
    ) -> Result<Vec<Effect>, SessionError> {
        let rec = self
            .sessions
            .client_mut(client)
            .ok_or(SessionError::StaleClientId)?;
        if rec.reclaim_complete {
            return Err(SessionError::CompleteAlready);
        }
        rec.reclaim_complete = true;
        let owner = rec.owner.clone();
        self.grace.reclaim_complete(&owner);
        Ok(self.poll_grace(now).into_iter().collect())
    }

    /// A transport connection closed: unbind it from every session. Returns the
    /// sessions it was the last connection of.
    pub fn connection_closed(&mut self, conn: u64) -> Vec<SessionId> {
        self.sessions.connection_closed(conn)
    }

    /// The client and session table (diagnostics, tests).
    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    // ---- durable sessions (ADR 0022) ------------------------------------------------

    /// Whether CREATE_SESSION grants CREATE_SESSION4_FLAG_PERSIST to clients that ask.
    pub fn set_persistent_sessions(&mut self, on: bool) {
        self.sessions.set_persistence(on);
    }

    /// The durable records of persistent session `id` and its client.
    pub fn durable(&self, id: &SessionId) -> Option<(DurableClient, DurableSession)> {
        self.sessions.durable(id)
    }

    /// The durable record of client `id` if it holds a persistent session.
    pub fn durable_client(&self, id: ClientId) -> Option<DurableClient> {
        if !self.sessions.has_persistent_session(id) {
            return None;
        }
        self.sessions.durable_client(id)
    }

    /// Restores the persistent clients and sessions (with their slots) a previous
    /// instance stored, at `now`. Their opens, locks and delegations are not restored:
    /// old stateids are stale (they carry the old boot epoch) and the clients reclaim
    /// in the grace period as after any restart, told by
    /// SEQ4_STATUS_RESTART_RECLAIM_NEEDED. Returns the sessions not restored because
    /// their client was missing.
    pub fn restore(
        &mut self,
        clients: Vec<DurableClient>,
        sessions: Vec<(DurableSession, Vec<DurableSlot>)>,
        now: Instant,
    ) -> Vec<SessionId> {
        for c in clients {
            self.sessions.restore_client(c, now);
        }
        let mut orphans = Vec::new();
        for (s, slots) in sessions {
            let id = s.id;
            if self.sessions.restore_session(s, slots).is_err() {
                orphans.push(id);
            }
        }
        orphans
    }

    // ---- grace -------------------------------------------------------------------

    /// Whether the server is in its grace period at `now`.
    pub fn in_grace(&self, now: Instant) -> bool {
        self.grace.in_grace(now)
    }

    /// The grace rule for a state-creating request (RFC 8881 §8.4.2): a reclaim needs
    /// the grace period ([`StateError::NoGrace`]), anything else must wait for its end
    /// ([`StateError::Grace`]).
    pub fn check_grace(&self, reclaim: bool, now: Instant) -> Result<(), StateError> {
        match (reclaim, self.grace.in_grace(now)) {
            (true, false) => Err(StateError::NoGrace),
            (false, true) => Err(StateError::Grace),
            _ => Ok(()),
        }
    }

    fn poll_grace(&mut self, now: Instant) -> Vec<Effect> {
        let Some(end) = self.grace.poll(now) else {
            return Vec::new();
        };
        let mut effects = vec![Effect::GraceEnded(end)];
        if matches!(end, GraceEnd::TimedOut { unreclaimed } if unreclaimed > 0) {
            // The unreclaimed clients are no longer waited for after a restart either.
            effects.push(self.snapshot());
        }
        effects
    }

    // ---- opens and locks ---------------------------------------------------------

    /// The rules an OPEN or LOCK that would create state passes first, also called by
    /// the server before its storage calls so that nothing is created in vain:
    ///
    /// * the grace rule ([`StateCore::check_grace`], RFC 8881 §8.4.2);
    /// * the client still exists: a COMPOUND whose client expired or was destroyed
    ///   after its SEQUENCE must not create state nobody would ever release
    ///   ([`StateError::StaleClientId`]);
    /// * RECLAIM_COMPLETE first (§18.51.3): a client that has not sent it gets
    ///   [`StateError::Grace`] for a non-reclaim request whether or not the server is
    ///   in grace (knfsd's `nfsd4_open` refuses exactly so), and one that has sent it
    ///   may no longer reclaim ([`StateError::NoGrace`]).
    pub fn check_locking(
        &self,
        client: ClientId,
        reclaim: bool,
        now: Instant,
    ) -> Result<(), StateError> {
        self.check_grace(reclaim, now)?;
        let rec = self
            .sessions
            .client(client)
            .ok_or(StateError::StaleClientId)?;
        if rec.v40.is_some() {
            // v4.0 has no RECLAIM_COMPLETE: the grace period alone decides (RFC 7530 §9.6.2).
            return Ok(());
        }
        match (reclaim, rec.reclaim_complete) {
            (false, false) => Err(StateError::Grace),
            (true, true) => Err(StateError::NoGrace),
            _ => Ok(()),
        }
    }

    // The courteous server (RFC 8881 §8.4.3; Linux nfsd's courtesy clients): a client
    // whose lease ran out keeps its opens and locks until the lease-expiry tick two
    // leases after its last renewal, unless another client asks for something they
    // conflict with first; then the expired client is released at once, like a lease
    // expiry, and the request goes ahead. A client that comes back in time finds
    // everything as it left it. A request that fails anyway (a live client conflicts
    // too) releases nothing.

    /// Whether `client`'s lease has run out at `now` while the server still keeps its
    /// state (a courtesy client).
    fn courtesy(sessions: &SessionTable, lease: Duration, client: ClientId, now: Instant) -> bool {
        sessions
            .last_renewal(client)
            .is_some_and(|t| now.saturating_duration_since(t) > lease)
    }

    /// Releases the courtesy client `client` because another client's request conflicts
    /// with its state; the effects wait in `pending`.
    fn release_courtesy(&mut self, client: ClientId) {
        let Some(confirmed) = self.sessions.remove_expired(client) else {
            return;
        };
        let e = self.release(client, ReleaseReason::CourtesyConflict);
        self.pending.push(e);
        if confirmed {
            let snap = self.snapshot();
            self.pending.push(snap);
        }
    }

    /// Effects of OPEN and LOCK since the last call (clients released because they
    /// were expired and in the way). The server takes them whenever it lets go of the
    /// core and executes them like any others.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.pending)
    }

    /// OPEN's state part (RFC 8881 §18.16): [`StateCore::check_locking`], then
    /// [`StateTable::open`]. Opens of courtesy clients that conflict are released
    /// (with their clients) when no live client's open conflicts.
    pub fn open(
        &mut self,
        now: Instant,
        reclaim: bool,
        client: ClientId,
        req: OpenRequest,
    ) -> Result<Stateid, StateError> {
        self.check_locking(client, reclaim, now)?;
        // The server recalled conflicting delegations before it called this, outside
        // this lock; one granted since then must not end up beside this open.
        if self.delegs.has_conflict(
            client,
            req.file,
            Access::Open {
                access: req.access,
                deny: req.deny,
            },
        ) {
            return Err(StateError::Delay);
        }
        let first = self
            .table
            .open(client, req.owner, req.file, req.access, req.deny);
        if first != Err(StateError::ShareDenied) {
            return self.noting_state(client, first);
        }
        let blockers = self
            .table
            .share_conflicts(client, req.owner, req.file, req.access, req.deny);
        let all_courtesy = !blockers.is_empty()
            && blockers
                .iter()
                .all(|&c| c != client && Self::courtesy(&self.sessions, self.lease, c, now));
        if !all_courtesy {
            return first;
        }
        for c in blockers {
            self.release_courtesy(c);
        }
        let second = self
            .table
            .open(client, req.owner, req.file, req.access, req.deny);
        self.noting_state(client, second)
    }

    /// `granted` to `client`: when it is the client's first state, the client list
    /// records it (an effect in `pending`, carried out before the reply), so that a
    /// restart waits for it to reclaim.
    fn noting_state<T>(
        &mut self,
        client: ClientId,
        granted: Result<T, StateError>,
    ) -> Result<T, StateError> {
        if granted.is_ok() && self.stateful.insert(client) {
            let snap = self.snapshot();
            self.pending.push(snap);
        }
        granted
    }

    /// LOCK (RFC 8881 §18.10): [`StateCore::check_locking`], then [`StateTable::lock`]. Locks of
    /// courtesy clients that conflict are released (with their clients) when no live
    /// client's lock conflicts. A blocking lock type is a plain attempt here, so a
    /// client polling with one gets the range as soon as the holder's lease has run
    /// out.
    pub fn lock(
        &mut self,
        now: Instant,
        reclaim: bool,
        client: ClientId,
        req: LockRequest,
    ) -> Result<Stateid, StateError> {
        self.check_locking(client, reclaim, now)?;
        let res = self.lock_in_table(now, client, req);
        self.noting_state(client, res)
    }

    /// [`StateCore::lock`] past its checks.
    fn lock_in_table(
        &mut self,
        now: Instant,
        client: ClientId,
        req: LockRequest,
    ) -> Result<Stateid, StateError> {
        let mut res = self.table.lock(client, req.clone());
        if !matches!(res, Err(StateError::Denied(_))) {
            return res;
        }
        let (sessions, lease) = (&self.sessions, self.lease);
        if let Some(live) = self
            .table
            .lock_conflict_where(client, &req, |c| Self::courtesy(sessions, lease, c, now))
        {
            return Err(StateError::Denied(live));
        }
        // Every conflicting lock is a courtesy client's: release them one by one. Each
        // round removes one client, so the number of clients bounds the rounds.
        for _ in 0..=self.sessions.counts().0 {
            let Err(StateError::Denied(d)) = &res else {
                return res;
            };
            let holder = d.owner.client;
            if holder == client || !Self::courtesy(&self.sessions, self.lease, holder, now) {
                return res;
            }
            self.release_courtesy(holder);
            res = self.table.lock(client, req.clone());
        }
        res
    }

    /// LOCKT (RFC 8881 §18.11): refused during grace, then [`StateTable::lockt`],
    /// not counting courtesy clients' locks (a LOCK would get the range) and without
    /// releasing them (a test changes nothing).
    pub fn lockt(
        &self,
        now: Instant,
        client: ClientId,
        req: LocktRequest,
    ) -> Result<(), StateError> {
        self.check_grace(false, now)?;
        let (sessions, lease) = (&self.sessions, self.lease);
        self.table.lockt_where(
            client,
            req.owner,
            req.file,
            req.lock_type,
            req.offset,
            req.length,
            |c| Self::courtesy(sessions, lease, c, now),
        )
    }

    /// The open and lock table, for the operations that need no cross-table decision
    /// (CLOSE, OPEN_DOWNGRADE, LOCKU, TEST_STATEID, FREE_STATEID, I/O checks).
    pub fn table(&self) -> &StateTable {
        &self.table
    }

    /// Mutable [`StateCore::table`].
    pub fn table_mut(&mut self) -> &mut StateTable {
        &mut self.table
    }

    // ---- time --------------------------------------------------------------------

    /// Housekeeping at `now`: clients silent for more than two leases lose their
    /// sessions, opens and locks ([`Effect::ClientReleased`], and
    /// [`Effect::PersistClients`] if a confirmed one went); the grace period ends when
    /// due ([`Effect::GraceEnded`]).
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        // Anything OPEN or LOCK left behind that nobody took is executed now at the latest.
        let mut effects = self.take_effects();
        // Unconfirmed records hold nothing and get no courtesy lease.
        for client in self.sessions.expire_unconfirmed(self.lease, now) {
            effects.push(self.release(client, ReleaseReason::LeaseExpired));
        }
        let dead = self.sessions.expire(self.lease * 2, now);
        let mut confirmed_gone = false;
        for (client, confirmed) in dead {
            confirmed_gone |= confirmed;
            effects.push(self.release(client, ReleaseReason::LeaseExpired));
        }
        // Clients that hold nothing now are not waited for after a restart.
        let (table, delegs) = (&self.table, &self.delegs);
        let before = self.stateful.len();
        self.stateful
            .retain(|&c| table.client_has_state(c) || delegs.client_has_file_delegations(c));
        if confirmed_gone || self.stateful.len() != before {
            effects.push(self.snapshot());
        }
        effects.extend(self.poll_grace(now));
        // A recall nobody waited for (the conflicting request got DELAY at once) still
        // ends: a holder that has not returned the delegation within a lease loses it.
        let overdue = self.delegs.revoke_overdue(now, self.lease);
        self.revoked(overdue, RevokeReason::Timeout);
        effects.extend(self.take_effects());
        effects
    }

    /// A snapshot of the clients a restarted server must wait for: the confirmed
    /// clients that hold state plus, during grace, the previous instance's clients not
    /// yet reclaimed (so a second restart in grace still waits for them); and of the
    /// other clients with persistent sessions, which a restart restores.
    pub fn persist_clients(&mut self) -> Effect {
        self.snapshot()
    }

    fn snapshot(&mut self) -> Effect {
        self.persist_generation += 1;
        let sessions = &self.sessions;
        self.stateful.retain(|&c| sessions.client(c).is_some());
        let mut owners: Vec<Bytes> = self
            .stateful
            .iter()
            .filter_map(|&c| sessions.client(c))
            .filter(|r| r.confirmed)
            .map(|r| r.owner.clone())
            .collect();
        owners.extend(self.grace.waiting().cloned());
        owners.sort_unstable();
        owners.dedup();
        // The durable session store restores only clients this list names (as alive).
        let mut sessions_only: Vec<Bytes> = sessions
            .with_persistent_sessions()
            .into_iter()
            .filter(|(c, o)| !self.stateful.contains(c) && owners.binary_search(o).is_err())
            .map(|(_, o)| o)
            .collect();
        sessions_only.sort_unstable();
        sessions_only.dedup();
        Effect::PersistClients(ClientList {
            generation: self.persist_generation,
            owners,
            sessions_only,
        })
    }

    fn release(&mut self, client: ClientId, reason: ReleaseReason) -> Effect {
        // Every file the client held a delegation on, revoked ones too: all are removed.
        let files = self.delegs.client_files(client);
        self.delegs.expire_client(client);
        if !files.is_empty() {
            self.pending.push(Effect::DelegationsReleased { files });
        }
        let states = self.table.expire_client(client);
        self.owners40.forget_client(client);
        Effect::ClientReleased {
            client,
            reason,
            states,
        }
    }
}
