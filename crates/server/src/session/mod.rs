//! Clients, sessions and slots live in the state core (`txnfs_state`, ADR 0008); this
//! re-export keeps `crate::session::{ClientId, Session}` paths working.

pub use txnfs_state::session::*;
pub use txnfs_state::ClientId;
