//! `txnfs stat URL...`: all operands in one vgetattrs (plus one vreadlink for symlinks).

use super::format::{full_time, mode_string, principal, type_name};
use super::url::NfsUrl;
use super::{parse_urls, Ctx};
use clap::Args;
use std::io::Write;
use txnfs_client::FileKind;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs stat nfs://server/data/file.txt\n  \
    txnfs stat nfs://server/a nfs://server/b   (one COMPOUND for both)\n\n\
    Shows size, type, mode, links, owner and group, fileid, and times (UTC).")]
pub struct StatArgs {
    /// Files to describe.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
}

pub async fn run(ctx: &mut Ctx, a: StatArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let refs: Vec<&NfsUrl> = urls.iter().collect();
    let attrs = ctx.getattrs(&refs).await?;
    let links: Vec<&NfsUrl> = urls
        .iter()
        .zip(&attrs)
        .filter(|(_, r)| matches!(r, Ok(at) if at.kind == Some(FileKind::Symlink)))
        .map(|(u, _)| u)
        .collect();
    let mut targets = ctx
        .per_server(
            &links,
            |fs, paths| async move { fs.vreadlink(&paths).await },
        )
        .await?
        .into_iter();
    let mut out = String::new();
    for (u, r) in urls.iter().zip(attrs) {
        let at = match r {
            Ok(at) => at,
            Err(e) => {
                ctx.fail_nfs(format!("cannot stat '{}'", u.display), &e);
                continue;
            }
        };
        let name = if at.kind == Some(FileKind::Symlink) {
            match targets.next() {
                Some(Ok(t)) => format!("{} -> {t}", u.display),
                _ => u.display.clone(),
            }
        } else {
            u.display.clone()
        };
        let size = at.size.unwrap_or(0);
        let mode = at.mode.unwrap_or(0);
        let blocks = at.space_used.unwrap_or(0).div_ceil(512);
        out.push_str(&format!("  File: {name}\n"));
        out.push_str(&format!(
            "  Size: {size:<15} Blocks: {blocks:<10} {}\n",
            type_name(at.kind, size)
        ));
        let fsid = at.fsid.map_or("?".into(), |(ma, mi)| format!("{ma},{mi}"));
        out.push_str(&format!(
            "Device: {fsid:<14} Fileid: {:<11} Links: {}\n",
            at.fileid.map_or("?".into(), |f| f.to_string()),
            at.nlink.map_or("?".into(), |n| n.to_string())
        ));
        out.push_str(&format!(
            "Access: ({:04o}/{})  Uid: ({:>5})   Gid: ({:>5})\n",
            mode & 0o7777,
            mode_string(at.kind, mode),
            principal(&at.owner),
            principal(&at.group)
        ));
        out.push_str(&format!("Access: {}\n", full_time(at.atime)));
        out.push_str(&format!("Modify: {}\n", full_time(at.mtime)));
        out.push_str(&format!("Change: {}\n", full_time(at.ctime)));
    }
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(out.as_bytes());
    let _ = o.flush();
    Ok(())
}
