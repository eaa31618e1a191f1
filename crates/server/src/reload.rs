//! Live reconfiguration (ADR 0048): the configuration is read again from where the
//! server read it at start (the embedding program says how: [`ConfigSource`]) and
//! checked; then the exports are swapped in by [`crate::export::Exports::reload`], the
//! RPC-with-TLS certificate, key and client CAs by `ServerTls::replace_with`, and the
//! Kerberos principal map by [`crate::kerberos::PrincipalMap::replace_with`]. Every
//! other setting that changed is named as needing a restart. What changed is logged at
//! INFO, what waits for a restart at WARN. A configuration that cannot be read or
//! checked changes nothing and is logged with its reason. Triggered by SIGHUP (`txnfs
//! serve`) and by the control socket's `reload` (`txnfs reload`).

use std::sync::Arc;

use crate::config::{Config, ExportConfig, TlsFiles};
use crate::export::{ExportError, ReloadDiff};
use crate::kerberos::{KerberosError, PrincipalMap};
use crate::server::Server;

/// Reads the configuration again: the error is the reason, for the log and the
/// administrator (a parse error names the file, line and column).
pub type ConfigSource = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this server was not told where its configuration comes from")]
    NoSource,
    #[error("{0}")]
    Read(String),
    #[error(transparent)]
    Refused(#[from] ExportError),
    #[error("RPC-with-TLS: {0}")]
    Tls(#[from] txnfs_rpc::TlsConfigError),
    #[error(transparent)]
    Kerberos(#[from] KerberosError),
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    pub exports: ReloadDiff,
    /// What was reloaded besides the exports (the TLS certificate, the principal map),
    /// one line each.
    pub reloaded: Vec<String>,
    /// Settings that changed and take effect only after a restart (their TOML names).
    pub need_restart: Vec<String>,
}

impl ReloadReport {
    /// The lines a setting that waits for a restart gets.
    pub fn restart_lines(&self) -> Vec<String> {
        self.need_restart
            .iter()
            .map(|n| format!("{n} changed: takes effect after a restart"))
            .collect()
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines = self.exports.lines().into_iter();
        let lines = lines.chain(self.reloaded.iter().cloned());
        for l in lines.chain(self.restart_lines()) {
            writeln!(f, "{l}")?;
        }
        let nothing = self.exports.is_empty() && self.reloaded.is_empty();
        writeln!(
            f,
            "{} export(s) unchanged{}",
            self.exports.unchanged,
            if nothing { "; nothing to apply" } else { "" }
        )
    }
}

/// Reads the configuration through the server's source and applies it. Blocks while
/// new exports open (their journals may be recovered): run it off the runtime's workers.
pub fn reload(server: &Server) -> Result<ReloadReport, ReloadError> {
    let r = server
        .config_source
        .get()
        .ok_or(ReloadError::NoSource)
        .and_then(|read| read().map_err(ReloadError::Read))
        .and_then(|cfg| apply_config(server, &cfg));
    if let Err(e) = &r {
        tracing::warn!("reload refused, the running configuration stays: {e}");
    }
    r
}

/// What a reload does with RPC-with-TLS.
enum TlsStep {
    /// Neither before nor after.
    Off,
    /// Loaded and checked: swapped in once everything else is checked too.
    Replace(Arc<txnfs_rpc::ServerTls>, txnfs_rpc::ServerTls, TlsFiles),
    /// Turned on or off: named as waiting for a restart.
    Restart,
}

/// Loads (and so checks) the new TLS files when TLS is running and still configured.
fn prepare_tls(server: &Server, new: &Config) -> Result<TlsStep, ReloadError> {
    Ok(match (server.tls.get(), &new.tls) {
        (None, None) => TlsStep::Off,
        (Some(running), Some(files)) => {
            TlsStep::Replace(running.clone(), files.load()?, files.clone())
        }
        _ => TlsStep::Restart,
    })
}

/// Applies the configuration `new` to the running server: every part is read and
/// checked first, then the exports, the TLS certificate and the principal map are
/// swapped in; nothing changes when a part is refused.
pub fn apply_config(server: &Server, new: &Config) -> Result<ReloadReport, ReloadError> {
    let _one_at_a_time = server.reloading.lock().unwrap_or_else(|p| p.into_inner());
    let tls = prepare_tls(server, new)?;
    let map = PrincipalMap::load(new.kerberos.as_ref())?;
    let exports = apply(server, &new.exports)?;
    let mut report = ReloadReport {
        exports,
        reloaded: Vec::new(),
        need_restart: restart_only_changes(&server.cfg, new),
    };
    swap_tls(tls, &mut report);
    swap_map(server, new, map, &mut report);
    for line in &report.reloaded {
        tracing::info!("{line}");
    }
    for line in report.restart_lines() {
        tracing::warn!("{line}");
    }
    Ok(report)
}

/// Swaps the checked TLS configuration in (or names TLS as waiting for a restart).
fn swap_tls(step: TlsStep, report: &mut ReloadReport) {
    match step {
        TlsStep::Off => {}
        TlsStep::Restart => report
            .need_restart
            .push("tls (turning RPC-with-TLS on or off)".into()),
        TlsStep::Replace(running, next, files) => {
            let (before, after) = (running.certificate(), next.certificate());
            let client_ca = match &files.client_ca {
                Some(ca) => format!("; client certificates checked against {}", ca.display()),
                None => String::new(),
            };
            running.replace_with(next);
            report.reloaded.push(if before == after {
                format!("tls certificate reloaded, the same: {after}{client_ca}")
            } else {
                format!("tls certificate reloaded: {after} (was {before}){client_ca}")
            });
        }
    }
}

/// Swaps the checked principal map in; names Kerberos as waiting for a restart when
/// the new configuration wants it and it is not running.
fn swap_map(server: &Server, new: &Config, map: PrincipalMap, report: &mut ReloadReport) {
    match new.kerberos.as_ref().and_then(|k| k.map.as_ref()) {
        Some(file) => report.reloaded.push(format!(
            "gss map reloaded: {} principal(s) from {}",
            map.len(),
            file.display()
        )),
        None if !server.principals.is_empty() => report
            .reloaded
            .push("gss map removed: principals act as the local users of their names".into()),
        None => {}
    }
    server.principals.replace_with(map);
    let wanted = new.kerberos.is_some() || wants_kerberos(&new.exports);
    if server.gss().is_none() && wanted {
        report
            .need_restart
            .push("kerberos (RPCSEC_GSS is not running)".into());
    }
}

/// Whether an export rule names a Kerberos flavour (then Kerberos runs; ADR 0051).
fn wants_kerberos(exports: &[ExportConfig]) -> bool {
    use crate::exportrules::Flavor;
    exports.iter().any(|e| {
        e.clients.iter().any(|r| {
            r.sec
                .iter()
                .any(|f| matches!(f, Flavor::Krb5 | Flavor::Krb5i | Flavor::Krb5p))
        })
    })
}

/// The settings of `new` that differ from the running `old` and that a reload does not
/// apply, by their TOML names. Every field of [`Config`] is named here (the pattern
/// has no `..`, so a new field does not compile until it is placed): the exports, TLS
/// and the principal map are reloaded; the rest needs a restart.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let Config {
        listen,
        exports: _,
        state_dir,
        grace,
        lease_time,
        max_record_size,
        max_io_size,
        max_slots_per_session,
        max_ops_per_compound,
        max_cached_reply,
        max_clients,
        max_sessions_per_client,
        max_reply_cache_bytes,
        max_connections,
        max_in_flight_bytes,
        idle_timeout,
        callback_timeout_ms,
        delegations,
        recall_wait_ms,
        max_held_requests,
        busy_poll_us,
        txn,
        max_txn_compounds,
        txn_timeout,
        persistent_sessions,
        async_copy_threshold,
        async_copy_chunk,
        metrics,
        handles,
        tls: _,
        kerberos,
        async_copy_pause: _,
        mutations: _,
    } = new;
    let mut v = Vec::new();
    let mut differ = |name: &str, changed: bool| {
        if changed {
            v.push(name.to_string());
        }
    };
    differ("listen", *listen != old.listen);
    differ("state_dir", *state_dir != old.state_dir);
    differ("grace", *grace != old.grace);
    differ("lease_time", *lease_time != old.lease_time);
    differ("max_record_size", *max_record_size != old.max_record_size);
    differ("max_io_size", *max_io_size != old.max_io_size);
    differ(
        "max_slots_per_session",
        *max_slots_per_session != old.max_slots_per_session,
    );
    differ(
        "max_ops_per_compound",
        *max_ops_per_compound != old.max_ops_per_compound,
    );
    differ(
        "max_cached_reply",
        *max_cached_reply != old.max_cached_reply,
    );
    differ("max_clients", *max_clients != old.max_clients);
    differ(
        "max_sessions_per_client",
        *max_sessions_per_client != old.max_sessions_per_client,
    );
    differ(
        "max_reply_cache_bytes",
        *max_reply_cache_bytes != old.max_reply_cache_bytes,
    );
    differ("max_connections", *max_connections != old.max_connections);
    differ("busy_poll_us", *busy_poll_us != old.busy_poll_us);
    differ(
        "max_in_flight_bytes",
        *max_in_flight_bytes != old.max_in_flight_bytes,
    );
    differ("idle_timeout", *idle_timeout != old.idle_timeout);
    differ(
        "callback_timeout_ms",
        *callback_timeout_ms != old.callback_timeout_ms,
    );
    differ("delegations", *delegations != old.delegations);
    differ("recall_wait_ms", *recall_wait_ms != old.recall_wait_ms);
    differ(
        "max_held_requests",
        *max_held_requests != old.max_held_requests,
    );
    differ("txn", *txn != old.txn);
    differ(
        "max_txn_compounds",
        *max_txn_compounds != old.max_txn_compounds,
    );
    differ("txn_timeout", *txn_timeout != old.txn_timeout);
    differ(
        "persistent_sessions",
        *persistent_sessions != old.persistent_sessions,
    );
    differ(
        "async_copy_threshold",
        *async_copy_threshold != old.async_copy_threshold,
    );
    differ(
        "async_copy_chunk",
        *async_copy_chunk != old.async_copy_chunk,
    );
    differ("metrics", *metrics != old.metrics);
    differ("handles", *handles != old.handles);
    let keytab =
        |k: &Option<crate::kerberos::KerberosConfig>| k.as_ref().and_then(|k| k.keytab.clone());
    differ("kerberos.keytab", keytab(kerberos) != keytab(&old.kerberos));
    v
}

/// Applies the exports `cfgs` to the running server, logging each change.
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

/// The control socket's answer to `reload`: what changed, or `refused: REASON`.
pub fn answer(server: &Server) -> String {
    match reload(server) {
        Ok(report) => report.to_string(),
        Err(e) => format!("{REFUSED}{e}\n"),
    }
}

/// How the control socket's answer starts when a reload was refused.
pub const REFUSED: &str = "refused: ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_settings_are_named_and_reloaded_ones_are_not() {
        let old = Config::default();
        assert!(restart_only_changes(&old, &old.clone()).is_empty());
        let mut new = old.clone();
        new.listen = "127.0.0.1:2050".parse().unwrap();
        new.lease_time = 30;
        new.max_connections = 7;
        new.metrics = Some("127.0.0.1:9464".parse().unwrap());
        new.handles = crate::config::HandleChoice::Table;
        new.kerberos = Some(crate::kerberos::KerberosConfig {
            keytab: Some("/k".into()),
            map: Some("/m".into()),
        });
        new.tls = Some(TlsFiles {
            cert: "/c".into(),
            key: "/k".into(),
            client_ca: None,
        });
        new.exports.push(ExportConfig {
            name: "/x".into(),
            path: "/x".into(),
            backend: crate::config::BackendKind::Memory,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
        assert_eq!(
            restart_only_changes(&old, &new),
            [
                "listen",
                "lease_time",
                "max_connections",
                "metrics",
                "handles",
                "kerberos.keytab"
            ]
        );
        let report = ReloadReport {
            need_restart: vec!["listen".into()],
            ..Default::default()
        };
        assert_eq!(
            report.to_string(),
            "listen changed: takes effect after a restart\n\
             0 export(s) unchanged; nothing to apply\n"
        );
    }
}
