//! The workloads, one file per family, and the registry by name.

pub mod cachedread;
pub mod common;
pub mod create;
pub mod deleg;
pub mod filebench;
pub mod filecopy;
pub mod getattr;
pub mod listing;
pub mod locked;
pub mod randio;
pub mod seqio;
pub mod smallfiles;
pub mod tcnfs;
pub mod tree;
pub mod tree_nfsrs;

use crate::workload::Workload;
use anyhow::bail;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Workload parameters from the command line. Each workload takes what it
/// uses and fills in its defaults (the seeds' sizes, times `scale`).
#[derive(Clone, Debug)]
pub struct Params {
    /// Multiplies the default counts (files, iterations, tree size).
    pub scale: f64,
    pub files: Option<u64>,
    /// File size in bytes.
    pub file_size: Option<u64>,
    /// I/O size in bytes.
    pub io_size: Option<u64>,
    /// FILE_SYNC writes (like O_SYNC) instead of UNSTABLE + COMMIT.
    pub sync: bool,
    /// Further workload-specific settings (`--set key=value`).
    pub set: BTreeMap<String, String>,
    /// Run the workload's changes as transactional COMPOUNDs (ADR 0021; txnfs
    /// servers with transactions only). Workloads without a transactional
    /// mode refuse it.
    pub txn: bool,
    /// Files per transaction, or per COMPOUND in plain mode (writefiles,
    /// readfiles); `None`: the workload's one-file-per-request default.
    pub files_per_txn: Option<u64>,
    /// Sharing degree in [0, 1]: the fraction of each iteration's files that
    /// every client writes in common (the rest are the client's own).
    pub sharing: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            scale: 1.0,
            files: None,
            file_size: None,
            io_size: None,
            sync: false,
            set: BTreeMap::new(),
            txn: false,
            files_per_txn: None,
            sharing: 0.0,
        }
    }
}

impl Params {
    /// `default` times the scale, at least 1.
    pub fn scaled(&self, default: u64) -> u64 {
        ((default as f64 * self.scale).round() as u64).max(1)
    }

    pub fn files_or(&self, default: u64) -> u64 {
        self.files.unwrap_or_else(|| self.scaled(default))
    }

    /// A `--set` value parsed as a size ("4k", "1M", "512").
    pub fn get_size(&self, key: &str) -> anyhow::Result<Option<u64>> {
        self.set.get(key).map(|v| parse_size(v)).transpose()
    }

    pub fn get_u64(&self, key: &str, default: u64) -> anyhow::Result<u64> {
        Ok(self.get_size(key)?.unwrap_or(default))
    }
}

/// "4096", "4k", "16K", "1m", "1MiB", "2g" -> bytes (binary units).
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("bad size {s:?} (e.g. 4096, 4k, 1M)"))?;
    if n < 0.0 {
        bail!("bad size {s:?}");
    }
    Ok((n * mult as f64).round() as u64)
}

/// Workload names accepted by [`by_name`].
pub const NAMES: &[&str] = &[
    "randread",
    "randwrite",
    "seqread",
    "seqwrite",
    "smallfiles",
    "create",
    "listing",
    "locked",
    "deleg",
    "cachedread",
    "fileserver",
    "webserver",
    "mailserver",
    "writefiles",
    "readfiles",
    "tree-ls",
    "tree-cp",
    "tree-rm",
    "getattr",
    "filecopy",
];

/// The workload called `name` with these parameters.
pub fn by_name(name: &str, p: &Params) -> anyhow::Result<Arc<dyn Workload>> {
    let w: Arc<dyn Workload> = match name {
        "randread" => Arc::new(randio::BlockIo::random(false, p)?),
        "randwrite" => Arc::new(randio::BlockIo::random(true, p)?),
        "seqread" => Arc::new(seqio::sequential(false, p)?),
        "seqwrite" => Arc::new(seqio::sequential(true, p)?),
        "smallfiles" => Arc::new(smallfiles::SmallFiles::new(p)),
        "create" => Arc::new(create::Create::new(p)),
        "listing" => Arc::new(listing::Listing::new(p)?),
        "locked" => Arc::new(locked::Locked::new(p)?),
        "deleg" => Arc::new(deleg::Deleg::new(p)),
        "cachedread" => Arc::new(cachedread::CachedRead::new(p)),
        "fileserver" => Arc::new(filebench::Filebench::new(
            filebench::Personality::FileServer,
            p,
        )?),
        "webserver" => Arc::new(filebench::Filebench::new(
            filebench::Personality::WebServer,
            p,
        )?),
        "mailserver" => Arc::new(filebench::Filebench::new(
            filebench::Personality::MailServer,
            p,
        )?),
        "writefiles" => Arc::new(tcnfs::TcNfs::new(true, p)),
        "readfiles" => Arc::new(tcnfs::TcNfs::new(false, p)),
        "tree-ls" => Arc::new(tree::Tree::new(tree::TreeOp::Ls, p)?),
        "tree-cp" => Arc::new(tree::Tree::new(tree::TreeOp::Cp, p)?),
        "tree-rm" => Arc::new(tree::Tree::new(tree::TreeOp::Rm, p)?),
        "getattr" => Arc::new(getattr::Getattr::new(p)),
        "filecopy" => Arc::new(filecopy::FileCopy::new(p)),
        other => bail!("unknown workload {other:?}; known: {}", NAMES.join(", ")),
    };
    if p.txn && !w.supports_txn() {
        bail!(
            "workload {name} has no transactional mode (--txn): it runs with {}",
            TXN_NAMES.join(", ")
        );
    }
    if !(0.0..=1.0).contains(&p.sharing) {
        bail!("--sharing takes a percentage from 0 to 100");
    }
    if p.files_per_txn == Some(0) {
        bail!("--files-per-txn must be at least 1");
    }
    Ok(w)
}

/// Workloads with a transactional mode (`--txn`).
pub const TXN_NAMES: &[&str] = &["writefiles", "readfiles", "tree-cp", "tree-rm"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("16KiB").unwrap(), 16384);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("0.5k").unwrap(), 512);
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn every_name_builds() {
        for n in NAMES {
            let w = by_name(n, &Params::default()).unwrap();
            assert_eq!(w.name(), *n);
            assert!(w.default_ops() > 0);
        }
        assert!(by_name("nope", &Params::default()).is_err());
    }

    #[test]
    fn txn_names_are_the_workloads_with_a_transactional_mode() {
        let txn = Params {
            txn: true,
            ..Params::default()
        };
        for n in NAMES {
            assert_eq!(by_name(n, &txn).is_ok(), TXN_NAMES.contains(n), "{n}");
        }
        let bad = Params {
            sharing: 1.5,
            ..Params::default()
        };
        assert!(by_name("writefiles", &bad).is_err());
    }
}

#[cfg(test)]
mod doc_tests {
    /// docs/architecture.md counts the workloads: the count is this list's length.
    #[test]
    fn the_architecture_document_counts_every_workload() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md"),
        )
        .expect("docs/architecture.md");
        let want = format!("{} workloads", super::NAMES.len());
        assert!(
            doc.contains(&want),
            "docs/architecture.md does not say {want:?}"
        );
    }
}
