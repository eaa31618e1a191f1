//! Clients, sessions and slots live in the state core (`txnfs_state`, ADR 0008); this
//! module re-exports them as `crate::session::{ClientId, Session, ...}`.

pub use txnfs_state::session::*;
pub use txnfs_state::ClientId;
