//! Per request type timings and transport counters, the figures Linux keeps in
//! `/proc/self/mountstats` (seed 001 §3): for each request type the requests, the
//! messages, the bytes sent and received, the time spent waiting for a session slot and
//! in the batch queue (mountstats' "queue time"), and the round-trip time from sending
//! to the reply; for the connection the messages sent and received, the requests they
//! carried and how many were on the wire when each was sent.
//!
//! A request's type is its main op: the first op after the PUTFH-like ops that only set
//! the current filehandle. A batched COMPOUND counts as one message of its first part's
//! type carrying several requests; its parts' batch waits go to their own types.
//! Counting is a mutex-held map update per message: cheap beside a round trip.

use crate::compound::{compound_ops, op_name};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use txnfs_proto::nfs4::*;

/// What the requests of one type cost, summed (divide by the counts for means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpTiming {
    /// Requests of this type (a batched COMPOUND carries several).
    pub requests: u64,
    /// COMPOUNDs of this type sent (their retransmissions included in the RTT).
    pub messages: u64,
    /// Messages that got no reply (transport error).
    pub no_reply: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Time from asking for a session slot to getting one, per message.
    pub slot_wait_ns: u64,
    /// Time requests of this type waited in the batch queue.
    pub batch_wait_ns: u64,
    /// Requests that went through the batch queue.
    pub batched: u64,
    /// Time from sending a message to its reply (or failure).
    pub rtt_ns: u64,
}

impl OpTiming {
    /// The counters accumulated from `earlier` to `self`.
    pub fn since(&self, earlier: &OpTiming) -> OpTiming {
        OpTiming {
            requests: self.requests.saturating_sub(earlier.requests),
            messages: self.messages.saturating_sub(earlier.messages),
            no_reply: self.no_reply.saturating_sub(earlier.no_reply),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            slot_wait_ns: self.slot_wait_ns.saturating_sub(earlier.slot_wait_ns),
            batch_wait_ns: self.batch_wait_ns.saturating_sub(earlier.batch_wait_ns),
            batched: self.batched.saturating_sub(earlier.batched),
            rtt_ns: self.rtt_ns.saturating_sub(earlier.rtt_ns),
        }
    }

    /// Add `o`'s counters (another client's, for instance).
    pub fn add(&mut self, o: &OpTiming) {
        self.requests += o.requests;
        self.messages += o.messages;
        self.no_reply += o.no_reply;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.slot_wait_ns += o.slot_wait_ns;
        self.batch_wait_ns += o.batch_wait_ns;
        self.batched += o.batched;
        self.rtt_ns += o.rtt_ns;
    }
}

/// Connection-level counters (mountstats' `xprt` line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// RPC messages sent (COMPOUNDs; a retransmission inside one call is not counted).
    pub sends: u64,
    /// Replies received.
    pub receives: u64,
    /// Sum over sends of the messages on the wire (sent, not yet answered), this one
    /// included: `wire_sum / sends` is the average on the wire.
    pub wire_sum: u64,
}

impl TransportCounters {
    pub fn since(&self, earlier: &TransportCounters) -> TransportCounters {
        TransportCounters {
            sends: self.sends.saturating_sub(earlier.sends),
            receives: self.receives.saturating_sub(earlier.receives),
            wire_sum: self.wire_sum.saturating_sub(earlier.wire_sum),
        }
    }

    pub fn add(&mut self, o: &TransportCounters) {
        self.sends += o.sends;
        self.receives += o.receives;
        self.wire_sum += o.wire_sum;
    }
}

/// A copy of the counters at one instant ([`crate::Client::op_times`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpTimesSnapshot {
    pub per_type: BTreeMap<&'static str, OpTiming>,
    pub transport: TransportCounters,
}

impl OpTimesSnapshot {
    /// What happened from `earlier` to `self`.
    pub fn since(&self, earlier: &OpTimesSnapshot) -> OpTimesSnapshot {
        let zero = OpTiming::default();
        OpTimesSnapshot {
            per_type: self
                .per_type
                .iter()
                .map(|(k, v)| (*k, v.since(earlier.per_type.get(k).unwrap_or(&zero))))
                .filter(|(_, v)| *v != zero)
                .collect(),
            transport: self.transport.since(&earlier.transport),
        }
    }
}

/// The live counters of one client.
#[derive(Debug, Default)]
pub(crate) struct OpTimes {
    per_type: Mutex<BTreeMap<&'static str, OpTiming>>,
    on_wire: AtomicU64,
    transport: Mutex<TransportCounters>,
}

/// The type of a COMPOUND: its first op that is not SEQUENCE or a PUTFH-like op.
pub fn request_type(ops: &[nfs_argop4]) -> &'static str {
    compound_ops(ops)
        .find(|n| {
            !matches!(
                n,
                nfs_opnum4::OP_SEQUENCE
                    | nfs_opnum4::OP_PUTFH
                    | nfs_opnum4::OP_PUTROOTFH
                    | nfs_opnum4::OP_PUTPUBFH
            )
        })
        .or_else(|| compound_ops(ops).next())
        .map(op_name)
        .unwrap_or("NULL")
}

impl OpTimes {
    /// Send one message of type `kind` (`sent_bytes` long, after `slot_wait` for its
    /// slot) by awaiting `call`, and count it; `reply_len` measures a reply.
    pub(crate) async fn timed<T, E>(
        &self,
        kind: &'static str,
        slot_wait: Duration,
        sent_bytes: usize,
        call: impl Future<Output = Result<T, E>>,
        reply_len: impl Fn(&T) -> usize,
    ) -> Result<T, E> {
        let on_wire = self.on_wire.fetch_add(1, Ordering::Relaxed) + 1;
        let t = Instant::now();
        let r = call.await;
        let rtt = t.elapsed();
        self.on_wire.fetch_sub(1, Ordering::Relaxed);
        let received = r.as_ref().ok().map(&reply_len);
        {
            let mut tr = self.transport.lock().unwrap_or_else(|e| e.into_inner());
            tr.sends += 1;
            tr.wire_sum += on_wire;
            tr.receives += u64::from(received.is_some());
        }
        let mut m = self.per_type.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry(kind).or_default();
        e.requests += 1;
        e.messages += 1;
        e.no_reply += u64::from(received.is_none());
        e.bytes_sent += sent_bytes as u64;
        e.bytes_received += received.unwrap_or(0) as u64;
        e.slot_wait_ns += slot_wait.as_nanos() as u64;
        e.rtt_ns += rtt.as_nanos() as u64;
        r
    }

    /// A batch of `parts` (each its type and time in the queue) is going out as one
    /// message of the first part's type, which [`OpTimes::timed`] counts as one request.
    pub(crate) fn batched(&self, parts: &[(&'static str, Duration)]) {
        let mut m = self.per_type.lock().unwrap_or_else(|e| e.into_inner());
        for (i, (kind, waited)) in parts.iter().enumerate() {
            let e = m.entry(kind).or_default();
            // The message's own count is the first part's request.
            e.requests += u64::from(i > 0);
            e.batched += 1;
            e.batch_wait_ns += waited.as_nanos() as u64;
        }
    }

    pub(crate) fn snapshot(&self) -> OpTimesSnapshot {
        OpTimesSnapshot {
            per_type: self
                .per_type
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            transport: *self.transport.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn putfh() -> nfs_argop4 {
        nfs_argop4::OP_PUTFH(PUTFH4args {
            object: Bytes::from_static(b"fh"),
        })
    }

    #[test]
    fn type_is_the_first_op_past_the_filehandle() {
        let read = nfs_argop4::OP_GETFH;
        assert_eq!(request_type(&[putfh(), read.clone()]), "GETFH");
        assert_eq!(request_type(&[putfh()]), "PUTFH");
        assert_eq!(request_type(&[]), "NULL");
    }

    #[tokio::test]
    async fn counts_messages_requests_and_waits() {
        let t = OpTimes::default();
        let ok: Result<Vec<u8>, ()> = t
            .timed(
                "READ",
                Duration::from_micros(5),
                100,
                async { Ok(vec![0; 40]) },
                Vec::len,
            )
            .await;
        assert!(ok.is_ok());
        let failed: Result<Vec<u8>, ()> = t
            .timed("READ", Duration::ZERO, 100, async { Err(()) }, Vec::len)
            .await;
        assert!(failed.is_err());
        // A batch of three: one message of type READ carrying a READ, a GETATTR, a READ.
        t.batched(&[
            ("READ", Duration::from_micros(10)),
            ("GETATTR", Duration::from_micros(20)),
            ("READ", Duration::from_micros(30)),
        ]);
        let before = OpTimesSnapshot::default();
        let s = t.snapshot().since(&before);
        let r = s.per_type["READ"];
        assert_eq!(r.messages, 2);
        assert_eq!(r.requests, 3, "two messages plus the batch's second READ");
        assert_eq!(r.no_reply, 1);
        assert_eq!(r.bytes_sent, 200);
        assert_eq!(r.bytes_received, 40);
        assert_eq!(r.slot_wait_ns, 5_000);
        assert_eq!(r.batched, 2);
        assert_eq!(r.batch_wait_ns, 40_000);
        let g = s.per_type["GETATTR"];
        assert_eq!((g.requests, g.messages, g.batched), (1, 0, 1));
        assert_eq!(s.transport.sends, 2);
        assert_eq!(s.transport.receives, 1);
        assert_eq!(s.transport.wire_sum, 2, "one on the wire at each send");
        // Differences drop the types that did nothing.
        assert!(t.snapshot().since(&t.snapshot()).per_type.is_empty());
    }
}
