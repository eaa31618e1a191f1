//! Record marking (RFC 5531 §11): reading records made of fragments, and gathered writes.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
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
    reserving: Option<Reserving>,
    /// Received bytes copied after their arrival (buffer growth, fragments joined):
    /// what ADR 0052 counts on the receive path.
    moved: u64,
    /// Sets the socket's receive low-water mark (plain TCP only): a large record's
    /// reader is woken once its rest has arrived, not for every segment.
    lowat: Option<fn(&R, usize)>,
    lowat_set: bool,
}

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
            moved: 0,
            lowat: None,
            lowat_set: false,
        }
    }

    /// Wake for large records only once their rest is there (`set` sets the socket's
    /// `SO_RCVLOWAT`).
    pub(crate) fn with_lowat(mut self, set: fn(&R, usize)) -> Self {
        self.lowat = Some(set);
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
                    let budget = budget.clone();
                    let wait = self
                        .reserving
                        .get_or_insert_with(|| Box::pin(budget.reserve(want)));
                    self.charge = wait.as_mut().await;
                    self.reserving = None;
                }
                self.reserved = true;
            }
            if self.buf.len() < 4 + len {
                if self.charge.is_some() {
                    // The record's bytes are in the budget already: make room for all
                    // of it now, so that its body is read into place and never moved
                    // by the buffer growing (only the read-ahead is, at most once).
                    self.reserve(4 + len - self.buf.len());
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
        if self.buf.capacity() - self.buf.len() < MIN_READ {
            self.reserve(missing.clamp(MIN_READ, READ_CHUNK));
        }
        let n = self
            .io
            .read_buf(&mut self.buf)
            .await
            .map_err(RecordError::Io)?;
        Ok(n > 0)
    }
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
}
