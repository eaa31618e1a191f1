//! The NFSv4 `change` attribute of local files: the ctime in nanoseconds, moved forward
//! by an in-memory counter so that it differs after every mutation and never goes back.
//!
//! A file's ctime is coarse (one kernel tick on Linux 6.1), so two mutations within a
//! tick leave it unchanged; the table then hands out `ctime + k`. Such a bumped entry
//! cannot simply be forgotten, since the file would then report its ctime, a smaller
//! value. The table is bounded all the same: when it is full, it forgets the oldest
//! half and remembers a *floor* — the largest value it forgot — below which it will
//! never answer for a file whose ctime is at or after the oldest ctime it forgot. A file
//! in that window may see one spurious change (its value jumps to the floor), which only
//! costs a client a cache refresh; no file ever sees its value go back. Each trim
//! removes half of the table, so a mutation costs amortised O(1), however many files a
//! run creates.

use foldhash::{HashMap, HashMapExt};

/// Capacity of the change-counter table.
const CHANGE_TABLE_CAP: usize = 65536;

#[derive(Clone, Copy)]
struct ChangeEntry {
    /// ctime (ns) seen when `change` was last computed
    ctime: u64,
    /// last change value handed out
    change: u64,
}

/// Per-file `change` values: ctime in ns, moved past the last value whenever the file is
/// mutated through the backend or its ctime moves, so it differs after each mutation and
/// never goes back during a run. Files never mutated through the backend have no entry
/// and report their ctime (or the floor, see the module comment).
pub(super) struct ChangeTable {
    map: HashMap<u64, ChangeEntry>,
    cap: usize,
    /// The largest value forgotten by a trim, and the oldest ctime it was for: a file
    /// without an entry whose ctime is at least `floor_from` reports at least `floor`.
    floor: u64,
    floor_from: u64,
}

impl Default for ChangeTable {
    fn default() -> Self {
        ChangeTable::with_capacity(CHANGE_TABLE_CAP)
    }
}

impl ChangeTable {
    pub(super) fn with_capacity(cap: usize) -> Self {
        ChangeTable {
            map: HashMap::new(),
            cap: cap.max(2),
            floor: 0,
            floor_from: u64::MAX,
        }
    }

    /// What a file without an entry reports.
    fn unrecorded(&self, ctime: u64) -> u64 {
        if ctime >= self.floor_from {
            ctime.max(self.floor)
        } else {
            ctime
        }
    }

    pub(super) fn value(&mut self, fileid: u64, ctime: u64, mutated: bool) -> u64 {
        let next = match self.map.get(&fileid) {
            None if !mutated => return self.unrecorded(ctime),
            // The unrecorded value may have been handed out already (a directory's
            // `before`), and a coarse ctime may not have moved: go past it.
            None => self.unrecorded(ctime) + 1,
            Some(e) if e.ctime == ctime && !mutated => return e.change,
            Some(e) if e.ctime == ctime => e.change + 1,
            Some(e) => ctime.max(e.change + 1),
        };
        if self.map.len() >= self.cap && !self.map.contains_key(&fileid) {
            self.trim();
        }
        self.map.insert(
            fileid,
            ChangeEntry {
                ctime,
                change: next,
            },
        );
        next
    }

    /// Forget the oldest half of the table (by value handed out), raising the floor to
    /// what it forgot.
    fn trim(&mut self) {
        let keep = self.cap / 2;
        let mut by_age: Vec<(u64, u64)> = self.map.iter().map(|(k, e)| (e.change, *k)).collect();
        let forget = by_age.len().saturating_sub(keep);
        if forget == 0 {
            return;
        }
        by_age.select_nth_unstable(forget - 1);
        for &(_, fileid) in &by_age[..forget] {
            if let Some(e) = self.map.remove(&fileid) {
                self.floor = self.floor.max(e.change);
                self.floor_from = self.floor_from.min(e.ctime);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn change_values_move_and_hold() {
        let mut t = ChangeTable::default();
        assert_eq!(t.value(1, 100, false), 100);
        // a mutation within the same ctime tick still moves past what was handed out
        assert_eq!(t.value(1, 100, true), 101);
        assert_eq!(t.value(1, 100, true), 102);
        assert_eq!(t.value(1, 100, false), 102);
        assert_eq!(t.value(1, 100, true), 103);
        // ctime moved but not past the counter: still forward
        assert_eq!(t.value(1, 101, false), 104);
        assert_eq!(t.value(1, 500, false), 500);
        // ctime set back (e.g. restored file): never backwards
        assert_eq!(t.value(1, 50, false), 501);
        assert_eq!(t.value(2, 7, false), 7);
    }

    /// The collapse seen in `bench compare create` (ADR 0013): with every entry bumped
    /// past its ctime, a trim that only drops unbumped entries drops nothing and
    /// rescans the whole table on every new file. The table stays within its capacity
    /// and a forgotten file still never goes back.
    #[test]
    fn bounded_when_every_entry_is_bumped() {
        let mut t = ChangeTable::with_capacity(1024);
        for f in 0..100_000u64 {
            // all created within one coarse tick: every entry is ctime + 1
            assert!(t.value(f, 1_000, true) > 1_000);
            assert!(t.len() <= 1024);
        }
        // file 0 was forgotten long ago: it reports the floor, not its ctime
        assert!(t.value(0, 1_000, false) >= 1_001);
    }

    proptest! {
        /// Whatever the order of mutations and ctime moves, and however small the table,
        /// a file's value never goes back and moves on every mutation.
        #[test]
        fn monotone_per_file_under_trimming(
            events in proptest::collection::vec((0u64..40, 0u64..3, any::<bool>()), 1..600),
            cap in 2usize..16,
        ) {
            let mut t = ChangeTable::with_capacity(cap);
            let mut ctime = std::collections::HashMap::new();
            let mut last = std::collections::HashMap::new();
            for (file, tick, mutated) in events {
                // ctime only moves forward, and often not at all (coarse clock)
                let c = ctime.entry(file).or_insert(1_000u64);
                *c += tick * 1_000;
                let v = t.value(file, *c, mutated);
                if let Some(&prev) = last.get(&file) {
                    prop_assert!(v >= prev, "file {file} went back: {prev} -> {v}");
                    if mutated {
                        prop_assert!(v > prev, "file {file} mutated but stayed at {v}");
                    }
                }
                last.insert(file, v);
                prop_assert!(t.len() <= cap);
            }
        }
    }
}
