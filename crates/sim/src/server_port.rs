//! The only module that knows the server's API. Everything the simulation needs from
//! `txnfs-server` goes through here, so adapting to a changed executor or configuration
//! is a change to this file alone.
//!
//! Used: `Server::with_clock`, `Server::tick`, `Server::connection_closed`,
//! `compound::execute`, `Config { exports, state_dir, grace, lease_time, mutations }`,
//! `ExportConfig { prebuilt: Some(PrebuiltBackend(..)) }`, and the state directory's
//! `handle-secret` file (written before the first start so file handles, and therefore
//! request bytes, are the same in every run of a seed).

use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use txnfs_backend::{Backend, Creds};
use txnfs_server::{BackendKind, Config, ExportConfig, Mutations, PrebuiltBackend, Server};
use txnfs_state::clock::ManualClock;

#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("server does not start: {0}")]
    Start(String),
    #[error("state directory {0}: {1}")]
    StateDir(PathBuf, std::io::Error),
}

/// How the simulated server is configured (what survives a restart).
#[derive(Clone)]
pub struct ServerSetup {
    pub state_dir: PathBuf,
    pub backend: Arc<dyn Backend>,
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
}

impl SimServer {
    pub fn start(setup: &ServerSetup) -> Result<SimServer, PortError> {
        let cfg = Config {
            exports: vec![ExportConfig {
                name: "/".into(),
                path: PathBuf::new(),
                backend: BackendKind::Memory,
                read_only: false,
                prebuilt: Some(PrebuiltBackend(setup.backend.clone())),
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
        Ok(SimServer { srv })
    }

    /// Run one encoded COMPOUND4args on connection `conn`; `None` if the server
    /// rejected it at the RPC level (garbage arguments).
    pub fn call(&self, conn: u64, args: Bytes) -> Option<Bytes> {
        let creds = Creds {
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        };
        txnfs_server::compound::execute(&self.srv, creds, conn, args).ok()
    }

    /// The lease timer firing.
    pub fn tick(&self) {
        self.srv.tick();
    }

    pub fn connection_closed(&self, conn: u64) {
        self.srv.connection_closed(conn);
    }
}
