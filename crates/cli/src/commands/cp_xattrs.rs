//! `cp --xattrs` (and `cp -a`): the user extended attributes of the files and
//! directories copied. Remote ends use NFSv4.2's LISTXATTRS / GETXATTR / SETXATTR
//! (RFC 8276), which carry the user namespace only and name it without Linux's `user.`
//! prefix; local ends read and write `user.*` through the kernel.

use super::cp::{End, Item, Kind};
use super::url::NfsUrl;
use super::Ctx;
use bytes::Bytes;
use rustix::fs::XattrFlags;
use rustix::io::Errno;
use std::path::Path;
use txnfs_client::Xattrs;

/// Largest value Linux keeps (XATTR_SIZE_MAX), and a list of names to match.
const XATTR_MAX: usize = 64 << 10;

/// The `user.` attributes of a local file, named as NFS names them.
fn local_get(p: &Path) -> Result<Xattrs, Errno> {
    let mut list = vec![0u8; XATTR_MAX];
    let n = match rustix::fs::listxattr(p, &mut list[..]) {
        Ok(n) => n,
        // A file system without extended attributes has none to copy.
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut value = vec![0u8; XATTR_MAX];
    for full in list[..n].split(|&b| b == 0) {
        let Some(name) = full.strip_prefix(b"user.") else {
            continue;
        };
        match rustix::fs::getxattr(p, full, &mut value[..]) {
            Ok(k) => out.push((
                Bytes::copy_from_slice(name),
                Bytes::copy_from_slice(&value[..k]),
            )),
            Err(Errno::NODATA) => {} // removed meanwhile
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn local_set(p: &Path, xattrs: &Xattrs) -> Result<(), Errno> {
    for (name, value) in xattrs {
        let mut full = b"user.".to_vec();
        full.extend_from_slice(name);
        rustix::fs::setxattr(p, full.as_slice(), value, XattrFlags::empty())?;
    }
    Ok(())
}

/// Copy the extended attributes of the items at `done` (files and directories copied).
pub(super) async fn copy(ctx: &mut Ctx, items: &[Item], done: &[usize]) -> anyhow::Result<()> {
    let idx: Vec<usize> = done
        .iter()
        .copied()
        .filter(|&i| items[i].kind != Kind::Link)
        .collect();
    let cannot_read =
        |it: &Item| format!("cannot read extended attributes of '{}'", it.src.display());
    // Read every source's attributes.
    let mut got: Vec<Option<Xattrs>> = vec![None; idx.len()];
    for (k, &i) in idx.iter().enumerate() {
        if let End::Local(p) = &items[i].src {
            match local_get(p) {
                Ok(x) => got[k] = Some(x),
                Err(e) => ctx.fail_io(cannot_read(&items[i]), &e.into()),
            }
        }
    }
    let remote: Vec<usize> = (0..idx.len())
        .filter(|&k| items[idx[k]].src.remote().is_some())
        .collect();
    let urls: Vec<&NfsUrl> = remote
        .iter()
        .filter_map(|&k| items[idx[k]].src.remote())
        .collect();
    let res = ctx
        .per_server(
            &urls,
            |fs, paths| async move { fs.vgetxattrs(&paths).await },
        )
        .await?;
    for (&k, r) in remote.iter().zip(res) {
        match r {
            Ok(x) => got[k] = Some(x),
            Err(e) => ctx.fail_nfs(cannot_read(&items[idx[k]]), &e),
        }
    }
    // Write them: local destinations one call per name, remote ones vectorized.
    let cannot_set =
        |it: &Item| format!("cannot set extended attributes of '{}'", it.dst.display());
    let mut sets: Vec<(NfsUrl, Bytes, Bytes, usize)> = Vec::new();
    for (k, x) in got.iter().enumerate() {
        let Some(x) = x.as_ref().filter(|x| !x.is_empty()) else {
            continue;
        };
        let it = &items[idx[k]];
        match &it.dst {
            End::Local(p) => {
                if let Err(e) = local_set(p.as_path(), x) {
                    ctx.fail_io(cannot_set(it), &e.into());
                }
            }
            End::Remote(u) => {
                for (name, value) in x {
                    sets.push((u.clone(), name.clone(), value.clone(), k));
                }
            }
        }
    }
    let urls: Vec<&NfsUrl> = sets.iter().map(|(u, ..)| u).collect();
    let res = ctx
        .per_server_idx(&urls, |fs, which| {
            let v: Vec<(String, Bytes, Bytes)> = which
                .iter()
                .map(|&j| (sets[j].0.path.clone(), sets[j].1.clone(), sets[j].2.clone()))
                .collect();
            async move { fs.vsetxattrs(&v).await }
        })
        .await?;
    // One message per file, however many of its names failed.
    let mut reported = std::collections::BTreeSet::new();
    for ((.., k), r) in sets.iter().zip(res) {
        if let Err(e) = r {
            if reported.insert(*k) {
                ctx.fail_nfs(cannot_set(&items[idx[*k]]), &e);
            }
        }
    }
    Ok(())
}
