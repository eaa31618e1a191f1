//! Byte-range locks and stateid housekeeping: LOCK, LOCKT, LOCKU, TEST_STATEID,
//! FREE_STATEID (RFC 8881 §18.10-18.12, §18.38, §18.48).

use crate::cstate::Compound;
use crate::errors::state_status;
use crate::errors::{OpError, OpResult};
use crate::nfs::*;
use crate::statecore::{stateid_from_wire, stateid_to_wire};
use txnfs_state::{LockDenied, LockRequest, LockType, Locker, LocktRequest, StateError};

fn lock_type(t: nfs_lock_type4) -> LockType {
    match t {
        nfs_lock_type4::READ_LT | nfs_lock_type4::READW_LT => LockType::Read,
        nfs_lock_type4::WRITE_LT | nfs_lock_type4::WRITEW_LT => LockType::Write,
    }
}

fn denied(d: &LockDenied) -> LOCK4denied {
    LOCK4denied {
        offset: d.offset,
        length: d.length,
        locktype: match d.lock_type {
            LockType::Read => nfs_lock_type4::READ_LT,
            LockType::Write => nfs_lock_type4::WRITE_LT,
        },
        owner: lock_owner4 {
            clientid: d.owner.client,
            owner: bytes::Bytes::from(d.owner.owner.clone()),
        },
    }
}

/// The state core's answer to LOCK or LOCKT: a conflict is NFS4ERR_DENIED with the
/// result `body` makes of the conflicting lock, any other error its status.
fn or_denied<T>(
    res: Result<T, StateError>,
    body: fn(LOCK4denied) -> nfs_resop4,
) -> Result<T, OpError> {
    res.map_err(|e| match e {
        StateError::Denied(d) => {
            OpError::WithBody(nfsstat4::NFS4ERR_DENIED, Box::new(body(denied(&d))))
        }
        e => state_status(&e).into(),
    })
}

pub fn lock(c: &mut Compound, a: &LOCK4args) -> OpResult {
    let client = c.client()?;
    // Refuse early (before any storage call); the core checks again when it decides.
    c.srv
        .core()?
        .check_locking(client, a.reclaim, c.now)
        .map_err(|e| state_status(&e))?;
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let locker = match &a.locker {
        // In v4.1 the clientid inside lock_owner4 is ignored: the session names the
        // client (RFC 8881 §18.10.3).
        locker4::TRUE(o) => Locker::NewOwner {
            open_stateid: stateid_from_wire(&c.resolve_sid(&o.open_stateid)?),
            lock_owner: o.lock_owner.owner.to_vec(),
        },
        locker4::FALSE(e) => Locker::Existing {
            lock_stateid: stateid_from_wire(&c.resolve_sid(&e.lock_stateid)?),
        },
    };
    let req = LockRequest {
        file,
        lock_type: lock_type(a.locktype),
        offset: a.offset,
        length: a.length,
        locker,
    };
    let res = c.srv.core()?.lock(c.now, a.reclaim, client, req);
    let sid = or_denied(res, |d| nfs_resop4::OP_LOCK(LOCK4res::NFS4ERR_DENIED(d)))?;
    Ok(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(LOCK4resok {
        lock_stateid: stateid_to_wire(&sid),
    })))
}

pub fn lockt(c: &mut Compound, a: &LOCKT4args) -> OpResult {
    let client = c.client()?;
    c.srv
        .core()?
        .check_grace(false, c.now)
        .map_err(|e| state_status(&e))?;
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let req = LocktRequest {
        owner: &a.owner.owner,
        file,
        lock_type: lock_type(a.locktype),
        offset: a.offset,
        length: a.length,
    };
    let res = c.srv.core()?.lockt(c.now, client, req);
    or_denied(res, |d| nfs_resop4::OP_LOCKT(LOCKT4res::NFS4ERR_DENIED(d)))?;
    Ok(nfs_resop4::OP_LOCKT(LOCKT4res::NFS4_OK))
}

pub fn locku(c: &mut Compound, a: &LOCKU4args) -> OpResult {
    let client = c.client()?;
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.lock_stateid)?);
    let new = c
        .srv
        .core()?
        .table_mut()
        .locku(client, &sid, file, a.offset, a.length)
        .map_err(|e| state_status(&e))?;
    // NLM locks blocked behind this one are tried now, not at their next poll.
    if !c.srv.nlm.blocked.is_empty() {
        c.srv.nlm.blocked.wake();
    }
    let new = stateid_to_wire(&new);
    Ok(nfs_resop4::OP_LOCKU(LOCKU4res::NFS4_OK(new)))
}

pub fn test_stateid(c: &mut Compound, a: &TEST_STATEID4args) -> OpResult {
    let client = c.client()?;
    let core = c.srv.core()?;
    let codes = a
        .ts_stateids
        .iter()
        .map(|s| match core.test_stateid(client, &stateid_from_wire(s)) {
            Ok(()) => nfsstat4::NFS4_OK,
            Err(e) => state_status(&e),
        })
        .collect();
    Ok(nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(
        TEST_STATEID4resok {
            tsr_status_codes: codes,
        },
    )))
}

pub fn free_stateid(c: &mut Compound, a: &FREE_STATEID4args) -> OpResult {
    let client = c.client()?;
    let sid = stateid_from_wire(&c.resolve_sid(&a.fsa_stateid)?);
    c.srv
        .core()?
        .free_stateid(client, &sid)
        .map_err(|e| state_status(&e))?;
    Ok(nfs_resop4::OP_FREE_STATEID(FREE_STATEID4res {
        fsr_status: nfsstat4::NFS4_OK,
    }))
}
