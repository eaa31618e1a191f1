//! NFS helpers shared by the runner and the workloads: path resolution,
//! directory and file creation for data sets, naming a COMPOUND after its main
//! op (as /proc/self/mountstats names requests) and counting payload bytes.

use anyhow::{anyhow, Context};
use bytes::Bytes;
use txnfs_client::compound::{op_name, CURRENT_STATEID};
use txnfs_client::{Client, Compound, CreateHow, Reply, SetAttributes};
use txnfs_proto::nfs4::*;

/// Ops that only position or describe and do not name a request.
fn is_auxiliary(op: nfs_opnum4) -> bool {
    use nfs_opnum4::*;
    matches!(
        op,
        OP_PUTFH | OP_PUTROOTFH | OP_PUTPUBFH | OP_GETFH | OP_SAVEFH | OP_RESTOREFH | OP_GETATTR
    )
}

/// The request type of a COMPOUND: its first op that does more than set or
/// describe the current filehandle (OPEN for OPEN+GETFH+WRITE+CLOSE), else
/// LOOKUP if it has one, else GETATTR, else its first op.
pub fn primary_op(c: &Compound) -> &'static str {
    let ops = c.ops();
    let find = |f: &dyn Fn(nfs_opnum4) -> bool| {
        ops.iter()
            .map(|o| o.discriminant())
            .find(|&o| f(o))
            .map(op_name)
    };
    find(&|o| !is_auxiliary(o) && o != nfs_opnum4::OP_LOOKUP)
        .or_else(|| find(&|o| o == nfs_opnum4::OP_LOOKUP))
        .or_else(|| find(&|o| o == nfs_opnum4::OP_GETATTR))
        .or_else(|| ops.first().map(|o| op_name(o.discriminant())))
        .unwrap_or("NULL")
}

/// Names of the ops of a COMPOUND (SEQUENCE excluded).
pub fn op_names(c: &Compound) -> impl Iterator<Item = &'static str> + '_ {
    c.ops().iter().map(|o| op_name(o.discriminant()))
}

/// WRITE payload bytes of a COMPOUND.
pub fn write_bytes(c: &Compound) -> u64 {
    c.ops()
        .iter()
        .map(|o| match o {
            nfs_argop4::OP_WRITE(w) => w.data.len() as u64,
            _ => 0,
        })
        .sum()
}

/// READ payload bytes of a reply.
pub fn read_bytes(r: &Reply) -> u64 {
    r.results
        .iter()
        .map(|o| match o {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => ok.data.len() as u64,
            _ => 0,
        })
        .sum()
}

/// Turn a failed op of a reply into an error naming the request.
pub fn check(r: &Reply, what: &str) -> anyhow::Result<()> {
    match r.failed() {
        None => Ok(()),
        Some((i, s)) => {
            let op = r
                .results
                .get(i)
                .map(|o| op_name(o.discriminant()))
                .unwrap_or("?");
            Err(anyhow!("{what}: op {i} ({op}) failed with {s:?}"))
        }
    }
}

/// The handle of `path` (components separated by '/', relative to the pseudo root).
pub async fn lookup_path(client: &Client, path: &str) -> anyhow::Result<Bytes> {
    let mut c = Compound::new();
    c.putrootfh();
    for comp in path.split('/').filter(|s| !s.is_empty()) {
        c.lookup(comp.as_bytes());
    }
    let i = c.getfh();
    let r = client.compound(&c).await?;
    r.fh(i).with_context(|| format!("look up {path:?}"))
}

/// The handle of the directory `path`, created with its missing parents (mode 0755)
/// when it does not exist yet: `--target nfs://HOST/bench` works on a fresh export.
/// A directory that cannot be created (in the server's pseudo-root, on a read-only
/// export) is an error that says what to do.
pub async fn lookup_or_create_dir(client: &Client, path: &str) -> anyhow::Result<Bytes> {
    if let Ok(fh) = lookup_path(client, path).await {
        return Ok(fh);
    }
    let mut c = Compound::new();
    c.putrootfh();
    let i = c.getfh();
    let mut fh = client
        .compound(&c)
        .await?
        .fh(i)
        .context("the root handle")?;
    let mut walked = String::new();
    for comp in path.split('/').filter(|s| !s.is_empty()) {
        walked.push('/');
        walked.push_str(comp);
        let mut c = Compound::new();
        c.putfh(&fh);
        c.lookup(comp.as_bytes());
        let i = c.getfh();
        let r = client.compound(&c).await?;
        fh = match r.failed() {
            None => r.fh(i).with_context(|| format!("look up {walked:?}"))?,
            Some((_, nfsstat4::NFS4ERR_NOENT)) => {
                mkdir(client, &fh, comp).await.with_context(|| {
                    format!(
                        "target directory {walked:?} does not exist and could not be                          created there: create it on the server (txnfs mkdir -p                          nfs://HOST{walked}) or name a directory of an export"
                    )
                })?
            }
            Some((_, s)) => anyhow::bail!("target directory {walked:?}: {s:?}"),
        };
    }
    Ok(fh)
}

/// CREATE a directory `name` in `dir` and return its handle.
pub async fn mkdir(client: &Client, dir: &Bytes, name: &str) -> anyhow::Result<Bytes> {
    let mut c = Compound::new();
    c.putfh(dir);
    c.mkdir(
        name.as_bytes(),
        &SetAttributes {
            mode: Some(0o755),
            ..Default::default()
        },
    );
    let i = c.getfh();
    let r = client.compound(&c).await?;
    r.fh(i).with_context(|| format!("mkdir {name:?}"))
}

/// An open-create with mode 0644 (UNCHECKED, truncating when `truncate`).
pub fn push_create(c: &mut Compound, name: &str, access: u32, owner: &[u8], truncate: bool) {
    let set = SetAttributes {
        mode: Some(0o644),
        size: truncate.then_some(0),
        ..Default::default()
    };
    c.open(
        name.as_bytes(),
        access,
        owner,
        Some((CreateHow::Unchecked, &set)),
    );
}

/// Create (or truncate) `dir/name` and fill it with `size` bytes of a
/// deterministic pattern, `chunk` bytes per WRITE, several WRITEs in flight;
/// unstable writes and a COMMIT. Returns the file's handle.
pub async fn fill_file(
    client: &Client,
    dir: &Bytes,
    name: &str,
    size: u64,
    chunk: usize,
    owner: &[u8],
) -> anyhow::Result<Bytes> {
    let mut c = Compound::new();
    c.putfh(dir);
    push_create(&mut c, name, OPEN4_SHARE_ACCESS_WRITE, owner, true);
    let g = c.getfh();
    let r = client.compound(&c).await?;
    check(&r, &format!("create {name}"))?;
    let fh = r.fh(g)?;
    let sid = r.open(1)?.stateid;
    let chunk = chunk.max(1);
    let data = Bytes::from(crate::pattern(size ^ 0x5eed, chunk));
    let offsets: Vec<u64> = (0..size).step_by(chunk).collect();
    for group in offsets.chunks(8) {
        let mut tasks = Vec::new();
        for &off in group {
            let len = ((size - off) as usize).min(chunk);
            let mut w = Compound::new();
            w.putfh(&fh);
            w.write(sid.clone(), off, data.slice(..len), false);
            let client = client.clone();
            tasks.push(tokio::spawn(async move { client.compound(&w).await }));
        }
        for t in tasks {
            let r = t.await??;
            check(&r, &format!("write {name}"))?;
        }
    }
    let mut c = Compound::new();
    c.putfh(&fh);
    c.commit();
    c.close(sid);
    let r = client.compound(&c).await?;
    check(&r, &format!("close {name}"))?;
    Ok(fh)
}

/// OPEN(create) + WRITE + CLOSE of a small file in one COMPOUND (setup use).
pub fn small_file_compound(dir: &Bytes, name: &str, data: Bytes, owner: &[u8]) -> Compound {
    let mut c = Compound::new();
    c.putfh(dir);
    push_create(&mut c, name, OPEN4_SHARE_ACCESS_WRITE, owner, true);
    if !data.is_empty() {
        c.write(CURRENT_STATEID, 0, data, false);
        c.commit();
    }
    c.close(CURRENT_STATEID);
    c
}

/// Build a LOCK op for a new lock owner from an open stateid.
pub fn lock_new_owner(
    locktype: nfs_lock_type4,
    open_stateid: stateid4,
    owner: &[u8],
    offset: u64,
    length: u64,
) -> nfs_argop4 {
    nfs_argop4::OP_LOCK(Box::new(LOCK4args {
        locktype,
        reclaim: false,
        offset,
        length,
        locker: locker4::TRUE(open_to_lock_owner4 {
            open_seqid: 0,
            open_stateid,
            lock_seqid: 0,
            lock_owner: lock_owner4 {
                clientid: 0,
                owner: Bytes::copy_from_slice(owner),
            },
        }),
    }))
}

/// LOCKU of a lock stateid.
pub fn locku(
    locktype: nfs_lock_type4,
    lock_stateid: stateid4,
    offset: u64,
    length: u64,
) -> nfs_argop4 {
    nfs_argop4::OP_LOCKU(LOCKU4args {
        locktype,
        seqid: 0,
        lock_stateid,
        offset,
        length,
    })
}

/// The lock stateid from LOCK result `i`.
pub fn lock_stateid(r: &Reply, i: usize) -> anyhow::Result<stateid4> {
    match r.results.get(i) {
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(ok))) => Ok(ok.lock_stateid.clone()),
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4ERR_DENIED(_))) => {
            Err(anyhow!("LOCK denied (conflicting lock)"))
        }
        other => Err(anyhow!(
            "LOCK failed: {:?}",
            other.map(|o| o.discriminant())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names() {
        let fh = Bytes::from_static(b"fh");
        let mut c = Compound::new();
        c.putfh(&fh);
        c.getattr(vec![1]);
        assert_eq!(primary_op(&c), "GETATTR");
        c.lookup(b"x");
        assert_eq!(primary_op(&c), "LOOKUP");
        push_create(&mut c, "f", OPEN4_SHARE_ACCESS_WRITE, b"o", true);
        c.write(CURRENT_STATEID, 0, Bytes::from_static(b"abcd"), true);
        c.close(CURRENT_STATEID);
        assert_eq!(primary_op(&c), "OPEN");
        assert_eq!(write_bytes(&c), 4);
        assert_eq!(
            op_names(&c).collect::<Vec<_>>(),
            ["PUTFH", "GETATTR", "LOOKUP", "OPEN", "WRITE", "CLOSE"]
        );
        let mut r = Compound::new();
        r.putfh(&fh);
        r.read(CURRENT_STATEID, 0, 10);
        assert_eq!(primary_op(&r), "READ");
    }
}
