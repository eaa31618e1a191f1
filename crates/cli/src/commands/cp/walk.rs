//! Listing a local source tree into copy items.

use std::path::Path;

use super::*;

/// Walk a local tree (pre-order, names sorted); failures are reported and skipped.
pub(super) fn walk_local(ctx: &mut Ctx, root: &Path, src: &End, dst: &End, out: &mut Vec<Item>) {
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                ctx.fail_io(format!("cannot open directory '{}'", dir.display()), &e);
                continue;
            }
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut subdirs = Vec::new();
        for n in names {
            let r = if rel.is_empty() {
                n.clone()
            } else {
                format!("{rel}/{n}")
            };
            let p = root.join(&r);
            let m = match std::fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(e) => {
                    ctx.fail_io(format!("cannot stat '{}'", p.display()), &e);
                    continue;
                }
            };
            let Some(kind) = local_kind(&m) else {
                ctx.fail_msg(format!(
                    "'{}': not a regular file, directory or symlink; skipped",
                    p.display()
                ));
                continue;
            };
            let target = if kind == Kind::Link {
                match std::fs::read_link(&p) {
                    Ok(t) => Some(t.to_string_lossy().into_owned()),
                    Err(e) => {
                        ctx.fail_io(format!("cannot read symbolic link '{}'", p.display()), &e);
                        continue;
                    }
                }
            } else {
                None
            };
            if kind == Kind::Dir {
                subdirs.push(r.clone());
            }
            out.push(Item {
                kind,
                src: src.join(&r),
                dst: dst.join(&r),
                size: if kind == Kind::File { m.len() } else { 0 },
                sparse: kind == Kind::File && local_sparse(&m),
                mode: m.mode() & 0o7777,
                target,
            });
        }
        stack.extend(subdirs.into_iter().rev());
    }
}
