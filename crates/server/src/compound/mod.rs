//! The COMPOUND executor (RFC 8881 §2.10.6, §15.2, §16.2): a loop over the op table
//! (`optable`, ADR 0007).
//!
//! The request is decoded once ([`Request`], which placement reads too). Per op
//! (`exec.rs`, one named step each): check the table's rules (SEQUENCE first, session-less ops alone,
//! NOTSUPP, NOFILEHANDLE), and for an op that modifies state check *before* running it
//! that its reply bound fits what is left of the reply (REP_TOO_BIG) and, when the
//! client asked for caching, of the reply cache (REP_TOO_BIG_TO_CACHE): an op that
//! changed state must never be reported as failed. Then run the handler, apply the op's
//! current-stateid rule, and encode the result straight into the reply buffer, so the
//! other ops are checked on real bytes. Stops at the first failing op. The reply is
//! what the slot's reply cache stores.

mod exec;
pub mod optable;
pub(crate) mod payload;

pub use crate::cstate::Compound;
pub use crate::errors::{OpError, OpResult};
pub use crate::fh::{Fh, ObjFh};
pub use exec::Request;

use crate::nfs::{nfs_resop4, nfsstat4};
use crate::placement::WaitClock;
use crate::server::Server;
use crate::txnspan::TxnProc;
use bytes::{BufMut, Bytes, BytesMut};
use txnfs_backend::Creds;
use txnfs_xdr::{Gathered, XdrError};

/// Reasons the whole call is rejected at the RPC level.
#[derive(Debug, thiserror::Error)]
pub enum CompoundError {
    #[error("COMPOUND header does not decode: {0}")]
    Garbage(#[from] XdrError),
}

const MAX_TAG: usize = 1024;

/// Execute one COMPOUND and return the encoded COMPOUND4res.
pub fn execute(srv: &Server, creds: Creds, conn: u64, args: Bytes) -> Result<Bytes, CompoundError> {
    execute_as(srv, creds, conn, args, false)
}

/// Execute one COMPOUND, as a transaction when `txn` (procedure
/// [`txnfs_proto::PROC_TXN_COMPOUND`]), and return the encoded COMPOUND4res.
pub fn execute_as(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    txn: bool,
) -> Result<Bytes, CompoundError> {
    let proc = if txn { TxnProc::Whole } else { TxnProc::Plain };
    execute_proc(srv, creds, conn, args, proc)
}

/// Execute one COMPOUND of RPC procedure `proc` (plain, a transaction, or a part of
/// one: `crate::txnspan`) and return the encoded COMPOUND4res.
///
/// A panicking handler fails its op with NFS4ERR_SERVERFAULT and the COMPOUND ends
/// there as after any failing op (`crate::panics`, ADR 0029). A panic elsewhere in the
/// executor (SEQUENCE, the end of the COMPOUND) is caught here as a backstop: the
/// answer is a COMPOUND4res of status NFS4ERR_SERVERFAULT with no results, and the
/// slot its SEQUENCE opened is completed without a cached reply ([`OpenSlot`]).
pub fn execute_proc(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    proc: TxnProc,
) -> Result<Bytes, CompoundError> {
    execute_timed(srv, creds, conn, args, proc, &WaitClock::default())
}

/// [`execute_proc`], adding the time the COMPOUND spent waiting for others to `waited`.
pub fn execute_timed(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    proc: TxnProc,
    waited: &WaitClock,
) -> Result<Bytes, CompoundError> {
    // In one buffer for callers in this process (tests, the simulation).
    Ok(execute_request(srv, creds, conn, Request::decode(args)?, proc, waited).to_bytes())
}

/// Runs a decoded COMPOUND ([`Request::decode`]) of procedure `proc` from a caller in
/// this process (as one on the loopback interface): see [`execute_proc`].
pub fn execute_request(
    srv: &Server,
    creds: Creds,
    conn: u64,
    req: Request,
    proc: TxnProc,
    waited: &WaitClock,
) -> Gathered {
    let caller = crate::exportrules::Caller::local();
    execute_request_from(srv, caller, creds, conn, req, proc, waited)
}

/// [`execute_request`] for `caller`, whom the export rules judge (ADR 0043). The
/// reply's file data is a part of its own, shared with the backend's buffer (ADR 0052).
pub fn execute_request_from(
    srv: &Server,
    caller: crate::exportrules::Caller,
    creds: Creds,
    conn: u64,
    req: Request,
    proc: TxnProc,
    waited: &WaitClock,
) -> Gathered {
    let tag = req.tag().clone();
    #[cfg(feature = "fault-injection")]
    srv.faults.before_compound();
    crate::panics::catch(
        srv,
        || "COMPOUND",
        || exec::run(srv, caller, creds, conn, req, proc, waited),
    )
    .unwrap_or_else(|crate::panics::Panicked| serverfault_reply(&tag).into())
}

/// A COMPOUND4res of status NFS4ERR_SERVERFAULT, with the request's tag and no
/// results (the executor's backstop after a panic outside any handler).
fn serverfault_reply(tag: &Bytes) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + tag.len());
    out.put_i32(nfsstat4::NFS4ERR_SERVERFAULT as i32);
    txnfs_xdr::put_opaque(&mut out, tag);
    out.put_u32(0);
    out.freeze()
}

impl Compound<'_> {
    /// The reply size limit of this compound (negotiated max response or server max).
    fn reply_left_total(&self) -> usize {
        match &self.session {
            Some(s) => s.fore.max_response as usize,
            None => self.srv.limits.max_response as usize,
        }
    }

    /// Apply a successful op's effect on the current stateid (RFC 8881 §16.2.3.1.2).
    pub(crate) fn apply_stateid_rule(&mut self, rule: optable::CurrentStateid, res: &nfs_resop4) {
        use optable::CurrentStateid as S;
        match rule {
            S::Keeps => {}
            S::Clears => self.cur_sid = None,
            S::Sets(returned) => self.cur_sid = returned(res),
            S::Saves => self.saved_sid = self.cur_sid.clone(),
            S::Restores => self.cur_sid = self.saved_sid.clone(),
        }
    }
}
