//! NFSv3's byte-range locks (ADR 0041): the Network Lock Manager, program 100021
//! version 4 (X/Open XNFS chapter 10), and the Network Status Monitor, program 100024
//! version 1 (chapter 11), on the NFS port.
//!
//! NLM locks live in the one lock table of the state core beside the NFSv4 locks, so
//! that a v3 lock and a v4 lock conflict: an NLM host (the client machine, by its
//! `caller_name`) is a client of the table ([`txnfs_state::nlm_client`]) and an NLM
//! lock-owner is the host's `svid` and `oh`. The file handle is the v3 one.
//!
//! `procs` (the procedures, run off the transport thread) → `blocked` (blocking locks
//! waiting for their range, and the GRANTED callback) → `nsm` (who holds locks, kept
//! in the state directory across restarts; SM_NOTIFY both ways) → `share`
//! (SHARE/UNSHARE); `callback` is how the server calls a client's lockd or statd.

pub mod blocked;
pub mod callback;
pub mod nsm;
pub mod procs;
pub mod share;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use txnfs_state::ClientId;

/// The NLM program and the version served (the one NFSv3 clients use).
pub const NLM_PROGRAM: u32 = 100021;
pub const NLM_V4: u32 = 4;
/// The NSM program and its one version.
pub const NSM_PROGRAM: u32 = 100024;
pub const NSM_V1: u32 = 1;

/// NLM hosts known at once; a new one past it is refused (NLM4_DENIED_NOLOCKS).
pub const MAX_HOSTS: usize = 4096;

/// A lock held with a poisoned mutex: the guarded values are plain maps updated in
/// single steps, usable as they are.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One NLM host: its id in the lock table and the address it last called from (where
/// its lockd and statd are found).
#[derive(Debug, Clone, Copy)]
pub struct Host {
    pub id: ClientId,
    pub addr: IpAddr,
}

#[derive(Default)]
struct Hosts {
    by_name: HashMap<Bytes, Host>,
    /// The number of the next new host (ids are never reused within an instance).
    next: u32,
}

/// The NLM and NSM state of the server besides the lock table.
pub struct Nlm {
    hosts: Mutex<Hosts>,
    /// Blocking locks waiting for their range.
    pub blocked: blocked::Blocked,
    /// DOS share reservations (SHARE/UNSHARE).
    pub shares: share::Shares,
    /// Hosts holding locks, persisted; and this instance's NSM state number.
    pub nsm: nsm::Nsm,
    /// The port of the clients' portmappers (111), where their lockd and statd are
    /// looked up for callbacks.
    rpcbind_port: AtomicU16,
}

impl Nlm {
    /// The NLM state of an instance whose NSM list (from the previous instance) and
    /// state number `nsm` holds.
    pub fn new(nsm: nsm::Nsm) -> Self {
        Nlm {
            hosts: Mutex::new(Hosts {
                by_name: HashMap::new(),
                next: 1,
            }),
            blocked: Default::default(),
            shares: Default::default(),
            nsm,
            rpcbind_port: AtomicU16::new(txnfs_rpc::portmap::PMAP_PORT),
        }
    }

    /// The port where clients' portmappers listen (tests run their own elsewhere).
    pub fn set_client_rpcbind_port(&self, port: u16) {
        self.rpcbind_port.store(port, Ordering::Relaxed);
    }

    pub fn client_rpcbind_port(&self) -> u16 {
        self.rpcbind_port.load(Ordering::Relaxed)
    }

    /// The host called `name`, calling from `addr`, made known if new. At
    /// [`MAX_HOSTS`] the hosts for which `idle` is true (they hold nothing) are
    /// forgotten first; `None` when none is.
    pub fn host(
        &self,
        name: &Bytes,
        addr: IpAddr,
        idle: impl Fn(ClientId) -> bool,
    ) -> Option<Host> {
        let mut hosts = lock(&self.hosts);
        if let Some(h) = hosts.by_name.get_mut(name) {
            h.addr = addr;
            return Some(*h);
        }
        if hosts.by_name.len() >= MAX_HOSTS {
            hosts.by_name.retain(|_, h| !idle(h.id));
            if hosts.by_name.len() >= MAX_HOSTS {
                return None;
            }
        }
        let n = hosts.next;
        hosts.next = hosts.next.checked_add(1)?;
        let h = Host {
            id: txnfs_state::nlm_client(n),
            addr,
        };
        hosts.by_name.insert(name.clone(), h);
        Some(h)
    }

    /// The host called `name` if known (TEST and UNLOCK create none).
    pub fn known_host(&self, name: &Bytes) -> Option<Host> {
        lock(&self.hosts).by_name.get(name).copied()
    }

    /// Forgets the hosts called `name` or (if given) calling from `addr`; returns
    /// them.
    pub fn forget_hosts(&self, name: &[u8], addr: Option<IpAddr>) -> Vec<(Bytes, Host)> {
        let mut hosts = lock(&self.hosts);
        let gone: Vec<Bytes> = hosts
            .by_name
            .iter()
            .filter(|(n, h)| n.as_ref() == name || Some(h.addr) == addr)
            .map(|(n, _)| n.clone())
            .collect();
        gone.into_iter()
            .filter_map(|n| hosts.by_name.remove(&n).map(|h| (n, h)))
            .collect()
    }
}

/// NLM lock-owner bytes: the `svid` (4 bytes, big-endian), then the `oh`.
pub fn owner_bytes(svid: i32, oh: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + oh.len());
    v.extend_from_slice(&svid.to_be_bytes());
    v.extend_from_slice(oh);
    v
}

/// NLM's range (`l_len` 0 = to the end; an end past 2^64 - 1 is to the end too, as
/// knfsd reads it) as the lock table's (`u64::MAX` = to the end).
pub fn table_range(offset: u64, len: u64) -> (u64, u64) {
    if len == 0 || offset.checked_add(len).is_none() {
        (offset, u64::MAX)
    } else {
        (offset, len)
    }
}

/// The lock table's length as NLM's (0 = to the end).
pub fn nlm_len(len: u64) -> u64 {
    if len == u64::MAX {
        0
    } else {
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_owners() {
        assert_eq!(table_range(5, 0), (5, u64::MAX));
        assert_eq!(table_range(u64::MAX - 1, 5), (u64::MAX - 1, u64::MAX));
        assert_eq!(table_range(0, 10), (0, 10));
        assert_eq!(nlm_len(u64::MAX), 0);
        assert_eq!(owner_bytes(7, b"x"), vec![0, 0, 0, 7, b'x']);
    }

    #[test]
    fn hosts_are_bounded_and_forgotten() {
        let nlm = Nlm::new(nsm::Nsm::empty(1));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let busy = |_| false;
        let a = nlm.host(&Bytes::from_static(b"a"), ip, busy).unwrap();
        let a2 = nlm.host(&Bytes::from_static(b"a"), ip, busy).unwrap();
        assert_eq!(a.id, a2.id);
        let b = nlm.host(&Bytes::from_static(b"b"), ip, busy).unwrap();
        assert_ne!(a.id, b.id);
        assert!(txnfs_state::is_nlm_client(a.id));
        let gone = nlm.forget_hosts(b"zzz", Some(ip));
        assert_eq!(gone.len(), 2, "both call from that address");
        assert!(nlm.known_host(&Bytes::from_static(b"a")).is_none());
        for i in 0..MAX_HOSTS {
            assert!(nlm.host(&Bytes::from(i.to_string()), ip, busy).is_some());
        }
        assert!(nlm
            .host(&Bytes::from_static(b"one more"), ip, busy)
            .is_none());
        let first = nlm.known_host(&Bytes::from_static(b"0")).unwrap().id;
        assert!(
            nlm.host(&Bytes::from_static(b"one more"), ip, |id| id == first)
                .is_some(),
            "an idle host makes room"
        );
        assert!(nlm.known_host(&Bytes::from_static(b"0")).is_none());
    }
}
