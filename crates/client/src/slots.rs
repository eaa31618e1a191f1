//! The client's slot table (RFC 8881 §2.10.6): one request per slot at a time, sequence
//! ids advanced only when the server processed SEQUENCE, and the usable range following
//! the server's target_highest_slotid.

use std::sync::Mutex;
use tokio::sync::Notify;

struct Inner {
    seq: Vec<u32>,
    busy: Vec<bool>,
    /// Slots whose last request's fate is unknown (the server may or may not have
    /// executed it); never reused in this session.
    retired: Vec<bool>,
    /// Number of usable slots (target_highest_slotid + 1, at most the negotiated count).
    usable: usize,
}

pub(crate) struct SlotTable {
    inner: Mutex<Inner>,
    notify: Notify,
}

impl SlotTable {
    pub(crate) fn new(negotiated: u32) -> Self {
        let n = negotiated.max(1) as usize;
        SlotTable {
            inner: Mutex::new(Inner {
                seq: vec![0; n],
                busy: vec![false; n],
                retired: vec![false; n],
                usable: n,
            }),
            notify: Notify::new(),
        }
    }

    /// Wait for a free slot; returns (slot id, sequence id to send, highest slot id in use),
    /// or `None` when every slot has been retired (the session must be replaced).
    pub(crate) async fn acquire(&self) -> Option<(u32, u32, u32)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                if g.retired.iter().all(|r| *r) {
                    return None;
                }
                // Retired slots below the target would starve us: widen the usable range
                // to the next live slot.
                while g.usable < g.busy.len() && (0..g.usable).all(|i| g.retired[i]) {
                    g.usable += 1;
                }
                let usable = g.usable;
                if let Some(i) = (0..usable).find(|&i| !g.busy[i] && !g.retired[i]) {
                    g.busy[i] = true;
                    let highest = (0..g.busy.len()).rev().find(|&j| g.busy[j]).unwrap_or(i);
                    return Some((i as u32, g.seq[i].wrapping_add(1), highest as u32));
                }
            }
            notified.await;
        }
    }

    /// Give a slot back. `processed`: the server ran SEQUENCE on it (the sequence id is
    /// consumed). `target`: the server's sr_target_highest_slotid.
    pub(crate) fn release(&self, slot: u32, processed: bool, target: Option<u32>) {
        {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let i = slot as usize;
            if i < g.busy.len() {
                g.busy[i] = false;
                if processed {
                    g.seq[i] = g.seq[i].wrapping_add(1);
                }
            }
            if let Some(t) = target {
                let n = g.busy.len();
                g.usable = (t as usize + 1).clamp(1, n);
            }
        }
        self.notify.notify_waiters();
    }

    /// The request on this slot may or may not have run: never use the slot again.
    pub(crate) fn retire(&self, slot: u32) {
        {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let i = slot as usize;
            if i < g.busy.len() {
                g.busy[i] = false;
                g.retired[i] = true;
            }
        }
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sequence_ids_advance_only_when_processed() {
        let t = SlotTable::new(2);
        let (s0, q0, _) = t.acquire().await.unwrap();
        assert_eq!((s0, q0), (0, 1));
        let (s1, q1, h) = t.acquire().await.unwrap();
        assert_eq!((s1, q1, h), (1, 1, 1));
        t.release(0, false, None);
        let (s, q, _) = t.acquire().await.unwrap();
        assert_eq!((s, q), (0, 1), "not processed: same seqid again");
        t.release(0, true, Some(0));
        let (s, q, _) = t.acquire().await.unwrap();
        assert_eq!((s, q), (0, 2));
        t.release(0, true, None);
        t.release(1, true, None);
        // target 0 and slot 0 retired: the usable range widens to slot 1
        t.retire(0);
        let (s, _, _) = t.acquire().await.unwrap();
        assert_eq!(s, 1);
        t.retire(1);
        assert!(
            t.acquire().await.is_none(),
            "all retired: replace the session"
        );
    }
}
