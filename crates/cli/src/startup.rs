//! What `txnfs serve` tells its administrator when it starts: ONE summary line with
//! the version, the listen address, the state directory, grace, rpcbind, and every
//! export with its path, layers, read-only, transactions and clients; and a warning
//! when the server listens beyond this host while an export has no client rules.

use txnfs_server::{Config, ExportConfig};

/// "/ = /srv/data (layers txn,local; read-write; transactions) for 10.0.0.0/8(rw,root_squash)"
fn export_summary(cfg: &Config, e: &ExportConfig) -> String {
    let clients = if e.clients.is_empty() {
        "this host only".to_string()
    } else {
        let specs: Vec<String> = e.clients.iter().map(|r| r.describe()).collect();
        specs.join(" ")
    };
    // The stack as it runs: with transactions on, the server puts `txn` on top.
    let e = if cfg.txn {
        txnfs_server::export::with_txn_layer(e)
    } else {
        e.clone()
    };
    let layers: Vec<&str> = e.backend.names().iter().map(|n| n.as_ref()).collect();
    let txn = layers
        .iter()
        .any(|n| n.split(':').next().unwrap_or(n).trim() == "txn");
    let path = match e.backend.bottom() {
        Some("local") => absolute(&e.path),
        Some(other) => format!("({other})"),
        None => "(prebuilt)".into(),
    };
    format!(
        "{} = {path} (layers {}; {}; {}) for {clients}",
        e.name,
        if layers.is_empty() {
            "prebuilt".into()
        } else {
            layers.join(",")
        },
        if e.read_only {
            "read-only"
        } else {
            "read-write"
        },
        if txn {
            "transactions"
        } else {
            "no transactions"
        }
    )
}

/// `p` made absolute (symbolic links resolved) when it exists: the log says which
/// directory, whatever the server's working directory was.
fn absolute(p: &std::path::Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The start-up summary of a server listening on `listen` with `cfg`, `rpcbind`
/// saying whether it registered with the portmapper.
pub fn summary(cfg: &Config, listen: std::net::SocketAddr, rpcbind: &str) -> String {
    let exports: Vec<String> = cfg.exports.iter().map(|e| export_summary(cfg, e)).collect();
    format!(
        "txnfs {} serving NFSv3 (with MOUNT), NFSv4.0, NFSv4.1 and NFSv4.2 on {listen}; state directory {}; grace {} \
         (lease {} s); delegations {}; persistent sessions {}; RPC-with-TLS {}; rpcbind {rpcbind}; exports: {}",
        env!("CARGO_PKG_VERSION"),
        absolute(&cfg.state_dir()),
        on(cfg.grace),
        cfg.lease_time,
        on(cfg.delegations),
        on(cfg.persistent_sessions),
        match &cfg.tls {
            None => "off".to_string(),
            Some(t) if t.client_ca.is_some() => format!("on ({}, client certificates verified)", t.cert.display()),
            Some(t) => format!("on ({})", t.cert.display()),
        },
        exports.join("; ")
    )
}

/// What `txnfs serve --check` prints for a configuration that passed every check: one
/// line per export, as the start-up summary names them.
pub fn check_summary(cfg: &Config) -> String {
    let mut s = format!(
        "configuration OK: would listen on {}; state directory {}; {} export(s):\n",
        cfg.listen,
        absolute(&cfg.state_dir()),
        cfg.exports.len()
    );
    for e in &cfg.exports {
        s.push_str(&format!("  {}\n", export_summary(cfg, e)));
    }
    s
}

/// The warning for a server listening on `listen`, beyond the loopback interface,
/// whose exports without client rules other hosts cannot mount (ADR 0043).
pub fn local_only_warning(cfg: &Config, listen: std::net::SocketAddr) -> Option<String> {
    if listen.ip().to_canonical().is_loopback() {
        return None;
    }
    let local: Vec<&str> = cfg
        .exports
        .iter()
        .filter(|e| e.clients.is_empty())
        .map(|e| e.name.as_str())
        .collect();
    (!local.is_empty()).then(|| {
        format!(
            "listening on {listen}, but export(s) {} have no client rules: only this host may \
             mount them; give --client SPEC, --exports FILE or clients = [...] in the \
             configuration (e.g. 10.0.0.0/8(rw))",
            local.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_server::BackendKind;

    #[test]
    fn the_summary_names_every_export_with_its_stack() {
        let mut cfg = Config {
            state_dir: Some("/tmp/st".into()),
            ..Config::default()
        };
        cfg.exports.push(ExportConfig {
            name: "/data".into(),
            path: "/srv/data".into(),
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
        cfg.exports.push(ExportConfig {
            name: "/ro".into(),
            path: "/srv/ro".into(),
            backend: BackendKind::Local,
            read_only: true,
            clients: Vec::new(),
            prebuilt: None,
        });
        let s = summary(&cfg, "127.0.0.1:2049".parse().unwrap(), "off");
        for want in [
            "serving NFSv3 (with MOUNT), NFSv4.0, NFSv4.1 and NFSv4.2 on 127.0.0.1:2049",
            "state directory /tmp/st",
            "grace on",
            "/data = /srv/data (layers txn,local; read-write; transactions) for this host only",
            "/ro = /srv/ro (layers txn,local; read-only; transactions)",
        ] {
            assert!(s.contains(want), "{want:?} missing from {s}");
        }
        cfg.txn = false;
        let s = summary(&cfg, "127.0.0.1:2049".parse().unwrap(), "off");
        assert!(
            s.contains("(layers local; read-write; no transactions)"),
            "{s}"
        );
        cfg.exports[1].clients =
            vec![txnfs_server::exportrules::parse_rule("10.0.0.0/8(rw)").unwrap()];
        let s = summary(&cfg, "127.0.0.1:2049".parse().unwrap(), "off");
        assert!(
            s.contains("no transactions) for 10.0.0.0/8(rw,root_squash)"),
            "{s}"
        );
    }

    #[test]
    fn listening_beyond_this_host_without_rules_is_warned_about() {
        let mut cfg = Config::default();
        cfg.exports.push(ExportConfig {
            name: "/data".into(),
            path: "/srv/data".into(),
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        });
        let any = "0.0.0.0:2049".parse().unwrap();
        assert_eq!(
            local_only_warning(&cfg, "127.0.0.1:2049".parse().unwrap()),
            None
        );
        assert_eq!(
            local_only_warning(&cfg, "[::1]:2049".parse().unwrap()),
            None
        );
        let w = local_only_warning(&cfg, any).unwrap();
        assert!(w.contains("/data have no client rules"), "{w}");
        cfg.exports[0].clients = vec![txnfs_server::exportrules::parse_rule("*").unwrap()];
        assert_eq!(local_only_warning(&cfg, any), None);
    }
}
