//! The control socket: a Unix socket in the state directory (`control.sock`, mode
//! 0600, so only the server's user and root reach it) through which `txnfs stats`
//! asks a running server for its reports and `txnfs reload` makes it re-read its
//! configuration (ADR 0048). One request line, one text answer, then the
//! connection closes. The state directory's lock (ADR 0034) makes the server the only
//! one using the directory, so a socket file left by a killed server is replaced.

use super::Reports;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// The control socket's file name in the state directory.
pub const SOCKET_NAME: &str = "control.sock";

/// The commands, as `txnfs stats` and `txnfs reload` send them.
pub const COMMANDS: [&str; 4] = ["stats", "clients", "metrics", "reload"];

/// Longest request line read.
const MAX_LINE: u64 = 256;

/// Where the control socket of a server with this state directory is.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// Listen on the control socket of `state_dir` and answer until the task is aborted.
pub fn spawn(
    state_dir: &Path,
    reports: Arc<Reports>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let path = socket_path(state_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let reports = reports.clone();
            tokio::spawn(async move {
                let (rd, mut wr) = stream.into_split();
                let mut line = String::new();
                let mut rd = BufReader::new(rd.take(MAX_LINE));
                let read = rd.read_line(&mut line);
                if !matches!(
                    tokio::time::timeout(Duration::from_secs(5), read).await,
                    Ok(Ok(_))
                ) {
                    return;
                }
                let answer = reports.answer(line.trim()).await;
                let _ = wr.write_all(answer.as_bytes()).await;
                let _ = wr.shutdown().await;
            });
        }
    }))
}
