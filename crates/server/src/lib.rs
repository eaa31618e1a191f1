//! txnfs server core. The data path, top to bottom:
//! `service` (RPC program dispatch) → `compound` (executor + op table) → `ops` (one file
//! per op family) → the state core (`txnfs-state`, via `statecore`) → backends (`txnfs-backend`).
//! Everything below `service` is synchronous and socket-free; the state core is sans-IO
//! (ADR 0008), while the server around it reads the clock (recall and copy deadlines),
//! writes the state directory and sends callbacks through the transport.
//!
//! `server::Server` is the one place that owns the server's parts and carries out the
//! state core's effects, each through the part it concerns; the parts never name the
//! server (they reach the core through `statecore::CoreAccess`, recall-and-wait
//! through `recall::Recall`, a copy's server through `offload::CopyHost`, the
//! attribute encoding through `attrs::Attributes`). Module
//! dependencies (who uses whom; `nfs`, the protocol types, is used by all) form a DAG but
//! for `server` ↔ `nlm`,
//! from the top:
//!
//! ```text
//! service     → compound, v3, mount, nlm, report, access, server, durable, placement,
//!               recall, txnspan, errors
//! report      → v3, server, metrics, statecore, reload
//! reload      → server, export, config, kerberos, metrics
//! nlm         → v3, ops, cstate, server, panics, placement, waitmode, statedir
//! v3          → ops, access, cstate, server, panics, placement, waitmode, fh, errors, export
//! mount       → access, server, export, exportrules
//! compound    → ops, cstate, server, panics, placement, txnspan, session, fh, errors
//! ops         → access, cstate, dirnotify, dirwatches, offload, watches, statecore,
//!               callback, fh, errors, export
//! cstate      → server, fh, placement, session, export, exportrules
//! access      → cstate, server, export, exportrules
//! panics      → server
//! server      → attrs, durable, dirnotify, dirwatches, offload, watches, recall,
//!               statecore, callback, statedir, held, txnspan, faultinject, handle,
//!               placement, waitmode, fh, errors, export, config, metrics, filechange,
//!               nlm (its state: the one edge back up, `nlm`'s procedures use the
//!               server; ADR 0041)
//! offload     → recall, callback, placement, waitmode, errors, export
//! dirnotify   → recall, statecore, callback, export
//! dirwatches  → dirnotify, recall, statecore, export
//! watches     → recall, statecore, waitmode, export
//! recall      → statecore, callback, placement, waitmode, config
//! durable     → statecore, statedir, session, export, config
//! attrs       → fh, handle, errors, export, config
//! faultinject → statecore
//! callback    → session
//! placement   → waitmode
//! txnspan     → export
//! fh          → handle, export
//! held        → export
//! export      → exportrules, config
//! config      → exportrules
//! leaves: statecore, statedir, session, handle, waitmode, errors, exportrules, metrics,
//!         filechange
//! ```

pub mod access;
pub mod attrs;
pub mod callback;
pub mod callback40;
pub mod compound;
pub mod config;
pub mod cstate;
pub mod dirnotify;
pub mod dirwatches;
pub mod durable;
pub mod errors;
pub mod export;
pub mod exportrules;
#[cfg(feature = "fault-injection")]
pub mod faultinject;
pub mod fh;
pub mod filechange;
pub mod handle;
pub mod held;
pub mod kerberos;
pub mod metrics;
pub mod mount;
pub mod nlm;
pub mod offload;
pub mod ops;
pub mod panics;
pub mod placement;
pub mod recall;
pub mod reload;
pub mod report;
pub mod server;
pub mod service;
pub mod session;
pub mod statecore;
pub mod statedir;
pub mod txnspan;
pub mod v3;
pub mod waitmode;
pub mod watches;

pub use txnfs_proto::nfs4 as nfs;

pub use config::{
    BackendKind, Config, ExportConfig, LayerStack, Mutations, PrebuiltBackend, TlsFiles,
};
pub use kerberos::KerberosConfig;
pub use server::Server;
pub use service::{run, NfsService};
