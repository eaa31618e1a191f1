//! One durable append-only log for txnfs's durable files: the `txn` layer's journal
//! and the durable session store both use it (ADR 0032).
//!
//! - **Framing** ([`frame`], [`checksum`]): a record is `[len u32][FNV-1a-64 u64]
//!   [payload]`, after a header that belongs to the file's owner (magic, identity,
//!   generation: the log does not read it).
//! - **Recovery scan** ([`scan`]): reads records from the end of the header until the
//!   first torn or corrupt one, or one the owner refuses, and says where the valid
//!   prefix ends; [`Log::open`] cuts the tail off there and appends after it.
//! - **Appending and group commit** ([`Log`]): appends return a position ([`Lsn`]);
//!   [`Log::wait`] returns once it is on stable storage, one `fdatasync` covering every
//!   waiter whose record was appended before it. Records are written at once
//!   ([`Mode::WriteThrough`]: write-ahead records that must reach the page cache before
//!   their change) or by the leader of the group commit ([`Mode::Buffered`]).
//! - **Restart and replacement**: [`Log::restart`] writes a new header and appends after
//!   it (the journal's rewind); [`Log::replace`] swaps the whole file for a compacted
//!   one at the next group commit (the session store's compaction).
//! - **Payload codec** ([`Enc`], [`Dec`]): the one encoding of the records' fields
//!   (big-endian integers, length-prefixed byte strings).
//!
//! No file format is defined here beyond the frame: each owner keeps its magic and
//! header, so files written before this crate existed read the same.

#![forbid(unsafe_code)]

mod codec;
mod frame;
mod log;

pub use codec::{Dec, DecodeError, Enc};
pub use frame::{checksum, frame, framed_len, scan, Recovery, Tail, FRAME_HEADER, MAX_PAYLOAD};
pub use log::{Log, LogError, LogStats, Lsn, Mode};

#[cfg(test)]
mod tests;
