//! The `txn` layer's write-ahead journal (ADR 0021): one append-only file per export.
//!
//! Every undo entry is appended (a `write`, no fsync) *before* the change it undoes, so
//! after a `kill -9` the page cache holds every entry of every change made. A
//! transaction ends with a `Commit` or `Aborted` record, and the transaction's locks are
//! released only once that record is on stable storage. Concurrent transactions share
//! those fsyncs (group commit: one `fdatasync` covers every record written before it).
//!
//! Layout: a header (magic, generation, the identity of the export it protects) and
//! records framed by the durable log (`txnfs_wal`: `[len u32][checksum u64][payload]`),
//! payload = `[generation u64][txid u64][kind u8][entry]`. Reading stops at the first
//! record that is torn, fails its checksum, or carries another generation, and the
//! file is cut there. When no transaction is open the journal is rewound (the header
//! rewritten with the next generation and appends restart after it), and the older
//! records that remain past the new end are ignored that way.
//!
//! The header names the export the journal protects (`[len u32][identity]` after the
//! generation; ADR 0023): a journal whose identity is not the opener's is refused, never
//! applied. Journals of the first format (`TXNFSJ01`, no identity) are accepted only when
//! they hold no unfinished transaction.

use std::io;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use txnfs_wal::{Dec, Enc, Log, Lsn, Mode};

use super::undo::Undo;

const MAGIC: &[u8; 8] = b"TXNFSJ02";
/// The first format: no identity in the header.
const MAGIC_V1: &[u8; 8] = b"TXNFSJ01";
const HEADER_V1_LEN: u64 = 16;
/// Rewind once the journal is this long and no transaction is open. Past it, a new
/// transaction waits (at most [`DRAIN_WAIT`]) for the open ones to end, so the journal
/// is rewound under a steady load too (without that it grew without bound while some
/// transaction was always open: 66 MB in 5 s with 8 writers of small files).
const REWIND_AT: u64 = 32 << 20;
/// How long a new transaction waits for the open ones to end before the journal is
/// rewound. When that is not enough (a transaction open across COMPOUNDs, a rollback
/// that keeps failing), the journal grows on, and new transactions wait again only
/// once it has grown by another [`REWIND_AT`].
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The transaction's first record: the COMPOUND it runs for (the server makes
    /// COMPOUND ids unique across restarts, so it can tell which replies belong to
    /// transactions recovery rolled back).
    Begin { compound: u64 },
    /// How to undo one change of transaction `txid` (written before the change).
    Undo(Undo),
    /// The transaction committed: its changes stay, its backups may go.
    Commit,
    /// The transaction was rolled back completely.
    Aborted,
    /// One more of the transaction's undo entries (counting from its last) has been
    /// applied: a rollback cut short carries on after it, never redoing older steps,
    /// whose effects later steps may have built on.
    Undone,
}

/// A transaction's records as found by [`Journal::open`].
#[derive(Debug, Default)]
pub struct Found {
    pub txid: u64,
    /// The COMPOUND of the transaction (0 if its `Begin` was not found).
    pub compound: u64,
    pub undo: Vec<Undo>,
    pub committed: bool,
    pub aborted: bool,
    /// How many of the last undo entries were applied already.
    pub undone: usize,
}

/// Why a journal is not opened.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(
        "{}: this journal protects another export ({}), not this one ({}); it is not \
         applied here. Serve that directory with this state directory to recover it, or \
         move the file aside",
        path.display(),
        String::from_utf8_lossy(recorded),
        String::from_utf8_lossy(ours)
    )]
    Foreign {
        path: std::path::PathBuf,
        recorded: Vec<u8>,
        ours: Vec<u8>,
    },
    #[error(
        "{}: a journal of an older txnfs, which does not record the directory it protects, \
         holds {unfinished} unfinished transaction(s); it is not applied to a directory it \
         may not belong to. Roll it back with the txnfs version that wrote it (serving the \
         directory it was written for), or move the file aside to discard it (the \
         transactions' partial changes then stay)",
        path.display()
    )]
    Legacy {
        path: std::path::PathBuf,
        unfinished: usize,
    },
    #[error("{}: {err}", path.display())]
    Io {
        path: std::path::PathBuf,
        err: io::Error,
    },
}

/// What a journal file holds, read without opening it for use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSummary {
    /// The identity of the export it protects; `None` for the first format.
    pub identity: Option<Vec<u8>>,
    /// Transactions with neither a `Commit` nor an `Aborted` record.
    pub unfinished: usize,
}

/// Reads the journal at `path` (either format) and says what it holds.
pub fn inspect(path: &Path) -> io::Result<JournalSummary> {
    let buf = std::fs::read(path)?;
    let h = header(&buf);
    let (_, found, _) = parse(&buf, &h);
    Ok(JournalSummary {
        identity: h.identity,
        unfinished: found.iter().filter(|f| !f.committed && !f.aborted).count(),
    })
}

struct Inner {
    /// The header: magic, generation placeholder, identity (rewritten on every rewind).
    head: Vec<u8>,
    generation: u64,
    /// Transactions that wrote a record and have not yet synced their last one.
    open: usize,
    /// Where the journal stood when a wait for the open transactions to end gave up.
    drain_gave_up_at: u64,
}

pub struct Journal {
    inner: Mutex<Inner>,
    /// Notified when the last open transaction ends.
    drained: Condvar,
    /// The records, written through (in the page cache before the change they undo);
    /// in memory for exports without a state directory, which need no durability
    /// because nothing they protect survives the process either.
    log: Log,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Journal {
    /// A journal that lives in memory only.
    pub fn in_memory() -> Self {
        let head = header_bytes(b"");
        let log = Log::in_memory(head.len() as u64);
        Self::with(log, head, 1)
    }

    fn with(log: Log, head: Vec<u8>, generation: u64) -> Self {
        Journal {
            inner: Mutex::new(Inner {
                head,
                generation,
                open: 0,
                drain_gave_up_at: 0,
            }),
            drained: Condvar::new(),
            log,
        }
    }

    /// Opens (or creates) the journal at `path` for the export `identity` and returns
    /// the transactions it holds, oldest first. The caller recovers them, then calls
    /// [`Journal::rewind`] (which writes the header with `identity`). A journal of
    /// another export is refused ([`JournalError::Foreign`]), and so is one of the first
    /// format that holds unfinished transactions ([`JournalError::Legacy`]).
    pub fn open(path: &Path, identity: &[u8]) -> Result<(Journal, Vec<Found>), JournalError> {
        let io_err = |err| JournalError::Io {
            path: path.to_path_buf(),
            err,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        let buf = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(e)),
        };
        let h = header(&buf);
        let (generation, mut found, mut end) = parse(&buf, &h);
        match &h.identity {
            Some(id) if id.as_slice() != identity => {
                return Err(JournalError::Foreign {
                    path: path.to_path_buf(),
                    recorded: id.clone(),
                    ours: identity.to_vec(),
                })
            }
            Some(_) => {}
            None if h.v1 => {
                let unfinished = found.iter().filter(|f| !f.committed && !f.aborted).count();
                if unfinished > 0 {
                    return Err(JournalError::Legacy {
                        path: path.to_path_buf(),
                        unfinished,
                    });
                }
                // Nothing to recover: it is rewritten in the current format.
                found.clear();
            }
            None => {}
        }
        let head = header_bytes(identity);
        if h.identity.is_none() {
            // New (or of the first format): records go after our header.
            end = head.len() as u64;
        }
        // A torn or stale tail of our own format is cut off; a file of another format
        // is left whole until the rewind writes our header over it.
        let log = Log::open(path, end, h.identity.is_some(), Mode::WriteThrough).map_err(|e| {
            JournalError::Io {
                path: path.to_path_buf(),
                err: e.into(),
            }
        })?;
        Ok((Journal::with(log, head, generation), found))
    }

    /// Starts a new generation at the head of the file (durably): the records before
    /// are forgotten. Only when no transaction is open.
    pub fn rewind(&self) -> io::Result<()> {
        let mut inner = lock(&self.inner);
        self.rewind_locked(&mut inner)
    }

    fn rewind_locked(&self, inner: &mut Inner) -> io::Result<()> {
        debug_assert_eq!(inner.open, 0);
        inner.generation += 1;
        let generation = inner.generation.to_be_bytes();
        inner.head[8..16].copy_from_slice(&generation);
        self.log.restart(&inner.head)?;
        Ok(())
    }

    /// Appends one record of `txid` (`first`: its first record, which opens it) and
    /// returns the position its durability must reach.
    pub fn append(&self, txid: u64, rec: &Record, first: bool) -> io::Result<Lsn> {
        let mut inner = lock(&self.inner);
        if first && self.log.len() >= REWIND_AT.max(inner.drain_gave_up_at + REWIND_AT) {
            inner = self.drain(inner)?;
        }
        let mut e = Enc::new();
        e.u64(inner.generation).u64(txid);
        match rec {
            Record::Undo(u) => {
                e.u8(0);
                u.encode(&mut e);
            }
            Record::Commit => {
                e.u8(1);
            }
            Record::Aborted => {
                e.u8(2);
            }
            Record::Undone => {
                e.u8(3);
            }
            Record::Begin { compound } => {
                e.u8(4).u64(*compound);
            }
        }
        let lsn = self.log.append(e.as_slice())?;
        if first {
            inner.open += 1;
        }
        Ok(lsn)
    }

    /// Its counters (`txnfs stats`).
    pub fn stats(&self) -> crate::JournalStats {
        let st = self.log.stats();
        crate::JournalStats {
            appended_bytes: st.bytes.load(std::sync::atomic::Ordering::Relaxed),
            records: st.records.load(std::sync::atomic::Ordering::Relaxed),
            size: self.log.len(),
        }
    }

    /// Waits until the record at `lsn` and every earlier one is on stable storage; one
    /// caller at a time runs the fdatasync, the others wait for it and usually find
    /// their records covered (group commit).
    pub fn sync_to(&self, lsn: Lsn) -> io::Result<()> {
        Ok(self.log.wait(lsn)?)
    }

    /// A transaction's last record is durable: it is no longer open. Rewinds the
    /// journal when it has grown long and nothing is open.
    pub fn close_txn(&self) {
        let mut inner = lock(&self.inner);
        inner.open = inner.open.saturating_sub(1);
        if inner.open == 0 {
            if self.log.len() >= REWIND_AT {
                if let Err(e) = self.rewind_locked(&mut inner) {
                    tracing::warn!("txn journal: rewind failed ({e}); it keeps growing");
                }
            }
            self.drained.notify_all();
        }
    }

    /// The journal is long: waits (at most [`DRAIN_WAIT`]) until no transaction is
    /// open, then rewinds it. The caller may hold locks of its transaction: an open
    /// transaction that needs them gives up at once (NFS4ERR_DELAY) and ends, so the
    /// wait cannot deadlock; the bound covers what ends only later.
    fn drain<'a>(&self, mut inner: MutexGuard<'a, Inner>) -> io::Result<MutexGuard<'a, Inner>> {
        let deadline = std::time::Instant::now() + DRAIN_WAIT;
        while inner.open > 0 && self.log.len() >= REWIND_AT {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::info!(
                    open = inner.open,
                    bytes = self.log.len(),
                    "txn journal: transactions stay open; not rewound yet"
                );
                inner.drain_gave_up_at = self.log.len();
                return Ok(inner);
            }
            inner = self
                .drained
                .wait_timeout(inner, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if inner.open == 0 && self.log.len() >= REWIND_AT {
            self.rewind_locked(&mut inner)?;
        }
        inner.drain_gave_up_at = 0;
        Ok(inner)
    }
}

/// The header `identity` gets (its generation is set on every rewind).
fn header_bytes(identity: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(20 + identity.len());
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&0u64.to_be_bytes());
    h.extend_from_slice(&(identity.len() as u32).to_be_bytes());
    h.extend_from_slice(identity);
    h
}

/// A journal file's header as found.
struct Header {
    /// Where the records start; 0: no valid header (a new or unreadable journal).
    len: u64,
    generation: u64,
    /// The export it protects (current format only).
    identity: Option<Vec<u8>>,
    /// Of the first format (no identity).
    v1: bool,
}

fn header(buf: &[u8]) -> Header {
    let none = Header {
        len: 0,
        generation: 0,
        identity: None,
        v1: false,
    };
    let generation = |b: &[u8]| u64::from_be_bytes(b[8..16].try_into().unwrap_or_default());
    match buf.get(..8) {
        Some(m) if m == MAGIC_V1 && buf.len() >= HEADER_V1_LEN as usize => Header {
            len: HEADER_V1_LEN,
            generation: generation(buf),
            identity: None,
            v1: true,
        },
        Some(m) if m == MAGIC => {
            let Some(n) = buf.get(16..20) else {
                return none;
            };
            let n = u32::from_be_bytes(n.try_into().unwrap_or_default()) as usize;
            match buf.get(20..20 + n) {
                Some(id) => Header {
                    len: 20 + n as u64,
                    generation: generation(buf),
                    identity: Some(id.to_vec()),
                    v1: false,
                },
                None => none,
            }
        }
        _ => none,
    }
}

/// The generation, the transactions and the end of the valid records in `buf`, whose
/// header is `h`.
fn parse(buf: &[u8], h: &Header) -> (u64, Vec<Found>, u64) {
    if h.len == 0 {
        return (0, Vec::new(), 0);
    }
    let mut found: Vec<Found> = Vec::new();
    let scan = txnfs_wal::scan(buf, h.len as usize, |payload| {
        note(&mut found, h.generation, payload).is_some()
    });
    (h.generation, found, scan.end)
}

/// Adds the record `payload` to the transactions in `found`; `None` ends the valid
/// records (a record of another generation, or one that does not decode).
fn note(found: &mut Vec<Found>, generation: u64, payload: &[u8]) -> Option<()> {
    let mut d = Dec::copy_from(payload);
    if d.u64().ok()? != generation {
        return None;
    }
    let txid = d.u64().ok()?;
    let kind = d.u8().ok()?;
    let i = match found.iter().position(|f| f.txid == txid) {
        Some(i) => i,
        None => {
            found.push(Found {
                txid,
                ..Found::default()
            });
            found.len() - 1
        }
    };
    match kind {
        0 => found[i].undo.push(Undo::decode(&mut d).ok()?),
        1 => found[i].committed = true,
        2 => found[i].aborted = true,
        3 => found[i].undone += 1,
        4 => found[i].compound = d.u64().ok()?,
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;

    fn undo(n: u8) -> Undo {
        Undo::Unlink {
            dir: Bytes::from(vec![n]),
            name: Bytes::from_static(b"x"),
        }
    }

    /// Grows the journal past [`REWIND_AT`] with records of open transaction `txid`.
    fn fill(j: &Journal, txid: u64) {
        let big = Undo::Data {
            key: Bytes::from_static(b"k"),
            offset: 0,
            saved: super::super::undo::Saved::Inline(Bytes::from(vec![0u8; 1 << 20])),
            old_size: 0,
            atime: Default::default(),
            mtime: Default::default(),
        };
        while j.log.len() < REWIND_AT {
            j.append(txid, &Record::Undo(big.clone()), false).unwrap();
        }
    }

    #[test]
    fn a_long_journal_is_rewound_under_steady_load() {
        let j = Arc::new(Journal::in_memory());
        j.append(1, &Record::Undo(undo(1)), true).unwrap();
        fill(&j, 1);
        // A new transaction waits for the open one to end, then starts a rewound journal.
        let j2 = j.clone();
        let waiter = std::thread::spawn(move || j2.append(2, &Record::Undo(undo(2)), true));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !waiter.is_finished(),
            "the new transaction waits for the drain"
        );
        let end = j.append(1, &Record::Commit, false).unwrap();
        j.sync_to(end).unwrap();
        j.close_txn();
        waiter.join().unwrap().unwrap();
        let len = j.log.len();
        assert!(
            len < 1024,
            "rewound before the new transaction's first record: {len}"
        );
        assert_eq!(lock(&j.inner).open, 1);
    }

    #[test]
    fn a_transaction_that_stays_open_delays_new_ones_once_not_forever() {
        let j = Journal::in_memory();
        j.append(1, &Record::Undo(undo(1)), true).unwrap();
        fill(&j, 1);
        let t = std::time::Instant::now();
        j.append(2, &Record::Undo(undo(2)), true).unwrap();
        assert!(t.elapsed() >= DRAIN_WAIT, "waited for the drain");
        let t = std::time::Instant::now();
        j.append(3, &Record::Undo(undo(3)), true).unwrap();
        assert!(
            t.elapsed() < DRAIN_WAIT / 2,
            "no second wait until the journal has grown by another REWIND_AT"
        );
        assert!(j.log.len() >= REWIND_AT, "not rewound: 1 is still open");
    }

    #[test]
    fn records_survive_reopening_and_a_torn_tail_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        let (j, found) = Journal::open(&p, b"export").unwrap();
        assert!(found.is_empty());
        j.rewind().unwrap();
        j.append(5, &Record::Undo(undo(1)), true).unwrap();
        j.append(6, &Record::Undo(undo(2)), true).unwrap();
        let end = j.append(5, &Record::Commit, false).unwrap();
        j.sync_to(end).unwrap();
        drop(j);
        // A torn record at the end.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(&[0, 0, 0, 40, 1, 2, 3]);
        std::fs::write(&p, &bytes).unwrap();
        let (j, found) = Journal::open(&p, b"export").unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].txid, found[0].committed), (5, true));
        assert_eq!(found[0].undo, vec![undo(1)]);
        assert_eq!((found[1].txid, found[1].committed), (6, false));
        // After a rewind the old records are gone even though their bytes remain.
        j.rewind().unwrap();
        j.append(7, &Record::Aborted, true).unwrap();
        drop(j);
        let (_, found) = Journal::open(&p, b"export").unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].aborted && found[0].txid == 7);
    }

    #[test]
    fn a_journal_of_another_export_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        let (j, _) = Journal::open(&p, b"A").unwrap();
        j.rewind().unwrap();
        j.append(1, &Record::Undo(undo(1)), true).unwrap();
        drop(j);
        match Journal::open(&p, b"B") {
            Err(JournalError::Foreign { recorded, ours, .. }) => {
                assert_eq!((recorded, ours), (b"A".to_vec(), b"B".to_vec()));
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("opened another export's journal"),
        }
        let (_, found) = Journal::open(&p, b"A").unwrap();
        assert_eq!(found.len(), 1, "A's own journal is untouched");
        assert_eq!(
            inspect(&p).unwrap(),
            JournalSummary {
                identity: Some(b"A".to_vec()),
                unfinished: 1
            }
        );
    }

    /// A journal of the first format (no identity): `records` appended in it.
    fn v1_journal(p: &Path, records: &[(u64, Record)]) {
        let _ = std::fs::remove_file(p);
        let (j, _) = Journal::open(p, b"").unwrap();
        j.rewind().unwrap();
        for (i, (txid, r)) in records.iter().enumerate() {
            j.append(*txid, r, i == 0).unwrap();
        }
        drop(j);
        let bytes = std::fs::read(p).unwrap();
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&bytes[8..16]);
        v1.extend_from_slice(&bytes[20..]);
        std::fs::write(p, v1).unwrap();
    }

    #[test]
    fn a_first_format_journal_is_refused_unless_nothing_is_unfinished() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        v1_journal(&p, &[(1, Record::Undo(undo(1)))]);
        assert_eq!(
            inspect(&p).unwrap(),
            JournalSummary {
                identity: None,
                unfinished: 1
            }
        );
        match Journal::open(&p, b"A") {
            Err(JournalError::Legacy { unfinished, .. }) => assert_eq!(unfinished, 1),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("applied a journal that names no export"),
        }
        v1_journal(&p, &[(1, Record::Undo(undo(1))), (1, Record::Commit)]);
        let (j, found) = Journal::open(&p, b"A").unwrap();
        assert!(found.is_empty(), "nothing to recover");
        j.rewind().unwrap();
        drop(j);
        assert_eq!(inspect(&p).unwrap().identity, Some(b"A".to_vec()));
    }

    /// The bytes of a hex string (golden files in tests).
    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A journal written by the code before the shared durable log (made by an
    /// independent encoder of the format): two transactions, a record of an older
    /// generation, a torn record. It reads the same, and the file is cut where its
    /// valid records end.
    const GOLDEN_J02: &str = concat!(
        "54584e46534a30320000000000000003000000066578706f72740000001968225e5e547cfb0e0000",
        "000000000003000000000000000504000000000000004d0000001c628ec040cc4dcb2d0000000000",
        "000003000000000000000500020000000164000000016e000000465a4597361744d6dc0000000000",
        "00000300000000000000060005000000016b0000000000000004000000036f6c6400000000000000",
        "07fffffffffffffffd00000007000000000000000100000002000000110400b6f547fe8596000000",
        "0000000003000000000000000501000000111cc7d5f8cb6b8adf0000000000000002000000000000",
        "000901000000280102",
    );

    #[test]
    fn a_journal_of_the_same_format_written_before_reads_the_same() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        std::fs::write(&p, unhex(GOLDEN_J02)).unwrap();
        let (j, found) = Journal::open(&p, b"export").unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(
            (found[0].txid, found[0].compound, found[0].committed),
            (5, 77, true)
        );
        assert_eq!(
            found[0].undo,
            vec![Undo::Unlink {
                dir: Bytes::from_static(b"d"),
                name: Bytes::from_static(b"n"),
            }]
        );
        assert_eq!((found[1].txid, found[1].committed), (6, false));
        assert_eq!(
            found[1].undo,
            vec![Undo::Data {
                key: Bytes::from_static(b"k"),
                offset: 4,
                saved: super::super::undo::Saved::Inline(Bytes::from_static(b"old")),
                old_size: 7,
                atime: crate::Timestamp { sec: -3, nsec: 7 },
                mtime: crate::Timestamp { sec: 1, nsec: 2 },
            }]
        );
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 214, "tail cut");
        // Appends follow the valid records.
        let end = j.append(6, &Record::Aborted, false).unwrap();
        j.sync_to(end).unwrap();
        drop(j);
        let (_, found) = Journal::open(&p, b"export").unwrap();
        assert!(found[1].aborted);
    }

    #[test]
    fn a_foreign_journal_is_left_untouched() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        let golden = unhex(GOLDEN_J02);
        std::fs::write(&p, &golden).unwrap();
        assert!(matches!(
            Journal::open(&p, b"other"),
            Err(JournalError::Foreign { .. })
        ));
        assert_eq!(std::fs::read(&p).unwrap(), golden, "not cut, not changed");
    }
}
