//! Vectorized metadata calls: vgetattrs, vsetattrs, vmkdir, vsymlink, vreadlink,
//! vremove, vrename, vhardlink, vlistdir.

use super::{components, split_parent, Fs, Item, ItemResult};
use crate::attrs::{self, Attributes, SetAttributes};
use crate::compound::ANONYMOUS_STATEID;
use crate::ClientError;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use txnfs_proto::nfs4::*;

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Path relative to the export root.
    pub path: String,
    pub name: String,
    pub attrs: Attributes,
}

fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn last_attrs(r: &[nfs_resop4]) -> Result<Attributes, ClientError> {
    match r.last() {
        Some(nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g))) => attrs::decode(&g.obj_attributes),
        _ => Err(ClientError::Protocol("expected GETATTR".into())),
    }
}

fn unit(r: ItemResult) -> Result<(), ClientError> {
    r.map(|_| ())
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

impl Fs {
    /// Attributes of many paths (symlinks are not followed).
    ///
    /// Paths under a file delegation, or in a delegated directory whose listing is
    /// cached, are answered from the cache (a name the delegated listing lacks is
    /// NFS4ERR_NOENT without asking).
    pub async fn vgetattrs<S: AsRef<str>>(
        &self,
        paths: &[S],
    ) -> Vec<Result<Attributes, ClientError>> {
        let cache = self.client.cache();
        let mut cached: Vec<Option<Result<Attributes, ClientError>>> = paths
            .iter()
            .map(|p| cache.cached_attrs(p.as_ref()))
            .collect();
        let ask: Vec<&str> = paths
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|(p, _)| p.as_ref())
            .collect();
        let (items, errs) = items_for(&ask, 256, |p| {
            let mut ops = self.resolve(p)?;
            ops.push(nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: attrs::stat_bitmap(),
            }));
            Ok(ops)
        });
        let mut asked = merge(errs, self.run(items).await, |r| {
            r.and_then(|v| last_attrs(&v))
        })
        .into_iter();
        cached
            .iter_mut()
            .map(|c| match c.take() {
                Some(r) => r,
                None => asked
                    .next()
                    .unwrap_or_else(|| Err(ClientError::Local("missing result".into()))),
            })
            .collect()
    }

    /// Set attributes on many paths (SETATTR with the anonymous stateid).
    pub async fn vsetattrs<S: AsRef<str>>(
        &self,
        sets: &[(S, SetAttributes)],
    ) -> Vec<Result<(), ClientError>> {
        let cache = self.client.cache();
        let mut giveback = Vec::new();
        for (p, _) in sets {
            giveback.extend(cache.fh_of(p.as_ref()));
            cache.invalidate_parent_listing(p.as_ref());
            cache.drop_listing(p.as_ref());
        }
        cache.return_many(&giveback, true).await;
        let (items, errs) = items_for(sets, 32, |(p, set)| {
            let mut ops = self.resolve(p.as_ref())?;
            ops.push(nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                stateid: ANONYMOUS_STATEID,
                obj_attributes: attrs::encode_set(set),
            })));
            Ok(ops)
        });
        merge(errs, self.run(items).await, unit)
    }

    /// Create directories. With `parents`, missing ancestors are created too and
    /// existing directories are not an error (`mkdir -p`); directories are created level
    /// by level, each level in as few COMPOUNDs as possible.
    pub async fn vmkdir<S: AsRef<str>>(
        &self,
        paths: &[S],
        mode: u32,
        parents: bool,
    ) -> Vec<Result<(), ClientError>> {
        let set = SetAttributes {
            mode: Some(mode),
            ..Default::default()
        };
        let mut out: Vec<Option<Result<(), ClientError>>> =
            (0..paths.len()).map(|_| None).collect();
        // depth -> (path, index of the requested path or None for an ancestor)
        let mut levels: BTreeMap<usize, BTreeMap<String, Option<usize>>> = BTreeMap::new();
        for (i, p) in paths.iter().enumerate() {
            match components(p.as_ref()) {
                Ok(c) if !c.is_empty() => {
                    if parents {
                        for d in 1..c.len() {
                            levels
                                .entry(d)
                                .or_default()
                                .entry(c[..d].join("/"))
                                .or_insert(None);
                        }
                    }
                    levels
                        .entry(c.len())
                        .or_default()
                        .insert(c.join("/"), Some(i));
                }
                Ok(_) => out[i] = Some(Err(ClientError::BadPath(p.as_ref().into()))),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        for (_, level) in levels {
            for path in level.keys() {
                self.client.cache().invalidate_parent_listing(path);
            }
            let mut items = Vec::new();
            let mut who = Vec::new();
            for (path, idx) in &level {
                let Ok((parent, leaf)) = split_parent(path) else {
                    continue;
                };
                let Ok(mut ops) = self.resolve(&parent) else {
                    continue;
                };
                ops.push(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                    objtype: createtype4::NF4DIR,
                    objname: name(&leaf),
                    createattrs: attrs::encode_set(&set),
                })));
                ops.push(nfs_argop4::OP_GETFH);
                items.push(Item {
                    ops,
                    reply_estimate: 200,
                    optional_from: None,
                });
                who.push((path.clone(), *idx));
            }
            let res = self.run(items).await;
            for ((path, idx), r) in who.into_iter().zip(res) {
                let r = match r {
                    Ok(v) => {
                        if let Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh))) = v.last() {
                            self.remember_dir(&path, fh.object.clone());
                        }
                        Ok(())
                    }
                    Err(e) if parents && e.status() == Some(nfsstat4::NFS4ERR_EXIST) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Some(i) = idx {
                    out[i] = Some(r);
                }
            }
        }
        out.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
    }

    /// Create symlinks: (path of the new link, target text).
    pub async fn vsymlink<S: AsRef<str>, T: AsRef<str>>(
        &self,
        links: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        for (p, _) in links {
            self.client.cache().invalidate_parent_listing(p.as_ref());
        }
        let (items, errs) = items_for(links, 64, |(p, target)| {
            let (parent, leaf) = split_parent(p.as_ref())?;
            let mut ops = self.resolve(&parent)?;
            ops.push(nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                objtype: createtype4::NF4LNK(name(target.as_ref())),
                objname: name(&leaf),
                createattrs: attrs::encode_set(&SetAttributes::default()),
            })));
            Ok(ops)
        });
        merge(errs, self.run(items).await, unit)
    }

    /// Targets of many symlinks.
    pub async fn vreadlink<S: AsRef<str>>(&self, paths: &[S]) -> Vec<Result<String, ClientError>> {
        let (items, errs) = items_for(paths, 4200, |p| {
            let mut ops = self.resolve(p.as_ref())?;
            ops.push(nfs_argop4::OP_READLINK);
            Ok(ops)
        });
        merge(errs, self.run(items).await, |r| {
            r.and_then(|v| match v.last() {
                Some(nfs_resop4::OP_READLINK(READLINK4res::NFS4_OK(l))) => {
                    Ok(String::from_utf8_lossy(&l.link).into_owned())
                }
                _ => Err(ClientError::Protocol("expected READLINK".into())),
            })
        })
    }

    /// Remove files or empty directories; with `recursive`, whole trees (listed level by
    /// level, then files removed, then directories from the deepest up).
    pub async fn vremove<S: AsRef<str>>(
        &self,
        paths: &[S],
        recursive: bool,
    ) -> Vec<Result<(), ClientError>> {
        let mut out: Vec<Option<Result<(), ClientError>>> =
            (0..paths.len()).map(|_| None).collect();
        let mut to_remove: Vec<(String, Option<usize>, usize)> = Vec::new(); // path, index, depth
        if recursive {
            let dirs: Vec<String> = paths.iter().map(|p| p.as_ref().to_string()).collect();
            let attrs = self.vgetattrs(&dirs).await;
            let mut trees = Vec::new();
            for (i, (p, a)) in dirs.iter().zip(attrs).enumerate() {
                match a {
                    Ok(a) if a.is_dir() => trees.push((i, p.clone())),
                    Ok(_) => to_remove.push((p.clone(), Some(i), 0)),
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
            let roots: Vec<String> = trees.iter().map(|(_, p)| p.clone()).collect();
            let listings = self.vlistdir(&roots, true).await;
            for ((i, root), l) in trees.into_iter().zip(listings) {
                match l {
                    Ok(entries) => {
                        let base = components(&root).map(|c| c.len()).unwrap_or(0);
                        for e in entries {
                            let depth = components(&e.path).map(|c| c.len()).unwrap_or(0) - base;
                            let rank = if e.attrs.is_dir() { depth } else { usize::MAX };
                            to_remove.push((e.path, None, rank));
                        }
                        to_remove.push((root, Some(i), 0));
                    }
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
        } else {
            for (i, p) in paths.iter().enumerate() {
                to_remove.push((p.as_ref().to_string(), Some(i), 0));
            }
        }
        // Delegations of what goes away are returned first (their buffered data with
        // them: it would only be written to be removed).
        let roots: Vec<&str> = paths.iter().map(|p| p.as_ref()).collect();
        self.client.cache().forget_paths(&roots, false).await;
        // Files first (rank MAX), then directories deepest first.
        to_remove.sort_by_key(|x| std::cmp::Reverse(x.2));
        let mut start = 0;
        while start < to_remove.len() {
            let rank = to_remove[start].2;
            let end = to_remove[start..]
                .iter()
                .position(|x| x.2 != rank)
                .map_or(to_remove.len(), |k| start + k);
            let group = &to_remove[start..end];
            let mut items = Vec::new();
            let mut who = Vec::new();
            for (p, idx, _) in group {
                match split_parent(p).and_then(|(parent, leaf)| Ok((self.resolve(&parent)?, leaf)))
                {
                    Ok((mut ops, leaf)) => {
                        ops.push(nfs_argop4::OP_REMOVE(REMOVE4args {
                            target: name(&leaf),
                        }));
                        items.push(Item {
                            ops,
                            reply_estimate: 64,
                            optional_from: None,
                        });
                        who.push((p.clone(), *idx));
                    }
                    Err(e) => {
                        if let Some(i) = idx {
                            out[*i] = Some(Err(e));
                        }
                    }
                }
            }
            for ((p, idx), r) in who.into_iter().zip(self.run(items).await) {
                if r.is_ok() {
                    self.forget_dir(&p);
                }
                if let Some(i) = idx {
                    if out[i].is_none() {
                        out[i] = Some(unit(r));
                    }
                } else if let Err(e) = r {
                    tracing::debug!("remove {p}: {e}");
                }
            }
            start = end;
        }
        out.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
    }

    /// Rename many (from, to) pairs.
    pub async fn vrename<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        let from: Vec<&str> = pairs.iter().map(|(f, _)| f.as_ref()).collect();
        let to: Vec<&str> = pairs.iter().map(|(_, t)| t.as_ref()).collect();
        // What moves keeps its data; what it replaces goes.
        self.client.cache().forget_paths(&from, true).await;
        self.client.cache().forget_paths(&to, false).await;
        let (items, errs) = items_for(pairs, 96, |(from, to)| {
            let (fp, fname) = split_parent(from.as_ref())?;
            let (tp, tname) = split_parent(to.as_ref())?;
            let mut ops = self.resolve(&fp)?;
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.extend(self.resolve(&tp)?);
            ops.push(nfs_argop4::OP_RENAME(RENAME4args {
                oldname: name(&fname),
                newname: name(&tname),
            }));
            self.forget_dir(from.as_ref());
            Ok(ops)
        });
        merge(errs, self.run(items).await, unit)
    }

    /// Hard links: (existing path, new path).
    pub async fn vhardlink<S: AsRef<str>, T: AsRef<str>>(
        &self,
        pairs: &[(S, T)],
    ) -> Vec<Result<(), ClientError>> {
        // A file with two names could change through one the cache does not know:
        // its delegation goes back (the cache keeps files with one link only).
        let existing: Vec<&str> = pairs.iter().map(|(e, _)| e.as_ref()).collect();
        self.client.cache().forget_paths(&existing, true).await;
        for (_, new) in pairs {
            self.client.cache().invalidate_parent_listing(new.as_ref());
        }
        let (items, errs) = items_for(pairs, 64, |(existing, new)| {
            let (np, nname) = split_parent(new.as_ref())?;
            let mut ops = self.resolve(existing.as_ref())?;
            ops.push(nfs_argop4::OP_SAVEFH);
            ops.extend(self.resolve(&np)?);
            ops.push(nfs_argop4::OP_LINK(LINK4args {
                newname: name(&nname),
            }));
            Ok(ops)
        });
        merge(errs, self.run(items).await, unit)
    }

    /// List directories (entries sorted by name), with attributes. With `recursive`, the
    /// whole trees: every level of the tree is read with one READDIR per directory, all
    /// directories of a level packed together; entries carry their file handles, so no
    /// LOOKUP is needed for the next level.
    ///
    /// With delegations on, a directory's first READDIR comes with GET_DIR_DELEGATION
    /// (and its change attribute before and after); when the server grants it, the
    /// listing is kept and later listings of that directory are served from the cache,
    /// which CB_NOTIFY keeps current. A server that does not grant them (or does not
    /// know the op) is listed exactly as before.
    pub async fn vlistdir<S: AsRef<str>>(
        &self,
        dirs: &[S],
        recursive: bool,
    ) -> Vec<Result<Vec<DirEntry>, ClientError>> {
        let cache = self.client.cache().clone();
        let caching = self.client.delegations_enabled();
        let mut out: Vec<Result<Vec<DirEntry>, ClientError>> =
            (0..dirs.len()).map(|_| Ok(Vec::new())).collect();
        // (owner index, dir path, how to reach it, cookie, verifier)
        struct Pending {
            owner: usize,
            path: String,
            fh: Option<Bytes>,
            cookie: u64,
            verf: [u8; 8],
        }
        // An entry of `owner`'s directories: a directory's handle is remembered (and with
        // `recursive` it is listed at the next level); the entry goes to the owner's result.
        let found = |next: &mut Vec<Pending>,
                     out: &mut [Result<Vec<DirEntry>, ClientError>],
                     owner: usize,
                     path: String,
                     name: String,
                     a: Attributes| {
            if a.is_dir() {
                if let Some(fh) = &a.fh {
                    self.remember_dir(&path, fh.clone());
                }
                if recursive {
                    next.push(Pending {
                        owner,
                        path: path.clone(),
                        fh: a.fh.clone(),
                        cookie: 0,
                        verf: [0; 8],
                    });
                }
            }
            if let Ok(list) = &mut out[owner] {
                list.push(DirEntry {
                    path,
                    name,
                    attrs: a,
                });
            }
        };
        let mut level: Vec<Pending> = dirs
            .iter()
            .enumerate()
            .map(|(i, d)| Pending {
                owner: i,
                path: components(d.as_ref())
                    .map(|c| c.join("/"))
                    .unwrap_or_default(),
                fh: None,
                cookie: 0,
                verf: [0; 8],
            })
            .collect();
        let maxcount: u32 = 32 << 10;
        let change = || {
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: attrs::bitmap(&[attrs::CHANGE]),
            })
        };
        while !level.is_empty() {
            let mut items = Vec::new();
            let mut keep = Vec::new();
            let mut next = Vec::new();
            for p in level {
                if out[p.owner].is_err() {
                    continue;
                }
                // Served from a delegated directory's cached listing.
                if p.cookie == 0 {
                    if let Some(listing) = cache.listing(&p.path) {
                        for (nm, a) in listing {
                            found(&mut next, &mut out, p.owner, join(&p.path, &nm), nm, a);
                        }
                        continue;
                    }
                }
                let ops = match &p.fh {
                    Some(fh) => Ok(vec![nfs_argop4::OP_PUTFH(PUTFH4args {
                        object: fh.clone(),
                    })]),
                    // GETFH: remember the directory's handle for later items.
                    None => self.resolve(&p.path).map(|mut o| {
                        o.push(nfs_argop4::OP_GETFH);
                        o
                    }),
                };
                match ops {
                    Ok(mut ops) => {
                        let first = caching && p.cookie == 0;
                        let generation = if first {
                            cache.dir_generation(&p.path)
                        } else {
                            None
                        };
                        // Asked once per directory: not again while we hold one (even
                        // one whose listing we do not keep), not from a server that
                        // does not know the op or keeps answering UNAVAIL.
                        let gdd = first
                            && generation.is_none()
                            && !self.gdd_unsupported.load(Ordering::Relaxed)
                            && self.gdd_unavail.load(Ordering::Relaxed) < GDD_UNAVAIL_LIMIT
                            && !cache.dir_delegated(&p.path);
                        if gdd || generation.is_some() {
                            ops.push(change());
                        }
                        ops.push(nfs_argop4::OP_READDIR(READDIR4args {
                            cookie: p.cookie,
                            cookieverf: p.verf,
                            dircount: maxcount,
                            maxcount,
                            attr_request: attrs::stat_fh_bitmap(),
                        }));
                        let mut optional_from = None;
                        if gdd {
                            optional_from = Some(ops.len());
                            ops.push(nfs_argop4::OP_GET_DIR_DELEGATION(Box::new(
                                GET_DIR_DELEGATION4args {
                                    gdda_signal_deleg_avail: false,
                                    gdda_notification_types: attrs::bitmap(&[
                                        notify_type4::NOTIFY4_CHANGE_CHILD_ATTRS as u32,
                                        notify_type4::NOTIFY4_REMOVE_ENTRY as u32,
                                        notify_type4::NOTIFY4_ADD_ENTRY as u32,
                                        notify_type4::NOTIFY4_RENAME_ENTRY as u32,
                                    ]),
                                    gdda_child_attr_delay: nfstime4 {
                                        seconds: 0,
                                        nseconds: 0,
                                    },
                                    gdda_dir_attr_delay: nfstime4 {
                                        seconds: 0,
                                        nseconds: 0,
                                    },
                                    gdda_child_attributes: crate::cache::needed_entry_bits(),
                                    gdda_dir_attributes: vec![],
                                },
                            )));
                        }
                        if gdd || generation.is_some() {
                            ops.push(change());
                        }
                        items.push(Item {
                            ops,
                            reply_estimate: maxcount as usize,
                            optional_from,
                        });
                        keep.push((p, Extra { gdd, generation }));
                    }
                    Err(e) => out[p.owner] = Err(e),
                }
            }
            let res = self.run(items).await;
            for ((mut p, extra), r) in keep.into_iter().zip(res) {
                if out[p.owner].is_err() {
                    continue;
                }
                if let Ok(v) = &r {
                    let got_fh = v.iter().find_map(|x| match x {
                        nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(f)) => Some(f.object.clone()),
                        _ => None,
                    });
                    if let Some(fh) = got_fh {
                        self.remember_dir(&p.path, fh.clone());
                        p.fh = Some(fh);
                    }
                }
                let (rd, v) = match r {
                    Ok(v) => match v.iter().find_map(|x| match x {
                        nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(rd)) => Some(rd.clone()),
                        _ => None,
                    }) {
                        Some(rd) => (rd, v),
                        None => {
                            out[p.owner] = Err(ClientError::Protocol("expected READDIR".into()));
                            continue;
                        }
                    },
                    Err(e) => {
                        out[p.owner] = Err(e);
                        continue;
                    }
                };
                let mut last = p.cookie;
                let mut listing = BTreeMap::new();
                for e in &rd.reply.entries {
                    last = e.cookie;
                    let nm = String::from_utf8_lossy(&e.name).into_owned();
                    let a = match attrs::decode(&e.attrs) {
                        Ok(a) => a,
                        Err(err) => {
                            out[p.owner] = Err(err);
                            break;
                        }
                    };
                    if extra.gdd || extra.generation.is_some() {
                        listing.insert(nm.clone(), a.clone());
                    }
                    found(&mut next, &mut out, p.owner, join(&p.path, &nm), nm, a);
                }
                if extra.gdd || extra.generation.is_some() {
                    self.keep_listing(&p.path, p.fh.as_ref(), &v, &extra, rd.reply.eof, listing);
                }
                if !rd.reply.eof {
                    next.push(Pending {
                        cookie: last,
                        verf: rd.cookieverf,
                        ..p
                    });
                }
            }
            level = next;
        }
        for l in out.iter_mut().flatten() {
            l.sort_by(|a, b| a.path.cmp(&b.path));
        }
        out
    }

    /// After a directory's first READDIR with GET_DIR_DELEGATION (or under a delegation
    /// already held): keep the listing when it is complete and the directory's change
    /// attribute was the same before and after it.
    fn keep_listing(
        &self,
        path: &str,
        fh: Option<&Bytes>,
        v: &[nfs_resop4],
        extra: &Extra,
        eof: bool,
        listing: BTreeMap<String, Attributes>,
    ) {
        let cache = self.client.cache();
        let changes: Vec<Option<u64>> = v
            .iter()
            .filter_map(|x| match x {
                nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) => {
                    Some(attrs::decode(&g.obj_attributes).ok().and_then(|a| a.change))
                }
                _ => None,
            })
            .collect();
        let stable = eof && changes.len() == 2 && changes[0].is_some() && changes[0] == changes[1];
        if let Some(generation) = extra.generation {
            if stable {
                cache.store_listing(path, generation, listing);
            }
            return;
        }
        let gdd = v.iter().find_map(|x| match x {
            nfs_resop4::OP_GET_DIR_DELEGATION(r) => Some(r.clone()),
            // A server that does not know the op answers with OP_ILLEGAL's result in
            // its place (NFS-Ganesha 4 does).
            nfs_resop4::OP_ILLEGAL(_) => Some(GET_DIR_DELEGATION4res::default(
                nfsstat4::NFS4ERR_OP_ILLEGAL,
            )),
            _ => None,
        });
        match gdd {
            Some(GET_DIR_DELEGATION4res::NFS4_OK(GET_DIR_DELEGATION4res_non_fatal::GDD4_OK(
                ok,
            ))) => {
                let Some(fh) = fh else { return };
                // Only a delegation that tells us about every change a listing shows.
                let want = attrs::bitmap(&[
                    notify_type4::NOTIFY4_CHANGE_CHILD_ATTRS as u32,
                    notify_type4::NOTIFY4_REMOVE_ENTRY as u32,
                    notify_type4::NOTIFY4_ADD_ENTRY as u32,
                    notify_type4::NOTIFY4_RENAME_ENTRY as u32,
                ]);
                let complete = crate::cache::covers(&ok.gddr_notification, &want)
                    && crate::cache::covers(
                        &ok.gddr_child_attributes,
                        &crate::cache::needed_entry_bits(),
                    );
                self.gdd_unavail.store(0, Ordering::Relaxed);
                cache.dir_granted(
                    path,
                    fh,
                    ok.gddr_stateid,
                    complete,
                    stable.then_some(listing),
                );
            }
            Some(GET_DIR_DELEGATION4res::NFS4_OK(
                GET_DIR_DELEGATION4res_non_fatal::GDD4_UNAVAIL(_),
            )) => {
                self.gdd_unavail.fetch_add(1, Ordering::Relaxed);
            }
            Some(GET_DIR_DELEGATION4res::default(st)) => {
                // NOTSUPP, OP_ILLEGAL, or DIRDELEG_UNAVAIL (NFS-Ganesha's answer): an
                // error status stops the COMPOUND, so a server that gives one is not
                // asked again; anything else counts like GDD4_UNAVAIL.
                if matches!(
                    st,
                    nfsstat4::NFS4ERR_NOTSUPP
                        | nfsstat4::NFS4ERR_OP_ILLEGAL
                        | nfsstat4::NFS4ERR_DIRDELEG_UNAVAIL
                ) {
                    self.gdd_unsupported.store(true, Ordering::Relaxed);
                } else {
                    self.gdd_unavail.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {}
        }
    }
}

/// GDD4_UNAVAIL answers in a row after which an `Fs` stops asking.
const GDD_UNAVAIL_LIMIT: u32 = 16;

/// What a directory's first READDIR asked for besides the listing.
struct Extra {
    /// GET_DIR_DELEGATION was sent with it.
    gdd: bool,
    /// The directory is delegated already: keep the listing if nothing changed.
    generation: Option<u64>,
}

/// One item per input, built by `build`; an input whose ops cannot be built (a bad
/// path) fails on its own and is not sent. Use with [`merge`].
pub(crate) fn items_for<T>(
    inputs: &[T],
    reply_estimate: usize,
    build: impl Fn(&T) -> Result<Vec<nfs_argop4>, ClientError>,
) -> (Vec<Item>, Vec<Option<ClientError>>) {
    let mut items = Vec::new();
    let mut errs = Vec::new();
    for input in inputs {
        match build(input) {
            Ok(ops) => {
                items.push(Item {
                    ops,
                    reply_estimate,
                    optional_from: None,
                });
                errs.push(None);
            }
            Err(e) => errs.push(Some(e)),
        }
    }
    (items, errs)
}

/// Put per-item results back in input order, where some inputs failed before sending.
pub(crate) fn merge<T>(
    errs: Vec<Option<ClientError>>,
    results: Vec<ItemResult>,
    mut f: impl FnMut(ItemResult) -> Result<T, ClientError>,
) -> Vec<Result<T, ClientError>> {
    let mut it = results.into_iter();
    errs.into_iter()
        .map(|e| match e {
            Some(e) => Err(e),
            None => f(it
                .next()
                .unwrap_or_else(|| Err(ClientError::Local("missing result".into())))),
        })
        .collect()
}
