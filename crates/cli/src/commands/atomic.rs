//! `--atomic` for cp, rm, mv and mkdir: the whole command is ONE transaction on the
//! server (ADR 0021) — it happens entirely or not at all. The commands plan as usual
//! (stat, list, read the sources), then hand their changes to the client's
//! [`txnfs_client::Transaction`]. A failure prints one line naming the step that
//! failed and saying that nothing was changed; the exit code is 1. There is no
//! non-atomic fallback: a server without transactions makes the command fail.

use super::url::{NfsUrl, ServerKey};
use super::{usage, Ctx};
use txnfs_client::{ClientError, Fs};

/// The one server every URL is on (a transaction runs on one server); a usage error
/// otherwise.
pub async fn one_server(ctx: &mut Ctx, cmd: &str, urls: &[&NfsUrl]) -> anyhow::Result<Fs> {
    let Some(first) = urls.first() else {
        return usage(format!("{cmd} --atomic: nothing to do"));
    };
    let key: ServerKey = first.server();
    if let Some(other) = urls.iter().find(|u| u.server() != key) {
        return usage(format!(
            "{cmd} --atomic: '{}' and '{}' are on different servers; a transaction runs on one",
            first.display, other.display
        ));
    }
    ctx.fs(&key).await
}

/// Report the outcome of a transaction: nothing on success; on failure one line (the
/// client's error says which step failed and that nothing was changed).
pub fn report(ctx: &mut Ctx, cmd: &str, r: Result<(), ClientError>) {
    if let Err(e) = r {
        ctx.fail(format!("{cmd} --atomic"), e);
    }
}

/// Planning reported failures (an unreadable source, a missing operand): with
/// `--atomic` nothing is sent then. True when the command must stop.
pub fn planning_failed(ctx: &mut Ctx, cmd: &str) -> bool {
    if ctx.failures() == 0 {
        return false;
    }
    ctx.fail_msg(format!(
        "{cmd} --atomic: not started because of the errors above; nothing was changed"
    ));
    true
}
