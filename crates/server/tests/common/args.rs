//! The session-setup arguments (the shared raw client's, ADR 0034) and the memory
//! export of the integration tests. (The server's unit tests have their own five-line
//! `memory_config`: an integration test cannot see the library's `#[cfg(test)]` code.)

use super::{BackendKind, Config, ExportConfig};
#[allow(unused_imports)] // each test uses some
pub use txnfs_rawclient::{channel, create_session, exchange_id, sequence};

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
