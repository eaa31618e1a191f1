//! The simulation's side of the shared raw client (`txnfs_rawclient`, ADR 0034): its
//! sans-IO half only (the bytes go to the server's executor in process, through
//! [`crate::server_port`]), with the simulation's tag and session shape.

use bytes::Bytes;
use txnfs_proto::nfs4::{clientid4, nfs_argop4};
pub use txnfs_rawclient::*;

/// The COMPOUND tag of every simulated request.
pub const TAG: &[u8] = b"sim";

/// Ops the simulation allows per COMPOUND on either channel.
const MAX_OPS: u32 = 64;

/// COMPOUND args (NFSv4.1) of `ops`, unframed (session setup).
pub fn compound(ops: Vec<nfs_argop4>) -> Bytes {
    txnfs_rawclient::compound(TAG, 1, ops)
}

/// CREATE_SESSION with `slots` fore-channel slots and one back-channel slot; with
/// `back_chan` the connection is also the session's back channel.
pub fn create_session(clientid: clientid4, seq: u32, slots: u32, back_chan: bool) -> nfs_argop4 {
    create_session_for(
        clientid,
        seq,
        channel(MAX_OPS, slots),
        channel(MAX_OPS, 1),
        back_chan,
    )
}
