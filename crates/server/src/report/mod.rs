//! The server's counters as an administrator reads them (ADR 0045): rendered as text
//! (`render`: Prometheus exposition, an nfsstat-like summary, the client table) and
//! served through the control socket in the state directory (`control`, for `txnfs
//! stats`) and, when configured, a Prometheus endpoint (`http`).

pub mod control;
pub mod http;
pub mod render;

use crate::server::Server;
use std::sync::Arc;

/// What the reports are made from: the server and its NFSv3 front end (whose reply
/// cache lives in the service).
pub struct Reports {
    pub server: Arc<Server>,
    pub v3: Arc<crate::v3::V3>,
}

impl Reports {
    /// The answer to a control-socket command ([`control::COMMANDS`]). Made on the
    /// blocking pool: it takes the state core's lock, which request threads hold
    /// briefly, and the runtime's workers never wait.
    pub async fn answer(&self, command: &str) -> String {
        let srv = self.server.clone();
        let drc = Some(self.v3.drc.stats());
        let command = command.to_string();
        tokio::task::spawn_blocking(move || match command.as_str() {
            "stats" => render::summary(&srv, drc),
            "clients" => render::clients(&srv),
            "metrics" => render::prometheus(&srv, drc),
            "reload" => crate::reload::answer(&srv),
            other => format!(
                "unknown command {other:?}; one of: {}\n",
                control::COMMANDS.join(", ")
            ),
        })
        .await
        .unwrap_or_else(|e| format!("the report failed: {e}\n"))
    }
}
