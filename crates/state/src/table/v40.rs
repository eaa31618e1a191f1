//! What NFSv4.0 needs of the open/lock table (RFC 7530 §9.1, §16.18, §16.37): the
//! owner and client behind a stateid (a v4.0 request names no session), the
//! OPEN_CONFIRM seqid step, and RELEASE_LOCKOWNER.

use super::*;

impl StateTable {
    /// The state behind `sid` if it is an open or lock stateid of this instance,
    /// whatever its seqid.
    fn state_of(&self, sid: &Stateid) -> Option<&State> {
        if sid.is_special() {
            return None;
        }
        let (epoch, id) = sid.epoch_and_id();
        if epoch != self.epoch {
            return None;
        }
        self.states.get(&id)
    }

    /// The client holding the open or lock stateid `sid`.
    pub fn client_of(&self, sid: &Stateid) -> Option<ClientId> {
        self.state_of(sid).map(|s| s.common.client)
    }

    /// The open-owner of the open stateid `sid`, or of the open a lock stateid `sid`
    /// was made from: (client, owner).
    pub fn open_owner_of(&self, sid: &Stateid) -> Option<(ClientId, Vec<u8>)> {
        let st = self.state_of(sid)?;
        let open = match &st.kind {
            Kind::Open(o) => o,
            Kind::Lock(l) => match self.states.get(&l.open).map(|s| &s.kind) {
                Some(Kind::Open(o)) => o,
                _ => return None,
            },
        };
        Some((st.common.client, open.owner.clone()))
    }

    /// The lock-owner of the lock stateid `sid`: (client, owner).
    pub fn lock_owner_of(&self, sid: &Stateid) -> Option<(ClientId, Vec<u8>)> {
        match self.state_of(sid) {
            Some(State {
                common,
                kind: Kind::Lock(l),
            }) => Some((common.client, l.owner.clone())),
            _ => None,
        }
    }

    /// OPEN_CONFIRM (RFC 7530 §16.18) of the open stateid `sid` of `client` on `file`:
    /// the stateid with its seqid incremented.
    pub fn confirm_open(
        &mut self,
        client: ClientId,
        sid: &Stateid,
        file: FileId,
    ) -> Result<Stateid, StateError> {
        let id = self.resolve_kind(OwnerKind::Open, client, sid, file)?;
        self.bump(id)
    }

    /// RELEASE_LOCKOWNER (RFC 7530 §16.37): frees every lock stateid of `owner` of
    /// `client`; [`StateError::LocksHeld`] (and nothing freed) while any still holds a
    /// byte-range lock. Returns the number of stateids freed.
    pub fn release_lockowner(
        &mut self,
        client: ClientId,
        owner: &[u8],
    ) -> Result<usize, StateError> {
        let Some(cs) = self.clients.get(&client) else {
            return Ok(0);
        };
        let mine: Vec<u64> = cs
            .states
            .iter()
            .copied()
            .filter(|id| {
                matches!(self.states.get(id), Some(State { kind: Kind::Lock(l), .. }) if l.owner == owner)
            })
            .collect();
        let held = mine.iter().any(|id| {
            matches!(self.states.get(id), Some(State { kind: Kind::Lock(l), .. }) if !l.ranges.is_empty())
        });
        if held {
            return Err(StateError::LocksHeld);
        }
        Ok(mine.into_iter().map(|id| self.remove_state(id)).sum())
    }
}
