//! The steps of a [`super::Transaction`] and how they compose into one COMPOUND:
//! each step reaches its directory from where the previous one left the current
//! filehandle (LOOKUPP/LOOKUP when shorter than PUTROOTFH and a LOOKUP per component),
//! so long transactions (a tree copy) stay within ca_maxoperations.

use crate::attrs::SetAttributes;
use crate::compound::{Compound, CreateHow, CURRENT_STATEID};
use bytes::Bytes;
use txnfs_proto::nfs4::*;

/// Bytes per WRITE (the servers' usual maxwrite; the request size is checked anyway).
const WRITE_CHUNK: usize = 1 << 20;
/// Open-owner of the OPENs transactions send (each OPEN is closed in the same COMPOUND).
const OPEN_OWNER: &[u8] = b"txnfs-txn";

/// One step of a [`super::Transaction`]; paths are components relative to the export root.
#[derive(Debug, Clone)]
pub(super) enum Step {
    Mkdir {
        path: Vec<String>,
        mode: u32,
    },
    Write {
        path: Vec<String>,
        data: Bytes,
        mode: u32,
        guarded: bool,
    },
    /// More of a file a `Write` step created (files larger than one piece are written
    /// by several steps, so that a transaction can split them between COMPOUNDs).
    WriteMore {
        path: Vec<String>,
        offset: u64,
        data: Bytes,
    },
    Remove {
        path: Vec<String>,
    },
    Rename {
        from: Vec<String>,
        to: Vec<String>,
    },
    Symlink {
        path: Vec<String>,
        target: String,
    },
    Link {
        existing: Vec<String>,
        new: Vec<String>,
    },
    SetAttr {
        path: Vec<String>,
        set: SetAttributes,
    },
}

fn show(p: &[String]) -> String {
    format!("{:?}", p.join("/"))
}

impl Step {
    /// The step as error messages name it: `rename "a" to "b"`.
    pub(super) fn describe(&self) -> String {
        match self {
            Step::Mkdir { path, .. } => format!("mkdir {}", show(path)),
            Step::Write { path, data, .. } => {
                format!("write {} ({} bytes)", show(path), data.len())
            }
            Step::WriteMore { path, offset, data } => format!(
                "write {} (bytes {offset}..{})",
                show(path),
                offset + data.len() as u64
            ),
            Step::Remove { path } => format!("remove {}", show(path)),
            Step::Rename { from, to } => format!("rename {} to {}", show(from), show(to)),
            Step::Symlink { path, target } => format!("symlink {} -> {target:?}", show(path)),
            Step::Link { existing, new } => format!("link {} to {}", show(new), show(existing)),
            Step::SetAttr { path, .. } => format!("setattr {}", show(path)),
        }
    }

    /// Paths whose cached state (delegations, listings) the step makes stale.
    pub(super) fn touched(&self) -> Vec<String> {
        match self {
            Step::Mkdir { path, .. }
            | Step::Write { path, .. }
            | Step::WriteMore { path, .. }
            | Step::Remove { path }
            | Step::Symlink { path, .. }
            | Step::SetAttr { path, .. } => vec![path.join("/")],
            Step::Rename { from, to } => vec![from.join("/"), to.join("/")],
            Step::Link { existing, new } => vec![existing.join("/"), new.join("/")],
        }
    }
}

/// Where the current filehandle is while composing: a directory path, or unknown.
pub(super) type Position = Option<Vec<String>>;

/// The directory a step starts from (the parent of its first path).
pub(super) fn first_dir(s: &Step) -> Vec<String> {
    let p = match s {
        Step::Mkdir { path, .. }
        | Step::Write { path, .. }
        | Step::WriteMore { path, .. }
        | Step::Remove { path }
        | Step::Symlink { path, .. } => path,
        Step::Rename { from, .. } => from,
        // LINK starts at the existing object itself, a SETATTR at its target.
        Step::Link { existing, .. } => return existing.clone(),
        Step::SetAttr { path, .. } => return path.clone(),
    };
    parent(p).to_vec()
}

fn parent(p: &[String]) -> &[String] {
    &p[..p.len().saturating_sub(1)]
}

fn leaf(p: &[String]) -> &[u8] {
    p.last().map_or(&b""[..], |s| s.as_bytes())
}

/// Make `to` the current filehandle, starting at `pos`: LOOKUPP up to the common
/// ancestor and LOOKUP down when that is shorter than PUTROOTFH and a LOOKUP per
/// component. `pos` is always a directory (LOOKUPP of a file is NFS4ERR_NOTDIR). Steps
/// compose into long COMPOUNDs (a tree copy): this keeps them within ca_maxoperations.
fn walk(c: &mut Compound, pos: &Position, to: &[String]) {
    if let Some(cur) = pos {
        let common = cur.iter().zip(to).take_while(|(a, b)| a == b).count();
        let ups = cur.len() - common;
        let downs = to.len() - common;
        if ups + downs < 1 + to.len() {
            for _ in 0..ups {
                c.lookupp();
            }
            for n in &to[common..] {
                c.lookup(n.as_bytes());
            }
            return;
        }
    }
    c.putrootfh();
    for n in to {
        c.lookup(n.as_bytes());
    }
}

/// Append the ops of `s` starting at `pos`; returns where the current filehandle is
/// afterwards. `next_dir` (where the next step starts) decides whether to keep the
/// directory of a step that leaves the current filehandle on a non-directory.
pub(super) fn emit(
    c: &mut Compound,
    s: &Step,
    pos: Position,
    next_dir: Option<Vec<String>>,
) -> Position {
    let attrs = |mode: u32| SetAttributes {
        mode: Some(mode),
        ..Default::default()
    };
    // Steps that end on a file come back to their directory (SAVEFH before, RESTOREFH
    // after) when the next step starts at or below it: 2 ops instead of 1 + depth.
    let keep = |dir: &[String]| {
        !dir.is_empty()
            && next_dir
                .as_ref()
                .is_some_and(|n| n.len() >= dir.len() && n[..dir.len()] == *dir)
    };
    match s {
        Step::Mkdir { path, mode } => {
            walk(c, &pos, parent(path));
            c.mkdir(leaf(path), &attrs(*mode));
            // CREATE leaves the new directory current.
            Some(path.clone())
        }
        Step::Write {
            path,
            data,
            mode,
            guarded,
        } => {
            let dir = parent(path);
            walk(c, &pos, dir);
            let keep = keep(dir);
            if keep {
                c.savefh();
            }
            let (how, set) = if *guarded {
                (CreateHow::Guarded, attrs(*mode))
            } else {
                // UNCHECKED of an existing file: truncate it, as a copy over it would.
                let mut set = attrs(*mode);
                set.size = Some(0);
                (CreateHow::Unchecked, set)
            };
            c.open(
                leaf(path),
                OPEN4_SHARE_ACCESS_WRITE,
                OPEN_OWNER,
                Some((how, &set)),
            );
            let mut off = 0usize;
            while off < data.len() {
                let end = (off + WRITE_CHUNK).min(data.len());
                c.write(CURRENT_STATEID, off as u64, data.slice(off..end), true);
                off = end;
            }
            c.close(CURRENT_STATEID);
            if keep {
                c.restorefh();
                Some(dir.to_vec())
            } else {
                None
            }
        }
        Step::WriteMore { path, offset, data } => {
            let dir = parent(path);
            walk(c, &pos, dir);
            let keep = keep(dir);
            if keep {
                c.savefh();
            }
            c.open(leaf(path), OPEN4_SHARE_ACCESS_WRITE, OPEN_OWNER, None);
            let mut off = 0usize;
            while off < data.len() {
                let end = (off + WRITE_CHUNK).min(data.len());
                c.write(
                    CURRENT_STATEID,
                    offset + off as u64,
                    data.slice(off..end),
                    true,
                );
                off = end;
            }
            c.close(CURRENT_STATEID);
            if keep {
                c.restorefh();
                Some(dir.to_vec())
            } else {
                None
            }
        }
        Step::Remove { path } => {
            walk(c, &pos, parent(path));
            c.remove(leaf(path));
            Some(parent(path).to_vec())
        }
        Step::Rename { from, to } => {
            walk(c, &pos, parent(from));
            c.savefh();
            walk(c, &Some(parent(from).to_vec()), parent(to));
            c.rename(leaf(from), leaf(to));
            Some(parent(to).to_vec())
        }
        Step::Symlink { path, target } => {
            let dir = parent(path);
            walk(c, &pos, dir);
            let keep = keep(dir);
            if keep {
                c.savefh();
            }
            c.symlink(leaf(path), target.as_bytes(), &SetAttributes::default());
            if keep {
                c.restorefh();
                Some(dir.to_vec())
            } else {
                None
            }
        }
        Step::Link { existing, new } => {
            walk(c, &pos, existing);
            c.savefh();
            // The current filehandle is the linked object (maybe a file): start over
            // from the root for the new name's directory.
            walk(c, &None, parent(new));
            c.link(leaf(new));
            Some(parent(new).to_vec())
        }
        Step::SetAttr { path, set } => {
            walk(c, &pos, path);
            c.setattr(crate::compound::ANONYMOUS_STATEID, set);
            // The target may be a file: where we are is not a known directory.
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compound::op_name;
    use crate::txn::allowed_in_txn;
    use crate::vector::components;

    fn names(c: &Compound) -> Vec<&'static str> {
        c.ops().iter().map(|o| op_name(o.discriminant())).collect()
    }

    fn compose(steps: Vec<Step>) -> Compound {
        let mut c = Compound::new();
        let mut pos = None;
        for (i, s) in steps.iter().enumerate() {
            let next = steps.get(i + 1).map(first_dir);
            pos = emit(&mut c, s, pos, next);
        }
        c
    }

    fn p(s: &str) -> Vec<String> {
        components(s).unwrap()
    }

    #[test]
    fn steps_share_the_walk_to_their_directory() {
        let c = compose(vec![
            Step::Mkdir {
                path: p("a/d"),
                mode: 0o755,
            },
            Step::Write {
                path: p("a/d/f1"),
                data: Bytes::from_static(b"x"),
                mode: 0o644,
                guarded: true,
            },
            Step::Write {
                path: p("a/d/f2"),
                data: Bytes::new(),
                mode: 0o644,
                guarded: false,
            },
            Step::Rename {
                from: p("a/d"),
                to: p("a/e"),
            },
        ]);
        assert_eq!(
            names(&c),
            vec![
                "PUTROOTFH",
                "LOOKUP",
                "CREATE", // mkdir a/d: now in a/d
                "SAVEFH",
                "OPEN",
                "WRITE",
                "CLOSE",
                "RESTOREFH", // f1, back in a/d
                "OPEN",
                "CLOSE", // f2 (empty: no WRITE), next starts at a: not kept
                "PUTROOTFH",
                "LOOKUP",
                "SAVEFH",
                "RENAME", // a/d -> a/e
            ]
        );
        assert!(c.ops().iter().all(|o| allowed_in_txn(o.discriminant())));
    }

    #[test]
    fn walking_up_uses_lookupp_only_when_shorter() {
        let mut c = Compound::new();
        walk(&mut c, &Some(p("a/b/c")), &p("a/b/x"));
        assert_eq!(names(&c), vec!["LOOKUPP", "LOOKUP"]);
        let mut c = Compound::new();
        walk(&mut c, &Some(p("a/b/c")), &p("z"));
        assert_eq!(names(&c), vec!["PUTROOTFH", "LOOKUP"]);
    }
}
