//! The NFSv3 program (100003 version 3) as the RPC service calls it: the procedure's
//! row (`procs`), the duplicate request cache for procedures that are not idempotent
//! (`drc`), then the procedure run where `crate::placement` puts it — inline on the
//! transport thread or once handed to the blocking pool, as a v4 COMPOUND would be —
//! with a [`Compound`] as its execution state: the same backend scope (`OpCtx`,
//! `begin_compound`/`end_compound`), clock and wait clock the v4 ops use, with no
//! session and no client (a v3 caller is nobody's v4 client, so every v4 delegation
//! that conflicts with it is recalled).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use txnfs_backend::Creds;
use txnfs_proto::nfs3::nfsstat3;
use txnfs_rpc::{CallInfo, ReplyBody};
use txnfs_xdr::{Gathered, XdrError};

use crate::cstate::Compound;
use crate::placement::{MetadataPace, WaitClock};
use crate::server::Server;
use crate::v3::drc::{Begin, Drc, DrcKey};
use crate::v3::procs::{proc3, Proc3};

/// What the v3 front end keeps besides the server: its reply cache.
pub struct V3 {
    pub drc: Drc,
}

impl V3 {
    pub fn new() -> Self {
        V3 {
            drc: Drc::new(Default::default()),
        }
    }
}

impl Default for V3 {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs one v3 call. `transactions`: whether a transaction is running or open, so
/// the call may meet its locks (ADR 0033). `caller` and `creds`: who calls, as the
/// export rules judge it (ADR 0043), and the identity it claims.
#[allow(clippy::too_many_arguments)]
pub async fn call(
    v3: &Arc<V3>,
    server: &Arc<Server>,
    pace: &Arc<MetadataPace>,
    transactions: bool,
    caller: crate::exportrules::Caller,
    creds: Creds,
    info: CallInfo,
    args: Bytes,
) -> ReplyBody {
    let Some(proc) = proc3(info.proc_num) else {
        return ReplyBody::ProcUnavail;
    };
    let key = match admit(v3, proc, &info, &args) {
        Ok(key) => key,
        Err(answer) => return answer,
    };
    // Forgets the cache entry unless the call is answered (a panic, a cancelled task).
    let mut pending = Pending { v3, key };
    let blocking = crate::placement::with_truncation((proc.blocking)(&args), info.alone, || {
        super::procs::truncates_a_file(server, info.proc_num, &args)
    });
    let blocking = crate::placement::needs_pool(blocking, false, transactions);
    let run = {
        let server = server.clone();
        let pace = pace.clone();
        let conn = info.conn_id;
        let proc_num = info.proc_num;
        move || {
            let started = Instant::now();
            let waited = WaitClock::default();
            let r = execute_from(&server, caller, creds, conn, proc, args, &waited);
            let took = started.elapsed();
            pace.record(blocking, took.saturating_sub(waited.total()));
            // Every v3 result begins with its nfsstat3 (NULL's is empty: OK).
            let status = match &r {
                Ok(Ok(reply)) => crate::errors::status_word(&reply.prefix(4), 0).unwrap_or(0),
                _ => nfsstat3::NFS3ERR_SERVERFAULT as i32,
            };
            server.metrics.v3_proc(proc_num, took, status);
            r
        }
    };
    let result = match pace.place(blocking, info.alone) {
        Some(_inline) => Ok(crate::waitmode::on_reader(info.alone, run)),
        None => tokio::task::spawn_blocking(|| crate::waitmode::on_blocking_pool(run)).await,
    };
    match result {
        Ok(Ok(Ok(reply))) => {
            // Only procedures that are not idempotent are cached (not READ): their
            // replies are one part, shared, not copied.
            if pending.key.is_some() {
                pending.answered(reply.to_bytes());
            }
            ReplyBody::SuccessParts(reply)
        }
        Ok(Ok(Err(e))) => {
            tracing::debug!(peer = %info.peer, procedure = proc.name, "{e}");
            ReplyBody::GarbageArgs
        }
        Ok(Err(crate::panics::Panicked)) => ReplyBody::SystemErr,
        Err(e) => {
            tracing::error!(peer = %info.peer, "v3 task failed: {e}");
            ReplyBody::SystemErr
        }
    }
}

/// The reply cache's say on a call (ADR 0039): run it (with its cache key when its
/// reply is to be kept), or answer it now — from the cache, or not at all while its
/// first transmission runs.
fn admit(
    v3: &V3,
    proc: &Proc3,
    info: &CallInfo,
    args: &Bytes,
) -> Result<Option<DrcKey>, ReplyBody> {
    if !proc.cached {
        return Ok(None);
    }
    let key = DrcKey::new(
        info.xid,
        info.peer.ip(),
        info.prog,
        info.vers,
        info.proc_num,
        args,
    );
    match v3.drc.begin(key, Instant::now()) {
        Begin::New => Ok(Some(key)),
        Begin::InProgress => {
            tracing::debug!(peer = %info.peer, xid = info.xid, "v3 retransmission of a running call dropped");
            Err(ReplyBody::Drop)
        }
        Begin::Replay(reply) => {
            tracing::debug!(peer = %info.peer, xid = info.xid, "v3 retransmission answered from the reply cache");
            Err(ReplyBody::Success(reply))
        }
    }
}

/// A cached procedure's entry until its reply is known.
struct Pending<'a> {
    v3: &'a V3,
    key: Option<DrcKey>,
}

impl Pending<'_> {
    fn answered(&mut self, reply: Bytes) {
        if let Some(key) = self.key.take() {
            self.v3.drc.finish(key, Some(reply));
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.v3.drc.finish(key, None);
        }
    }
}

/// Runs procedure `proc` in a fresh execution state and ends its backend scope
/// (`ok`: the procedure succeeded). A panic is one failed call (ADR 0029).
pub fn execute(
    srv: &Server,
    creds: Creds,
    conn: u64,
    proc: &Proc3,
    args: Bytes,
    waited: &WaitClock,
) -> Result<Result<Gathered, XdrError>, crate::panics::Panicked> {
    let caller = crate::exportrules::Caller::local();
    execute_from(srv, caller, creds, conn, proc, args, waited)
}

/// [`execute`] for `caller`, whom the export rules judge (ADR 0043).
pub fn execute_from(
    srv: &Server,
    caller: crate::exportrules::Caller,
    creds: Creds,
    conn: u64,
    proc: &Proc3,
    args: Bytes,
    waited: &WaitClock,
) -> Result<Result<Gathered, XdrError>, crate::panics::Panicked> {
    crate::panics::catch(
        srv,
        || proc.name,
        || {
            let mut c = Compound::start(srv, creds, conn, 0, false, waited);
            c.caller = caller;
            let r = (proc.run)(&mut c, args);
            let ok = matches!(r, Ok((_, nfsstat3::NFS3_OK)));
            if let Err(e) = c.scope.finish(ok) {
                // Only a transaction's commit fails here, and v3 runs none.
                tracing::warn!(
                    procedure = proc.name,
                    "ending the backend scope failed: {e}"
                );
            }
            r.map(|(reply, _)| reply)
        },
    )
}
