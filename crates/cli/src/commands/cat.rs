//! `txnfs cat URL...`: small files in batches (one vread = OPEN + READ + CLOSE per file,
//! many files per COMPOUND), large files streamed chunk by chunk, to stdout in order.

use super::stream::RemoteReader;
use super::url::NfsUrl;
use super::{follow, parse_urls, Ctx};
use clap::Args;
use std::io::Write;

/// Files up to this size go through vread batches; larger ones are streamed.
const SMALL: u64 = 1 << 20;
/// Bytes per vread batch.
const BATCH: u64 = 16 << 20;

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs cat nfs://server/etc/motd\n  \
    txnfs cat nfs://server/logs/a nfs://server/logs/b > both.txt\n\n\
    Symbolic links are read through, as cat(1) does (a link's absolute target starts\n\
    at the server's NFS root); more than 40 links on one path is an error.")]
pub struct CatArgs {
    /// Files to print, in order.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
}

enum Emit {
    Ok,
    /// stdout is gone (e.g. `| head`): stop quietly.
    Closed,
}

fn emit(data: &[u8]) -> Result<Emit, std::io::Error> {
    let mut o = std::io::stdout().lock();
    match o.write_all(data) {
        Ok(()) => Ok(Emit::Ok),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Emit::Closed),
        Err(e) => Err(e),
    }
}

pub async fn run(ctx: &mut Ctx, a: CatArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let refs: Vec<&NfsUrl> = urls.iter().collect();
    // Symbolic links are read through, as cat(1) does.
    let resolved = follow::resolve(ctx, &refs, true).await?;
    // (url to read, size) of the readable operands, in order.
    let mut plan: Vec<(NfsUrl, u64)> = Vec::new();
    for (u, r) in urls.iter().zip(resolved) {
        match r {
            Ok(r) if r.attrs.is_dir() => {
                ctx.fail(format!("cannot read '{}'", u.display), "Is a directory")
            }
            Ok(r) => plan.push((r.url, r.attrs.size.unwrap_or(0))),
            Err(e) => ctx.fail_unresolved(format!("cannot open '{}' for reading", u.display), e),
        }
    }
    let mut i = 0;
    while i < plan.len() {
        let (u, size) = (&plan[i].0, plan[i].1);
        let fs = ctx.fs(&u.server()).await?;
        if size > SMALL {
            let mut r = match RemoteReader::open(fs.client(), &u.path).await {
                Ok(r) => r,
                Err(e) => {
                    ctx.fail_nfs(format!("cannot open '{}' for reading", u.display), &e);
                    i += 1;
                    continue;
                }
            };
            loop {
                match r.next().await {
                    Ok(Some(d)) => match emit(&d) {
                        Ok(Emit::Ok) => {}
                        Ok(Emit::Closed) => {
                            let _ = r.close().await;
                            return Ok(());
                        }
                        Err(e) => {
                            let _ = r.close().await;
                            anyhow::bail!("write error: {}", super::describe_io(&e));
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        ctx.fail_nfs(format!("error reading '{}'", u.display), &e);
                        break;
                    }
                }
            }
            let _ = r.close().await;
            i += 1;
            continue;
        }
        // A run of small files on the same server.
        let mut j = i;
        let mut bytes = 0;
        while j < plan.len()
            && plan[j].1 <= SMALL
            && plan[j].0.server() == u.server()
            && (j == i || bytes + plan[j].1 <= BATCH)
        {
            bytes += plan[j].1;
            j += 1;
        }
        let paths: Vec<&str> = plan[i..j].iter().map(|(u, _)| u.path.as_str()).collect();
        let datas =
            super::split_retry_items(&fs, &paths, |fs, p| async move { fs.vread(&p).await }).await;
        for ((u, _), d) in plan[i..j].iter().zip(datas) {
            match d {
                Ok(d) => match emit(&d) {
                    Ok(Emit::Ok) => {}
                    Ok(Emit::Closed) => return Ok(()),
                    Err(e) => anyhow::bail!("write error: {}", super::describe_io(&e)),
                },
                Err(e) => ctx.fail_nfs(format!("cannot open '{}' for reading", u.display), &e),
            }
        }
        i = j;
    }
    let _ = std::io::stdout().lock().flush();
    Ok(())
}
