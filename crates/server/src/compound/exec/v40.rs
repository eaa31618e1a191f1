//! The NFSv4.0 COMPOUND (RFC 7530 §15.2, §16.2): no SEQUENCE, no slot. Each op runs
//! as in v4.1 (the one op table, the same handlers) after two v4.0 steps:
//!
//! * **who**: the client is the one the op names, by a client id (OPEN, LOCKT,
//!   DELEGPURGE, RELEASE_LOCKOWNER) or by a stateid (READ, WRITE, SETATTR, CLOSE, ...);
//!   naming it renews its lease (§9.5). An unknown client id is
//!   NFS4ERR_STALE_CLIENTID, an unknown stateid NFS4ERR_BAD_STATEID (or
//!   NFS4ERR_STALE_STATEID when it is of an earlier server instance).
//! * **sequence**: an op carrying an owner's seqid (OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE,
//!   CLOSE, LOCK, LOCKU) is checked against the owner's last one
//!   ([`txnfs_state::v40`], §9.1.7): the next runs, the last again is answered from the
//!   owner's replay cache (the cached result, and for OPEN its filehandle, then the
//!   COMPOUND goes on), any other is NFS4ERR_BAD_SEQID. Its result is cached unless
//!   its status is one of those that leave the seqid alone.
//!
//! A new open-owner's OPEN asks for OPEN_CONFIRM (OPEN4_RESULT_CONFIRM, §16.16.5).

use super::*;
use crate::nfs::{locker4, stateid4, OPEN4res, PUTFH4args, OPEN4_RESULT_CONFIRM};
use crate::ops::fh::putfh;
use crate::statecore::stateid_from_wire;
use txnfs_state::v40::{CachedReply, OwnerKey, OwnerKind, SeqidVerdict};
use txnfs_state::ClientId;

/// Runs a v4.0 COMPOUND and returns the encoded COMPOUND4res.
pub(super) fn run(
    srv: &Server,
    creds: Creds,
    conn: u64,
    req: Request,
    waited: &WaitClock,
) -> Gathered {
    let mut out = GatherBuf::with_capacity(256);
    let count_at = reply_head(&mut out, &req.tag);
    let mut x = Exec {
        c: Compound::start(srv, creds, conn, 0, false, waited),
        proc: TxnProc::Plain,
        out,
        count_at,
        status: nfsstat4::NFS4_OK,
        done: 0,
        slot: OpenSlot { srv, slot: None },
        cache_limit: usize::MAX,
        cachethis: false,
        durable: None,
        last_op: None,
        txn_session: None,
        refused: None,
        stored: None,
        op_ended: None,
        modifies: false,
    };
    let mut ops = req.ops.into_iter();
    for _ in 0..req.nops {
        let Some(arg) = ops.next() else {
            x.stop_at(req.tail);
            break;
        };
        // The last op's data may stay in the page cache (ADR 0065): v4.0 keeps no
        // reply but an owner's seqid op's result, and READ uses no seqid.
        x.c.may_pipe = ops.len() == 0;
        if !op(&mut x, arg) {
            break;
        }
    }
    x.end_transaction();
    x.complete()
}

/// One owner's sequence id as an op uses it.
struct SeqUse {
    key: OwnerKey,
    seqid: u32,
    verdict: SeqidVerdict,
    /// LOCK of a new lock-owner: that owner's sequence starts at this seqid too.
    new_lock_owner: Option<(OwnerKey, u32)>,
    /// CLOSE: the open stateid it closes.
    closing: Option<[u8; 12]>,
}

/// Statuses that leave an owner's seqid where it was (RFC 7530 §9.1.7).
fn keeps_seqid(s: nfsstat4) -> bool {
    use nfsstat4::*;
    matches!(
        s,
        NFS4ERR_STALE_CLIENTID
            | NFS4ERR_STALE_STATEID
            | NFS4ERR_BAD_STATEID
            | NFS4ERR_BAD_SEQID
            | NFS4ERR_BADXDR
            | NFS4ERR_RESOURCE
            | NFS4ERR_NOFILEHANDLE
            | NFS4ERR_MOVED
    )
}

/// Op `arg` of a v4.0 COMPOUND: who, sequence, run, cache. False when the COMPOUND
/// ends here.
fn op(x: &mut Exec, arg: nfs_argop4) -> bool {
    let srv = x.c.srv;
    let Some(entry) = optable::entry(arg.discriminant()) else {
        x.illegal();
        return false;
    };
    srv.stats.count(entry.op as u32);
    let before = x.out.len();
    let seq = match identify(&mut x.c, &arg) {
        Ok(s) => s,
        Err(st) => return x.fail40(entry, st),
    };
    match seq.as_ref().map(|s| &s.verdict) {
        Some(SeqidVerdict::Replay(cached)) => return x.replay(cached.clone()),
        Some(SeqidVerdict::Bad) => return x.fail40(entry, nfsstat4::NFS4ERR_BAD_SEQID),
        _ => {}
    }
    let opening = matches!(arg, nfs_argop4::OP_OPEN(_));
    let result = match runnable(entry, &x.c) {
        Err(s) => Err(OpError::Status(s)),
        Ok(handler) => {
            let c = &mut x.c;
            crate::panics::catch(srv, || entry.info().name(), || handler(c, arg))
                .unwrap_or(Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT)))
        }
    };
    let st = match result {
        Ok(mut res) => {
            if let (nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)), Some(s)) = (&mut res, &seq) {
                if s.verdict == SeqidVerdict::New {
                    ok.rflags |= OPEN4_RESULT_CONFIRM;
                }
            }
            super::super::payload::encode_v4(&res, x.c.piped.take(), &mut x.out);
            nfsstat4::NFS4_OK
        }
        Err(OpError::Status(s)) => {
            entry.encode_error(x.out.tail(), s);
            s
        }
        Err(OpError::WithBody(s, res)) => {
            super::super::payload::encode_v4(&res, None, &mut x.out);
            s
        }
    };
    x.c.piped = None;
    x.done += 1;
    if let Some(s) = seq {
        x.remember(s, before, st, opening);
    }
    if !x.reply_fits(before, entry, st) {
        return false;
    }
    if st != nfsstat4::NFS4_OK {
        x.status = st;
        return false;
    }
    true
}

impl Exec<'_> {
    /// Op `entry` fails with `st` before it ran; the COMPOUND ends.
    fn fail40(&mut self, entry: &OpEntry, st: nfsstat4) -> bool {
        entry.encode_error(self.out.tail(), st);
        self.done += 1;
        self.status = st;
        false
    }

    /// A retransmitted seqid: the owner's cached result (and filehandle) again.
    fn replay(&mut self, cached: CachedReply) -> bool {
        self.out.tail().extend_from_slice(&cached.result);
        self.done += 1;
        let st = crate::errors::status_word(&cached.result, 4)
            .and_then(nfsstat4::from_i32)
            .unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT);
        if let Some(fh) = cached.fh {
            if let Err(e) = putfh(&mut self.c, &PUTFH4args { object: fh }) {
                tracing::debug!("replayed OPEN's filehandle is gone: {e:?}");
            }
        }
        if st != nfsstat4::NFS4_OK {
            self.status = st;
            return false;
        }
        true
    }

    /// Caches the result of an op that used an owner's seqid (from `before` in the
    /// reply) and steps the owner's sequence.
    fn remember(&mut self, s: SeqUse, before: usize, st: nfsstat4, opening: bool) {
        if keeps_seqid(st) {
            return;
        }
        let srv = self.c.srv;
        let fh = match (&self.c.cfh, opening && st == nfsstat4::NFS4_OK) {
            (Some(fh), true) => Some(srv.fh_wire(fh)),
            _ => None,
        };
        let reply = CachedReply {
            result: self.out.copy_from(before),
            fh,
        };
        let Ok(mut core) = srv.core() else { return };
        let seqids = core.owner_seqids_mut();
        if st == nfsstat4::NFS4_OK {
            if let Some((k, seqid)) = &s.new_lock_owner {
                seqids.record(k, *seqid, reply.clone());
            }
        }
        let confirmed = s.key.kind == OwnerKind::Open && !opening && st == nfsstat4::NFS4_OK;
        seqids.record(&s.key, s.seqid, reply);
        if let (Some(other), nfsstat4::NFS4_OK) = (s.closing, st) {
            seqids.closed(&s.key, other);
        }
        if confirmed {
            // OPEN_CONFIRM, or any later op of the owner: it is confirmed now.
            seqids.confirm(&s.key);
        }
    }
}

/// The client named by client id `id`: it must be confirmed; its lease is renewed.
fn by_clientid(c: &mut Compound, id: ClientId) -> Result<ClientId, nfsstat4> {
    if !c.srv.core()?.renew_implicitly(id, c.now) {
        return Err(nfsstat4::NFS4ERR_STALE_CLIENTID);
    }
    c.client = Some(id);
    Ok(id)
}

/// Why a stateid names no state here.
fn unknown_stateid(c: &Compound, sid: &txnfs_state::Stateid) -> nfsstat4 {
    let epoch = c.srv.core().map(|core| core.table().boot_epoch());
    match epoch {
        Ok(e) if sid.epoch_and_id().0 != e => nfsstat4::NFS4ERR_STALE_STATEID,
        _ => nfsstat4::NFS4ERR_BAD_STATEID,
    }
}

/// The client of stateid `sid` (none for the special stateids); its lease is renewed.
fn by_stateid(c: &mut Compound, sid: &stateid4) -> Result<(), nfsstat4> {
    let sid = stateid_from_wire(sid);
    if sid.is_special() {
        return Ok(());
    }
    let client = c.srv.core()?.client_of_stateid(&sid);
    let client = client.ok_or_else(|| unknown_stateid(c, &sid))?;
    c.srv.core()?.renew_implicitly(client, c.now);
    c.client = Some(client);
    Ok(())
}

/// The owner (of `kind`) behind stateid `sid`, its seqid `seqid` judged.
fn by_owner_of(
    c: &mut Compound,
    kind: OwnerKind,
    sid: &stateid4,
    seqid: u32,
) -> Result<SeqUse, nfsstat4> {
    let sid = stateid_from_wire(sid);
    let found = {
        let core = c.srv.core()?;
        match kind {
            OwnerKind::Open => core.table().open_owner_of(&sid),
            OwnerKind::Lock => core.table().lock_owner_of(&sid),
        }
    };
    // A CLOSE retransmitted after its open went: the owner that closed it.
    let found = found.or_else(|| {
        let core = c.srv.core().ok()?;
        let k = core.owner_seqids().closed_by(&sid.other)?;
        (k.kind == kind).then(|| (k.client, k.owner.clone()))
    });
    let (client, owner) = found.ok_or_else(|| unknown_stateid(c, &sid))?;
    c.srv.core()?.renew_implicitly(client, c.now);
    c.client = Some(client);
    judge(
        c,
        OwnerKey {
            client,
            kind,
            owner,
        },
        seqid,
        false,
    )
}

fn judge(c: &Compound, key: OwnerKey, seqid: u32, opening: bool) -> Result<SeqUse, nfsstat4> {
    let verdict = c.srv.core()?.owner_seqids().check(&key, seqid, opening);
    Ok(SeqUse {
        key,
        seqid,
        verdict,
        new_lock_owner: None,
        closing: None,
    })
}

/// The v4.0 "who" and "sequence" steps of `arg`: sets the COMPOUND's client and
/// returns the owner sequence the op uses, if any.
fn identify(c: &mut Compound, arg: &nfs_argop4) -> Result<Option<SeqUse>, nfsstat4> {
    use nfs_argop4 as A;
    let seq = match arg {
        A::OP_OPEN(a) => {
            let client = by_clientid(c, a.owner.clientid)?;
            let key = OwnerKey {
                client,
                kind: OwnerKind::Open,
                owner: a.owner.owner.to_vec(),
            };
            judge(c, key, a.seqid, true)?
        }
        A::OP_OPEN_CONFIRM(a) => by_owner_of(c, OwnerKind::Open, &a.open_stateid, a.seqid)?,
        A::OP_OPEN_DOWNGRADE(a) => by_owner_of(c, OwnerKind::Open, &a.open_stateid, a.seqid)?,
        A::OP_CLOSE(a) => {
            let mut s = by_owner_of(c, OwnerKind::Open, &a.open_stateid, a.seqid)?;
            s.closing = Some(a.open_stateid.other);
            s
        }
        A::OP_LOCK(a) => match &a.locker {
            locker4::TRUE(o) => {
                let mut s = by_owner_of(c, OwnerKind::Open, &o.open_stateid, o.open_seqid)?;
                let lock_key = OwnerKey {
                    client: s.key.client,
                    kind: OwnerKind::Lock,
                    owner: o.lock_owner.owner.to_vec(),
                };
                s.new_lock_owner = Some((lock_key, o.lock_seqid));
                s
            }
            locker4::FALSE(e) => by_owner_of(c, OwnerKind::Lock, &e.lock_stateid, e.lock_seqid)?,
        },
        A::OP_LOCKU(a) => by_owner_of(c, OwnerKind::Lock, &a.lock_stateid, a.seqid)?,
        A::OP_LOCKT(a) => {
            by_clientid(c, a.owner.clientid)?;
            return Ok(None);
        }
        A::OP_DELEGPURGE(a) => {
            by_clientid(c, a.clientid)?;
            return Ok(None);
        }
        A::OP_RELEASE_LOCKOWNER(a) => {
            by_clientid(c, a.lock_owner.clientid)?;
            return Ok(None);
        }
        A::OP_READ(a) => return by_stateid(c, &a.stateid).map(|()| None),
        A::OP_WRITE(a) => return by_stateid(c, &a.stateid).map(|()| None),
        A::OP_SETATTR(a) => return by_stateid(c, &a.stateid).map(|()| None),
        A::OP_DELEGRETURN(a) => return by_stateid(c, &a.deleg_stateid).map(|()| None),
        _ => return Ok(None),
    };
    Ok(Some(seq))
}
