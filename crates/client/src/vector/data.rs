//! Vectorized data calls: vopen, vclose, vread, vwrite (vcopy: `copy.rs`).
//!
//! Whole small files go in one item each (OPEN + READ/WRITE + CLOSE with the current
//! stateid, so no round trip in between); large files continue in further items that
//! reuse the open file's handle and stateid.

use super::meta::{items_for, merge};
use super::{split_parent, Fs, Item, ItemResult};
use crate::attrs::{self, SetAttributes};
use crate::compound::{CreateHow, CURRENT_STATEID};
use crate::{cache, ClientError};
use bytes::{Bytes, BytesMut};

/// A file's content as read, chunk by chunk: each chunk is a slice of its reply, and
/// only a file read in several chunks is joined (one copy; ADR 0063).
#[derive(Default)]
struct Chunks {
    parts: Vec<Bytes>,
    len: u64,
}

impl Chunks {
    fn push(&mut self, d: Bytes) {
        self.len += d.len() as u64;
        if !d.is_empty() {
            self.parts.push(d);
        }
    }

    /// The whole content; joined once, then shared by every later call.
    fn join(&mut self) -> Bytes {
        let one = match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = BytesMut::with_capacity(self.len as usize);
                for p in many {
                    all.extend_from_slice(p);
                }
                all.freeze()
            }
        };
        self.parts = if one.is_empty() {
            Vec::new()
        } else {
            vec![one.clone()]
        };
        one
    }
}
use txnfs_proto::nfs4::*;

/// An open file: its handle and open stateid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    pub path: String,
    pub fh: Bytes,
    pub stateid: stateid4,
}

fn find<T>(v: &[nfs_resop4], f: impl Fn(&nfs_resop4) -> Option<T>) -> Option<T> {
    v.iter().find_map(f)
}

pub(super) fn getfh(v: &[nfs_resop4]) -> Option<Bytes> {
    find(v, |r| match r {
        nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(f)) => Some(f.object.clone()),
        _ => None,
    })
}

pub(super) fn open_sid(v: &[nfs_resop4]) -> Option<stateid4> {
    find(v, |r| match r {
        nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o)) => Some(o.stateid.clone()),
        _ => None,
    })
}

/// The delegation an OPEN granted, if any.
fn open_deleg(v: &[nfs_resop4]) -> Option<open_delegation4> {
    find(v, |r| match r {
        nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o)) => Some(o.delegation.clone()),
        _ => None,
    })
}

/// The attributes of the last GETATTR among the results.
fn last_getattr(v: &[nfs_resop4]) -> Option<crate::Attributes> {
    v.iter().rev().find_map(|r| match r {
        nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) => attrs::decode(&g.obj_attributes).ok(),
        _ => None,
    })
}

/// OPEN of `leaf`; `want_deleg`: no preference (the server may grant a delegation),
/// else WANT_NO_DELEG.
fn open_args(
    fs: &Fs,
    leaf: &str,
    access: u32,
    create: Option<&SetAttributes>,
    want_deleg: bool,
) -> nfs_argop4 {
    let mut c = crate::compound::Compound::new();
    match create {
        Some(set) => c.open(
            leaf.as_bytes(),
            access,
            &fs.owner,
            Some((CreateHow::Unchecked, set)),
        ),
        None => c.open(leaf.as_bytes(), access, &fs.owner, None),
    };
    let mut op = c.ops.remove(0);
    if want_deleg {
        // No preference: the server may grant a delegation.
        if let nfs_argop4::OP_OPEN(o) = &mut op {
            o.share_access &= !OPEN4_SHARE_ACCESS_WANT_DELEG_MASK;
        }
    }
    op
}

/// Largest READ/WRITE payload per op.
const CHUNK: usize = 1 << 20;

impl Fs {
    /// Open many files; `create` creates missing ones (UNCHECKED) with these attributes.
    pub async fn vopen<S: AsRef<str>>(
        &self,
        paths: &[S],
        access: u32,
        create: Option<SetAttributes>,
    ) -> Vec<Result<OpenFile, ClientError>> {
        let cache = self.client.cache().clone();
        if access & OPEN4_SHARE_ACCESS_WRITE != 0 || create.is_some() {
            // The caller writes through its own stateid: nothing cached may stay.
            let ps: Vec<&str> = paths.iter().map(|p| p.as_ref()).collect();
            cache.forget_paths(&ps, true).await;
        }
        let (items, errs) = items_for(paths, 300, |p| {
            self.open_ops(p.as_ref(), access, create.as_ref())
        });
        let res = self.run(items).await;
        let opened = merge(errs, res, |r: ItemResult| {
            let v = r?;
            let fh = getfh(&v).ok_or_else(|| ClientError::Protocol("no GETFH".into()))?;
            let stateid = open_sid(&v).ok_or_else(|| ClientError::Protocol("no OPEN".into()))?;
            Ok((fh, stateid, open_deleg(&v)))
        });
        let opened: Vec<Result<(Bytes, stateid4), ClientError>> = opened
            .into_iter()
            .zip(paths)
            .map(|(r, p)| {
                let (fh, sid, deleg) = r?;
                if let Some(d) = deleg {
                    cache.open_reply(p.as_ref(), &fh, &d, None, None);
                }
                Ok((fh, sid))
            })
            .collect();
        paths
            .iter()
            .zip(opened)
            .map(|(p, r)| {
                let (fh, stateid) = r?;
                Ok(OpenFile {
                    path: p.as_ref().to_string(),
                    fh,
                    stateid,
                })
            })
            .collect()
    }

    /// The ops that look up the parent directory of `path` and OPEN its leaf there
    /// (creating it with `create`), then GETFH.
    fn open_ops(
        &self,
        path: &str,
        access: u32,
        create: Option<&SetAttributes>,
    ) -> Result<Vec<nfs_argop4>, ClientError> {
        self.open_ops_wanting(path, access, create, self.client.delegations_enabled())
    }

    /// [`Fs::open_ops`] asking for no delegation (a file opened only to be copied on
    /// the server is not worth caching).
    pub(super) fn open_ops_nodeleg(
        &self,
        path: &str,
        access: u32,
        create: Option<&SetAttributes>,
    ) -> Result<Vec<nfs_argop4>, ClientError> {
        self.open_ops_wanting(path, access, create, false)
    }

    fn open_ops_wanting(
        &self,
        path: &str,
        access: u32,
        create: Option<&SetAttributes>,
        want_deleg: bool,
    ) -> Result<Vec<nfs_argop4>, ClientError> {
        let (parent, leaf) = split_parent(path)?;
        let mut ops = self.resolve(&parent)?;
        ops.push(open_args(self, &leaf, access, create, want_deleg));
        ops.push(nfs_argop4::OP_GETFH);
        Ok(ops)
    }

    /// Close many open files.
    pub async fn vclose(&self, files: &[OpenFile]) -> Vec<Result<(), ClientError>> {
        let items = files
            .iter()
            .map(|f| Item {
                ops: vec![
                    nfs_argop4::OP_PUTFH(PUTFH4args {
                        object: f.fh.clone(),
                    }),
                    nfs_argop4::OP_CLOSE(CLOSE4args {
                        seqid: 0,
                        open_stateid: f.stateid.clone(),
                    }),
                ],
                reply_estimate: 64,
                optional_from: None,
            })
            .collect();
        self.run(items)
            .await
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect()
    }

    /// Read whole files. Each file is OPEN + READ + CLOSE in one item (20 small files go
    /// in a single COMPOUND); what does not fit the first READ is read in further items.
    /// A file under a delegation whose content is cached is not sent at all; with
    /// delegations on, each item also carries GETFH and GETATTR so a granted delegation
    /// can be used for the next read.
    pub async fn vread<S: AsRef<str>>(&self, paths: &[S]) -> Vec<Result<Bytes, ClientError>> {
        let cache = self.client.cache().clone();
        // GETFH and GETATTR ride along only while the server may grant: against one that
        // has not granted for a while (NFS-Ganesha by default), the reads are as lean as
        // without delegations and ask for none.
        let caching = self.client.delegations_enabled() && cache.expect_grants();
        // Share the reply budget among the files, so small files all fit one COMPOUND;
        // larger ones continue below.
        let first = ((self.client.limits().max_response as usize * 7 / 8) / paths.len().max(1))
            .clamp(4096, CHUNK);
        let mut out: Vec<Result<Chunks, ClientError>> =
            paths.iter().map(|_| Ok(Chunks::default())).collect();
        let mut cached: Vec<Option<Bytes>> = paths.iter().map(|p| cache.read(p.as_ref())).collect();
        // (output index, path, offset) still to read
        let mut todo: Vec<(usize, String, u64)> = paths
            .iter()
            .enumerate()
            .filter(|(i, _)| cached[*i].is_none())
            .map(|(i, p)| (i, p.as_ref().to_string(), 0))
            .collect();
        // Files read in several rounds under a delegation: cache the whole content after.
        let mut delegated = vec![false; paths.len()];
        let mut count = first;
        while !todo.is_empty() {
            let mut items = Vec::new();
            let mut sent = Vec::new();
            for (i, p, off) in todo {
                match split_parent(&p).and_then(|(parent, leaf)| Ok((self.resolve(&parent)?, leaf)))
                {
                    Ok((mut ops, leaf)) => {
                        ops.push(open_args(
                            self,
                            &leaf,
                            OPEN4_SHARE_ACCESS_READ,
                            None,
                            caching,
                        ));
                        if caching {
                            ops.push(nfs_argop4::OP_GETFH);
                        }
                        ops.push(nfs_argop4::OP_READ(READ4args {
                            stateid: CURRENT_STATEID,
                            offset: off,
                            count: count as u32,
                        }));
                        if caching {
                            ops.push(nfs_argop4::OP_GETATTR(GETATTR4args {
                                attr_request: attrs::stat_bitmap(),
                            }));
                        }
                        ops.push(nfs_argop4::OP_CLOSE(CLOSE4args {
                            seqid: 0,
                            open_stateid: CURRENT_STATEID,
                        }));
                        items.push(Item {
                            ops,
                            reply_estimate: count + if caching { 512 } else { 256 },
                            optional_from: None,
                        });
                        sent.push((i, p, off));
                    }
                    Err(e) => out[i] = Err(e),
                }
            }
            let res = self.run(items).await;
            let mut next = Vec::new();
            for ((i, p, off), r) in sent.into_iter().zip(res) {
                let got = r.and_then(|v| {
                    let rd = find(&v, |x| match x {
                        nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) => {
                            Some((rd.data.clone(), rd.eof))
                        }
                        _ => None,
                    })
                    .ok_or_else(|| ClientError::Protocol("no READ".into()))?;
                    if caching {
                        if let (Some(fh), Some(d)) = (getfh(&v), open_deleg(&v)) {
                            let whole = (off == 0 && rd.1).then(|| rd.0.clone());
                            cache.open_reply(&p, &fh, &d, last_getattr(&v), whole);
                            delegated[i] = cache::granted(&d).is_some() || delegated[i];
                        }
                    }
                    Ok(rd)
                });
                match (got, &mut out[i]) {
                    (Ok((d, eof)), Ok(chunks)) => {
                        let more = !eof && !d.is_empty();
                        chunks.push(d);
                        if more {
                            next.push((i, p, chunks.len));
                        } else if off > 0 && delegated[i] {
                            cache.store_read(&p, chunks.join());
                        }
                    }
                    (Err(e), slot) => *slot = Err(e),
                    _ => {}
                }
            }
            todo = next;
            count = CHUNK;
        }
        out.into_iter()
            .zip(cached.iter_mut())
            .map(|(r, c)| match c.take() {
                Some(d) => Ok(d),
                None => r.map(|mut c| c.join()),
            })
            .collect()
    }

    /// Send buffered writes (kept under write delegations) to the server now, keeping
    /// the delegations.
    pub async fn vflush(&self) -> Result<(), ClientError> {
        self.client.cache().flush_all().await
    }

    /// Write whole files (created or truncated). Small files are OPEN + WRITE + CLOSE in
    /// one item; large ones continue in items of WRITEs on the open stateid. With
    /// `stable`, data is FILE_SYNC; else UNSTABLE and a COMMIT before CLOSE.
    ///
    /// Under a write delegation an unstable write of a file is kept in the cache and
    /// sent later ([`Fs::vflush`], `Client::close`, or when the server recalls the
    /// delegation); reads and GETATTRs of the file see it at once. A small file that is
    /// written through (stable, or too large to keep) goes under the delegation's
    /// stateid with no OPEN or CLOSE, and the delegation stays. Files whose write waits
    /// for the disk (FILE_SYNC, or a COMMIT) are spread over the COMPOUNDs sent at once
    /// rather than packed into one, so that the server syncs them side by side.
    pub async fn vwrite<S: AsRef<str>>(
        &self,
        files: &[(S, Bytes)],
        stable: bool,
    ) -> Vec<Result<(), ClientError>> {
        let cache = self.client.cache().clone();
        if !self.client.delegations_enabled() {
            return self.vwrite_through(files, stable).await;
        }
        let mut out: Vec<Result<(), ClientError>> = files.iter().map(|_| Ok(())).collect();
        let mut rest: Vec<(String, Bytes)> = Vec::new();
        let mut rest_idx = Vec::new();
        let mut giveback = Vec::new();
        let mut delegated = Vec::new();
        let per_item = self.per_item();
        for (i, (p, data)) in files.iter().enumerate() {
            if !stable && cache.buffer_write(p.as_ref(), data) {
                continue;
            }
            cache.invalidate_parent_listing(p.as_ref());
            // Under a write delegation the file is ours: no OPEN, no CLOSE, and the
            // delegation stays (RFC 8881 §10.4).
            if data.len() <= per_item {
                if let Some((fh, sid, server_size)) = cache.write_delegation(p.as_ref()) {
                    delegated.push((i, fh, sid, server_size));
                    continue;
                }
            }
            // Written through: buffered data of the file must reach the server first,
            // and the delegation goes back (the OPEN below may get a new one).
            if let Some(fh) = cache.fh_of(p.as_ref()) {
                giveback.push(fh);
            }
            rest.push((p.as_ref().to_string(), data.clone()));
            rest_idx.push(i);
        }
        // A write under a delegation that failed (recalled or revoked meanwhile) goes
        // back with its delegation and through an OPEN like the others.
        for (i, fh) in self.vwrite_delegated(files, &delegated, stable).await {
            giveback.push(fh);
            rest.push((files[i].0.as_ref().to_string(), files[i].1.clone()));
            rest_idx.push(i);
        }
        cache.return_many(&giveback, true).await;
        if !rest.is_empty() {
            for (i, r) in rest_idx
                .into_iter()
                .zip(self.vwrite_through(&rest, stable).await)
            {
                out[i] = r;
            }
        }
        out
    }

    /// Bytes of a file's data that go in its first item (a file up to this size is one
    /// item).
    fn per_item(&self) -> usize {
        ((self.client.limits().max_request as usize).saturating_sub(4096) / 2).clamp(4096, CHUNK)
    }

    /// Whole small files written under their write delegations (`delegated`: index in
    /// `files`, handle, delegation stateid, the server's size): PUTFH, SETATTR of the
    /// size when the server's copy is longer, WRITE, COMMIT when unstable, GETATTR. The
    /// files whose item failed come back as (index, handle).
    async fn vwrite_delegated<S: AsRef<str>>(
        &self,
        files: &[(S, Bytes)],
        delegated: &[(usize, Bytes, stateid4, Option<u64>)],
        stable: bool,
    ) -> Vec<(usize, Bytes)> {
        if delegated.is_empty() {
            return Vec::new();
        }
        let items = delegated
            .iter()
            .map(|(i, fh, sid, server_size)| {
                let data = &files[*i].1;
                let mut ops = vec![nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })];
                if server_size.is_none_or(|s| s > data.len() as u64) {
                    ops.push(nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                        stateid: sid.clone(),
                        obj_attributes: attrs::encode_set(&SetAttributes {
                            size: Some(data.len() as u64),
                            ..Default::default()
                        }),
                    })));
                }
                if !data.is_empty() {
                    ops.push(nfs_argop4::OP_WRITE(WRITE4args {
                        stateid: sid.clone(),
                        offset: 0,
                        stable: if stable {
                            stable_how4::FILE_SYNC4
                        } else {
                            stable_how4::UNSTABLE4
                        },
                        data: data.clone(),
                    }));
                    if !stable {
                        ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
                            offset: 0,
                            count: 0,
                        }));
                    }
                }
                ops.push(nfs_argop4::OP_GETATTR(GETATTR4args {
                    attr_request: attrs::stat_bitmap(),
                }));
                Item {
                    ops,
                    reply_estimate: 300,
                    optional_from: None,
                }
            })
            .collect();
        let cache = self.client.cache();
        let mut failed = Vec::new();
        for ((i, fh, ..), r) in delegated.iter().zip(self.run(items).await) {
            match r {
                Ok(v) => cache.wrote_under_delegation(fh, files[*i].1.clone(), last_getattr(&v)),
                Err(e) => {
                    tracing::debug!("write under delegation failed ({e}); writing through");
                    failed.push((*i, fh.clone()));
                }
            }
        }
        failed
    }

    async fn vwrite_through<S: AsRef<str>>(
        &self,
        files: &[(S, Bytes)],
        stable: bool,
    ) -> Vec<Result<(), ClientError>> {
        let caching = self.client.delegations_enabled();
        let per_item = self.per_item();
        let create = SetAttributes {
            size: Some(0),
            mode: Some(0o644),
            ..Default::default()
        };
        let how = if stable {
            stable_how4::FILE_SYNC4
        } else {
            stable_how4::UNSTABLE4
        };
        let (items, errs) = items_for(files, 300, |(p, data)| {
            let mut ops = self.open_ops(p.as_ref(), OPEN4_SHARE_ACCESS_WRITE, Some(&create))?;
            let small = data.len() <= per_item;
            let first = data.slice(..data.len().min(per_item));
            if !first.is_empty() {
                ops.push(nfs_argop4::OP_WRITE(WRITE4args {
                    stateid: CURRENT_STATEID,
                    offset: 0,
                    stable: how,
                    data: first,
                }));
            }
            if small {
                if !stable && !data.is_empty() {
                    ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
                        offset: 0,
                        count: 0,
                    }));
                }
                if caching {
                    ops.push(nfs_argop4::OP_GETATTR(GETATTR4args {
                        attr_request: attrs::stat_bitmap(),
                    }));
                }
                ops.push(nfs_argop4::OP_CLOSE(CLOSE4args {
                    seqid: 0,
                    open_stateid: CURRENT_STATEID,
                }));
            }
            Ok(ops)
        });
        let res = self.run(items).await;
        let mut out: Vec<Result<(), ClientError>> = Vec::new();
        let mut big: Vec<(usize, Bytes, stateid4, Bytes)> = Vec::new(); // (out, fh, sid, data)
        let datas: Vec<&Bytes> = files.iter().map(|(_, d)| d).collect();
        let opened = merge(errs, res, |r| {
            let v = r?;
            Ok((getfh(&v), open_sid(&v), open_deleg(&v), last_getattr(&v)))
        });
        let cache = self.client.cache();
        let opened: Vec<_> = opened
            .into_iter()
            .zip(files)
            .map(|(r, (p, data))| {
                let (fh, sid, deleg, a) = r?;
                if let (Some(fh), Some(d)) = (&fh, &deleg) {
                    let small = data.len() <= per_item;
                    let whole = small.then(|| data.clone());
                    cache.open_reply(p.as_ref(), fh, d, if small { a } else { None }, whole);
                }
                Ok((fh, sid))
            })
            .collect();
        for (r, data) in opened.into_iter().zip(datas) {
            match r {
                Ok((Some(fh), Some(sid))) if data.len() > per_item => {
                    big.push((out.len(), fh, sid, data.clone()));
                    out.push(Ok(()));
                }
                Ok(_) => out.push(Ok(())),
                Err(e) => out.push(Err(e)),
            }
        }
        if big.is_empty() {
            return out;
        }
        // Remaining chunks of large files: one item per chunk, then one closing item each.
        let mut items = Vec::new();
        let mut owner = Vec::new();
        for (k, (_, fh, sid, data)) in big.iter().enumerate() {
            let mut off = per_item;
            while off < data.len() {
                let end = (off + per_item).min(data.len());
                items.push(Item {
                    ops: vec![
                        nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
                        nfs_argop4::OP_WRITE(WRITE4args {
                            stateid: sid.clone(),
                            offset: off as u64,
                            stable: how,
                            data: data.slice(off..end),
                        }),
                    ],
                    reply_estimate: 64,
                    optional_from: None,
                });
                owner.push(k);
                off = end;
            }
        }
        let res = self.run(items).await;
        for (k, r) in owner.into_iter().zip(res) {
            if let Err(e) = r {
                let o = big[k].0;
                if out[o].is_ok() {
                    out[o] = Err(e);
                }
            }
        }
        let closing = big
            .iter()
            .map(|(_, fh, sid, _)| {
                let mut ops = vec![nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })];
                if !stable {
                    ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
                        offset: 0,
                        count: 0,
                    }));
                }
                ops.push(nfs_argop4::OP_CLOSE(CLOSE4args {
                    seqid: 0,
                    open_stateid: sid.clone(),
                }));
                Item {
                    ops,
                    reply_estimate: 96,
                    optional_from: None,
                }
            })
            .collect();
        for ((o, ..), r) in big.iter().zip(self.run(closing).await) {
            if let Err(e) = r {
                if out[*o].is_ok() {
                    out[*o] = Err(e);
                }
            }
        }
        out
    }

    /// Copy files by reading them into the client and writing them back (where the
    /// server cannot copy: NFSv4.1, or COPY refused).
    pub(super) async fn vcopy_through<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        let srcs: Vec<&str> = pairs.iter().map(|(s, _)| s.as_ref()).collect();
        let data = self.vread(&srcs).await;
        let mut writes = Vec::new();
        let mut slots = Vec::new();
        let mut out: Vec<Result<(), ClientError>> = Vec::new();
        for ((_, dst), d) in pairs.iter().zip(data) {
            match d {
                Ok(d) => {
                    slots.push(out.len());
                    out.push(Ok(()));
                    writes.push((dst.as_ref().to_string(), d));
                }
                Err(e) => out.push(Err(e)),
            }
        }
        for (i, r) in slots.into_iter().zip(self.vwrite(&writes, false).await) {
            out[i] = r;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file read in one READ is handed over as the reply's own bytes (no copy); one
    /// read in several is joined once, and that buffer is shared afterwards.
    #[test]
    fn one_chunk_is_shared_and_several_are_joined_once() {
        let reply = Bytes::from(vec![7u8; 8192]);
        let mut one = Chunks::default();
        one.push(reply.slice(100..4196));
        one.push(Bytes::new());
        let got = one.join();
        assert_eq!(got.len(), 4096);
        assert_eq!(
            got.as_ptr(),
            reply[100..].as_ptr(),
            "the reply's bytes, not a copy"
        );

        let mut many = Chunks::default();
        many.push(Bytes::from_static(b"abc"));
        many.push(Bytes::from_static(b"def"));
        assert_eq!(many.len, 6);
        let joined = many.join();
        assert_eq!(&joined[..], b"abcdef");
        assert_eq!(
            many.join().as_ptr(),
            joined.as_ptr(),
            "joined once, then shared"
        );
        assert!(Chunks::default().join().is_empty());
    }
}
