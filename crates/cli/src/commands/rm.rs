//! `txnfs rm [-r] [-f] URL...`: one vgetattrs, then one vremove (with -r: the trees
//! listed level by level, files removed together, then directories deepest first).

use super::url::NfsUrl;
use super::{parse_urls, Ctx};
use clap::Args;
use txnfs_proto::nfs4::nfsstat4;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs rm nfs://server/data/old.txt\n  \
    txnfs rm -r nfs://server/data/tree\n  \
    txnfs rm -f nfs://server/maybe-missing")]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Ignore missing files.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
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
