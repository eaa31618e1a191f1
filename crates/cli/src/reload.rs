//! `txnfs reload`: asks a running server, through the control socket in its state
//! directory (ADR 0045), to read its configuration again and apply the changes it can
//! (exports, TLS certificate, principal map; ADR 0048); prints what changed and what
//! waits for a restart, or why nothing changed (exit status 1).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use txnfs_server::reload::REFUSED;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs reload                                 the server on the default state directory\n  \
    txnfs reload --state-dir /tmp/txnfs-state    the server started with that --state-dir\n\n\
    The server reads the --config and --exports files again (and keeps its command-line\n\
    flags), checks everything, and applies export additions, removals and rule changes,\n\
    the TLS certificate, key and client CAs (read again from their files) and the\n\
    Kerberos principal map; it names every other setting that changed as taking effect\n\
    after a restart. An invalid configuration (a TLS key that is not the certificate's,\n\
    a bad map line, a missing export directory...) changes nothing and exits 1 with the\n\
    reason. SIGHUP to `txnfs serve` does the same.")]
pub struct ReloadArgs {
    /// The state directory of the server to reload (as given to `txnfs serve`; default
    /// /var/lib/txnfs for root, else ~/.local/state/txnfs).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

pub fn run(a: ReloadArgs) -> Result<()> {
    let answer = crate::stats::ask(a.state_dir, "reload")?;
    match answer.strip_prefix(REFUSED) {
        Some(why) => bail!(
            "reload refused, the running configuration stays: {}",
            why.trim_end()
        ),
        None => {
            print!("{answer}");
            Ok(())
        }
    }
}
