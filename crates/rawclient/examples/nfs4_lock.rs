//! `nfs4_lock`: a second NFSv4.1 client on the host that takes a whole-file write lock,
//! for the Linux-guest checks that a lock the guest takes (NLM over NFSv3, or NFSv4)
//! conflicts with a v4 lock held elsewhere (tests/linux-client/run.sh, actions
//! `v4-lock-hold` and `v4-lock-try`).
//!
//! ```text
//! nfs4_lock ADDR PATH hold   # lock [0, EOF) of PATH (created if missing); print "locked";
//!                            # keep it until standard input closes; unlock; print "released"
//! nfs4_lock ADDR PATH try    # try once: "locked" (then unlock) exit 0, or "conflict" exit 3
//! ```
//!
//! PATH is relative to the server's root file handle (the export's root for `txnfs
//! serve DIR`). Any other failure prints the op and its status and exits 1.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_rawclient::tcp::{auth_sys, Options, Session};

const NAME: &[u8] = b"nfs4-lock";
/// The whole file (RFC 8881 §18.10: a length of all ones means to the end, and beyond).
const TO_EOF: u64 = u64::MAX;

#[derive(Debug)]
enum Failure {
    Usage,
    Call(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Call(s)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(Failure::Usage) => {
            eprintln!("usage: nfs4_lock ADDR PATH hold|try");
            ExitCode::from(2)
        }
        Err(Failure::Call(e)) => {
            eprintln!("nfs4_lock: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run() -> Result<ExitCode, Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, path, mode] = args.as_slice() else {
        return Err(Failure::Usage);
    };
    let addr: SocketAddr = addr.parse().map_err(|_| Failure::Usage)?;
    let hold = match mode.as_str() {
        "hold" => true,
        "try" => false,
        _ => return Err(Failure::Usage),
    };
    let opts = Options {
        tag: NAME,
        cred: auth_sys(NAME, 0, 0),
        timeout: Some(Duration::from_secs(30)),
        fore: txnfs_rawclient::channel(1000, 1),
        back: txnfs_rawclient::channel(1000, 1),
    };
    // One client per process: a second `nfs4_lock` must be another lock holder.
    let owner = format!("nfs4-lock-{}", std::process::id());
    let mut s = Session::new(addr, owner.as_bytes(), opts).await?;
    let (osid, fh) = open(&mut s, path).await?;
    let lsid = match lock(&mut s, &fh, &osid).await? {
        Some(lsid) => lsid,
        None => {
            println!("conflict");
            return Ok(ExitCode::from(3));
        }
    };
    println!("locked");
    if hold {
        // Standard input closing (the host's action ends) is the signal to let go;
        // until then a SEQUENCE every few seconds renews the lease that keeps the lock.
        let mut eof = tokio::task::spawn_blocking(|| {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        });
        loop {
            tokio::select! {
                _ = &mut eof => break,
                _ = tokio::time::sleep(Duration::from_secs(5)) => {
                    s.plain(vec![]).await.map_err(|e| format!("SEQUENCE: {e}"))?;
                }
            }
        }
    }
    let r = s
        .plain(vec![
            txnfs_rawclient::putfh(&fh),
            txnfs_rawclient::locku(true, 0, TO_EOF, &lsid),
        ])
        .await
        .map_err(|e| format!("LOCKU: {e}"))?;
    if r.status != nfsstat4::NFS4_OK {
        return Err(format!("LOCKU: {:?}", r.status).into());
    }
    if hold {
        println!("released");
    }
    Ok(ExitCode::SUCCESS)
}

/// PUTROOTFH, LOOKUP of each directory of `path`, OPEN (create if missing) of its last
/// name, GETFH: the open stateid and the file handle.
async fn open(s: &mut Session, path: &str) -> Result<(stateid4, Bytes), String> {
    let names: Vec<&str> = path.split('/').filter(|n| !n.is_empty()).collect();
    let Some((file, dirs)) = names.split_last() else {
        return Err(format!("no file name in {path:?}"));
    };
    let mut ops = vec![nfs_argop4::OP_PUTROOTFH];
    ops.extend(dirs.iter().map(|d| txnfs_rawclient::lookup(d)));
    ops.push(txnfs_rawclient::open(
        file.as_bytes(),
        NAME,
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
        txnfs_rawclient::openhow(true),
    ));
    ops.push(nfs_argop4::OP_GETFH);
    let r = s.plain(ops).await.map_err(|e| format!("OPEN: {e}"))?;
    txnfs_rawclient::opened(&r).ok_or_else(|| format!("OPEN {path}: {:?}", r.status))
}

/// LOCK [0, EOF) for writing by a new lock owner: its stateid, or `None` when DENIED.
async fn lock(s: &mut Session, fh: &Bytes, osid: &stateid4) -> Result<Option<stateid4>, String> {
    let r = s
        .plain(vec![
            txnfs_rawclient::putfh(fh),
            txnfs_rawclient::lock_new_owner(true, 0, TO_EOF, osid, NAME),
        ])
        .await
        .map_err(|e| format!("LOCK: {e}"))?;
    match r.resarray.get(2) {
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(ok))) => Ok(Some(ok.lock_stateid.clone())),
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4ERR_DENIED(_))) => Ok(None),
        _ => Err(format!("LOCK: {:?} {:?}", r.status, r.resarray)),
    }
}
