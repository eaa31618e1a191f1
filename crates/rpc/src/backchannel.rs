//! The server's back channel: ONC RPC CALLs the server sends to a client over the client's own
//! TCP connection, and the matching of the client's REPLYs by xid (NFSv4.1 back channel,
//! RFC 8881 §2.10.3.1; message format RFC 5531).
//!
//! One [`BackChannel`] exists per accepted connection. The connection's reader hands every
//! REPLY record it receives to [`BackChannel::deliver`]; outgoing CALLs are queued on the
//! same writer as the connection's replies, so each goes out as one whole record.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};
use txnfs_xdr::XdrError;

use crate::msg::*;
use crate::server::Outgoing;

/// Default bound on the callbacks outstanding on one connection
/// ([`crate::ServerConfig::max_callbacks_per_conn`]).
pub const DEFAULT_MAX_CALLBACKS_PER_CONN: usize = 64;

/// Why a callback (a CALL from the server to the client) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    /// No reply arrived in time; the call is forgotten and a late reply is dropped.
    #[error("no callback reply within the timeout")]
    Timeout,
    /// The connection is closed (or closed while the call was pending).
    #[error("connection closed")]
    ConnectionClosed,
    /// The connection already has `max` callbacks waiting for their replies.
    #[error("too many outstanding callbacks on this connection (limit {max})")]
    TooManyOutstanding { max: usize },
    /// The CALL would not fit in one record fragment.
    #[error("callback arguments of {size} bytes exceed the limit {max}")]
    ArgsTooLarge { size: usize, max: usize },
    /// The client's REPLY with this call's xid could not be decoded.
    #[error("malformed callback reply: {0}")]
    MalformedReply(XdrError),
    /// MSG_DENIED / RPC_MISMATCH.
    #[error("RPC version mismatch: client supports {low}..={high}")]
    RpcMismatch { low: u32, high: u32 },
    /// MSG_DENIED / AUTH_ERROR.
    #[error("callback authentication error: {0:?}")]
    AuthError(AuthStat),
    #[error("callback program unavailable")]
    ProgUnavail,
    #[error("callback program version mismatch: client supports {low}..={high}")]
    ProgMismatch { low: u32, high: u32 },
    #[error("callback procedure unavailable")]
    ProcUnavail,
    #[error("client could not decode the callback arguments")]
    GarbageArgs,
    #[error("client system error")]
    SystemErr,
}

type Waiter = oneshot::Sender<Result<Bytes, CallbackError>>;

struct State {
    /// The connection's writer queue; `None` once the connection is closed, so a handle the
    /// service keeps does not keep the writer alive.
    tx: Option<mpsc::UnboundedSender<Outgoing>>,
    pending: HashMap<u32, Waiter>,
}

struct Inner {
    conn_id: u64,
    peer: SocketAddr,
    max_outstanding: usize,
    next_xid: AtomicU32,
    state: Mutex<State>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A cloneable handle for sending ONC RPC CALLs to the client at the other end of one
/// accepted connection and awaiting their REPLYs (the NFSv4.1 back channel).
///
/// Obtained from [`crate::CallInfo::back_channel`] or
/// [`crate::RpcService::connection_opened`]. It stays valid after the connection is gone:
/// calls then fail at once with [`CallbackError::ConnectionClosed`].
#[derive(Clone)]
pub struct BackChannel {
    inner: Arc<Inner>,
}

impl fmt::Debug for BackChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackChannel")
            .field("conn_id", &self.inner.conn_id)
            .field("peer", &self.inner.peer)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Removes the pending entry when the call ends without its reply (timeout, cancellation).
struct PendingGuard<'a> {
    inner: &'a Inner,
    xid: u32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.inner.lock().pending.remove(&self.xid);
    }
}

impl BackChannel {
    pub(crate) fn new(
        conn_id: u64,
        peer: SocketAddr,
        tx: mpsc::UnboundedSender<Outgoing>,
        max_outstanding: usize,
    ) -> Self {
        BackChannel {
            inner: Arc::new(Inner {
                conn_id,
                peer,
                max_outstanding: max_outstanding.max(1),
                next_xid: AtomicU32::new(initial_xid(conn_id)),
                state: Mutex::new(State {
                    tx: Some(tx),
                    pending: HashMap::new(),
                }),
            }),
        }
    }

    /// The id of the connection (same as [`crate::CallInfo::conn_id`]).
    pub fn conn_id(&self) -> u64 {
        self.inner.conn_id
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// Whether the connection is closed (every call fails with `ConnectionClosed`).
    pub fn is_closed(&self) -> bool {
        self.inner.lock().tx.is_none()
    }

    /// Callbacks sent and still waiting for their replies.
    pub fn outstanding(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// Send a CALL of `prog`/`vers`/`proc_num` carrying `cred` (AUTH_NONE or AUTH_SYS), a
    /// null verifier and the encoded `args`; wait at most `timeout` for the client's REPLY.
    /// Returns the encoded results of a SUCCESS reply, or the typed error of any other
    /// outcome.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        cred: &Credential,
        args: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallbackError> {
        let inner = &*self.inner;
        let (wtx, wrx) = oneshot::channel();
        let xid = {
            let mut st = inner.lock();
            let Some(tx) = st.tx.clone() else {
                return Err(CallbackError::ConnectionClosed);
            };
            if st.pending.len() >= inner.max_outstanding {
                return Err(CallbackError::TooManyOutstanding {
                    max: inner.max_outstanding,
                });
            }
            // Skip xids still pending (possible only after 2^32 calls on one connection).
            let mut xid = inner.next_xid.fetch_add(1, Ordering::Relaxed);
            while st.pending.contains_key(&xid) {
                xid = inner.next_xid.fetch_add(1, Ordering::Relaxed);
            }
            let (head, body) = encode_call_record(xid, prog, vers, proc_num, cred, args)?;
            // Queued under the lock so a concurrent close cannot strand the entry.
            if tx
                .send(Outgoing {
                    head,
                    body: if body.is_empty() {
                        Vec::new()
                    } else {
                        vec![body]
                    },
                    piped: None,
                    permit: None,
                    charge: None,
                })
                .is_err()
            {
                return Err(CallbackError::ConnectionClosed);
            }
            st.pending.insert(xid, wtx);
            xid
        };
        let _guard = PendingGuard { inner, xid };
        debug!(
            conn_id = inner.conn_id,
            xid, prog, vers, proc_num, "callback sent"
        );
        match tokio::time::timeout(timeout, wrx).await {
            Ok(Ok(result)) => result,
            // The waiter was dropped without an answer: only `close` does that.
            Ok(Err(_)) => Err(CallbackError::ConnectionClosed),
            Err(_) => {
                debug!(conn_id = inner.conn_id, xid, "callback timed out");
                Err(CallbackError::Timeout)
            }
        }
    }

    /// A REPLY record (starting at the xid) received on the connection: complete the
    /// matching pending call. Unknown xids are logged and dropped; a reply that cannot be
    /// decoded fails its call if its xid is pending, and is dropped otherwise.
    pub(crate) fn deliver(&self, record: Bytes) {
        let inner = &*self.inner;
        let Some(xid) = record
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        else {
            warn!(
                conn_id = inner.conn_id,
                "callback reply without an xid; dropped"
            );
            return;
        };
        let result = match decode_reply_message(record) {
            Ok((_, hdr, results)) => reply_outcome(hdr, results),
            Err(e) => {
                warn!(conn_id = inner.conn_id, xid, error = %e, "malformed callback reply");
                Err(CallbackError::MalformedReply(e))
            }
        };
        let waiter = inner.lock().pending.remove(&xid);
        match waiter {
            Some(w) => {
                let _ = w.send(result);
            }
            None => warn!(
                conn_id = inner.conn_id,
                peer = %inner.peer,
                xid,
                "callback reply for an unknown xid; dropped"
            ),
        }
    }

    /// The connection can no longer carry callbacks: fail every pending call and refuse
    /// new ones. Idempotent.
    pub(crate) fn close(&self) {
        let waiters = {
            let mut st = self.inner.lock();
            st.tx = None;
            std::mem::take(&mut st.pending)
        };
        for (_, w) in waiters {
            let _ = w.send(Err(CallbackError::ConnectionClosed));
        }
    }
}

/// Map a decoded reply header to the call's outcome.
fn reply_outcome(hdr: ReplyHeader, results: Bytes) -> Result<Bytes, CallbackError> {
    match hdr {
        ReplyHeader::Accepted { stat, .. } => match stat {
            AcceptedStatus::Success => Ok(results),
            AcceptedStatus::ProgUnavail => Err(CallbackError::ProgUnavail),
            AcceptedStatus::ProgMismatch { low, high } => {
                Err(CallbackError::ProgMismatch { low, high })
            }
            AcceptedStatus::ProcUnavail => Err(CallbackError::ProcUnavail),
            AcceptedStatus::GarbageArgs => Err(CallbackError::GarbageArgs),
            AcceptedStatus::SystemErr => Err(CallbackError::SystemErr),
        },
        ReplyHeader::Denied(RejectedReply::RpcMismatch { low, high }) => {
            Err(CallbackError::RpcMismatch { low, high })
        }
        ReplyHeader::Denied(RejectedReply::AuthError(s)) => Err(CallbackError::AuthError(s)),
    }
}

/// Copy arguments up to this size into the header buffer (one iovec per call).
const INLINE_ARGS: usize = 4096;

/// Encode a CALL as (record mark + header [+ small args], large args).
fn encode_call_record(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    cred: &Credential,
    args: Bytes,
) -> Result<(Bytes, Bytes), CallbackError> {
    let inline = args.len() <= INLINE_ARGS;
    let mut out = BytesMut::with_capacity(4 + 64 + MAX_AUTH_BYTES + args.len());
    out.put_u32(0);
    let header = CallHeader::new(xid, prog, vers, proc_num, cred);
    encode_call_into(&mut out, &header, &[]);
    let len = out.len() - 4 + args.len();
    if len > MAX_FRAGMENT {
        return Err(CallbackError::ArgsTooLarge {
            size: args.len(),
            max: MAX_FRAGMENT - (out.len() - 4),
        });
    }
    Ok(finish_record(out, args, inline))
}

/// A per-connection starting xid, so xids of different connections (and server restarts)
/// rarely coincide in traces.
fn initial_xid(conn_id: u64) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mixed = (t ^ conn_id.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_xdr::get_u32;

    fn channel(max: usize) -> (BackChannel, mpsc::UnboundedReceiver<Outgoing>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let peer = SocketAddr::from(([127, 0, 0, 1], 9));
        (BackChannel::new(7, peer, tx, max), rx)
    }

    /// The xid of a queued CALL record.
    fn sent_xid(o: &Outgoing) -> u32 {
        let mut b = o.head.slice(4..);
        get_u32(&mut b).expect("xid")
    }

    fn reply(xid: u32, hdr: ReplyHeader, results: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        encode_reply_header(&mut out, xid, &hdr);
        out.put_slice(results);
        out.freeze()
    }

    fn accepted(stat: AcceptedStatus) -> ReplyHeader {
        ReplyHeader::Accepted {
            verf: OpaqueAuth::none(),
            stat,
        }
    }

    #[test]
    fn call_record_encoding() {
        let cred = Credential::None;
        let (head, body) =
            encode_call_record(9, 0x4000_0000, 1, 1, &cred, Bytes::from_static(b"argsargs"))
                .expect("encode");
        assert!(body.is_empty());
        let mark = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        assert_eq!(mark, LAST_FRAGMENT | (head.len() as u32 - 4));
        let expect = encode_call(9, 0x4000_0000, 1, 1, &cred, b"argsargs");
        assert_eq!(&head[4..], &expect[..]);

        let big = Bytes::from(vec![3u8; INLINE_ARGS + 1]);
        let (head, body) = encode_call_record(9, 1, 1, 0, &cred, big.clone()).expect("encode");
        assert_eq!(body, big);
        let mark = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        assert_eq!(mark, LAST_FRAGMENT | (head.len() + body.len() - 4) as u32);
    }

    #[test]
    fn reply_statuses_become_typed_errors() {
        let cases = [
            (
                accepted(AcceptedStatus::Success),
                Ok(Bytes::from_static(b"res")),
            ),
            (
                accepted(AcceptedStatus::ProgUnavail),
                Err(CallbackError::ProgUnavail),
            ),
            (
                accepted(AcceptedStatus::ProgMismatch { low: 1, high: 2 }),
                Err(CallbackError::ProgMismatch { low: 1, high: 2 }),
            ),
            (
                accepted(AcceptedStatus::ProcUnavail),
                Err(CallbackError::ProcUnavail),
            ),
            (
                accepted(AcceptedStatus::GarbageArgs),
                Err(CallbackError::GarbageArgs),
            ),
            (
                accepted(AcceptedStatus::SystemErr),
                Err(CallbackError::SystemErr),
            ),
            (
                ReplyHeader::Denied(RejectedReply::RpcMismatch { low: 2, high: 2 }),
                Err(CallbackError::RpcMismatch { low: 2, high: 2 }),
            ),
            (
                ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::TooWeak)),
                Err(CallbackError::AuthError(AuthStat::TooWeak)),
            ),
        ];
        for (hdr, want) in cases {
            let (_, h, rest) = decode_reply_message(reply(1, hdr, b"res")).expect("decode");
            assert_eq!(reply_outcome(h, rest), want);
        }
    }

    #[tokio::test]
    async fn delivered_statuses_reach_the_waiter() {
        let (bc, mut rx) = channel(4);
        let t = {
            let bc = bc.clone();
            tokio::spawn(async move {
                bc.call(
                    1,
                    1,
                    0,
                    &Credential::None,
                    Bytes::new(),
                    Duration::from_secs(10),
                )
                .await
            })
        };
        let xid = sent_xid(&rx.recv().await.expect("queued"));
        bc.deliver(reply(
            xid,
            ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::BadCred)),
            b"",
        ));
        assert_eq!(
            t.await.expect("task"),
            Err(CallbackError::AuthError(AuthStat::BadCred))
        );
        assert_eq!(bc.outstanding(), 0);
    }

    #[tokio::test]
    async fn xids_are_distinct_and_close_fails_pending() {
        let (bc, mut rx) = channel(16);
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let bc = bc.clone();
            tasks.push(tokio::spawn(async move {
                bc.call(
                    1,
                    1,
                    0,
                    &Credential::None,
                    Bytes::new(),
                    Duration::from_secs(10),
                )
                .await
            }));
        }
        let mut xids = std::collections::HashSet::new();
        for _ in 0..16 {
            assert!(xids.insert(sent_xid(&rx.recv().await.expect("queued"))));
        }
        assert_eq!(bc.outstanding(), 16);
        bc.close();
        for t in tasks {
            assert_eq!(t.await.expect("task"), Err(CallbackError::ConnectionClosed));
        }
        assert!(bc.is_closed());
        // The writer queue is released: the receiver sees the end of the channel.
        assert!(rx.recv().await.is_none());
        let r = bc
            .call(
                1,
                1,
                0,
                &Credential::None,
                Bytes::new(),
                Duration::from_secs(1),
            )
            .await;
        assert_eq!(r, Err(CallbackError::ConnectionClosed));
    }

    #[tokio::test]
    async fn short_or_unknown_replies_are_dropped() {
        let (bc, _rx) = channel(4);
        bc.deliver(Bytes::from_static(b"\0\0"));
        bc.deliver(reply(5, accepted(AcceptedStatus::Success), b"x"));
        bc.deliver(Bytes::from_static(&[0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 9]));
        assert_eq!(bc.outstanding(), 0);
        assert!(!bc.is_closed());
    }
}
