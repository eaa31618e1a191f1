//! NFSv4.0 open-owner and lock-owner sequence ids and their replay cache (RFC 7530
//! §9.1.3, §9.1.7, §16.16.5).
//!
//! In v4.0 there are no sessions: each state-changing request of an owner (OPEN,
//! OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE, LOCK, LOCKU) carries the owner's next
//! sequence id. The server keeps per owner the last sequence id and the encoded
//! result of the op that used it; a retransmission (the same sequence id) gets that
//! result again without running, any other out-of-order id NFS4ERR_BAD_SEQID. The
//! first request of an owner the server does not know (or of an open-owner whose
//! first OPEN was never confirmed) starts the sequence.
//!
//! Pure data: the server encodes the results, the state core keeps this table and
//! drops a client's owners with the client. Bounded: [`MAX_OWNERS_PER_CLIENT`]; past
//! it the owners idle longest are forgotten (their next request starts afresh).

use bytes::Bytes;
use std::collections::HashMap;

use crate::types::ClientId;

/// Owners remembered per client; beyond it the least recently used are dropped.
pub const MAX_OWNERS_PER_CLIENT: usize = 4096;

/// Whether an owner is an open-owner or a lock-owner (separate name spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnerKind {
    /// `open_owner4`.
    Open,
    /// `lock_owner4`.
    Lock,
}

/// An owner: its client, kind and opaque name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerKey {
    /// The client.
    pub client: ClientId,
    /// Open or lock.
    pub kind: OwnerKind,
    /// The owner's name as the client sent it.
    pub owner: Vec<u8>,
}

/// What was cached for an owner's last request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedReply {
    /// The op's encoded result (opnum, status, body).
    pub result: Bytes,
    /// The current filehandle after the op (OPEN sets it), encoded.
    pub fh: Option<Bytes>,
}

/// How a request's sequence id stands (RFC 7530 §9.1.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqidVerdict {
    /// An owner not known (or an unconfirmed open-owner opening again): run it; it
    /// starts the owner's sequence.
    New,
    /// The next sequence id: run it.
    Next,
    /// The last sequence id again: answer with its cached result.
    Replay(CachedReply),
    /// Anything else: NFS4ERR_BAD_SEQID.
    Bad,
}

#[derive(Debug, Clone)]
struct OwnerSeq {
    last: u32,
    /// An open-owner is confirmed by OPEN_CONFIRM (lock-owners always are).
    confirmed: bool,
    reply: Option<CachedReply>,
    /// Use counter at the last request (least recently used eviction).
    used: u64,
    /// The open stateid this owner last closed.
    closed: Option<[u8; 12]>,
}

/// The sequence ids of every v4.0 owner.
#[derive(Debug, Default)]
pub struct OwnerSeqids {
    owners: HashMap<OwnerKey, OwnerSeq>,
    /// The stateid (`other`) each open-owner last closed, so that a retransmitted
    /// CLOSE still finds its owner and gets the cached reply (§9.10.1).
    closed: HashMap<[u8; 12], OwnerKey>,
    per_client: HashMap<ClientId, usize>,
    clock: u64,
}

impl OwnerSeqids {
    /// Judges `seqid` of a request of `key`; `opening` for an OPEN (an unconfirmed
    /// open-owner's OPEN starts afresh, §16.18.5).
    pub fn check(&self, key: &OwnerKey, seqid: u32, opening: bool) -> SeqidVerdict {
        let Some(o) = self.owners.get(key) else {
            return SeqidVerdict::New;
        };
        if opening && !o.confirmed {
            return SeqidVerdict::New;
        }
        if seqid == o.last.wrapping_add(1) {
            SeqidVerdict::Next
        } else if seqid == o.last {
            match &o.reply {
                Some(r) => SeqidVerdict::Replay(r.clone()),
                None => SeqidVerdict::Bad,
            }
        } else {
            SeqidVerdict::Bad
        }
    }

    /// Records that `key` used `seqid` and got `reply`. A new open-owner is
    /// unconfirmed until [`OwnerSeqids::confirm`]; a new lock-owner is confirmed.
    pub fn record(&mut self, key: &OwnerKey, seqid: u32, reply: CachedReply) {
        self.clock += 1;
        let used = self.clock;
        if let Some(o) = self.owners.get_mut(key) {
            o.last = seqid;
            o.reply = Some(reply);
            o.used = used;
            return;
        }
        let n = self.per_client.entry(key.client).or_insert(0);
        *n += 1;
        let full = *n > MAX_OWNERS_PER_CLIENT;
        self.owners.insert(
            key.clone(),
            OwnerSeq {
                last: seqid,
                confirmed: key.kind == OwnerKind::Lock,
                reply: Some(reply),
                used,
                closed: None,
            },
        );
        if full {
            self.evict_one(key.client);
        }
    }

    /// The open-owner `key` was confirmed (OPEN_CONFIRM).
    pub fn confirm(&mut self, key: &OwnerKey) {
        if let Some(o) = self.owners.get_mut(key) {
            o.confirmed = true;
        }
    }

    /// The open-owner `key` closed the open stateid `other` (remembered until its next
    /// CLOSE or until it is forgotten).
    pub fn closed(&mut self, key: &OwnerKey, other: [u8; 12]) {
        let Some(o) = self.owners.get_mut(key) else {
            return;
        };
        if let Some(old) = o.closed.replace(other) {
            self.closed.remove(&old);
        }
        self.closed.insert(other, key.clone());
    }

    /// The owner that last closed the open stateid `other`.
    pub fn closed_by(&self, other: &[u8; 12]) -> Option<&OwnerKey> {
        self.closed.get(other)
    }

    /// Whether the open-owner `key` still waits for its OPEN_CONFIRM.
    pub fn unconfirmed(&self, key: &OwnerKey) -> bool {
        self.owners.get(key).is_some_and(|o| !o.confirmed)
    }

    /// Forgets owner `key` (RELEASE_LOCKOWNER).
    pub fn forget(&mut self, key: &OwnerKey) {
        if let Some(o) = self.owners.remove(key) {
            if let Some(c) = o.closed {
                self.closed.remove(&c);
            }
            self.uncount(key.client);
        }
    }

    /// Forgets every owner of `client` (its lease ended, it was replaced).
    pub fn forget_client(&mut self, client: ClientId) {
        if self.per_client.remove(&client).is_some() {
            self.owners.retain(|k, _| k.client != client);
            self.closed.retain(|_, k| k.client != client);
        }
    }

    /// Owners remembered.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no owner is remembered.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    fn uncount(&mut self, client: ClientId) {
        if let Some(n) = self.per_client.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&client);
            }
        }
    }

    /// Drops the least recently used owner of `client` (a linear scan, only when the
    /// client is at its bound).
    fn evict_one(&mut self, client: ClientId) {
        let victim = self
            .owners
            .iter()
            .filter(|(k, _)| k.client == client)
            .min_by_key(|(_, o)| o.used)
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            self.forget(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: OwnerKind, name: &[u8]) -> OwnerKey {
        OwnerKey {
            client: 7,
            kind,
            owner: name.to_vec(),
        }
    }

    fn reply(b: &'static [u8]) -> CachedReply {
        CachedReply {
            result: Bytes::from_static(b),
            fh: None,
        }
    }

    #[test]
    fn a_new_owner_starts_anywhere_then_goes_one_by_one() {
        let mut t = OwnerSeqids::default();
        let k = key(OwnerKind::Lock, b"p1");
        assert_eq!(t.check(&k, 41, false), SeqidVerdict::New);
        t.record(&k, 41, reply(b"a"));
        assert_eq!(t.check(&k, 42, false), SeqidVerdict::Next);
        assert_eq!(t.check(&k, 41, false), SeqidVerdict::Replay(reply(b"a")));
        assert_eq!(t.check(&k, 40, false), SeqidVerdict::Bad);
        assert_eq!(t.check(&k, 44, false), SeqidVerdict::Bad);
    }

    #[test]
    fn the_sequence_wraps_to_zero() {
        let mut t = OwnerSeqids::default();
        let k = key(OwnerKind::Lock, b"p1");
        t.record(&k, u32::MAX, reply(b"a"));
        assert_eq!(t.check(&k, 0, false), SeqidVerdict::Next);
    }

    #[test]
    fn an_unconfirmed_open_owner_opening_again_starts_afresh() {
        let mut t = OwnerSeqids::default();
        let k = key(OwnerKind::Open, b"o");
        t.record(&k, 5, reply(b"open"));
        assert!(t.unconfirmed(&k));
        assert_eq!(t.check(&k, 1, true), SeqidVerdict::New);
        // OPEN_CONFIRM of the same owner goes by the sequence.
        assert_eq!(t.check(&k, 1, false), SeqidVerdict::Bad);
        assert_eq!(t.check(&k, 6, false), SeqidVerdict::Next);
        t.confirm(&k);
        assert_eq!(t.check(&k, 1, true), SeqidVerdict::Bad);
    }

    #[test]
    fn owners_are_bounded_per_client_and_go_with_it() {
        let mut t = OwnerSeqids::default();
        for i in 0..MAX_OWNERS_PER_CLIENT + 3 {
            t.record(&key(OwnerKind::Lock, &i.to_be_bytes()), 1, reply(b"x"));
        }
        assert_eq!(t.len(), MAX_OWNERS_PER_CLIENT);
        // The oldest went first.
        assert_eq!(
            t.check(&key(OwnerKind::Lock, &0usize.to_be_bytes()), 2, false),
            SeqidVerdict::New
        );
        t.forget_client(7);
        assert!(t.is_empty());
        assert!(t.closed.is_empty());
    }

    #[test]
    fn a_closed_stateid_still_names_its_owner() {
        let mut t = OwnerSeqids::default();
        let k = key(OwnerKind::Open, b"o");
        t.record(&k, 1, reply(b"close"));
        t.closed(&k, [1; 12]);
        assert_eq!(t.closed_by(&[1; 12]), Some(&k));
        t.closed(&k, [2; 12]);
        assert_eq!(t.closed_by(&[1; 12]), None);
        t.forget(&k);
        assert_eq!(t.closed_by(&[2; 12]), None);
    }
}
