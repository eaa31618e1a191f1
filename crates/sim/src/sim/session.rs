//! Sessions and connections as the simulation drives them: framing SEQUENCE on a
//! free slot, sending and judging requests, retransmissions, (re)creating sessions,
//! keep-alives, and the faults that break them (server restarts, lease expiry, cut
//! connections, back channels bound again).

use super::deleg::revoked_flag;
use super::*;

impl Sim {
    /// SEQUENCE + ops on a random slot, outside the model (setup and audit reads).
    pub(crate) fn send_ops(
        &mut self,
        ci: usize,
        ops: Vec<nfs_argop4>,
    ) -> Result<(Bytes, COMPOUND4res), Violation> {
        let (bytes, _) = self.frame(ci, ops)?;
        let out = self.call(ci, bytes)?;
        self.after_sequence(ci, &out.1)?;
        Ok(out)
    }

    /// Encode SEQUENCE(slot, next seqid) + ops; returns the bytes and the slot.
    pub(crate) fn frame(
        &mut self,
        ci: usize,
        ops: Vec<nfs_argop4>,
    ) -> Result<(Bytes, u32), Violation> {
        let busy: Vec<u32> = self.clients[ci].pending.iter().map(|p| p.slot).collect();
        let free: Vec<u32> = (0..SLOTS).filter(|s| !busy.contains(s)).collect();
        let slot = free
            .get(self.rng.index(free.len()))
            .copied()
            .ok_or_else(|| Violation::new(ViolationKind::Harness, "every slot is busy"))?;
        let s = self.clients[ci]
            .session
            .as_ref()
            .ok_or_else(|| Violation::new(ViolationKind::Harness, "no session"))?;
        Ok((s.slots.frame(wire::TAG, slot, ops), slot))
    }

    /// Judge the SEQUENCE result: a new request on a live session must pass; a dead
    /// session must be refused. Returns whether the compound ran.
    pub(crate) fn after_sequence(
        &mut self,
        ci: usize,
        res: &COMPOUND4res,
    ) -> Result<bool, Violation> {
        let st = res.resarray.first().map(status_of).unwrap_or(res.status);
        let c = &mut self.clients[ci];
        if st == nfsstat4::NFS4_OK {
            if c.expect_dead {
                return Err(Violation::new(
                    ViolationKind::StaleStateSurvived,
                    format!("client {ci}: its session still works after lease expiry or restart"),
                ));
            }
            if let Some(s) = c.session.as_mut() {
                s.slots.confirm(res);
            }
            // CB_PATH_DOWN_SESSION and CB_PATH_DOWN exactly while the (only) session's
            // back channel is down.
            let flags = match res.resarray.first() {
                Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok))) => ok.sr_status_flags,
                _ => 0,
            };
            let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
            let want_down = if c.path == CbPath::Down { down } else { 0 };
            if flags & down != want_down {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "client {ci}: SEQUENCE status flags {flags:#x} with its back channel {:?}",
                        c.path
                    ),
                ));
            }
            // SEQ4_STATUS_RECALLABLE_STATE_REVOKED exactly while the client has a
            // revoked delegation it has not freed.
            let inc = c.incarnation;
            let want = self.model.has_revoked((ci, inc));
            if revoked_flag(res) != want {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "client {ci}: SEQUENCE {} RECALLABLE_STATE_REVOKED, the model {} a revoked delegation",
                        if want { "lacks" } else { "carries" },
                        if want { "has" } else { "has no" }
                    ),
                ));
            }
            return Ok(true);
        }
        if st == nfsstat4::NFS4ERR_BADSESSION && c.expect_dead {
            c.lose_session();
            return Ok(false);
        }
        Err(Violation::new(
            if st == nfsstat4::NFS4ERR_BADSESSION {
                ViolationKind::SessionLost
            } else {
                ViolationKind::UnexpectedStatus
            },
            format!("client {ci}: SEQUENCE answered {st:?}"),
        ))
    }

    /// Send an intent's compound; with `lose`, the client does not see the reply.
    pub(crate) fn send(
        &mut self,
        ci: usize,
        intent: Intent,
        ops: Vec<nfs_argop4>,
        lose: bool,
    ) -> Result<(), Violation> {
        // Unanswered requests are retransmitted first unless this one may overtake
        // them (on another slot, independent of what their replies say).
        let c = &self.clients[ci];
        let overtake = c.pending.len() < SLOTS as usize - 1
            && intent.may_pipeline(&c.pending)
            && self.rng.chance(700);
        if !overtake && !c.pending.is_empty() {
            // The request was built from what the client knew before those replies;
            // it decides again after hearing them.
            return self.retransmit(ci, true);
        }
        if !c.pending.is_empty() {
            self.stats.overtakes += 1;
        }
        if self.clients[ci].session.is_none() {
            return Ok(());
        }
        self.digest(intent.code() as u64);
        let (bytes, slot) = self.frame(ci, ops)?;
        let injected = self.ledger.injected();
        let now = self.now();
        self.call_now = now;
        self.expect_recalls.clear();
        let (reply, res) = self.call(ci, bytes.clone())?;
        if !self.after_sequence(ci, &res)? {
            return self.take_recalls(None);
        }
        self.clients[ci].last_renew = now;
        let faulted = self.ledger.injected() > injected;
        self.stats.faults += self.ledger.injected() - injected;
        if self.trace {
            eprintln!(
                "step {} t={:?} client {ci} conn {} {intent:?}{} -> {:?} {:?}",
                self.step,
                now,
                self.clients[ci].conn,
                if lose { " (reply lost)" } else { "" },
                res.status,
                res.resarray.iter().map(status_of).collect::<Vec<_>>()
            );
        }
        self.check_tokens(&intent, "first execution")?;
        crate::oracle::judge(self, ci, &intent, &res, faulted)?;
        self.take_recalls(Some(&intent))?;
        let pending = Pending {
            slot,
            bytes,
            first_reply: reply,
            intent,
        };
        if lose {
            self.clients[ci].pending.push(pending);
            return Ok(());
        }
        if revoked_flag(&res) {
            self.clients[ci].saw_revoked_flag = true;
        }
        crate::oracle::absorb(&mut self.clients[ci], &pending.intent, &res);
        if self.rng.chance(30) {
            // A spurious retransmission (the client timed out too early).
            self.clients[ci].pending.push(pending);
            let last = self.clients[ci].pending.len() - 1;
            self.retransmit_one(ci, last, false)?;
        }
        Ok(())
    }

    /// Invariant 1 from effects: no request's effect was applied more than once.
    pub(super) fn check_tokens(&self, intent: &Intent, when: &str) -> Result<(), Violation> {
        for t in intent.tokens() {
            let n = self.ledger.applied(t);
            if n > 1 {
                return Err(Violation::new(
                    ViolationKind::ExecutedTwice,
                    format!("{intent:?} was applied {n} times by the backend ({when})"),
                ));
            }
        }
        Ok(())
    }

    /// Retransmit every unanswered request of a client, in a random order.
    pub(crate) fn retransmit(&mut self, ci: usize, absorb: bool) -> Result<(), Violation> {
        while !self.clients[ci].pending.is_empty() {
            let i = self.rng.index(self.clients[ci].pending.len());
            self.retransmit_one(ci, i, absorb)?;
        }
        Ok(())
    }

    /// Retransmit one unanswered request: same bytes, must get the same reply.
    pub(super) fn retransmit_one(
        &mut self,
        ci: usize,
        i: usize,
        absorb: bool,
    ) -> Result<(), Violation> {
        if i >= self.clients[ci].pending.len() {
            return Ok(());
        }
        let p = self.clients[ci].pending.remove(i);
        self.stats.retransmissions += 1;
        let (reply, res) = self.call(ci, p.bytes.clone())?;
        // A replay executes nothing and recalls nothing.
        self.expect_recalls.clear();
        self.take_recalls(None)?;
        let seq_ok = res.resarray.first().map(status_of) == Some(nfsstat4::NFS4_OK);
        if !seq_ok || self.clients[ci].expect_dead {
            // A dead session (server restart, lease expiry) must refuse it, and then the
            // reply is lost for good; a live one must not.
            return self.after_sequence(ci, &res).map(|_| ());
        }
        self.check_tokens(&p.intent, "after a retransmission")?;
        if reply != p.first_reply {
            return Err(Violation::new(
                ViolationKind::ExecutedTwice,
                format!(
                    "retransmission of {:?} got a different reply than the first (status {:?}, first {:?}): executed again",
                    p.intent,
                    res.status,
                    decode(&p.first_reply).map(|r| r.status)
                ),
            ));
        }
        if absorb {
            crate::oracle::absorb(&mut self.clients[ci], &p.intent, &res);
        }
        Ok(())
    }

    /// Make sure client `ci` has a session, re-establishing it as a real client does
    /// after BADSESSION: CREATE_SESSION on the old id (must be STALE_CLIENTID), then
    /// EXCHANGE_ID and CREATE_SESSION.
    pub(crate) fn ensure_session(&mut self, ci: usize) -> Result<(), Violation> {
        if self.clients[ci].session.is_some() && self.clients[ci].expect_dead {
            // Find out the way a client does: its next SEQUENCE must be refused.
            self.send(ci, Intent::Renew, Vec::new(), false)?;
        }
        if self.clients[ci].session.is_some() {
            return Ok(());
        }
        if let Some(old) = self.clients[ci].old_clientid.take() {
            let (_, res) = self.call(
                ci,
                wire::compound(vec![wire::create_session(old, 1, SLOTS, false)]),
            )?;
            let st = res.resarray.first().map(status_of).unwrap_or(res.status);
            if st != nfsstat4::NFS4ERR_STALE_CLIENTID {
                return Err(Violation::new(
                    ViolationKind::StaleStateSurvived,
                    format!("client {ci}: CREATE_SESSION on its dead client id answered {st:?}"),
                ));
            }
        }
        let c = &self.clients[ci];
        let (_, res) = self.call(
            ci,
            wire::compound(vec![wire::exchange_id_verf(&c.owner, c.verifier)]),
        )?;
        let Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) = res.resarray.first()
        else {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: EXCHANGE_ID failed: {:?}", res.status),
            ));
        };
        if e.eir_flags & EXCHGID4_FLAG_CONFIRMED_R != 0 {
            return Err(Violation::new(
                ViolationKind::StaleStateSurvived,
                format!("client {ci}: EXCHANGE_ID found a confirmed record that should be gone"),
            ));
        }
        let (clientid, seq) = (e.eir_clientid, e.eir_sequenceid);
        // A client with a working back channel binds its connection for callbacks;
        // some others ask for one that never answers (it stays "probing": no
        // delegations either).
        let back = self.clients[ci].callback_up || self.rng.chance(500);
        let cs = wire::compound(vec![wire::create_session(clientid, seq, SLOTS, back)]);
        let (reply, res) = self.call(ci, cs.clone())?;
        let Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) =
            res.resarray.first()
        else {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: CREATE_SESSION failed: {:?}", res.status),
            ));
        };
        let sid = s.csr_sessionid;
        if self.rng.chance(300) {
            // The CREATE_SESSION reply was lost: its replay must be the same session.
            self.stats.retransmissions += 1;
            let (again, _) = self.call(ci, cs)?;
            if again != reply {
                return Err(Violation::new(
                    ViolationKind::ExecutedTwice,
                    format!("client {ci}: a replayed CREATE_SESSION got a different reply"),
                ));
            }
        }
        if self.clients[ci].callback_up && !self.server()?.assume_callback_path(&sid, true) {
            return Err(Violation::new(
                ViolationKind::Harness,
                format!("client {ci}: CREATE_SESSION with CONN_BACK_CHAN bound no back channel"),
            ));
        }
        let now = self.now();
        let c = &mut self.clients[ci];
        c.path = match (c.callback_up, back) {
            (true, _) => CbPath::Up,
            (false, true) => CbPath::Probing,
            (false, false) => CbPath::None,
        };
        c.session = Some(Session {
            clientid,
            sid,
            slots: wire::Slots::new(sid, SLOTS),
        });
        c.incarnation += 1;
        c.expect_dead = false;
        c.last_renew = now;
        c.last_contact = now;
        // The simulated clients reclaim nothing; without RECLAIM_COMPLETE every OPEN
        // and LOCK would be refused with NFS4ERR_GRACE (RFC 8881 §18.51.3).
        let (_, res) = self.send_ops(
            ci,
            vec![nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
                rca_one_fs: false,
            })],
        )?;
        if res.status != nfsstat4::NFS4_OK {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: RECLAIM_COMPLETE answered {:?}", res.status),
            ));
        }
        Ok(())
    }

    /// Renew every live client whose lease is half gone (what a real client's renewer
    /// does), except `silent`.
    pub(crate) fn keepalive_all(&mut self, silent: Option<usize>) -> Result<(), Violation> {
        let half = self.lease() / 2;
        for ci in 0..self.clients.len() {
            let c = &self.clients[ci];
            if Some(ci) == silent || c.session.is_none() || c.expect_dead {
                continue;
            }
            if self.now().saturating_sub(c.last_renew) > half {
                self.retransmit(ci, true)?;
                if self.clients[ci].session.is_some() {
                    self.send(ci, Intent::Renew, Vec::new(), false)?;
                }
            }
        }
        Ok(())
    }

    /// Drop the server (a crash: sessions, opens and locks are gone) and start a new
    /// one on the same state directory and backend.
    pub(super) fn restart(&mut self) -> Result<(), Violation> {
        self.restart_over(None)
    }

    /// A restart, over a txn layer opened (and recovered) already if given.
    pub(crate) fn restart_over(
        &mut self,
        txn: Option<Arc<txnfs_backend::txn::TxnLayer>>,
    ) -> Result<(), Violation> {
        self.note("server restart");
        self.stats.restarts += 1;
        self.server = None;
        let started = match txn {
            Some(t) => SimServer::start_over(&self.setup, t),
            None => SimServer::start(&self.setup),
        };
        self.server =
            Some(started.map_err(|e| Violation::new(ViolationKind::Harness, e.to_string()))?);
        self.model.restart();
        self.recalls.clear();
        let s = &self.stats;
        self.deleg_base = (s.delegations_granted, s.deleg_recalled, s.deleg_returns);
        for c in &mut self.clients {
            if c.session.is_some() {
                c.expect_dead = true;
            }
            // Stateids kept from an earlier loss are now of an earlier instance too.
            c.dead_by_restart = true;
        }
        Ok(())
    }

    /// One client goes silent; the others keep renewing while the clock passes its
    /// lease. Half the time the others probe its state right away, inside the server's
    /// courtesy time (the courteous server must release it for their conflicting
    /// requests); otherwise the clock passes the courtesy lease too and the timer fires
    /// first. Either way the silent client's state must be gone for the probes
    /// (invariant 5: no state of an expired client survives a conflicting request) and
    /// its next SEQUENCE must be refused.
    pub(super) fn expire_one(&mut self) -> Result<(), Violation> {
        let live: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].session.is_some() && !self.clients[i].expect_dead)
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let ci = live[self.rng.index(live.len())];
        let courtesy = self.rng.chance(500);
        let last_contact = self.clients[ci].last_contact;
        // The server keeps a silent client for two leases (one courtesy lease).
        let expired = last_contact + self.lease() + Duration::from_secs(1);
        let released = last_contact + self.lease() * 2 + Duration::from_secs(1);
        let deadline = if courtesy { expired } else { released };
        while self.now() <= deadline {
            self.clock.advance(self.lease() / 4);
            self.keepalive_all(Some(ci))?;
        }
        if courtesy {
            self.note(&format!(
                "client {ci} silent past its lease, within the courtesy time"
            ));
            self.stats.courtesy_expiries += 1;
        } else {
            self.tick()?;
            self.note(&format!("client {ci} silent past its lease; tick"));
        }
        self.stats.expiries += 1;
        let inc = self.clients[ci].incarnation;
        let held_locks: Vec<_> = self
            .model
            .locks
            .iter()
            .filter(|l| l.owner.0 == ci && l.owner.1 == inc)
            .cloned()
            .collect();
        let held_opens: Vec<_> = self
            .model
            .opens
            .iter()
            .filter(|o| o.owner.0 == ci && o.owner.1 == inc)
            .map(|o| o.file.clone())
            .collect();
        let held_delegs: Vec<_> = self
            .model
            .delegs
            .iter()
            .filter(|d| d.holder == (ci, inc))
            .map(|d| d.file.clone())
            .collect();
        self.model.forget_client(ci, inc);
        self.clients[ci].expect_dead = true;
        self.clients[ci].dead_by_restart = false;
        self.grants_uncertain = true;
        let probed = crate::actions::probe_released(self, ci, held_locks, held_opens, held_delegs);
        self.grants_uncertain = false;
        probed?;
        if courtesy {
            // Whatever no probe conflicted with goes at the lease-expiry tick.
            while self.now() <= released {
                self.clock.advance(self.lease() / 4);
                self.keepalive_all(Some(ci))?;
            }
            self.tick()?;
        }
        Ok(())
    }

    pub(super) fn cut_connection(&mut self) -> Result<(), Violation> {
        let ci = self.rng.index(self.clients.len());
        self.note(&format!("client {ci}: connection cut"));
        self.stats.cut_connections += 1;
        if let Some(s) = &self.server {
            s.connection_closed(self.clients[ci].conn);
        }
        self.clients[ci].conn = self.next_conn;
        self.next_conn += 1;
        // The back channel rode on that connection: down until the client binds a new
        // one (the transport would notice the close; the simulation has none).
        let c = &self.clients[ci];
        if c.path == CbPath::Up && !c.expect_dead {
            let sid = c.session.as_ref().map(|s| s.sid);
            if let Some(sid) = sid {
                if !self.server()?.assume_callback_path(&sid, false) {
                    return Err(Violation::new(
                        ViolationKind::Harness,
                        format!("client {ci}: its session has no back channel to take down"),
                    ));
                }
                self.clients[ci].path = CbPath::Down;
                self.stats.cb_paths_down += 1;
            }
        }
        Ok(())
    }

    /// A client whose back channel went down binds its new connection for callbacks
    /// (BIND_CONN_TO_SESSION, RFC 8881 §18.34); the probe is answered at once here.
    pub(super) fn rebind_back_channel(&mut self, ci: usize) -> Result<(), Violation> {
        let Some(sid) = self.clients[ci].session.as_ref().map(|s| s.sid) else {
            return Ok(());
        };
        let (_, res) = self.call(ci, wire::compound(vec![wire::bind_conn_back(sid)]))?;
        match res.resarray.first() {
            Some(nfs_resop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4res::NFS4_OK(ok)))
                if matches!(
                    ok.bctsr_dir,
                    channel_dir_from_server4::CDFS4_BACK | channel_dir_from_server4::CDFS4_BOTH
                ) => {}
            other => {
                return Err(Violation::new(
                    ViolationKind::UnexpectedStatus,
                    format!("client {ci}: BIND_CONN_TO_SESSION for the back channel: {other:?}"),
                ))
            }
        }
        if !self.server()?.assume_callback_path(&sid, true) {
            return Err(Violation::new(
                ViolationKind::Harness,
                format!("client {ci}: BIND_CONN_TO_SESSION bound no back channel"),
            ));
        }
        self.note(&format!("client {ci}: back channel bound again"));
        self.clients[ci].path = CbPath::Up;
        self.stats.cb_rebinds += 1;
        Ok(())
    }
}
