//! Per-session slot table and reply cache (RFC 8881 §2.10.6).
//!
//! Each slot remembers the last sequence id it executed, a hash of that request and the
//! encoded reply. A retransmission (same slot, same sequence id) is answered from the
//! cache and never executed again; that is what makes non-idempotent operations
//! exactly-once. The table grows lazily: slots are materialised the first time a client
//! uses them, so granting a large table costs nothing until it is used.

use txnfs_xdr::Gathered;

#[derive(Debug, Clone, Default)]
enum Cached {
    /// Slot never used.
    #[default]
    Empty,
    /// The request is executing now.
    InProgress,
    /// The full encoded COMPOUND4res, its parts shared with the reply that was sent
    /// (file data is not copied into the cache).
    Reply(Gathered),
    /// Executed, but the client did not ask us to cache it (or it was too big).
    Uncached,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    seqid: u32,
    request_hash: u64,
    cached: Cached,
}

/// What SEQUENCE should do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotVerdict {
    /// A new request: execute it (the slot is now marked in progress).
    Execute,
    /// A retransmission of a completed request: send this cached reply.
    Replay(Gathered),
    /// NFS4ERR_DELAY: the original is still executing.
    InProgress,
    /// NFS4ERR_RETRY_UNCACHED_REP.
    RetryUncached,
    /// NFS4ERR_SEQ_FALSE_RETRY: same slot and seqid, different request.
    FalseRetry,
    /// NFS4ERR_SEQ_MISORDERED.
    Misordered,
    /// NFS4ERR_BADSLOT.
    BadSlot,
}

/// One session's slots (fore channel).
#[derive(Debug)]
pub struct SlotTable {
    slots: Vec<Slot>,
    /// Number of slots granted (highest slot id + 1).
    granted: u32,
    /// Bytes of cached replies held now.
    cached_bytes: usize,
}

impl SlotTable {
    /// A table of `granted` slots (at least one), materialised on first use.
    pub fn new(granted: u32) -> Self {
        SlotTable {
            slots: Vec::new(),
            granted: granted.max(1),
            cached_bytes: 0,
        }
    }

    /// Number of slots granted.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Bytes of cached replies held now.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// Slots whose request is executing now (marked by [`SlotTable::begin`], not yet
    /// [`SlotTable::finish`]ed): what `txnfs stats` calls slots in use.
    pub fn in_use(&self) -> u32 {
        self.slots
            .iter()
            .filter(|s| matches!(s.cached, Cached::InProgress))
            .count() as u32
    }

    /// SEQUENCE's slot rules (RFC 8881 §2.10.6.1) for `seqid` in `slot`; on
    /// [`SlotVerdict::Execute`] the slot is marked in progress until [`SlotTable::finish`].
    pub fn begin(&mut self, slot: u32, seqid: u32, request_hash: u64) -> SlotVerdict {
        if slot >= self.granted {
            return SlotVerdict::BadSlot;
        }
        let i = slot as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, Slot::default);
        }
        let s = &mut self.slots[i];
        if matches!(s.cached, Cached::Empty) {
            // A fresh slot accepts any first sequence id the RFC allows: 1.
            if seqid != 1 {
                return SlotVerdict::Misordered;
            }
        } else if seqid == s.seqid {
            if s.request_hash != request_hash {
                return SlotVerdict::FalseRetry;
            }
            return match &s.cached {
                Cached::InProgress => SlotVerdict::InProgress,
                Cached::Reply(b) => SlotVerdict::Replay(b.clone()),
                Cached::Uncached | Cached::Empty => SlotVerdict::RetryUncached,
            };
        } else if seqid != s.seqid.wrapping_add(1) {
            return SlotVerdict::Misordered;
        }
        if let Cached::Reply(b) = &s.cached {
            self.cached_bytes -= b.len();
        }
        s.seqid = seqid;
        s.request_hash = request_hash;
        s.cached = Cached::InProgress;
        SlotVerdict::Execute
    }

    /// Sets `slot` as a restarted server found it in the durable session store (ADR
    /// 0022): last executed `seqid` with this request hash and reply (`None`: not
    /// cached).
    pub fn restore(&mut self, slot: u32, seqid: u32, request_hash: u64, reply: Option<Gathered>) {
        if slot >= self.granted {
            return;
        }
        let i = slot as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, Slot::default);
        }
        let s = &mut self.slots[i];
        if let Cached::Reply(b) = &s.cached {
            self.cached_bytes -= b.len();
        }
        s.seqid = seqid;
        s.request_hash = request_hash;
        s.cached = match reply {
            Some(b) => {
                self.cached_bytes += b.len();
                Cached::Reply(b)
            }
            None => Cached::Uncached,
        };
    }

    /// Record the outcome of an executed request.
    pub fn finish(&mut self, slot: u32, reply: Option<Gathered>) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.cached = match reply {
                Some(b) => {
                    self.cached_bytes += b.len();
                    Cached::Reply(b)
                }
                None => Cached::Uncached,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    #[test]
    fn replay_rules() {
        let mut t = SlotTable::new(4);
        assert_eq!(t.begin(4, 1, 0), SlotVerdict::BadSlot);
        assert_eq!(t.begin(0, 2, 0), SlotVerdict::Misordered);
        assert_eq!(t.begin(0, 1, 10), SlotVerdict::Execute);
        assert_eq!(t.begin(0, 1, 10), SlotVerdict::InProgress);
        t.finish(0, Some(Bytes::from_static(b"reply").into()));
        assert_eq!(
            t.begin(0, 1, 10),
            SlotVerdict::Replay(Bytes::from_static(b"reply").into())
        );
        assert_eq!(t.begin(0, 1, 11), SlotVerdict::FalseRetry);
        assert_eq!(t.begin(0, 3, 12), SlotVerdict::Misordered);
        assert_eq!(t.begin(0, 2, 12), SlotVerdict::Execute);
        t.finish(0, None);
        assert_eq!(t.begin(0, 2, 12), SlotVerdict::RetryUncached);
        assert_eq!(t.cached_bytes(), 0);
    }

    #[test]
    fn slots_in_use_are_those_executing() {
        let mut t = SlotTable::new(4);
        assert_eq!(t.in_use(), 0);
        assert_eq!(t.begin(0, 1, 1), SlotVerdict::Execute);
        assert_eq!(t.begin(2, 1, 1), SlotVerdict::Execute);
        assert_eq!(t.in_use(), 2);
        // A retransmission of a request in progress uses no second slot.
        assert_eq!(t.begin(0, 1, 1), SlotVerdict::InProgress);
        assert_eq!(t.in_use(), 2);
        t.finish(0, Some(Bytes::from_static(b"r").into()));
        assert_eq!(t.in_use(), 1);
        t.finish(2, None);
        assert_eq!(t.in_use(), 0);
    }

    proptest! {
        /// Whatever the client sends, a request is executed at most once per (slot, seqid)
        /// and replays return exactly what was recorded.
        #[test]
        fn executes_each_seqid_once(ops in proptest::collection::vec((0u32..3, 0u32..6, 0u64..2), 1..200)) {
            let mut t = SlotTable::new(3);
            let mut executed = std::collections::HashSet::new();
            for (slot, seq, h) in ops {
                match t.begin(slot, seq, h) {
                    SlotVerdict::Execute => {
                        prop_assert!(executed.insert((slot, seq)), "executed twice");
                        t.finish(slot, Some(Bytes::from(format!("{slot}:{seq}")).into()));
                    }
                    SlotVerdict::Replay(b) => {
                        prop_assert_eq!(b, Bytes::from(format!("{slot}:{seq}")).into());
                    }
                    _ => {}
                }
            }
        }
    }
}
