//! The mountstats view of a run (seed 001 §3): per request type the requests and
//! messages, bytes, mean round-trip time and mean queue time (session slot wait and
//! batch wait), and the transport's messages sent and received, requests per message
//! and messages on the wire. Our client counts them ([`txnfs_client::optimes`]); the
//! runner takes the difference over the timed part and sums the clients.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use txnfs_client::{OpTimesSnapshot, OpTiming};

/// One request type's figures over the timed part.
#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OpWire {
    pub requests: u64,
    pub messages: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Mean time from sending a message to its reply, µs.
    pub rtt_us: f64,
    /// Mean wait for a session slot per message, µs.
    pub slot_wait_us: f64,
    /// Mean wait in the batch queue per request (0 for those that skipped it), µs.
    pub batch_wait_us: f64,
    /// Requests that went through the batch queue.
    pub batched: u64,
    /// Messages without a reply.
    pub no_reply: u64,
}

/// The transport's counters over the timed part.
#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TransportWire {
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Requests carried per message (above 1 with batching).
    pub requests_per_message: f64,
    /// Messages on the wire (sent, not answered) when one is sent, on average.
    pub on_the_wire: f64,
}

/// Both, as the results file holds them.
#[derive(Clone, Default, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Wire {
    pub per_type: BTreeMap<String, OpWire>,
    pub transport: TransportWire,
}

fn per(total_ns: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        total_ns as f64 / n as f64 / 1000.0
    }
}

impl OpWire {
    pub fn of(t: &OpTiming) -> OpWire {
        OpWire {
            requests: t.requests,
            messages: t.messages,
            bytes_sent: t.bytes_sent,
            bytes_received: t.bytes_received,
            rtt_us: per(t.rtt_ns, t.messages),
            slot_wait_us: per(t.slot_wait_ns, t.messages),
            batch_wait_us: per(t.batch_wait_ns, t.requests),
            batched: t.batched,
            no_reply: t.no_reply,
        }
    }
}

impl Wire {
    /// The figures of the clients' counters from `before` to `after` (one pair per
    /// client, in the same order), summed over the clients.
    pub fn of(before: &[OpTimesSnapshot], after: &[OpTimesSnapshot]) -> Wire {
        let mut sum = OpTimesSnapshot::default();
        for (b, a) in before.iter().zip(after) {
            let d = a.since(b);
            for (k, v) in &d.per_type {
                sum.per_type.entry(k).or_default().add(v);
            }
            sum.transport.add(&d.transport);
        }
        let requests: u64 = sum.per_type.values().map(|t| t.requests).sum();
        let tr = sum.transport;
        Wire {
            per_type: sum
                .per_type
                .iter()
                .map(|(k, v)| (k.to_string(), OpWire::of(v)))
                .collect(),
            transport: TransportWire {
                messages_sent: tr.sends,
                messages_received: tr.receives,
                requests_per_message: ratio(requests, tr.sends),
                on_the_wire: ratio(tr.wire_sum, tr.sends),
            },
        }
    }

    /// The mountstats-like table, one line per request type and one for the transport.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "  per request type: requests messages  RTT µs  slot wait µs  batch wait µs  bytes out/in\n",
        );
        for (k, o) in &self.per_type {
            s.push_str(&format!(
                "    {k:<12} {:>8} {:>8} {:>7.1} {:>13.1} {:>14.1}  {}/{}\n",
                o.requests,
                o.messages,
                o.rtt_us,
                o.slot_wait_us,
                o.batch_wait_us,
                o.bytes_sent,
                o.bytes_received
            ));
        }
        let t = &self.transport;
        s.push_str(&format!(
            "  transport: {} sent, {} received, {:.2} requests per message, {:.2} on the wire\n",
            t.messages_sent, t.messages_received, t.requests_per_message, t.on_the_wire
        ));
        s
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(read: OpTiming, sends: u64, wire_sum: u64) -> OpTimesSnapshot {
        let mut s = OpTimesSnapshot::default();
        s.per_type.insert("READ", read);
        s.transport.sends = sends;
        s.transport.receives = sends;
        s.transport.wire_sum = wire_sum;
        s
    }

    #[test]
    fn differences_summed_over_clients_and_averaged() {
        let read = |requests: u64, messages: u64, rtt_ms: u64, slot_ms: u64| OpTiming {
            requests,
            messages,
            rtt_ns: rtt_ms * 1_000_000,
            slot_wait_ns: slot_ms * 1_000_000,
            batch_wait_ns: requests * 500_000,
            batched: requests,
            ..OpTiming::default()
        };
        // Client 1: 10 requests in 5 messages before, 30 in 15 after: 20 in 10.
        // Client 2: 0 before, 20 requests in 10 messages after.
        let before = [snap(read(10, 5, 50, 5), 5, 5), OpTimesSnapshot::default()];
        let after = [
            snap(read(30, 15, 150, 25), 15, 35),
            snap(read(20, 10, 100, 0), 10, 20),
        ];
        let w = Wire::of(&before, &after);
        let r = w.per_type["READ"];
        assert_eq!((r.requests, r.messages), (40, 20));
        // RTT: (100 + 100) ms over 20 messages = 10 ms.
        assert!((r.rtt_us - 10_000.0).abs() < 1e-6);
        // Slot wait: 20 ms over 20 messages.
        assert!((r.slot_wait_us - 1_000.0).abs() < 1e-6);
        // Batch wait: 0.5 ms per request.
        assert!((r.batch_wait_us - 500.0).abs() < 1e-6);
        assert_eq!(w.transport.messages_sent, 20);
        assert!((w.transport.requests_per_message - 2.0).abs() < 1e-9);
        // wire_sum: 30 + 20 over 20 sends.
        assert!((w.transport.on_the_wire - 2.5).abs() < 1e-9);
        assert!(w.table().contains("READ"));
    }
}
