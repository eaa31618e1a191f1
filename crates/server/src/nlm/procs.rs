//! The NLM version 4 procedures (X/Open XNFS §10.14; knfsd's `fs/lockd/svc4proc.c`
//! answers the same way): TEST, LOCK, CANCEL, UNLOCK, their `_MSG` twins (the result
//! goes back as a `_RES` call to the caller's lockd), SHARE, UNSHARE, NM_LOCK and
//! FREE_ALL. GRANTED is a client's procedure: a server answers it NLM4_DENIED.
//!
//! Each runs on the blocking pool: resolving the v3 handle reads the backend, and a
//! LOCK recalls the v4 delegations of the file first (a delegation's holder may lock
//! locally), which may wait.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use txnfs_backend::{Creds, FileType};
use txnfs_proto::nfs3::{nfs_fh3, nfsstat3};
use txnfs_proto::nlm4::*;
use txnfs_rpc::{CallInfo, ReplyBody};
use txnfs_state::{
    is_nlm_client, nlm_client, Access, FileId, LockDenied, LockType, NlmLock, StateError,
    SHARE_ACCESS_BOTH,
};
use txnfs_xdr::{Decode, Encode, XdrError};

use super::blocked::Waiter;
use super::{nlm_len, owner_bytes, table_range};
use crate::cstate::Compound;
use crate::exportrules::Caller;
use crate::placement::WaitClock;
use crate::server::Server;

const NLM4_NULL: u32 = 0;
const NLM4_TEST: u32 = 1;
const NLM4_LOCK: u32 = 2;
const NLM4_CANCEL: u32 = 3;
const NLM4_UNLOCK: u32 = 4;
const NLM4_GRANTED: u32 = 5;
const NLM4_TEST_MSG: u32 = 6;
const NLM4_LOCK_MSG: u32 = 7;
const NLM4_CANCEL_MSG: u32 = 8;
const NLM4_UNLOCK_MSG: u32 = 9;
const NLM4_GRANTED_MSG: u32 = 10;
const NLM4_TEST_RES: u32 = 11;
const NLM4_GRANTED_RES: u32 = 15;
const NLM4_SHARE: u32 = 20;
const NLM4_UNSHARE: u32 = 21;
const NLM4_NM_LOCK: u32 = 22;
const NLM4_FREE_ALL: u32 = 23;
/// A `_MSG` procedure's result goes back as the procedure this much higher (`_RES`).
const MSG_TO_RES: u32 = 5;

/// What a procedure answers.
enum Answer {
    /// The reply's results.
    Reply(Bytes),
    /// An empty reply; then these results as a `_RES` call (procedure number) to the
    /// caller's lockd.
    Message(u32, Bytes),
}

/// Runs one NLM call.
pub async fn call(srv: &Arc<Server>, info: CallInfo, args: Bytes) -> ReplyBody {
    let p = info.proc_num;
    if p == NLM4_NULL {
        return ReplyBody::Success(Bytes::new());
    }
    if !matches!(p, NLM4_TEST..=NLM4_GRANTED_RES | NLM4_SHARE..=NLM4_FREE_ALL) {
        return ReplyBody::ProcUnavail;
    }
    let peer = info.peer.ip();
    // The export rules admit NLM callers as they admit NFSv3 ones (ADR 0043).
    let caller = crate::access::caller_of(srv, &info).await;
    let s = srv.clone();
    let run = move || {
        crate::panics::catch(
            &s,
            || "an NLM procedure",
            || crate::waitmode::on_blocking_pool(|| execute(&s, &caller, peer, p, args)),
        )
    };
    match tokio::task::spawn_blocking(run).await {
        Ok(Ok(Ok(Answer::Reply(r)))) => ReplyBody::Success(r),
        Ok(Ok(Ok(Answer::Message(res_proc, body)))) => {
            let port = srv.nlm.client_rpcbind_port();
            tokio::spawn(async move {
                let r = super::callback::call(
                    peer,
                    port,
                    super::NLM_PROGRAM,
                    super::NLM_V4,
                    res_proc,
                    body,
                )
                .await;
                if let Err(e) = r {
                    tracing::debug!(%peer, procedure = res_proc, "cannot send an NLM result: {e}");
                }
            });
            ReplyBody::Success(Bytes::new())
        }
        Ok(Ok(Err(e))) => {
            tracing::debug!(%peer, procedure = p, "NLM arguments: {e}");
            ReplyBody::GarbageArgs
        }
        Ok(Err(crate::panics::Panicked)) => ReplyBody::SystemErr,
        Err(e) => {
            tracing::error!(%peer, "NLM task failed: {e}");
            ReplyBody::SystemErr
        }
    }
}

fn execute(
    srv: &Server,
    caller: &Caller,
    peer: IpAddr,
    p: u32,
    args: Bytes,
) -> Result<Answer, XdrError> {
    let reply = |b: Bytes| Ok(Answer::Reply(b));
    match p {
        NLM4_TEST => reply(test(srv, caller, &nlm4_testargs::from_bytes(args)?).to_bytes()),
        NLM4_LOCK => {
            reply(lock(srv, caller, peer, &nlm4_lockargs::from_bytes(args)?, true).to_bytes())
        }
        NLM4_NM_LOCK => {
            reply(lock(srv, caller, peer, &nlm4_lockargs::from_bytes(args)?, false).to_bytes())
        }
        NLM4_CANCEL => reply(cancel(srv, caller, &nlm4_cancargs::from_bytes(args)?).to_bytes()),
        NLM4_UNLOCK => reply(unlock(srv, caller, &nlm4_unlockargs::from_bytes(args)?).to_bytes()),
        NLM4_GRANTED => reply(not_a_client(nlm4_testargs::from_bytes(args)?.cookie).to_bytes()),
        NLM4_TEST_MSG => {
            let res = test(srv, caller, &nlm4_testargs::from_bytes(args)?);
            Ok(Answer::Message(NLM4_TEST_RES, res.to_bytes()))
        }
        NLM4_LOCK_MSG | NLM4_CANCEL_MSG | NLM4_UNLOCK_MSG | NLM4_GRANTED_MSG => {
            let res = match p {
                NLM4_LOCK_MSG => lock(srv, caller, peer, &nlm4_lockargs::from_bytes(args)?, true),
                NLM4_CANCEL_MSG => cancel(srv, caller, &nlm4_cancargs::from_bytes(args)?),
                NLM4_UNLOCK_MSG => unlock(srv, caller, &nlm4_unlockargs::from_bytes(args)?),
                _ => not_a_client(nlm4_testargs::from_bytes(args)?.cookie),
            };
            Ok(Answer::Message(p + MSG_TO_RES, res.to_bytes()))
        }
        // Results of calls this server never makes (it sends the synchronous GRANTED).
        NLM4_TEST_RES..=NLM4_GRANTED_RES => reply(Bytes::new()),
        NLM4_SHARE | NLM4_UNSHARE => {
            let a = nlm4_shareargs::from_bytes(args)?;
            reply(share(srv, caller, peer, &a, p == NLM4_SHARE).to_bytes())
        }
        NLM4_FREE_ALL => {
            let a = nlm4_notify::from_bytes(args)?;
            release_hosts(srv, &a.name, None);
            reply(Bytes::new())
        }
        _ => reply(Bytes::new()),
    }
}

fn res(cookie: &Bytes, stat: nlm4_stats) -> nlm4_res {
    nlm4_res {
        cookie: cookie.clone(),
        stat: nlm4_stat { stat },
    }
}

fn not_a_client(cookie: Bytes) -> nlm4_res {
    res(&cookie, nlm4_stats::NLM4_DENIED)
}

/// The lock table's file of a v3 handle; with `recall`, after the v4 delegations of
/// it were recalled (an `Err` of `Ok` file: the recall did not end in time).
fn file_of(
    srv: &Server,
    caller: &Caller,
    fh: &Bytes,
    recall: bool,
) -> Result<(FileId, bool), nlm4_stats> {
    let waited = WaitClock::default();
    let mut c = Compound::start(srv, Creds::default(), 0, 0, false, &waited);
    c.caller = caller.clone();
    let r = resolve(&mut c, fh, recall);
    let _ = c.scope.finish(r.is_ok());
    r
}

fn resolve(c: &mut Compound, fh: &Bytes, recall: bool) -> Result<(FileId, bool), nlm4_stats> {
    let o = crate::v3::common::obj(c, &nfs_fh3 { data: fh.clone() }).map_err(status_of3)?;
    let attrs = crate::v3::common::getattr(c, &o).map_err(status_of3)?;
    if attrs.ftype != FileType::Regular {
        return Err(nlm4_stats::NLM4_FAILED);
    }
    let file = c.srv.state_file_id(&o.export, attrs.fileid);
    // The lock opens the file for reading and writing (the implicit open).
    let access = Access::Open {
        access: SHARE_ACCESS_BOTH,
        deny: 0,
    };
    let cleared = !recall || crate::ops::deleg::clear(c, &o, &attrs, access).is_ok();
    Ok((file, cleared))
}

fn status_of3(s: nfsstat3) -> nlm4_stats {
    match s {
        nfsstat3::NFS3ERR_STALE | nfsstat3::NFS3ERR_BADHANDLE => nlm4_stats::NLM4_STALE_FH,
        nfsstat3::NFS3ERR_ROFS => nlm4_stats::NLM4_ROFS,
        nfsstat3::NFS3ERR_FBIG => nlm4_stats::NLM4_FBIG,
        _ => nlm4_stats::NLM4_FAILED,
    }
}

/// The core's request for `l` by host `host`.
fn request(host: txnfs_state::ClientId, file: FileId, exclusive: bool, l: &nlm4_lock) -> NlmLock {
    let (offset, length) = table_range(l.l_offset, l.l_len);
    NlmLock {
        host,
        file,
        owner: owner_bytes(l.svid, &l.oh),
        lock_type: if exclusive {
            LockType::Write
        } else {
            LockType::Read
        },
        offset,
        length,
    }
}

/// A conflicting lock as NLM reports it: an NLM holder's `svid` and `oh` as it sent
/// them; a v4 holder's owner as `oh`, `svid` 0.
fn holder(d: &LockDenied) -> nlm4_holder {
    let o = &d.owner.owner;
    let (svid, oh) = match o.split_first_chunk::<4>() {
        Some((svid, oh)) if is_nlm_client(d.owner.client) => (i32::from_be_bytes(*svid), oh),
        _ => (0, &o[..]),
    };
    let oh = &oh[..oh.len().min(MAXNETOBJ_SZ as usize)];
    nlm4_holder {
        exclusive: d.lock_type == LockType::Write,
        svid,
        oh: Bytes::copy_from_slice(oh),
        l_offset: d.offset,
        l_len: nlm_len(d.length),
    }
}

/// The NLM status of a refusal by the state core.
fn status_of(e: &StateError) -> nlm4_stats {
    match e {
        StateError::Denied(_) | StateError::ShareDenied | StateError::OpenMode => {
            nlm4_stats::NLM4_DENIED
        }
        StateError::Grace | StateError::NoGrace => nlm4_stats::NLM4_DENIED_GRACE_PERIOD,
        StateError::Resource => nlm4_stats::NLM4_DENIED_NOLOCKS,
        _ => nlm4_stats::NLM4_FAILED,
    }
}

/// NLM4_TEST: would the lock be granted; if not, one lock in the way.
fn test(srv: &Server, caller: &Caller, a: &nlm4_testargs) -> nlm4_testres {
    let answer = |stat| nlm4_testres {
        cookie: a.cookie.clone(),
        stat,
    };
    let (file, _) = match file_of(srv, caller, &a.alock.fh, false) {
        Ok(f) => f,
        Err(s) => return answer(nlm4_testrply::default(s)),
    };
    // An unknown host holds nothing; id 0 is no host's.
    let host = srv
        .nlm
        .known_host(&a.alock.caller_name)
        .map_or(nlm_client(0), |h| h.id);
    let req = request(host, file, a.exclusive, &a.alock);
    let now = srv.clock.now();
    let r = match srv.core() {
        Ok(core) => core.nlm_test(now, &req),
        Err(_) => return answer(nlm4_testrply::default(nlm4_stats::NLM4_FAILED)),
    };
    answer(match r {
        Ok(()) => nlm4_testrply::default(nlm4_stats::NLM4_GRANTED),
        Err(StateError::Denied(d)) => nlm4_testrply::NLM4_DENIED(holder(&d)),
        Err(e) => nlm4_testrply::default(status_of(&e)),
    })
}

/// Whether host `id` holds no lock, share reservation or waiter (it may be forgotten).
fn idle(srv: &Server, id: txnfs_state::ClientId) -> bool {
    let locks = srv
        .core()
        .map(|c| c.table().client_has_state(id))
        .unwrap_or(true);
    !locks && !srv.nlm.shares.holds(id) && !srv.nlm.blocked.waits(id)
}

/// NLM4_LOCK (`monitor`: the host is recorded for SM_NOTIFY after a restart) and
/// NLM4_NM_LOCK (not recorded).
fn lock(srv: &Server, caller: &Caller, peer: IpAddr, a: &nlm4_lockargs, monitor: bool) -> nlm4_res {
    use nlm4_stats::*;
    let Some(host) = srv.nlm.host(&a.alock.caller_name, peer, |id| idle(srv, id)) else {
        tracing::warn!(
            limit = super::MAX_HOSTS,
            "too many NLM hosts: a LOCK is refused"
        );
        return res(&a.cookie, NLM4_DENIED_NOLOCKS);
    };
    let (file, cleared) = match file_of(srv, caller, &a.alock.fh, true) {
        Ok(f) => f,
        Err(s) => return res(&a.cookie, s),
    };
    let req = request(host.id, file, a.exclusive, &a.alock);
    if monitor {
        if let Err(e) = srv.nlm.nsm.monitor(&a.alock.caller_name, peer) {
            tracing::warn!("cannot record an NLM host in the state directory: {e}");
            return res(&a.cookie, NLM4_DENIED_NOLOCKS);
        }
    }
    let now = srv.clock.now();
    let r = if cleared {
        match srv.core() {
            Ok(mut core) => core.nlm_lock(now, a.reclaim, &req),
            Err(_) => return res(&a.cookie, NLM4_FAILED),
        }
    } else {
        // A delegation holder has not returned it yet: as if its lock were in the way.
        Err(StateError::Delay)
    };
    let stat = match r {
        Ok(()) => {
            srv.nlm.blocked.cancel(&req);
            NLM4_GRANTED
        }
        Err(StateError::Denied(_) | StateError::Delay) if a.block => {
            let w = Waiter {
                req,
                cookie: a.cookie.clone(),
                exclusive: a.exclusive,
                alock: granted_lock(&a.alock),
                addr: peer,
                refreshed: now,
            };
            if srv.nlm.blocked.add(w) {
                NLM4_BLOCKED
            } else {
                NLM4_DENIED_NOLOCKS
            }
        }
        Err(StateError::Delay) => NLM4_DENIED,
        Err(e) => status_of(&e),
    };
    res(&a.cookie, stat)
}

/// The lock NLM4_GRANTED names: the client's, under this server's name.
fn granted_lock(l: &nlm4_lock) -> nlm4_lock {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    nlm4_lock {
        caller_name: Bytes::from(host.trim().to_string()),
        ..l.clone()
    }
}

/// NLM4_CANCEL: a blocked LOCK is no longer wanted.
fn cancel(srv: &Server, caller: &Caller, a: &nlm4_cancargs) -> nlm4_res {
    let Some(host) = srv.nlm.known_host(&a.alock.caller_name) else {
        return res(&a.cookie, nlm4_stats::NLM4_GRANTED);
    };
    let (file, _) = match file_of(srv, caller, &a.alock.fh, false) {
        Ok(f) => f,
        Err(s) => return res(&a.cookie, s),
    };
    srv.nlm
        .blocked
        .cancel(&request(host.id, file, a.exclusive, &a.alock));
    res(&a.cookie, nlm4_stats::NLM4_GRANTED)
}

/// NLM4_UNLOCK: the range is unlocked (nothing locked there is no error); the
/// blocked locks are tried at once.
fn unlock(srv: &Server, caller: &Caller, a: &nlm4_unlockargs) -> nlm4_res {
    let Some(host) = srv.nlm.known_host(&a.alock.caller_name) else {
        return res(&a.cookie, nlm4_stats::NLM4_GRANTED);
    };
    let (file, _) = match file_of(srv, caller, &a.alock.fh, false) {
        Ok(f) => f,
        Err(s) => return res(&a.cookie, s),
    };
    let req = request(host.id, file, false, &a.alock);
    let (r, holds_more) = match srv.core() {
        Ok(mut core) => {
            let r = core.nlm_unlock(&req);
            (r, core.table().client_has_state(host.id))
        }
        Err(_) => return res(&a.cookie, nlm4_stats::NLM4_FAILED),
    };
    srv.nlm.blocked.wake();
    if !holds_more {
        srv.nlm.nsm.unmonitor(&a.alock.caller_name);
    }
    let stat = match r {
        Ok(()) => nlm4_stats::NLM4_GRANTED,
        Err(e) => status_of(&e),
    };
    res(&a.cookie, stat)
}

/// NLM4_SHARE (`on`) and NLM4_UNSHARE.
fn share(
    srv: &Server,
    caller: &Caller,
    peer: IpAddr,
    a: &nlm4_shareargs,
    on: bool,
) -> nlm4_shareres {
    use nlm4_stats::*;
    let answer = |stat| nlm4_shareres {
        cookie: a.cookie.clone(),
        stat,
        sequence: 0,
    };
    let s = &a.share;
    let Some(host) = srv.nlm.host(&s.caller_name, peer, |id| idle(srv, id)) else {
        return answer(NLM4_DENIED_NOLOCKS);
    };
    let (file, _) = match file_of(srv, caller, &s.fh, false) {
        Ok(f) => f,
        Err(st) => return answer(st),
    };
    if !on {
        srv.nlm.shares.unshare(file, host.id, &s.oh);
        return answer(NLM4_GRANTED);
    }
    let grace = srv
        .core()
        .map(|c| c.check_grace(a.reclaim, srv.clock.now()))
        .unwrap_or(Err(StateError::Grace));
    if let Err(e) = grace {
        return answer(status_of(&e));
    }
    let r = srv
        .nlm
        .shares
        .share(file, host.id, &s.oh, s.access as u32, s.mode as u32);
    answer(match r {
        Ok(()) => NLM4_GRANTED,
        Err(super::share::ShareError::Denied) => NLM4_DENIED,
        Err(super::share::ShareError::NoSpace) => NLM4_DENIED_NOLOCKS,
    })
}

/// FREE_ALL, or SM_NOTIFY of a rebooted host: every lock, share reservation and
/// waiter of the hosts called `name` goes — or, when no host is called so, of those
/// calling from `addr` (the name a statd gives need not be the `caller_name` its
/// lockd gives). Returns the number of hosts released.
pub fn release_hosts(srv: &Server, name: &[u8], addr: Option<IpAddr>) -> usize {
    let mut gone = srv.nlm.forget_hosts(name, None);
    if gone.is_empty() {
        if let Some(addr) = addr {
            gone = srv.nlm.forget_hosts(&[], Some(addr));
        }
    }
    for (n, h) in &gone {
        let freed = srv.core().map(|mut c| c.nlm_release(h.id)).unwrap_or(0);
        srv.nlm.shares.release_host(h.id);
        srv.nlm.blocked.release_host(h.id);
        srv.nlm.nsm.unmonitor(n);
        tracing::debug!(host = %String::from_utf8_lossy(n), states = freed, "NLM host released");
    }
    srv.nlm.blocked.wake();
    gone.len()
}
