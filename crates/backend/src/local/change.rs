//! The NFSv4 `change` attribute of local files: the ctime in nanoseconds, moved forward
//! by an in-memory counter so that it differs after every mutation and never goes back.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Capacity of the change-counter table before old entries are dropped.
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
/// and report their ctime.
#[derive(Default)]
pub(super) struct ChangeTable {
    map: HashMap<u64, ChangeEntry>,
}

impl ChangeTable {
    pub(super) fn value(&mut self, fileid: u64, ctime: u64, mutated: bool) -> u64 {
        let next = match self.map.get(&fileid) {
            None if !mutated => return ctime,
            // The unrecorded ctime may have been handed out already (a directory's
            // `before`), and a coarse ctime may not have moved: go past it.
            None => ctime + 1,
            Some(e) if e.ctime == ctime && !mutated => return e.change,
            Some(e) if e.ctime == ctime => e.change + 1,
            Some(e) => ctime.max(e.change + 1),
        };
        if self.map.len() >= CHANGE_TABLE_CAP && !self.map.contains_key(&fileid) {
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

    /// Drops entries that equal their ctime and are old enough that any later mutation
    /// gets a larger ctime anyway; entries bumped past their ctime are kept (dropping them
    /// would let the value go back).
    pub(super) fn trim(&mut self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let horizon = now.saturating_sub(2_000_000_000);
        self.map
            .retain(|_, e| e.change != e.ctime || e.ctime >= horizon);
        if self.map.len() >= CHANGE_TABLE_CAP {
            self.map.retain(|_, e| e.change != e.ctime);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_values_move_and_hold() {
        let mut t = ChangeTable {
            map: HashMap::new(),
        };
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
}
