//! `txnfs ln [-s] TARGET... LINK`: one vsymlink or vhardlink for all operands.

use super::url::NfsUrl;
use super::{parse_urls, split_retry_items, usage, Ctx};
use clap::Args;

#[derive(Args, Debug)]
#[command(
    override_usage = "txnfs ln [-s] TARGET... LINK",
    after_help = "EXAMPLES:\n  \
    txnfs ln nfs://server/data/a nfs://server/data/a.hard       hard link\n  \
    txnfs ln -s ../data/a nfs://server/links/a                  symlink with text ../data/a\n  \
    txnfs ln -s a b c nfs://server/dir/                         three symlinks in dir\n\n\
    With -s, TARGET is the link's text, stored as given. Without -s, TARGET is a URL on\n\
    the same server as LINK. If LINK is an existing directory, links are made in it."
)]
pub struct LnArgs {
    /// Make symbolic links instead of hard links.
    #[arg(short = 's', long = "symbolic")]
    pub symbolic: bool,
    /// Targets, then the link (or a directory for the links).
    #[arg(required = true, num_args = 2.., value_name = "ARG")]
    pub args: Vec<String>,
}

fn last_component(s: &str) -> &str {
    s.trim_end_matches('/').rsplit('/').next().unwrap_or(s)
}

pub async fn run(ctx: &mut Ctx, a: LnArgs) -> anyhow::Result<()> {
    let Some((link_s, targets)) = a.args.split_last() else {
        return usage("missing operand");
    };
    let link = parse_urls(std::slice::from_ref(link_s))?.remove(0);
    let hard: Vec<NfsUrl> = if a.symbolic {
        Vec::new()
    } else {
        let t = parse_urls(targets)?;
        for u in &t {
            if u.server() != link.server() {
                return usage(format!(
                    "cannot link '{}' to '{}': not on the same server",
                    link.display, u.display
                ));
            }
        }
        t
    };
    let Some(link_dir) = ctx.existing_dir(&link).await? else {
        return Ok(());
    };
    if targets.len() > 1 && !link_dir {
        ctx.fail_msg(format!("target '{}' is not a directory", link.display));
        return Ok(());
    }
    let names: Vec<NfsUrl> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if !link_dir {
                return link.clone();
            }
            let base = if a.symbolic {
                last_component(t).to_string()
            } else {
                hard[i].basename().to_string()
            };
            link.child(&base)
        })
        .collect();
    let fs = ctx.fs(&link.server()).await?;
    if a.symbolic {
        let v: Vec<(&str, &str)> = names
            .iter()
            .zip(targets)
            .map(|(l, t)| (l.path.as_str(), t.as_str()))
            .collect();
        let res = split_retry_items(&fs, &v, |fs, p| async move { fs.vsymlink(&p).await }).await;
        for (l, r) in names.iter().zip(res) {
            if let Err(e) = r {
                ctx.fail_nfs(
                    format!("failed to create symbolic link '{}'", l.display),
                    &e,
                );
            }
        }
    } else {
        let v: Vec<(&str, &str)> = hard
            .iter()
            .zip(&names)
            .map(|(t, l)| (t.path.as_str(), l.path.as_str()))
            .collect();
        let res = split_retry_items(&fs, &v, |fs, p| async move { fs.vhardlink(&p).await }).await;
        for ((t, l), r) in hard.iter().zip(&names).zip(res) {
            if let Err(e) = r {
                ctx.fail_nfs(
                    format!(
                        "failed to create hard link '{}' => '{}'",
                        l.display, t.display
                    ),
                    &e,
                );
            }
        }
    }
    Ok(())
}
