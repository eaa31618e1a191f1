//! The start gate of a client process (`txnfs bench run --processes N`, ADR 0053): the
//! child runs its set-up, says `READY` on stdout, and waits for the parent's
//! `START <unix ns>` on stdin; it sleeps until that instant, and the runner releases its
//! workers then and records when that really was. After the timed part it says `DONE`,
//! and when everything is cleaned up it prints `RESULT <json>`.
//!
//! The lines are the whole protocol; anything else goes to stderr.

use anyhow::{anyhow, bail, Context};
use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const READY: &str = "READY";
pub const START: &str = "START";
pub const DONE: &str = "DONE";
pub const RESULT: &str = "RESULT";

/// Nanoseconds since the Unix epoch now.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// Write one protocol line to stdout, flushed.
pub fn say(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .context("writing to the parent")
}

/// Parse `START <unix ns>`.
pub fn parse_start(line: &str) -> anyhow::Result<u64> {
    let ns = line
        .trim()
        .strip_prefix(START)
        .ok_or_else(|| anyhow!("expected {START} <unix ns> from the parent, got {line:?}"))?;
    ns.trim()
        .parse()
        .map_err(|_| anyhow!("bad start instant in {line:?}"))
}

/// Say READY, wait for the start instant and sleep until it; returns the instant.
pub async fn wait_for_start() -> anyhow::Result<u64> {
    say(READY)?;
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await
    .context("reading the start instant")??;
    if line.is_empty() {
        bail!("the parent closed stdin before the start");
    }
    let at = parse_start(&line)?;
    let now = unix_ns();
    if at > now {
        tokio::time::sleep(Duration::from_nanos(at - now)).await;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_lines() {
        assert_eq!(parse_start("START 1234\n").unwrap(), 1234);
        assert!(parse_start("GO 1").is_err());
        assert!(parse_start("START x").is_err());
    }
}
