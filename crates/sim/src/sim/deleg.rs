//! Delegation delivery: the CB_RECALLs the server asks for are checked against the
//! oracle's expectations, queued, delivered to their holders over their back-channel
//! paths (returned at once, late, or never), and the server's delegation table is
//! checked against the model after every step.

use super::*;

impl Sim {
    /// The CB_RECALLs the server asked for during the last COMPOUND: after a judged
    /// request (`intent`), exactly the ones the oracle expected; they join the
    /// queue of recalls to deliver.
    pub(super) fn take_recalls(&mut self, intent: Option<&Intent>) -> Result<(), Violation> {
        let got = self.server()?.take_recalls();
        let mut want = std::mem::take(&mut self.expect_recalls);
        if let Some(intent) = intent {
            let mut others: Vec<[u8; 12]> = got.iter().map(|r| r.stateid.other).collect();
            others.sort_unstable();
            want.sort_unstable();
            if others != want {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "{intent:?}: the server recalled {} delegation(s), the model expected {}",
                        others.len(),
                        want.len()
                    ),
                ));
            }
        }
        for r in got {
            let holder = self.model.deleg(&r.stateid).map(|i| {
                let d = &self.model.delegs[i];
                (d.holder, d.file.clone())
            });
            let Some(((hi, inc), file)) = holder else {
                continue;
            };
            let clientid = self.clients[hi].session.as_ref().map(|s| s.clientid);
            if clientid != Some(r.client) || file != r.fh {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "a CB_RECALL went to client id {} for {:?}, the delegation is client {hi}'s (id {clientid:?}) on another file",
                        r.client, r.stateid
                    ),
                ));
            }
            self.recalls.push(RecallMsg {
                ci: hi,
                inc,
                sid: r.stateid,
                fh: r.fh,
            });
        }
        Ok(())
    }

    /// Deliver one queued CB_RECALL: its holder returns the delegation at once,
    /// some steps later, or never (the callback was lost: the lease timer revokes it
    /// and the holder learns that from SEQUENCE and DELEGRETURN).
    pub(super) fn deliver_recall(&mut self) -> Result<(), Violation> {
        let i = self.rng.index(self.recalls.len());
        let c = &self.clients[self.recalls[i].ci];
        if c.path == CbPath::Down && !c.expect_dead && c.incarnation == self.recalls[i].inc {
            // Its back channel is down: the server keeps trying until the client
            // binds a new connection (the recall stays queued).
            return Ok(());
        }
        let r = self.recalls.remove(i);
        let c = &self.clients[r.ci];
        if c.session.is_none() || c.expect_dead || c.incarnation != r.inc {
            return Ok(());
        }
        self.stats.recalls_delivered += 1;
        let fate = self.rng.below(100);
        self.note(&format!("CB_RECALL to client {} (fate {fate})", r.ci));
        if fate < 45 {
            self.deleg_return(r.ci, r.fh, r.sid)
        } else if fate < 75 {
            let due = self.step + 1 + self.rng.below(200);
            self.clients[r.ci].returns_due.push((due, r.fh, r.sid));
            Ok(())
        } else {
            Ok(())
        }
    }

    /// Late DELEGRETURNs whose step has come.
    pub(super) fn due_returns(&mut self) -> Result<(), Violation> {
        for ci in 0..self.clients.len() {
            let step = self.step;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.clients[ci].returns_due)
                .into_iter()
                .partition(|(at, _, _)| *at <= step);
            self.clients[ci].returns_due = later;
            for (_, fh, sid) in due {
                if self.clients[ci].session.is_none() {
                    break;
                }
                self.deleg_return(ci, fh, sid)?;
            }
        }
        Ok(())
    }

    /// Client `ci` returns its delegation `sid` of `file` (the reply may be lost).
    pub(crate) fn deleg_return(
        &mut self,
        ci: usize,
        file: Bytes,
        sid: stateid4,
    ) -> Result<(), Violation> {
        if !self.model.obj(&file).is_some_and(|o| o.alive) {
            // The holder removed the file itself; the handle may be stale.
            return Ok(());
        }
        let lose = self.rng.chance(self.mix.lose);
        let ops = vec![wire::putfh(&file), wire::delegreturn(&sid)];
        self.send(ci, Intent::DelegReturn { file, sid }, ops, lose)
    }

    /// Invariant 6 on the server's own tables, after every step.
    pub(super) fn check_delegations(&mut self) -> Result<(), Violation> {
        if self.cfg.break_delegations && self.step.is_multiple_of(7) {
            let ids: Vec<u64> = self
                .clients
                .iter()
                .filter(|c| !c.expect_dead)
                .filter_map(|c| c.session.as_ref().map(|s| s.clientid))
                .collect();
            let srv = self.server()?;
            for id in ids {
                if srv.open_behind_delegation(id) {
                    break;
                }
            }
        }
        let (n, shared) = self
            .server()?
            .check_delegations()
            .map_err(|e| Violation::new(ViolationKind::DelegationConflict, e))?;
        self.stats.deleg_files_checked += n as u64;
        self.stats.deleg_shared_checked += shared as u64;
        // The server's counters agree with what the replies showed the model: every
        // grant was in an OPEN reply, every recall expected, every return judged.
        let (granted, recalled, returned, _) = self.server()?.deleg_counts();
        let s = &self.stats;
        let (g0, c0, r0) = self.deleg_base;
        let seen = (
            s.delegations_granted - g0,
            s.deleg_recalled - c0,
            s.deleg_returns - r0,
        );
        if (granted, recalled, returned) != seen {
            return Err(Violation::new(
                ViolationKind::DelegationConflict,
                format!(
                    "the server counts (granted, recalled, returned) = {:?}, the replies showed {seen:?}",
                    (granted, recalled, returned)
                ),
            ));
        }
        Ok(())
    }
}

/// Whether a reply's SEQUENCE carries SEQ4_STATUS_RECALLABLE_STATE_REVOKED.
pub(super) fn revoked_flag(res: &COMPOUND4res) -> bool {
    matches!(
        res.resarray.first(),
        Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)))
            if ok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0
    )
}
