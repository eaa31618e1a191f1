//! The state table's own invariants, rechecked after a request panicked while it
//! held the state core (ADR 0029): the indexes agree with the states they index.

use super::{Kind, ShareCounts, StateTable};

impl StateTable {
    /// Whether the table's indexes and counters agree with its states: every state is
    /// listed under its client and its file, every listed id is a state of the right
    /// kind and file, a lock state's open exists, the counters match, and each file's
    /// share counters match its opens. The first disagreement found, in words.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (mut opens, mut lock_states) = (0usize, 0usize);
        for (id, st) in &self.states {
            let (client, file) = (st.common.client, st.common.file);
            if !self
                .clients
                .get(&client)
                .is_some_and(|c| c.states.contains(id))
            {
                return Err(format!(
                    "state {id} is not listed under its client {client}"
                ));
            }
            let Some(fs) = self.files.get(&file) else {
                return Err(format!(
                    "state {id} names file {file:#x}, which has no entry"
                ));
            };
            match &st.kind {
                Kind::Open(_) => {
                    opens += 1;
                    if !fs.opens.contains(id) {
                        return Err(format!("open {id} is not listed under file {file:#x}"));
                    }
                }
                Kind::Lock(l) => {
                    lock_states += 1;
                    if !fs.lock_states.contains(id) {
                        return Err(format!(
                            "lock state {id} is not listed under file {file:#x}"
                        ));
                    }
                    if !matches!(
                        self.states.get(&l.open).map(|o| &o.kind),
                        Some(Kind::Open(_))
                    ) {
                        return Err(format!(
                            "lock state {id} derives from a missing open {}",
                            l.open
                        ));
                    }
                }
            }
        }
        if opens != self.n_opens || lock_states != self.n_lock_states {
            return Err(format!(
                "counters say {} opens and {} lock states, the table holds {opens} and {lock_states}",
                self.n_opens, self.n_lock_states
            ));
        }
        for (client, cs) in &self.clients {
            if let Some(id) = cs.states.iter().find(|id| {
                self.states
                    .get(id)
                    .is_none_or(|st| st.common.client != *client)
            }) {
                return Err(format!(
                    "client {client} lists state {id}, which is not its own"
                ));
            }
        }
        for (file, fs) in &self.files {
            let mut share = ShareCounts::default();
            for id in &fs.opens {
                match self.states.get(id) {
                    Some(st) if st.common.file == *file => match &st.kind {
                        Kind::Open(o) => share.add(o.access, o.deny),
                        Kind::Lock(_) => {
                            return Err(format!("file {file:#x} lists lock state {id} as an open"))
                        }
                    },
                    _ => return Err(format!("file {file:#x} lists a missing open {id}")),
                }
            }
            if let Some(id) = fs
                .lock_states
                .iter()
                .chain(&fs.holders)
                .find(|id| self.states.get(id).is_none_or(|st| st.common.file != *file))
            {
                return Err(format!("file {file:#x} lists a missing lock state {id}"));
            }
            let c = fs.share;
            if (c.access_read, c.access_write, c.deny_read, c.deny_write)
                != (
                    share.access_read,
                    share.access_write,
                    share.deny_read,
                    share.deny_write,
                )
            {
                return Err(format!(
                    "file {file:#x}: share counters {c:?} disagree with its opens {share:?}"
                ));
            }
        }
        Ok(())
    }

    /// The clients that hold states.
    pub(crate) fn clients_with_state(&self) -> impl Iterator<Item = crate::types::ClientId> + '_ {
        self.clients
            .iter()
            .filter(|(_, c)| !c.states.is_empty())
            .map(|(id, _)| *id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StateLimits;

    #[test]
    fn a_consistent_table_passes_and_a_broken_one_is_named() {
        let mut t = StateTable::new(7, StateLimits::default());
        assert_eq!(t.check_invariants(), Ok(()));
        let a = t.open(1, b"a", 10, 3, 0).expect("open");
        t.open(2, b"b", 10, 1, 0).expect("open");
        t.open(2, b"b", 11, 1, 2).expect("open");
        assert_eq!(t.check_invariants(), Ok(()));
        t.close(1, &a, 10).expect("close");
        assert_eq!(t.check_invariants(), Ok(()));

        // What a handler panicking half-way through an update could leave behind.
        t.n_opens += 1;
        assert!(t.check_invariants().is_err_and(|e| e.contains("counters")));
        t.n_opens -= 1;
        if let Some(fs) = t.files.get_mut(&10) {
            fs.share.access_write += 1;
        }
        assert!(t
            .check_invariants()
            .is_err_and(|e| e.contains("share counters")));
    }
}
