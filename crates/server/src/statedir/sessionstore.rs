//! The durable session store (ADR 0022): persistent sessions
//! (CREATE_SESSION4_FLAG_PERSIST, RFC 8881 §2.10.6.5), their clients and, per slot, the
//! last sequence id with its cached reply, so that a client retrying on its old
//! session after a restart gets the original reply instead of a second execution.
//!
//! One append-only file, `<state_dir>/sessions.log`: a header (magic) and records
//! framed by the durable log (`txnfs_wal`, [`Mode::Buffered`]). A record is appended
//! to the log's buffer and gets a ticket; [`SessionStore::wait`] returns once the
//! ticket is durable, concurrent requests sharing one `fdatasync` (the log's group
//! commit). A torn or corrupt tail is ignored when the file is read (the records
//! before it stand).
//!
//! The store keeps the live records in memory (a reply is the same `Bytes` the slot's
//! cache holds, so that costs no copy). When the file has grown to twice its size at
//! the last compaction (at least [`COMPACT_MIN`]), the live records replace it (the
//! log writes them as a new file at its next group commit: temporary file, fsync,
//! rename, fsync of the directory).
//!
//! Transactions: a transactional COMPOUND's reply is stored, tagged with its COMPOUND
//! id, before the transaction commits. The slot's previous record is kept beside it
//! until [`SessionStore::settle`] says the transaction ended, so a compaction in
//! between still has it. When the server starts, records tagged with a COMPOUND that
//! recovery rolled back are skipped: that slot is back at its previous record and the
//! client's retry executes (the transaction never happened).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use txnfs_state::session::{
    CallbackParams, CallbackSec, ChannelAttrs, CreateSessionOutcome, DurableClient, DurableSession,
    DurableSlot, Principal, SessionId,
};
use txnfs_state::ClientId;
use txnfs_wal::{frame, Dec, DecodeError, Enc, Log, LogStats, Lsn, Mode};

const MAGIC: &[u8; 8] = b"TXNFSS01";
/// Smallest file size at which a compaction is considered.
pub const COMPACT_MIN: u64 = 4 << 20;
/// The file's name in the state directory.
pub const FILE_NAME: &str = "sessions.log";

/// What the previous instance left: restore these into the state core.
#[derive(Debug, Default)]
pub struct Restored {
    pub clients: Vec<DurableClient>,
    pub sessions: Vec<(DurableSession, Vec<DurableSlot>)>,
    /// Slot records skipped because recovery rolled their transaction back.
    pub rolled_back: usize,
}

/// Counters (for the ADR's measurements and tests): records appended, syncs, and
/// compactions (`rewrites`).
pub type StoreStats = LogStats;

#[derive(Debug, Clone)]
struct SlotRec {
    d: DurableSlot,
    /// The transactional COMPOUND whose reply this is (0: none).
    txn: u64,
}

#[derive(Debug)]
struct LiveSlot {
    latest: SlotRec,
    /// Kept while `latest` is a transaction's reply whose end is not known yet.
    prev: Option<SlotRec>,
}

#[derive(Debug)]
struct LiveSession {
    rec: DurableSession,
    slots: BTreeMap<u32, LiveSlot>,
}

#[derive(Debug, Default)]
struct Live {
    clients: HashMap<ClientId, DurableClient>,
    sessions: HashMap<SessionId, LiveSession>,
}

enum Record {
    Client(DurableClient),
    Session(DurableSession),
    Slot(SessionId, SlotRec),
    DropSession(SessionId),
    DropClient(ClientId),
}

impl Live {
    /// Applies one record; `skip` names the transactions whose replies are dropped.
    fn apply(&mut self, r: Record, skip: &HashSet<u64>) -> bool {
        match r {
            Record::Client(c) => {
                self.clients.insert(c.id, c);
            }
            Record::Session(s) => match self.sessions.get_mut(&s.id) {
                Some(l) => l.rec = s,
                None => {
                    self.sessions.insert(
                        s.id,
                        LiveSession {
                            rec: s,
                            slots: BTreeMap::new(),
                        },
                    );
                }
            },
            Record::Slot(sid, rec) => {
                if rec.txn != 0 && skip.contains(&rec.txn) {
                    return false;
                }
                if let Some(s) = self.sessions.get_mut(&sid) {
                    let slot = rec.d.slot;
                    match s.slots.remove(&slot) {
                        Some(old) => {
                            let prev = (rec.txn != 0).then_some(old.latest);
                            s.slots.insert(slot, LiveSlot { latest: rec, prev });
                        }
                        None => {
                            s.slots.insert(
                                slot,
                                LiveSlot {
                                    latest: rec,
                                    prev: None,
                                },
                            );
                        }
                    }
                }
            }
            Record::DropSession(id) => {
                self.sessions.remove(&id);
            }
            Record::DropClient(id) => {
                self.clients.remove(&id);
                self.sessions.retain(|_, s| s.rec.client != id);
            }
        }
        true
    }

    /// Every live record, framed, after the header.
    fn snapshot(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        let mut clients: Vec<_> = self.clients.values().collect();
        clients.sort_by_key(|c| c.id);
        for c in clients {
            frame(&mut out, &encode(&Record::Client(c.clone())));
        }
        let mut sessions: Vec<_> = self.sessions.values().collect();
        sessions.sort_by_key(|s| s.rec.id);
        for s in sessions {
            frame(&mut out, &encode(&Record::Session(s.rec.clone())));
            for l in s.slots.values() {
                if let Some(p) = &l.prev {
                    frame(&mut out, &encode(&Record::Slot(s.rec.id, p.clone())));
                }
                frame(&mut out, &encode(&Record::Slot(s.rec.id, l.latest.clone())));
            }
        }
        out
    }
}

struct Inner {
    live: Live,
    /// Compact once the file is this long.
    compact_at: u64,
}

/// The durable session store (see the module documentation).
pub struct SessionStore {
    log: Log,
    /// Taken before the log's own lock: a record is applied to `live` and appended in
    /// one step, so a snapshot stands for exactly the records appended before it.
    inner: Mutex<Inner>,
    pub stats: Arc<StoreStats>,
}

/// A record's position in the log; [`SessionStore::wait`] until it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[must_use]
pub struct Ticket(Lsn);

impl SessionStore {
    /// Whether `dir` holds a session store (a previous instance granted persistence).
    pub fn exists(dir: &Path) -> bool {
        dir.join(FILE_NAME).exists()
    }

    /// Opens (or creates) the store in `dir`, reading what the previous instance left:
    /// records of transactions in `rolled_back` are dropped, and the file is rewritten
    /// with the live records (durably) before this returns, so a second restart never
    /// sees the dropped ones again once recovery has forgotten them.
    pub fn open(dir: &Path, rolled_back: &HashSet<u64>) -> io::Result<(SessionStore, Restored)> {
        let path = dir.join(FILE_NAME);
        let mut live = Live::default();
        let mut dropped = 0;
        match fs::read(&path) {
            Ok(data) => {
                if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{} is not a txnfs session store; remove it to forget persistent sessions",
                            path.display()
                        ),
                    ));
                }
                // A record that frames but does not decode: the tail is unreadable.
                txnfs_wal::scan(&data, MAGIC.len(), |payload| match decode(payload) {
                    Ok(r) => {
                        if !live.apply(r, rolled_back) {
                            dropped += 1;
                        }
                        true
                    }
                    Err(_) => false,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Every transaction is resolved now: committed ones keep their replies, and
        // their earlier records are no longer needed.
        for s in live.sessions.values_mut() {
            for l in s.slots.values_mut() {
                l.latest.txn = 0;
                l.prev = None;
            }
        }
        let snapshot = live.snapshot();
        let log = Log::create(&path, &snapshot, Mode::Buffered)?;
        let restored = Restored {
            clients: live.clients.values().cloned().collect(),
            sessions: live
                .sessions
                .values()
                .map(|s| {
                    (
                        s.rec.clone(),
                        s.slots.values().map(|l| l.latest.d.clone()).collect(),
                    )
                })
                .collect(),
            rolled_back: dropped,
        };
        let size = snapshot.len() as u64;
        Ok((
            SessionStore {
                stats: log.stats().clone(),
                log,
                inner: Mutex::new(Inner {
                    live,
                    compact_at: COMPACT_MIN.max(2 * size),
                }),
            },
            restored,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, r: Record) -> Ticket {
        let payload = encode(&r);
        let mut g = self.lock();
        g.live.apply(r, &HashSet::new());
        // A log that failed refuses the record; waiting for it reports the failure.
        let lsn = self.log.append(&payload).unwrap_or(Lsn::NEVER);
        if self.log.len() >= g.compact_at {
            let snapshot = g.live.snapshot();
            g.compact_at = COMPACT_MIN.max(2 * snapshot.len() as u64);
            self.log.replace(snapshot);
        }
        Ticket(lsn)
    }

    /// A client that holds a persistent session (again after each CREATE_SESSION, for
    /// its sequence id).
    pub fn put_client(&self, c: DurableClient) -> Ticket {
        self.append(Record::Client(c))
    }

    /// A persistent session (again when BACKCHANNEL_CTL changes its callback).
    pub fn put_session(&self, s: DurableSession) -> Ticket {
        self.append(Record::Session(s))
    }

    /// The outcome of the request executed in `slot` of `session`: its sequence id,
    /// request hash and reply (`None`: not cached), tagged with its COMPOUND id when a
    /// transaction's (`txn`, else 0).
    pub fn put_slot(&self, session: SessionId, slot: DurableSlot, txn: u64) -> Ticket {
        self.append(Record::Slot(session, SlotRec { d: slot, txn }))
    }

    /// The transaction whose reply `slot` of `session` holds has ended (committed, or
    /// rolled back and its corrected reply stored): its previous record may go.
    pub fn settle(&self, session: &SessionId, slot: u32) {
        let mut g = self.lock();
        if let Some(l) = g
            .live
            .sessions
            .get_mut(session)
            .and_then(|s| s.slots.get_mut(&slot))
        {
            l.prev = None;
        }
    }

    /// Whether `session` is in the store.
    pub fn has_session(&self, session: &SessionId) -> bool {
        self.lock().live.sessions.contains_key(session)
    }

    /// Whether client `client` is in the store.
    pub fn has_client(&self, client: ClientId) -> bool {
        self.lock().live.clients.contains_key(&client)
    }

    /// The ids of the sessions and clients in the store (to compare with the core).
    pub fn ids(&self) -> (Vec<SessionId>, Vec<ClientId>) {
        let g = self.lock();
        (
            g.live.sessions.keys().copied().collect(),
            g.live.clients.keys().copied().collect(),
        )
    }

    /// DESTROY_SESSION, or the session's client went.
    pub fn drop_session(&self, id: SessionId) -> Ticket {
        self.append(Record::DropSession(id))
    }

    /// The client was destroyed, replaced or expired (its sessions go with it).
    pub fn drop_client(&self, id: ClientId) -> Ticket {
        self.append(Record::DropClient(id))
    }

    /// Makes every record appended so far durable: at a clean stop, so that the
    /// sessions and clients forgotten without waiting (DESTROY_SESSION,
    /// DESTROY_CLIENTID) stay forgotten after the restart.
    pub fn sync(&self) -> io::Result<()> {
        Ok(self.log.wait(self.log.end())?)
    }

    /// Returns once the record of `t` (and every earlier one) is durable: leads a
    /// group commit if none is running, else waits for the running one.
    pub fn wait(&self, t: Ticket) -> io::Result<()> {
        Ok(self.log.wait(t.0)?)
    }
}

// ---- encoding ------------------------------------------------------------------------

fn put_attrs(e: &mut Enc, a: &ChannelAttrs) {
    e.u32(a.max_request)
        .u32(a.max_response)
        .u32(a.max_response_cached)
        .u32(a.max_ops)
        .u32(a.max_requests);
}

fn get_attrs(d: &mut Dec) -> Result<ChannelAttrs, DecodeError> {
    Ok(ChannelAttrs {
        max_request: d.u32()?,
        max_response: d.u32()?,
        max_response_cached: d.u32()?,
        max_ops: d.u32()?,
        max_requests: d.u32()?,
    })
}

fn encode(r: &Record) -> Vec<u8> {
    let mut e = Enc::new();
    match r {
        Record::Client(c) => {
            e.u8(1).u64(c.id).bytes(&c.owner).fixed(&c.verifier);
            e.u32(c.principal.uid)
                .u32(c.principal.gid)
                .u32s(&c.principal.gids);
            e.u32(c.create_seq);
            match &c.last_create {
                None => {
                    e.u8(0);
                }
                Some((seq, o)) => {
                    e.u8(1).u32(*seq).fixed(&o.id).u32(o.seq).u32(o.flags);
                    put_attrs(&mut e, &o.fore);
                    put_attrs(&mut e, &o.back);
                }
            }
        }
        Record::Session(s) => {
            e.u8(2).fixed(&s.id).u64(s.client).u32(s.flags);
            put_attrs(&mut e, &s.fore);
            put_attrs(&mut e, &s.back);
            e.u32(s.callback.program);
            match &s.callback.sec {
                CallbackSec::None => {
                    e.u8(0);
                }
                CallbackSec::Sys {
                    stamp,
                    machine,
                    uid,
                    gid,
                    gids,
                } => {
                    e.u8(1)
                        .u32(*stamp)
                        .bytes(machine)
                        .u32(*uid)
                        .u32(*gid)
                        .u32s(gids);
                }
            }
        }
        Record::Slot(sid, rec) => {
            e.u8(3).fixed(sid);
            e.u32(rec.d.slot)
                .u32(rec.d.seqid)
                .u64(rec.d.request_hash)
                .u64(rec.txn);
            match &rec.d.reply {
                None => {
                    e.u8(0);
                }
                Some(r) => {
                    e.u8(1).bytes(r);
                }
            }
        }
        Record::DropSession(id) => {
            e.u8(4).fixed(id);
        }
        Record::DropClient(id) => {
            e.u8(5).u64(*id);
        }
    }
    e.into_vec()
}

fn decode(p: &[u8]) -> Result<Record, DecodeError> {
    let mut d = Dec::copy_from(p);
    let r = match d.u8()? {
        1 => {
            let id = d.u64()?;
            let owner = d.bytes()?;
            let verifier = d.fixed::<8>()?;
            let principal = Principal {
                uid: d.u32()?,
                gid: d.u32()?,
                gids: d.u32s()?,
            };
            let create_seq = d.u32()?;
            let last_create = match d.u8()? {
                0 => None,
                _ => Some((
                    d.u32()?,
                    CreateSessionOutcome {
                        id: d.fixed::<16>()?,
                        seq: d.u32()?,
                        flags: d.u32()?,
                        fore: get_attrs(&mut d)?,
                        back: get_attrs(&mut d)?,
                    },
                )),
            };
            Record::Client(DurableClient {
                id,
                owner,
                verifier,
                principal,
                create_seq,
                last_create,
            })
        }
        2 => {
            let id = d.fixed::<16>()?;
            let client = d.u64()?;
            let flags = d.u32()?;
            let fore = get_attrs(&mut d)?;
            let back = get_attrs(&mut d)?;
            let program = d.u32()?;
            let sec = match d.u8()? {
                0 => CallbackSec::None,
                _ => CallbackSec::Sys {
                    stamp: d.u32()?,
                    machine: d.bytes()?,
                    uid: d.u32()?,
                    gid: d.u32()?,
                    gids: d.u32s()?,
                },
            };
            Record::Session(DurableSession {
                id,
                client,
                flags,
                fore,
                back,
                callback: CallbackParams { program, sec },
            })
        }
        3 => {
            let sid = d.fixed::<16>()?;
            let slot = d.u32()?;
            let seqid = d.u32()?;
            let request_hash = d.u64()?;
            let txn = d.u64()?;
            let reply = match d.u8()? {
                0 => None,
                _ => Some(d.bytes()?),
            };
            Record::Slot(
                sid,
                SlotRec {
                    d: DurableSlot {
                        slot,
                        seqid,
                        request_hash,
                        reply,
                    },
                    txn,
                },
            )
        }
        4 => Record::DropSession(d.fixed::<16>()?),
        5 => Record::DropClient(d.u64()?),
        tag => {
            return Err(DecodeError::Tag {
                what: "session store record",
                tag,
            })
        }
    };
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("txnfs-sstore-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn attrs(n: u32) -> ChannelAttrs {
        ChannelAttrs {
            max_request: 1 << 20,
            max_response: 1 << 20,
            max_response_cached: 64 << 10,
            max_ops: 100,
            max_requests: n,
        }
    }

    fn client(id: ClientId) -> DurableClient {
        DurableClient {
            id,
            owner: Bytes::from(format!("owner-{id}")),
            verifier: [7; 8],
            principal: Principal {
                uid: 1,
                gid: 2,
                gids: vec![3, 4],
            },
            create_seq: 2,
            last_create: Some((
                1,
                CreateSessionOutcome {
                    id: [9; 16],
                    seq: 1,
                    flags: 3,
                    fore: attrs(8),
                    back: attrs(1),
                },
            )),
        }
    }

    fn session(id: u8, client: ClientId) -> DurableSession {
        DurableSession {
            id: [id; 16],
            client,
            flags: 3,
            fore: attrs(8),
            back: attrs(1),
            callback: CallbackParams {
                program: 0x4000_0000,
                sec: CallbackSec::Sys {
                    stamp: 5,
                    machine: Bytes::from_static(b"m"),
                    uid: 0,
                    gid: 0,
                    gids: vec![10],
                },
            },
        }
    }

    fn slot(slot: u32, seqid: u32, reply: &'static [u8]) -> DurableSlot {
        DurableSlot {
            slot,
            seqid,
            request_hash: u64::from(seqid) * 31,
            reply: Some(Bytes::from_static(reply)),
        }
    }

    fn reopen(d: &Path, rolled: &[u64]) -> Restored {
        SessionStore::open(d, &rolled.iter().copied().collect())
            .unwrap()
            .1
    }

    #[test]
    fn records_survive_a_reopen_and_drops_remove_them() {
        let d = dir("roundtrip");
        let (s, r) = SessionStore::open(&d, &HashSet::new()).unwrap();
        assert!(r.clients.is_empty() && r.sessions.is_empty());
        let _ = s.put_client(client(1));
        let _ = s.put_session(session(1, 1));
        let _ = s.put_slot([1; 16], slot(0, 1, b"one"), 0);
        let _ = s.put_slot([1; 16], slot(0, 2, b"two"), 0);
        let _ = s.put_client(client(2));
        let _ = s.put_session(session(2, 2));
        let t = s.put_slot(
            [2; 16],
            DurableSlot {
                reply: None,
                ..slot(3, 1, b"")
            },
            0,
        );
        s.wait(t).unwrap();
        drop(s);
        let r = reopen(&d, &[]);
        assert_eq!(r.clients.len(), 2);
        let mut sessions = r.sessions;
        sessions.sort_by_key(|(s, _)| s.id);
        assert_eq!(sessions[0].0, session(1, 1));
        assert_eq!(sessions[0].1, vec![slot(0, 2, b"two")]);
        assert_eq!(sessions[1].1[0].reply, None);
        assert!(r.clients.contains(&client(1)));
        let (s, _) = SessionStore::open(&d, &HashSet::new()).unwrap();
        let _ = s.drop_session([1; 16]);
        let t = s.drop_client(2);
        s.wait(t).unwrap();
        drop(s);
        let r = reopen(&d, &[]);
        assert_eq!(r.clients.len(), 1, "client 1 stays, client 2 went");
        assert!(
            r.sessions.is_empty(),
            "session 1 destroyed, session 2 with its client"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_torn_tail_is_ignored() {
        let d = dir("torn");
        let (s, _) = SessionStore::open(&d, &HashSet::new()).unwrap();
        let _ = s.put_client(client(1));
        let _ = s.put_session(session(1, 1));
        let t = s.put_slot([1; 16], slot(0, 1, b"one"), 0);
        s.wait(t).unwrap();
        let t = s.put_slot([1; 16], slot(0, 2, b"two-is-longer"), 0);
        s.wait(t).unwrap();
        drop(s);
        let p = d.join(FILE_NAME);
        let len = fs::metadata(&p).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let r = reopen(&d, &[]);
        assert_eq!(r.sessions[0].1, vec![slot(0, 1, b"one")]);
        fs::remove_dir_all(&d).unwrap();
    }

    /// A transaction's reply stored before its commit is dropped when recovery rolled
    /// the transaction back: the slot is back at its previous record, even after a
    /// compaction ran between the store and the crash.
    #[test]
    fn replies_of_rolled_back_transactions_are_dropped() {
        for compact in [false, true] {
            let d = dir(&format!("rolled-{compact}"));
            let (s, _) = SessionStore::open(&d, &HashSet::new()).unwrap();
            let _ = s.put_client(client(1));
            let _ = s.put_session(session(1, 1));
            let _ = s.put_slot([1; 16], slot(0, 1, b"plain"), 0);
            let _ = s.put_slot([1; 16], slot(1, 1, b"committed"), 41);
            s.settle(&[1; 16], 1);
            if compact {
                s.lock().compact_at = 0;
            }
            let t = s.put_slot([1; 16], slot(0, 2, b"txn"), 42);
            s.wait(t).unwrap();
            assert_eq!(s.stats.rewrites.load(Ordering::Relaxed), u64::from(compact));
            drop(s);
            let r = reopen(&d, &[42]);
            assert_eq!(
                r.sessions[0].1,
                vec![slot(0, 1, b"plain"), slot(1, 1, b"committed")],
                "compaction {compact}"
            );
            // The open rewrote the file: a second restart (recovery has forgotten
            // transaction 42) sees the same.
            let r = reopen(&d, &[]);
            assert_eq!(r.sessions[0].1[0], slot(0, 1, b"plain"));
            fs::remove_dir_all(&d).unwrap();
        }
    }

    /// Concurrent writers share syncs (group commit) and all their records are there.
    #[test]
    fn concurrent_writers_share_syncs() {
        let d = dir("group");
        let (s, _) = SessionStore::open(&d, &HashSet::new()).unwrap();
        let s = std::sync::Arc::new(s);
        let _ = s.put_client(client(1));
        for i in 0..8u8 {
            let _ = s.put_session(session(i, 1));
        }
        let threads: Vec<_> = (0..8u8)
            .map(|i| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for seq in 1..=50 {
                        let t = s.put_slot([i; 16], slot(0, seq, b"r"), 0);
                        s.wait(t).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let syncs = s.stats.syncs.load(Ordering::Relaxed);
        assert!(syncs <= 400, "{syncs} syncs");
        drop(s);
        let r = reopen(&d, &[]);
        assert_eq!(r.sessions.len(), 8);
        assert!(r.sessions.iter().all(|(_, sl)| sl[0].seqid == 50));
        fs::remove_dir_all(&d).unwrap();
    }

    /// The bytes of a hex string (golden files in tests).
    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A store written by the code before the shared durable log (made by an
    /// independent encoder of the format): a client, its session, two records of slot 0
    /// and a torn record.
    const GOLDEN_S01: &str = concat!(
        "54584e46535330310000007987ecd36d3fb76088010000000000000001000000076f776e65722d31",
        "07070707070707070000000100000002000000020000000300000004000000020100000001090909",
        "09090909090909090909090909000000010000000300100000001000000001000000000064000000",
        "08001000000010000000010000000000640000000100000063f2b239200c126c5f02010101010101",
        "01010101010101010101000000000000000100000003001000000010000000010000000000640000",
        "00080010000000100000000100000000006400000001400000000100000005000000016d00000000",
        "00000000000000010000000a000000318832370cfb8a569603010101010101010101010101010101",
        "010000000000000001000000000000001f000000000000000001000000036f6e65000000314726c2",
        "3012ddcc1e03010101010101010101010101010101010000000000000002000000000000003e0000",
        "000000000000010000000374776f0000001000",
    );

    #[test]
    fn a_store_of_the_same_format_written_before_reads_the_same() {
        let d = dir("golden");
        fs::write(d.join(FILE_NAME), unhex(GOLDEN_S01)).unwrap();
        let r = reopen(&d, &[]);
        assert_eq!(r.clients, vec![client(1)]);
        assert_eq!(r.sessions, vec![(session(1, 1), vec![slot(0, 2, b"two")])]);
        fs::remove_dir_all(&d).unwrap();
    }
}
