//! The NFSv4.1 state core (RFC 8881 §2.4, §2.10, §8, §9): clients, sessions with
//! their slot tables and reply caches, leases, the grace period, opens and
//! byte-range locks, and delegations.
//!
//! Sans-IO (ADR 0008): no wire types, no sockets, no files, no clock reads. Every
//! event carries a `now` from a [`clock::Clock`]; decisions come back as results
//! plus [`Effect`]s that the server executes (persist the client list, log a
//! released client, send a callback, report a revoked delegation, wake requests
//! held for a recall).
//!
//! | module        | what                                                        |
//! |---------------|-------------------------------------------------------------|
//! | [`core`]      | [`StateCore`]: the one owner; cross-table decisions, `tick` |
//! | [`session`]   | client records, sessions, EXCHANGE_ID/CREATE_SESSION/SEQUENCE |
//! | [`slots`]     | a session's slot table and reply cache                      |
//! | [`grace`]     | the grace period after a restart                            |
//! | [`table`]     | [`StateTable`]: opens, share reservations, locks, stateids  |
//! | [`deleg`]     | delegations: grant policy, recalls, revocation, counters    |
//! | [`effect`]    | [`Effect`] and the callbacks the server sends               |
//! | [`clock`]     | [`clock::Clock`], `SystemClock`, `ManualClock`              |
//! | [`v40`]       | NFSv4.0 open/lock-owner sequence ids and their replay cache |
//! | `invariants`  | [`StateCore::check_invariants`]: rechecked after a panic     |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod core;
pub mod deleg;
pub mod effect;
pub mod grace;
mod invariants;
mod range;
pub mod session;
pub mod slots;
pub mod table;
mod types;
pub mod v40;

pub use crate::core::{CoreConfig, NlmLock, StateCore};
pub use deleg::{
    Access, DelegLimits, DelegStats, DelegType, HoldOutcome, NoDeleg, RevokeReason, Want,
};
pub use effect::{Callback, ClientList, Effect, ReleaseReason};
pub use grace::{Grace, GraceEnd};
pub use invariants::InvariantViolation;
pub use table::{is_nlm_client, nlm_client, StateTable};
pub use types::*;
