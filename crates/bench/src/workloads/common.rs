//! File operations as a normal (non-vectorized) NFSv4.1 client sends them,
//! one request per step: OPEN (PUTFH, OPEN, GETFH, GETATTR), READ and WRITE
//! (PUTFH + op, at most 1 MiB each), COMMIT, CLOSE, REMOVE, stat (LOOKUP +
//! GETATTR). Also data-set helpers for prepare.

use crate::nfs;
use crate::workload::{Setup, Worker};
use anyhow::Context;
use bytes::Bytes;
use txnfs_client::attrs::{self, SIZE};
use txnfs_client::Compound;
use txnfs_proto::nfs4::stateid4;

/// Largest READ/WRITE payload per request.
pub const MAX_IO: u64 = 1 << 20;

/// An open file.
pub struct Open {
    pub fh: Bytes,
    pub sid: stateid4,
    pub size: u64,
}

/// OPEN `dir/name` (creating it when `create`, truncating when `truncate`).
pub async fn open(
    w: &mut Worker,
    dir: &Bytes,
    name: &str,
    access: u32,
    create: bool,
    truncate: bool,
) -> anyhow::Result<Open> {
    let owner = w.owner.clone();
    let mut c = Compound::new();
    c.putfh(dir);
    let o = if create {
        nfs::push_create(&mut c, name, access, &owner, truncate);
        1
    } else {
        c.open(name.as_bytes(), access, &owner, None)
    };
    let g = c.getfh();
    let a = c.getattr(attrs::bitmap(&[SIZE]));
    let r = w.call(&c).await.with_context(|| format!("open {name}"))?;
    Ok(Open {
        fh: r.fh(g)?,
        sid: r.open(o)?.stateid,
        size: r.attrs(a)?.size.unwrap_or(0),
    })
}

/// READ `len` bytes from `off` in requests of at most 1 MiB; returns the bytes read.
pub async fn read(w: &mut Worker, f: &Open, off: u64, len: u64) -> anyhow::Result<u64> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_IO);
        let mut c = Compound::new();
        c.putfh(&f.fh);
        let i = c.read(f.sid.clone(), off + done, n as u32);
        let r = w.call(&c).await?;
        let (d, eof) = r.read(i)?;
        done += d.len() as u64;
        if eof || d.is_empty() {
            break;
        }
    }
    Ok(done)
}

/// Read the whole file (its size as of OPEN).
pub async fn read_whole(w: &mut Worker, f: &Open) -> anyhow::Result<u64> {
    read(w, f, 0, f.size).await
}

/// WRITE `data` at `off` in requests of at most 1 MiB.
pub async fn write(
    w: &mut Worker,
    f: &Open,
    off: u64,
    data: &Bytes,
    stable: bool,
) -> anyhow::Result<()> {
    let mut done = 0usize;
    while done < data.len() {
        let n = (data.len() - done).min(MAX_IO as usize);
        let mut c = Compound::new();
        c.putfh(&f.fh);
        let i = c.write(
            f.sid.clone(),
            off + done as u64,
            data.slice(done..done + n),
            stable,
        );
        let r = w.call(&c).await?;
        let got = r.write(i)?.count as usize;
        anyhow::ensure!(got == n, "short WRITE: {got} of {n} bytes");
        done += n;
    }
    Ok(())
}

pub async fn commit(w: &mut Worker, f: &Open) -> anyhow::Result<()> {
    let mut c = Compound::new();
    c.putfh(&f.fh);
    c.commit();
    w.call(&c).await.map(|_| ())
}

pub async fn close(w: &mut Worker, f: Open) -> anyhow::Result<()> {
    let mut c = Compound::new();
    c.putfh(&f.fh);
    c.close(f.sid);
    w.call(&c).await.map(|_| ())
}

pub async fn remove(w: &mut Worker, dir: &Bytes, name: &str) -> anyhow::Result<()> {
    let mut c = Compound::new();
    c.putfh(dir);
    c.remove(name.as_bytes());
    w.call(&c)
        .await
        .with_context(|| format!("remove {name}"))
        .map(|_| ())
}

/// stat: LOOKUP + GETATTR in one request.
pub async fn stat(w: &mut Worker, dir: &Bytes, name: &str) -> anyhow::Result<u64> {
    let mut c = Compound::new();
    c.putfh(dir);
    c.lookup(name.as_bytes());
    let a = c.getattr(attrs::stat_bitmap());
    let r = w.call(&c).await.with_context(|| format!("stat {name}"))?;
    Ok(r.attrs(a)?.size.unwrap_or(0))
}

/// Create, write (UNSTABLE then COMMIT, or FILE_SYNC with `sync`) and close
/// a whole file: OPEN, WRITE × ⌈size / 1 MiB⌉, COMMIT unless `sync`, CLOSE.
pub async fn write_file(
    w: &mut Worker,
    dir: &Bytes,
    name: &str,
    data: &Bytes,
    sync: bool,
) -> anyhow::Result<()> {
    let f = open(
        w,
        dir,
        name,
        txnfs_proto::nfs4::OPEN4_SHARE_ACCESS_WRITE,
        true,
        true,
    )
    .await?;
    write(w, &f, 0, data, sync).await?;
    if !sync && !data.is_empty() {
        commit(w, &f).await?;
    }
    close(w, f).await
}

/// Open, read whole, close; returns the bytes read.
pub async fn read_file(w: &mut Worker, dir: &Bytes, name: &str) -> anyhow::Result<u64> {
    let f = open(
        w,
        dir,
        name,
        txnfs_proto::nfs4::OPEN4_SHARE_ACCESS_READ,
        false,
        false,
    )
    .await?;
    let n = read_whole(w, &f).await?;
    close(w, f).await?;
    Ok(n)
}

/// READs a file of `size` bytes takes with [`read_whole`].
pub fn reads_for(size: u64) -> u64 {
    size.div_ceil(MAX_IO)
}

/// Prepare: create files `names` in `dir` with the given sizes (small ones
/// one COMPOUND each, 16 in flight; larger ones written in 1 MiB WRITEs).
pub async fn create_files(s: &Setup, dir: &Bytes, files: &[(String, u64)]) -> anyhow::Result<()> {
    let mut small = Vec::new();
    for (name, size) in files {
        if *size <= MAX_IO {
            let data = Bytes::from(crate::pattern(*size, *size as usize));
            small.push(nfs::small_file_compound(dir, name, data, &s.owner));
        } else {
            nfs::fill_file(&s.client, dir, name, *size, MAX_IO as usize, &s.owner).await?;
        }
    }
    s.send_all(small, 16).await
}

/// Prepare: files `f0` … `f{count-1}` of `size` bytes each in the
/// workload's directory (the data set the per-file workloads pick from).
pub async fn create_numbered(s: &Setup, count: u64, size: u64) -> anyhow::Result<()> {
    let files: Vec<(String, u64)> = (0..count).map(|i| (format!("f{i}"), size)).collect();
    create_files(s, &s.base_fh, &files).await
}

/// Deterministic file size around `mean` (uniform in [mean/2, 3·mean/2]).
pub fn size_around(rng: &mut crate::XorShift, mean: u64) -> u64 {
    if mean < 2 {
        return mean;
    }
    mean / 2 + rng.next_u64() % (mean + 1)
}

/// One file of `size` bytes filled with the pattern in prepare, whose handle
/// the workers take in run (random I/O, GETATTR loops).
#[derive(Default)]
pub struct PreparedFile(std::sync::Mutex<Option<Bytes>>);

impl PreparedFile {
    /// Create `name` of `size` bytes in the workload's directory.
    pub async fn fill(&self, s: &Setup, name: &str, size: u64) -> anyhow::Result<()> {
        let fh = nfs::fill_file(&s.client, &s.base_fh, name, size, 1 << 20, &s.owner).await?;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(fh);
        Ok(())
    }

    /// The handle of the prepared file.
    pub fn handle(&self) -> anyhow::Result<Bytes> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .context("not prepared")
    }
}
