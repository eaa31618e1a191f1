//! Directory listing (seed 001 §4.3, Filebench listdir): a tree of 50,000
//! empty files (scaled) with a mean directory width of 5; each iteration lists
//! one random directory with READDIR (TYPE and FILEID attributes, like `ls`),
//! following cookies to the end.

use crate::workload::{BoxFut, Expectation, RunStats, Setup, Worker, Workload};
use crate::workloads::Params;
use crate::XorShift;
use anyhow::Context;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Mutex;
use txnfs_client::attrs::{self, FILEID, TYPE};
use txnfs_client::Compound;

pub struct Listing {
    pub files: u64,
    pub width: u64,
    /// (handle, entries) of every directory, filled by prepare.
    dirs: Mutex<Vec<(Bytes, u64)>>,
}

/// The tree: (relative dir path, subdirectories, files) per directory,
/// parents before children; the root is "".
pub fn tree(files: u64, width: u64) -> Vec<(String, u64, u64)> {
    fn build(out: &mut Vec<(String, u64, u64)>, path: String, n: u64, width: u64) {
        if n <= width {
            out.push((path, 0, n));
            return;
        }
        let subs = width.min(n.div_ceil(width)).max(2);
        out.push((path.clone(), subs, 0));
        for k in 0..subs {
            let share = n / subs + u64::from(k < n % subs);
            let p = if path.is_empty() {
                format!("d{k}")
            } else {
                format!("{path}/d{k}")
            };
            build(out, p, share, width);
        }
    }
    let mut out = Vec::new();
    build(&mut out, String::new(), files, width.max(2));
    out
}

impl Listing {
    pub fn new(p: &Params) -> anyhow::Result<Listing> {
        Ok(Listing {
            files: p.files_or(50_000),
            width: p.get_u64("width", 5)?.max(2),
            dirs: Mutex::new(Vec::new()),
        })
    }
}

impl Workload for Listing {
    fn name(&self) -> &str {
        "listing"
    }
    fn params(&self) -> serde_json::Value {
        serde_json::json!({"files": self.files, "width": self.width})
    }
    fn default_ops(&self) -> u64 {
        self.files.div_ceil(self.width)
    }
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let t = tree(self.files, self.width);
            let dirs: Vec<String> = t
                .iter()
                .filter(|(p, ..)| !p.is_empty())
                .map(|(p, ..)| s.path(p))
                .collect();
            for r in s.fs.vmkdir(&dirs, 0o755, true).await {
                r.context("mkdir")?;
            }
            let mut files = Vec::new();
            for (p, _, n) in &t {
                for f in 0..*n {
                    let rel = if p.is_empty() {
                        format!("f{f}")
                    } else {
                        format!("{p}/f{f}")
                    };
                    files.push((s.path(&rel), Bytes::new()));
                }
            }
            for chunk in files.chunks(2000) {
                for r in s.fs.vwrite(chunk, false).await {
                    r.context("create file")?;
                }
            }
            // Handles of every directory from one recursive listing.
            let listing =
                s.fs.vlistdir(std::slice::from_ref(&s.base), true)
                    .await
                    .pop()
                    .context("no listing")??;
            let mut fh: HashMap<String, Bytes> = HashMap::new();
            for e in listing {
                if e.attrs.is_dir() {
                    let rel = e
                        .path
                        .strip_prefix(&format!("{}/", s.base))
                        .unwrap_or(&e.path)
                        .to_string();
                    if let Some(h) = e.attrs.fh.clone() {
                        fh.insert(rel, h);
                    }
                }
            }
            let mut out = Vec::new();
            for (p, subs, n) in &t {
                let h = if p.is_empty() {
                    s.base_fh.clone()
                } else {
                    fh.get(p)
                        .cloned()
                        .with_context(|| format!("no handle for {p}"))?
                };
                out.push((h, subs + n));
            }
            *self.dirs.lock().expect("not poisoned") = out;
            Ok(())
        })
    }
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let dirs = self.dirs.lock().expect("not poisoned").clone();
            anyhow::ensure!(!dirs.is_empty(), "not prepared");
            let mut rng = XorShift::new(w.global_idx() as u64 + 11);
            let bitmap = attrs::bitmap(&[TYPE, FILEID]);
            w.ready().await;
            while w.next_iter().is_some() {
                let (fh, expect) = &dirs[(rng.next_u64() % dirs.len() as u64) as usize];
                let (mut cookie, mut verf, mut seen) = (0u64, [0u8; 8], 0u64);
                loop {
                    let mut c = Compound::new();
                    c.putfh(fh);
                    let i = c.readdir(cookie, verf, 32 << 10, bitmap.clone());
                    let r = w.call(&c).await?;
                    let d = r.readdir(i)?;
                    seen += d.reply.entries.len() as u64;
                    if let Some(e) = d.reply.entries.last() {
                        cookie = e.cookie;
                    }
                    verf = d.cookieverf;
                    if d.reply.eof || d.reply.entries.is_empty() {
                        break;
                    }
                }
                w.count("entries_listed", seen);
                w.count("entries_expected", *expect);
                w.done();
            }
            Ok(())
        })
    }
    fn expected_ops(&self, s: &RunStats) -> Vec<Expectation> {
        let it = s.iterations();
        vec![
            Expectation::eq(
                "READDIR == iterations (≤ width entries fit one reply)",
                s.ops("READDIR"),
                it,
            ),
            Expectation::eq(
                "entries listed == entries created",
                s.counter("entries_listed"),
                s.counter("entries_expected"),
            ),
            Expectation::eq("LOOKUP == 0", s.ops("LOOKUP"), 0),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shape() {
        let t = tree(50_000, 5);
        let files: u64 = t.iter().map(|d| d.2).sum();
        assert_eq!(files, 50_000);
        assert!(t.iter().all(|d| d.1 + d.2 <= 5));
        let mean = t.iter().map(|d| (d.1 + d.2) as f64).sum::<f64>() / t.len() as f64;
        assert!((3.5..=5.0).contains(&mean), "mean width {mean}");
        assert_eq!(tree(3, 5), vec![(String::new(), 0, 3)]);
    }
}
