//! `txnfs mv SRC... DEST`: one vrename for all operands (into DEST if it is a directory);
//! with `--atomic`, all renames in one transaction.

use super::url::NfsUrl;
use super::{atomic, parse_urls, split_retry_items, usage, Ctx};
use clap::Args;

#[derive(Args, Debug)]
#[command(
    override_usage = "txnfs mv SRC... DEST",
    after_help = "EXAMPLES:\n  \
    txnfs mv nfs://server/a.txt nfs://server/b.txt\n  \
    txnfs mv nfs://server/x nfs://server/y nfs://server/dir/   (into dir)\n  \
    txnfs mv --atomic nfs://server/a nfs://server/b nfs://server/dir/   (both or neither)\n\n\
    SRC and DEST must be on the same server (NFS RENAME). With --atomic all renames are\n\
    ONE transaction (txnfs servers only): all of them happen, or none does."
)]
pub struct MvArgs {
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "URL")]
    pub urls: Vec<String>,
    /// Rename everything in one transaction: all or nothing (needs a txnfs server).
    #[arg(long)]
    pub atomic: bool,
}

pub async fn run(ctx: &mut Ctx, a: MvArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let Some((dest, srcs)) = urls.split_last() else {
        return usage("missing destination operand");
    };
    for s in srcs {
        if s.server() != dest.server() {
            return usage(format!(
                "cannot move '{}' to '{}': not on the same server",
                s.display, dest.display
            ));
        }
    }
    let Some(dest_dir) = ctx.existing_dir(dest).await? else {
        return Ok(());
    };
    if srcs.len() > 1 && !dest_dir {
        ctx.fail_msg(format!("target '{}' is not a directory", dest.display));
        return Ok(());
    }
    let mut pairs: Vec<(&NfsUrl, NfsUrl)> = Vec::new();
    for s in srcs {
        if s.path.is_empty() {
            ctx.fail_msg(format!(
                "cannot move '{}': it is the server's root",
                s.display
            ));
            continue;
        }
        let to = if dest_dir {
            dest.child(s.basename())
        } else {
            dest.clone()
        };
        pairs.push((s, to));
    }
    let fs = ctx.fs(&dest.server()).await?;
    let v: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(s, d)| (s.path.as_str(), d.path.as_str()))
        .collect();
    if a.atomic {
        if !atomic::planning_failed(ctx, "mv") {
            let r = fs.vrename_atomic(&v).await;
            atomic::report(ctx, "mv", r);
        }
        return Ok(());
    }
    let res = split_retry_items(&fs, &v, |fs, p| async move { fs.vrename(&p).await }).await;
    for ((s, d), r) in pairs.iter().zip(res) {
        if let Err(e) = r {
            ctx.fail_nfs(
                format!("cannot move '{}' to '{}'", s.display, d.display),
                &e,
            );
        }
    }
    Ok(())
}
