//! The tree workloads with `--driver nfs-rs`: `ls -lR`, `cp -R` and `rm -r`
//! through the third-party nfs-rs client one call at a time, the way a
//! simple program would, to compare with the vectorized client (ADR 0012):
//!
//! * ls: READDIR pages of every directory plus a GETATTR of every entry (what
//!   `ls -l` stats);
//! * cp: list the source (READDIR attributes), MKDIR every directory, and per
//!   file READ it whole, create it (OPEN), WRITE it, CLOSE it;
//! * rm: list (READDIR attributes tell files from directories), REMOVE every
//!   file, then every directory deepest first, then the root.

use crate::driver::{self, NfsRsMount};
use crate::workload::Worker;
use anyhow::{anyhow, Context};
use bytes::Bytes;
use std::collections::HashMap;
use txnfs_testbed::data::join;

/// NFSv4 file type of a directory (`nfs_ftype4::NF4DIR`), as nfs-rs reports it.
const NF4DIR: u32 = 2;
/// Largest READ/WRITE per call (less when the server says so).
const IO: u32 = 1 << 20;

/// One entry below a walked directory.
pub struct Entry {
    /// Relative to the walked root.
    pub rel: String,
    pub name: String,
    pub fh: Bytes,
    pub parent_fh: Bytes,
    pub is_dir: bool,
    pub size: u64,
}

/// Every entry below `root_fh`, depth first, READDIR page by page, with a
/// GETATTR per entry when `stat`.
pub async fn walk(
    w: &mut Worker,
    m: &NfsRsMount,
    root_fh: Bytes,
    stat: bool,
) -> anyhow::Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), root_fh)];
    while let Some((dir, fh)) = stack.pop() {
        let mut pos = nfs_rs::DirectoryCookie::default();
        loop {
            let page = w
                .nfsrs_call(
                    driver::READDIR,
                    || format!("readdir {dir:?}"),
                    m.readdirplus_page(fh.clone(), pos),
                    |_| 0,
                )
                .await?;
            for e in page.entries {
                if e.file_name == "." || e.file_name == ".." {
                    continue;
                }
                let rel = join(&dir, &e.file_name);
                let attr = if stat {
                    Some(
                        w.nfsrs_call(
                            driver::GETATTR,
                            || format!("getattr {rel}"),
                            m.getattr(e.handle.clone()),
                            |_| 0,
                        )
                        .await?,
                    )
                } else {
                    e.attr
                };
                let attr = attr.ok_or_else(|| anyhow!("{rel}: no attributes"))?;
                let is_dir = attr.type_ == NF4DIR;
                if is_dir {
                    stack.push((rel.clone(), e.handle.clone()));
                }
                out.push(Entry {
                    rel,
                    name: e.file_name,
                    fh: e.handle,
                    parent_fh: fh.clone(),
                    is_dir,
                    size: attr.filesize,
                });
            }
            if page.eof {
                break;
            }
            pos = page.next;
        }
    }
    Ok(out)
}

/// LOOKUP of `name` in `dir_fh`.
pub async fn lookup(
    w: &mut Worker,
    m: &NfsRsMount,
    dir_fh: &Bytes,
    name: &str,
) -> anyhow::Result<Bytes> {
    Ok(w.nfsrs_call(
        driver::LOOKUP,
        || format!("lookup {name}"),
        m.lookup(dir_fh.clone(), name),
        |_| 0,
    )
    .await?
    .fh)
}

/// `ls -lR` of `src` (a directory in `base_fh`): (entries, dirs, file bytes).
pub async fn ls(w: &mut Worker, m: &NfsRsMount, src: &str) -> anyhow::Result<usize> {
    let base = w.base_fh.clone();
    let fh = lookup(w, m, &base, src).await?;
    Ok(walk(w, m, fh, true).await?.len())
}

/// `cp -R src dst` inside `base_fh`, one call at a time: (files, dirs
/// created including dst). READ and WRITE bytes are recorded per call.
pub async fn cp(
    w: &mut Worker,
    m: &NfsRsMount,
    src: &str,
    dst: &str,
) -> anyhow::Result<(u64, u64)> {
    let base = w.base_fh.clone();
    let src_fh = lookup(w, m, &base, src).await?;
    let entries = walk(w, m, src_fh, false).await?;
    let top = w
        .nfsrs_call(
            driver::MKDIR,
            || format!("mkdir {dst}"),
            m.mkdir(base, dst, 0o755),
            |_| 0,
        )
        .await?;
    let mut dirs: HashMap<String, Bytes> = HashMap::from([(String::new(), top.fh)]);
    // walk() returns parents before their children.
    let mut files = 0;
    for e in &entries {
        let parent_rel = e.rel.rsplit_once('/').map_or("", |(p, _)| p);
        let parent = dirs
            .get(parent_rel)
            .cloned()
            .with_context(|| format!("no copy of the parent of {}", e.rel))?;
        if e.is_dir {
            let o = w
                .nfsrs_call(
                    driver::MKDIR,
                    || format!("mkdir {}", e.rel),
                    m.mkdir(parent, &e.name, 0o755),
                    |_| 0,
                )
                .await?;
            dirs.insert(e.rel.clone(), o.fh);
            continue;
        }
        let data = read_all(w, m, &e.fh, e.size, &e.rel).await?;
        let o = w
            .nfsrs_call(
                driver::OPEN_CREATE,
                || format!("create {}", e.rel),
                m.create(parent, &e.name, Some(0o644)),
                |_| 0,
            )
            .await?;
        let max = m.get_max_write_size().clamp(4096, IO) as usize;
        let mut off = 0usize;
        while off < data.len() {
            let end = (off + max).min(data.len());
            let r = w
                .nfsrs_call(
                    driver::WRITE,
                    || format!("write {} at {off}", e.rel),
                    m.write(o.fh.clone(), off as u64, data.slice(off..end)),
                    |r| u64::from(r.count),
                )
                .await?;
            anyhow::ensure!(r.count > 0, "write {}: no progress at {off}", e.rel);
            off += r.count as usize;
        }
        w.nfsrs_call(
            driver::CLOSE,
            || format!("close {}", e.rel),
            m.close(o.fh),
            |_| 0,
        )
        .await?;
        files += 1;
    }
    Ok((files, dirs.len() as u64))
}

async fn read_all(
    w: &mut Worker,
    m: &NfsRsMount,
    fh: &Bytes,
    size: u64,
    what: &str,
) -> anyhow::Result<Bytes> {
    let max = m.get_max_read_size().clamp(4096, IO);
    let mut out = Vec::with_capacity(size as usize);
    while (out.len() as u64) < size {
        let off = out.len() as u64;
        let d = w
            .nfsrs_call(
                driver::READ,
                || format!("read {what} at {off}"),
                m.read(fh.clone(), off, max),
                |d| d.len() as u64,
            )
            .await?;
        if d.is_empty() {
            break;
        }
        out.extend_from_slice(&d);
    }
    Ok(Bytes::from(out))
}

/// `rm -r root` inside `base_fh`: entries removed (not counting root).
pub async fn rm(w: &mut Worker, m: &NfsRsMount, root: &str) -> anyhow::Result<u64> {
    let base = w.base_fh.clone();
    let fh = lookup(w, m, &base, root).await?;
    let entries = walk(w, m, fh, false).await?;
    for e in entries.iter().filter(|e| !e.is_dir) {
        w.nfsrs_call(
            driver::REMOVE,
            || format!("remove {}", e.rel),
            m.remove(e.parent_fh.clone(), &e.name),
            |_| 0,
        )
        .await?;
    }
    let mut dirs: Vec<&Entry> = entries.iter().filter(|e| e.is_dir).collect();
    dirs.sort_by_key(|e| std::cmp::Reverse(e.rel.matches('/').count()));
    for e in dirs {
        rmdir(w, m, e.parent_fh.clone(), &e.name, &e.rel).await?;
    }
    rmdir(w, m, base, root, root).await?;
    Ok(entries.len() as u64)
}

/// RMDIR of `name` in `dir_fh` (a REMOVE request); `rel` names it in errors.
async fn rmdir(
    w: &mut Worker,
    m: &NfsRsMount,
    dir_fh: Bytes,
    name: &str,
    rel: &str,
) -> anyhow::Result<()> {
    w.nfsrs_call(
        driver::REMOVE,
        || format!("rmdir {rel}"),
        m.rmdir(dir_fh, name),
        |_| 0,
    )
    .await?;
    Ok(())
}
