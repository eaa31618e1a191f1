//! The state of one COMPOUND while it executes (Linux: `nfsd4_compound_state`): the
//! current and saved filehandles and stateids, the session and client of its
//! SEQUENCE, what is left of the reply, and the backend scope. Every op handler
//! (`crate::ops`) takes it; the executor (`crate::compound`) makes it.

use std::sync::Arc;
use std::time::Instant;

use txnfs_backend::Creds;

use crate::fh::{Fh, ObjFh};
use crate::nfs::{nfsstat4, stateid4};
use crate::server::Server;
use crate::session::{ClientId, Session};

/// Per-request execution state.
pub struct Compound<'a> {
    pub srv: &'a Server,
    /// The identity ops act as: the caller's, squashed by the rules of the export of
    /// the current filehandle (`crate::access`).
    pub creds: Creds,
    /// The identity the request claimed (before any squashing).
    pub rpc_creds: Creds,
    /// Who sent the request, for the export rules (in-process callers: loopback).
    pub caller: crate::exportrules::Caller,
    pub conn: u64,
    pub cfh: Option<Fh>,
    pub sfh: Option<Fh>,
    /// The current filehandle was put by a put-filehandle op whose NFS4ERR_WRONGSEC
    /// RFC 8881 §2.6.3.1.1 defers (the op after it may ask SECINFO, look up a parent,
    /// save it, or put another one): the caller was not admitted to its export, and
    /// every op but those gets NFS4ERR_WRONGSEC (`crate::compound::exec::runnable`).
    pub cfh_wrongsec: bool,
    /// The same for the saved filehandle (SAVEFH of such a current filehandle).
    pub sfh_wrongsec: bool,
    /// Whether the op after the running one lets a put-filehandle op defer its
    /// NFS4ERR_WRONGSEC (set by the v4.1+ executor before each op; v4.0 never defers).
    pub next_defers_wrongsec: bool,
    pub cur_sid: Option<stateid4>,
    pub saved_sid: Option<stateid4>,
    pub session: Option<Arc<Session>>,
    pub client: Option<ClientId>,
    pub minor: u32,
    /// Bytes still available in the reply (for sizing READ and READDIR).
    pub reply_left: usize,
    /// The running op may leave its data in a pipe (ADR 0065): set by the v4
    /// executors before each op, for the COMPOUND's last op when its reply is not kept
    /// for a retransmission and no transaction runs (v3 READ asks without it: its
    /// reply is never kept).
    pub may_pipe: bool,
    /// Data the running op left in a pipe: the executor encodes it as the reply's end.
    pub piped: Option<txnfs_xdr::Piped>,
    pub now: Instant,
    /// The backend side: OpCtx and begin/end_compound per touched export.
    pub scope: crate::export::CompoundScope,
    /// Opens this transactional COMPOUND created: closed if the transaction rolls back.
    pub txn_opens: Vec<(txnfs_state::Stateid, txnfs_state::FileId)>,
    /// Time spent waiting for others (recalls): not execution time (`crate::placement`).
    pub waited: &'a crate::placement::WaitClock,
}

impl<'a> Compound<'a> {
    /// A COMPOUND of `minor` (a transaction if `txn`; a v3 call runs as a plain one of
    /// minor 0) before its first op: no filehandles, no session yet, its waits for
    /// others counted in `waited`, the backends' included.
    pub fn start(
        srv: &'a Server,
        creds: Creds,
        conn: u64,
        minor: u32,
        txn: bool,
        waited: &'a crate::placement::WaitClock,
    ) -> Self {
        Compound {
            srv,
            rpc_creds: creds.clone(),
            caller: crate::exportrules::Caller::local(),
            creds,
            conn,
            cfh: None,
            sfh: None,
            cfh_wrongsec: false,
            sfh_wrongsec: false,
            next_defers_wrongsec: false,
            cur_sid: None,
            saved_sid: None,
            session: None,
            client: None,
            minor,
            reply_left: srv.limits.max_response as usize,
            may_pipe: false,
            piped: None,
            now: srv.clock.now(),
            scope: crate::export::CompoundScope::with_txn(&srv.exports, txn, waited.clone()),
            txn_opens: Vec::new(),
            waited,
        }
    }
}

impl Compound<'_> {
    pub fn cfh(&self) -> Result<&Fh, nfsstat4> {
        self.cfh.as_ref().ok_or(nfsstat4::NFS4ERR_NOFILEHANDLE)
    }

    /// The current filehandle as an object inside an export.
    pub fn cobj(&self) -> Result<&ObjFh, nfsstat4> {
        match self.cfh()? {
            Fh::Obj(o) => Ok(o),
            // Pseudo directories are read-only directories; callers that want an
            // object treat them as such.
            Fh::Pseudo(_) => Err(nfsstat4::NFS4ERR_ROFS),
        }
    }

    pub fn client(&self) -> Result<ClientId, nfsstat4> {
        // A v4.0 op names its client by a client id or stateid (`compound::exec::v40`).
        self.client.ok_or(if self.minor == 0 {
            nfsstat4::NFS4ERR_STALE_CLIENTID
        } else {
            nfsstat4::NFS4ERR_OP_NOT_IN_SESSION
        })
    }

    /// Resolve the "current stateid" special value (seqid 1, other all zero; RFC 8881
    /// §16.2.3.1.2; v4.1 and later only).
    pub fn resolve_sid(&self, sid: &stateid4) -> Result<stateid4, nfsstat4> {
        if self.minor >= 1 && sid.seqid == 1 && sid.other == [0u8; 12] {
            self.cur_sid.clone().ok_or(nfsstat4::NFS4ERR_BAD_STATEID)
        } else {
            Ok(sid.clone())
        }
    }
}
