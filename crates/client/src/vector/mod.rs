//! The vectorized API (in the spirit of vNFS): every call takes many items and sends
//! as few COMPOUNDs as the negotiated limits allow.
//!
//! The engine ([`Fs::run`]) takes one op list per item, packs consecutive items into a
//! COMPOUND until `ca_maxoperations`, `ca_maxrequestsize` or the estimated reply size
//! would be exceeded, and keeps several COMPOUNDs in flight on free slots. A COMPOUND
//! stops at its first failing op: the item that failed gets that error, the items before
//! it are done, and the items after it are sent again in the next COMPOUND. Results are
//! per item, in input order.

mod atomic;
mod copy;
mod data;
mod meta;
mod xattr;

pub use copy::is_copy_unsupported;
pub use data::OpenFile;
pub use meta::DirEntry;
pub use xattr::Xattrs;

use crate::compound::Compound;
use crate::{Client, ClientError};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use txnfs_proto::nfs4::*;
use txnfs_xdr::Encode;

/// One element of a vectorized call: its ops and an estimate of its reply size.
pub(crate) struct Item {
    pub ops: Vec<nfs_argop4>,
    pub reply_estimate: usize,
    /// Ops from this index on are optional: when one of them fails, the item still
    /// succeeds with the results up to and including the failed op (e.g.
    /// GET_DIR_DELEGATION on a server that does not support it).
    pub optional_from: Option<usize>,
}

impl Item {
    /// Whether the server must reach the disk before answering this item: a stable
    /// WRITE or a COMMIT.
    fn waits_for_disk(&self) -> bool {
        self.ops.iter().any(|o| match o {
            nfs_argop4::OP_WRITE(w) => w.stable != stable_how4::UNSTABLE4,
            nfs_argop4::OP_COMMIT(_) => true,
            _ => false,
        })
    }

    /// This item without its optional ops.
    fn without_optional(&self) -> Item {
        let mut ops = self.ops.clone();
        if let Some(k) = self.optional_from {
            ops.truncate(k);
        }
        Item {
            ops,
            reply_estimate: self.reply_estimate,
            optional_from: None,
        }
    }
}

/// The ops' results of one item (same order as its ops).
pub(crate) type ItemResult = Result<Vec<nfs_resop4>, ClientError>;

/// A path split into components ("." dropped, ".." folded), relative to the export root.
pub fn components(path: &str) -> Result<Vec<String>, ClientError> {
    let mut out: Vec<String> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(ClientError::BadPath(path.into()));
                }
            }
            c => out.push(c.to_string()),
        }
    }
    Ok(out)
}

/// (parent path, last name) of a path; the root has no name.
pub fn split_parent(path: &str) -> Result<(String, String), ClientError> {
    let mut c = components(path)?;
    let name = c.pop().ok_or_else(|| ClientError::BadPath(path.into()))?;
    Ok((c.join("/"), name))
}

/// The encoded size of `op` in a request (payloads counted, not copied).
pub(crate) fn request_size(op: &nfs_argop4) -> usize {
    match op {
        // Avoid copying payloads just to measure them.
        nfs_argop4::OP_WRITE(w) => 48 + w.data.len(),
        other => other.to_bytes().len(),
    }
}

/// The vectorized file-system API over one [`Client`].
#[derive(Clone)]
pub struct Fs {
    pub(crate) client: Client,
    /// Directory path -> file handle, filled from what the server tells us, so that
    /// items start with PUTFH(parent) instead of PUTROOTFH + one LOOKUP per component.
    dirs: Arc<Mutex<HashMap<String, Bytes>>>,
    /// Open-owner for this Fs's opens.
    pub(crate) owner: Bytes,
    /// Ops per COMPOUND the server really accepts (see [`OpLimit`]).
    max_ops: Arc<Mutex<OpLimit>>,
    /// The server answered GET_DIR_DELEGATION with NOTSUPP: do not ask again.
    pub(crate) gdd_unsupported: Arc<std::sync::atomic::AtomicBool>,
    /// GET_DIR_DELEGATION answered GDD4_UNAVAIL this many times in a row.
    pub(crate) gdd_unavail: Arc<std::sync::atomic::AtomicU32>,
    /// Whether the server copies (`copy::COPY_*`), learnt on the first copy.
    pub(crate) copy_support: Arc<std::sync::atomic::AtomicU8>,
}

/// Learns how many ops per COMPOUND a server really accepts. It starts at the
/// negotiated ca_maxoperations. Some servers accept a large ca_maxoperations and then
/// refuse big COMPOUNDs anyway (Ganesha 4.3: NFS4ERR_RESOURCE above 100 ops, GARBAGE_ARGS
/// above 1024). On the first refusal the limit drops to 99 ops (100 with SEQUENCE, the
/// most common real cap) or below the refused size; on later refusals it halves, never
/// going above the largest size that worked. It never grows back: one refusal per
/// session on such servers, none on honest ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpLimit {
    good: usize,
    limit: usize,
}

impl OpLimit {
    fn refused(&mut self, nops: usize) {
        let next = if self.limit == usize::MAX {
            99.min(nops.saturating_sub(1))
        } else {
            (nops / 2).max(self.good.min(nops.saturating_sub(1)))
        };
        self.limit = next.max(1);
    }

    fn accepted(&mut self, nops: usize) {
        self.good = self.good.max(nops);
    }
}

impl Fs {
    pub fn new(client: Client) -> Self {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Fs {
            client,
            dirs: Arc::new(Mutex::new(HashMap::new())),
            owner: Bytes::from(format!("txnfs-fs-{}-{n}", std::process::id())),
            max_ops: Arc::new(Mutex::new(OpLimit {
                good: 0,
                limit: usize::MAX,
            })),
            gdd_unsupported: Arc::default(),
            gdd_unavail: Arc::default(),
            copy_support: Arc::new(std::sync::atomic::AtomicU8::new(copy::COPY_UNKNOWN)),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn remember_dir(&self, path: &str, fh: Bytes) {
        if let Ok(p) = components(path) {
            self.dirs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(p.join("/"), fh);
        }
    }

    pub(crate) fn forget_dir(&self, path: &str) {
        if let Ok(p) = components(path) {
            let key = p.join("/");
            let mut g = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            g.retain(|k, _| !(k == &key || k.starts_with(&format!("{key}/"))));
        }
    }

    /// The largest COMPOUND (ops) this server has accepted so far.
    fn max_ops_good(&self) -> usize {
        self.max_ops.lock().unwrap_or_else(|e| e.into_inner()).good
    }

    /// Ops that make `path` the current filehandle: PUTFH of the deepest cached
    /// ancestor, then LOOKUPs.
    pub(crate) fn resolve(&self, path: &str) -> Result<Vec<nfs_argop4>, ClientError> {
        let comps = components(path)?;
        let g = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        for cut in (0..=comps.len()).rev() {
            let key = comps[..cut].join("/");
            if cut > 0 {
                if let Some(fh) = g.get(&key) {
                    let mut ops = vec![nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })];
                    for c in &comps[cut..] {
                        ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                            objname: Bytes::from(c.clone().into_bytes()),
                        }));
                    }
                    return Ok(ops);
                }
            }
        }
        let mut ops = vec![nfs_argop4::OP_PUTROOTFH];
        for c in &comps {
            ops.push(nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: Bytes::from(c.clone().into_bytes()),
            }));
        }
        Ok(ops)
    }

    /// Execute items, packing them into as few COMPOUNDs as the limits allow, several
    /// in flight at once. Results are in input order.
    pub(crate) async fn run(&self, items: Vec<Item>) -> Vec<ItemResult> {
        let n = items.len();
        let mut items = Arc::new(items);
        let mut results: Vec<Option<ItemResult>> = (0..n).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..n).collect();
        let mut delays = vec![0u32; n];
        let started = std::time::Instant::now();
        // An optional op failed with an error (e.g. a server that answers
        // GET_DIR_DELEGATION with NFS4ERR_DIRDELEG_UNAVAIL): the COMPOUND stopped there,
        // so every later item in it must be sent again, and would stop the next
        // COMPOUND the same way. The items still pending go without their optional
        // ops from then on.
        let mut optional_failed = false;
        let mut stripped = false;
        while !pending.is_empty() {
            if optional_failed && !stripped {
                stripped = true;
                items = Arc::new(items.iter().map(Item::without_optional).collect());
            }
            let limits = self.client.limits();
            // Leave room for SEQUENCE and the COMPOUND header.
            let max_ops = (limits.max_ops.saturating_sub(1).max(1) as usize)
                .min(self.max_ops.lock().unwrap_or_else(|e| e.into_inner()).limit);
            let max_req = (limits.max_request as usize).saturating_sub(512).max(1024);
            let max_rep = (limits.max_response as usize).saturating_sub(512).max(1024);
            // A COMPOUND that changes state asks the server to cache its reply (exactly-once
            // on retransmission): keep such replies within the cache limit.
            let max_cached = (limits.max_response_cached as usize)
                .saturating_sub(256)
                .max(512);
            // Pack pending items, in order, into batches.
            let mut batches: Vec<Vec<usize>> = Vec::new();
            let mut cur: Vec<usize> = Vec::new();
            let (mut ops, mut req, mut rep) = (0usize, 0usize, 0usize);
            // (batch changes state, batch carries data): the COMPOUND asks for its reply
            // to be cached exactly when it changes state and carries no data
            // (`Compound::wants_cache`).
            let (mut changes, mut data) = (false, false);
            // Items that wait for the disk are spread over the COMPOUNDs sent at once
            // (ADR 0061): a server runs a COMPOUND's ops one after another, so syncs
            // packed into one COMPOUND wait in turn, where syncs in several overlap.
            let parallel = (limits.slots as usize).clamp(1, 16);
            let waiting = pending
                .iter()
                .filter(|&&i| items[i].waits_for_disk())
                .count();
            let sync_cap = waiting.div_ceil(parallel).max(1);
            let mut syncs = 0usize;
            for &i in &pending {
                let it = &items[i];
                let isync = it.waits_for_disk();
                if !cur.is_empty() && isync && syncs >= sync_cap {
                    batches.push(std::mem::take(&mut cur));
                    (ops, req, rep) = (0, 0, 0);
                    syncs = 0;
                    (changes, data) = (false, false);
                }
                syncs += usize::from(isync);
                let iops = it.ops.len();
                let ireq: usize = it.ops.iter().map(request_size).sum();
                let irep = it.reply_estimate + 16 * iops;
                let c = changes || crate::compound::changes_state(&it.ops);
                let d = data || crate::compound::carries_data(&it.ops);
                let rep_limit = if c && !d { max_cached } else { max_rep };
                if !cur.is_empty()
                    && (ops + iops > max_ops || req + ireq > max_req || rep + irep > rep_limit)
                {
                    batches.push(std::mem::take(&mut cur));
                    (ops, req, rep) = (0, 0, 0);
                    changes = crate::compound::changes_state(&it.ops);
                    data = crate::compound::carries_data(&it.ops);
                } else {
                    (changes, data) = (c, d);
                }
                cur.push(i);
                ops += iops;
                req += ireq;
                rep += irep;
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
            // Send the batches, as many at once as we have slots.
            let mut set = tokio::task::JoinSet::new();
            let mut next_pending = Vec::new();
            let mut queue = batches.into_iter();
            loop {
                while set.len() < parallel {
                    let Some(batch) = queue.next() else { break };
                    let client = self.client.clone();
                    let items = items.clone();
                    set.spawn(async move {
                        let mut c = Compound::new();
                        let mut ranges = Vec::with_capacity(batch.len());
                        for &i in &batch {
                            let start = c.len();
                            for op in &items[i].ops {
                                c.op(op.clone());
                            }
                            ranges.push((i, start, c.len()));
                        }
                        let nops = c.len();
                        (ranges, nops, client.compound(&c).await)
                    });
                }
                let Some(done) = set.join_next().await else {
                    break;
                };
                let (ranges, nops, reply) = match done {
                    Ok(x) => x,
                    Err(e) => {
                        // A task panicked or was cancelled: fail what it carried.
                        tracing::error!("vectorized batch task failed: {e}");
                        continue;
                    }
                };
                match reply {
                    Err(ClientError::Nfs {
                        op: "COMPOUND",
                        status: nfsstat4::NFS4ERR_RESOURCE,
                        ..
                    })
                    | Err(ClientError::Rpc(txnfs_rpc::RpcError::GarbageArgs))
                    | Err(ClientError::Timeout(_))
                        if nops > 1 && nops > self.max_ops_good() =>
                    {
                        // Too many ops for this server: shrink and send again.
                        let mut l = self.max_ops.lock().unwrap_or_else(|e| e.into_inner());
                        l.refused(nops);
                        tracing::debug!(
                            ops = nops,
                            limit = l.limit,
                            "server refused the COMPOUND size"
                        );
                        next_pending.extend(ranges.iter().map(|(i, _, _)| *i));
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        for (k, (i, _, _)) in ranges.iter().enumerate() {
                            results[*i] = Some(Err(if k == 0 {
                                e_clone(&e, &msg)
                            } else {
                                ClientError::Local(msg.clone())
                            }));
                        }
                    }
                    Ok(r) => {
                        self.max_ops
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .accepted(nops);
                        let failed = r.failed();
                        for (i, start, end) in ranges {
                            match failed {
                                Some((f, status)) if f < end => {
                                    if f >= start {
                                        if items[i].optional_from.is_some_and(|k| f >= start + k) {
                                            optional_failed = true;
                                            let slice =
                                                r.results.get(start..=f).map(|s| s.to_vec());
                                            results[i] = Some(slice.ok_or_else(|| {
                                                ClientError::Protocol("short COMPOUND reply".into())
                                            }));
                                            continue;
                                        }
                                        let busy = self.client.busy_kind(status).filter(|_| {
                                            started.elapsed() < self.client.busy_wait()
                                        });
                                        if let Some(b) = busy {
                                            self.client.told_busy(b);
                                            delays[i] += 1;
                                            next_pending.push(i);
                                        } else {
                                            let op = r.results.get(f).map(|x| {
                                                crate::compound::op_name(x.discriminant())
                                            });
                                            results[i] = Some(Err(ClientError::nfs(
                                                op.unwrap_or("COMPOUND"),
                                                f - start,
                                                status,
                                            )));
                                        }
                                    } else {
                                        // Never ran: send again.
                                        next_pending.push(i);
                                    }
                                }
                                _ => {
                                    let slice = r.results.get(start..end).map(|s| s.to_vec());
                                    results[i] = Some(slice.ok_or_else(|| {
                                        ClientError::Protocol("short COMPOUND reply".into())
                                    }));
                                }
                            }
                        }
                    }
                }
            }
            next_pending.sort_unstable();
            if next_pending.iter().any(|&i| delays[i] > 0) {
                let d = next_pending.iter().map(|&i| delays[i]).max().unwrap_or(0);
                // 100 ms, then 200 ms: on well within a second of the release.
                tokio::time::sleep(std::time::Duration::from_millis(50 << d.clamp(1, 2))).await;
            }
            pending = next_pending;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClientError::Local("item was not executed".into()))))
            .collect()
    }
}

/// One failure for each item it ended: NFS statuses and the connection's failures
/// keep their kind (a command tells "this file failed" from "the server is gone" by
/// it); anything else becomes its text.
fn e_clone(e: &ClientError, msg: &str) -> ClientError {
    match e {
        ClientError::Nfs { op, index, status } => ClientError::Nfs {
            op,
            index: *index,
            status: *status,
        },
        ClientError::Unreachable { addr, msg } => ClientError::Unreachable {
            addr: addr.clone(),
            msg: msg.clone(),
        },
        ClientError::NotNfsServer { addr, why } => ClientError::NotNfsServer {
            addr: addr.clone(),
            why: why.clone(),
        },
        ClientError::Timeout(d) => ClientError::Timeout(*d),
        ClientError::Rpc(txnfs_rpc::RpcError::Disconnected) => {
            ClientError::Rpc(txnfs_rpc::RpcError::Disconnected)
        }
        ClientError::Rpc(txnfs_rpc::RpcError::Io(io)) => ClientError::Rpc(txnfs_rpc::RpcError::Io(
            std::io::Error::new(io.kind(), io.to_string()),
        )),
        _ => ClientError::Local(msg.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_limit_settles_after_one_refusal_on_a_100_op_server() {
        let cap = 99; // the largest size (without SEQUENCE) the "server" takes
        let mut l = OpLimit {
            good: 0,
            limit: usize::MAX,
        };
        let mut refusals = 0;
        for _ in 0..30 {
            let n = 1800usize.min(l.limit);
            if n > cap {
                refusals += 1;
                l.refused(n);
            } else {
                l.accepted(n);
            }
        }
        assert_eq!((l.limit, refusals), (99, 1));
        // a stricter server: halves until it fits, never above what worked
        let mut l = OpLimit {
            good: 0,
            limit: usize::MAX,
        };
        for _ in 0..30 {
            let n = 1800usize.min(l.limit);
            if n > 30 {
                l.refused(n);
            } else {
                l.accepted(n);
            }
        }
        assert!(l.limit <= 30 && l.limit >= 15, "{}", l.limit);
        assert_eq!(components("a/./b/../c").unwrap(), vec!["a", "c"]);
        assert!(components("../x").is_err());
    }
}
