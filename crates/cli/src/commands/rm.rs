//! `txnfs rm [-r] [-f] URL...`: one vgetattrs, then one vremove (with -r: the trees
//! listed level by level, files removed together, then directories deepest first).
//! With `--atomic`, everything is removed in one transaction, or nothing is.

use super::url::NfsUrl;
use super::{atomic, parse_urls, Ctx};
use clap::Args;
use txnfs_proto::nfs4::nfsstat4;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs rm nfs://server/data/old.txt\n  \
    txnfs rm -r nfs://server/data/tree\n  \
    txnfs rm -f nfs://server/maybe-missing\n  \
    txnfs rm -r --atomic nfs://server/data/tree   (the whole tree or nothing)\n\n\
    With --atomic the trees are listed first, then everything is removed depth-first in\n\
    ONE transaction (txnfs servers only): if any removal fails (e.g. a file appeared\n\
    meanwhile), nothing is removed.")]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Ignore missing files.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    /// Remove everything in one transaction: all or nothing (needs a txnfs server; all
    /// URLs on one server).
    #[arg(long)]
    pub atomic: bool,
    /// Files (or, with -r, trees) to remove.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
}

pub async fn run(ctx: &mut Ctx, a: RmArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let mut todo: Vec<&NfsUrl> = Vec::new();
    for u in &urls {
        if u.path.is_empty() {
            ctx.fail_msg(format!(
                "refusing to remove '{}': it is the server's root",
                u.display
            ));
        } else {
            todo.push(u);
        }
    }
    if !a.recursive {
        // Directories need -r (REMOVE would take an empty one).
        let attrs = ctx.getattrs(&todo).await?;
        let mut files = Vec::new();
        for (u, r) in todo.into_iter().zip(attrs) {
            match r {
                Ok(at) if at.is_dir() => {
                    ctx.fail(format!("cannot remove '{}'", u.display), "Is a directory")
                }
                Ok(_) => files.push(u),
                Err(e) if a.force && e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {}
                Err(e) => ctx.fail_nfs(format!("cannot remove '{}'", u.display), &e),
            }
        }
        todo = files;
    }
    let recursive = a.recursive;
    if a.atomic {
        return run_atomic(ctx, &todo, a.force, recursive).await;
    }
    let res = ctx
        .per_server(&todo, |fs, paths| async move {
            fs.vremove(&paths, recursive).await
        })
        .await?;
    for (u, r) in todo.iter().zip(res) {
        match r {
            Ok(()) => {}
            Err(e) if a.force && e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {}
            Err(e) => ctx.fail_nfs(format!("cannot remove '{}'", u.display), &e),
        }
    }
    Ok(())
}

/// `rm --atomic`: operands checked first (a missing one is skipped with -f, any other
/// problem stops the command before anything is removed), then one transaction.
async fn run_atomic(
    ctx: &mut Ctx,
    todo: &[&NfsUrl],
    force: bool,
    recursive: bool,
) -> anyhow::Result<()> {
    if atomic::planning_failed(ctx, "rm") || todo.is_empty() {
        return Ok(());
    }
    let fs = atomic::one_server(ctx, "rm", todo).await?;
    let mut paths = Vec::new();
    let attrs = ctx.getattrs(todo).await?;
    for (u, r) in todo.iter().zip(attrs) {
        match r {
            Ok(_) => paths.push(u.path.as_str()),
            Err(e) if force && e.status() == Some(nfsstat4::NFS4ERR_NOENT) => {}
            Err(e) => ctx.fail_nfs(format!("cannot remove '{}'", u.display), &e),
        }
    }
    if atomic::planning_failed(ctx, "rm") || paths.is_empty() {
        return Ok(());
    }
    let r = fs.vremove_atomic(&paths, recursive).await;
    atomic::report(ctx, "rm", r);
    Ok(())
}
