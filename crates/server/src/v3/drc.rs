//! The duplicate request cache of NFSv3 (ADR 0039): NFSv3 has no sessions, so a
//! client that lost a reply retransmits the call with the same xid, and a procedure
//! that is not idempotent (REMOVE, CREATE, RENAME, ...) must not run twice — a
//! retransmitted REMOVE would answer NOENT for the file its first run removed. As
//! knfsd's DRC (`fs/nfsd/nfscache.c`), this remembers the replies of such procedures
//! by xid, client and a checksum of the arguments, and answers a retransmission with
//! the first reply; a retransmission that arrives while the first is still running is
//! dropped (the client retransmits again later and then finds the reply).
//!
//! Sans-IO: the caller passes `now`. Bounded in entries, in reply bytes and in age;
//! the oldest entries go first.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The bounds of a [`Drc`].
#[derive(Debug, Clone, Copy)]
pub struct DrcLimits {
    /// Entries kept (running and answered).
    pub max_entries: usize,
    /// Bytes of cached replies.
    pub max_bytes: usize,
    /// An entry older than this is forgotten: a client retransmits within its
    /// timeout (Linux: 60 s at most over TCP), knfsd keeps entries 120 s.
    pub max_age: Duration,
}

impl Default for DrcLimits {
    fn default() -> Self {
        DrcLimits {
            max_entries: 8192,
            max_bytes: 16 << 20,
            max_age: Duration::from_secs(120),
        }
    }
}

/// How many bytes of the arguments the checksum covers, with their length: knfsd
/// covers 256 (`RC_CSUMLEN`). The xid, the client and the procedure already tell
/// calls apart; the checksum catches a client that reuses an xid for another call
/// (after a reboot, or an xid wrap).
const CHECKSUM_BYTES: usize = 256;

/// What identifies one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrcKey {
    pub xid: u32,
    /// The client's address without its port: a client that reconnects from another
    /// port retransmits over the new connection (Linux reuses its port, others do not).
    pub client: IpAddr,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub checksum: u64,
}

impl DrcKey {
    pub fn new(xid: u32, client: IpAddr, prog: u32, vers: u32, proc_num: u32, args: &[u8]) -> Self {
        DrcKey {
            xid,
            client,
            prog,
            vers,
            proc_num,
            checksum: checksum(args),
        }
    }
}

/// FNV-1a 64 of the first [`CHECKSUM_BYTES`] of `args` and their total length.
fn checksum(args: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let len = (args.len() as u64).to_be_bytes();
    for &b in args.iter().take(CHECKSUM_BYTES).chain(len.iter()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What [`Drc::begin`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// A new call: run it, then [`Drc::finish`] it.
    New,
    /// The same call is running: send nothing.
    InProgress,
    /// The same call was answered: send this reply again.
    Replay(Bytes),
}

#[derive(Debug)]
enum State {
    Running,
    Answered(Bytes),
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// Tells this entry from a later one of the same key in `order`.
    serial: u64,
    at: Instant,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<DrcKey, Entry>,
    /// Keys oldest first, with the serial of the entry they were queued for.
    order: VecDeque<(DrcKey, u64)>,
    bytes: usize,
    serial: u64,
}

/// Counters of a [`Drc`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrcStats {
    pub entries: usize,
    pub bytes: usize,
    pub replays: u64,
    pub dropped: u64,
}

/// The duplicate request cache.
#[derive(Debug, Default)]
pub struct Drc {
    limits: DrcLimits,
    table: Mutex<Table>,
    replays: std::sync::atomic::AtomicU64,
    dropped: std::sync::atomic::AtomicU64,
}

impl Drc {
    pub fn new(limits: DrcLimits) -> Self {
        Drc {
            limits,
            ..Drc::default()
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table stays consistent at every step (no panic can leave it half
        // updated): a poisoned lock is taken over as it is.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call of a procedure whose reply is cached arrives.
    pub fn begin(&self, key: DrcKey, now: Instant) -> Begin {
        use std::sync::atomic::Ordering::Relaxed;
        let mut t = self.table();
        t.expire(now, &self.limits);
        if let Some(e) = t.entries.get(&key) {
            return match &e.state {
                State::Running => {
                    self.dropped.fetch_add(1, Relaxed);
                    Begin::InProgress
                }
                State::Answered(reply) => {
                    self.replays.fetch_add(1, Relaxed);
                    Begin::Replay(reply.clone())
                }
            };
        }
        t.serial += 1;
        let serial = t.serial;
        t.entries.insert(
            key,
            Entry {
                state: State::Running,
                serial,
                at: now,
            },
        );
        t.order.push_back((key, serial));
        t.shrink(&self.limits);
        Begin::New
    }

    /// The call `key` that [`Drc::begin`] let run is answered with `reply`, or has
    /// no reply to keep (`None`: it failed below the procedure, e.g. GARBAGE_ARGS):
    /// then it is forgotten and a retransmission runs again.
    pub fn finish(&self, key: DrcKey, reply: Option<Bytes>) {
        let mut t = self.table();
        match reply {
            Some(reply) => {
                let len = reply.len();
                let Some(e) = t.entries.get_mut(&key) else {
                    // Evicted while running: nothing to keep it in.
                    return;
                };
                e.state = State::Answered(reply);
                t.bytes += len;
                t.shrink(&self.limits);
            }
            None => {
                t.remove(&key);
            }
        }
    }

    pub fn stats(&self) -> DrcStats {
        use std::sync::atomic::Ordering::Relaxed;
        let t = self.table();
        DrcStats {
            entries: t.entries.len(),
            bytes: t.bytes,
            replays: self.replays.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
        }
    }
}

impl Table {
    fn remove(&mut self, key: &DrcKey) {
        if let Some(e) = self.entries.remove(key) {
            if let State::Answered(r) = e.state {
                self.bytes -= r.len();
            }
        }
    }

    /// Drops the oldest entries while over a bound.
    fn shrink(&mut self, limits: &DrcLimits) {
        while self.entries.len() > limits.max_entries || self.bytes > limits.max_bytes {
            if !self.pop_oldest() {
                break;
            }
        }
    }

    /// Drops entries older than the age bound.
    fn expire(&mut self, now: Instant, limits: &DrcLimits) {
        while let Some((key, serial)) = self.order.front().copied() {
            let old = match self.entries.get(&key) {
                Some(e) if e.serial == serial => {
                    now.saturating_duration_since(e.at) > limits.max_age
                }
                // Already gone: the queue record is stale.
                _ => true,
            };
            if !old {
                break;
            }
            self.pop_oldest();
        }
    }

    /// Removes the oldest live entry; false when there is none.
    fn pop_oldest(&mut self) -> bool {
        while let Some((key, serial)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|e| e.serial == serial) {
                self.remove(&key);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn key(xid: u32, args: &[u8]) -> DrcKey {
        DrcKey::new(xid, IpAddr::V4(Ipv4Addr::LOCALHOST), 100003, 3, 12, args)
    }

    #[test]
    fn a_retransmission_gets_the_first_reply() {
        let d = Drc::new(DrcLimits::default());
        let now = Instant::now();
        assert_eq!(d.begin(key(1, b"rm a"), now), Begin::New);
        assert_eq!(d.begin(key(1, b"rm a"), now), Begin::InProgress);
        d.finish(key(1, b"rm a"), Some(Bytes::from_static(b"OK")));
        assert_eq!(
            d.begin(key(1, b"rm a"), now),
            Begin::Replay(Bytes::from_static(b"OK"))
        );
        // Another xid, or the same xid with other arguments, is another call.
        assert_eq!(d.begin(key(2, b"rm a"), now), Begin::New);
        assert_eq!(d.begin(key(1, b"rm b"), now), Begin::New);
        let s = d.stats();
        assert_eq!((s.entries, s.bytes, s.replays, s.dropped), (3, 2, 1, 1));
    }

    #[test]
    fn a_call_without_a_reply_is_forgotten() {
        let d = Drc::new(DrcLimits::default());
        let now = Instant::now();
        assert_eq!(d.begin(key(1, b"x"), now), Begin::New);
        d.finish(key(1, b"x"), None);
        assert_eq!(d.begin(key(1, b"x"), now), Begin::New);
    }

    #[test]
    fn bounded_in_entries_bytes_and_age() {
        let limits = DrcLimits {
            max_entries: 3,
            max_bytes: 10,
            max_age: Duration::from_secs(120),
        };
        let d = Drc::new(limits);
        let now = Instant::now();
        for xid in 0..5 {
            assert_eq!(d.begin(key(xid, b"a"), now), Begin::New);
            d.finish(key(xid, b"a"), Some(Bytes::from_static(b"123")));
        }
        let s = d.stats();
        assert_eq!((s.entries, s.bytes), (3, 9));
        // The oldest went first.
        assert_eq!(d.begin(key(0, b"a"), now), Begin::New);
        // One large reply pushes out older ones to fit the byte bound.
        d.finish(key(0, b"a"), Some(Bytes::from_static(b"0123456789")));
        assert!(d.stats().bytes <= 10);
        // Past the age bound everything is forgotten.
        let later = now + Duration::from_secs(121);
        assert_eq!(d.begin(key(4, b"a"), later), Begin::New);
        assert_eq!(d.stats().entries, 1);
    }

    #[test]
    fn the_checksum_covers_the_first_bytes_and_the_length() {
        let a = vec![7u8; 1000];
        let mut b = a.clone();
        b[999] = 8;
        assert_eq!(checksum(&a), checksum(&b), "past the covered bytes");
        assert_ne!(checksum(&a), checksum(&a[..999]), "the length counts");
        b[3] = 1;
        assert_ne!(checksum(&a), checksum(&b));
    }
}
