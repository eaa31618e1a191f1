//! The Network Status Monitor (X/Open XNFS chapter 11), program 100024 version 1, as
//! far as a lock server needs it.
//!
//! * Who holds NLM locks is kept in the state directory (`nsm`: one line per host,
//!   its name in hex and its address), written before the first lock of a host is
//!   granted, so that it survives a restart or a crash.
//! * After a restart, every host of that list gets SM_NOTIFY (through its
//!   portmapper, at its statd) with this instance's state number, so its lockd
//!   reclaims its locks in the grace period; the grace period waits for these hosts
//!   (as `nlm:`-prefixed owners beside the v4 clients).
//! * SM_NOTIFY from a client's statd (that client rebooted) releases every lock of
//!   that host. SM_STAT, SM_UNMON and SM_UNMON_ALL answer this server's state number;
//!   SM_MON is refused (this server monitors hosts for its own locks only).

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::sm::*;
use txnfs_rpc::ReplyBody;
use txnfs_xdr::{Decode, Encode};

use crate::server::Server;

/// The file in the state directory.
pub const FILE_NAME: &str = "nsm";
/// The grace-period owner of an NLM host: this prefix, then its name.
pub const GRACE_PREFIX: &[u8] = b"nlm:";

const SM_NULL: u32 = 0;
const SM_STAT: u32 = 1;
const SM_MON: u32 = 2;
const SM_UNMON: u32 = 3;
const SM_UNMON_ALL: u32 = 4;
const SM_SIMU_CRASH: u32 = 5;
const SM_NOTIFY: u32 = 6;

/// The pauses before each SM_NOTIFY attempt to one host after a restart: the first
/// lets the server register with rpcbind before the host's lockd looks it up to
/// reclaim; later ones give a client that restarted with the server time to run its
/// statd.
const NOTIFY_PAUSES: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(20),
];

#[derive(Default)]
struct Lists {
    /// Hosts holding (or having held, since they were last released) NLM locks.
    monitored: BTreeMap<Bytes, IpAddr>,
    /// The previous instance's hosts not yet notified of this restart.
    to_notify: BTreeMap<Bytes, IpAddr>,
}

/// The monitored hosts and this instance's NSM state number.
pub struct Nsm {
    /// Odd while up, greater on every start (from the boot epoch).
    state: i32,
    /// `None`: nothing is persisted (unit tests).
    path: Option<PathBuf>,
    lists: Mutex<Lists>,
}

impl Nsm {
    /// The state of an instance with boot epoch `epoch`, the previous instance's list
    /// read from `state_dir` (a corrupt or unreadable file is an error: the hosts
    /// would never learn that their locks are gone).
    pub fn open(state_dir: &Path, epoch: u32) -> io::Result<Nsm> {
        let path = state_dir.join(FILE_NAME);
        let to_notify = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} has a line that is not \"<hex name> <address>\"; fix or remove it \
                         (removing it skips telling those NFSv3 clients to reclaim their locks)",
                        path.display()
                    ),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Nsm {
            state: state_number(epoch),
            path: Some(path),
            lists: Mutex::new(Lists {
                monitored: BTreeMap::new(),
                to_notify,
            }),
        })
    }

    /// No persisted list (unit tests).
    pub fn empty(epoch: u32) -> Nsm {
        Nsm {
            state: state_number(epoch),
            path: None,
            lists: Mutex::default(),
        }
    }

    /// This instance's NSM state number.
    pub fn state(&self) -> i32 {
        self.state
    }

    /// The previous instance's hosts, as grace-period owners.
    pub fn grace_owners(&self) -> Vec<Bytes> {
        super::lock(&self.lists)
            .to_notify
            .keys()
            .map(|n| [GRACE_PREFIX, n].concat().into())
            .collect()
    }

    /// The previous instance's hosts still to be notified.
    pub fn to_notify(&self) -> Vec<(Bytes, IpAddr)> {
        let l = super::lock(&self.lists);
        l.to_notify.iter().map(|(n, a)| (n.clone(), *a)).collect()
    }

    /// Host `name` at `addr` holds locks: recorded durably before this returns.
    pub fn monitor(&self, name: &Bytes, addr: IpAddr) -> io::Result<()> {
        let mut l = super::lock(&self.lists);
        if l.monitored.get(name) == Some(&addr) {
            return Ok(());
        }
        let before = l.monitored.insert(name.clone(), addr);
        let r = self.save(&l);
        if r.is_err() {
            match before {
                Some(a) => l.monitored.insert(name.clone(), a),
                None => l.monitored.remove(name),
            };
        }
        r
    }

    /// Host `name` holds nothing any more.
    pub fn unmonitor(&self, name: &[u8]) {
        let mut l = super::lock(&self.lists);
        if l.monitored.remove(name).is_some() {
            self.save_or_warn(&l);
        }
    }

    /// Host `name` of the previous instance was told of the restart (or could not be).
    pub fn notified(&self, name: &[u8]) {
        let mut l = super::lock(&self.lists);
        if l.to_notify.remove(name).is_some() {
            self.save_or_warn(&l);
        }
    }

    fn save_or_warn(&self, l: &Lists) {
        if let Err(e) = self.save(l) {
            tracing::warn!("cannot write the NSM host list: {e}");
        }
    }

    /// Writes both lists (a host not yet notified stays listed for the next start).
    fn save(&self, l: &Lists) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut all = l.to_notify.clone();
        all.extend(l.monitored.iter().map(|(n, a)| (n.clone(), *a)));
        let mut text = String::new();
        for (name, addr) in &all {
            let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("{hex} {addr}\n"));
        }
        crate::statedir::write_atomic(path, text.as_bytes())
    }
}

/// NSM state numbers are odd while the host is up and grow with every start.
fn state_number(epoch: u32) -> i32 {
    ((epoch & 0x3fff_ffff) as i32) * 2 + 1
}

fn parse(text: &str) -> Option<BTreeMap<Bytes, IpAddr>> {
    let mut out = BTreeMap::new();
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (hex, addr) = l.split_once(' ')?;
        if !hex.len().is_multiple_of(2) {
            return None;
        }
        let name: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
        out.insert(Bytes::from(name?), addr.trim().parse().ok()?);
    }
    Some(out)
}

/// Runs one NSM call from `peer`.
pub async fn call(srv: &Arc<Server>, peer: IpAddr, proc_num: u32, args: Bytes) -> ReplyBody {
    let nsm = &srv.nlm.nsm;
    let stat_res = |res_stat| {
        ReplyBody::Success(
            sm_stat_res {
                res_stat,
                state: nsm.state,
            }
            .to_bytes(),
        )
    };
    match proc_num {
        SM_NULL | SM_SIMU_CRASH => ReplyBody::Success(Bytes::new()),
        SM_STAT => match sm_name::from_bytes(args) {
            Ok(_) => stat_res(sm_res::STAT_SUCC),
            Err(_) => ReplyBody::GarbageArgs,
        },
        SM_MON => match mon::from_bytes(args) {
            Ok(_) => stat_res(sm_res::STAT_FAIL),
            Err(_) => ReplyBody::GarbageArgs,
        },
        SM_UNMON | SM_UNMON_ALL => {
            let ok = if proc_num == SM_UNMON {
                mon_id::from_bytes(args).is_ok()
            } else {
                my_id::from_bytes(args).is_ok()
            };
            if !ok {
                return ReplyBody::GarbageArgs;
            }
            ReplyBody::Success(sm_stat { state: nsm.state }.to_bytes())
        }
        SM_NOTIFY => {
            let Ok(a) = stat_chge::from_bytes(args) else {
                return ReplyBody::GarbageArgs;
            };
            tracing::info!(
                host = %String::from_utf8_lossy(&a.mon_name),
                %peer,
                state = a.state,
                "an NFSv3 client rebooted (SM_NOTIFY): its locks are released"
            );
            // The NSM list is rewritten (fsync): off the transport thread.
            let s = srv.clone();
            let released = tokio::task::spawn_blocking(move || {
                super::procs::release_hosts(&s, &a.mon_name, Some(peer))
            })
            .await;
            match released {
                Ok(_) => ReplyBody::Success(Bytes::new()),
                Err(e) => {
                    tracing::error!(%peer, "SM_NOTIFY task failed: {e}");
                    ReplyBody::SystemErr
                }
            }
        }
        _ => ReplyBody::ProcUnavail,
    }
}

/// After a restart: SM_NOTIFY to every host of the previous instance, each in a task
/// of its own (a few attempts; a host that cannot be reached finds out when its next
/// request is refused). The tasks, for the server to stop when it stops.
pub fn notify_all(srv: &Arc<Server>) -> Vec<tokio::task::JoinHandle<()>> {
    let hosts = srv.nlm.nsm.to_notify();
    if hosts.is_empty() {
        return Vec::new();
    }
    tracing::info!(
        hosts = hosts.len(),
        "telling the NFSv3 clients that held locks of the restart (SM_NOTIFY)"
    );
    hosts
        .into_iter()
        .map(|(name, addr)| {
            let srv = srv.clone();
            tokio::spawn(async move { notify(&srv, name, addr).await })
        })
        .collect()
}

async fn notify(srv: &Server, name: Bytes, addr: IpAddr) {
    let mon_name = super::callback::local_addr_towards(addr)
        .map(|a| a.to_string())
        .unwrap_or_else(hostname);
    let args = stat_chge {
        mon_name: Bytes::from(mon_name),
        state: srv.nlm.nsm.state,
    }
    .to_bytes();
    for (attempt, pause) in NOTIFY_PAUSES.into_iter().enumerate() {
        tokio::time::sleep(pause).await;
        let r = super::callback::call(
            addr,
            srv.nlm.client_rpcbind_port(),
            super::NSM_PROGRAM,
            super::NSM_V1,
            SM_NOTIFY,
            args.clone(),
        )
        .await;
        match r {
            Ok(_) => {
                tracing::debug!(host = %String::from_utf8_lossy(&name), %addr, "SM_NOTIFY sent");
                break;
            }
            Err(e) if attempt + 1 == NOTIFY_PAUSES.len() => tracing::warn!(
                host = %String::from_utf8_lossy(&name),
                %addr,
                "cannot tell an NFSv3 client of the restart (SM_NOTIFY): {e}"
            ),
            Err(e) => tracing::debug!(%addr, "SM_NOTIFY attempt failed: {e}"),
        }
    }
    srv.nlm.nsm.notified(&name);
}

/// This machine's name, for SM_NOTIFY when no address towards the client is known.
fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_survives_a_restart() {
        let d = std::env::temp_dir().join(format!("txnfs-nsm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let n = Nsm::open(&d, 1).unwrap();
        assert_eq!(n.state() % 2, 1);
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        n.monitor(&Bytes::from_static(b"client a"), ip).unwrap();
        n.monitor(&Bytes::from_static(b"b"), ip).unwrap();
        n.unmonitor(b"b");
        drop(n);
        let n = Nsm::open(&d, 2).unwrap();
        assert!(n.state() > state_number(1));
        assert_eq!(n.to_notify(), vec![(Bytes::from_static(b"client a"), ip)]);
        assert_eq!(n.grace_owners(), vec![Bytes::from_static(b"nlm:client a")]);
        n.notified(b"client a");
        drop(n);
        assert!(Nsm::open(&d, 3).unwrap().to_notify().is_empty());
        std::fs::write(d.join(FILE_NAME), "zz 1.2.3.4\n").unwrap();
        assert!(Nsm::open(&d, 4).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
