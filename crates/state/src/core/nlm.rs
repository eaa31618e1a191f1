//! The state core's NLM entry points (NFSv3 byte-range locks, X/Open XNFS chapter
//! 10): the grace rule and the courteous release of expired v4 clients, around the
//! table's NLM locks ([`crate::table::nlm_client`]).

use std::time::Instant;

use super::StateCore;
use crate::types::{ClientId, FileId, LockType, StateError};

/// An NLM lock request as the core takes it: the host, the file, the owner bytes, the
/// range (`length` `u64::MAX` = to EOF) and the type.
#[derive(Debug, Clone)]
pub struct NlmLock {
    /// The host ([`crate::table::nlm_client`]).
    pub host: ClientId,
    /// The file.
    pub file: FileId,
    /// The lock-owner bytes.
    pub owner: Vec<u8>,
    /// Shared or exclusive.
    pub lock_type: LockType,
    /// Start of the range.
    pub offset: u64,
    /// Length of the range (`u64::MAX` = to EOF).
    pub length: u64,
}

impl StateCore {
    /// NLM4_LOCK: the grace rule first ([`StateCore::check_grace`]: a reclaim only in
    /// grace, anything else only after it), then the table's lock. Locks of v4
    /// courtesy clients in the way are released (as for a v4 LOCK); any other
    /// conflict is [`StateError::Denied`].
    pub fn nlm_lock(
        &mut self,
        now: Instant,
        reclaim: bool,
        req: &NlmLock,
    ) -> Result<(), StateError> {
        self.check_grace(reclaim, now)?;
        let rounds = self.sessions.counts().0 + 1;
        let mut res = self.nlm_lock_once(req);
        for _ in 0..rounds {
            let Err(StateError::Denied(d)) = &res else {
                return res;
            };
            let holder = d.owner.client;
            if holder == req.host || !Self::courtesy(&self.sessions, self.lease, holder, now) {
                return res;
            }
            self.release_courtesy(holder);
            res = self.nlm_lock_once(req);
        }
        res
    }

    fn nlm_lock_once(&mut self, req: &NlmLock) -> Result<(), StateError> {
        self.table.nlm_lock(
            req.host,
            req.file,
            req.owner.clone(),
            req.lock_type,
            req.offset,
            req.length,
        )
    }

    /// NLM4_TEST: refused in grace, then the first conflicting lock not held by a v4
    /// courtesy client (a LOCK would get the range).
    pub fn nlm_test(&self, now: Instant, req: &NlmLock) -> Result<(), StateError> {
        self.check_grace(false, now)?;
        let (sessions, lease) = (&self.sessions, self.lease);
        self.table.lockt_where(
            req.host,
            &req.owner,
            req.file,
            req.lock_type,
            req.offset,
            req.length,
            |c| Self::courtesy(sessions, lease, c, now),
        )
    }

    /// NLM4_UNLOCK (also CANCEL of a lock granted meanwhile).
    pub fn nlm_unlock(&mut self, req: &NlmLock) -> Result<(), StateError> {
        self.table
            .nlm_unlock(req.host, req.file, &req.owner, req.offset, req.length)
    }

    /// Whether the lock of `req` is held already as asked.
    pub fn nlm_holds(&self, req: &NlmLock) -> bool {
        self.table.nlm_holds(
            req.host,
            req.file,
            &req.owner,
            req.lock_type,
            req.offset,
            req.length,
        )
    }

    /// NLM4_FREE_ALL or SM_NOTIFY of a rebooted host: every lock of `host` goes.
    /// Returns the number of lock and open states freed.
    pub fn nlm_release(&mut self, host: ClientId) -> usize {
        self.table.expire_client(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grace::Grace;
    use crate::table::nlm_client;
    use crate::types::file_id;
    use crate::CoreConfig;
    use bytes::Bytes;
    use std::time::Duration;

    fn core(grace: Grace) -> StateCore {
        let ch = crate::session::ChannelAttrs {
            max_request: 1 << 20,
            max_response: 1 << 20,
            max_response_cached: 1 << 16,
            max_ops: 16,
            max_requests: 8,
        };
        StateCore::new(
            CoreConfig {
                boot_epoch: 7,
                lease: Duration::from_secs(90),
                sessions: crate::session::SessionLimits {
                    max_clients: 4,
                    max_sessions_per_client: 2,
                    server_fore: ch,
                    server_back: ch,
                    back_channel: true,
                    reply_cache_bytes: usize::MAX,
                },
                state: Default::default(),
                deleg: Default::default(),
            },
            grace,
        )
    }

    fn req(host: u32, owner: &[u8], t: LockType, off: u64, len: u64) -> NlmLock {
        NlmLock {
            host: nlm_client(host),
            file: file_id(1, 42),
            owner: owner.to_vec(),
            lock_type: t,
            offset: off,
            length: len,
        }
    }

    #[test]
    fn hosts_conflict_and_unlock_frees() {
        let mut c = core(Grace::none());
        let now = Instant::now();
        let a = req(1, b"a", LockType::Write, 0, 10);
        c.nlm_lock(now, false, &a).unwrap();
        assert!(c.nlm_holds(&a));
        let b = req(2, b"b", LockType::Read, 5, 1);
        match c.nlm_lock(now, false, &b) {
            Err(StateError::Denied(d)) => {
                assert_eq!(d.owner.client, nlm_client(1));
                assert_eq!(d.owner.owner, b"a");
                assert_eq!((d.offset, d.length), (0, 10));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(c.nlm_test(now, &b), Err(StateError::Denied(_))));
        // Same owner again: granted (a retransmission).
        c.nlm_lock(now, false, &a).unwrap();
        c.nlm_unlock(&a).unwrap();
        assert!(!c.nlm_holds(&a));
        c.nlm_lock(now, false, &b).unwrap();
        assert!(c.check_invariants().is_ok());
        assert_eq!(
            c.nlm_release(nlm_client(2)),
            2,
            "the lock state and its open"
        );
        assert!(c.table().locks(file_id(1, 42)).is_empty());
        assert!(!c.table().file_is_open(file_id(1, 42)));
    }

    #[test]
    fn grace_admits_reclaims_only() {
        let now = Instant::now();
        let mut c = core(Grace::new(
            now + Duration::from_secs(10),
            vec![Bytes::from_static(b"x")],
        ));
        let a = req(1, b"a", LockType::Write, 0, u64::MAX);
        assert_eq!(c.nlm_lock(now, false, &a), Err(StateError::Grace));
        assert_eq!(c.nlm_test(now, &a), Err(StateError::Grace));
        c.nlm_lock(now, true, &a).unwrap();
        let later = now + Duration::from_secs(11);
        assert_eq!(c.nlm_lock(later, true, &a), Err(StateError::NoGrace));
        c.nlm_lock(later, false, &a).unwrap();
    }
}
