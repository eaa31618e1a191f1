//! The session-setup arguments (the shared raw client's, ADR 0034) and the memory
//! export of the server's unit tests.

use crate::config::{BackendKind, Config, ExportConfig};
pub use txnfs_rawclient::{
    channel, create_session, exchange_id, open_guarded, reclaim_complete, sequence,
};

/// One read-write export `/` of a volatile in-memory file system, no grace period
/// unless asked for.
pub fn memory_config(state_dir: &std::path::Path, grace: bool) -> Config {
    Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        }],
        state_dir: Some(state_dir.to_path_buf()),
        grace,
        ..Config::default()
    }
}
