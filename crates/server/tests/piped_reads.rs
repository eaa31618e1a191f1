//! Large READs of a local export leave the page cache by `splice` (ADR 0065): the
//! data goes from the file into a pipe and from the pipe into the socket, and the
//! server never copies it. Checked over real TCP: the bytes read back, the spliced
//! byte count the transport reports, and the cases that must not splice (the reply
//! kept for a retransmission, READ followed by another op, small reads), which still
//! read the right bytes.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_server::nfs::*;

const MIB: usize = 1 << 20;
/// Three MiB and a bit: a last READ that is short and at end of file.
const SIZE: usize = 3 * MIB + 100_001;

fn pattern() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 31 + i / 4096) as u8).collect()
}

fn anonymous() -> stateid4 {
    stateid4 {
        seqid: 0,
        other: [0; 12],
    }
}

fn read_op(offset: u64, count: u32) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: anonymous(),
        offset,
        count,
    })
}

/// The READ result of `r` (whose ops are SEQUENCE, PUTROOTFH, LOOKUP, READ, ...).
fn read_result(r: &COMPOUND4res) -> (Bytes, bool) {
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    match &r.resarray[3] {
        nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => (ok.data.clone(), ok.eof),
        other => panic!("READ: {other:?}"),
    }
}

async fn server() -> (TestServer, std::path::PathBuf) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("txnfs-piped-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("export dir");
    // Written through the page cache, so every page is cached.
    std::fs::write(dir.join("f"), pattern()).expect("f");
    let export = dir.clone();
    let srv = start_server(move |state_dir| local_config(export, state_dir)).await;
    (srv, dir)
}

fn spliced(srv: &TestServer) -> u64 {
    srv.server.metrics.write_counts.spliced_bytes()
}

/// The bytes spliced for a READ of `len` bytes at `offset`: all of them from an aligned
/// offset. An unaligned range needs a pipe of 2 MiB, which an unprivileged server may
/// not have (`pipe-max-size`): then it is copied (still exactly), or spliced whole.
fn assert_spliced(moved: u64, len: usize, offset: usize, count: usize) {
    let len = len as u64;
    if offset.is_multiple_of(4096) {
        assert_eq!(moved, len, "{offset}+{count}: spliced");
    } else {
        assert!(
            moved == 0 || moved == len,
            "{offset}+{count}: spliced {moved}"
        );
    }
}

#[tokio::test]
async fn large_reads_are_spliced_and_read_back_exactly() {
    let (srv, dir) = server().await;
    let want = pattern();
    // Replies of up to 2 MiB, kept or not (the default test session's stop short of
    // 1 MiB of data).
    let (mut s, fore) = Session::with_limits(srv.addr, b"piped-reads", 2 << 20, 2 << 20).await;
    assert!(fore.ca_maxresponsesize as usize > MIB + 4096, "{fore:?}");
    let path = || vec![nfs_argop4::OP_PUTROOTFH, lookup("f")];
    // (offset, count): aligned 1 MiB; unaligned (the range touches 257 pages); an odd
    // count (3 bytes of padding follow the data); the end of the file (short, eof).
    let cases: [(usize, usize); 4] = [(0, MIB), (4097, MIB), (MIB, 100_001), (SIZE - 100_000, MIB)];
    for (offset, count) in cases {
        let before = spliced(&srv);
        let mut ops = path();
        ops.push(read_op(offset as u64, count as u32));
        let r = s.run_uncached(ops).await;
        let (data, eof) = read_result(&r);
        let end = (offset + count).min(SIZE);
        assert_eq!(data.len(), end - offset, "{offset}+{count}: length");
        assert!(data[..] == want[offset..end], "{offset}+{count}: bytes");
        assert_eq!(eof, end == SIZE, "{offset}+{count}: eof");
        assert_spliced(spliced(&srv) - before, data.len(), offset, count);
        // The connection is still in step: a small call after it answers.
        let r = s.run_uncached(path()).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK);
    }

    // Not spliced, and read exactly: a reply kept for a retransmission (cachethis);
    // READ followed by another op; a read below 64 KiB.
    let before = spliced(&srv);
    let mut ops = path();
    ops.push(read_op(0, MIB as u32));
    let r = s.run(ops).await;
    let (data, _) = read_result(&r);
    // (As much as the slot may keep: the server keeps at most 64 KiB per slot, so a
    // kept READ stays below the piped size anyway.)
    assert!(data.len() > 60_000, "cachethis: {} bytes", data.len());
    assert!(data[..] == want[..data.len()], "cachethis: bytes");
    let mut ops = path();
    ops.push(read_op(MIB as u64, MIB as u32));
    ops.push(nfs_argop4::OP_GETFH);
    let r = s.run_uncached(ops).await;
    assert!(
        read_result(&r).0[..] == want[MIB..2 * MIB],
        "READ, GETFH: bytes"
    );
    let mut ops = path();
    ops.push(read_op(10, 60_000));
    let r = s.run_uncached(ops).await;
    assert!(read_result(&r).0[..] == want[10..60_010], "small: bytes");
    assert_eq!(spliced(&srv), before, "none of these spliced");

    // A retransmission of the kept reply answers the same bytes from the cache.
    let mut ops = path();
    ops.push(read_op(2 * MIB as u64, MIB as u32));
    let args = s.next(ops);
    let first = call_raw(&s.cl, args.clone()).await;
    let again = call_raw(&s.cl, args).await;
    assert_eq!(first, again, "the replay is the reply");
    // A large reply's bytes are charged to the in-flight budget while it waits to be
    // written (ADR 0029): the parts' bytes and the piped data's, not a count of parts.
    let peak = srv.server.stats.in_flight.peak();
    assert!(peak >= MIB, "in-flight peak {peak}");
    let r = <COMPOUND4res as txnfs_xdr::Decode>::from_bytes(first).expect("decodes");
    let (data, _) = read_result(&r);
    assert!(
        data[..] == want[2 * MIB..2 * MIB + data.len()],
        "replayed: bytes"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// NFSv3 READ (`vers=3` mounts) leaves the page cache the same way: its reply is never
/// kept, so every large READ of cached data may be spliced.
#[tokio::test]
async fn large_v3_reads_are_spliced_and_read_back_exactly() {
    use txnfs_proto::nfs3::{LOOKUP3res, READ3res};
    let (srv, dir) = server().await;
    let want = pattern();
    let c = txnfs_rawclient::v3::V3Client::connect(srv.addr, root_cred())
        .await
        .expect("connect");
    let root = c.root("/").await;
    let LOOKUP3res::NFS3_OK(f) = c.lookup(&root, "f").await.expect("LOOKUP") else {
        panic!("LOOKUP f")
    };
    for (offset, count) in [(0, MIB), (MIB + 3, 100_001), (SIZE - 100_000, MIB)] {
        let before = spliced(&srv);
        let READ3res::NFS3_OK(r) = c
            .read(&f.object, offset as u64, count as u32)
            .await
            .expect("READ")
        else {
            panic!("READ {offset}+{count}")
        };
        let end = (offset + count).min(SIZE);
        assert_eq!(r.count as usize, end - offset, "{offset}+{count}: count");
        assert!(r.data[..] == want[offset..end], "{offset}+{count}: bytes");
        assert_eq!(r.eof, end == SIZE, "{offset}+{count}: eof");
        assert_spliced(spliced(&srv) - before, r.data.len(), offset, count);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// READ_PLUS (what newer Linux clients read with on a 4.2 mount) pipes its last data
/// segment the same way: one DATA segment of the file's bytes, spliced.
#[tokio::test]
async fn large_read_plus_is_spliced_and_read_back_exactly() {
    let (srv, dir) = server().await;
    let want = pattern();
    let (mut s, _) = Session::with_limits(srv.addr, b"piped-read-plus", 2 << 20, 2 << 20).await;
    for (offset, count) in [(0, MIB), (SIZE - 100_000, MIB)] {
        let before = spliced(&srv);
        s.seq += 1;
        let ops = vec![
            sequence(s.sid, 0, s.seq, false),
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            nfs_argop4::OP_READ_PLUS(READ_PLUS4args {
                rpa_stateid: anonymous(),
                rpa_offset: offset as u64,
                rpa_count: count as u32,
            }),
        ];
        let reply = call_raw(&s.cl, encode_compound_minor(ops, 2)).await;
        let r = <COMPOUND4res as txnfs_xdr::Decode>::from_bytes(reply).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(ok)) = &r.resarray[3] else {
            panic!("READ_PLUS: {:?}", r.resarray[3])
        };
        let end = (offset + count).min(SIZE);
        let [read_plus_content::NFS4_CONTENT_DATA(d)] = ok.rpr_contents.as_slice() else {
            panic!("{offset}+{count}: one data segment: {:?}", ok.rpr_contents)
        };
        assert_eq!(d.d_offset, offset as u64);
        assert!(d.d_data[..] == want[offset..end], "{offset}+{count}: bytes");
        assert_eq!(ok.rpr_eof, end == SIZE, "{offset}+{count}: eof");
        assert_spliced(spliced(&srv) - before, d.d_data.len(), offset, count);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// NFSv4.0 (`vers=4.0` mounts) keeps no reply but an owner's seqid op's, and READ uses
/// no seqid: its last op's data may be spliced too.
#[tokio::test]
async fn large_v40_reads_are_spliced_and_read_back_exactly() {
    let (srv, dir) = server().await;
    let want = pattern();
    let cl = connect(srv.addr).await;
    for (offset, count) in [(0, MIB), (MIB + 5, 200_003)] {
        let before = spliced(&srv);
        let ops = vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            read_op(offset as u64, count as u32),
        ];
        let reply = call_raw(&cl, encode_compound_minor(ops, 0)).await;
        let r = <COMPOUND4res as txnfs_xdr::Decode>::from_bytes(reply).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) = &r.resarray[2] else {
            panic!("READ: {:?}", r.resarray[2])
        };
        assert_eq!(ok.data.len(), count, "{offset}+{count}: length");
        assert!(
            ok.data[..] == want[offset..offset + count],
            "{offset}+{count}: bytes"
        );
        assert_spliced(spliced(&srv) - before, count, offset, count);
    }
    let _ = std::fs::remove_dir_all(dir);
}
