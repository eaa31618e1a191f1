//! A connection's writer: one task per connection sends the records queued for it
//! (replies in completion order, callback CALLs), draining everything queued at the
//! moment into one gathered write (ADR 0052: replies ready together leave together).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tracing::debug;

use crate::record::write_all_vectored;
use crate::server::Outgoing;

/// Coalesce at most this many bytes of replies into one gathered write.
const MAX_BATCH_BYTES: usize = 1024 * 1024;
const MAX_BATCH_RECORDS: usize = 256;

/// Gathered writes and what they carried, over all connections of a server.
#[derive(Debug, Default)]
pub struct WriteCounts {
    writes: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
}

impl WriteCounts {
    /// Write calls made (`writev`, or one TLS write of the plaintext).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Records sent (replies and callback CALLs).
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Bytes sent, record marks included.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn count(&self, writes: u64, records: u64, bytes: u64) {
        self.writes.fetch_add(writes, Ordering::Relaxed);
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Sends what `rx` brings to `wr` until every sender is gone. A failed write is
/// signalled on `failed` once; the queue is drained (and dropped) until its end so the
/// calls still running can finish. `touch` notes that bytes moved.
pub(crate) async fn writer_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    failed: Arc<Notify>,
    peer: SocketAddr,
    counts: Arc<WriteCounts>,
    touch: impl Fn(),
) {
    let mut segs = VecDeque::new();
    let mut permits = Vec::new();
    let mut ok = true;
    while let Some(first) = rx.recv().await {
        if !ok {
            // Keep draining until every call is done so the connection ends only then.
            continue;
        }
        let mut total = queue(first, &mut segs, &mut permits);
        while total < MAX_BATCH_BYTES && permits.len() < MAX_BATCH_RECORDS {
            match rx.try_recv() {
                Ok(m) => total += queue(m, &mut segs, &mut permits),
                Err(_) => break,
            }
        }
        // `flush` is free on TCP; TLS may hold the last record back until it.
        let written = match write_all_vectored(&mut wr, &mut segs).await {
            Ok(n) => wr.flush().await.map(|()| n),
            Err(e) => Err(e),
        };
        match written {
            Err(e) => {
                debug!(%peer, error = %e, "write failed; closing connection");
                ok = false;
                segs.clear();
                failed.notify_one();
            }
            Ok(writes) => {
                counts.count(writes, permits.len() as u64, total as u64);
                // Before the permits are released, so the connection never looks idle
                // with a stale timestamp right after its last reply went out.
                touch();
            }
        }
        permits.clear();
    }
    if ok {
        let _ = wr.shutdown().await;
    }
}

/// Queues one record's buffers behind the others; its permit and charge are kept
/// until the write is done. Returns the record's size.
fn queue(
    m: Outgoing,
    segs: &mut VecDeque<Bytes>,
    permits: &mut Vec<(
        Option<tokio::sync::OwnedSemaphorePermit>,
        Option<crate::budget::Charge>,
    )>,
) -> usize {
    let mut bytes = m.head.len();
    segs.push_back(m.head);
    for b in m.body {
        bytes += b.len();
        if !b.is_empty() {
            segs.push_back(b);
        }
    }
    permits.push((m.permit, m.charge));
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A socket that takes every gathered write whole and counts the calls.
    #[derive(Default)]
    struct CountingSink {
        writes: usize,
        got: Vec<u8>,
    }

    impl AsyncWrite for CountingSink {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.writes += 1;
            self.got.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            self.writes += 1;
            let mut n = 0;
            for b in bufs {
                self.got.extend_from_slice(b);
                n += b.len();
            }
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn record(i: u8, parts: usize) -> Outgoing {
        Outgoing {
            head: Bytes::from(vec![i; 8]),
            body: (0..parts).map(|_| Bytes::from(vec![i; 100])).collect(),
            permit: None,
            charge: None,
        }
    }

    /// Queue `records` before the writer looks, run it to the end of the queue, and
    /// return what reached the socket and the counts.
    async fn write_queued(records: Vec<Outgoing>) -> (CountingSink, Arc<WriteCounts>) {
        let (tx, rx) = mpsc::unbounded_channel();
        for r in records {
            tx.send(r).unwrap_or_else(|_| panic!("queue closed"));
        }
        drop(tx);
        let counts = Arc::new(WriteCounts::default());
        let mut sink = CountingSink::default();
        let addr = SocketAddr::from(([127, 0, 0, 1], 2049));
        writer_loop(
            &mut sink,
            rx,
            Arc::new(Notify::new()),
            addr,
            counts.clone(),
            || {},
        )
        .await;
        (sink, counts)
    }

    #[tokio::test]
    async fn replies_ready_together_leave_in_one_write() {
        // Sixteen replies of three buffers each (48 iovecs) queued before the writer
        // looks: one write carries them all, in order.
        let (sink, counts) = write_queued((0..16).map(|i| record(i, 2)).collect()).await;
        assert_eq!(
            sink.writes, 1,
            "one gathered write for sixteen ready replies"
        );
        assert_eq!(counts.writes(), 1);
        assert_eq!(counts.records(), 16);
        assert_eq!(counts.bytes(), 16 * 208);
        let want: Vec<u8> = (0..16u8).flat_map(|i| vec![i; 208]).collect();
        assert_eq!(sink.got, want);
    }

    /// ADR 0052: a reply's file data reaches the writer as the buffer the service
    /// made it from (no copy into the header), whatever its size from `SHARE_MIN` on;
    /// what precedes it is gathered into the header buffer.
    #[test]
    fn file_data_is_handed_to_the_writer_as_its_own_buffer() {
        use crate::server::{encode_reply, Reply};
        use crate::ReplyBody;
        use txnfs_xdr::{Gathered, SHARE_MIN};
        for n in [SHARE_MIN, 4096, 1 << 20] {
            let data = Bytes::from(vec![7u8; n]);
            let parts = vec![
                Bytes::from(vec![1u8; 60]),
                data.clone(),
                Bytes::from(vec![2u8; 8]),
            ];
            let reply = Reply::Body(ReplyBody::SuccessParts(Gathered::from_parts(parts)));
            let Some((head, body)) = encode_reply(9, reply) else {
                panic!("a reply")
            };
            assert_eq!(body.len(), 2, "{n}: data and trailer follow the header");
            assert_eq!(body[0].as_ptr(), data.as_ptr(), "{n}: data copied");
            assert_eq!(head.len(), 4 + 24 + 60);
            let mark = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            assert_eq!(mark as usize & 0x7fff_ffff, 24 + 60 + n + 8);
        }
    }

    #[tokio::test]
    async fn a_reply_alone_is_one_write_of_all_its_parts() {
        let (sink, counts) = write_queued(vec![record(1, 5)]).await;
        assert_eq!((sink.writes, counts.records()), (1, 1));
    }
}
