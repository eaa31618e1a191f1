//! `txnfs ls [-l] [-R] [-a] URL...`: one vgetattrs for the operands, one vlistdir
//! (recursive with -R: one READDIR round per tree level) and, with -l, one vreadlink for
//! all symlinks.

use super::format::{long_row, render_columns, render_long, term_width, LongRow};
use super::url::NfsUrl;
use super::{parse_urls, Ctx};
use clap::Args;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use txnfs_client::{Attributes, DirEntry, FileKind};

#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    txnfs ls nfs://server/data\n  \
    txnfs ls -l nfs://server:2050/data/file.txt\n  \
    txnfs ls -lR --stats nfs://127.0.0.1/   (a whole tree, one COMPOUND per level)\n\n\
    Names are sorted bytewise, one per line unless stdout is a terminal.\n\
    Times are shown in UTC.")]
pub struct LsArgs {
    /// Long listing: mode, links, owner, group, size, mtime, name (-> target).
    #[arg(short = 'l')]
    pub long: bool,
    /// List subdirectories recursively.
    #[arg(short = 'R', long = "recursive")]
    pub recursive: bool,
    /// Do not hide entries starting with '.'.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Force one name per line.
    #[arg(short = '1')]
    pub one: bool,
    /// Directories or files to list.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
}

struct Printer {
    long: bool,
    columns: Option<usize>,
    out: String,
}

impl Printer {
    /// Print names (with their attributes and link targets), sorted already.
    fn entries(&mut self, items: &[(String, &Attributes, Option<&String>)], total: bool) {
        if self.long {
            if total {
                let blocks: u64 = items
                    .iter()
                    .map(|(_, a, _)| a.space_used.unwrap_or(0).div_ceil(1024))
                    .sum();
                self.out.push_str(&format!("total {blocks}\n"));
            }
            let rows: Vec<LongRow> = items
                .iter()
                .map(|(n, a, t)| {
                    let name = match t {
                        Some(t) => format!("{n} -> {t}"),
                        None => n.clone(),
                    };
                    long_row(a, name)
                })
                .collect();
            render_long(&rows, &mut self.out);
        } else {
            let names: Vec<String> = items.iter().map(|(n, _, _)| n.clone()).collect();
            match self.columns {
                Some(w) => render_columns(&names, w, &mut self.out),
                None => {
                    for n in names {
                        self.out.push_str(&n);
                        self.out.push('\n');
                    }
                }
            }
        }
    }

    fn flush(&mut self) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(self.out.as_bytes());
        let _ = o.flush();
        self.out.clear();
    }
}

fn hidden(name: &str) -> bool {
    name.starts_with('.')
}

pub async fn run(ctx: &mut Ctx, a: LsArgs) -> anyhow::Result<()> {
    let urls = parse_urls(&a.urls)?;
    let refs: Vec<&NfsUrl> = urls.iter().collect();
    let attrs = ctx.getattrs(&refs).await?;
    let mut files: Vec<(&NfsUrl, Attributes)> = Vec::new();
    let mut dirs: Vec<&NfsUrl> = Vec::new();
    for (u, r) in urls.iter().zip(attrs) {
        match r {
            Ok(at) if at.is_dir() => dirs.push(u),
            Ok(at) => files.push((u, at)),
            Err(e) => ctx.fail_nfs(format!("cannot access '{}'", u.display), &e),
        }
    }
    files.sort_by(|x, y| x.0.display.cmp(&y.0.display));
    dirs.sort_by(|x, y| x.display.cmp(&y.display));
    let listings = ctx
        .per_server(&dirs, |fs, paths| {
            let rec = a.recursive;
            async move { fs.vlistdir(&paths, rec).await }
        })
        .await?;
    // Symlink targets for -l, all in one call per server.
    let mut links: Vec<NfsUrl> = Vec::new();
    if a.long {
        for (u, at) in &files {
            if at.kind == Some(FileKind::Symlink) {
                links.push((*u).clone());
            }
        }
        for (d, l) in dirs.iter().zip(&listings) {
            if let Ok(l) = l {
                for e in l {
                    if e.attrs.kind == Some(FileKind::Symlink) {
                        links.push(NfsUrl {
                            path: e.path.clone(),
                            ..(*d).clone()
                        });
                    }
                }
            }
        }
    }
    let link_refs: Vec<&NfsUrl> = links.iter().collect();
    let targets = ctx
        .per_server(
            &link_refs,
            |fs, paths| async move { fs.vreadlink(&paths).await },
        )
        .await?;
    let target_of: BTreeMap<(String, u16, String), String> = links
        .iter()
        .zip(targets)
        .filter_map(|(u, t)| {
            t.ok()
                .map(|t| ((u.host.clone(), u.port, u.path.clone()), t))
        })
        .collect();
    let tgt = |u: &NfsUrl, path: &str| target_of.get(&(u.host.clone(), u.port, path.to_string()));

    let mut p = Printer {
        long: a.long,
        columns: if !a.one && !a.long && std::io::stdout().is_terminal() {
            Some(term_width())
        } else {
            None
        },
        out: String::new(),
    };
    let items: Vec<(String, &Attributes, Option<&String>)> = files
        .iter()
        .map(|(u, at)| (u.display.clone(), at, tgt(u, &u.path)))
        .collect();
    p.entries(&items, false);
    let headers = a.recursive || urls.len() > 1;
    let mut first = files.is_empty();
    for (d, l) in dirs.iter().zip(listings) {
        let list = match l {
            Ok(l) => l,
            Err(e) => {
                p.flush();
                ctx.fail_nfs(format!("cannot open directory '{}'", d.display), &e);
                continue;
            }
        };
        // Children per directory path.
        let mut by_dir: BTreeMap<&str, Vec<&DirEntry>> = BTreeMap::new();
        for e in &list {
            let parent = e.path.rsplit_once('/').map_or("", |(p, _)| p);
            by_dir.entry(parent).or_default().push(e);
        }
        // Depth-first, subdirectories after their parent's listing, in name order.
        let mut stack: Vec<String> = vec![d.path.clone()];
        while let Some(dir) = stack.pop() {
            let mut kids: Vec<&DirEntry> = by_dir
                .get(dir.as_str())
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|e| a.all || !hidden(&e.name))
                        .collect()
                })
                .unwrap_or_default();
            kids.sort_by(|x, y| x.name.as_bytes().cmp(y.name.as_bytes()));
            if headers {
                if !first {
                    p.out.push('\n');
                }
                let rel = if d.path.is_empty() {
                    dir.as_str()
                } else {
                    dir.strip_prefix(&d.path)
                        .map(|r| r.trim_start_matches('/'))
                        .unwrap_or(&dir)
                };
                p.out.push_str(&format!("{}:\n", d.join(rel).display));
            }
            first = false;
            let items: Vec<(String, &Attributes, Option<&String>)> = kids
                .iter()
                .map(|e| (e.name.clone(), &e.attrs, tgt(d, &e.path)))
                .collect();
            p.entries(&items, true);
            if a.recursive {
                for k in kids.iter().rev() {
                    if k.attrs.is_dir() {
                        stack.push(k.path.clone());
                    }
                }
            }
            if p.out.len() > 1 << 16 {
                p.flush();
            }
        }
    }
    p.flush();
    Ok(())
}
