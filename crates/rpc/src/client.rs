//! An async ONC RPC client over one TCP connection: many concurrent calls matched by xid.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::msg::*;
use crate::record::{write_all_vectored, RecordError, RecordReader};
use crate::server::DEFAULT_MAX_RECORD_SIZE;
use crate::RpcError;

/// Client limits.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Largest reply record accepted; a bigger one drops the connection.
    pub max_record_size: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
        }
    }
}

type Waiter = oneshot::Sender<Result<Bytes, RpcError>>;

#[derive(Default)]
struct Pending {
    waiters: HashMap<u32, Waiter>,
    closed: bool,
}

type SharedPending = Arc<Mutex<Pending>>;

fn lock(p: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Mark the connection dead and fail every pending call with `Disconnected`.
fn fail_all(p: &Mutex<Pending>) {
    let waiters = {
        let mut g = lock(p);
        g.closed = true;
        std::mem::take(&mut g.waiters)
    };
    for (_, w) in waiters {
        let _ = w.send(Err(RpcError::Disconnected));
    }
}

/// An ONC RPC client on one TCP connection. Calls take `&self` and may run concurrently;
/// share it with `Arc`. Dropping it closes the connection.
pub struct RpcClient {
    tx: mpsc::UnboundedSender<Bytes>,
    pending: SharedPending,
    next_xid: AtomicU32,
    cred: Credential,
    peer: SocketAddr,
    reader: JoinHandle<()>,
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Removes a waiter whose call future is dropped before its reply arrived.
struct PendingGuard<'a> {
    pending: &'a Mutex<Pending>,
    xid: u32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).waiters.remove(&self.xid);
    }
}

impl RpcClient {
    /// Connect to `addr`; every call carries `cred` and a null verifier.
    pub async fn connect(addr: SocketAddr, cred: Credential) -> Result<Self, RpcError> {
        Self::connect_with_config(addr, cred, ClientConfig::default()).await
    }

    pub async fn connect_with_config(
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
    ) -> Result<Self, RpcError> {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let pending: SharedPending = Arc::default();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(client_writer(wr, rx, pending.clone()));
        let reader = tokio::spawn(client_reader(rd, pending.clone(), cfg.max_record_size));
        Ok(RpcClient {
            tx,
            pending,
            next_xid: AtomicU32::new(initial_xid()),
            cred,
            peer: addr,
            reader,
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn credential(&self) -> &Credential {
        &self.cred
    }

    /// Cut the connection now, as a network failure would: every pending call fails with
    /// `Disconnected` and the socket is closed (fault injection, tests).
    pub fn abort(&self) {
        self.reader.abort();
        fail_all(&self.pending);
        let _ = self.tx.send(Bytes::new());
    }

    /// A fresh transaction id.
    pub fn next_xid(&self) -> u32 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Call `prog`/`vers`/`proc_num` with encoded `args`; returns the encoded results of a
    /// SUCCESS reply, or the typed error of any other reply.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: Bytes,
    ) -> Result<Bytes, RpcError> {
        let xid = self.next_xid();
        let mut out = BytesMut::with_capacity(4 + 64 + args.len());
        out.put_u32(0);
        let header = CallHeader::new(xid, prog, vers, proc_num, &self.cred);
        encode_call_into(&mut out, &header, &args);
        let len = out.len() - 4;
        if len > MAX_FRAGMENT {
            return Err(RpcError::RecordTooLarge {
                size: len,
                max: MAX_FRAGMENT,
            });
        }
        out[..4].copy_from_slice(&(len as u32 | LAST_FRAGMENT).to_be_bytes());
        self.call_raw_record(xid, out.freeze()).await
    }

    /// Send `wire` verbatim (it must carry its own record marks, see [`record`]) and wait
    /// for the reply with transaction id `xid`. For tests that craft unusual requests.
    pub async fn call_raw_record(&self, xid: u32, wire: Bytes) -> Result<Bytes, RpcError> {
        let (wtx, wrx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if p.closed {
                return Err(RpcError::Disconnected);
            }
            p.waiters.insert(xid, wtx);
        }
        let _guard = PendingGuard {
            pending: &self.pending,
            xid,
        };
        if self.tx.send(wire).is_err() {
            return Err(RpcError::Disconnected);
        }
        match wrx.await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Disconnected),
        }
    }
}

fn initial_xid() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mixed =
        (t ^ (std::process::id() as u64).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as u32
}

async fn client_writer(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    pending: SharedPending,
) {
    let mut segs = VecDeque::new();
    while let Some(first) = rx.recv().await {
        if first.is_empty() {
            // `abort()`: close our side of the connection.
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
            fail_all(&pending);
            return;
        }
        segs.push_back(first);
        while segs.len() < 64 {
            match rx.try_recv() {
                Ok(b) => segs.push_back(b),
                Err(_) => break,
            }
        }
        if let Err(e) = write_all_vectored(&mut wr, &mut segs).await {
            debug!(error = %e, "RPC client write failed");
            fail_all(&pending);
            return;
        }
    }
}

async fn client_reader(rd: OwnedReadHalf, pending: SharedPending, max: usize) {
    let mut reader = RecordReader::new(rd, max);
    loop {
        let rec = match reader.next_record().await {
            Ok(Some(r)) => r,
            Ok(None) => {
                debug!("RPC server closed the connection");
                break;
            }
            Err(RecordError::Io(e)) => {
                debug!(error = %e, "RPC client read error");
                break;
            }
            Err(e) => {
                warn!(error = %e, "bad record from RPC server; dropping connection");
                break;
            }
        };
        if rec.len() >= 8 && rec[4..8] == MSG_CALL.to_be_bytes() {
            debug!("RPC CALL received on a client connection (backchannel); dropped");
            continue;
        }
        let (xid, result) = match decode_reply(rec.clone()) {
            Ok(r) => r,
            Err(e) => {
                let Some(xid) = rec
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                else {
                    warn!(error = %e, "undecodable RPC reply without xid");
                    continue;
                };
                warn!(xid, error = %e, "undecodable RPC reply");
                (xid, Err(e))
            }
        };
        let waiter = lock(&pending).waiters.remove(&xid);
        match waiter {
            Some(w) => {
                let _ = w.send(result);
            }
            None => debug!(xid, "RPC reply for an unknown xid; dropped"),
        }
    }
    fail_all(&pending);
}

/// Decode a reply record into its xid and the call's outcome: the encoded results of a
/// SUCCESS reply or the typed error of any other reply. The outer error is a reply that
/// cannot be decoded at all.
pub fn decode_reply(record: Bytes) -> Result<(u32, Result<Bytes, RpcError>), RpcError> {
    let (xid, hdr, rest) = decode_reply_message(record)?;
    let r = match hdr {
        ReplyHeader::Accepted { stat, .. } => match stat {
            AcceptedStatus::Success => Ok(rest),
            AcceptedStatus::ProgUnavail => Err(RpcError::ProgUnavail),
            AcceptedStatus::ProgMismatch { low, high } => Err(RpcError::ProgMismatch { low, high }),
            AcceptedStatus::ProcUnavail => Err(RpcError::ProcUnavail),
            AcceptedStatus::GarbageArgs => Err(RpcError::GarbageArgs),
            AcceptedStatus::SystemErr => Err(RpcError::SystemErr),
        },
        ReplyHeader::Denied(RejectedReply::RpcMismatch { low, high }) => {
            Err(RpcError::RpcMismatch { low, high })
        }
        ReplyHeader::Denied(RejectedReply::AuthError(s)) => Err(RpcError::AuthError(s)),
    };
    Ok((xid, r))
}
