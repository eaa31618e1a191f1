//! The NFSv4.1 state core (RFC 8881 §2.4, §2.10, §8, §9): clients, sessions with
//! their slot tables and reply caches, leases, the grace period, opens and
//! byte-range locks, with room for delegations and layouts.
//!
//! Sans-IO (ADR 0008): no wire types, no sockets, no files, no clock reads. Every
//! event carries a `now` from a [`clock::Clock`]; decisions come back as results
//! plus [`Effect`]s that the server executes (persist the client list, log a
//! released client, and — reserved — send a callback, revoke a state, wake a
//! waiter).
//!
//! | module        | what                                                        |
//! |---------------|-------------------------------------------------------------|
//! | [`core`]      | [`StateCore`]: the one owner; cross-table decisions, `tick` |
//! | [`session`]   | client records, sessions, EXCHANGE_ID/CREATE_SESSION/SEQUENCE |
//! | [`slots`]     | a session's slot table and reply cache                      |
//! | [`grace`]     | the grace period after a restart                            |
//! | [`table`]     | [`StateTable`]: opens, share reservations, locks, stateids  |
//! | [`effect`]    | [`Effect`] and the reserved callback/waiter types           |
//! | [`clock`]     | [`clock::Clock`], `SystemClock`, `ManualClock`              |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod core;
pub mod effect;
pub mod grace;
mod range;
pub mod session;
pub mod slots;
pub mod table;
mod types;

pub use crate::core::{CoreConfig, StateCore};
pub use effect::{Callback, ClientList, Effect, ReleaseReason, StateKind, WaiterId};
pub use grace::{Grace, GraceEnd};
pub use table::StateTable;
pub use types::*;
