//! Record marking (RFC 5531 §11): reading records made of fragments, and gathered writes.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::budget::{Charge, InFlightBudget};
use crate::msg::LAST_FRAGMENT;

/// How much buffer space is reserved at most per read, whatever a fragment header declares.
const READ_CHUNK: usize = 64 * 1024;
const MIN_READ: usize = 8 * 1024;
/// A record missing more than this sets the low-water mark (to at most `LOWAT_MAX`).
const LOWAT_FROM: usize = 64 * 1024;
const LOWAT_MAX: usize = 4 << 20;

#[derive(Debug)]
pub(crate) enum RecordError {
    Io(io::Error),
    /// The record (sum of its fragments so far plus the next declared fragment) exceeds the limit.
    TooLarge {
        size: usize,
        max: usize,
    },
    /// EOF in the middle of a record.
    Truncated,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Io(e) => write!(f, "I/O error: {e}"),
            RecordError::TooLarge { size, max } => {
                write!(f, "record of at least {size} bytes exceeds the limit {max}")
            }
            RecordError::Truncated => write!(f, "connection closed in the middle of a record"),
        }
    }
}

/// A wait for budget, kept across cancellations so that it keeps its place in line.
type Reserving = Pin<Box<dyn Future<Output = Option<Charge>> + Send>>;

/// Reads whole records from a byte stream.
///
/// [`RecordReader::next_record`] is cancel-safe: all progress is kept in `self`, and the
/// await points are a `read_buf` into the internal buffer and, with a budget, the wait
/// for the record's bytes (kept in `self` too).
pub(crate) struct RecordReader<R> {
    io: R,
    buf: BytesMut,
    /// Fragments of the current record received so far (only for multi-fragment records).
    partial: BytesMut,
    max: usize,
    /// The server's in-flight budget (ADR 0029): a record's bytes are reserved when its
    /// first record mark is seen, before its body is read.
    budget: Option<Arc<InFlightBudget>>,
    /// What the record being read holds of the budget (its size, or `max` for a record
    /// of several fragments, whose size is known only at its end).
    charge: Option<Charge>,
    /// The record being read has its reservation (`charge`, unless the budget closed).
    reserved: bool,
    /// Without a budget, a single-fragment record of at most this many bytes is read
    /// into place too (0: never; the bound is what a peer that declares a record and
    /// sends nothing makes this reader allocate).
    place_max: usize,
    /// Room for the whole record being read is made: reads go into it, and the buffer
    /// is not grown until the record is complete.
    placed: bool,
    reserving: Option<Reserving>,
    /// Received bytes copied after their arrival (buffer growth, fragments joined):
    /// what ADR 0052 counts on the receive path.
    moved: u64,
    /// Sets the socket's receive low-water mark (plain TCP only): a large record's
    /// reader is woken once its rest has arrived, not for every segment.
    lowat: Option<SetLowat<R>>,
    lowat_set: bool,
    /// Busy polling (plain TCP only): a non-blocking read tried for up to this long
    /// before the task sleeps on the socket.
    spin: Option<Spin<R>>,
    /// Spins in a row that found nothing: after [`SPIN_MISSES`] (an idle peer) the
    /// reader sleeps at once, and tries a spin again every [`SPIN_RETRY`] waits.
    spin_misses: u32,
    waits: u32,
    /// Small records in a row that arrived while nothing else of the connection was
    /// in progress: a peer that sends one call at a time. Spinning waits for such a peer
    /// only ([`SYNC_STREAK`]); one with calls in flight keeps the CPUs busy itself.
    sync_streak: u32,
}

/// Sets a socket's receive low-water mark (`SO_RCVLOWAT`) for the reader `R`.
pub(crate) type SetLowat<R> = fn(&R, usize);

/// A non-blocking read into the buffer (`WouldBlock` when nothing is there).
pub(crate) type TryRead<R> = fn(&R, &mut BytesMut) -> io::Result<usize>;

/// Busy polling's settings.
pub(crate) struct Spin<R> {
    pub read: TryRead<R>,
    /// Whether the peer has nothing in progress with us (no call executing, no reply
    /// waiting to be written): only then is it waiting for its reply, and about to send
    /// its next call. A peer with calls in progress keeps the CPUs busy anyway, and a
    /// spin would take CPU from them.
    pub idle: fn(&R) -> bool,
    /// Takes one of the server's spinner places (false: all taken, do not spin), and
    /// gives it back: a spin holds a runtime worker, so only so many may spin at once.
    pub claim: fn(&R) -> bool,
    pub release: fn(&R),
    pub limit: Duration,
}

// Not derived: the derive would ask `R: Copy`, and the fields are copies whatever `R`.
impl<R> Clone for Spin<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Spin<R> {}

/// Records that must arrive one at a time before spinning starts.
const SYNC_STREAK: u32 = 4;
/// Spins in a row that may find nothing before spinning pauses.
const SPIN_MISSES: u32 = 4;
/// While paused, one wait in this many spins again.
const SPIN_RETRY: u32 = 64;

impl<R: AsyncRead + Unpin> RecordReader<R> {
    pub(crate) fn new(io: R, max: usize) -> Self {
        RecordReader {
            io,
            buf: BytesMut::new(),
            partial: BytesMut::new(),
            max,
            budget: None,
            charge: None,
            reserved: false,
            reserving: None,
            place_max: 0,
            placed: false,
            moved: 0,
            lowat: None,
            lowat_set: false,
            spin: None,
            spin_misses: 0,
            waits: 0,
            sync_streak: 0,
        }
    }

    /// Wake for large records only once their rest is there (`set` sets the socket's
    /// `SO_RCVLOWAT`).
    pub(crate) fn with_lowat(mut self, set: SetLowat<R>) -> Self {
        self.lowat = Some(set);
        self
    }

    /// Busy polling: before sleeping on the socket, try `read` for up to `spin` (a
    /// peer that answers within it costs no wake-up: on a virtual machine a wake-up of
    /// an idle CPU takes tens of microseconds, ADR 0057 addendum).
    pub(crate) fn with_spin(mut self, spin: Spin<R>) -> Self {
        if !spin.limit.is_zero() {
            self.spin = Some(spin);
        }
        self
    }

    /// Read single-fragment records of at most `max` bytes into place (ADR 0063): room
    /// for the whole record is made when its mark is read, so its body is never moved
    /// by the buffer growing. A peer that declares such a record and sends nothing
    /// makes this reader allocate `max` bytes at most.
    pub(crate) fn with_place_max(mut self, max: usize) -> Self {
        self.place_max = max;
        self
    }

    /// Parse `prefix` (bytes already read from the stream) before reading any more.
    pub(crate) fn with_prefix(mut self, prefix: &[u8]) -> Self {
        self.buf.extend_from_slice(prefix);
        self
    }

    /// Bytes read from the stream and not yet part of a returned record.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Received bytes copied inside this reader so far (not counting the one copy
    /// from the socket into its buffer).
    #[cfg(test)]
    pub(crate) fn bytes_moved(&self) -> u64 {
        self.moved
    }

    /// Reserve every record's bytes in `budget` before reading its body; while the
    /// budget is used up, nothing more is read from the stream.
    pub(crate) fn with_budget(mut self, budget: Arc<InFlightBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The next complete record, or `None` on a clean EOF between records.
    pub(crate) async fn next_record(&mut self) -> Result<Option<Bytes>, RecordError> {
        Ok(self.next_charged().await?.map(|(rec, _)| rec))
    }

    /// The next complete record with its reservation in the budget (`None` without
    /// one), or `None` on a clean EOF between records.
    pub(crate) async fn next_charged(
        &mut self,
    ) -> Result<Option<(Bytes, Option<Charge>)>, RecordError> {
        loop {
            if self.buf.len() < 4 {
                if !self.fill(4).await? {
                    return if self.buf.is_empty() && self.partial.is_empty() {
                        Ok(None)
                    } else {
                        Err(RecordError::Truncated)
                    };
                }
                continue;
            }
            let mark = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            let last = mark & LAST_FRAGMENT != 0;
            let len = (mark & !LAST_FRAGMENT) as usize;
            let size = self.partial.len() + len;
            if size > self.max {
                return Err(RecordError::TooLarge {
                    size,
                    max: self.max,
                });
            }
            if !self.reserved {
                if let Some(budget) = &self.budget {
                    // A single fragment is the whole record; the size of a record of
                    // several is known only at its end: reserve the most it may be.
                    let want = if last && self.partial.is_empty() {
                        len
                    } else {
                        self.max
                    };
                    // Free now (the usual case): no wait to allocate and keep.
                    let now = match self.reserving {
                        None => budget.try_reserve(want),
                        Some(_) => None,
                    };
                    self.charge = match now {
                        Some(charge) => Some(charge),
                        None => {
                            let budget = budget.clone();
                            let wait = self
                                .reserving
                                .get_or_insert_with(|| Box::pin(budget.reserve(want)));
                            let charge = wait.as_mut().await;
                            self.reserving = None;
                            charge
                        }
                    };
                }
                self.reserved = true;
            }
            if self.buf.len() < 4 + len {
                if self.charge.is_some() || (last && len <= self.place_max) {
                    // The record's bytes are in the budget already (or the record is
                    // small enough to be trusted): make room for all of it now, so that
                    // its body is read into place and never moved by the buffer
                    // growing (only the read-ahead is, at most once).
                    self.reserve(4 + len - self.buf.len());
                    self.placed = true;
                }
                let missing = 4 + len - self.buf.len();
                if let Some(set) = self.lowat {
                    // Never more than the record still needs: the peer may send no
                    // more before it has the reply. Set again as the rest shrinks.
                    if missing > LOWAT_FROM || self.lowat_set {
                        set(&self.io, missing.min(LOWAT_MAX));
                        self.lowat_set = true;
                    }
                }
                if !self.fill(4 + len).await? {
                    return Err(RecordError::Truncated);
                }
                continue;
            }
            if self.lowat_set {
                if let Some(set) = self.lowat {
                    set(&self.io, 1);
                }
                self.lowat_set = false;
            }
            self.placed = false;
            self.buf.advance(4);
            let frag = self.buf.split_to(len);
            if last {
                let rec = if self.partial.is_empty() {
                    frag.freeze()
                } else {
                    self.moved += frag.len() as u64;
                    self.partial.extend_from_slice(&frag);
                    self.partial.split().freeze()
                };
                self.reserved = false;
                if let Some(spin) = self.spin {
                    // A large record takes longer than a spin to arrive: after one,
                    // sleep (a writer of 1 MiB records gains nothing by spinning).
                    self.sync_streak = if rec.len() <= LOWAT_FROM && (spin.idle)(&self.io) {
                        self.sync_streak.saturating_add(1)
                    } else {
                        0
                    };
                }
                let charge = match (self.charge.take(), &self.budget) {
                    (Some(c), Some(b)) => b.resize(c, rec.len()),
                    (c, _) => c,
                };
                return Ok(Some((rec, charge)));
            }
            self.moved += frag.len() as u64;
            self.partial.extend_from_slice(&frag);
        }
    }

    /// Room for `additional` more bytes in the buffer, counting what moves if the
    /// buffer is reallocated.
    fn reserve(&mut self, additional: usize) {
        let before = self.buf.as_ptr();
        self.buf.reserve(additional);
        if self.buf.as_ptr() != before {
            self.moved += self.buf.len() as u64;
        }
    }

    /// Read more bytes, aiming for `want` buffered bytes but never reserving more than
    /// [`READ_CHUNK`] at a time. Returns false on EOF.
    async fn fill(&mut self, want: usize) -> Result<bool, RecordError> {
        let missing = want.saturating_sub(self.buf.len());
        if !self.placed && self.buf.capacity() - self.buf.len() < MIN_READ {
            self.reserve(missing.clamp(MIN_READ, READ_CHUNK));
        }
        if self.spin_due() {
            // Let the tasks this one woke (the writer with the reply just made) run
            // first: spinning before they did would hold the reply back, and the
            // peer's next call with it.
            tokio::task::yield_now().await;
            if self.spin.is_some_and(|s| (s.idle)(&self.io)) {
                if let Some(n) = self.spin_read()? {
                    return Ok(n > 0);
                }
            }
        }
        let n = self
            .io
            .read_buf(&mut self.buf)
            .await
            .map_err(RecordError::Io)?;
        Ok(n > 0)
    }
}

impl<R> RecordReader<R> {
    /// Whether this wait should spin first: spinning is on, the peer sends one call at
    /// a time, and spinning is not paused by [`SPIN_MISSES`] misses in a row (then
    /// only every [`SPIN_RETRY`]th wait spins).
    fn spin_due(&mut self) -> bool {
        if self.spin.is_none() || self.sync_streak < SYNC_STREAK {
            return false;
        }
        self.waits = self.waits.wrapping_add(1);
        self.spin_misses < SPIN_MISSES || self.waits.is_multiple_of(SPIN_RETRY)
    }

    /// Busy polling: bytes read by spinning, or `None` when the spin found nothing
    /// (or is off) and the caller should sleep on the socket.
    fn spin_read(&mut self) -> Result<Option<usize>, RecordError> {
        let Some(spin) = self.spin else {
            return Ok(None);
        };
        if !(spin.claim)(&self.io) {
            return Ok(None);
        }
        let start = std::time::Instant::now();
        let out = loop {
            match (spin.read)(&self.io, &mut self.buf) {
                Ok(n) => {
                    self.spin_misses = 0;
                    break Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => break Err(RecordError::Io(e)),
            }
            if start.elapsed() >= spin.limit {
                self.spin_misses = self.spin_misses.saturating_add(1);
                break Ok(None);
            }
            std::hint::spin_loop();
        };
        (spin.release)(&self.io);
        out
    }
}

/// The most body bytes copied behind an RPC header (one iovec for a small message),
/// except file data ([`txnfs_xdr::SHARE_MIN`] bytes or more, ADR 0052).
const INLINE_BODY: usize = 4096;

/// One record of a message: its header, written by `write_head` (about `head_room`
/// bytes), then `body`, then `trailing` bytes sent apart (a piped part, ADR 0065).
/// Returns (record mark + header + leading small parts, the other parts). The leading
/// parts are copied behind the header (a whole small body, or the encoded fields
/// before file data), split off this thread's buffer of heads
/// (`txnfs_xdr::with_thread_heads`); file data
/// itself, a part of `SHARE_MIN` bytes or more after the first, is
/// never copied (ADR 0052, 0063).
pub(crate) fn frame(
    head_room: usize,
    write_head: impl FnOnce(&mut BytesMut),
    mut body: Vec<Bytes>,
    trailing: usize,
) -> (Bytes, Vec<Bytes>) {
    let (mut inline, mut inline_len) = (0, 0);
    for (i, p) in body.iter().enumerate() {
        if inline_len + p.len() > INLINE_BODY || (i > 0 && p.len() >= txnfs_xdr::SHARE_MIN) {
            break;
        }
        inline += 1;
        inline_len += p.len();
    }
    let head = txnfs_xdr::with_thread_heads(4 + head_room + inline_len, |heads| {
        heads.put_u32(0);
        write_head(heads);
        for p in body.drain(..inline) {
            heads.extend_from_slice(&p);
        }
        let len = heads.len() - 4 + body.iter().map(Bytes::len).sum::<usize>() + trailing;
        heads[..4].copy_from_slice(&(len as u32 | LAST_FRAGMENT).to_be_bytes());
        heads.split().freeze()
    });
    (head, body)
}

/// Maximum number of iovecs handed to one `writev`.
const MAX_IOVECS: usize = 64;

/// Write every segment of `segs`, gathering them into vectored writes; `segs` is drained.
/// Returns how many writes it took.
pub(crate) async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    segs: &mut VecDeque<Bytes>,
) -> io::Result<u64> {
    let mut writes = 0;
    while !segs.is_empty() {
        writes += 1;
        let n = {
            let slices: Vec<IoSlice<'_>> = segs
                .iter()
                .take(MAX_IOVECS)
                .map(|b| IoSlice::new(b))
                .collect();
            w.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut n = n;
        while n > 0 {
            let Some(front) = segs.front_mut() else { break };
            if front.len() <= n {
                n -= front.len();
                segs.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
        while segs.front().is_some_and(|b| b.is_empty()) {
            segs.pop_front();
        }
    }
    w.flush().await?;
    Ok(writes)
}

/// Read one record from `r` without internal buffering beyond the record itself (a test and
/// tooling helper; the server and client use a buffered reader). Memory grows only as bytes
/// actually arrive, and a record above `max` is refused.
pub async fn read_record<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Bytes, crate::RpcError> {
    let mut out = BytesMut::new();
    loop {
        let mark = r.read_u32().await?;
        let last = mark & LAST_FRAGMENT != 0;
        let len = (mark & !LAST_FRAGMENT) as usize;
        let size = out.len() + len;
        if size > max {
            return Err(crate::RpcError::RecordTooLarge { size, max });
        }
        let mut remaining = len;
        while remaining > 0 {
            let chunk = remaining.min(READ_CHUNK);
            let start = out.len();
            out.resize(start + chunk, 0);
            r.read_exact(&mut out[start..]).await?;
            remaining -= chunk;
        }
        if last {
            return Ok(out.freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A stream whose bytes come by the reactor path (`poll_read`) only while
    /// `reactor` is open, and by the spin path (`spin_read_of`) always; it counts which.
    #[derive(Default)]
    struct TwoPaths {
        bytes: Mutex<VecDeque<u8>>,
        reactor: std::sync::atomic::AtomicBool,
        by_reactor: std::sync::atomic::AtomicUsize,
        by_spin: std::sync::atomic::AtomicUsize,
        idle: std::sync::atomic::AtomicBool,
        /// The server's spinner places: one, taken while `taken` is set.
        taken: std::sync::atomic::AtomicBool,
    }

    impl AsyncRead for &TwoPaths {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            use std::sync::atomic::Ordering::SeqCst;
            let mut q = self.bytes.lock().unwrap();
            if !self.reactor.load(SeqCst) || q.is_empty() {
                // Never woken: a test that needs this path and lacks it hangs (and
                // the test's timeout fails it).
                return Poll::Pending;
            }
            while buf.remaining() > 0 {
                let Some(b) = q.pop_front() else { break };
                buf.put_slice(&[b]);
            }
            self.by_reactor.fetch_add(1, SeqCst);
            Poll::Ready(Ok(()))
        }
    }

    fn spin_read_of(t: &&TwoPaths, buf: &mut BytesMut) -> io::Result<usize> {
        let mut q = t.bytes.lock().unwrap();
        if q.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = q.len();
        buf.extend(q.drain(..));
        t.by_spin.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(n)
    }

    fn idle_of(t: &&TwoPaths) -> bool {
        t.idle.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn claim_of(t: &&TwoPaths) -> bool {
        !t.taken.swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    fn release_of(t: &&TwoPaths) {
        t.taken.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn record(body: &[u8]) -> Vec<u8> {
        let mut r = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
        r.extend_from_slice(body);
        r
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spinning_waits_only_for_a_peer_that_sends_one_call_at_a_time() {
        use std::sync::atomic::Ordering::SeqCst;
        let t: &'static TwoPaths = Box::leak(Box::default());
        t.reactor.store(true, SeqCst);
        t.idle.store(true, SeqCst);
        let mut r = RecordReader::new(t, 1 << 20).with_spin(Spin {
            read: spin_read_of,
            idle: idle_of,
            claim: claim_of,
            release: release_of,
            limit: Duration::from_millis(50),
        });
        let limit = Duration::from_secs(5);
        let next = |n: u8| {
            t.bytes.lock().unwrap().extend(record(&[n; 8]));
        };
        // The first SYNC_STREAK records, one at a time, come by the reactor.
        for n in 0..SYNC_STREAK as u8 {
            next(n);
            let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
            assert_eq!(rec.unwrap().unwrap().as_ref(), &[n; 8]);
        }
        assert_eq!(t.by_spin.load(SeqCst), 0);
        // Then the reactor goes quiet: a record arriving during the spin (sent from
        // the other worker) is read by it.
        t.reactor.store(false, SeqCst);
        let feeder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            t.bytes.lock().unwrap().extend(record(&[9; 8]));
        });
        let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
        assert_eq!(rec.unwrap().unwrap().as_ref(), &[9; 8]);
        assert!(t.by_spin.load(SeqCst) >= 1, "read by the spin");
        feeder.await.unwrap();
        // A record that arrives while the connection is busy (calls in flight) ends
        // the streak: the next wait does not spin, and the reactor delivers.
        t.reactor.store(true, SeqCst);
        t.idle.store(false, SeqCst);
        next(10);
        let spun = t.by_spin.load(SeqCst);
        let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
        assert_eq!(rec.unwrap().unwrap().as_ref(), &[10; 8]);
        next(11);
        let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
        assert_eq!(rec.unwrap().unwrap().as_ref(), &[11; 8]);
        assert_eq!(t.by_spin.load(SeqCst), spun, "no spin for a busy peer");
        assert!(!t.taken.load(SeqCst), "every spin gave its place back");
        // One-at-a-time again, but another connection holds the only spinner place:
        // no spin, the record waits for the reactor.
        for n in 12..12 + SYNC_STREAK as u8 {
            t.idle.store(true, SeqCst);
            next(n);
            let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
            assert_eq!(rec.unwrap().unwrap().as_ref(), &[n; 8]);
        }
        t.taken.store(true, SeqCst);
        t.reactor.store(false, SeqCst);
        let spun = t.by_spin.load(SeqCst);
        next(20);
        let short = Duration::from_millis(100);
        assert!(tokio::time::timeout(short, r.next_record()).await.is_err());
        assert_eq!(t.by_spin.load(SeqCst), spun, "no place, no spin");
        t.reactor.store(true, SeqCst);
        let rec = tokio::time::timeout(limit, r.next_record()).await.unwrap();
        assert_eq!(rec.unwrap().unwrap().as_ref(), &[20; 8]);
    }

    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// A socket that hands out at most `chunk` bytes per read, as TCP does.
    struct Trickle {
        data: Bytes,
        chunk: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.data.len().min(self.chunk).min(buf.remaining());
            let part = self.data.split_to(n);
            buf.put_slice(&part);
            Poll::Ready(Ok(()))
        }
    }

    fn records(sizes: &[usize]) -> Bytes {
        let mut out = BytesMut::new();
        for (i, &n) in sizes.iter().enumerate() {
            out.extend_from_slice(&(n as u32 | LAST_FRAGMENT).to_be_bytes());
            out.extend_from_slice(&vec![i as u8; n]);
        }
        out.freeze()
    }

    /// ADR 0052: a 1 MiB WRITE's record is read into place: besides the socket's own
    /// copy, at most the read-ahead that came with its record mark moves, once.
    #[tokio::test]
    async fn a_large_record_is_read_into_place() {
        let sizes = [200, 1 << 20, 300, 1 << 20];
        let io = Trickle {
            data: records(&sizes),
            chunk: 16 * 1024,
        };
        let mut r = RecordReader::new(io, 4 << 20).with_budget(InFlightBudget::new(64 << 20));
        let mut kept = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let rec = r.next_record().await.ok().flatten();
            let rec = rec.unwrap_or_else(|| panic!("record {i} missing"));
            assert_eq!(rec.len(), n);
            assert!(rec.iter().all(|&b| b == i as u8));
            // Records still held (in flight) keep the old buffer shared.
            kept.push(rec);
        }
        let moved = r.bytes_moved();
        assert!(
            moved <= 2 * (READ_CHUNK + MIN_READ) as u64,
            "{moved} bytes of {} moved after they were received",
            (2 << 20) + 500
        );
    }

    /// ADR 0063: the client reads replies up to its bound into place without a budget
    /// (a 1 MiB READ's data never moves); a larger record is still read, with the
    /// bounded growth. With the bound at 0, 130,356 bytes of the first 2 MiB moved here
    /// (how many depends on whether the allocator can grow the buffer where it is).
    #[tokio::test]
    async fn a_reply_within_the_bound_is_read_into_place_without_a_budget() {
        let sizes = [200, 1 << 20, 300, 1 << 20, 3 << 20];
        let io = Trickle {
            data: records(&sizes),
            chunk: 16 * 1024,
        };
        let mut r = RecordReader::new(io, 4 << 20).with_place_max(2 << 20);
        let mut kept = Vec::new();
        let mut moved_before_last = 0;
        for (i, &n) in sizes.iter().enumerate() {
            if i == sizes.len() - 1 {
                moved_before_last = r.bytes_moved();
            }
            let rec = r.next_record().await.ok().flatten();
            let rec = rec.unwrap_or_else(|| panic!("record {i} missing"));
            assert_eq!(rec.len(), n);
            assert!(rec.iter().all(|&b| b == i as u8));
            kept.push(rec);
        }
        assert!(
            moved_before_last <= (READ_CHUNK / 2) as u64,
            "{moved_before_last} bytes of {} moved after they were received",
            (2 << 20) + 500
        );
    }

    /// Heads split off the per-thread buffer keep their own bytes however many are
    /// held (past the buffer's size), and after they are all dropped and the buffer
    /// is reused; the record mark counts the parts left apart.
    #[test]
    fn record_heads_held_together_keep_their_own_bytes() {
        let data = Bytes::from(vec![7u8; txnfs_xdr::SHARE_MIN]);
        let make = |i: u32| {
            let small = Bytes::from(vec![i as u8; 40 + (i as usize % 50)]);
            frame(
                8,
                |h| {
                    h.put_u32(i);
                    h.put_u32(!i);
                },
                vec![small, data.clone()],
                3,
            )
        };
        let check = |i: u32, head: &Bytes, rest: &[Bytes]| {
            let small = 40 + (i as usize % 50);
            assert_eq!(head.len(), 4 + 8 + small, "head {i}");
            let mark = u32::from_be_bytes(head[..4].try_into().unwrap());
            assert_eq!(mark, LAST_FRAGMENT | (8 + small + data.len() + 3) as u32);
            assert_eq!(&head[4..8], &i.to_be_bytes());
            assert_eq!(&head[8..12], &(!i).to_be_bytes());
            assert!(head[12..].iter().all(|&b| b == i as u8), "head {i}'s body");
            assert_eq!(rest.len(), 1);
            assert_eq!(rest[0].as_ptr(), data.as_ptr(), "file data is not copied");
        };
        for _round in 0..2 {
            let held: Vec<_> = (0..600).map(make).collect();
            for (i, (head, rest)) in held.iter().enumerate() {
                check(i as u32, head, rest);
            }
        }
    }
}
