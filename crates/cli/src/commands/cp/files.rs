//! Regular files: copied by the server (COPY) within one server, else in batches of
//! small files (vread / vwrite, many files per COMPOUND), and streamed when large.

use bytes::Bytes;
use std::collections::BTreeMap;

use super::*;
use crate::commands::split_retry_items;

/// Bytes per batch of small files (read into memory, then written in one call).
const BATCH: u64 = 32 << 20;
/// Files larger than this are streamed instead of batched.
const STREAM: u64 = 32 << 20;

impl Copier {
    pub(super) async fn files(&mut self, ctx: &mut Ctx, items: &[Item]) -> anyhow::Result<()> {
        let mut files: Vec<usize> = Vec::new();
        for i in (0..items.len()).filter(|&i| items[i].kind == Kind::File) {
            if self.skip(&items[i]) {
                continue;
            }
            if same_file(&items[i]) {
                // Copying would truncate the only copy (GNU cp refuses the same way).
                ctx.fail_msg(format!(
                    "'{}' and '{}' are the same file",
                    items[i].src.display(),
                    items[i].dst.display()
                ));
                continue;
            }
            files.push(i);
        }
        // Within one server that copies (NFSv4.2 COPY), every file is copied there,
        // whatever its size: no byte crosses the network.
        let mut on_server: BTreeMap<ServerKey, Vec<usize>> = BTreeMap::new();
        for &i in &files {
            if let (Some(s), Some(d)) = (items[i].src.server(), items[i].dst.server()) {
                if s == d {
                    on_server.entry(s).or_default().push(i);
                }
            }
        }
        for (server, idx) in on_server {
            let fs = ctx.fs(&server).await?;
            if !fs.copies_on_server().await {
                continue;
            }
            let left = self.copy_on_server(ctx, &fs, items, &idx).await;
            files.retain(|i| !idx.contains(i) || left.contains(i));
        }
        // Small files grouped by (source server, destination server).
        let mut groups: BTreeMap<(Option<ServerKey>, Option<ServerKey>), Vec<usize>> =
            BTreeMap::new();
        let mut big = Vec::new();
        for i in files {
            // Sparse files are streamed, which keeps their holes.
            if items[i].size > STREAM || items[i].sparse {
                big.push(i);
            } else {
                groups
                    .entry((items[i].src.server(), items[i].dst.server()))
                    .or_default()
                    .push(i);
            }
        }
        for ((s, d), idx) in groups {
            let mut start = 0;
            while start < idx.len() {
                let mut end = start;
                let mut bytes = 0;
                while end < idx.len() && (end == start || bytes + items[idx[end]].size <= BATCH) {
                    bytes += items[idx[end]].size;
                    end += 1;
                }
                self.batch(ctx, items, &idx[start..end], s.as_ref(), d.as_ref())
                    .await?;
                start = end;
            }
        }
        for i in big {
            self.stream(ctx, &items[i], i).await?;
        }
        Ok(())
    }

    /// Copy files within one server with COPY. Returns the files the server could not
    /// copy (it answered NOTSUPP): the caller copies them through the client.
    async fn copy_on_server(
        &mut self,
        ctx: &mut Ctx,
        fs: &txnfs_client::Fs,
        items: &[Item],
        idx: &[usize],
    ) -> Vec<usize> {
        let path = |e: &End| e.remote().map(|u| u.path.clone()).unwrap_or_default();
        let mut left = Vec::new();
        // Bounded calls: the progress line moves, and one failure costs little.
        for part in idx.chunks(256) {
            let pairs: Vec<(String, String)> = part
                .iter()
                .map(|&i| (path(&items[i].src), path(&items[i].dst)))
                .collect();
            for (&i, r) in part.iter().zip(fs.vcopy_on_server(&pairs).await) {
                match r {
                    Ok(()) => {
                        self.done.push(i);
                        self.progress.add_bytes(items[i].size);
                        self.progress.add_files(1);
                    }
                    Err(e) if txnfs_client::is_copy_unsupported(&e) => left.push(i),
                    Err(e) => self.fail_nfs(
                        ctx,
                        format!(
                            "cannot copy '{}' to '{}'",
                            items[i].src.display(),
                            items[i].dst.display()
                        ),
                        &e,
                    ),
                }
            }
        }
        left
    }

    /// Copy a batch of small files from one place to another.
    async fn batch(
        &mut self,
        ctx: &mut Ctx,
        items: &[Item],
        idx: &[usize],
        src: Option<&ServerKey>,
        dst: Option<&ServerKey>,
    ) -> anyhow::Result<()> {
        let bytes: u64 = idx.iter().map(|&i| items[i].size).sum();
        let path = |e: &End| e.remote().map(|u| u.path.clone()).unwrap_or_default();
        // Same server: vcopy.
        if let (Some(s), Some(d)) = (src, dst) {
            if s == d {
                let fs = ctx.fs(s).await?;
                let pairs: Vec<(String, String)> = idx
                    .iter()
                    .map(|&i| (path(&items[i].src), path(&items[i].dst)))
                    .collect();
                let res =
                    split_retry_items(&fs, &pairs, |fs, p| async move { fs.vcopy(&p).await }).await;
                for (&i, r) in idx.iter().zip(res) {
                    match r {
                        Ok(()) => self.done.push(i),
                        Err(e) => self.fail_nfs(
                            ctx,
                            format!(
                                "cannot copy '{}' to '{}'",
                                items[i].src.display(),
                                items[i].dst.display()
                            ),
                            &e,
                        ),
                    }
                }
                self.progress.add_bytes(bytes);
                self.progress.add_files(idx.len() as u64);
                return Ok(());
            }
        }
        // Read the batch.
        let mut data: Vec<Option<Bytes>> = Vec::with_capacity(idx.len());
        match src {
            None => {
                for &i in idx {
                    let End::Local(p) = &items[i].src else {
                        data.push(None);
                        continue;
                    };
                    match std::fs::read(p) {
                        Ok(d) => data.push(Some(Bytes::from(d))),
                        Err(e) => {
                            self.fail_io(
                                ctx,
                                format!("cannot open '{}' for reading", p.display()),
                                &e,
                            );
                            data.push(None);
                        }
                    }
                }
            }
            Some(s) => {
                let fs = ctx.fs(s).await?;
                let paths: Vec<String> = idx.iter().map(|&i| path(&items[i].src)).collect();
                let res =
                    split_retry_items(&fs, &paths, |fs, p| async move { fs.vread(&p).await }).await;
                for (&i, r) in idx.iter().zip(res) {
                    match r {
                        Ok(d) => data.push(Some(d)),
                        Err(e) => {
                            self.fail_nfs(
                                ctx,
                                format!("cannot open '{}' for reading", items[i].src.display()),
                                &e,
                            );
                            data.push(None);
                        }
                    }
                }
            }
        }
        // Write it.
        match dst {
            None => {
                for (&i, d) in idx.iter().zip(&data) {
                    let (Some(d), End::Local(p)) = (d, &items[i].dst) else {
                        continue;
                    };
                    match std::fs::write(p, d) {
                        Ok(()) => self.done.push(i),
                        Err(e) => self.fail_io(
                            ctx,
                            format!("cannot create regular file '{}'", p.display()),
                            &e,
                        ),
                    }
                    self.progress.add_bytes(d.len() as u64);
                    self.progress.add_files(1);
                }
            }
            Some(d) => {
                let fs = ctx.fs(d).await?;
                let mut which = Vec::new();
                let mut writes = Vec::new();
                for (&i, b) in idx.iter().zip(data) {
                    if let Some(b) = b {
                        which.push(i);
                        writes.push((path(&items[i].dst), b));
                    }
                }
                let res =
                    split_retry_items(
                        &fs,
                        &writes,
                        |fs, w| async move { fs.vwrite(&w, false).await },
                    )
                    .await;
                for (&i, r) in which.iter().zip(res) {
                    match r {
                        Ok(()) => self.done.push(i),
                        Err(e) => self.fail_nfs(
                            ctx,
                            format!("cannot create regular file '{}'", items[i].dst.display()),
                            &e,
                        ),
                    }
                }
                self.progress.add_bytes(bytes);
                self.progress.add_files(which.len() as u64);
            }
        }
        Ok(())
    }
}
