//! The server's global budget for bytes in flight (ADR 0029): request records read
//! and not yet answered plus replies not yet written, over all connections.
//!
//! A tokio [`Semaphore`] with one permit per KiB. A connection reserves a record's
//! bytes when its record mark arrives, before it buffers the body; while the budget
//! is used up it waits there and reads nothing more from its socket (back-pressure:
//! TCP flow control then stops the client), so nothing is ever dropped or failed
//! for want of budget. A record larger than the whole budget is admitted alone, once
//! it holds every permit. Waiting for a record's bytes, a connection holds no other
//! reservation, so waits cannot form a cycle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bytes one permit stands for.
pub const BUDGET_UNIT: usize = 1024;

/// Default [`InFlightBudget`] size: 256 MiB. Enough for 256 concurrent 1 MiB WRITEs
/// (knfsd's default of 8-64 threads holds far fewer), and small next to the 4 GiB
/// that 4,096 connections × 1,024 calls × 1 MiB could otherwise pin.
pub const DEFAULT_IN_FLIGHT_BYTES: usize = 256 << 20;

/// Bytes in flight across every connection of one server, bounded.
#[derive(Debug)]
pub struct InFlightBudget {
    sem: Arc<Semaphore>,
    /// Permits in all.
    units: usize,
    /// Most permits ever taken at once.
    peak: AtomicUsize,
}

/// Bytes reserved in an [`InFlightBudget`]; given back on drop.
#[derive(Debug)]
pub(crate) struct Charge(OwnedSemaphorePermit);

impl InFlightBudget {
    /// A budget of `bytes` (rounded up to whole KiB, at least one).
    pub fn new(bytes: usize) -> Arc<Self> {
        let units = bytes.div_ceil(BUDGET_UNIT).clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(InFlightBudget {
            sem: Arc::new(Semaphore::new(units)),
            units,
            peak: AtomicUsize::new(0),
        })
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.units * BUDGET_UNIT
    }

    /// Bytes reserved now (whole KiB per record or reply).
    pub fn in_use(&self) -> usize {
        self.units.saturating_sub(self.sem.available_permits()) * BUDGET_UNIT
    }

    /// The most bytes ever reserved at once: never above [`InFlightBudget::limit`].
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed) * BUDGET_UNIT
    }

    /// Permits for `bytes`: whole KiB, at least one, at most all of them (so a record
    /// larger than the budget is admitted once it has the budget to itself).
    fn units_for(&self, bytes: usize) -> u32 {
        let n = bytes.div_ceil(BUDGET_UNIT).clamp(1, self.units);
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn note_peak(&self) {
        self.peak.fetch_max(
            self.units.saturating_sub(self.sem.available_permits()),
            Ordering::Relaxed,
        );
    }

    /// Reserve `bytes`, waiting while the budget is used up. Cancel-safe: a dropped
    /// wait reserves nothing. `None` only if the budget was closed (it never is).
    pub(crate) async fn reserve(self: Arc<Self>, bytes: usize) -> Option<Charge> {
        let permit = self
            .sem
            .clone()
            .acquire_many_owned(self.units_for(bytes))
            .await
            .ok()?;
        self.note_peak();
        Some(Charge(permit))
    }

    /// Reserve `bytes` if they are free now. A queued [`InFlightBudget::reserve`] gets
    /// permits given back before they are free again, so this never overtakes one.
    pub(crate) fn try_reserve(&self, bytes: usize) -> Option<Charge> {
        let permit = self
            .sem
            .clone()
            .try_acquire_many_owned(self.units_for(bytes))
            .ok()?;
        self.note_peak();
        Some(Charge(permit))
    }

    /// Make `charge` cover `bytes`: give back what it holds beyond them, or take the
    /// difference if it is free right now. `None` when the difference is not free:
    /// the charge has been given back, and the caller must [`InFlightBudget::reserve`]
    /// the whole amount (waiting while holding nothing, so no wait cycle forms).
    pub(crate) fn resize(&self, mut charge: Charge, bytes: usize) -> Option<Charge> {
        let want = self.units_for(bytes) as usize;
        let have = charge.0.num_permits();
        if want <= have {
            drop(charge.0.split(have - want));
            return Some(charge);
        }
        let more = u32::try_from(want - have).unwrap_or(u32::MAX);
        match self.sem.clone().try_acquire_many_owned(more) {
            Ok(extra) => {
                charge.0.merge(extra);
                self.note_peak();
                Some(charge)
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn charges_are_whole_kib_bounded_and_given_back() {
        let b = InFlightBudget::new(10 * BUDGET_UNIT);
        assert_eq!(b.limit(), 10 * BUDGET_UNIT);
        let a = b.clone().reserve(1).await.expect("charge");
        assert_eq!(b.in_use(), BUDGET_UNIT);
        // Larger than the budget: admitted with all of it once alone.
        let wait = tokio::spawn(b.clone().reserve(100 * BUDGET_UNIT));
        tokio::task::yield_now().await;
        assert!(!wait.is_finished());
        drop(a);
        let big = wait.await.expect("joined").expect("charge");
        assert_eq!(b.in_use(), b.limit());
        // Shrunk to a reply of 3 KiB.
        let small = b.resize(big, 3 * BUDGET_UNIT).expect("shrinks");
        assert_eq!(b.in_use(), 3 * BUDGET_UNIT);
        // Grown while free; not while taken.
        let grown = b.resize(small, 8 * BUDGET_UNIT).expect("free");
        let other = b.clone().reserve(2 * BUDGET_UNIT).await.expect("charge");
        assert!(b.resize(grown, 9 * BUDGET_UNIT).is_none());
        assert_eq!(
            b.in_use(),
            2 * BUDGET_UNIT,
            "the refused charge was given back"
        );
        drop(other);
        assert_eq!(b.in_use(), 0);
        assert_eq!(b.peak(), b.limit());
    }
}
