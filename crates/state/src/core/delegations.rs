//! The state core's delegations (RFC 8881 §10.2, §10.4, §10.9): granting, withdrawing,
//! recalling and revoking file and directory delegations, their notifications, and
//! the stateid checks that treat delegation stateids apart from open and lock ones.

use super::*;
use crate::deleg::{
    AttrTarget, DelegType, DirGranted, DirParams, EntryUpdate, GrantRequest, Granted, NoDeleg,
    Notice, NoticeBatch, NotifyTarget, Recall,
};
use crate::effect::Callback;
use crate::types::{FileId, SHARE_ACCESS_WRITE};

impl StateCore {
    /// The grant decision for an OPEN that just succeeded, or a WANT_DELEGATION
    /// ([`crate::deleg::policy::decide`]): `access` is the open's share access,
    /// `callback_up` whether the client's back channel answered, `fh` and `change` the
    /// file's wire handle and change attribute. A reclaim (CLAIM_PREVIOUS) may be
    /// granted during grace.
    #[allow(clippy::too_many_arguments)]
    pub fn grant_delegation(
        &mut self,
        now: Instant,
        client: ClientId,
        file: FileId,
        access: u32,
        want: crate::deleg::Want,
        callback_up: bool,
        reclaim: bool,
        fh: Bytes,
        change: u64,
        timestamps: bool,
    ) -> Result<Granted, NoDeleg> {
        let req = GrantRequest {
            timestamps,
            access,
            want,
            callback_up,
            in_grace: !reclaim && self.grace.in_grace(now),
            others: self.table.others_use(client, file),
            fh,
            change,
        };
        let granted = self.delegs.grant(now, client, file, req);
        if granted.is_ok() && self.stateful.insert(client) {
            let snap = self.snapshot();
            self.pending.push(snap);
        }
        granted
    }

    /// Take back a delegation [`StateCore::grant_delegation`] just granted, before the
    /// reply carrying it went out ([`DelegTable::withdraw`]). Requests held for the
    /// file look again.
    pub fn withdraw_delegation(&mut self, client: ClientId, sid: &Stateid, file: FileId) -> bool {
        let done = self.delegs.withdraw(client, sid, file);
        if done {
            self.pending
                .push(Effect::DelegationsReleased { files: vec![file] });
        }
        done
    }

    /// Another client's (or an anonymous) request that would do `access` to `file`:
    /// the delegations it must wait for. Those not yet recalled are recalled now
    /// ([`Effect::Callback`] with CB_RECALL, taken with [`StateCore::take_effects`]);
    /// those of a holder that cannot answer a recall — its lease ran out, or
    /// `unreachable` says it has no working back channel — are revoked at once
    /// ([`RevokeReason::Unreachable`]). Empty: go ahead.
    pub fn delegation_conflicts(
        &mut self,
        now: Instant,
        client: Option<ClientId>,
        file: FileId,
        access: Access,
        unreachable: impl Fn(ClientId) -> bool,
    ) -> Vec<u64> {
        if self.delegs.is_empty() {
            return Vec::new();
        }
        let (sessions, lease) = (&self.sessions, self.lease);
        let found = self.delegs.conflicts(now, client, file, access, |c| {
            Self::courtesy(sessions, lease, c, now) || unreachable(c)
        });
        self.push_recalls(found.recalls);
        self.revoked(found.revoked, RevokeReason::Unreachable);
        found.waiting
    }

    /// Whether any of the delegations [`StateCore::delegation_conflicts`] returned is
    /// still held.
    pub fn delegations_held(&self, ids: &[u64]) -> bool {
        self.delegs.any_live(ids)
    }

    /// Whether a delegation of `client` is being recalled.
    pub fn client_is_recalled(&self, client: ClientId) -> bool {
        self.delegs.client_is_recalled(client)
    }

    /// Revoke those of `ids` still held, for `reason`: their holders did not return
    /// them in time ([`RevokeReason::Timeout`]), or cannot be reached any more.
    pub fn revoke_delegations(&mut self, ids: &[u64], reason: RevokeReason) {
        let revoked = self.delegs.revoke_ids(ids, reason);
        self.revoked(revoked, reason);
    }

    /// A request held for recalls stopped waiting after `waited` ([`DelegStats`]).
    ///
    /// [`DelegStats`]: crate::DelegStats
    pub fn note_hold(&mut self, outcome: crate::deleg::HoldOutcome, waited: Duration) {
        self.delegs.note_hold(outcome, waited);
    }

    /// Revoke those of `ids` still held whose holder `unreachable` says cannot answer
    /// a recall (or whose lease ran out): true if any was.
    pub fn revoke_unreachable(
        &mut self,
        now: Instant,
        ids: &[u64],
        unreachable: impl Fn(ClientId) -> bool,
    ) -> bool {
        let (sessions, lease) = (&self.sessions, self.lease);
        let gone = self.delegs.unreachable_of(ids, |c| {
            Self::courtesy(sessions, lease, c, now) || unreachable(c)
        });
        if gone.is_empty() {
            return false;
        }
        self.revoke_delegations(&gone, RevokeReason::Unreachable);
        true
    }

    pub(super) fn revoked(
        &mut self,
        revoked: Vec<(ClientId, Stateid, FileId)>,
        reason: RevokeReason,
    ) {
        if revoked.is_empty() {
            return;
        }
        let mut files = Vec::with_capacity(revoked.len());
        for (client, stateid, file) in revoked {
            self.pending.push(Effect::Revoke {
                client,
                stateid,
                reason,
            });
            files.push(file);
        }
        self.pending.push(Effect::DelegationsReleased { files });
    }

    /// DELEGRETURN (RFC 8881 §18.6).
    pub fn delegreturn(
        &mut self,
        now: Instant,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<(), StateError> {
        self.delegs.delegreturn(now, client, sid, file)?;
        self.pending
            .push(Effect::DelegationsReleased { files: vec![file] });
        Ok(())
    }

    /// GET_DIR_DELEGATION (RFC 8881 §18.39): a directory delegation of `dir` (wire
    /// handle `fh`) for `client`, or why not ([`crate::deleg::policy::decide_dir`]).
    pub fn grant_dir_delegation(
        &mut self,
        now: Instant,
        client: ClientId,
        dir: FileId,
        params: DirParams,
        callback_up: bool,
        fh: Bytes,
    ) -> Result<DirGranted, NoDeleg> {
        let in_grace = self.grace.in_grace(now);
        self.delegs
            .grant_dir(now, client, dir, params, callback_up, in_grace, fh)
    }

    /// The entries of the directory of the delegation just granted as `id` (read
    /// after the grant; `None`: unreadable), for CHANGE_CHILD_ATTRS: the notification
    /// types granted in the end ([`DelegTable::track_children`]).
    pub fn track_dir_children(&mut self, id: u64, entries: Option<Vec<(Bytes, FileId)>>) -> u32 {
        self.delegs.track_children(id, entries)
    }

    /// After `client` changed `dir` in a way of `notify_type4` `kind`, doing `updates`
    /// to its entries: the other clients' directory delegations to notify (the server
    /// encodes the notification for each and queues it with
    /// [`StateCore::queue_dir_notices`]). Delegations whose holders are not notified of
    /// such changes are recalled ([`Effect::Callback`]).
    pub fn dir_notify_targets(
        &mut self,
        now: Instant,
        client: Option<ClientId>,
        dir: FileId,
        kind: u32,
        updates: &[EntryUpdate],
    ) -> Vec<NotifyTarget> {
        if self.delegs.is_empty() {
            return Vec::new();
        }
        let (targets, recalls) = self.delegs.notify_targets(now, client, dir, kind, updates);
        self.push_recalls(recalls);
        targets
    }

    /// After `client` changed the attributes of `obj`: the attribute notifications
    /// other clients' directory delegations asked for ([`DelegTable::attr_targets`]).
    pub fn dir_attr_targets(&self, client: Option<ClientId>, obj: FileId) -> Vec<AttrTarget> {
        if self.delegs.is_empty() {
            return Vec::new();
        }
        self.delegs.attr_targets(client, obj)
    }

    /// Queue notifications built for [`StateCore::dir_notify_targets`]'s targets: a
    /// delegation whose queue was idle gets an [`Effect::NotifyDue`]; one whose queue
    /// overflowed is recalled.
    pub fn queue_dir_notices(&mut self, now: Instant, notices: Vec<(u64, Notice)>) {
        let (due, recalls) = self.delegs.queue_notices(now, notices);
        for d in due {
            let client = self.delegs.holder(d.id);
            if let Some(client) = client {
                self.pending.push(Effect::NotifyDue {
                    client,
                    id: d.id,
                    after: d.after,
                });
            }
        }
        self.push_recalls(recalls);
    }

    /// The next CB_NOTIFY's worth (at most `max_bytes` of notifications) of directory
    /// delegation `id`; `None` when nothing is queued or the delegation is gone.
    pub fn take_dir_notices(&mut self, id: u64, max_bytes: usize) -> Option<NoticeBatch> {
        self.delegs.take_notices(id, max_bytes)
    }

    /// A notification of directory delegation `id` could not be delivered: recall it
    /// (its queue is dropped). Returns whether a recall was started.
    pub fn recall_dir_delegation(&mut self, now: Instant, id: u64) -> bool {
        let r = self.delegs.recall_id(now, id);
        let started = r.is_some();
        self.push_recalls(r.into_iter().collect());
        started
    }

    fn push_recalls(&mut self, recalls: Vec<Recall>) {
        for r in recalls {
            self.pending.push(Effect::Callback {
                client: r.client,
                call: Callback::Recall {
                    stateid: r.stateid,
                    fh: r.fh,
                    truncate: false,
                },
            });
        }
    }

    /// The delegation table (stats, CB_GETATTR holders, invariant checks).
    pub fn delegations(&self) -> &DelegTable {
        &self.delegs
    }

    /// Validates the stateid of a READ, WRITE or SETATTR(size): a delegation stateid
    /// through [`DelegTable::check`] (a WRITE needs a write delegation, else
    /// [`StateError::OpenMode`]), any other through [`StateTable::check_io`].
    pub fn check_io(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
        write: bool,
    ) -> Result<(), StateError> {
        if !DelegTable::is_deleg(sid) {
            return self.table.check_io(client, sid, file, write);
        }
        match self.delegs.check(client, sid, file)? {
            DelegType::Read if write => Err(StateError::OpenMode),
            _ => Ok(()),
        }
    }

    /// TEST_STATEID of one stateid (open, lock or delegation).
    pub fn test_stateid(&self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        if DelegTable::is_deleg(sid) {
            self.delegs.test(client, sid)
        } else {
            self.table.test_stateid(client, sid)
        }
    }

    /// FREE_STATEID of one stateid (a lock stateid without locks, or a revoked
    /// delegation).
    pub fn free_stateid(&mut self, client: ClientId, sid: &Stateid) -> Result<(), StateError> {
        if DelegTable::is_deleg(sid) {
            self.delegs.free(client, sid)
        } else {
            self.table.free_stateid(client, sid)
        }
    }

    /// An OPEN by the delegation holder under its delegation (CLAIM_DELEGATE_CUR,
    /// CLAIM_DELEG_CUR_FH; RFC 8881 §18.16.3): the delegation must be `client`'s and
    /// live, and a write open needs a write delegation.
    pub fn check_delegation_claim(
        &self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
        access: u32,
    ) -> Result<(), StateError> {
        match self.delegs.check(client, sid, file)? {
            DelegType::Read if access & SHARE_ACCESS_WRITE != 0 => Err(StateError::OpenMode),
            _ => Ok(()),
        }
    }
}
