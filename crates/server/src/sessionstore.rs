//! The durable session store (ADR 0022): persistent sessions
//! (CREATE_SESSION4_FLAG_PERSIST, RFC 8881 §2.10.6.5), their clients and, per slot, the
//! last sequence id with its cached reply, so that a client retrying on its old
//! session after a restart gets the original reply instead of a second execution.
//!
//! One append-only file, `<state_dir>/sessions.log`: a header (magic) and records
//! `[len u32][checksum u64][payload]`. A record is appended to a buffer under a mutex
//! and gets a ticket; [`SessionStore::wait`] returns once the ticket is durable. The
//! first waiter to find nothing being flushed becomes the leader: it writes the
//! buffer and `fdatasync`s it while the others wait on a condition variable, so
//! concurrent requests share one sync (group commit). A torn or corrupt tail is
//! ignored when the file is read (the records before it stand).
//!
//! The store keeps the live records in memory (a reply is the same `Bytes` the slot's
//! cache holds, so that costs no copy). When the file has grown to twice its size at
//! the last compaction (at least [`COMPACT_MIN`]), the leader rewrites it with the
//! live records only (temporary file, fsync, rename, fsync of the directory).
//!
//! Transactions: a transactional COMPOUND's reply is stored, tagged with its COMPOUND
//! id, before the transaction commits. The slot's previous record is kept beside it
//! until [`SessionStore::settle`] says the transaction ended, so a compaction in
//! between still has it. When the server starts, records tagged with a COMPOUND that
//! recovery rolled back are skipped: that slot is back at its previous record and the
//! client's retry executes (the transaction never happened).

use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use txnfs_state::session::{
    CallbackParams, CallbackSec, ChannelAttrs, CreateSessionOutcome, DurableClient, DurableSession,
    DurableSlot, Principal, SessionId,
};
use txnfs_state::ClientId;

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

/// Counters (for the ADR's measurements and tests).
#[derive(Debug, Default)]
pub struct StoreStats {
    pub records: AtomicU64,
    pub syncs: AtomicU64,
    pub compactions: AtomicU64,
}

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
    file: File,
    live: Live,
    /// Framed records appended and not yet written.
    buf: Vec<u8>,
    /// Ticket of the last record appended.
    appended: u64,
    /// Every ticket up to this one is durable.
    durable: u64,
    /// A leader is writing and syncing.
    flushing: bool,
    /// Bytes in the file plus `buf`.
    size: u64,
    compact_at: u64,
    /// A write or sync failed: nothing later can be promised durable.
    failed: Option<String>,
}

/// The durable session store (see the module documentation).
pub struct SessionStore {
    path: PathBuf,
    inner: Mutex<Inner>,
    flushed: Condvar,
    pub stats: StoreStats,
}

/// A record's position in the log; [`SessionStore::wait`] until it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[must_use]
pub struct Ticket(u64);

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
                let mut at = MAGIC.len();
                while let Some((payload, next)) = unframe(&data, at) {
                    // A record that frames but does not decode: the tail is unreadable.
                    let Some(r) = decode(payload) else { break };
                    if !live.apply(r, rolled_back) {
                        dropped += 1;
                    }
                    at = next;
                }
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
        let file = rewrite(&path, &snapshot)?;
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
                path,
                inner: Mutex::new(Inner {
                    file,
                    live,
                    buf: Vec::new(),
                    appended: 0,
                    durable: 0,
                    flushing: false,
                    size,
                    compact_at: COMPACT_MIN.max(2 * size),
                    failed: None,
                }),
                flushed: Condvar::new(),
                stats: StoreStats::default(),
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
        let skip = HashSet::new();
        g.live.apply(r, &skip);
        let before = g.buf.len();
        frame(&mut g.buf, &payload);
        g.size += (g.buf.len() - before) as u64;
        g.appended += 1;
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        Ticket(g.appended)
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

    /// Returns once the record of `t` (and every earlier one) is durable: leads a
    /// group commit if none is running, else waits for the running one.
    pub fn wait(&self, t: Ticket) -> io::Result<()> {
        let mut g = self.lock();
        loop {
            if let Some(e) = &g.failed {
                return Err(io::Error::other(format!(
                    "session store failed earlier: {e}"
                )));
            }
            if g.durable >= t.0 {
                return Ok(());
            }
            if g.flushing {
                g = self.flushed.wait(g).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            g.flushing = true;
            let upto = g.appended;
            let buf = std::mem::take(&mut g.buf);
            let compact = g.size >= g.compact_at;
            let snapshot = compact.then(|| g.live.snapshot());
            let file = g.file.try_clone();
            drop(g);
            let result = match (snapshot, file) {
                (Some(s), _) => rewrite(&self.path, &s).map(|f| Some((f, s.len() as u64))),
                (None, Ok(mut f)) => f
                    .write_all(&buf)
                    .and_then(|()| f.sync_data())
                    .map(|()| None),
                (None, Err(e)) => Err(e),
            };
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
            g = self.lock();
            g.flushing = false;
            match result {
                Ok(Some((f, size))) => {
                    self.stats.compactions.fetch_add(1, Ordering::Relaxed);
                    g.file = f;
                    // Records appended meanwhile are in `buf`, after the snapshot.
                    g.size = size + g.buf.len() as u64;
                    g.compact_at = COMPACT_MIN.max(2 * size);
                    g.durable = upto;
                }
                Ok(None) => g.durable = upto,
                Err(e) => {
                    tracing::error!(
                        "session store {}: {e}: persistent sessions lose their replies",
                        self.path.display()
                    );
                    g.failed = Some(e.to_string());
                }
            }
            self.flushed.notify_all();
        }
    }
}

/// Writes `data` as the whole file at `path` (temporary file, fsync, rename, fsync of
/// the directory) and returns it opened for appending.
fn rewrite(path: &Path, data: &[u8]) -> io::Result<File> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        File::open(parent)?.sync_all()?;
    }
    fs::OpenOptions::new().append(true).open(path)
}

fn checksum(b: &[u8]) -> u64 {
    // FNV-1a, as the txn journal: detects torn and corrupt records.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&checksum(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// The record at `at`: its payload and where the next starts; `None` at the end or at
/// a torn or corrupt record.
fn unframe(data: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let head = data.get(at..at + 12)?;
    let len = u32::from_be_bytes(head[..4].try_into().ok()?) as usize;
    let sum = u64::from_be_bytes(head[4..].try_into().ok()?);
    let payload = data.get(at + 12..at + 12 + len)?;
    (checksum(payload) == sum).then_some((payload, at + 12 + len))
}

// ---- encoding ------------------------------------------------------------------------

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_u32(v.len() as u32);
    b.put_slice(v);
}

fn put_attrs(b: &mut BytesMut, a: &ChannelAttrs) {
    for v in [
        a.max_request,
        a.max_response,
        a.max_response_cached,
        a.max_ops,
        a.max_requests,
    ] {
        b.put_u32(v);
    }
}

fn put_gids(b: &mut BytesMut, gids: &[u32]) {
    b.put_u32(gids.len() as u32);
    for g in gids {
        b.put_u32(*g);
    }
}

fn encode(r: &Record) -> Vec<u8> {
    let mut b = BytesMut::with_capacity(64);
    match r {
        Record::Client(c) => {
            b.put_u8(1);
            b.put_u64(c.id);
            put_bytes(&mut b, &c.owner);
            b.put_slice(&c.verifier);
            b.put_u32(c.principal.uid);
            b.put_u32(c.principal.gid);
            put_gids(&mut b, &c.principal.gids);
            b.put_u32(c.create_seq);
            match &c.last_create {
                None => b.put_u8(0),
                Some((seq, o)) => {
                    b.put_u8(1);
                    b.put_u32(*seq);
                    b.put_slice(&o.id);
                    b.put_u32(o.seq);
                    b.put_u32(o.flags);
                    put_attrs(&mut b, &o.fore);
                    put_attrs(&mut b, &o.back);
                }
            }
        }
        Record::Session(s) => {
            b.put_u8(2);
            b.put_slice(&s.id);
            b.put_u64(s.client);
            b.put_u32(s.flags);
            put_attrs(&mut b, &s.fore);
            put_attrs(&mut b, &s.back);
            b.put_u32(s.callback.program);
            match &s.callback.sec {
                CallbackSec::None => b.put_u8(0),
                CallbackSec::Sys {
                    stamp,
                    machine,
                    uid,
                    gid,
                    gids,
                } => {
                    b.put_u8(1);
                    b.put_u32(*stamp);
                    put_bytes(&mut b, machine);
                    b.put_u32(*uid);
                    b.put_u32(*gid);
                    put_gids(&mut b, gids);
                }
            }
        }
        Record::Slot(sid, rec) => {
            b.put_u8(3);
            b.put_slice(sid);
            b.put_u32(rec.d.slot);
            b.put_u32(rec.d.seqid);
            b.put_u64(rec.d.request_hash);
            b.put_u64(rec.txn);
            match &rec.d.reply {
                None => b.put_u8(0),
                Some(r) => {
                    b.put_u8(1);
                    put_bytes(&mut b, r);
                }
            }
        }
        Record::DropSession(id) => {
            b.put_u8(4);
            b.put_slice(id);
        }
        Record::DropClient(id) => {
            b.put_u8(5);
            b.put_u64(*id);
        }
    }
    b.to_vec()
}

struct Cur<'a>(&'a [u8]);

impl Cur<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let n = self.u32()? as usize;
        Some(Bytes::copy_from_slice(self.take(n)?))
    }
    fn gids(&mut self) -> Option<Vec<u32>> {
        let n = self.u32()? as usize;
        if n > self.0.len() / 4 {
            return None;
        }
        (0..n).map(|_| self.u32()).collect()
    }
    fn attrs(&mut self) -> Option<ChannelAttrs> {
        Some(ChannelAttrs {
            max_request: self.u32()?,
            max_response: self.u32()?,
            max_response_cached: self.u32()?,
            max_ops: self.u32()?,
            max_requests: self.u32()?,
        })
    }
}

fn decode(p: &[u8]) -> Option<Record> {
    let mut c = Cur(p);
    let r = match c.u8()? {
        1 => {
            let id = c.u64()?;
            let owner = c.bytes()?;
            let verifier = c.arr::<8>()?;
            let principal = Principal {
                uid: c.u32()?,
                gid: c.u32()?,
                gids: c.gids()?,
            };
            let create_seq = c.u32()?;
            let last_create = match c.u8()? {
                0 => None,
                _ => Some((
                    c.u32()?,
                    CreateSessionOutcome {
                        id: c.arr::<16>()?,
                        seq: c.u32()?,
                        flags: c.u32()?,
                        fore: c.attrs()?,
                        back: c.attrs()?,
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
            let id = c.arr::<16>()?;
            let client = c.u64()?;
            let flags = c.u32()?;
            let fore = c.attrs()?;
            let back = c.attrs()?;
            let program = c.u32()?;
            let sec = match c.u8()? {
                0 => CallbackSec::None,
                _ => CallbackSec::Sys {
                    stamp: c.u32()?,
                    machine: c.bytes()?,
                    uid: c.u32()?,
                    gid: c.u32()?,
                    gids: c.gids()?,
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
            let sid = c.arr::<16>()?;
            let slot = c.u32()?;
            let seqid = c.u32()?;
            let request_hash = c.u64()?;
            let txn = c.u64()?;
            let reply = match c.u8()? {
                0 => None,
                _ => Some(c.bytes()?),
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
        4 => Record::DropSession(c.arr::<16>()?),
        5 => Record::DropClient(c.u64()?),
        _ => return None,
    };
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let t = s.put_slot([1; 16], slot(0, 2, b"txn"), 42);
            if compact {
                s.lock().compact_at = 0;
            }
            s.wait(t).unwrap();
            assert_eq!(
                s.stats.compactions.load(Ordering::Relaxed),
                u64::from(compact)
            );
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
}
