//! txnfs server core. The data path, top to bottom:
//! `service` (RPC program dispatch) → `compound` (executor + op table) → `ops` (one file
//! per op family) → the state core (`txnfs-state`, via `statecore`) → backends (`txnfs-backend`).
//! Everything below `service` is synchronous and socket-free; the state core is sans-IO
//! (ADR 0008), while the server around it reads the clock (recall and copy deadlines),
//! writes the state directory and sends callbacks through the transport.

pub mod callback;
pub mod compound;
pub mod config;
pub mod cstate;
pub mod errors;
pub mod export;
#[cfg(feature = "fault-injection")]
pub mod faultinject;
pub mod fh;
pub mod handle;
pub mod held;
pub mod notify;
pub mod offload;
pub mod ops;
pub mod panics;
pub mod placement;
pub mod recall;
pub mod server;
pub mod service;
pub mod session;
pub mod statecore;
pub mod statedir;
pub mod txnspan;
pub mod waitmode;
pub mod watches;

pub use txnfs_proto::nfs4 as nfs;

pub use config::{BackendKind, Config, ExportConfig, LayerStack, Mutations, PrebuiltBackend};
pub use server::Server;
pub use service::{run, NfsService};
