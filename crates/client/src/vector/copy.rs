//! Copies of files on one server: with NFSv4.2 the server copies (COPY, RFC 7862
//! §15.2) and no byte of the files crosses the network; on NFSv4.1, or where the server
//! answers COPY with NFS4ERR_NOTSUPP (NFS-Ganesha), the client reads and writes.
//!
//! Each part of up to 256 files takes three rounds: OPEN of every source (its stateid
//! and size), then per file [PUTFH source, SAVEFH, OPEN destination, COPY], then COMMIT
//! and CLOSE of both. A server that copies less than asked (RFC 7862 §15.2.3 allows a
//! short copy) gets the rest in further COPYs; one that copies asynchronously is asked
//! with OFFLOAD_STATUS until it is done.

use super::data::{getfh, open_sid};
use super::meta::{items_for, merge};
use super::{Fs, Item};
use crate::attrs::{self, SetAttributes};
use crate::ClientError;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::time::Duration;
use txnfs_proto::nfs4::*;

/// What [`Fs::copies_on_server`] learnt ([`Fs`]'s `copy_support`).
pub(super) const COPY_UNKNOWN: u8 = 0;
const COPY_YES: u8 = 1;
const COPY_NO: u8 = 2;

/// Pairs copied together: their sources and destinations are all open at once.
const OPEN_AT_ONCE: usize = 256;

/// One source opened for reading.
struct Source {
    fh: Bytes,
    sid: stateid4,
    size: u64,
}

/// One destination being copied to.
struct Target {
    /// Index into the caller's pairs.
    pair: usize,
    src: usize,
    fh: Bytes,
    sid: stateid4,
    /// Bytes the server has copied so far.
    done: u64,
}

/// What one COPY answered.
enum Copied {
    Bytes(u64),
    /// The server runs the copy in the background under this stateid.
    Offloaded(stateid4),
    /// The server has no COPY: read and write instead.
    Unsupported,
    Failed(ClientError),
}

fn copy_result(v: &[nfs_resop4], index: usize) -> Option<Copied> {
    v.iter().find_map(|r| match r {
        nfs_resop4::OP_COPY(COPY4res::NFS4_OK(ok)) => {
            Some(match ok.cr_response.wr_callback_id.first() {
                Some(sid) => Copied::Offloaded(sid.clone()),
                None => Copied::Bytes(ok.cr_response.wr_count),
            })
        }
        nfs_resop4::OP_COPY(_) => Some(match crate::compound::status_of(r) {
            nfsstat4::NFS4ERR_NOTSUPP => Copied::Unsupported,
            s => Copied::Failed(ClientError::nfs("COPY", index, s)),
        }),
        nfs_resop4::OP_ILLEGAL(_) => Some(Copied::Unsupported),
        _ => None,
    })
}

fn copy_op(src: &Source, dst_sid: stateid4, from: u64) -> nfs_argop4 {
    nfs_argop4::OP_COPY(Box::new(COPY4args {
        ca_src_stateid: src.sid.clone(),
        ca_dst_stateid: dst_sid,
        ca_src_offset: from,
        ca_dst_offset: from,
        ca_count: src.size - from,
        ca_consecutive: true,
        // We wait for the answer either way; a server that must go asynchronous
        // anyway is followed with OFFLOAD_STATUS.
        ca_synchronous: true,
        ca_source_server: Vec::new(),
    }))
}

fn putfh(fh: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

impl Fs {
    /// Does this session copy on the server? NFSv4.2, and a COPY the server can take:
    /// asked once with a COPY that must fail (a directory, anonymous stateids), whose
    /// error says whether the server has the op. NFS-Ganesha 4.3 answers NOTSUPP, or
    /// cannot even decode COPY's arguments (GARBAGE_ARGS for the whole COMPOUND): the
    /// probe goes alone, outside the vector engine, so that refusal is not taken
    /// for a limit on ops per COMPOUND.
    pub async fn copies_on_server(&self) -> bool {
        if self.client.minor_version() < 2 {
            return false;
        }
        match self.copy_support.load(Ordering::Relaxed) {
            COPY_YES => return true,
            COPY_NO => return false,
            _ => {}
        }
        let mut c = crate::compound::Compound::new();
        c.putrootfh();
        c.savefh();
        c.putrootfh();
        let anonymous = stateid4 {
            seqid: 0,
            other: [0; 12],
        };
        c.op(nfs_argop4::OP_COPY(Box::new(COPY4args {
            ca_src_stateid: anonymous.clone(),
            ca_dst_stateid: anonymous,
            ca_src_offset: 0,
            ca_dst_offset: 0,
            ca_count: 1,
            ca_consecutive: true,
            ca_synchronous: true,
            ca_source_server: Vec::new(),
        })));
        let yes = match self.client.compound(&c).await {
            Ok(r) => !matches!(
                r.failed(),
                Some((_, nfsstat4::NFS4ERR_NOTSUPP | nfsstat4::NFS4ERR_OP_ILLEGAL))
            ),
            Err(e) => {
                tracing::debug!("COPY probe: {e}; copying through the client");
                false
            }
        };
        self.copy_support
            .store(if yes { COPY_YES } else { COPY_NO }, Ordering::Relaxed);
        yes
    }

    /// Copy files on the server: each destination is created or truncated and gets
    /// the source's bytes (holes stay holes on a server that keeps them). Where the
    /// server cannot copy (NFSv4.1, NOTSUPP), the bytes go through the client.
    pub async fn vcopy<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        let mut out = self.vcopy_on_server(pairs).await;
        let fallback: Vec<usize> = (0..pairs.len())
            .filter(|&i| matches!(out[i], Err(ref e) if unsupported(e)))
            .collect();
        if !fallback.is_empty() {
            let rest: Vec<(&str, &str)> = fallback
                .iter()
                .map(|&i| (pairs[i].0.as_ref(), pairs[i].1.as_ref()))
                .collect();
            for (i, r) in fallback.into_iter().zip(self.vcopy_through(&rest).await) {
                out[i] = r;
            }
        }
        out
    }

    /// Copy files with COPY only: a pair the server cannot copy fails with
    /// NFS4ERR_NOTSUPP (see [`is_copy_unsupported`]) and nothing is read through the
    /// client, so the caller can stream large files instead.
    pub async fn vcopy_on_server<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        let notsupp = || Err(ClientError::nfs("COPY", 0, nfsstat4::NFS4ERR_NOTSUPP));
        if !self.copies_on_server().await {
            return pairs.iter().map(|_| notsupp()).collect();
        }
        // What we hold cached or buffered of these files goes back first: the server
        // copies what it has.
        let mut paths: Vec<&str> = pairs.iter().map(|(s, _)| s.as_ref()).collect();
        paths.extend(pairs.iter().map(|(_, d)| d.as_ref()));
        self.client.cache().forget_paths(&paths, true).await;

        let mut out: Vec<Result<(), ClientError>> = Vec::with_capacity(pairs.len());
        // A part at a time: every file of a part is open on the server (a descriptor
        // each there) until the part is done.
        for part in pairs.chunks(OPEN_AT_ONCE) {
            let mut done: Vec<Result<(), ClientError>> = part.iter().map(|_| Ok(())).collect();
            let sources: Vec<Option<Source>> = self
                .open_sources(part)
                .await
                .into_iter()
                .zip(done.iter_mut())
                .map(|(r, o)| r.map_err(|e| *o = Err(e)).ok())
                .collect();
            let mut targets = self.open_targets(part, &sources, &mut done).await;
            self.finish_copies(&sources, &mut targets, &mut done).await;
            self.close_copies(&sources, &targets, &mut done).await;
            out.extend(done);
        }
        out
    }

    /// Round 1: OPEN every source for reading, with its size.
    async fn open_sources<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<Source, ClientError>> {
        let (items, errs) = items_for(pairs, 400, |(s, _)| {
            let mut ops = self.open_ops_nodeleg(s.as_ref(), OPEN4_SHARE_ACCESS_READ, None)?;
            ops.push(nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: attrs::bitmap(&[attrs::SIZE]),
            }));
            Ok(ops)
        });
        let res = self.run(items).await;
        merge(errs, res, |r| {
            let v = r?;
            let fh = getfh(&v).ok_or_else(|| ClientError::Protocol("no GETFH".into()))?;
            let sid = open_sid(&v).ok_or_else(|| ClientError::Protocol("no OPEN".into()))?;
            let size = v
                .iter()
                .rev()
                .find_map(|r| match r {
                    nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) => {
                        attrs::decode(&g.obj_attributes).ok()?.size
                    }
                    _ => None,
                })
                .ok_or_else(|| ClientError::Protocol("no size".into()))?;
            Ok(Source { fh, sid, size })
        })
    }

    /// Round 2: per source opened, create the destination and COPY into it (the COPY
    /// is optional in its item, so a server without COPY still leaves the destination
    /// open, to be closed).
    async fn open_targets<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
        sources: &[Option<Source>],
        out: &mut [Result<(), ClientError>],
    ) -> Vec<Target> {
        // Not truncated here: the size is set after the copy, so a destination that
        // is the source itself (another name of it) loses nothing: the server refuses
        // COPY within one file's overlapping range.
        let create = SetAttributes {
            mode: Some(0o644),
            ..Default::default()
        };
        let mut items = Vec::new();
        let mut which = Vec::new();
        for (i, ((_, d), src)) in pairs.iter().zip(sources).enumerate() {
            let Some(src) = src else { continue };
            let mut ops = vec![putfh(&src.fh), nfs_argop4::OP_SAVEFH];
            match self.open_ops_nodeleg(d.as_ref(), OPEN4_SHARE_ACCESS_WRITE, Some(&create)) {
                Ok(open) => ops.extend(open),
                Err(e) => {
                    out[i] = Err(e);
                    continue;
                }
            }
            let optional_from = (src.size > 0).then(|| {
                ops.push(copy_op(src, crate::compound::CURRENT_STATEID, 0));
                ops.len() - 1
            });
            items.push(Item {
                ops,
                reply_estimate: 400,
                optional_from,
            });
            which.push(i);
        }
        let mut targets = Vec::new();
        for (i, r) in which.into_iter().zip(self.run(items).await) {
            let v = match r {
                Ok(v) => v,
                Err(e) => {
                    out[i] = Err(e);
                    continue;
                }
            };
            let (Some(fh), Some(sid)) = (getfh(&v), open_sid(&v)) else {
                out[i] = Err(ClientError::Protocol("no OPEN of the destination".into()));
                continue;
            };
            let mut t = Target {
                pair: i,
                src: i,
                fh,
                sid,
                done: 0,
            };
            match copy_result(&v, v.len().saturating_sub(1)) {
                Some(Copied::Bytes(n)) => t.done = n,
                Some(Copied::Offloaded(id)) => match self.await_offload(&t, &id).await {
                    Ok(n) => t.done = n,
                    Err(e) => out[i] = Err(e),
                },
                Some(Copied::Unsupported) => {
                    self.copy_support.store(COPY_NO, Ordering::Relaxed);
                    out[i] = Err(ClientError::nfs("COPY", 0, nfsstat4::NFS4ERR_NOTSUPP));
                }
                Some(Copied::Failed(e)) => out[i] = Err(e),
                // Not sent (an empty source) or stripped after another item's COPY
                // failed: the rounds below copy what is missing.
                None => {}
            }
            targets.push(t);
        }
        targets
    }

    /// Round 3: COPY what short copies left, until every target has its source's size
    /// or one makes no progress.
    async fn finish_copies(
        &self,
        sources: &[Option<Source>],
        targets: &mut [Target],
        out: &mut [Result<(), ClientError>],
    ) {
        loop {
            let mut items = Vec::new();
            let mut which = Vec::new();
            for (k, t) in targets.iter().enumerate() {
                let Some(src) = &sources[t.src] else { continue };
                if out[t.pair].is_err() || t.done >= src.size {
                    continue;
                }
                items.push(Item {
                    ops: vec![
                        putfh(&src.fh),
                        nfs_argop4::OP_SAVEFH,
                        putfh(&t.fh),
                        copy_op(src, t.sid.clone(), t.done),
                    ],
                    reply_estimate: 200,
                    optional_from: None,
                });
                which.push(k);
            }
            if items.is_empty() {
                return;
            }
            for (k, r) in which.into_iter().zip(self.run(items).await) {
                let t = &mut targets[k];
                let got = match r {
                    Ok(v) => copy_result(&v, 3),
                    Err(e) if unsupported(&e) => Some(Copied::Unsupported),
                    Err(e) => Some(Copied::Failed(e)),
                };
                let before = t.done;
                match got {
                    Some(Copied::Bytes(n)) => t.done += n,
                    Some(Copied::Offloaded(id)) => match self.await_offload(t, &id).await {
                        Ok(n) => t.done += n,
                        Err(e) => out[t.pair] = Err(e),
                    },
                    Some(Copied::Unsupported) => {
                        self.copy_support.store(COPY_NO, Ordering::Relaxed);
                        out[t.pair] = Err(ClientError::nfs("COPY", 3, nfsstat4::NFS4ERR_NOTSUPP));
                    }
                    Some(Copied::Failed(e)) => out[t.pair] = Err(e),
                    None => out[t.pair] = Err(ClientError::Protocol("no COPY result".into())),
                }
                if out[t.pair].is_ok() && t.done == before {
                    // The source shrank under us, or the server copies nothing.
                    out[t.pair] = Err(ClientError::Protocol(format!(
                        "the server copied nothing at offset {before}"
                    )));
                }
            }
        }
    }

    /// Wait for a copy the server runs in the background: until its CB_OFFLOAD came or
    /// OFFLOAD_STATUS says it is complete. Returns the bytes copied.
    async fn await_offload(&self, t: &Target, id: &stateid4) -> Result<u64, ClientError> {
        let reported = |(status, n): (nfsstat4, u64)| match status {
            nfsstat4::NFS4_OK => Ok(n),
            s => Err(ClientError::nfs("COPY", 0, s)),
        };
        let mut pause = Duration::from_millis(20);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            if let Some(done) = self.client.take_offload(id) {
                return reported(done);
            }
            let item = Item {
                ops: vec![
                    putfh(&t.fh),
                    nfs_argop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4args {
                        osa_stateid: id.clone(),
                    }),
                ],
                reply_estimate: 100,
                optional_from: None,
            };
            let v = match self.run(vec![item]).await.remove(0) {
                Ok(v) => v,
                // The server forgot the copy once it had told us with CB_OFFLOAD.
                Err(e) => return self.client.take_offload(id).map_or(Err(e), reported),
            };
            let status = v.iter().find_map(|r| match r {
                nfs_resop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4res::NFS4_OK(ok)) => Some(ok),
                _ => None,
            });
            let Some(ok) = status else {
                return Err(ClientError::Protocol("no OFFLOAD_STATUS result".into()));
            };
            if let Some(&s) = ok.osr_complete.first() {
                return reported((s, ok.osr_count));
            }
        }
    }

    /// Round 4: COMMIT and CLOSE each destination, CLOSE each source.
    async fn close_copies(
        &self,
        sources: &[Option<Source>],
        targets: &[Target],
        out: &mut [Result<(), ClientError>],
    ) {
        let mut items = Vec::new();
        let mut owners = Vec::new();
        for t in targets {
            let mut ops = vec![putfh(&t.fh)];
            if let (Some(src), true) = (&sources[t.src], out[t.pair].is_ok()) {
                // Cut what an older, longer destination had beyond the copy.
                ops.push(nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                    stateid: t.sid.clone(),
                    obj_attributes: attrs::encode_set(&SetAttributes {
                        size: Some(src.size),
                        ..Default::default()
                    }),
                })));
            }
            if t.done > 0 && out[t.pair].is_ok() {
                // COPY's bytes may still be in the server's page cache (UNSTABLE).
                ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
                    offset: 0,
                    count: 0,
                }));
            }
            ops.push(nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: t.sid.clone(),
            }));
            items.push(Item {
                ops,
                reply_estimate: 96,
                optional_from: None,
            });
            owners.push(Some(t.pair));
        }
        for src in sources.iter().flatten() {
            items.push(Item {
                ops: vec![
                    putfh(&src.fh),
                    nfs_argop4::OP_CLOSE(CLOSE4args {
                        seqid: 0,
                        open_stateid: src.sid.clone(),
                    }),
                ],
                reply_estimate: 64,
                optional_from: None,
            });
            owners.push(None);
        }
        for (owner, r) in owners.into_iter().zip(self.run(items).await) {
            if let (Some(i), Err(e)) = (owner, r) {
                if out[i].is_ok() {
                    out[i] = Err(e);
                }
            }
        }
    }
}

/// Did a copy fail only because the server cannot copy (so the bytes may go through
/// the client instead)?
pub fn is_copy_unsupported(e: &ClientError) -> bool {
    unsupported(e)
}

fn unsupported(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Nfs {
            op: "COPY" | "ILLEGAL",
            status: nfsstat4::NFS4ERR_NOTSUPP | nfsstat4::NFS4ERR_OP_ILLEGAL,
            ..
        }
    )
}
