//! The state core's invariants as one check (ADR 0029): what the server rechecks
//! before it goes on with a core that a panicking request left behind.

use crate::core::StateCore;

/// An invariant of the state core that does not hold, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state core invariant violated: {0}")]
pub struct InvariantViolation(pub String);

impl StateCore {
    /// Whether the core is consistent: the open and lock table's indexes and counters
    /// agree with its states, the delegation table's per-file lists agree with its
    /// delegations (a write delegation alone on its file, one per client), and every
    /// client holding opens, locks or delegations is a known client. Linear in the
    /// size of the state: for rare moments (after a panic), not for every request.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.table()
            .check_invariants()
            .map_err(InvariantViolation)?;
        self.delegations()
            .check_invariants()
            .map_err(InvariantViolation)?;
        let sessions = self.sessions();
        if let Some(c) = self
            .table()
            .clients_with_state()
            .find(|c| !sessions.client_exists(*c) && !crate::table::is_nlm_client(*c))
        {
            return Err(InvariantViolation(format!(
                "client {c} holds opens or locks but is not a known client"
            )));
        }
        if let Some(c) = self
            .delegations()
            .clients_with_delegations()
            .find(|c| !sessions.client_exists(*c))
        {
            return Err(InvariantViolation(format!(
                "client {c} holds delegations but is not a known client"
            )));
        }
        Ok(())
    }
}
