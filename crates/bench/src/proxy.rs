//! A user-space TCP delay proxy, for measuring how a client behaves over a
//! link with latency on a machine without `tc netem`.
//!
//! [`DelayProxy::start`] listens on a local address; every accepted
//! connection is connected to the target and forwarded both ways. Each chunk
//! read from one side is written to the other side `delay` after it was read,
//! in order: per direction a reader task stamps the chunks it reads and queues
//! them, and a writer task waits until the oldest chunk is due and writes
//! every chunk that is due by then in one go. A chunk therefore waits the
//! delay and no more (apart from timer granularity, ~1 ms with tokio), and
//! the throughput of a direction is not limited by the delay. A round trip
//! through the proxy takes `2 × delay` more than without it.
//!
//! The proxy counts bytes each way, and ONC RPC records (RFC 5531 record
//! marking: a 4-byte header per fragment, last-fragment bit `0x8000_0000`,
//! 31-bit length) each way: a record counts when its last fragment is
//! complete. Client→server records are the RPC calls sent.
//!
//! With a zero delay the data is forwarded directly (one task per direction,
//! no queue).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;
/// Largest batch the writer gathers from due chunks before writing.
const WRITE_BATCH: usize = 1024 * 1024;

/// Counts complete ONC RPC records in a byte stream fed in arbitrary pieces.
#[derive(Clone, Debug, Default)]
pub struct RecordCounter {
    /// Bytes of the current fragment header collected so far (0..4).
    header: [u8; 4],
    header_len: usize,
    /// Payload bytes of the current fragment still to come.
    remaining: u32,
    /// The current fragment is the last of its record.
    last: bool,
    /// Inside a fragment's payload (header complete, `remaining` valid).
    in_fragment: bool,
}

impl RecordCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next bytes of the stream; returns how many records they
    /// completed.
    pub fn feed(&mut self, mut data: &[u8]) -> u64 {
        let mut done = 0;
        loop {
            if self.in_fragment {
                let take = (self.remaining as usize).min(data.len());
                self.remaining -= take as u32;
                data = &data[take..];
                if self.remaining > 0 {
                    return done;
                }
                self.in_fragment = false;
                if self.last {
                    done += 1;
                }
            }
            if data.is_empty() {
                return done;
            }
            let take = (4 - self.header_len).min(data.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
            self.header_len += take;
            data = &data[take..];
            if self.header_len < 4 {
                return done;
            }
            self.header_len = 0;
            let mark = u32::from_be_bytes(self.header);
            self.last = mark & 0x8000_0000 != 0;
            self.remaining = mark & 0x7fff_ffff;
            // A zero-length fragment completes at once (loop above).
            self.in_fragment = true;
        }
    }
}

/// Counters of a proxy (totals since start, over all connections).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Complete RPC records client→server (calls).
    pub records_c2s: u64,
    /// Complete RPC records server→client (replies, and callbacks if any).
    pub records_s2c: u64,
    pub bytes_c2s: u64,
    pub bytes_s2c: u64,
}

impl ProxyStats {
    /// Counters accumulated from `earlier` to `self`.
    pub fn since(&self, earlier: &ProxyStats) -> ProxyStats {
        ProxyStats {
            connections: self.connections.saturating_sub(earlier.connections),
            records_c2s: self.records_c2s.saturating_sub(earlier.records_c2s),
            records_s2c: self.records_s2c.saturating_sub(earlier.records_s2c),
            bytes_c2s: self.bytes_c2s.saturating_sub(earlier.bytes_c2s),
            bytes_s2c: self.bytes_s2c.saturating_sub(earlier.bytes_s2c),
        }
    }
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    records_c2s: AtomicU64,
    records_s2c: AtomicU64,
    bytes_c2s: AtomicU64,
    bytes_s2c: AtomicU64,
}

#[derive(Clone, Copy)]
enum Dir {
    C2s,
    S2c,
}

impl Counters {
    fn add(&self, dir: Dir, bytes: usize, records: u64) {
        let (b, r) = match dir {
            Dir::C2s => (&self.bytes_c2s, &self.records_c2s),
            Dir::S2c => (&self.bytes_s2c, &self.records_s2c),
        };
        b.fetch_add(bytes as u64, Ordering::Relaxed);
        if records > 0 {
            r.fetch_add(records, Ordering::Relaxed);
        }
    }
}

/// A running delay proxy. Dropping it (or [`DelayProxy::stop`]) closes the
/// listener and every forwarded connection.
pub struct DelayProxy {
    addr: SocketAddr,
    target: SocketAddr,
    delay: Duration,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    /// Listen on `listen` (e.g. `127.0.0.1:0`) and forward every connection
    /// to `target`, delaying each direction by `delay_each_way`. Must be
    /// called within a tokio runtime.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        delay_each_way: Duration,
    ) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(accept_loop(
            listener,
            target,
            delay_each_way,
            counters.clone(),
        ));
        Ok(DelayProxy {
            addr,
            target,
            delay: delay_each_way,
            counters,
            task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn target(&self) -> SocketAddr {
        self.target
    }

    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections: c.connections.load(Ordering::Relaxed),
            records_c2s: c.records_c2s.load(Ordering::Relaxed),
            records_s2c: c.records_s2c.load(Ordering::Relaxed),
            bytes_c2s: c.bytes_c2s.load(Ordering::Relaxed),
            bytes_s2c: c.bytes_s2c.load(Ordering::Relaxed),
        }
    }

    /// RPC records client→server so far.
    pub fn rpc_calls(&self) -> u64 {
        self.counters.records_c2s.load(Ordering::Relaxed)
    }

    /// Stop listening and drop every connection (data still queued is lost).
    /// The counters stay readable.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    delay: Duration,
    counters: Arc<Counters>,
) {
    // Owning the connection tasks here means aborting this task (stop/drop)
    // drops the JoinSet, which aborts them all.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((client, _)) => {
                    counters.connections.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(connection(client, target, delay, counters.clone()));
                }
                Err(e) => {
                    eprintln!("delay proxy: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn connection(client: TcpStream, target: SocketAddr, delay: Duration, c: Arc<Counters>) {
    let server = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("delay proxy: connect to {target} failed: {e}");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let mut tasks = JoinSet::new();
    if delay.is_zero() {
        tasks.spawn(forward_direct(cr, sw, Dir::C2s, c.clone()));
        tasks.spawn(forward_direct(sr, cw, Dir::S2c, c));
    } else {
        for (r, w, dir) in [(cr, sw, Dir::C2s), (sr, cw, Dir::S2c)] {
            let (tx, rx) = mpsc::unbounded_channel();
            tasks.spawn(reader(r, tx, dir, c.clone()));
            tasks.spawn(writer(w, rx, delay));
        }
    }
    // When one direction fails the other may still carry data (half-close);
    // the tasks end on their own when both sides are closed.
    while tasks.join_next().await.is_some() {}
}

/// Zero delay: read, count, write.
async fn forward_direct(mut r: OwnedReadHalf, mut w: OwnedWriteHalf, dir: Dir, c: Arc<Counters>) {
    let mut counter = RecordCounter::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        c.add(dir, n, counter.feed(&buf[..n]));
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// Sleep until `deadline` with sub-millisecond precision. The tokio timer
/// has a 1 ms granularity and fires up to ~2 ms late, which would add ~3 ms
/// to every round trip; so it only sleeps until 2 ms before the deadline and
/// a blocking-pool thread sleeps the rest (nanosleep, ~0.1 ms late).
async fn sleep_until_precise(deadline: Instant) {
    const COARSE_MARGIN: Duration = Duration::from_millis(2);
    if let Some(early) = deadline.checked_sub(COARSE_MARGIN) {
        if early > Instant::now() {
            tokio::time::sleep_until(early).await;
        }
    }
    let rest = deadline.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

/// What the reader hands to the writer: data due at a time, or end of stream.
enum Chunk {
    Data(Instant, Bytes),
    Eof(Instant),
}

async fn reader(
    mut r: OwnedReadHalf,
    tx: mpsc::UnboundedSender<Chunk>,
    dir: Dir,
    c: Arc<Counters>,
) {
    let mut counter = RecordCounter::new();
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    loop {
        buf.reserve(READ_CHUNK);
        match r.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let now = Instant::now();
                let data = buf.split().freeze();
                c.add(dir, n, counter.feed(&data));
                if tx.send(Chunk::Data(now, data)).is_err() {
                    return; // the writer is gone (peer closed)
                }
            }
        }
    }
    let _ = tx.send(Chunk::Eof(Instant::now()));
}

async fn writer(mut w: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Chunk>, delay: Duration) {
    let due = |c: &Chunk| match c {
        Chunk::Data(t, _) | Chunk::Eof(t) => *t + delay,
    };
    let mut batch = BytesMut::new();
    let mut held: Option<Chunk> = None;
    loop {
        let first = match held.take() {
            Some(c) => c,
            None => match rx.recv().await {
                Some(c) => c,
                None => break, // the reader ended without an Eof (it cannot)
            },
        };
        sleep_until_precise(due(&first)).await;
        // Write this chunk and every one behind it that is due by now.
        batch.clear();
        let mut eof = false;
        let mut cur = Some(first);
        while let Some(chunk) = cur.take() {
            match chunk {
                Chunk::Data(_, d) => batch.extend_from_slice(&d),
                Chunk::Eof(_) => {
                    eof = true;
                    break;
                }
            }
            if batch.len() >= WRITE_BATCH {
                break;
            }
            if let Ok(next) = rx.try_recv() {
                if due(&next) <= Instant::now() {
                    cur = Some(next);
                } else {
                    held = Some(next);
                }
            }
        }
        if !batch.is_empty() && w.write_all(&batch).await.is_err() {
            return;
        }
        if eof {
            break;
        }
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::XorShift;
    use txnfs_rpc::{serve, CallInfo, Credential, ReplyBody, RpcClient, RpcService, ServerConfig};

    fn random(seed: u64, len: usize) -> Vec<u8> {
        crate::pattern(seed, len)
    }

    fn fragment(payload: &[u8], last: bool) -> Vec<u8> {
        let mut v = ((payload.len() as u32) | if last { 0x8000_0000 } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(payload);
        v
    }

    /// A stream of 4 records: one fragment; three fragments (one empty);
    /// an empty last fragment alone; two fragments.
    fn sample_stream() -> Vec<u8> {
        let mut s = Vec::new();
        s.extend(fragment(&random(1, 100), true));
        s.extend(fragment(&random(2, 7), false));
        s.extend(fragment(&[], false));
        s.extend(fragment(&random(3, 300), true));
        s.extend(fragment(&[], true));
        s.extend(fragment(&random(4, 5), false));
        s.extend(fragment(&random(5, 1), true));
        s
    }

    #[test]
    fn counts_records_split_anywhere() {
        let s = sample_stream();
        // Whole.
        assert_eq!(RecordCounter::new().feed(&s), 4);
        // Byte by byte: the count only moves at record ends.
        let mut c = RecordCounter::new();
        let mut total = 0;
        for b in &s {
            total += c.feed(std::slice::from_ref(b));
        }
        assert_eq!(total, 4);
        // Every split point into two reads, and random splits.
        for cut in 0..=s.len() {
            let mut c = RecordCounter::new();
            assert_eq!(c.feed(&s[..cut]) + c.feed(&s[cut..]), 4, "cut at {cut}");
        }
        let mut rng = XorShift::new(7);
        for _ in 0..200 {
            let mut c = RecordCounter::new();
            let (mut pos, mut total) = (0, 0);
            while pos < s.len() {
                let n = (1 + rng.next_u64() % 40) as usize;
                let end = (pos + n).min(s.len());
                total += c.feed(&s[pos..end]);
                pos = end;
            }
            assert_eq!(total, 4);
        }
        // An incomplete record does not count.
        assert_eq!(RecordCounter::new().feed(&s[..s.len() - 1]), 3);
    }

    /// A listener on a free loopback port, and its address.
    async fn loopback_listener() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        (listener, addr)
    }

    /// A proxy on a free loopback port in front of `target`.
    async fn proxy_to(target: SocketAddr, delay: Duration) -> DelayProxy {
        DelayProxy::start("127.0.0.1:0".parse().expect("addr"), target, delay)
            .await
            .expect("proxy")
    }

    /// Server side of the byte test: read everything until EOF, then send
    /// `reply` and close.
    async fn sink_then_send(listener: TcpListener, reply: Vec<u8>) -> Vec<u8> {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("read");
        s.write_all(&reply).await.expect("write");
        s.shutdown().await.expect("shutdown");
        got
    }

    async fn bytes_unchanged(delay: Duration) {
        let (listener, target) = loopback_listener().await;
        let up = random(11, 1 << 20);
        let down = random(12, 1 << 20);
        let server = tokio::spawn(sink_then_send(listener, down.clone()));
        let proxy = proxy_to(target, delay).await;
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        // Write in uneven pieces.
        let mut rng = XorShift::new(3);
        let mut pos = 0;
        while pos < up.len() {
            let n = (1 + rng.next_u64() % 70_000) as usize;
            let end = (pos + n).min(up.len());
            c.write_all(&up[pos..end]).await.expect("write");
            pos = end;
        }
        c.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.expect("read");
        let server_got = server.await.expect("server task");
        assert!(server_got == up, "client->server bytes changed");
        assert!(got == down, "server->client bytes changed");
        let st = proxy.stats();
        assert_eq!(st.bytes_c2s, 1 << 20);
        assert_eq!(st.bytes_s2c, 1 << 20);
        assert_eq!(st.connections, 1);
        proxy.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_pass_unchanged_without_delay() {
        bytes_unchanged(Duration::ZERO).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_pass_unchanged_with_delay() {
        bytes_unchanged(Duration::from_millis(3)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_records_through_the_proxy() {
        let (listener, target) = loopback_listener().await;
        let server = tokio::spawn(sink_then_send(listener, Vec::new()));
        let proxy = proxy_to(target, Duration::from_millis(1)).await;
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        let s = sample_stream();
        // Three records' worth split across writes with pauses, so the
        // proxy sees them in separate reads, then the rest.
        for piece in [&s[..3], &s[3..50], &s[50..120], &s[120..]] {
            c.write_all(piece).await.expect("write");
            c.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        c.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.expect("read");
        assert!(server.await.expect("server") == s);
        assert_eq!(proxy.stats().records_c2s, 4);
        assert_eq!(proxy.stats().records_s2c, 0);
        assert_eq!(proxy.rpc_calls(), 4);
    }

    struct Null;
    impl RpcService for Null {
        fn programs(&self) -> Vec<(u32, u32, u32)> {
            vec![(400_001, 1, 1)]
        }
        async fn call(&self, info: CallInfo, _args: Bytes) -> ReplyBody {
            match info.proc_num {
                0 => ReplyBody::Success(Bytes::new()),
                _ => ReplyBody::ProcUnavail,
            }
        }
    }

    /// Median round trip of 20 NULL calls (after 3 warm-up calls).
    async fn null_rtt(addr: SocketAddr) -> Duration {
        let client = RpcClient::connect(addr, Credential::None)
            .await
            .expect("connect");
        for _ in 0..3 {
            client
                .call(400_001, 1, 0, Bytes::new())
                .await
                .expect("NULL");
        }
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = std::time::Instant::now();
            client
                .call(400_001, 1, 0, Bytes::new())
                .await
                .expect("NULL");
            times.push(t.elapsed().as_secs_f64());
        }
        Duration::from_secs_f64(crate::median(&times).expect("20 samples"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn null_rpc_round_trip_gains_twice_the_delay() {
        let (listener, target) = loopback_listener().await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            Arc::new(Null),
            ServerConfig::default(),
            async {
                let _ = stopped.await;
            },
        ));
        let proxy = proxy_to(target, Duration::from_millis(10)).await;
        let direct = null_rtt(target).await;
        let proxied = null_rtt(proxy.addr()).await;
        let extra = proxied.saturating_sub(direct);
        assert!(
            extra >= Duration::from_millis(17) && extra <= Duration::from_millis(23),
            "direct {direct:?}, through a 10 ms proxy {proxied:?}: extra {extra:?}, want 20 ms ± 3 ms"
        );
        assert_eq!(proxy.stats().records_c2s, 23);
        assert_eq!(proxy.stats().records_s2c, 23);
        eprintln!("NULL round trip: direct {direct:?}, via 10 ms proxy {proxied:?}");
        proxy.stop();
        let _ = stop.send(());
        server.await.expect("join").expect("serve");
    }
}
