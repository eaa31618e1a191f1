//! Persistent sessions as the server keeps them (ADR 0022): the store opened and its
//! clients and sessions restored into the state core at start, a new or changed
//! session stored before its reply leaves, a slot's outcome made durable before the
//! reply, and what the core forgot dropped from the store. The store itself (records,
//! group commit, recovery) is `statedir::sessionstore`.

use std::collections::HashSet;
use std::path::Path;

use bytes::Bytes;
use txnfs_state::clock::Clock;
use txnfs_state::session::{DurableSlot, Session, SessionId};

use crate::session::Hex;
use txnfs_state::StateCore;

use crate::config::Config;
use crate::export::Exports;
use crate::nfs::nfsstat4;
use crate::statecore::CoreAccess;
use crate::statedir::sessionstore::{self, SessionStore};

/// Waits until `t` is durable. On a worker thread of a multi-threaded tokio runtime
/// (a COMPOUND placed inline, ADR 0004) the worker's other tasks move to another
/// thread meanwhile (`block_in_place`), so a group commit does not stall the runtime;
/// elsewhere (blocking pool, no runtime, the simulation) it simply blocks.
fn wait_durable(store: &SessionStore, t: sessionstore::Ticket) -> std::io::Result<()> {
    off_the_worker(|| store.wait(t))
}

/// Runs the blocking `f` as [`wait_durable`] waits.
fn off_the_worker<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// At a clean stop: the sessions and clients forgotten without waiting
/// ([`forget`]) are made durable, so a clean restart finds the store as the clients
/// left it (not sessions of clients that said goodbye).
pub fn sync_at_stop(store: &SessionStore) {
    if let Err(e) = off_the_worker(|| store.sync()) {
        tracing::warn!("durable session store not synced at shutdown: {e}");
    }
}

/// Opens the durable session store when persistence is on or a previous instance
/// left one, and restores its clients and sessions into `core` (ADR 0022). Slot
/// records of transactions that recovery rolled back are dropped first.
pub fn restore(
    cfg: &Config,
    dir: &Path,
    exports: &Exports,
    alive: &HashSet<Bytes>,
    core: &mut StateCore,
    clock: &dyn Clock,
) -> std::io::Result<Option<SessionStore>> {
    if !cfg.persistent_sessions && !SessionStore::exists(dir) {
        return Ok(None);
    }
    let rolled_back = exports.rolled_back_at_start().into_iter().collect();
    let (store, restored) = SessionStore::open(dir, &rolled_back)?;
    let (clients, gone): (Vec<_>, Vec<_>) = restored
        .clients
        .into_iter()
        .partition(|c| alive.contains(&c.owner));
    // A client destroyed or expired before the restart stays in the store until the
    // next CREATE_SESSION tidies it: it and its sessions leave quietly here (a clean
    // restart after clients left is nothing to warn about).
    let gone: HashSet<_> = gone.into_iter().map(|c| c.id).collect();
    for &c in &gone {
        let _ = store.drop_client(c);
    }
    let (sessions, left): (Vec<_>, Vec<_>) = restored
        .sessions
        .into_iter()
        .partition(|(s, _)| !gone.contains(&s.client));
    for (s, _) in left {
        tracing::debug!(
            session = %Hex(&s.id),
            client = format_args!("{:#x}", s.client),
            "persistent session of a client that left before the restart: dropped"
        );
        let _ = store.drop_session(s.id);
    }
    if !sessions.is_empty() || restored.rolled_back > 0 {
        tracing::info!(
            clients = clients.len(),
            sessions = sessions.len(),
            dropped_replies = restored.rolled_back,
            "restored persistent sessions"
        );
    }
    let orphans = core.restore(clients, sessions, clock.now());
    for id in orphans {
        // The store holds a session whose client it has no record of: damage, not
        // a client that left.
        tracing::warn!(session = %Hex(&id), "persistent session without its client: not restored");
        let _ = store.drop_session(id);
    }
    core.set_persistent_sessions(cfg.persistent_sessions);
    if !cfg.persistent_sessions && core.sessions().counts().1 == 0 {
        // Persistence is off and nothing was promised any more: no store.
        drop(store);
        std::fs::remove_file(dir.join(sessionstore::FILE_NAME))?;
        return Ok(None);
    }
    Ok(Some(store))
}

/// After a CREATE_SESSION by `client` that made `session`: a persistent session is
/// stored with its client (and a client that holds persistent sessions gets its
/// new CREATE_SESSION sequence id stored) before the reply leaves. Clients and
/// sessions the core no longer has (expired, destroyed) leave the store here.
/// An error: the session could not be made durable and was destroyed.
pub fn persist_session(
    store: &SessionStore,
    core: &dyn CoreAccess,
    client: u64,
    session: &SessionId,
) -> Result<(), nfsstat4> {
    let (records, client_rec, gone) = {
        let core = core.core()?;
        let (sessions, clients) = store.ids();
        let gone: Vec<_> = sessions
            .into_iter()
            .filter(|s| core.sessions().session(s).is_none())
            .map(Ok)
            .chain(
                clients
                    .into_iter()
                    .filter(|c| !core.sessions().client_exists(*c))
                    .map(Err),
            )
            .collect();
        (core.durable(session), core.durable_client(client), gone)
    };
    for g in gone {
        let _ = match g {
            Ok(s) => store.drop_session(s),
            Err(c) => store.drop_client(c),
        };
    }
    let ticket = match (records, client_rec) {
        (Some((c, s)), _) => {
            let _ = store.put_client(c);
            store.put_session(s)
        }
        (None, Some(c)) if store.has_client(client) => store.put_client(c),
        _ => return Ok(()),
    };
    wait_durable(store, ticket).map_err(|e| {
        tracing::error!("persistent session not stored, destroyed: {e}");
        if let Ok(mut core) = core.core() {
            let _ = core.destroy_session(session);
            // Promise nothing more that cannot be kept.
            core.set_persistent_sessions(false);
        }
        nfsstat4::NFS4ERR_SERVERFAULT
    })
}

/// BACKCHANNEL_CTL changed a persistent session's callback: store it (not waited
/// for: a lost update leaves the old callback, which the client corrects with
/// BACKCHANNEL_CTL or BIND_CONN_TO_SESSION).
pub fn persist_session_update(store: &SessionStore, core: &dyn CoreAccess, session: &SessionId) {
    let rec = core.core().ok().and_then(|c| c.durable(session));
    if let Some((_, s)) = rec {
        let _ = store.put_session(s);
    }
}

/// DESTROY_SESSION or a client released: forget them in the store. Not waited for:
/// a destroyed session that comes back after a crash is never used and expires
/// with its client's lease.
pub fn forget(store: &SessionStore, session: Option<&SessionId>, client: Option<u64>) {
    if let Some(s) = session.filter(|s| store.has_session(s)) {
        let _ = store.drop_session(*s);
    }
    if let Some(c) = client.filter(|c| store.has_client(*c)) {
        let _ = store.drop_client(c);
    }
}

/// Makes the outcome of the request in `slot` of persistent session `s` durable
/// (ADR 0022): sequence id `seqid`, request hash `hash`, the reply (`None`: not
/// cached), and the transactional COMPOUND it belongs to (`txn`, 0 for none).
/// Returns when it is on disk (group commit).
pub fn persist_reply(
    store: &SessionStore,
    s: &Session,
    slot: u32,
    seqid: u32,
    hash: u64,
    txn: u64,
    reply: Option<Bytes>,
) -> std::io::Result<()> {
    let t = store.put_slot(
        s.id,
        DurableSlot {
            slot,
            seqid,
            request_hash: hash,
            reply,
        },
        txn,
    );
    wait_durable(store, t)
}
