//! NFSv3 READDIR and READDIRPLUS (RFC 1813 §3.3.16, §3.3.17).
//!
//! Cookies: 1 is after ".", 2 after "..", and a backend cookie n is sent as n + 2 —
//! the same cookie space NFSv4 READDIR uses (`crate::ops::dir`). The backend's
//! cookies are the file system's own stable offsets, so the cookie verifier is the
//! export's constant one (`Server::cookieverf`): it stays valid across restarts, and a
//! verifier that is neither zero nor ours is BAD_COOKIE.

use bytes::Bytes;
use txnfs_backend::{Attrs, FileKey, FileType};
use txnfs_proto::nfs3::*;

use crate::cstate::Compound;
use crate::fh::{Fh, ObjFh};
use crate::v3::common::{be, fattr3_of, getattr, handle3, obj, post_op, post_op_now, v4, R};

const COOKIE_SHIFT: u64 = 2;

/// XDR size of a READDIR reply without entries: status, post_op_attr, verifier,
/// end-of-list marker and eof.
const FIXED: usize = 4 + (4 + 84) + 8 + 4 + 4;

/// One entry as the backend or the directory itself gives it.
struct Entry {
    name: Bytes,
    cookie: u64,
    key: FileKey,
    attrs: Attrs,
}

/// The listing of one request: entries after `cookie` while `fits` takes them.
struct Listing {
    dir: ObjFh,
    dattrs: Attrs,
    verf: [u8; 8],
}

fn open_dir(c: &mut Compound, fh: &nfs_fh3, cookie: u64, verf: &[u8; 8]) -> R<Listing> {
    let dir = obj(c, fh)?;
    let dattrs = getattr(c, &dir)?;
    if dattrs.ftype != FileType::Directory {
        return Err(nfsstat3::NFS3ERR_NOTDIR);
    }
    use crate::ops::attr::{require, R as READ};
    v4(require(&dattrs, &c.creds, READ))?;
    let ours = c.srv.cookieverf(&Fh::Obj(dir.clone()));
    if cookie != 0 && *verf != [0u8; 8] && *verf != ours {
        return Err(nfsstat3::NFS3ERR_BAD_COOKIE);
    }
    Ok(Listing {
        dir,
        dattrs,
        verf: ours,
    })
}

/// Entries after `cookie`, handed to `take` until it says the reply is full; returns
/// whether the end of the directory was reached.
fn list(c: &Compound, l: &Listing, cookie: u64, mut take: impl FnMut(Entry) -> bool) -> R<bool> {
    let be_ = &l.dir.export.backend;
    if cookie == 0
        && !take(Entry {
            name: Bytes::from_static(b"."),
            cookie: 1,
            key: l.dir.key.clone(),
            attrs: l.dattrs.clone(),
        })
    {
        return Ok(false);
    }
    if cookie <= 1 {
        let (key, attrs) = if l.dir.key == l.dir.export.root_key {
            (l.dir.key.clone(), l.dattrs.clone())
        } else {
            be(be_.lookup_parent(c.scope.ctx(), &l.dir.key))?
        };
        if !take(Entry {
            name: Bytes::from_static(b".."),
            cookie: 2,
            key,
            attrs,
        }) {
            return Ok(false);
        }
    }
    let mut at = cookie.saturating_sub(COOKIE_SHIFT);
    loop {
        let (batch, at_end) = be(be_.readdir(c.scope.ctx(), &l.dir.key, at, 128))?;
        if batch.is_empty() {
            return Ok(at_end);
        }
        for e in batch {
            at = e.cookie;
            if !take(Entry {
                name: e.name,
                cookie: e.cookie.saturating_add(COOKIE_SHIFT),
                key: e.key,
                attrs: e.attrs,
            }) {
                return Ok(false);
            }
        }
        if at_end {
            return Ok(true);
        }
    }
}

/// XDR size of an entry3: value-follows, fileid, name, cookie.
fn entry_size(name: &Bytes) -> usize {
    4 + 8 + 4 + name.len() + txnfs_xdr::pad_len(name.len()) + 8
}

pub fn readdir3(c: &mut Compound, a: READDIR3args) -> READDIR3res {
    let mut seen: Option<ObjFh> = None;
    let mut run = |c: &mut Compound| -> R<(Listing, dirlist3)> {
        let l = open_dir(c, &a.dir, a.cookie, &a.cookieverf)?;
        seen = Some(l.dir.clone());
        let limit = (a.count as usize).min(c.srv.cfg.max_io_size as usize);
        let mut used = FIXED;
        let mut entries = Vec::new();
        let eof = list(c, &l, a.cookie, |e| {
            let size = entry_size(&e.name);
            if used + size > limit {
                return false;
            }
            used += size;
            entries.push(entry3 {
                fileid: e.attrs.fileid,
                name: e.name,
                cookie: e.cookie,
            });
            true
        })?;
        if entries.is_empty() && !eof {
            return Err(nfsstat3::NFS3ERR_TOOSMALL);
        }
        Ok((l, dirlist3 { entries, eof }))
    };
    match run(c) {
        Ok((l, reply)) => READDIR3res::NFS3_OK(READDIR3resok {
            dir_attributes: post_op(&l.dir.export, Some(&l.dattrs)),
            cookieverf: l.verf,
            reply,
        }),
        Err(s) => READDIR3res::default(
            s,
            READDIR3resfail {
                dir_attributes: seen.map_or(post_op_attr::FALSE, |d| post_op_now(c, &d)),
            },
        ),
    }
}

pub fn readdirplus3(c: &mut Compound, a: READDIRPLUS3args) -> READDIRPLUS3res {
    let mut seen: Option<ObjFh> = None;
    let mut run = |c: &mut Compound| -> R<(Listing, dirlistplus3)> {
        let l = open_dir(c, &a.dir, a.cookie, &a.cookieverf)?;
        seen = Some(l.dir.clone());
        let limit = (a.maxcount as usize).min(c.srv.cfg.max_io_size as usize);
        // §3.3.17: dircount bounds the entry3 part alone (fileid, name, cookie).
        let dir_limit = if a.dircount == 0 {
            usize::MAX
        } else {
            a.dircount as usize
        };
        let (mut used, mut dir_used) = (FIXED, 0usize);
        let mut entries = Vec::new();
        let mut failed = None;
        let eof = list(c, &l, a.cookie, |e| {
            let fh = match handle3(c, &l.dir.export, e.key) {
                Ok(fh) => fh,
                Err(s) => {
                    failed = Some(s);
                    return false;
                }
            };
            let short = entry_size(&e.name) - 4;
            let size = entry_size(&e.name)
                + (4 + 84)
                + 4
                + 4
                + fh.data.len()
                + txnfs_xdr::pad_len(fh.data.len());
            if used + size > limit || dir_used + short > dir_limit {
                return false;
            }
            used += size;
            dir_used += short;
            entries.push(entryplus3 {
                fileid: e.attrs.fileid,
                name: e.name,
                cookie: e.cookie,
                name_attributes: post_op_attr::TRUE(fattr3_of(&l.dir.export, &e.attrs)),
                name_handle: post_op_fh3::TRUE(fh),
            });
            true
        })?;
        if let Some(s) = failed {
            return Err(s);
        }
        if entries.is_empty() && !eof {
            return Err(nfsstat3::NFS3ERR_TOOSMALL);
        }
        Ok((l, dirlistplus3 { entries, eof }))
    };
    match run(c) {
        Ok((l, reply)) => READDIRPLUS3res::NFS3_OK(READDIRPLUS3resok {
            dir_attributes: post_op(&l.dir.export, Some(&l.dattrs)),
            cookieverf: l.verf,
            reply,
        }),
        Err(s) => READDIRPLUS3res::default(
            s,
            READDIRPLUS3resfail {
                dir_attributes: seen.map_or(post_op_attr::FALSE, |d| post_op_now(c, &d)),
            },
        ),
    }
}
