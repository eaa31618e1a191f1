//! Live reconfiguration (ADR 0048): the exports are read again from where the server
//! read them at start (the embedding program says how: [`ConfigSource`]), checked, and
//! swapped in by [`crate::export::Exports::reload`]; the diff is logged at INFO. A
//! configuration that cannot be read or checked changes nothing and is logged with its
//! reason. Triggered by SIGHUP (`txnfs serve`) and by the control socket's `reload`
//! (`txnfs reload`).

use crate::config::ExportConfig;
use crate::export::{ExportError, ReloadDiff};
use crate::server::Server;

/// Reads the export configuration again: the error is the reason, for the log and the
/// administrator (a parse error names the file, line and column).
pub type ConfigSource = Box<dyn Fn() -> Result<Vec<ExportConfig>, String> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this server was not told where its configuration comes from")]
    NoSource,
    #[error("{0}")]
    Read(String),
    #[error(transparent)]
    Refused(#[from] ExportError),
}

/// Reads the configuration through the server's source and applies it. Blocks while
/// new exports open (their journals may be recovered): run it off the runtime's workers.
pub fn reload(server: &Server) -> Result<ReloadDiff, ReloadError> {
    let r = server
        .config_source
        .get()
        .ok_or(ReloadError::NoSource)
        .and_then(|read| read().map_err(ReloadError::Read))
        .and_then(|cfgs| apply(server, &cfgs));
    if let Err(e) = &r {
        tracing::warn!("reload refused, the running configuration stays: {e}");
    }
    r
}

/// Applies `cfgs` to the running server, logging each change.
pub fn apply(server: &Server, cfgs: &[ExportConfig]) -> Result<ReloadDiff, ReloadError> {
    let layers = txnfs_backend::layer::LayerRegistry::builtin();
    // The running server's handle choice (ADR 0050), as at start.
    let cfgs = server.cfg.handles.apply_to(cfgs);
    let diff = server.exports.reload(&cfgs, &layers)?;
    for name in &diff.added {
        server.metrics.add_export(crate::export::export_id(name));
    }
    for line in diff.lines() {
        tracing::info!("{line}");
    }
    if diff.is_empty() {
        tracing::info!("reload: no export changed");
    }
    Ok(diff)
}

/// The control socket's answer to `reload`: the diff, or `refused: REASON`.
pub fn answer(server: &Server) -> String {
    match reload(server) {
        Ok(diff) => diff.to_string(),
        Err(e) => format!("{REFUSED}{e}\n"),
    }
}

/// How the control socket's answer starts when a reload was refused.
pub const REFUSED: &str = "refused: ";
