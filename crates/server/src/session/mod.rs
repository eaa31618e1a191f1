//! Clients, sessions and slots live in the state core (`txnfs_state`, ADR 0008); this
//! module re-exports them as `crate::session::{ClientId, Session, ...}`.

pub use txnfs_state::session::*;
pub use txnfs_state::ClientId;

/// A session id as logs show it: 32 hex digits (as Wireshark shows them), not an
/// array of 16 numbers.
pub struct Hex<'a>(pub &'a SessionId);

impl std::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_ids_are_logged_in_hex() {
        let id = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0xab];
        assert_eq!(
            super::Hex(&id).to_string(),
            "000000010000000200000001000000ab"
        );
    }
}
