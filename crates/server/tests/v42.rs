//! The NFSv4.2 operations over real TCP, from the rules and error lists of RFC 7862
//! (ALLOCATE §15.1, COPY §15.2, DEALLOCATE §15.4, IO_ADVISE §15.5, OFFLOAD_* §15.8-9,
//! READ_PLUS §15.10, SEEK §15.11, CLONE §15.13) and RFC 8276 (extended attributes),
//! on the memory backend and on a local directory (where holes and `user.` attributes
//! are the host file system's own).

mod common;

use bytes::Bytes;
use common::*;
use std::path::Path;
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

/// SEQUENCE + `ops` as a 4.2 COMPOUND.
async fn run42(s: &mut Session, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    s.seq += 1;
    let mut all = vec![s.sequence(0, s.seq)];
    all.extend(ops);
    let b = call_raw(&s.cl, encode_compound_minor(all, 2)).await;
    COMPOUND4res::from_bytes(b).expect("reply decodes")
}

/// The status of the last result (the op that failed, or the last one).
fn last_status(r: &COMPOUND4res) -> nfsstat4 {
    status_of(r.resarray.last().expect("results"))
}

fn putfh(fh: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

/// A new file `name` holding `data` at each `(offset, data)`, open for reading and
/// writing: its open stateid and handle.
async fn file_with(s: &mut Session, name: &str, parts: &[(u64, &[u8])]) -> (stateid4, Bytes) {
    let (sid, fh) = s.open_new_file(name).await;
    for (off, data) in parts {
        let r = run42(
            s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_WRITE(WRITE4args {
                    stateid: sid.clone(),
                    offset: *off,
                    stable: stable_how4::FILE_SYNC4,
                    data: Bytes::copy_from_slice(data),
                }),
            ],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    }
    (sid, fh)
}

/// The file's first `len` bytes (or all of it), with as many READs as it takes.
async fn read_all(s: &mut Session, fh: &Bytes, sid: &stateid4, len: u32) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < len as usize {
        let r = run42(
            s,
            vec![
                putfh(fh),
                nfs_argop4::OP_READ(READ4args {
                    stateid: sid.clone(),
                    offset: out.len() as u64,
                    count: len - out.len() as u32,
                }),
            ],
        )
        .await;
        let nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) = &r.resarray[2] else {
            panic!("{:?}", r.resarray)
        };
        out.extend_from_slice(&ok.data);
        if ok.eof {
            break;
        }
    }
    out
}

async fn size_of(s: &mut Session, fh: &Bytes) -> u64 {
    let r = run42(
        s,
        vec![
            putfh(fh),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![1 << 4],
            }),
        ],
    )
    .await;
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(ok)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    u64::from_be_bytes(ok.obj_attributes.attr_vals[..8].try_into().unwrap())
}

fn seek(sid: &stateid4, offset: u64, what: data_content4) -> nfs_argop4 {
    nfs_argop4::OP_SEEK(SEEK4args {
        sa_stateid: sid.clone(),
        sa_offset: offset,
        sa_what: what,
    })
}

async fn seek_res(s: &mut Session, fh: &Bytes, op: nfs_argop4) -> Result<seek_res4, nfsstat4> {
    let r = run42(s, vec![putfh(fh), op]).await;
    match &r.resarray[2] {
        nfs_resop4::OP_SEEK(SEEK4res::NFS4_OK(ok)) => Ok(ok.clone()),
        other => Err(status_of(other)),
    }
}

/// What the host's own `lseek` says about `path` (a file system may report no holes).
fn host_seek(path: &Path, offset: u64, hole: bool) -> Option<u64> {
    let script = format!(
        "import os\nf=os.open({:?},os.O_RDONLY)\ntry:\n print(os.lseek(f,{offset},{}))\nexcept OSError:\n print('nxio')",
        path.to_str().unwrap(),
        if hole { "os.SEEK_HOLE" } else { "os.SEEK_DATA" }
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn seek_finds_data_and_holes_as_the_file_system_does_and_nxio_past_eof() {
    let (srv, dir) = start_local_server("v42-seek").await;
    let mut s = Session::new(srv.addr, b"seeker").await;
    let (sid, fh) = file_with(&mut s, "sparse", &[(0, &[1; 4096]), (MIB, &[2; 4096])]).await;
    let path = dir.join("sparse");
    for (off, what, hole) in [
        (0, data_content4::NFS4_CONTENT_HOLE, true),
        (4096, data_content4::NFS4_CONTENT_DATA, false),
        (4096, data_content4::NFS4_CONTENT_HOLE, true),
        (MIB + 10, data_content4::NFS4_CONTENT_HOLE, true),
    ] {
        let got = seek_res(&mut s, &fh, seek(&sid, off, what))
            .await
            .expect("SEEK");
        let want = host_seek(&path, off, hole).expect("host lseek");
        assert_eq!(got.sr_offset, want, "SEEK {what:?} from {off}");
        assert_eq!(
            got.sr_eof,
            want >= MIB + 4096,
            "eof of SEEK {what:?} from {off}"
        );
    }
    // At or past the end of file: NXIO (RFC 7862 §15.11.3), for both kinds.
    for what in [
        data_content4::NFS4_CONTENT_DATA,
        data_content4::NFS4_CONTENT_HOLE,
    ] {
        let r = seek_res(&mut s, &fh, seek(&sid, MIB + 4096, what)).await;
        assert_eq!(r.unwrap_err(), nfsstat4::NFS4ERR_NXIO);
    }
    // A directory is not a file.
    let r = run42(
        &mut s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            seek(&sid, 0, data_content4::NFS4_CONTENT_DATA),
        ],
    )
    .await;
    assert_eq!(last_status(&r), nfsstat4::NFS4ERR_ISDIR);
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

fn io_advise(sid: &stateid4, hints: &[IO_ADVISE_type4]) -> nfs_argop4 {
    let mut bitmap = Vec::new();
    for h in hints {
        txnfs_attr::bitmap_set(&mut bitmap, *h as u32);
    }
    nfs_argop4::OP_IO_ADVISE(IO_ADVISE4args {
        iaa_stateid: sid.clone(),
        iaa_offset: 0,
        iaa_count: 0,
        iaa_hints: bitmap,
    })
}

/// IO_ADVISE (RFC 7862 §15.5): every hint is accepted; the reply names those followed.
/// A local export follows WILLNEED (also the opportunistic one) and DONTNEED
/// (`posix_fadvise`), not both at once, and no per-descriptor hint; the memory
/// backend follows none. A directory is not a file.
#[tokio::test]
async fn io_advise_follows_the_page_cache_hints_on_a_local_export() {
    use IO_ADVISE_type4::*;
    let (srv, _dir) = start_local_server("v42-advise").await;
    let mut s = Session::new(srv.addr, b"adviser").await;
    let (sid, fh) = file_with(&mut s, "f", &[(0, &[7; 65536])]).await;
    let cases: [(&[IO_ADVISE_type4], &[IO_ADVISE_type4]); 6] = [
        (&[IO_ADVISE4_WILLNEED], &[IO_ADVISE4_WILLNEED]),
        (
            &[IO_ADVISE4_WILLNEED_OPPORTUNISTIC, IO_ADVISE4_READ],
            &[IO_ADVISE4_WILLNEED_OPPORTUNISTIC],
        ),
        (&[IO_ADVISE4_DONTNEED], &[IO_ADVISE4_DONTNEED]),
        (&[IO_ADVISE4_WILLNEED, IO_ADVISE4_DONTNEED], &[]),
        (&[IO_ADVISE4_SEQUENTIAL, IO_ADVISE4_NOREUSE], &[]),
        (&[IO_ADVISE4_INIT_PROXIMITY], &[]),
    ];
    for (asked, followed) in cases {
        let r = run42(&mut s, vec![putfh(&fh), io_advise(&sid, asked)]).await;
        let nfs_resop4::OP_IO_ADVISE(IO_ADVISE4res::NFS4_OK(ok)) = &r.resarray[2] else {
            panic!("IO_ADVISE {asked:?}: {:?}", r.resarray);
        };
        let mut want = Vec::new();
        for h in followed {
            txnfs_attr::bitmap_set(&mut want, *h as u32);
        }
        assert_eq!(ok.ior_hints, want, "IO_ADVISE {asked:?}");
    }
    let r = run42(
        &mut s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            io_advise(&sid, &[IO_ADVISE4_WILLNEED]),
        ],
    )
    .await;
    assert_eq!(last_status(&r), nfsstat4::NFS4ERR_ISDIR);
    drop(srv);

    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"adviser").await;
    let (sid, fh) = file_with(&mut s, "f", &[(0, &[7; 4096])]).await;
    let r = run42(
        &mut s,
        vec![putfh(&fh), io_advise(&sid, &[IO_ADVISE4_WILLNEED])],
    )
    .await;
    let nfs_resop4::OP_IO_ADVISE(IO_ADVISE4res::NFS4_OK(ok)) = &r.resarray[2] else {
        panic!("IO_ADVISE on memory: {:?}", r.resarray);
    };
    assert!(
        ok.ior_hints.iter().all(|w| *w == 0),
        "memory follows no hint"
    );
}

#[tokio::test]
async fn read_plus_returns_the_bytes_read_returns_with_holes_as_segments() {
    let (srv, dir) = start_local_server("v42-readplus").await;
    let mut s = Session::new(srv.addr, b"reader").await;
    let (sid, fh) = file_with(&mut s, "sparse", &[(0, &[7; 4096]), (MIB, &[9; 100])]).await;
    let want = read_all(&mut s, &fh, &sid, (MIB + 100) as u32).await;
    assert_eq!(want.len() as u64, MIB + 100);
    let mut got = vec![0xAAu8; (MIB + 100) as usize];
    let mut covered = 0u64;
    let mut holes = 0;
    let mut calls = 0;
    while covered < MIB + 100 {
        calls += 1;
        assert!(calls < 100, "READ_PLUS makes no progress");
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_READ_PLUS(READ_PLUS4args {
                    rpa_stateid: sid.clone(),
                    rpa_offset: covered,
                    rpa_count: (MIB + 100 - covered) as u32,
                }),
            ],
        )
        .await;
        let nfs_resop4::OP_READ_PLUS(READ_PLUS4res::NFS4_OK(ok)) = &r.resarray[2] else {
            panic!("{:?}", r.resarray)
        };
        for seg in &ok.rpr_contents {
            match seg {
                read_plus_content::NFS4_CONTENT_DATA(d) => {
                    assert_eq!(d.d_offset, covered, "segments in order, no gap");
                    let o = d.d_offset as usize;
                    got[o..o + d.d_data.len()].copy_from_slice(&d.d_data);
                    covered += d.d_data.len() as u64;
                }
                read_plus_content::NFS4_CONTENT_HOLE(h) => {
                    assert_eq!(h.di_offset, covered, "segments in order, no gap");
                    let o = h.di_offset as usize;
                    got[o..o + h.di_length as usize].fill(0);
                    covered += h.di_length;
                    holes += 1;
                }
                other => panic!("segment {other:?}"),
            }
        }
        assert_eq!(ok.rpr_eof, covered == MIB + 100);
    }
    assert_eq!(covered, MIB + 100, "segments cover the range once");
    assert_eq!(&got[..], &want[..]);
    if host_seek(&dir.join("sparse"), 0, true) == Some(4096) {
        assert!(
            holes >= 1,
            "the file system has a hole, READ_PLUS shows none"
        );
        assert!(calls <= 3, "a hole of 1 MiB costs no data: {calls} calls");
    }
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn allocate_extends_deallocate_zeroes_and_both_refuse_a_directory() {
    for local in [false, true] {
        let (srv, dir) = if local {
            let (srv, dir) = start_local_server("v42-alloc").await;
            (srv, Some(dir))
        } else {
            (start_memory_server().await, None)
        };
        let mut s = Session::new(srv.addr, b"allocator").await;
        let (sid, fh) = file_with(&mut s, "f", &[(0, &[5; 10_000])]).await;
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_ALLOCATE(ALLOCATE4args {
                    aa_stateid: sid.clone(),
                    aa_offset: 8192,
                    aa_length: 8192,
                }),
            ],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        assert_eq!(
            size_of(&mut s, &fh).await,
            16384,
            "ALLOCATE past EOF extends"
        );
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_DEALLOCATE(DEALLOCATE4args {
                    da_stateid: sid.clone(),
                    da_offset: 4096,
                    da_length: 4096,
                }),
            ],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        assert_eq!(
            size_of(&mut s, &fh).await,
            16384,
            "DEALLOCATE keeps the size"
        );
        let data = read_all(&mut s, &fh, &sid, 16384).await;
        assert!(data[..4096].iter().all(|&b| b == 5));
        assert!(data[4096..8192].iter().all(|&b| b == 0), "punched");
        assert!(data[8192..10_000].iter().all(|&b| b == 5));
        assert!(data[10_000..].iter().all(|&b| b == 0));
        for op in [
            nfs_argop4::OP_ALLOCATE(ALLOCATE4args {
                aa_stateid: sid.clone(),
                aa_offset: 0,
                aa_length: 1,
            }),
            nfs_argop4::OP_DEALLOCATE(DEALLOCATE4args {
                da_stateid: sid.clone(),
                da_offset: 0,
                da_length: 1,
            }),
        ] {
            let r = run42(&mut s, vec![nfs_argop4::OP_PUTROOTFH, op]).await;
            assert_eq!(last_status(&r), nfsstat4::NFS4ERR_ISDIR, "local={local}");
        }
        // A range that wraps around 2^64 is not a range.
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_ALLOCATE(ALLOCATE4args {
                    aa_stateid: sid.clone(),
                    aa_offset: u64::MAX - 1,
                    aa_length: 10,
                }),
            ],
        )
        .await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_INVAL);
        drop(srv);
        if let Some(d) = dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn copy(src: &stateid4, dst: &stateid4, so: u64, dof: u64, count: u64) -> nfs_argop4 {
    nfs_argop4::OP_COPY(Box::new(COPY4args {
        ca_src_stateid: src.clone(),
        ca_dst_stateid: dst.clone(),
        ca_src_offset: so,
        ca_dst_offset: dof,
        ca_count: count,
        ca_consecutive: true,
        ca_synchronous: true,
        ca_source_server: vec![],
    }))
}

#[tokio::test]
async fn copy_within_the_server_and_its_errors() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"copier").await;
    let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    let (a_sid, a) = file_with(&mut s, "a", &[(0, &body)]).await;
    let (b_sid, b) = file_with(&mut s, "b", &[]).await;
    // Count 0: to the end of the source.
    let r = run42(
        &mut s,
        vec![
            putfh(&a),
            nfs_argop4::OP_SAVEFH,
            putfh(&b),
            copy(&a_sid, &b_sid, 0, 0, 0),
        ],
    )
    .await;
    let nfs_resop4::OP_COPY(COPY4res::NFS4_OK(ok)) = &r.resarray[4] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(ok.cr_response.wr_count, body.len() as u64);
    assert!(ok.cr_requirements.cr_synchronous);
    assert_eq!(&read_all(&mut s, &b, &b_sid, 60_000).await[..], &body[..]);
    // A range in the middle, to an offset.
    let r = run42(
        &mut s,
        vec![
            putfh(&a),
            nfs_argop4::OP_SAVEFH,
            putfh(&b),
            copy(&a_sid, &b_sid, 100, 60_000, 1000),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let got = read_all(&mut s, &b, &b_sid, 70_000).await;
    assert_eq!(&got[60_000..61_000], &body[100..1100]);
    // Errors: overlapping ranges of one file, a source range past EOF, no saved
    // filehandle, another server as the source.
    let cases: Vec<(&str, Vec<nfs_argop4>, nfsstat4)> = vec![
        (
            "overlap",
            vec![
                putfh(&a),
                nfs_argop4::OP_SAVEFH,
                putfh(&a),
                copy(&a_sid, &a_sid, 0, 1000, 5000),
            ],
            nfsstat4::NFS4ERR_INVAL,
        ),
        (
            "past EOF",
            vec![
                putfh(&a),
                nfs_argop4::OP_SAVEFH,
                putfh(&b),
                copy(&a_sid, &b_sid, 49_000, 0, 5000),
            ],
            nfsstat4::NFS4ERR_INVAL,
        ),
        (
            "no saved fh",
            vec![putfh(&b), copy(&a_sid, &b_sid, 0, 0, 1)],
            nfsstat4::NFS4ERR_NOFILEHANDLE,
        ),
    ];
    for (what, ops, want) in cases {
        let r = run42(&mut s, ops).await;
        assert_eq!(last_status(&r), want, "{what}: {:?}", r.resarray);
    }
    let mut inter = copy(&a_sid, &b_sid, 0, 0, 1);
    if let nfs_argop4::OP_COPY(c) = &mut inter {
        c.ca_source_server = vec![netloc4::NL4_NAME(Bytes::from_static(b"elsewhere"))];
    }
    let r = run42(
        &mut s,
        vec![putfh(&a), nfs_argop4::OP_SAVEFH, putfh(&b), inter],
    )
    .await;
    assert_eq!(last_status(&r), nfsstat4::NFS4ERR_NOTSUPP);
    // A synchronous copy leaves nothing running, and an open stateid names no copy.
    for op in [
        nfs_argop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4args {
            osa_stateid: b_sid.clone(),
        }),
        nfs_argop4::OP_OFFLOAD_CANCEL(OFFLOAD_CANCEL4args {
            oca_stateid: b_sid.clone(),
        }),
    ] {
        let r = run42(&mut s, vec![putfh(&b), op]).await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_BAD_STATEID);
    }
    // CLONE needs block sharing, which memory does not have.
    let r = run42(
        &mut s,
        vec![
            putfh(&a),
            nfs_argop4::OP_SAVEFH,
            putfh(&b),
            nfs_argop4::OP_CLONE(CLONE4args {
                cl_src_stateid: a_sid.clone(),
                cl_dst_stateid: b_sid.clone(),
                cl_src_offset: 0,
                cl_dst_offset: 0,
                cl_count: 0,
            }),
        ],
    )
    .await;
    assert_eq!(last_status(&r), nfsstat4::NFS4ERR_NOTSUPP);
}

fn setxattr(name: &str, value: &[u8], option: setxattr_option4) -> nfs_argop4 {
    nfs_argop4::OP_SETXATTR(Box::new(SETXATTR4args {
        sxa_option: option,
        sxa_key: Bytes::copy_from_slice(name.as_bytes()),
        sxa_value: Bytes::copy_from_slice(value),
    }))
}

fn getxattr(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_GETXATTR(GETXATTR4args {
        gxa_name: Bytes::copy_from_slice(name.as_bytes()),
    })
}

fn listxattrs(cookie: u64, maxcount: u32) -> nfs_argop4 {
    nfs_argop4::OP_LISTXATTRS(LISTXATTRS4args {
        lxa_cookie: cookie,
        lxa_maxcount: maxcount,
    })
}

/// The `user.` attribute `name` of `path` as the host sees it.
fn host_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let script = format!(
        "import os,sys\ntry:\n sys.stdout.buffer.write(os.getxattr({:?},'user.{name}'))\nexcept OSError:\n sys.exit(3)",
        path.to_str().unwrap()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    out.status.success().then_some(out.stdout)
}

#[tokio::test]
async fn extended_attributes_follow_rfc_8276() {
    for local in [false, true] {
        let (srv, dir) = if local {
            let (srv, dir) = start_local_server("v42-xattr").await;
            (srv, Some(dir))
        } else {
            (start_memory_server().await, None)
        };
        let mut s = Session::new(srv.addr, b"xattrs").await;
        let (_, fh) = file_with(&mut s, "f", &[(0, b"x")]).await;
        let ok = |r: &COMPOUND4res| assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let r = run42(
            &mut s,
            vec![putfh(&fh), setxattr("color", b"blue", setxattr4_create())],
        )
        .await;
        ok(&r);
        let nfs_resop4::OP_SETXATTR(SETXATTR4res::NFS4_OK(ci)) = &r.resarray[2] else {
            panic!()
        };
        assert!(ci.after > ci.before, "change moved: {ci:?}");
        if let Some(d) = &dir {
            assert_eq!(
                host_xattr(&d.join("f"), "color").as_deref(),
                Some(&b"blue"[..])
            );
        }
        // create of an existing name: EXIST; replace of a missing one: NOXATTR.
        let r = run42(
            &mut s,
            vec![putfh(&fh), setxattr("color", b"red", setxattr4_create())],
        )
        .await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_EXIST);
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                setxattr("shape", b"round", setxattr_option4::SETXATTR4_REPLACE),
            ],
        )
        .await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_NOXATTR);
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                setxattr("color", b"red", setxattr_option4::SETXATTR4_REPLACE),
                setxattr("shape", b"round", setxattr_option4::SETXATTR4_EITHER),
                getxattr("color"),
            ],
        )
        .await;
        ok(&r);
        let nfs_resop4::OP_GETXATTR(GETXATTR4res::NFS4_OK(v)) = &r.resarray[4] else {
            panic!()
        };
        assert_eq!(&v[..], b"red");
        // LISTXATTRS: all names at once, then one per call with cookies, and a
        // maxcount too small for any name.
        let r = run42(&mut s, vec![putfh(&fh), listxattrs(0, 4096)]).await;
        let nfs_resop4::OP_LISTXATTRS(LISTXATTRS4res::NFS4_OK(l)) = &r.resarray[2] else {
            panic!("{:?}", r.resarray)
        };
        assert_eq!(
            l.lxr_names,
            vec![Bytes::from("color"), Bytes::from("shape")]
        );
        assert!(l.lxr_eof);
        let mut cookie = 0;
        let mut names = Vec::new();
        loop {
            let r = run42(&mut s, vec![putfh(&fh), listxattrs(cookie, 8 + 4 + 4 + 12)]).await;
            let nfs_resop4::OP_LISTXATTRS(LISTXATTRS4res::NFS4_OK(l)) = &r.resarray[2] else {
                panic!("{:?}", r.resarray)
            };
            assert_eq!(l.lxr_names.len(), 1);
            names.extend(l.lxr_names.clone());
            cookie = l.lxr_cookie;
            if l.lxr_eof {
                break;
            }
        }
        assert_eq!(names.len(), 2);
        let r = run42(&mut s, vec![putfh(&fh), listxattrs(0, 16)]).await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_TOOSMALL);
        // REMOVEXATTR, then it is gone.
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_REMOVEXATTR(REMOVEXATTR4args {
                    rxa_name: Bytes::from_static(b"color"),
                }),
            ],
        )
        .await;
        ok(&r);
        let r = run42(&mut s, vec![putfh(&fh), getxattr("color")]).await;
        assert_eq!(last_status(&r), nfsstat4::NFS4ERR_NOXATTR);
        if let Some(d) = &dir {
            assert_eq!(host_xattr(&d.join("f"), "color"), None);
        }
        // ACCESS reports the extended-attribute bits in 4.2.
        let r = run42(
            &mut s,
            vec![
                putfh(&fh),
                nfs_argop4::OP_ACCESS(ACCESS4args {
                    access: 0x40 | 0x80 | 0x100,
                }),
            ],
        )
        .await;
        let nfs_resop4::OP_ACCESS(ACCESS4res::NFS4_OK(a)) = &r.resarray[2] else {
            panic!("{:?}", r.resarray)
        };
        assert_eq!((a.supported, a.access), (0x1c0, 0x1c0));
        drop(srv);
        if let Some(d) = dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn setxattr4_create() -> setxattr_option4 {
    setxattr_option4::SETXATTR4_CREATE
}

#[tokio::test]
async fn the_42_attributes_are_reported_in_42_only() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"attrs").await;
    let xattr_support = 82u32;
    let request = vec![1u32, 0, 1 << (xattr_support - 64)]; // SUPPORTED_ATTRS + xattr_support
    let ops = || {
        vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: request.clone(),
            }),
        ]
    };
    let r = s.run(ops()).await;
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(v41)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(
        v41.obj_attributes.attrmask,
        vec![1],
        "4.1: no xattr_support"
    );
    let r = run42(&mut s, ops()).await;
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(v42)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(v42.obj_attributes.attrmask, request);
    let vals = &v42.obj_attributes.attr_vals;
    // supported_attrs: a bitmap of 3 words whose third has xattr_support; then true.
    assert_eq!(&vals[..4], &[0, 0, 0, 3]);
    let w2 = u32::from_be_bytes(vals[12..16].try_into().unwrap());
    assert_ne!(w2 & (1 << (xattr_support - 64)), 0);
    assert_eq!(&vals[vals.len() - 4..], &[0, 0, 0, 1]);
}

/// A transactional 4.2 COMPOUND (ADR 0021) whose last op fails leaves nothing of its
/// DEALLOCATE, ALLOCATE and COPY behind: the `txn` layer undoes them like writes.
#[tokio::test]
async fn range_changes_in_a_failed_transaction_are_undone() {
    let (srv, dir) = start_local_server("v42-txn").await;
    let mut s = Session::new(srv.addr, b"txn42").await;
    let body: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
    let (a_sid, a) = file_with(&mut s, "a", &[(0, &body)]).await;
    let (b_sid, b) = file_with(&mut s, "b", &[(0, b"keep me")]).await;
    s.seq += 1;
    let ops = vec![
        s.sequence(0, s.seq),
        putfh(&a),
        nfs_argop4::OP_DEALLOCATE(DEALLOCATE4args {
            da_stateid: a_sid.clone(),
            da_offset: 0,
            da_length: 8192,
        }),
        nfs_argop4::OP_ALLOCATE(ALLOCATE4args {
            aa_stateid: a_sid.clone(),
            aa_offset: 0,
            aa_length: 100_000,
        }),
        nfs_argop4::OP_SAVEFH,
        putfh(&b),
        copy(&a_sid, &b_sid, 0, 0, 20_000),
        // Fails: the whole transaction is rolled back.
        lookup("no-such-name"),
    ];
    let r = s
        .call_txn(encode_compound_minor(ops, 2))
        .await
        .expect("transactions are on");
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTDIR, "{:?}", r.resarray);
    assert_eq!(std::fs::read(dir.join("a")).unwrap(), body);
    assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"keep me");
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}
