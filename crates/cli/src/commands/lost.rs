//! A server that goes away mid-command: the first failure that is the connection's,
//! not the item's, ends the command with one summary line ("txnfs cp: connection to
//! HOST:PORT lost after 412 of 3000 files: Connection refused") instead of one line per
//! item that could not be sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use txnfs_client::ClientError;
use txnfs_rpc::RpcError;

/// What was lost, and why: the connection to a server could not be kept or made again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// "HOST:PORT", when the error names it.
    pub addr: Option<String>,
    /// "Connection refused", as coreutils would word it.
    pub why: String,
}

/// The strerror text of "I/O error: Connection refused (os error 111)".
fn plain(msg: &str) -> String {
    let msg = msg.strip_prefix("I/O error: ").unwrap_or(msg);
    match msg.rfind(" (os error ") {
        Some(i) if msg.ends_with(')') => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

/// Whether `e` is the connection's failure (every later request to that server would
/// fail the same way) rather than this item's.
pub fn connection_loss(e: &ClientError) -> Option<Loss> {
    match e {
        ClientError::Unreachable { addr, msg } => Some(Loss {
            addr: Some(addr.clone()),
            why: plain(msg),
        }),
        ClientError::NotNfsServer { addr, why } => Some(Loss {
            addr: Some(addr.clone()),
            why: format!("not an NFS server: {why}"),
        }),
        ClientError::Rpc(RpcError::Io(io)) => Some(Loss {
            addr: None,
            why: super::describe_io(io),
        }),
        ClientError::Rpc(RpcError::Disconnected) => Some(Loss {
            addr: None,
            why: "the server closed the connection".into(),
        }),
        ClientError::Timeout(d) => Some(Loss {
            addr: None,
            why: format!("no reply within {d:?}"),
        }),
        _ => None,
    }
}

/// Items of a command done so far, of how many (cp counts files): the summary line
/// says how far the command got.
#[derive(Debug, Clone)]
pub struct Tally {
    done: Arc<AtomicU64>,
    total: u64,
    noun: &'static str,
}

impl Tally {
    pub fn new(total: u64, noun: &'static str) -> Tally {
        Tally {
            done: Arc::new(AtomicU64::new(0)),
            total,
            noun,
        }
    }

    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// "after 412 of 3000 files"
    fn after(&self) -> String {
        format!(
            "after {} of {} {}",
            self.done.load(Ordering::Relaxed),
            self.total,
            self.noun
        )
    }
}

/// The one line that ends a command whose connection was lost.
pub fn summary(command: &str, server: &str, loss: &Loss, tally: Option<&Tally>) -> String {
    match tally {
        Some(t) => format!(
            "txnfs {command}: connection to {server} lost {}: {}",
            t.after(),
            loss.why
        ),
        None => format!("txnfs {command}: connection to {server} lost: {}", loss.why),
    }
}

/// The command was ended by a lost connection, already reported by [`summary`]: the
/// error that unwinds it, printed by no one.
#[derive(Debug)]
pub struct ConnectionLost;

impl std::fmt::Display for ConnectionLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection lost")
    }
}

impl std::error::Error for ConnectionLost {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reconnect_is_a_loss_and_an_nfs_status_is_not() {
        let e = ClientError::Unreachable {
            addr: "127.0.0.1:2050".into(),
            msg: "I/O error: Connection refused (os error 111)".into(),
        };
        let loss = connection_loss(&e).unwrap();
        assert_eq!(loss.why, "Connection refused");
        let t = Tally::new(3000, "files");
        t.add(412);
        assert_eq!(
            summary("cp", "127.0.0.1:2050", &loss, Some(&t)),
            "txnfs cp: connection to 127.0.0.1:2050 lost after 412 of 3000 files: \
             Connection refused"
        );
        let nfs = ClientError::nfs("LOOKUP", 1, txnfs_proto::nfs4::nfsstat4::NFS4ERR_NOENT);
        assert!(connection_loss(&nfs).is_none());
    }
}
