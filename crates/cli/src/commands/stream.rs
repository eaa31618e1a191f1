//! Streaming one large file through a COMPOUND pipeline, for what the vectorized API
//! keeps in memory: `RemoteReader` (OPEN + GETFH + GETATTR + READ in the first COMPOUND,
//! then PUTFH + READs, several COMPOUNDs in flight, CLOSE at the end) and
//! `RemoteWriter` (OPEN/create + GETFH, PUTFH + UNSTABLE WRITEs in flight, then
//! COMMIT + CLOSE).
//!
//! These belong in the client library (a `Fs::open_read`/`open_write` streaming pair);
//! they are here because that library is not ours to change in this task.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use tokio::task::JoinHandle;
use txnfs_client::attrs::{bitmap, SIZE, SPACE_USED};
use txnfs_client::compound::CURRENT_STATEID;
use txnfs_client::vector::{components, split_parent};
use txnfs_client::{Client, ClientError, Compound, CreateHow, SetAttributes};
use txnfs_proto::nfs4::{nfsstat4, stateid4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE};

/// COMPOUNDs kept in flight per stream.
const DEPTH: usize = 4;
/// Largest READ/WRITE payload per op.
const MAX_IO: u32 = 1 << 20;

fn owner() -> Vec<u8> {
    format!("txnfs-cli-stream-{}", std::process::id()).into_bytes()
}

/// PUTROOTFH + LOOKUPs to `dir`.
fn walk(c: &mut Compound, dir: &str) -> Result<(), ClientError> {
    c.putrootfh();
    for comp in components(dir)? {
        c.lookup(comp.as_bytes());
    }
    Ok(())
}

fn join_err(e: tokio::task::JoinError) -> ClientError {
    ClientError::Local(format!("I/O task failed: {e}"))
}

async fn close(client: &Client, fh: &Bytes, sid: &stateid4) -> Result<(), ClientError> {
    let mut c = Compound::new();
    c.putfh(fh);
    let i = c.close(sid.clone());
    client.compound(&c).await?.ok(i)
}

type ReadResult = Result<Vec<(u64, u32, Bytes, bool)>, ClientError>;

/// One COMPOUND of reads of a [`RemoteReader`]'s pipeline.
struct Batch {
    client: Client,
    fh: Bytes,
    sid: stateid4,
    chunk: u32,
    offsets: Vec<u64>,
}

impl Batch {
    /// READ_PLUS (`plus`) or READ of `chunk` bytes at each offset, in one COMPOUND. A
    /// server that refuses READ_PLUS gets READs, now and for the rest of the session.
    async fn read(self, plus: bool) -> ReadResult {
        if plus {
            match self.send(true).await {
                Err(e) if refuses_read_plus(&e) => self.client.read_plus_refused(),
                r => return r,
            }
        }
        self.send(false).await
    }

    async fn send(&self, plus: bool) -> ReadResult {
        let mut c = Compound::new();
        c.putfh(&self.fh);
        let ops: Vec<(usize, u64)> = self
            .offsets
            .iter()
            .map(|&off| {
                let sid = self.sid.clone();
                let i = match plus {
                    true => c.read_plus(sid, off, self.chunk),
                    false => c.read(sid, off, self.chunk),
                };
                (i, off)
            })
            .collect();
        let rep = self.client.compound(&c).await?;
        let mut out = Vec::new();
        for (i, off) in ops {
            let (d, eof) = match plus {
                true => rep.read_plus(i, off)?,
                false => rep.read(i)?,
            };
            out.push((off, self.chunk, d, eof));
        }
        Ok(out)
    }
}

/// The server has no usable READ_PLUS: the op refused, the whole COMPOUND not
/// decoded, or a reply that does not describe the range asked for.
fn refuses_read_plus(e: &ClientError) -> bool {
    match e {
        ClientError::BadReadPlus(_) => {
            tracing::debug!("{e}: reading with READ from now on");
            true
        }
        ClientError::Nfs { op, status, .. } => {
            matches!(*op, "READ_PLUS" | "ILLEGAL")
                && matches!(
                    status,
                    nfsstat4::NFS4ERR_NOTSUPP | nfsstat4::NFS4ERR_OP_ILLEGAL
                )
        }
        ClientError::Rpc(txnfs_rpc::RpcError::GarbageArgs) => true,
        _ => false,
    }
}

/// Reads one remote file front to back, in order.
pub struct RemoteReader {
    client: Client,
    fh: Bytes,
    sid: stateid4,
    /// Size when opened.
    pub size: u64,
    /// The file takes less space than its size: read it with READ_PLUS where the
    /// server has it, so its holes cross the wire as their length.
    sparse: bool,
    chunk: u32,
    per: usize,
    next_off: u64,
    pos: u64,
    eof: bool,
    ready: VecDeque<Bytes>,
    inflight: VecDeque<JoinHandle<ReadResult>>,
}

impl RemoteReader {
    pub async fn open(client: &Client, path: &str) -> Result<RemoteReader, ClientError> {
        let lim = client.limits();
        let chunk = lim.max_response.saturating_sub(1024).clamp(4096, MAX_IO);
        let per = (lim.max_response.saturating_sub(512) / (chunk + 128)).max(1) as usize;
        let (parent, leaf) = split_parent(path)?;
        let mut c = Compound::new();
        walk(&mut c, &parent)?;
        let o = c.open(leaf.as_bytes(), OPEN4_SHARE_ACCESS_READ, &owner(), None);
        let g = c.getfh();
        let at = c.getattr(bitmap(&[SIZE, SPACE_USED]));
        let rd = c.read(CURRENT_STATEID, 0, chunk);
        let rep = client.compound(&c).await?;
        let sid = rep.open(o)?.stateid;
        let fh = rep.fh(g)?;
        let mut r = RemoteReader {
            client: client.clone(),
            fh,
            sid,
            size: 0,
            sparse: false,
            chunk,
            per,
            next_off: chunk as u64,
            pos: 0,
            eof: false,
            ready: VecDeque::new(),
            inflight: VecDeque::new(),
        };
        let first = rep
            .attrs(at)
            .and_then(|a| {
                r.size = a.size.unwrap_or(0);
                r.sparse = a.space_used.is_some_and(|used| used < r.size);
                rep.read(rd)
            })
            .map(|(d, eof)| vec![(0, chunk, d, eof)]);
        match first {
            Ok(v) => {
                r.accept(v).await?;
                Ok(r)
            }
            Err(e) => {
                let _ = close(&r.client, &r.fh, &r.sid).await;
                Err(e)
            }
        }
    }

    fn issue(&mut self) {
        while !self.eof
            && self.inflight.len() < DEPTH
            && (self.next_off < self.size || self.inflight.is_empty())
        {
            let mut offsets = Vec::new();
            for _ in 0..self.per {
                offsets.push(self.next_off);
                self.next_off += self.chunk as u64;
                if self.next_off >= self.size {
                    break;
                }
            }
            let plus = self.sparse && self.client.uses_read_plus();
            let batch = Batch {
                client: self.client.clone(),
                fh: self.fh.clone(),
                sid: self.sid.clone(),
                chunk: self.chunk,
                offsets,
            };
            self.inflight.push_back(tokio::spawn(batch.read(plus)));
        }
    }

    /// READ at `off` outside the pipeline (to fill after a short read).
    async fn read_at(&self, off: u64, count: u32) -> Result<(Bytes, bool), ClientError> {
        let mut c = Compound::new();
        c.putfh(&self.fh);
        let i = c.read(self.sid.clone(), off, count);
        self.client.compound(&c).await?.read(i)
    }

    /// Take results in offset order; fill gaps left by short reads.
    async fn accept(&mut self, v: Vec<(u64, u32, Bytes, bool)>) -> Result<(), ClientError> {
        for (off, _count, data, eof) in v {
            if self.eof {
                break;
            }
            while self.pos < off {
                let want = ((off - self.pos).min(self.chunk as u64)) as u32;
                let (d, e) = self.read_at(self.pos, want).await?;
                self.pos += d.len() as u64;
                let empty = d.is_empty();
                if !empty {
                    self.ready.push_back(d);
                }
                if e || empty {
                    self.eof = true;
                    return Ok(());
                }
            }
            if off < self.pos {
                // Overlaps what a gap fill already returned.
                let skip = (self.pos - off) as usize;
                if skip < data.len() {
                    self.pos += (data.len() - skip) as u64;
                    self.ready.push_back(data.slice(skip..));
                }
            } else {
                self.pos += data.len() as u64;
                if !data.is_empty() {
                    self.ready.push_back(data.clone());
                }
            }
            if eof || (data.is_empty() && off >= self.pos) {
                self.eof = true;
            }
        }
        Ok(())
    }

    /// The next piece of the file; None at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ClientError> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Ok(Some(b));
            }
            if self.eof {
                return Ok(None);
            }
            self.issue();
            let Some(h) = self.inflight.pop_front() else {
                return Ok(None);
            };
            let v = h.await.map_err(join_err)??;
            self.accept(v).await?;
        }
    }

    /// CLOSE the file (reads still in flight are dropped).
    pub async fn close(mut self) -> Result<(), ClientError> {
        for h in self.inflight.drain(..) {
            let _ = h.await;
        }
        close(&self.client, &self.fh, &self.sid).await
    }
}

/// Writes one remote file (created or truncated) front to back.
pub struct RemoteWriter {
    client: Client,
    fh: Bytes,
    sid: stateid4,
    off: u64,
    chunk: usize,
    per: usize,
    buf: BytesMut,
    inflight: VecDeque<JoinHandle<Result<(), ClientError>>>,
    /// The last thing written was a hole: the size must be set at the end.
    holes_at_end: bool,
}

impl RemoteWriter {
    pub async fn create(
        client: &Client,
        path: &str,
        mode: u32,
    ) -> Result<RemoteWriter, ClientError> {
        let lim = client.limits();
        let chunk = lim.max_request.saturating_sub(4096).clamp(4096, MAX_IO) as usize;
        let per = ((lim.max_request.saturating_sub(1024) as usize) / (chunk + 128)).max(1);
        let (parent, leaf) = split_parent(path)?;
        let set = SetAttributes {
            size: Some(0),
            mode: Some(mode),
            ..Default::default()
        };
        let mut c = Compound::new();
        walk(&mut c, &parent)?;
        let o = c.open(
            leaf.as_bytes(),
            OPEN4_SHARE_ACCESS_WRITE,
            &owner(),
            Some((CreateHow::Unchecked, &set)),
        );
        let g = c.getfh();
        let rep = client.compound(&c).await?;
        let sid = rep.open(o)?.stateid;
        let fh = rep.fh(g)?;
        Ok(RemoteWriter {
            client: client.clone(),
            fh,
            sid,
            off: 0,
            chunk,
            per,
            buf: BytesMut::new(),
            inflight: VecDeque::new(),
            holes_at_end: false,
        })
    }

    fn send(&mut self, data: Bytes) {
        self.holes_at_end = false;
        let mut c = Compound::new();
        c.putfh(&self.fh);
        let mut writes = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let end = (at + self.chunk).min(data.len());
            let piece = data.slice(at..end);
            let i = c.write(self.sid.clone(), self.off + at as u64, piece.clone(), false);
            writes.push((i, self.off + at as u64, piece));
            at = end;
        }
        self.off += data.len() as u64;
        let (client, fh, sid) = (self.client.clone(), self.fh.clone(), self.sid.clone());
        self.inflight.push_back(tokio::spawn(async move {
            let rep = client.compound(&c).await?;
            for (i, off, piece) in writes {
                let mut done = rep.write(i)?.count as usize;
                // A short write: send the rest on its own.
                while done < piece.len() {
                    let mut c = Compound::new();
                    c.putfh(&fh);
                    let k = c.write(sid.clone(), off + done as u64, piece.slice(done..), false);
                    let n = client.compound(&c).await?.write(k)?.count as usize;
                    if n == 0 {
                        return Err(ClientError::Local("server wrote 0 bytes".into()));
                    }
                    done += n;
                }
            }
            Ok(())
        }));
    }

    async fn drain_to(&mut self, depth: usize) -> Result<(), ClientError> {
        while self.inflight.len() > depth {
            if let Some(h) = self.inflight.pop_front() {
                h.await.map_err(join_err)??;
            }
        }
        Ok(())
    }

    pub async fn write(&mut self, data: &[u8]) -> Result<(), ClientError> {
        self.buf.extend_from_slice(data);
        let batch = self.chunk * self.per;
        while self.buf.len() >= batch {
            let b = self.buf.split_to(batch).freeze();
            self.send(b);
            self.drain_to(DEPTH).await?;
        }
        Ok(())
    }

    /// Leave a hole of `n` bytes: what is buffered goes first, the next write lands
    /// after the hole (a file ending in one gets its size in [`RemoteWriter::finish`]).
    pub async fn skip(&mut self, n: u64) -> Result<(), ClientError> {
        if !self.buf.is_empty() {
            let b = self.buf.split().freeze();
            self.send(b);
            self.drain_to(DEPTH).await?;
        }
        self.off += n;
        self.holes_at_end = true;
        Ok(())
    }

    /// Send what is buffered, wait for every WRITE, COMMIT and CLOSE.
    pub async fn finish(mut self) -> Result<(), ClientError> {
        if !self.buf.is_empty() {
            let b = self.buf.split().freeze();
            self.send(b);
        }
        let r = self.drain_to(0).await;
        let mut c = Compound::new();
        c.putfh(&self.fh);
        if self.holes_at_end {
            // The file ends in a hole: no WRITE reached its end.
            let set = SetAttributes {
                size: Some(self.off),
                ..Default::default()
            };
            c.setattr(self.sid.clone(), &set);
        }
        let k = c.commit();
        let cl = c.close(self.sid.clone());
        let rep = self.client.compound(&c).await;
        r?;
        let rep = rep?;
        rep.ok(k)?;
        rep.ok(cl)
    }

    /// Give up: CLOSE without waiting for the result of what is in flight.
    pub async fn abort(mut self) {
        let _ = self.drain_to(0).await;
        let _ = close(&self.client, &self.fh, &self.sid).await;
    }
}
