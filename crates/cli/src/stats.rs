//! `txnfs stats`: a running server's counters, read through the control socket in its
//! state directory (ADR 0045), as `nfsstat` reads the kernel's.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use txnfs_server::report::control::socket_path;
use txnfs_server::Config;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs stats                                  the server on the default state directory\n  \
    txnfs stats --state-dir /tmp/txnfs-state     the server started with that --state-dir\n  \
    txnfs stats --clients                        one line per NFSv4 client\n  \
    txnfs stats --prometheus                     the metrics in Prometheus' text format\n\n\
    The summary: connections and COMPOUNDs; the transport's gathered writes (records per\n\
    write); clients, sessions and fore-channel slots in use (executing a request now) of\n\
    those granted; delegations; transactions and the bytes appended to their journal;\n\
    READ/WRITE bytes per export; then per op its calls, errors and latency (p50, p99).")]
pub struct StatsArgs {
    /// The state directory of the server to ask (as given to `txnfs serve`; default
    /// /var/lib/txnfs for root, else ~/.local/state/txnfs).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// List the NFSv4 clients: id, uid, sessions, connections, delegations, idle time,
    /// state, slots in use, COMPOUNDs, ops and READ/WRITE bytes (NFSv4.1+ sessions).
    #[arg(long, conflicts_with = "prometheus")]
    pub clients: bool,
    /// Print the metrics as the Prometheus endpoint (`serve --metrics`) serves them.
    #[arg(long)]
    pub prometheus: bool,
}

pub fn run(a: StatsArgs) -> Result<()> {
    let command = if a.clients {
        "clients"
    } else if a.prometheus {
        "metrics"
    } else {
        "stats"
    };
    print!("{}", ask(a.state_dir, command)?);
    Ok(())
}

/// Sends `command` to the control socket of the server of `state_dir` (or the default
/// state directory) and returns its answer.
pub fn ask(state_dir: Option<PathBuf>, command: &str) -> Result<String> {
    let dir = Config {
        state_dir,
        ..Config::default()
    }
    .state_dir();
    let path = socket_path(&dir);
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no txnfs server runs on state directory {} (no {}); give the server's \
             --state-dir",
            dir.display(),
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => bail!(
            "the txnfs server of state directory {} is not running (its control socket \
             {} is left from an earlier run)",
            dir.display(),
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot reach {}", path.display())),
    };
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(format!("{command}\n").as_bytes())
        .with_context(|| format!("cannot ask {}", path.display()))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("no answer from {}", path.display()))?;
    Ok(out)
}
