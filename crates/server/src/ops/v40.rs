//! The NFSv4.0-only operations (RFC 7530 §16): SETCLIENTID, SETCLIENTID_CONFIRM,
//! RENEW, OPEN_CONFIRM, RELEASE_LOCKOWNER. In v4.1 and later they are NFS4ERR_NOTSUPP
//! (the op table's minor versions, RFC 8881 §18.*). The owners' sequence ids these and
//! the other seqid-carrying ops use are the v4.0 executor's (`compound::exec::v40`).

use crate::cstate::Compound;
use crate::errors::{state_status, OpError, OpResult};
use crate::nfs::*;
use crate::ops::session::principal;
use crate::statecore::{stateid_from_wire, stateid_to_wire};
use txnfs_state::session::{SessionError, V40Callback};
use txnfs_state::v40::{OwnerKey, OwnerKind};

/// SETCLIENTID (RFC 7530 §16.33).
pub fn setclientid(c: &mut Compound, a: &SETCLIENTID4args) -> OpResult {
    let loc = &a.callback.cb_location;
    let callback = V40Callback {
        program: a.callback.cb_program,
        netid: String::from_utf8_lossy(&loc.na_r_netid).into_owned(),
        addr: String::from_utf8_lossy(&loc.na_r_addr).into_owned(),
        ident: a.callback_ident,
    };
    let r = c.srv.core()?.setclientid(
        &principal(c),
        &a.client.id,
        a.client.verifier,
        callback,
        c.now,
    );
    let (ok, effects) = match r {
        Ok(r) => r,
        // §16.33.4: the answer names the client address in use (we keep none).
        Err(SessionError::ClidInUse) => {
            let res = SETCLIENTID4res::NFS4ERR_CLID_INUSE(clientaddr4::default());
            return Err(OpError::WithBody(
                nfsstat4::NFS4ERR_CLID_INUSE,
                Box::new(nfs_resop4::OP_SETCLIENTID(Box::new(res))),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    c.srv.apply(effects);
    Ok(nfs_resop4::OP_SETCLIENTID(Box::new(
        SETCLIENTID4res::NFS4_OK(SETCLIENTID4resok {
            clientid: ok.clientid,
            setclientid_confirm: ok.confirm,
        }),
    )))
}

/// SETCLIENTID_CONFIRM (RFC 7530 §16.34): the client is confirmed (or its callback
/// updated) and its callback path probed with CB_NULL (`crate::callback40`).
pub fn setclientid_confirm(c: &mut Compound, a: &SETCLIENTID_CONFIRM4args) -> OpResult {
    let (ok, effects) = c.srv.core()?.setclientid_confirm(
        &principal(c),
        a.clientid,
        a.setclientid_confirm,
        c.now,
    )?;
    c.srv.apply(effects);
    if ok.changed || c.srv.callbacks.v40.get(a.clientid).is_none() {
        let timeout = c.srv.cfg.callback_timeout();
        c.srv.callbacks.v40.set(a.clientid, &ok.callback, timeout);
    }
    c.client = Some(a.clientid);
    Ok(nfs_resop4::OP_SETCLIENTID_CONFIRM(
        SETCLIENTID_CONFIRM4res {
            status: nfsstat4::NFS4_OK,
        },
    ))
}

/// RENEW (RFC 7530 §16.29): NFS4ERR_CB_PATH_DOWN when the client holds delegations and
/// its callback path is not known to work (§16.29.4).
pub fn renew(c: &mut Compound, a: &RENEW4args) -> OpResult {
    let delegated = {
        let mut core = c.srv.core()?;
        core.renew(a.clientid, c.now)?;
        core.delegations().client_has_delegations(a.clientid)
    };
    if delegated && !c.srv.callbacks.v40.up(a.clientid) {
        return Err(nfsstat4::NFS4ERR_CB_PATH_DOWN.into());
    }
    Ok(nfs_resop4::OP_RENEW(RENEW4res {
        status: nfsstat4::NFS4_OK,
    }))
}

/// OPEN_CONFIRM (RFC 7530 §16.18): the open stateid's seqid steps on; the executor
/// marks the open-owner confirmed.
pub fn open_confirm(c: &mut Compound, a: &OPEN_CONFIRM4args) -> OpResult {
    let client = c.client()?;
    let sid = stateid_from_wire(&a.open_stateid);
    let file = c.srv.cfh_file_id(c.scope.ctx(), c.cfh()?)?;
    let new = c
        .srv
        .core()?
        .table_mut()
        .confirm_open(client, &sid, file)
        .map_err(|e| state_status(&e))?;
    Ok(nfs_resop4::OP_OPEN_CONFIRM(OPEN_CONFIRM4res::NFS4_OK(
        OPEN_CONFIRM4resok {
            open_stateid: stateid_to_wire(&new),
        },
    )))
}

/// RELEASE_LOCKOWNER (RFC 7530 §16.37): the lock-owner's stateids and sequence go;
/// NFS4ERR_LOCKS_HELD while it holds a lock.
pub fn release_lockowner(c: &mut Compound, a: &RELEASE_LOCKOWNER4args) -> OpResult {
    let client = c.client()?;
    let owner = a.lock_owner.owner.to_vec();
    {
        let mut core = c.srv.core()?;
        core.table_mut()
            .release_lockowner(client, &owner)
            .map_err(|e| state_status(&e))?;
        core.owner_seqids_mut().forget(&OwnerKey {
            client,
            kind: OwnerKind::Lock,
            owner,
        });
    }
    Ok(nfs_resop4::OP_RELEASE_LOCKOWNER(RELEASE_LOCKOWNER4res {
        status: nfsstat4::NFS4_OK,
    }))
}
