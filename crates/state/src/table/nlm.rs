//! Byte-range locks of NLM hosts (NFSv3's Network Lock Manager, X/Open XNFS chapter
//! 10) in the one lock table, so that they and NFSv4 locks conflict.
//!
//! An NLM host (a client machine, by its `caller_name`) is a client of this table
//! with an id from a space v4 client ids never use ([`nlm_client`]). NLM has no OPEN:
//! the first lock of a host on a file opens the file for it (read and write, deny
//! none) under a reserved open-owner, and its last unlock there closes it; its locks
//! hang off that open like any v4 lock state. An NLM lock-owner is the owner bytes
//! the server builds from the host's `svid` and `oh`.

use super::{Kind, State, StateTable};
use crate::types::*;

/// The open-owner of the implicit open of an NLM host (no v4 owner is this: a v4
/// client's owners live under its own client id).
const NLM_OPEN_OWNER: &[u8] = b"\0nlm-open";

/// The client id of NLM host number `n` (1-based): boot epoch 0, which no server
/// instance has (v4 client ids carry the instance's epoch, never 0, in their high 32
/// bits).
pub fn nlm_client(n: u32) -> ClientId {
    u64::from(n)
}

/// Whether `client` is an NLM host ([`nlm_client`]).
pub fn is_nlm_client(client: ClientId) -> bool {
    client >> 32 == 0
}

impl StateTable {
    /// An NLM LOCK (XNFS §10.14.2, `NLM4_LOCK`) of `owner` of host `client` on `file`:
    /// the implicit open first, then [`StateTable::lock`]; a lock that fails leaves
    /// no open it created behind. A conflict is [`StateError::Denied`].
    pub fn nlm_lock(
        &mut self,
        client: ClientId,
        file: FileId,
        owner: Vec<u8>,
        lock_type: LockType,
        offset: u64,
        length: u64,
    ) -> Result<(), StateError> {
        let existing = self
            .open_index
            .get(&(client, NLM_OPEN_OWNER.to_vec(), file))
            .copied();
        let open_stateid = match existing {
            Some(id) => self.current_stateid(id)?,
            None => self.open(client, NLM_OPEN_OWNER, file, SHARE_ACCESS_BOTH, 0)?,
        };
        let req = LockRequest {
            file,
            lock_type,
            offset,
            length,
            locker: Locker::NewOwner {
                open_stateid,
                lock_owner: owner,
            },
        };
        match self.lock(client, req) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.nlm_close_if_unlocked(client, file);
                Err(e)
            }
        }
    }

    /// An NLM UNLOCK (`NLM4_UNLOCK`): the range of `owner` of host `client` on `file`
    /// is unlocked; nothing locked there is no error (XNFS: UNLOCK of an unlocked
    /// range is granted). The host's implicit open goes with its last lock there.
    pub fn nlm_unlock(
        &mut self,
        client: ClientId,
        file: FileId,
        owner: &[u8],
        offset: u64,
        length: u64,
    ) -> Result<(), StateError> {
        let Some(&id) = self.lock_index.get(&(client, owner.to_vec(), file)) else {
            return Ok(());
        };
        let sid = self.current_stateid(id)?;
        self.locku(client, &sid, file, offset, length)?;
        self.nlm_close_if_unlocked(client, file);
        Ok(())
    }

    /// Whether `owner` of host `client` holds a lock on `file` covering exactly
    /// `[offset, offset + length)` of `lock_type` or stronger (a retried LOCK whose
    /// first reply was lost, or a blocked one granted meanwhile).
    pub fn nlm_holds(
        &self,
        client: ClientId,
        file: FileId,
        owner: &[u8],
        lock_type: LockType,
        offset: u64,
        length: u64,
    ) -> bool {
        let Some(id) = self.lock_index.get(&(client, owner.to_vec(), file)) else {
            return false;
        };
        let Some(State {
            kind: Kind::Lock(l),
            ..
        }) = self.states.get(id)
        else {
            return false;
        };
        let Ok((start, end)) = crate::range::validate(offset, length) else {
            return false;
        };
        // The ranges are canonical (merged), so one of them covers all of it.
        l.ranges.iter().any(|r| {
            r.start <= start && r.end >= end && (lock_type == LockType::Read || r.kind == lock_type)
        })
    }

    /// The current stateid of state `id`.
    fn current_stateid(&self, id: u64) -> Result<Stateid, StateError> {
        let seqid = self
            .states
            .get(&id)
            .map(|s| s.common.seqid)
            .ok_or(StateError::BadStateid)?;
        Ok(self.make_stateid(id, seqid))
    }

    /// Closes host `client`'s implicit open of `file` when no lock of the host there
    /// holds a range any more (its empty lock states go with it).
    fn nlm_close_if_unlocked(&mut self, client: ClientId, file: FileId) {
        let Some(&open) = self
            .open_index
            .get(&(client, NLM_OPEN_OWNER.to_vec(), file))
        else {
            return;
        };
        let held = match self.states.get(&open) {
            Some(State {
                kind: Kind::Open(o),
                ..
            }) => o.lock_states.iter().any(|l| {
                matches!(self.states.get(l), Some(State { kind: Kind::Lock(ls), .. }) if !ls.ranges.is_empty())
            }),
            _ => return,
        };
        if !held {
            self.remove_state(open);
        }
    }
}
