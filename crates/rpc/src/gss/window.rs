//! The sequence window of one RPCSEC_GSS context (RFC 2203 §5.3.3.1): a call whose
//! sequence number was seen already, or lies below the window, is dropped without a
//! reply; a number past MAXSEQ ends the context.

use super::wire::MAXSEQ;

/// Sequence numbers remembered behind the highest one (the `seq_window` the server
/// announces in its INIT reply). 128 fits one `u128` and is what knfsd uses.
pub const SEQ_WINDOW: u32 = 128;

/// What to do with a data call's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqVerdict {
    Accept,
    /// A replay or a call older than the window: no reply at all.
    Drop,
    /// Past MAXSEQ: the context must be destroyed (RPCSEC_GSS_CTXPROBLEM).
    Exhausted,
}

/// Highest number seen and a bit per number in the window below it (bit 0 = highest).
#[derive(Debug, Default, Clone)]
pub struct SeqWindow {
    highest: Option<u32>,
    seen: u128,
}

impl SeqWindow {
    pub fn check(&mut self, seq: u32) -> SeqVerdict {
        if seq >= MAXSEQ {
            return SeqVerdict::Exhausted;
        }
        let Some(highest) = self.highest else {
            self.highest = Some(seq);
            self.seen = 1;
            return SeqVerdict::Accept;
        };
        if seq > highest {
            let shift = seq - highest;
            self.seen = if shift >= SEQ_WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = Some(seq);
            return SeqVerdict::Accept;
        }
        let behind = highest - seq;
        if behind >= SEQ_WINDOW {
            return SeqVerdict::Drop;
        }
        let bit = 1u128 << behind;
        if self.seen & bit != 0 {
            return SeqVerdict::Drop;
        }
        self.seen |= bit;
        SeqVerdict::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_reordered_calls_are_accepted_once() {
        let mut w = SeqWindow::default();
        for s in [1, 2, 5, 3, 4] {
            assert_eq!(w.check(s), SeqVerdict::Accept, "seq {s}");
        }
        for s in [1, 2, 3, 4, 5] {
            assert_eq!(w.check(s), SeqVerdict::Drop, "replay of {s}");
        }
    }

    #[test]
    fn calls_below_the_window_are_dropped() {
        let mut w = SeqWindow::default();
        assert_eq!(w.check(10), SeqVerdict::Accept);
        assert_eq!(w.check(10 + SEQ_WINDOW), SeqVerdict::Accept);
        // 10 is now exactly one window behind: outside.
        assert_eq!(
            w.check(11),
            SeqVerdict::Accept,
            "last number inside the window"
        );
        assert_eq!(w.check(10), SeqVerdict::Drop);
        assert_eq!(w.check(0), SeqVerdict::Drop);
        assert_eq!(w.check(12), SeqVerdict::Accept);
    }

    #[test]
    fn a_jump_past_the_window_forgets_everything_behind() {
        let mut w = SeqWindow::default();
        assert_eq!(w.check(1), SeqVerdict::Accept);
        assert_eq!(w.check(1000), SeqVerdict::Accept);
        assert_eq!(w.check(999), SeqVerdict::Accept);
        assert_eq!(w.check(1), SeqVerdict::Drop);
        assert_eq!(w.check(1000), SeqVerdict::Drop);
    }

    #[test]
    fn maxseq_exhausts_the_context() {
        let mut w = SeqWindow::default();
        assert_eq!(w.check(MAXSEQ - 1), SeqVerdict::Accept);
        assert_eq!(w.check(MAXSEQ), SeqVerdict::Exhausted);
        assert_eq!(w.check(u32::MAX), SeqVerdict::Exhausted);
    }
}
