//! `treeops`: wall time and RPC count of `cp -R`, `ls -lR` and `rm -r` of a
//! generated tree of small files, through a [`DelayProxy`] adding latency,
//! with two NFSv4.1 clients:
//!
//! * `txnfs`: the vectorized txnfs client (`Fs::vmkdir` of every directory
//!   with parents, `Fs::vwrite` of every file, `Fs::vlistdir` recursive,
//!   `Fs::vremove` recursive);
//! * `nfsrs`: the `nfs-rs` crate one call at a time, the way a simple
//!   program would: MKDIR each directory; create + write + close each file
//!   (`create`, `nfs_rs::write_all`, `close`); READDIR pages of every
//!   directory plus a GETATTR of every entry (what `ls -l` stats); REMOVE of
//!   every file and then of every directory, deepest first.
//!
//! Each `--run CLIENT:DELAY_MS[:FILES]` gets its own proxy (the RPC count
//! of a phase is the number of ONC RPC records the proxy saw going from the
//! client to the server during it), its own client session, and its own
//! directory on the server. The local source tree is generated on disk once
//! per file count (seeded: the same tree for every run of that size). After
//! `cp` the export directory on the host is checked (file and directory
//! counts, total bytes, and the bytes of a sample of files); after `ls` the
//! listing is checked; after `rm` the directory must be gone.
//!
//! Runs with fewer files than `--reference-files` (default `--files`) also
//! report their wall time and RPCs scaled linearly to the reference size,
//! labelled as extrapolated.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use nfs_rs::Mount;
use serde::Serialize;
use txnfs_bench::{pattern, DelayProxy, ProxyStats, XorShift};
use txnfs_client::{Client, ClientConfig, Fs};

/// NFSv4 file type of a directory (`nfs_ftype4::NF4DIR`), as nfs-rs reports it.
const NF4DIR: u32 = 2;

#[derive(Parser, Debug)]
#[command(
    about = "cp -R / ls -lR / rm -r of a generated tree through a delay proxy, \
                   with the txnfs vectorized client and with nfs-rs one call at a time"
)]
struct Args {
    /// The NFSv4.1 server (proxied to).
    #[arg(long)]
    server: SocketAddr,
    /// Host directory behind the export, for checking what cp wrote.
    #[arg(long)]
    export_dir: PathBuf,
    /// Export path in the nfs-rs URL.
    #[arg(long, default_value = "/")]
    export_path: String,
    /// A run: CLIENT:DELAY_MS[:FILES] with CLIENT txnfs or nfsrs (repeatable).
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// Files of a run that does not give its own count.
    #[arg(long, default_value_t = 5000)]
    files: usize,
    /// Files per leaf directory (leaf directories = files / this, rounded up).
    #[arg(long, default_value_t = 100)]
    files_per_dir: usize,
    /// File sizes are uniform in 0..=this many bytes.
    #[arg(long, default_value_t = 8192)]
    max_size: usize,
    /// Seed of the tree (sizes and contents).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scale runs with fewer files to this many (default: --files).
    #[arg(long)]
    reference_files: Option<usize>,
    /// Where the local source trees are generated (default: the temp dir).
    #[arg(long)]
    local_dir: Option<PathBuf>,
    /// nfs-rs ls without the GETATTR per entry (READDIR attributes only).
    #[arg(long)]
    no_stat: bool,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 1800)]
    phase_timeout_s: u64,
    /// Write the results here as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum ClientKind {
    Txnfs,
    Nfsrs,
}

impl ClientKind {
    fn name(self) -> &'static str {
        match self {
            ClientKind::Txnfs => "txnfs",
            ClientKind::Nfsrs => "nfsrs",
        }
    }
}

#[derive(Clone, Debug)]
struct RunSpec {
    client: ClientKind,
    delay_ms: u64,
    files: usize,
}

fn parse_run(s: &str, default_files: usize) -> Result<RunSpec, String> {
    let parts: Vec<&str> = s.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(format!("--run {s:?}: expected CLIENT:DELAY_MS[:FILES]"));
    }
    let client = match parts[0] {
        "txnfs" => ClientKind::Txnfs,
        "nfsrs" | "nfs-rs" => ClientKind::Nfsrs,
        other => return Err(format!("--run {s:?}: unknown client {other:?}")),
    };
    let delay_ms = parts[1]
        .parse()
        .map_err(|e| format!("--run {s:?}: delay: {e}"))?;
    let files = match parts.get(2) {
        Some(f) => f.parse().map_err(|e| format!("--run {s:?}: files: {e}"))?,
        None => default_files,
    };
    if files == 0 {
        return Err(format!("--run {s:?}: no files"));
    }
    Ok(RunSpec {
        client,
        delay_ms,
        files,
    })
}

// ---------------------------------------------------------------- the tree

struct FileSpec {
    /// Relative to the tree root.
    path: String,
    size: usize,
    seed: u64,
}

struct Tree {
    /// Every directory below the root, parents before children.
    dirs: Vec<String>,
    files: Vec<FileSpec>,
}

impl Tree {
    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size as u64).sum()
    }
}

/// `ceil(n / per_dir)` leaf directories `dNN/sK` (5 per top directory),
/// every 7th of them two levels deeper (`dNN/sK/x/y`); file j goes to leaf
/// j mod leaves as `fJJJJJ`, with a size uniform in `0..=max_size`.
fn make_tree(n: usize, per_dir: usize, max_size: usize, seed: u64) -> Tree {
    let leaves = n.div_ceil(per_dir.max(1)).max(1);
    let mut leaf_paths = Vec::with_capacity(leaves);
    let mut dirs = std::collections::BTreeSet::new();
    for i in 0..leaves {
        let mut p = format!("d{:02}/s{}", i / 5, i % 5);
        if i % 7 == 3 {
            p.push_str("/x/y");
        }
        let comps: Vec<&str> = p.split('/').collect();
        for d in 1..=comps.len() {
            dirs.insert((d, comps[..d].join("/")));
        }
        leaf_paths.push(p);
    }
    let mut rng = XorShift::new(seed);
    let files = (0..n)
        .map(|j| FileSpec {
            path: format!("{}/f{j:05}", leaf_paths[j % leaves]),
            size: (rng.next_u64() % (max_size as u64 + 1)) as usize,
            seed: seed.wrapping_mul(1_000_003).wrapping_add(j as u64),
        })
        .collect();
    Tree {
        dirs: dirs.into_iter().map(|(_, p)| p).collect(),
        files,
    }
}

fn write_local_tree(root: &Path, tree: &Tree) -> Result<(), String> {
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(|e| format!("clear {}: {e}", root.display()))?;
    }
    std::fs::create_dir_all(root).map_err(|e| format!("mkdir {}: {e}", root.display()))?;
    for d in &tree.dirs {
        std::fs::create_dir_all(root.join(d)).map_err(|e| format!("mkdir {d}: {e}"))?;
    }
    for f in &tree.files {
        std::fs::write(root.join(&f.path), pattern(f.seed, f.size))
            .map_err(|e| format!("write {}: {e}", f.path))?;
    }
    Ok(())
}

/// What `cp -R` finds in a local tree: directories (parents first) and
/// files, as paths relative to `root`.
fn walk_local(root: &Path) -> Result<(Vec<String>, Vec<String>), String> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        let mut entries: Vec<(String, bool)> = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().map_err(|e| format!("{name}: {e}"))?.is_dir();
            entries.push((name, is_dir));
        }
        entries.sort();
        for (name, is_dir) in entries.into_iter().rev() {
            let p = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if is_dir {
                dirs.push(p.clone());
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    // Parents first: sort by depth (stable on the walk order).
    dirs.sort_by_key(|d| d.matches('/').count());
    Ok((dirs, files))
}

/// (files, directories, bytes) of a tree on the host, root excluded.
fn count_host_tree(root: &Path) -> Result<(usize, usize, u64), String> {
    let (mut files, mut dirs, mut bytes) = (0, 0, 0);
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
            let md = e
                .metadata()
                .map_err(|err| format!("{}: {err}", e.path().display()))?;
            if md.is_dir() {
                dirs += 1;
                stack.push(e.path());
            } else {
                files += 1;
                bytes += md.len();
            }
        }
    }
    Ok((files, dirs, bytes))
}

// ------------------------------------------------------------- measuring

#[derive(Clone, Debug, Serialize)]
struct Extrapolated {
    to_files: usize,
    wall_s: f64,
    rpcs: f64,
}

#[derive(Clone, Debug, Serialize)]
struct PhaseResult {
    phase: &'static str,
    wall_s: f64,
    /// ONC RPC records client→server seen by the proxy.
    rpcs: u64,
    rpcs_per_file: f64,
    /// COMPOUNDs the txnfs client counted itself (cross-check; txnfs only).
    client_compounds: Option<u64>,
    proxy: ProxyStats,
    extrapolated: Option<Extrapolated>,
}

#[derive(Clone, Debug, Serialize)]
struct RunResult {
    client: ClientKind,
    delay_ms: u64,
    files: usize,
    dirs: usize,
    bytes: u64,
    server_dir: String,
    phases: Vec<PhaseResult>,
    checks: Vec<String>,
}

struct Meter<'a> {
    proxy: &'a DelayProxy,
    client: Option<&'a Client>,
    files: usize,
    reference: usize,
}

impl Meter<'_> {
    async fn phase<T, F: std::future::Future<Output = Result<T, String>>>(
        &self,
        name: &'static str,
        timeout: Duration,
        fut: F,
    ) -> Result<(T, PhaseResult), String> {
        let p0 = self.proxy.stats();
        let c0 = self.client.map(|c| c.stats().compounds);
        let t0 = Instant::now();
        let v = match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r.map_err(|e| format!("{name}: {e}"))?,
            Err(_) => return Err(format!("{name}: timed out after {timeout:?}")),
        };
        let wall = t0.elapsed().as_secs_f64();
        // Replies are all in: every call of the phase has been counted.
        let proxy = self.proxy.stats().since(&p0);
        let client_compounds = match (self.client, c0) {
            (Some(c), Some(c0)) => Some(c.stats().compounds.saturating_sub(c0)),
            _ => None,
        };
        let extrapolated = (self.files < self.reference).then(|| {
            let k = self.reference as f64 / self.files as f64;
            Extrapolated {
                to_files: self.reference,
                wall_s: wall * k,
                rpcs: proxy.records_c2s as f64 * k,
            }
        });
        Ok((
            v,
            PhaseResult {
                phase: name,
                wall_s: wall,
                rpcs: proxy.records_c2s,
                rpcs_per_file: proxy.records_c2s as f64 / self.files as f64,
                client_compounds,
                proxy,
                extrapolated,
            },
        ))
    }
}

/// Listing summary: (files, directories, bytes of the files).
type Listing = (usize, usize, u64);

/// Checks after cp: counts and bytes on the host, and a sample of contents.
fn check_copy(
    host_root: &Path,
    local_root: &Path,
    tree: &Tree,
    checks: &mut Vec<String>,
) -> Result<(), String> {
    let (files, dirs, bytes) = count_host_tree(host_root)?;
    if (files, dirs, bytes) != (tree.files.len(), tree.dirs.len(), tree.bytes()) {
        return Err(format!(
            "after cp the server has {files} files, {dirs} dirs, {bytes} bytes; \
             expected {}, {}, {}",
            tree.files.len(),
            tree.dirs.len(),
            tree.bytes()
        ));
    }
    let step = (tree.files.len() / 50).max(1);
    let mut sampled = 0;
    for f in tree.files.iter().step_by(step).chain(tree.files.last()) {
        let on_server = std::fs::read(host_root.join(&f.path))
            .map_err(|e| format!("read back {}: {e}", f.path))?;
        let local =
            std::fs::read(local_root.join(&f.path)).map_err(|e| format!("{}: {e}", f.path))?;
        if on_server != local {
            return Err(format!("{}: contents differ after cp", f.path));
        }
        sampled += 1;
    }
    checks.push(format!(
        "cp: {files} files, {dirs} dirs, {bytes} bytes on the server (as generated); \
         contents of {sampled} sampled files identical"
    ));
    Ok(())
}

fn check_listing(got: Listing, tree: &Tree, checks: &mut Vec<String>) -> Result<(), String> {
    let want = (tree.files.len(), tree.dirs.len(), tree.bytes());
    if got != want {
        return Err(format!(
            "ls listed {got:?} (files, dirs, bytes), expected {want:?}"
        ));
    }
    checks.push(format!(
        "ls: listed {} files, {} dirs, {} bytes",
        got.0, got.1, got.2
    ));
    Ok(())
}

// ------------------------------------------------------------ txnfs client

async fn txnfs_run(
    args: &Args,
    spec: &RunSpec,
    proxy: &DelayProxy,
    tree: &Tree,
    local_root: &Path,
    root: &str,
    reference: usize,
) -> Result<RunResult, String> {
    let timeout = Duration::from_secs(args.phase_timeout_s);
    let client = Client::connect(ClientConfig::new(proxy.addr()))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let meter = Meter {
        proxy,
        client: Some(&client),
        files: spec.files,
        reference,
    };
    let mut phases = Vec::new();
    let mut checks = Vec::new();
    let host_root = args.export_dir.join(root);

    // cp -R: walk and read the local tree, mkdir -p every directory, write
    // every file (UNSTABLE + COMMIT in the same COMPOUND, like nfs-rs's
    // write_all).
    let ((), p) = meter
        .phase("cp", timeout, async {
            let fs = Fs::new(client.clone());
            let (dirs, files) = walk_local(local_root)?;
            let mut mk = vec![root.to_string()];
            mk.extend(dirs.iter().map(|d| format!("{root}/{d}")));
            for (d, r) in mk.iter().zip(fs.vmkdir(&mk, 0o755, true).await) {
                r.map_err(|e| format!("mkdir {d}: {e}"))?;
            }
            let mut data = Vec::with_capacity(files.len());
            for f in &files {
                let b = std::fs::read(local_root.join(f)).map_err(|e| format!("{f}: {e}"))?;
                data.push((format!("{root}/{f}"), Bytes::from(b)));
            }
            for ((f, _), r) in data.iter().zip(fs.vwrite(&data, false).await) {
                r.map_err(|e| format!("write {f}: {e}"))?;
            }
            Ok(())
        })
        .await?;
    phases.push(p);
    check_copy(&host_root, local_root, tree, &mut checks)?;

    // ls -lR: every level of the tree in as few COMPOUNDs as possible, with
    // the attributes in the READDIR replies.
    let (listing, p) = meter
        .phase("ls", timeout, async {
            let fs = Fs::new(client.clone());
            let mut l = fs.vlistdir(&[root], true).await;
            let entries = l
                .pop()
                .ok_or("no listing")?
                .map_err(|e| format!("list {root}: {e}"))?;
            let (mut files, mut dirs, mut bytes) = (0, 0, 0);
            for e in &entries {
                if e.attrs.is_dir() {
                    dirs += 1;
                } else {
                    files += 1;
                    bytes += e.attrs.size.unwrap_or(0);
                }
            }
            Ok((files, dirs, bytes))
        })
        .await?;
    phases.push(p);
    check_listing(listing, tree, &mut checks)?;

    // rm -r.
    let ((), p) = meter
        .phase("rm", timeout, async {
            let fs = Fs::new(client.clone());
            for r in fs.vremove(&[root], true).await {
                r.map_err(|e| format!("remove {root}: {e}"))?;
            }
            Ok(())
        })
        .await?;
    phases.push(p);
    if host_root.exists() {
        return Err(format!("{} still exists after rm", host_root.display()));
    }
    checks.push("rm: the tree is gone from the server".into());
    if let Err(e) = client.close().await {
        eprintln!("txnfs client close: {e}");
    }
    Ok(RunResult {
        client: spec.client,
        delay_ms: spec.delay_ms,
        files: tree.files.len(),
        dirs: tree.dirs.len(),
        bytes: tree.bytes(),
        server_dir: root.to_string(),
        phases,
        checks,
    })
}

// ----------------------------------------------------------- nfs-rs client

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Every entry below `dir_fh` (depth first), READDIR page by page, with a
/// GETATTR per entry when `stat`: (path, parent handle, handle, is dir,
/// size).
struct Entry {
    path: String,
    parent_fh: Bytes,
    is_dir: bool,
    size: u64,
}

async fn nfsrs_walk(
    m: &dyn Mount,
    root: &str,
    root_fh: Bytes,
    stat: bool,
) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_string(), root_fh)];
    while let Some((dir, fh)) = stack.pop() {
        let mut pos = nfs_rs::DirectoryCookie::default();
        loop {
            let page = m
                .readdirplus_page(fh.clone(), pos)
                .await
                .map_err(|e| format!("readdir {dir}: {e}"))?;
            for e in page.entries {
                if e.file_name == "." || e.file_name == ".." {
                    continue;
                }
                let path = format!("{dir}/{}", e.file_name);
                let attr = if stat {
                    Some(
                        m.getattr(e.handle.clone())
                            .await
                            .map_err(|err| format!("getattr {path}: {err}"))?,
                    )
                } else {
                    e.attr
                };
                let attr = attr.ok_or_else(|| format!("{path}: no attributes"))?;
                let is_dir = attr.type_ == NF4DIR;
                if is_dir {
                    stack.push((path.clone(), e.handle.clone()));
                }
                out.push(Entry {
                    path,
                    parent_fh: fh.clone(),
                    is_dir,
                    size: attr.filesize,
                });
            }
            if page.eof {
                break;
            }
            pos = page.next;
        }
    }
    Ok(out)
}

async fn nfsrs_run(
    args: &Args,
    spec: &RunSpec,
    proxy: &DelayProxy,
    tree: &Tree,
    local_root: &Path,
    root: &str,
    reference: usize,
) -> Result<RunResult, String> {
    let timeout = Duration::from_secs(args.phase_timeout_s);
    let url = format!(
        "nfs://127.0.0.1:{}{}?version=4.1&noresvport=true",
        proxy.addr().port(),
        args.export_path
    );
    let m = tokio::time::timeout(Duration::from_secs(60), nfs_rs::parse_url_and_mount(&url))
        .await
        .map_err(|_| format!("mount {url}: timed out"))?
        .map_err(|e| format!("mount {url}: {e}"))?;
    let m: &dyn Mount = m.as_ref();
    let meter = Meter {
        proxy,
        client: None,
        files: spec.files,
        reference,
    };
    let mut phases = Vec::new();
    let mut checks = Vec::new();
    let host_root = args.export_dir.join(root);
    let export_fh = m.getfh().await;

    // cp -R: one call at a time; handles of created directories are kept.
    let ((), p) = meter
        .phase("cp", timeout, async {
            let (dirs, files) = walk_local(local_root)?;
            let mut fhs: HashMap<String, Bytes> = HashMap::new();
            let top = m
                .mkdir(export_fh.clone(), root, 0o755)
                .await
                .map_err(|e| format!("mkdir {root}: {e}"))?;
            fhs.insert(String::new(), top.fh);
            for d in &dirs {
                let (parent, name) = split(d);
                let pfh = fhs.get(parent).ok_or(format!("no parent for {d}"))?;
                let o = m
                    .mkdir(pfh.clone(), name, 0o755)
                    .await
                    .map_err(|e| format!("mkdir {d}: {e}"))?;
                fhs.insert(d.clone(), o.fh);
            }
            for f in &files {
                let data = std::fs::read(local_root.join(f)).map_err(|e| format!("{f}: {e}"))?;
                let (parent, name) = split(f);
                let pfh = fhs.get(parent).ok_or(format!("no parent for {f}"))?;
                let o = m
                    .create(pfh.clone(), name, Some(0o644))
                    .await
                    .map_err(|e| format!("create {f}: {e}"))?;
                if !data.is_empty() {
                    let n = nfs_rs::write_all(m, o.fh.clone(), 0, Bytes::from(data))
                        .await
                        .map_err(|e| format!("write {f}: {e}"))?;
                    let _ = n;
                }
                m.close(o.fh).await.map_err(|e| format!("close {f}: {e}"))?;
            }
            Ok(())
        })
        .await?;
    phases.push(p);
    check_copy(&host_root, local_root, tree, &mut checks)?;

    // ls -lR: look the root up, READDIR every directory, GETATTR every entry.
    let stat = !args.no_stat;
    let (listing, p) = meter
        .phase("ls", timeout, async {
            let rfh = m
                .lookup_path(&format!("/{root}"))
                .await
                .map_err(|e| format!("lookup {root}: {e}"))?
                .fh;
            let entries = nfsrs_walk(m, root, rfh, stat).await?;
            let (mut files, mut dirs, mut bytes) = (0, 0, 0);
            for e in &entries {
                if e.is_dir {
                    dirs += 1;
                } else {
                    files += 1;
                    bytes += e.size;
                }
            }
            Ok((files, dirs, bytes))
        })
        .await?;
    phases.push(p);
    check_listing(listing, tree, &mut checks)?;

    // rm -r: list (READDIR attributes tell files from directories), REMOVE
    // every file, then every directory deepest first, then the root.
    let ((), p) = meter
        .phase("rm", timeout, async {
            let rfh = m
                .lookup_path(&format!("/{root}"))
                .await
                .map_err(|e| format!("lookup {root}: {e}"))?
                .fh;
            let entries = nfsrs_walk(m, root, rfh, false).await?;
            for e in entries.iter().filter(|e| !e.is_dir) {
                m.remove(e.parent_fh.clone(), split(&e.path).1)
                    .await
                    .map_err(|err| format!("remove {}: {err}", e.path))?;
            }
            let mut dirs: Vec<&Entry> = entries.iter().filter(|e| e.is_dir).collect();
            dirs.sort_by_key(|e| std::cmp::Reverse(e.path.matches('/').count()));
            for e in dirs {
                m.rmdir(e.parent_fh.clone(), split(&e.path).1)
                    .await
                    .map_err(|err| format!("rmdir {}: {err}", e.path))?;
            }
            m.rmdir(export_fh.clone(), root)
                .await
                .map_err(|e| format!("rmdir {root}: {e}"))?;
            Ok(())
        })
        .await?;
    phases.push(p);
    if host_root.exists() {
        return Err(format!("{} still exists after rm", host_root.display()));
    }
    checks.push("rm: the tree is gone from the server".into());
    if let Err(e) = m.umount().await {
        eprintln!("nfs-rs umount: {e}");
    }
    Ok(RunResult {
        client: spec.client,
        delay_ms: spec.delay_ms,
        files: tree.files.len(),
        dirs: tree.dirs.len(),
        bytes: tree.bytes(),
        server_dir: root.to_string(),
        phases,
        checks,
    })
}

// -------------------------------------------------------------- reporting

fn print_table(results: &[RunResult]) {
    println!();
    println!(
        "{:<6} {:>6} {:>6} {:<5} {:>9} {:>8} {:>9} {:>9}  note",
        "client", "delay", "files", "phase", "wall s", "RPCs", "RPCs/file", "COMPOUNDs"
    );
    for r in results {
        for p in &r.phases {
            let note = match &p.extrapolated {
                Some(x) => format!(
                    "extrapolated to {} files: ~{:.1} s, ~{:.0} RPCs",
                    x.to_files, x.wall_s, x.rpcs
                ),
                None => String::new(),
            };
            println!(
                "{:<6} {:>4}ms {:>6} {:<5} {:>9.3} {:>8} {:>9.3} {:>9}  {}",
                r.client.name(),
                r.delay_ms,
                r.files,
                p.phase,
                p.wall_s,
                p.rpcs,
                p.rpcs_per_file,
                p.client_compounds
                    .map_or_else(|| "-".to_string(), |c| c.to_string()),
                note
            );
        }
    }
    println!(
        "\nRPCs: ONC RPC calls seen by the delay proxy (client->server records). \
         COMPOUNDs: what the txnfs client counted itself."
    );
}

#[derive(Serialize)]
struct Report<'a> {
    server: String,
    files_default: usize,
    files_per_dir: usize,
    max_size: usize,
    seed: u64,
    reference_files: usize,
    nfsrs_ls_getattr_per_entry: bool,
    runs: &'a [RunResult],
}

fn main() -> ExitCode {
    let args = Args::parse();
    match real_main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("treeops: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(args: &Args) -> Result<(), String> {
    let specs: Vec<RunSpec> = args
        .runs
        .iter()
        .map(|r| parse_run(r, args.files))
        .collect::<Result<_, _>>()?;
    let reference = args.reference_files.unwrap_or(args.files);
    if !args.export_dir.is_dir() {
        return Err(format!(
            "--export-dir {} is not a directory",
            args.export_dir.display()
        ));
    }
    // The proxy gets a runtime (and thread) of its own so that the client's
    // CPU work does not delay forwarding.
    let proxy_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("delay-proxy")
        .enable_all()
        .build()
        .map_err(|e| format!("proxy runtime: {e}"))?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("client runtime: {e}"))?;
    let local_base = args
        .local_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("treeops-src-{}", std::process::id()));
    let mut trees: HashMap<usize, (Tree, PathBuf)> = HashMap::new();
    let mut results = Vec::new();
    let outcome = (|| -> Result<(), String> {
        for spec in &specs {
            if let std::collections::hash_map::Entry::Vacant(slot) = trees.entry(spec.files) {
                let tree = make_tree(spec.files, args.files_per_dir, args.max_size, args.seed);
                let dir = local_base.join(format!("n{}", spec.files));
                write_local_tree(&dir, &tree)?;
                eprintln!(
                    "== generated {}: {} files, {} dirs, {} bytes",
                    dir.display(),
                    tree.files.len(),
                    tree.dirs.len(),
                    tree.bytes()
                );
                slot.insert((tree, dir));
            }
            let (tree, local_root) = trees.get(&spec.files).ok_or("tree missing")?;
            let delay = Duration::from_millis(spec.delay_ms);
            let proxy = proxy_rt
                .block_on(DelayProxy::start(
                    SocketAddr::from(([127, 0, 0, 1], 0)),
                    args.server,
                    delay,
                ))
                .map_err(|e| format!("start proxy: {e}"))?;
            let root = format!(
                "treeops-{}-{}ms-{}-{}",
                spec.client.name(),
                spec.delay_ms,
                spec.files,
                std::process::id()
            );
            eprintln!(
                "== {} at {} ms each way, {} files (proxy {} -> {})",
                spec.client.name(),
                spec.delay_ms,
                spec.files,
                proxy.addr(),
                args.server
            );
            let r = client_rt.block_on(async {
                match spec.client {
                    ClientKind::Txnfs => {
                        txnfs_run(args, spec, &proxy, tree, local_root, &root, reference).await
                    }
                    ClientKind::Nfsrs => {
                        nfsrs_run(args, spec, &proxy, tree, local_root, &root, reference).await
                    }
                }
            });
            proxy.stop();
            let r = r.map_err(|e| {
                format!(
                    "{} {} ms {} files: {e}",
                    spec.client.name(),
                    spec.delay_ms,
                    spec.files
                )
            })?;
            for p in &r.phases {
                eprintln!(
                    "   {:<3} {:>8.3} s {:>7} RPCs ({:.3}/file)",
                    p.phase, p.wall_s, p.rpcs, p.rpcs_per_file
                );
            }
            for c in &r.checks {
                eprintln!("   ok: {c}");
            }
            results.push(r);
        }
        Ok(())
    })();
    if let Err(e) = std::fs::remove_dir_all(&local_base) {
        if local_base.exists() {
            eprintln!("could not remove {}: {e}", local_base.display());
        }
    }
    print_table(&results);
    if let Some(out) = &args.out {
        let report = Report {
            server: args.server.to_string(),
            files_default: args.files,
            files_per_dir: args.files_per_dir,
            max_size: args.max_size,
            seed: args.seed,
            reference_files: reference,
            nfsrs_ls_getattr_per_entry: !args.no_stat,
            runs: &results,
        };
        let json = serde_json::to_string_pretty(&report).map_err(|e| format!("json: {e}"))?;
        std::fs::write(out, json).map_err(|e| format!("write {}: {e}", out.display()))?;
        eprintln!("results written to {}", out.display());
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shape() {
        let t = make_tree(5000, 100, 8192, 1);
        assert_eq!(t.files.len(), 5000);
        // 10 top dirs, 50 leaves, 7 of them with x/y below.
        assert_eq!(t.dirs.len(), 10 + 50 + 14);
        assert!(t.files.iter().all(|f| f.size <= 8192));
        // Parents before children.
        let pos: HashMap<&str, usize> = t
            .dirs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.as_str(), i))
            .collect();
        for (i, d) in t.dirs.iter().enumerate() {
            if let Some((parent, _)) = d.rsplit_once('/') {
                assert!(pos[parent] < i, "{parent} after {d}");
            }
        }
        let small = make_tree(1000, 100, 8192, 1);
        assert_eq!(small.dirs.len(), 2 + 10 + 2);
        // Seeded: the same sizes every time.
        assert_eq!(make_tree(1000, 100, 8192, 1).bytes(), small.bytes());
    }

    #[test]
    fn runs_parse() {
        let r = parse_run("nfsrs:10:1000", 5000).expect("parse");
        assert_eq!(
            (r.client, r.delay_ms, r.files),
            (ClientKind::Nfsrs, 10, 1000)
        );
        let r = parse_run("txnfs:0", 5000).expect("parse");
        assert_eq!((r.client, r.files), (ClientKind::Txnfs, 5000));
        assert!(parse_run("x:1", 5).is_err());
        assert!(parse_run("txnfs", 5).is_err());
        assert!(parse_run("txnfs:a", 5).is_err());
    }
}
