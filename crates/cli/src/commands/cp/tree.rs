//! The copy's tree apart from file data: directories (one vmkdir per server, level
//! by level; locally parents first), symbolic links (one vsymlink per server), and the
//! modes set once everything is written.

use std::os::unix::fs::PermissionsExt;
use txnfs_client::SetAttributes;
use txnfs_proto::nfs4::nfsstat4;

use super::*;

impl Copier {
    pub(super) async fn dirs(&mut self, ctx: &mut Ctx, items: &[Item]) -> anyhow::Result<()> {
        let dirs: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].kind == Kind::Dir)
            .collect();
        // Local destinations, parents first.
        let mut local: Vec<usize> = dirs
            .iter()
            .copied()
            .filter(|&i| matches!(items[i].dst, End::Local(_)))
            .collect();
        local.sort_by_key(|&i| items[i].dst.display().matches('/').count());
        for i in local {
            let End::Local(p) = &items[i].dst else {
                continue;
            };
            if self.skip(&items[i]) {
                continue;
            }
            match std::fs::create_dir(p) {
                Ok(()) => self.done.push(i),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && p.is_dir() => {}
                Err(e) => {
                    self.fail_io(
                        ctx,
                        format!("cannot create directory '{}'", p.display()),
                        &e,
                    );
                    self.failed_dirs.push(items[i].dst.display());
                }
            }
        }
        // Remote destinations: one vmkdir per server (level by level inside).
        let remote: Vec<usize> = dirs
            .iter()
            .copied()
            .filter(|&i| matches!(items[i].dst, End::Remote(_)))
            .collect();
        let urls = remote_urls(items, &remote, |it| &it.dst);
        let res = ctx
            .per_server(&urls, |fs, paths| async move {
                fs.vmkdir(&paths, DIR_MODE, false).await
            })
            .await?;
        for (&i, r) in remote.iter().zip(res) {
            match r {
                Ok(()) => self.done.push(i),
                Err(e) if e.status() == Some(nfsstat4::NFS4ERR_EXIST) => {}
                Err(e) => {
                    if !self.skip(&items[i]) {
                        self.fail_nfs(
                            ctx,
                            format!("cannot create directory '{}'", items[i].dst.display()),
                            &e,
                        );
                    }
                    self.failed_dirs.push(items[i].dst.display());
                }
            }
        }
        Ok(())
    }

    pub(super) async fn links(&mut self, ctx: &mut Ctx, items: &[Item]) -> anyhow::Result<()> {
        let links: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].kind == Kind::Link && !self.skip(&items[i]))
            .collect();
        let mut remote = Vec::new();
        for &i in &links {
            let t = items[i].target.clone().unwrap_or_default();
            match &items[i].dst {
                End::Local(p) => {
                    if let Err(e) = std::os::unix::fs::symlink(&t, p) {
                        self.fail_io(
                            ctx,
                            format!("cannot create symbolic link '{}'", p.display()),
                            &e,
                        );
                    }
                }
                End::Remote(_) => remote.push(i),
            }
        }
        let urls = remote_urls(items, &remote, |it| &it.dst);
        let res = ctx
            .per_server_idx(&urls, |fs, which| {
                let pairs: Vec<(String, String)> = which
                    .iter()
                    .map(|&k| {
                        let it = &items[remote[k]];
                        (urls[k].path.clone(), it.target.clone().unwrap_or_default())
                    })
                    .collect();
                async move { fs.vsymlink(&pairs).await }
            })
            .await?;
        for (&i, r) in remote.iter().zip(res) {
            if let Err(e) = r {
                self.fail_nfs(
                    ctx,
                    format!("cannot create symbolic link '{}'", items[i].dst.display()),
                    &e,
                );
            }
        }
        Ok(())
    }

    /// Modes that differ from what creation gave: set_permissions locally, one
    /// vsetattrs per server remotely.
    pub(super) async fn modes(&mut self, ctx: &mut Ctx, items: &[Item]) -> anyhow::Result<()> {
        let mut remote: Vec<(NfsUrl, u32)> = Vec::new();
        let mut done = self.done.clone();
        // Deepest first, so that a read-only directory is changed after its contents.
        done.sort_by_key(|&i| std::cmp::Reverse(items[i].dst.display().matches('/').count()));
        for i in done {
            let it = &items[i];
            let want = wanted_mode(it);
            match &it.dst {
                End::Local(p) => {
                    if let Err(e) =
                        std::fs::set_permissions(p, std::fs::Permissions::from_mode(want))
                    {
                        self.fail_io(
                            ctx,
                            format!("cannot set permissions of '{}'", p.display()),
                            &e,
                        );
                    }
                }
                End::Remote(u) => {
                    let default = if it.kind == Kind::Dir {
                        DIR_MODE
                    } else {
                        FILE_MODE
                    };
                    if want != default {
                        remote.push((u.clone(), want));
                    }
                }
            }
        }
        let urls: Vec<&NfsUrl> = remote.iter().map(|(u, _)| u).collect();
        let res = ctx
            .per_server_idx(&urls, |fs, which| {
                let v: Vec<(String, SetAttributes)> = which
                    .iter()
                    .map(|&k| {
                        let set = SetAttributes {
                            mode: Some(remote[k].1),
                            ..Default::default()
                        };
                        (remote[k].0.path.clone(), set)
                    })
                    .collect();
                async move { fs.vsetattrs(&v).await }
            })
            .await?;
        for ((u, _), r) in remote.iter().zip(res) {
            if let Err(e) = r {
                self.fail_nfs(
                    ctx,
                    format!("cannot set permissions of '{}'", u.display),
                    &e,
                );
            }
        }
        Ok(())
    }
}
