//! Symbolic links in remote operands (ADR 0037), resolved as the kernel resolves a path for
//! coreutils: a link anywhere in the path is replaced by its target (relative to the
//! link's directory, or, when absolute, to the server's NFS root: the URL's root is the
//! only root a client of the export has), the last component only when asked, and more
//! than [`MAX_LINKS`] links in one path is ELOOP.
//!
//! Resolution is vectorized like everything else: per round one vgetattrs of every
//! pending path (the round callers did anyway when no path holds a link), one
//! vgetattrs of the prefixes of paths that failed at a link in their middle, and one
//! vreadlink of the links found.

use super::url::NfsUrl;
use super::Ctx;
use txnfs_client::{Attributes, ClientError, FileKind};
use txnfs_proto::nfs4::nfsstat4;

/// Links followed in one path before giving up (Linux's MAXSYMLINKS).
pub const MAX_LINKS: usize = 40;

/// Why an operand could not be resolved.
#[derive(Debug)]
pub enum Unresolved {
    /// The server's answer for the path (or for a link on it).
    Nfs(ClientError),
    /// More than [`MAX_LINKS`] links: a loop, most likely.
    Loop,
    /// Nothing is there (NFS4ERR_NOENT): the URL is the path with the links before the
    /// missing name resolved, where a command that creates it (`cp` to a new DEST
    /// through a link to a directory) creates it.
    Absent(NfsUrl),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::Nfs(e) => f.write_str(&super::describe(e)),
            Unresolved::Loop => f.write_str("Too many levels of symbolic links"),
            Unresolved::Absent(_) => f.write_str(&super::describe(&ClientError::nfs(
                "LOOKUP",
                0,
                nfsstat4::NFS4ERR_NOENT,
            ))),
        }
    }
}

/// An operand with the links on its path replaced: `url.path` is what to open,
/// `url.display` still the operand as typed; `attrs` describe what it names.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub url: NfsUrl,
    pub attrs: Attributes,
}

/// One path being resolved.
struct Pending {
    /// Index into the caller's operands.
    at: usize,
    url: NfsUrl,
    links: usize,
}

/// A link found on a pending path, and what followed it there.
struct Hop {
    pending: Pending,
    link_path: String,
    rest: Vec<String>,
}

fn is_link(a: &Attributes) -> bool {
    a.kind == Some(FileKind::Symlink)
}

fn components(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// The path a link at `link_path` with text `target` leads to, followed by `rest`:
/// "." dropped and ".." folded, never above the root (as "/.." is "/").
pub fn splice(link_path: &str, target: &str, rest: &[String]) -> String {
    let mut out: Vec<&str> = Vec::new();
    if !target.starts_with('/') {
        out.extend(link_path.split('/').filter(|c| !c.is_empty()));
        out.pop(); // the link's own name
    }
    for c in target.split('/').chain(rest.iter().map(String::as_str)) {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.join("/")
}

/// Resolve the links on the paths of `urls` (and the last component's too when
/// `follow_last`), in order. Connection failures are the caller's `?`; everything
/// else is per operand.
pub async fn resolve(
    ctx: &mut Ctx,
    urls: &[&NfsUrl],
    follow_last: bool,
) -> anyhow::Result<Vec<Result<Resolved, Unresolved>>> {
    let mut out: Vec<Option<Result<Resolved, Unresolved>>> = urls.iter().map(|_| None).collect();
    let mut pending: Vec<Pending> = urls
        .iter()
        .enumerate()
        .map(|(at, u)| Pending {
            at,
            url: (*u).clone(),
            links: 0,
        })
        .collect();
    while !pending.is_empty() {
        let refs: Vec<&NfsUrl> = pending.iter().map(|p| &p.url).collect();
        let attrs = ctx.getattrs(&refs).await?;
        let mut hops: Vec<Hop> = Vec::new();
        // Paths that failed where a link in their middle may be the cause.
        let mut inner: Vec<(Pending, ClientError)> = Vec::new();
        for (p, r) in pending.drain(..).zip(attrs) {
            match r {
                Ok(at) if follow_last && is_link(&at) => {
                    let link_path = p.url.path.clone();
                    hops.push(Hop {
                        pending: p,
                        link_path,
                        rest: Vec::new(),
                    });
                }
                Ok(attrs) => {
                    out[p.at] = Some(Ok(Resolved { url: p.url, attrs }));
                }
                Err(e)
                    if matches!(
                        e.status(),
                        Some(nfsstat4::NFS4ERR_SYMLINK | nfsstat4::NFS4ERR_NOTDIR)
                    ) && components(&p.url.path).len() > 1 =>
                {
                    inner.push((p, e))
                }
                Err(e) if e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {
                    out[p.at] = Some(Err(Unresolved::Absent(p.url)))
                }
                Err(e) => out[p.at] = Some(Err(Unresolved::Nfs(e))),
            }
        }
        // The first link among the parents of each such path.
        let mut prefix_urls: Vec<NfsUrl> = Vec::new();
        for (p, _) in &inner {
            let c = components(&p.url.path);
            for n in 1..c.len() {
                let mut u = p.url.clone();
                u.path = c[..n].join("/");
                prefix_urls.push(u);
            }
        }
        let prefix_refs: Vec<&NfsUrl> = prefix_urls.iter().collect();
        let mut prefix_attrs = ctx.getattrs(&prefix_refs).await?.into_iter();
        for (p, e) in inner {
            let c = components(&p.url.path);
            let found: Vec<bool> = (1..c.len())
                .map(|_| matches!(prefix_attrs.next(), Some(Ok(a)) if is_link(&a)))
                .collect();
            match found.iter().position(|&l| l) {
                Some(k) => hops.push(Hop {
                    link_path: c[..=k].join("/"),
                    rest: c[k + 1..].to_vec(),
                    pending: p,
                }),
                None => out[p.at] = Some(Err(Unresolved::Nfs(e))),
            }
        }
        // Read the links, splice their targets in, and go round again.
        let link_urls: Vec<NfsUrl> = hops
            .iter()
            .map(|h| {
                let mut u = h.pending.url.clone();
                u.path = h.link_path.clone();
                u
            })
            .collect();
        let link_refs: Vec<&NfsUrl> = link_urls.iter().collect();
        let targets = ctx
            .per_server(
                &link_refs,
                |fs, paths| async move { fs.vreadlink(&paths).await },
            )
            .await?;
        for (h, t) in hops.into_iter().zip(targets) {
            let mut p = h.pending;
            match t {
                Ok(target) if p.links < MAX_LINKS => {
                    p.url.path = splice(&h.link_path, &target, &h.rest);
                    p.links += 1;
                    pending.push(p);
                }
                Ok(_) => out[p.at] = Some(Err(Unresolved::Loop)),
                Err(e) => out[p.at] = Some(Err(Unresolved::Nfs(e))),
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|r| r.unwrap_or(Err(Unresolved::Nfs(ClientError::Local("no result".into())))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::splice;

    #[test]
    fn targets_splice_relative_to_the_link_or_the_root() {
        assert_eq!(splice("d/link", "f", &[]), "d/f");
        assert_eq!(splice("d/link", "../e/f", &[]), "e/f");
        assert_eq!(splice("d/link", "/top/f", &[]), "top/f");
        assert_eq!(splice("link", "../../x", &[]), "x");
        assert_eq!(
            splice("a/dirlink", "real", &["sub".into(), "f".into()]),
            "a/real/sub/f"
        );
        assert_eq!(splice("a/l", "./", &[]), "a");
    }
}
