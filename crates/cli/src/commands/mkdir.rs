//! `txnfs mkdir [-p] [-m MODE] [--atomic] URL...`: one vmkdir for all operands (level
//! by level); with `--atomic`, all of them in one transaction.

use super::url::NfsUrl;
use super::{atomic, parse_urls, umask, usage, Ctx};
use clap::Args;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs mkdir nfs://server/data/new\n  \
    txnfs mkdir -p nfs://server/a/b/c nfs://server/a/d   (one COMPOUND per level)\n  \
    txnfs mkdir -m 700 nfs://server/private\n  \
    txnfs mkdir -p --atomic nfs://server/a/b nfs://server/c/d   (all or none)\n\n\
    With --atomic every directory is made in ONE transaction (txnfs servers only): all\n\
    of them are created, or the command fails and none is.")]
pub struct MkdirArgs {
    /// Create missing parents; existing directories are not an error.
    #[arg(short = 'p', long = "parents")]
    pub parents: bool,
    /// Mode (octal) of the new directories (default 777 minus the umask).
    #[arg(short = 'm', long = "mode", value_name = "MODE")]
    pub mode: Option<String>,
    /// Make all directories in one transaction: all or none (needs a txnfs server; all
    /// URLs on one server).
    #[arg(long)]
    pub atomic: bool,
    /// Directories to create.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
}

pub async fn run(ctx: &mut Ctx, a: MkdirArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let mode = match &a.mode {
        Some(m) => match u32::from_str_radix(m, 8) {
            Ok(v) if v <= 0o7777 => v,
            _ => return usage(format!("invalid mode '{m}'")),
        },
        None => 0o777 & !umask(),
    };
    let refs: Vec<&NfsUrl> = urls.iter().collect();
    let parents = a.parents;
    if a.atomic {
        let fs = atomic::one_server(ctx, "mkdir", &refs).await?;
        let paths: Vec<&str> = urls.iter().map(|u| u.path.as_str()).collect();
        let r = fs.vmkdir_atomic(&paths, mode, parents).await;
        atomic::report(ctx, "mkdir", r);
        return Ok(());
    }
    let res = ctx
        .per_server(&refs, |fs, paths| async move {
            fs.vmkdir(&paths, mode, parents).await
        })
        .await?;
    for (u, r) in urls.iter().zip(res) {
        if let Err(e) = r {
            ctx.fail_nfs(format!("cannot create directory '{}'", u.display), &e);
        }
    }
    Ok(())
}
