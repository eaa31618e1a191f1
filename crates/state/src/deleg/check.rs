//! The delegation table's invariants, rechecked after a request panicked while it
//! held the state core (ADR 0029).

use super::{DelegTable, DelegType, Phase};

impl DelegTable {
    /// Whether every file's live delegations are listed, are of that file, and agree:
    /// a write delegation is the only one on its file and no client holds two. The
    /// first disagreement found, in words.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (file, ids) in &self.by_file {
            let mut holders = Vec::with_capacity(ids.len());
            for id in ids {
                let Some(d) = self.delegs.get(id) else {
                    return Err(format!("file {file:#x} lists a missing delegation {id}"));
                };
                if d.file != *file {
                    return Err(format!(
                        "delegation {id} is listed under another file {file:#x}"
                    ));
                }
                if d.phase == Phase::Revoked {
                    continue;
                }
                if holders.iter().any(|(c, _)| *c == d.client) {
                    return Err(format!(
                        "file {file:#x}: client {} holds two delegations",
                        d.client
                    ));
                }
                holders.push((d.client, d.kind));
            }
            let writes = holders
                .iter()
                .filter(|(_, k)| *k == DelegType::Write)
                .count();
            if writes > 0 && holders.len() > 1 {
                return Err(format!(
                    "file {file:#x}: a write delegation coexists with others: {holders:?}"
                ));
            }
        }
        Ok(())
    }

    /// The clients that hold delegations (revoked ones included).
    pub(crate) fn clients_with_delegations(
        &self,
    ) -> impl Iterator<Item = crate::types::ClientId> + '_ {
        self.by_client
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(c, _)| *c)
    }
}
