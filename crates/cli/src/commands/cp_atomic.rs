//! `txnfs cp --atomic`: the copy that `cp` planned (every operand, with -R every tree,
//! walked or listed) becomes ONE transaction on the destination server: mkdir for
//! each directory, OPEN(create)+WRITE(FILE_SYNC)+CLOSE for each file, CREATE for each
//! symlink, then the modes that would have stopped the copy half-way. All of it
//! appears, or nothing does. A copy larger than one COMPOUND is one transaction of
//! several (the client splits it between files, and large files in pieces).

use super::atomic;
use super::cp::{wanted_mode, End, Item, Kind};
use super::url::NfsUrl;
use super::{usage, Ctx};
use bytes::Bytes;
use std::collections::BTreeSet;
use txnfs_client::{ClientError, SetAttributes};
use txnfs_proto::nfs4::nfsstat4;

pub(super) async fn run(ctx: &mut Ctx, items: &[Item]) -> anyhow::Result<()> {
    if atomic::planning_failed(ctx, "cp") || items.is_empty() {
        return Ok(());
    }
    let mut dsts: Vec<&NfsUrl> = Vec::with_capacity(items.len());
    for it in items {
        match it.dst.remote() {
            Some(u) => dsts.push(u),
            None => {
                return usage(
                    "cp --atomic: the destination must be an nfs:// URL (the transaction runs \
                     on the server)",
                )
            }
        }
    }
    let fs = atomic::one_server(ctx, "cp", &dsts).await?;
    // Do not read gigabytes to learn that they cannot be one transaction: the data
    // must fit all of the COMPOUNDs a transaction may span (the client checks the exact
    // sizes again before sending anything).
    let max = fs.client().limits().max_request as u64;
    let total: u64 = items.iter().map(|i| i.size).sum();
    let bound = max * txnfs_client::txn::MAX_TXN_COMPOUNDS as u64;
    if total > bound {
        let e = ClientError::TxnTooLarge {
            n: total as usize,
            max: bound as usize,
            unit: "bytes",
        };
        atomic::report(ctx, "cp", Err(e));
        return Ok(());
    }

    // Existing destination directories are used as they are (as cp does).
    let dir_idx: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].kind == Kind::Dir)
        .collect();
    let dir_paths: Vec<&str> = dir_idx.iter().map(|&i| dsts[i].path.as_str()).collect();
    let mut existing = BTreeSet::new();
    for (&i, a) in dir_idx.iter().zip(fs.vgetattrs(&dir_paths).await) {
        match a {
            Ok(a) if a.is_dir() => {
                existing.insert(i);
            }
            // Something else is there: the transaction's mkdir fails on it (EXIST).
            Ok(_) => {}
            Err(e) if e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {}
            Err(e) => ctx.fail_nfs(format!("cannot stat '{}'", dsts[i].display), &e),
        }
    }

    // The files' contents, read before the transaction starts.
    let mut data: Vec<Option<Bytes>> = vec![None; items.len()];
    let mut remote: Vec<usize> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if it.kind != Kind::File {
            continue;
        }
        match &it.src {
            End::Local(p) => match std::fs::read(p) {
                Ok(d) => data[i] = Some(Bytes::from(d)),
                Err(e) => ctx.fail_io(format!("cannot read '{}'", p.display()), &e),
            },
            End::Remote(_) => remote.push(i),
        }
    }
    let urls: Vec<&NfsUrl> = remote
        .iter()
        .filter_map(|&i| items[i].src.remote())
        .collect();
    let read = ctx
        .per_server(&urls, |fs, paths| async move { fs.vread(&paths).await })
        .await?;
    for (&i, r) in remote.iter().zip(read) {
        match r {
            Ok(d) => data[i] = Some(d),
            Err(e) => ctx.fail_nfs(format!("cannot read '{}'", items[i].src.display()), &e),
        }
    }
    if atomic::planning_failed(ctx, "cp") {
        return Ok(());
    }

    let mut t = fs.transaction();
    // (path, mode) to set at the end: a mode without the owner's write (or search)
    // permission would make the later steps inside the directory or file fail.
    let mut modes_after: Vec<(&str, u32)> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let path = dsts[i].path.as_str();
        let want = wanted_mode(it);
        match it.kind {
            Kind::Dir if existing.contains(&i) => {}
            Kind::Dir => {
                let m = want | 0o700;
                t.mkdir(path, m);
                if m != want {
                    modes_after.push((path, want));
                }
            }
            Kind::File => {
                let m = want | 0o200;
                let d = data[i].take().unwrap_or_default();
                t.write_file(path, d, m, false);
                if m != want {
                    modes_after.push((path, want));
                }
            }
            Kind::Link => {
                t.symlink(path, it.target.as_deref().unwrap_or_default());
            }
        }
    }
    // Deepest first: a directory's own mode is set after its contents'.
    for (path, mode) in modes_after.into_iter().rev() {
        t.setattr(
            path,
            SetAttributes {
                mode: Some(mode),
                ..Default::default()
            },
        );
    }
    let r = t.commit().await.map(|_| ());
    atomic::report(ctx, "cp", r);
    Ok(())
}
