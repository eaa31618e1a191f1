//! The only module that knows the server's API. Everything the simulation needs from
//! `txnfs-server` goes through here, so adapting to a changed executor or configuration
//! is a change to this file alone.
//!
//! Used: `Server::with_clock`, `Server::tick`, `Server::connection_closed`,
//! `compound::execute`, `Config { exports, state_dir, grace, lease_time, mutations }`,
//! `Server::callbacks.assume_path` (a back channel the simulation declares working
//! or down),
//! `Server::take_undelivered_callbacks` (the CB_RECALLs the simulation delivers), and
//! white-box, for the delegation invariant, `Server::core()`: `delegations()`
//! (`files`, `on_file`, `stats`) and `table().others_use`,
//! `ExportConfig { prebuilt: Some(PrebuiltBackend(..)) }`, and the state directory's
//! `handle-secret` file (written before the first start so file handles, and therefore
//! request bytes, are the same in every run of a seed).
//!
//! Transactions (ADR 0021): `compound::execute_as(.., txn = true)` runs a transactional
//! COMPOUND; the prebuilt stack is `TxnFinish` (the simulation's own thin layer: it
//! spares a transaction's rollback from faults) over `TxnLayer::open(fault layer,
//! <state_dir>/txn.journal, TxnSettings { stop_recovery_after, .. })` over the fault
//! layer over the memory backend. Faults therefore hit transactions mid-way; a restart
//! opens a new `TxnLayer` over the same fault layer and journal (recovery).

use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use txnfs_backend::layer::Layer;
use txnfs_backend::txn::{TxnLayer, TxnSettings};
use txnfs_backend::{Backend, BackendError, Creds, OpCtx};
use txnfs_proto::nfs4::stateid4;
use txnfs_server::{BackendKind, Config, ExportConfig, Mutations, PrebuiltBackend, Server};
use txnfs_state::clock::ManualClock;
use txnfs_state::{Callback, ClientId, DelegType, FileId};

#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("server does not start: {0}")]
    Start(String),
    #[error("state directory {0}: {1}")]
    StateDir(PathBuf, std::io::Error),
    /// `TxnSettings::stop_recovery_after` stopped the recovery (a crash during it).
    #[error("txn recovery stopped")]
    RecoveryStopped,
    #[error("txn layer does not open: {0}")]
    Txn(String),
}

/// How the simulated server is configured (what survives a restart).
#[derive(Clone)]
pub struct ServerSetup {
    pub state_dir: PathBuf,
    /// The fault layer (over the memory backend): what the txn layer stacks on, and
    /// what survives restarts.
    pub backend: Arc<crate::fault::FaultBackend>,
    pub clock: Arc<ManualClock>,
    pub lease_secs: u32,
    pub break_reply_cache: bool,
}

/// Prepare a fresh state directory whose handle secret derives from the seed.
pub fn prepare_state_dir(dir: &Path, seed: u64) -> Result<(), PortError> {
    let err = |e| PortError::StateDir(dir.to_path_buf(), e);
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut secret = [0u8; 32];
    let mut r = crate::rng::Rng::new(seed ^ 0x005E_C2E7);
    for chunk in secret.chunks_mut(8) {
        chunk.copy_from_slice(&r.next_u64().to_be_bytes());
    }
    std::fs::write(dir.join("handle-secret"), secret).map_err(err)
}

/// One server instance; dropping it is a crash (all volatile state is gone).
pub struct SimServer {
    srv: Arc<Server>,
    txn: Arc<TxnLayer>,
}

/// The simulation's layer on top of the txn layer: while a transaction ends it tells
/// the fault layer below to spare the rollback (a failed undo step is not retried by
/// the layer: that is a finding of its own, tested with [`crate::fault::FaultPlan::undo_faults`]).
/// A commit's syncs may still fail, once.
struct TxnFinish {
    txn: Arc<TxnLayer>,
    faults: Arc<crate::fault::FaultBackend>,
}

impl Layer for TxnFinish {
    fn lower(&self) -> &dyn Backend {
        &*self.txn
    }

    fn begin_compound(&self, cx: &OpCtx) -> txnfs_backend::Result<()> {
        use crate::fault::Spare;
        if cx.txn && self.faults.spare() == Spare::Nothing && !self.faults.txn_lookup_faults() {
            self.faults.set_spare(Spare::Lookups);
        }
        Backend::begin_compound(&*self.txn, cx)
    }

    fn end_compound(&self, cx: &OpCtx, ok: bool) -> txnfs_backend::Result<()> {
        use crate::fault::Spare;
        let before = match self.faults.spare() {
            Spare::Lookups => Spare::Nothing,
            s => s,
        };
        if cx.txn && before == Spare::Nothing && !self.faults.undo_faults() {
            self.faults
                .set_spare(if ok { Spare::AllButCommit } else { Spare::All });
        }
        let r = Backend::end_compound(&*self.txn, cx, ok);
        self.faults.set_spare(before);
        r
    }
}

/// The journal of the txn layer, in the state directory.
pub fn journal_path(setup: &ServerSetup) -> PathBuf {
    setup.state_dir.join("txn.journal")
}

/// Open the txn layer over the fault layer (recovering what the journal holds); with
/// `stop_recovery_after`, recovery stops (as a crash would) before that undo step.
pub fn open_txn_layer(
    setup: &ServerSetup,
    stop_recovery_after: Option<usize>,
) -> Result<TxnLayer, PortError> {
    use crate::fault::Spare;
    let before = setup.backend.spare();
    if !setup.backend.undo_faults() {
        setup.backend.set_spare(Spare::All);
    }
    let settings = TxnSettings {
        stop_recovery_after,
        // Conflicts happen only between a transaction the simulation holds open and
        // one it sends meanwhile (they never resolve by waiting): do not wait long.
        lock_wait: std::time::Duration::from_millis(2),
        ..TxnSettings::default()
    };
    let lower: Arc<dyn Backend> = setup.backend.clone();
    // With faults in recovery (`undo_faults`), a start that fails on one is tried
    // again, as an operator would.
    let mut tries = 0;
    let r = loop {
        tries += 1;
        match TxnLayer::open(lower.clone(), Some(&journal_path(setup)), settings.clone()) {
            Err(BackendError::Io(m)) if tries < 20 && !m.contains("stopped") => continue,
            r => break r,
        }
    };
    setup.backend.set_spare(before);
    match r {
        Ok(t) => Ok(t),
        Err(BackendError::Io(m)) if stop_recovery_after.is_some() && m.contains("stopped") => {
            Err(PortError::RecoveryStopped)
        }
        Err(e) => Err(PortError::Txn(e.to_string())),
    }
}

impl SimServer {
    /// Start a server (opening the txn layer: recovery runs first).
    pub fn start(setup: &ServerSetup) -> Result<SimServer, PortError> {
        let txn = Arc::new(open_txn_layer(setup, None)?);
        Self::start_over(setup, txn)
    }

    /// Start a server over a txn layer opened already.
    pub fn start_over(setup: &ServerSetup, txn: Arc<TxnLayer>) -> Result<SimServer, PortError> {
        let top: Arc<dyn Backend> = Arc::new(TxnFinish {
            txn: txn.clone(),
            faults: setup.backend.clone(),
        });
        let cfg = Config {
            exports: vec![ExportConfig {
                name: "/".into(),
                path: PathBuf::new(),
                backend: BackendKind::Memory,
                read_only: false,
                clients: Vec::new(),
                prebuilt: Some(PrebuiltBackend(top)),
            }],
            state_dir: Some(setup.state_dir.clone()),
            // Restarts are tested without a grace period: clients start over and the
            // model forgets all opens and locks (ADR 0010).
            grace: false,
            lease_time: setup.lease_secs,
            mutations: Mutations {
                break_reply_cache: setup.break_reply_cache,
            },
            ..Config::default()
        };
        let srv = Server::with_clock(cfg, setup.clock.clone())
            .map_err(|e| PortError::Start(e.to_string()))?;
        Ok(SimServer { srv, txn })
    }

    /// The running txn layer (to drive a transaction directly, crash tests).
    pub fn txn_layer(&self) -> Arc<TxnLayer> {
        self.txn.clone()
    }

    /// Run one encoded COMPOUND4args on connection `conn` (as a transaction with
    /// `txn`: procedure PROC_TXN_COMPOUND); `None` if the server rejected it at the
    /// RPC level (garbage arguments).
    pub fn call(&self, conn: u64, args: Bytes, txn: bool) -> Option<Bytes> {
        let creds = Creds {
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        };
        txnfs_server::compound::execute_as(&self.srv, creds, conn, args, txn).ok()
    }

    /// The lease timer firing.
    pub fn tick(&self) {
        self.srv.tick();
    }

    pub fn connection_closed(&self, conn: u64) {
        self.srv.connection_closed(conn);
    }

    /// Declare the back channel of `session` working (as if its CB_NULL probe had
    /// been answered: its client may be granted delegations) or down (as if its
    /// connection had closed). False if the session did not ask for a back channel.
    pub fn assume_callback_path(&self, session: &[u8; 16], up: bool) -> bool {
        self.srv.callbacks.assume_path(session, up)
    }

    /// The CB_RECALLs the server asked for since the last call: (client id,
    /// delegation stateid, file handle).
    pub fn take_recalls(&self) -> Vec<Recall> {
        self.srv
            .take_undelivered_callbacks()
            .into_iter()
            .map(|(client, call)| match call {
                Callback::Recall { stateid, fh, .. } => Recall {
                    client,
                    stateid: stateid4 {
                        seqid: stateid.seqid,
                        other: stateid.other,
                    },
                    fh,
                },
            })
            .collect()
    }

    /// Whether the delegation `sid` of client id `client` is revoked (false when live
    /// or unknown): resolves what the model cannot predict, whether a request that
    /// failed on an injected fault got as far as revoking an unreachable holder's
    /// delegation.
    pub fn deleg_revoked(&self, client: u64, sid: &stateid4) -> bool {
        let sid = txnfs_state::Stateid {
            seqid: sid.seqid,
            other: sid.other,
        };
        match self.srv.core() {
            Ok(core) => {
                core.delegations().test(client, &sid) == Err(txnfs_state::StateError::DelegRevoked)
            }
            Err(_) => false,
        }
    }

    /// The server's delegation counters: (granted, recalled, returned, revoked).
    pub fn deleg_counts(&self) -> (u64, u64, u64, u64) {
        match self.srv.core() {
            Ok(core) => {
                let s = core.delegations().stats();
                (s.granted, s.recalled, s.returned, s.revoked)
            }
            Err(_) => (0, 0, 0, 0),
        }
    }

    /// The delegation invariant, white-box on the state core: see
    /// [`check_delegations`]. Returns how many files hold delegations, and how many
    /// of them more than one (shared read delegations).
    pub fn check_delegations(&self) -> Result<(usize, usize), String> {
        let core = self
            .srv
            .core()
            .map_err(|e| format!("the state core is poisoned: {e:?}"))?;
        let mut files = core.delegations().files();
        files.sort_unstable();
        let held: Vec<FileDelegs> = files
            .into_iter()
            .map(|f| {
                let mut on = core.delegations().on_file(f);
                on.sort_unstable_by_key(|(c, k)| (*c, *k == DelegType::Write));
                let with_use = on
                    .into_iter()
                    .map(|(c, k)| {
                        let u = core.table().others_use(c, f);
                        (
                            c,
                            k,
                            OthersOpen {
                                open: u.open,
                                open_write: u.open_write,
                            },
                        )
                    })
                    .collect();
                (f, with_use)
            })
            .collect();
        let shared = held.iter().filter(|(_, on)| on.len() > 1).count();
        check_delegations(&held).map(|()| (held.len(), shared))
    }

    /// Harness self-test only: client `client` opens `file`'s delegated file for
    /// reading and writing *behind the server's back* (the state table directly, no
    /// recall), which the delegation invariant must report. Returns whether a file
    /// with another client's delegation was found.
    pub fn open_behind_delegation(&self, client: ClientId) -> bool {
        let Ok(mut core) = self.srv.core() else {
            return false;
        };
        let mut files = core.delegations().files();
        files.sort_unstable();
        let target = files.into_iter().find(|f| {
            core.delegations()
                .on_file(*f)
                .iter()
                .any(|(c, _)| *c != client)
        });
        let Some(file) = target else {
            return false;
        };
        core.table_mut()
            .open(client, b"behind-the-back", file, 3, 0)
            .is_ok()
    }
}

/// A CB_RECALL the server asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    pub client: ClientId,
    pub stateid: stateid4,
    pub fh: Bytes,
}

/// Whether clients other than a delegation's holder have the file open (and for
/// writing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OthersOpen {
    pub open: bool,
    pub open_write: bool,
}

/// A file's live delegations: (holder, type, how the other clients have it open).
pub type FileDelegs = (FileId, Vec<(ClientId, DelegType, OthersOpen)>);

/// The delegation invariant (ADR 0017): on every file, a write delegation is the only
/// delegation, no client holds two, and no delegation coexists with another client's
/// open it conflicts with (a read delegation with a write open, a write delegation
/// with any open).
pub fn check_delegations(files: &[FileDelegs]) -> Result<(), String> {
    for (file, on) in files {
        let writes = on.iter().filter(|d| d.1 == DelegType::Write).count();
        if writes > 0 && on.len() > 1 {
            return Err(format!(
                "file {file:#x}: a write delegation coexists with others: {:?}",
                on.iter().map(|d| (d.0, d.1)).collect::<Vec<_>>()
            ));
        }
        for (i, (c, k, u)) in on.iter().enumerate() {
            if on[..i].iter().any(|d| d.0 == *c) {
                return Err(format!("file {file:#x}: client {c} holds two delegations"));
            }
            let conflict = match k {
                DelegType::Write => u.open,
                DelegType::Read => u.open_write,
                // Directories have no opens; the sim grants no directory delegations.
                DelegType::Directory => false,
            };
            if conflict {
                return Err(format!(
                    "file {file:#x}: client {c}'s {k:?} delegation coexists with another client's conflicting open ({u:?})"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: OthersOpen = OthersOpen {
        open: false,
        open_write: false,
    };
    const READER: OthersOpen = OthersOpen {
        open: true,
        open_write: false,
    };
    const WRITER: OthersOpen = OthersOpen {
        open: true,
        open_write: true,
    };

    #[test]
    fn delegation_invariant_accepts_what_the_rfc_allows() {
        let ok = vec![
            (1, vec![(1, DelegType::Write, NONE)]),
            (
                2,
                vec![(1, DelegType::Read, READER), (2, DelegType::Read, NONE)],
            ),
        ];
        assert_eq!(check_delegations(&ok), Ok(()));
    }

    #[test]
    fn delegation_invariant_fails_on_each_conflict() {
        let two_writes = vec![(
            1,
            vec![(1, DelegType::Write, NONE), (2, DelegType::Write, NONE)],
        )];
        let write_and_read = vec![(
            1,
            vec![(1, DelegType::Read, NONE), (2, DelegType::Write, NONE)],
        )];
        let twice = vec![(
            1,
            vec![(1, DelegType::Read, NONE), (1, DelegType::Read, NONE)],
        )];
        let write_vs_reader = vec![(1, vec![(1, DelegType::Write, READER)])];
        let read_vs_writer = vec![(1, vec![(1, DelegType::Read, WRITER)])];
        for bad in [
            two_writes,
            write_and_read,
            twice,
            write_vs_reader,
            read_vs_writer,
        ] {
            assert!(check_delegations(&bad).is_err(), "{bad:?} passed");
        }
    }
}
