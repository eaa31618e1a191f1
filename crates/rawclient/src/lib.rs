//! A raw NFS client for tests (NFSv4.1; NFSv3 in [`v3`]): every byte of every
//! COMPOUND is the caller's (slots, sequence ids, retransmissions of the same bytes). The server's protocol
//! tests, the transaction torture and the deterministic simulation all speak through
//! it (ADR 0034).
//!
//! The core is sans-IO: [`session`] frames COMPOUNDs (SEQUENCE on a slot of a
//! [`Slots`] table) and builds and reads the session setup (EXCHANGE_ID,
//! CREATE_SESSION); [`ops`] builds the other operations; [`reply`] decodes replies and
//! takes statuses, stateids and file handles out of them. The bytes go wherever the
//! caller sends them: the simulation hands them to the server's executor in process;
//! with the `tcp` feature, [`tcp`] sends them over `txnfs_rpc::RpcClient`, and [`v3`]
//! makes typed NFSv3 and MOUNT v3 calls (RFC 1813) with the xid under the caller's
//! control.

#![forbid(unsafe_code)]

pub mod ops;
pub mod reply;
pub mod session;
#[cfg(feature = "tcp")]
pub mod tcp;
#[cfg(feature = "tcp")]
pub mod v3;

pub use ops::*;
pub use reply::*;
pub use session::*;
