//! `txnfs cp [-R] SRC... DEST`: local→remote, remote→local and remote→remote.
//!
//! The whole copy is planned first (every operand, and with -R every tree, listed with
//! one vlistdir per server: one READDIR round per tree level), then executed in a few
//! vectorized calls: one vmkdir for all directories (level by level), one vsymlink for
//! all symlinks, files in batches of up to 32 MiB (vwrite / vread / vcopy, many files per
//! COMPOUND), files over 32 MiB streamed, and one vsetattrs for modes that differ from
//! the creation defaults.

use super::follow::{self, Unresolved};
use super::progress::Progress;
use super::url::{Location, NfsUrl, ServerKey};
use super::{umask, usage, Ctx};
use clap::Args;
use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use txnfs_client::{Attributes, ClientError, FileKind};

mod files;
mod streamed;
mod tree;
mod walk;

use walk::walk_local;

/// Mode of files and directories the vectorized calls create.
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

#[derive(Args, Debug)]
#[command(
    override_usage = "txnfs cp [OPTIONS] SRC... DEST",
    after_help = "EXAMPLES:\n  \
    txnfs cp photo.jpg nfs://server/data/               local -> remote\n  \
    txnfs cp -R ./project nfs://server/backup/project    a whole tree\n  \
    txnfs cp nfs://server/data/a.txt .                   remote -> local\n  \
    txnfs cp -R nfs://server/data nfs://server/data.bak  remote -> remote (by the server)\n  \
    txnfs cp -a ./project nfs://server/backup/project    -R, keeping user xattrs\n  \
    txnfs cp -P nfs://server/data/latest ./latest        the symlink, not its target\n  \
    txnfs --stats cp -R ./tree nfs://127.0.0.1:2050/t    show the COMPOUNDs sent\n  \
    txnfs cp -R --atomic ./site nfs://server/www/site    all of it, or nothing\n\n\
    At least one side must be an nfs:// URL. If DEST is an existing directory, each SRC\n\
    is copied into it; with several SRCs it must be one. A SRC that is a symbolic link\n\
    is copied from what it points to (a link's absolute target starts at the server's\n\
    NFS root), unless -P, -R or -a. Modes are copied (minus the umask), owners and\n\
    times are not. A progress line is shown on a terminal for copies\n\
    over 1 MiB. Over NFSv4.2 a copy within one server is done by the server (COPY),\n\
    and sparse files keep their holes either way.\n\n\
    With --atomic the whole copy is ONE transaction (txnfs servers only; DEST on one\n\
    server): every directory, file and symlink appears, or the command fails and\n\
    nothing does. Existing destination directories are used; existing files are\n\
    overwritten. A copy larger than one COMPOUND (about 1 MiB of data on txnfs's\n\
    defaults) is sent as one transaction of several COMPOUNDs, still all or nothing\n\
    and invisible to others until it commits (larger files are written in pieces;\n\
    at most 4096 COMPOUNDs, about 4 GiB). It must commit within the server's lease\n\
    (60 s by default) or the server rolls it back."
)]
pub struct CpArgs {
    /// Copy directories recursively (symlinks are copied as symlinks).
    #[arg(short = 'R', short_alias = 'r', long = "recursive")]
    pub recursive: bool,
    /// Copy everything in one transaction: all or nothing (needs a txnfs server).
    #[arg(long)]
    pub atomic: bool,
    /// Keep the user extended attributes (`user.*`) of files and directories (NFSv4.2
    /// GETXATTR/SETXATTR on remote ends).
    #[arg(long)]
    pub xattrs: bool,
    /// Archive: -R, -P and --xattrs (modes are kept as without it; owners and times
    /// are not).
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Copy symbolic links as links (the default with -R and -a); without it, a
    /// source that is a link is copied from what it points to, as cp(1) does.
    #[arg(short = 'P', long = "no-dereference")]
    pub no_dereference: bool,
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    pub paths: Vec<String>,
}

/// One end of a copy.
#[derive(Debug, Clone)]
pub(super) enum End {
    Local(PathBuf),
    Remote(NfsUrl),
}

impl End {
    fn join(&self, rel: &str) -> End {
        if rel.is_empty() {
            return self.clone();
        }
        match self {
            End::Local(p) => End::Local(p.join(rel)),
            End::Remote(u) => End::Remote(u.join(rel)),
        }
    }
    pub(super) fn display(&self) -> String {
        match self {
            End::Local(p) => p.display().to_string(),
            End::Remote(u) => u.display.clone(),
        }
    }
    fn server(&self) -> Option<ServerKey> {
        match self {
            End::Local(_) => None,
            End::Remote(u) => Some(u.server()),
        }
    }
    pub(super) fn remote(&self) -> Option<&NfsUrl> {
        match self {
            End::Remote(u) => Some(u),
            End::Local(_) => None,
        }
    }
    fn basename(&self) -> Option<String> {
        match self {
            End::Local(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| n != "." && n != ".."),
            End::Remote(u) => Some(u.basename().to_string()).filter(|n| !n.is_empty()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
    Link,
}

#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) kind: Kind,
    pub(super) src: End,
    pub(super) dst: End,
    pub(super) size: u64,
    /// A regular file with fewer bytes allocated than its size: copied with its holes.
    pub(super) sparse: bool,
    pub(super) mode: u32,
    pub(super) target: Option<String>,
}

/// The remote URLs of the items at `idx`, of the end `end` picks (source or destination).
fn remote_urls<'a>(items: &'a [Item], idx: &[usize], end: fn(&Item) -> &End) -> Vec<&'a NfsUrl> {
    idx.iter()
        .filter_map(|&i| end(&items[i]).remote())
        .collect()
}

fn kind_of(a: &Attributes) -> Option<Kind> {
    match a.kind {
        Some(FileKind::Directory) => Some(Kind::Dir),
        Some(FileKind::Regular) => Some(Kind::File),
        Some(FileKind::Symlink) => Some(Kind::Link),
        _ => None,
    }
}

/// Do source and destination name one file (one path on one server; or, locally,
/// one inode)?
fn same_file(it: &Item) -> bool {
    match (&it.src, &it.dst) {
        // URL paths are normalized when parsed.
        (End::Remote(s), End::Remote(d)) => s.server() == d.server() && s.path == d.path,
        (End::Local(s), End::Local(d)) => match (std::fs::metadata(s), std::fs::metadata(d)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        },
        _ => false,
    }
}

/// Fewer bytes allocated than the size says: the file has holes.
fn local_sparse(m: &std::fs::Metadata) -> bool {
    m.blocks().saturating_mul(512) < m.len()
}

fn remote_sparse(a: &Attributes) -> bool {
    matches!((a.space_used, a.size), (Some(used), Some(size)) if used < size)
}

fn local_kind(m: &std::fs::Metadata) -> Option<Kind> {
    let t = m.file_type();
    if t.is_dir() {
        Some(Kind::Dir)
    } else if t.is_file() {
        Some(Kind::File)
    } else if t.is_symlink() {
        Some(Kind::Link)
    } else {
        None
    }
}

pub async fn run(ctx: &mut Ctx, mut a: CpArgs) -> anyhow::Result<()> {
    a.recursive |= a.archive;
    if a.atomic && (a.xattrs || a.archive) {
        // A transaction changes no extended attribute (ADR 0025).
        return usage("--atomic cannot keep extended attributes (--xattrs, -a)");
    }
    let Some((dest_s, srcs_s)) = a.paths.split_last() else {
        return usage("missing destination operand");
    };
    let parse = |s: &String| match Location::parse(s) {
        Ok(Location::Local(p)) => Ok(End::Local(p)),
        Ok(Location::Remote(u)) => Ok(End::Remote(u)),
        Err(e) => usage(format!("invalid URL '{s}': {e}")),
    };
    let dest = parse(dest_s)?;
    let srcs: Vec<End> = srcs_s.iter().map(parse).collect::<anyhow::Result<_>>()?;
    for s in &srcs {
        if matches!((s, &dest), (End::Local(_), End::Local(_))) {
            return usage(format!(
                "cannot copy '{}' to '{}': one side must be an nfs:// URL (use cp(1) for local copies)",
                s.display(),
                dest.display()
            ));
        }
    }
    umask_cache(umask());

    // Is DEST an existing directory (through symbolic links, as locally)?
    let (dest, dest_dir) = match dest {
        End::Local(p) => {
            let is_dir = std::fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false);
            (End::Local(p), is_dir)
        }
        End::Remote(u) => match follow::resolve(ctx, &[&u], true).await?.pop() {
            Some(Ok(r)) => {
                let is_dir = r.attrs.is_dir();
                (End::Remote(r.url), is_dir)
            }
            Some(Err(Unresolved::Absent(at))) => (End::Remote(at), false),
            Some(Err(e)) => {
                ctx.fail_unresolved(format!("cannot stat '{}'", u.display), e);
                return Ok(());
            }
            None => (End::Remote(u), false),
        },
    };
    if srcs.len() > 1 && !dest_dir {
        ctx.fail_msg(format!("target '{}' is not a directory", dest.display()));
        return Ok(());
    }

    // The operands themselves: links on their paths followed, and a link operand
    // too unless links are copied as links (-P, -R, -a), as cp(1) does.
    let keep_links = a.recursive || a.no_dereference;
    let remote_srcs: Vec<&NfsUrl> = srcs.iter().filter_map(End::remote).collect();
    let mut remote_attrs = follow::resolve(ctx, &remote_srcs, !keep_links)
        .await?
        .into_iter();
    let mut items: Vec<Item> = Vec::new();
    let mut remote_trees: Vec<(End, End)> = Vec::new();
    let mut local_trees: Vec<(PathBuf, End, End)> = Vec::new();
    for s in &srcs {
        let dst = if dest_dir {
            match s.basename() {
                Some(b) => dest.join(&b),
                None => dest.clone(),
            }
        } else {
            dest.clone()
        };
        let mut src = s.clone();
        let (kind, size, sparse, mode, target) = match s {
            End::Local(p) => {
                let m = if keep_links {
                    std::fs::symlink_metadata(p)
                } else {
                    std::fs::metadata(p)
                };
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        ctx.fail_io(format!("cannot stat '{}'", p.display()), &e);
                        continue;
                    }
                };
                let Some(k) = local_kind(&m) else {
                    ctx.fail_msg(format!("cannot copy '{}': not a regular file", p.display()));
                    continue;
                };
                let target = if k == Kind::Link {
                    std::fs::read_link(p)
                        .ok()
                        .map(|t| t.to_string_lossy().into_owned())
                } else {
                    None
                };
                (k, m.len(), local_sparse(&m), m.mode() & 0o7777, target)
            }
            End::Remote(u) => match remote_attrs.next() {
                Some(Ok(r)) => {
                    let at = r.attrs;
                    src = End::Remote(r.url);
                    let Some(k) = kind_of(&at) else {
                        ctx.fail_msg(format!("cannot copy '{}': not a regular file", u.display));
                        continue;
                    };
                    (
                        k,
                        at.size.unwrap_or(0),
                        remote_sparse(&at),
                        at.mode.unwrap_or(FILE_MODE),
                        None,
                    )
                }
                Some(Err(e)) => {
                    ctx.fail_unresolved(format!("cannot stat '{}'", u.display), e);
                    continue;
                }
                None => continue,
            },
        };
        if kind == Kind::Dir && !a.recursive {
            ctx.fail_msg(format!(
                "-r not specified; omitting directory '{}'",
                s.display()
            ));
            continue;
        }
        if kind == Kind::Dir {
            match &src {
                End::Local(p) => local_trees.push((p.clone(), src.clone(), dst.clone())),
                End::Remote(_) => remote_trees.push((src.clone(), dst.clone())),
            }
        }
        items.push(Item {
            kind,
            src,
            dst,
            size: if kind == Kind::File { size } else { 0 },
            sparse: kind == Kind::File && sparse,
            mode,
            target,
        });
    }

    // Trees.
    for (root, src, dst) in &local_trees {
        walk_local(ctx, root, src, dst, &mut items);
    }
    let roots: Vec<&NfsUrl> = remote_trees
        .iter()
        .filter_map(|(s, _)| s.remote())
        .collect();
    let listings = ctx
        .per_server(&roots, |fs, paths| async move {
            fs.vlistdir(&paths, true).await
        })
        .await?;
    for ((src, dst), l) in remote_trees.iter().zip(listings) {
        let Some(su) = src.remote() else { continue };
        match l {
            Ok(entries) => {
                for e in entries {
                    let rel = if su.path.is_empty() {
                        e.path.as_str()
                    } else {
                        e.path
                            .strip_prefix(&su.path)
                            .map(|r| r.trim_start_matches('/'))
                            .unwrap_or(&e.path)
                    };
                    let Some(kind) = kind_of(&e.attrs) else {
                        ctx.fail_msg(format!(
                            "'{}': not a regular file, directory or symlink; skipped",
                            su.join(rel).display
                        ));
                        continue;
                    };
                    items.push(Item {
                        kind,
                        src: src.join(rel),
                        dst: dst.join(rel),
                        size: if kind == Kind::File {
                            e.attrs.size.unwrap_or(0)
                        } else {
                            0
                        },
                        sparse: kind == Kind::File && remote_sparse(&e.attrs),
                        mode: e.attrs.mode.unwrap_or(FILE_MODE) & 0o7777,
                        target: None,
                    });
                }
            }
            Err(e) => ctx.fail_nfs(format!("cannot open directory '{}'", su.display), &e),
        }
    }
    // Targets of remote symlinks.
    let link_idx: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].kind == Kind::Link && items[i].target.is_none())
        .collect();
    let link_urls = remote_urls(&items, &link_idx, |it| &it.src);
    let targets = ctx
        .per_server(
            &link_urls,
            |fs, paths| async move { fs.vreadlink(&paths).await },
        )
        .await?;
    let mut unreadable = BTreeSet::new();
    for (&i, t) in link_idx.iter().zip(targets) {
        match t {
            Ok(t) => items[i].target = Some(t),
            Err(e) => {
                ctx.fail_nfs(
                    format!("cannot read symbolic link '{}'", items[i].src.display()),
                    &e,
                );
                unreadable.insert(i);
            }
        }
    }
    let items: Vec<Item> = items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !unreadable.contains(i))
        .map(|(_, it)| it)
        .collect();

    if a.atomic {
        return super::cp_atomic::run(ctx, &items).await;
    }
    let files = items.iter().filter(|i| i.kind == Kind::File).count() as u64;
    let mut cp = Copier {
        failed_dirs: Vec::new(),
        progress: Progress::new(items.iter().map(|i| i.size).sum(), files)
            .counting(ctx.tally(files, "files")),
        done: Vec::new(),
    };
    cp.dirs(ctx, &items).await?;
    cp.links(ctx, &items).await?;
    cp.files(ctx, &items).await?;
    cp.progress.finish();
    cp.modes(ctx, &items).await?;
    if a.xattrs || a.archive {
        super::cp_xattrs::copy(ctx, &items, &cp.done).await?;
    }
    Ok(())
}

static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

fn umask_cache(m: u32) {
    let _ = UMASK.set(m);
}

/// The mode a copy gets (coreutils without -p: the source's mode minus the umask).
pub(super) fn wanted_mode(it: &Item) -> u32 {
    it.mode & !UMASK.get().copied().unwrap_or(0o022) & 0o7777
}

struct Copier {
    /// Destinations of directories that could not be created (their contents are skipped).
    failed_dirs: Vec<String>,
    progress: Progress,
    /// Items (by index) copied successfully, for setting modes.
    done: Vec<usize>,
}

fn under(p: &str, dirs: &[String]) -> bool {
    dirs.iter().any(|d| p.starts_with(&format!("{d}/")))
}

impl Copier {
    fn skip(&self, it: &Item) -> bool {
        under(&it.dst.display(), &self.failed_dirs)
    }

    fn fail_nfs(&mut self, ctx: &mut Ctx, what: String, e: &ClientError) {
        self.progress.interrupt();
        ctx.fail_nfs(what, e);
    }

    fn fail_io(&mut self, ctx: &mut Ctx, what: String, e: &std::io::Error) {
        self.progress.interrupt();
        ctx.fail_io(what, e);
    }
}
