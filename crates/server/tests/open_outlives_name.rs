//! A file a client has open outlives its name (issue 8, item 3): when another client
//! removes it or renames another file over it, the opener's READ, WRITE and CLOSE on
//! its stateid still succeed — the open state keeps the object alive, as an open
//! descriptor does in POSIX — and once the last open is closed the object is gone
//! (its handle is NFS4ERR_STALE). On the memory backend and on a local directory.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_server::nfs::*;

/// How the opened file loses its name.
#[derive(Clone, Copy, Debug)]
enum Unname {
    Remove,
    RenameOver,
}

fn read_all(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: sid.clone(),
        offset: 0,
        count: 4096,
    })
}

fn putfh(fh: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

fn close(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_CLOSE(CLOSE4args {
        seqid: 0,
        open_stateid: sid.clone(),
    })
}

/// Client A opens and writes "f"; client B takes its name away; A goes on. Returns what
/// the export's "f" holds afterwards through B (None when the name is gone).
async fn opener_goes_on(srv: &TestServer, how: Unname) -> Option<Vec<u8>> {
    let mut a = Session::new(srv.addr, b"opener").await;
    let mut b = Session::new(srv.addr, b"other").await;
    let (sid, fh) = a.open_new_file("f").await;
    let r = a.run(vec![putfh(&fh), write(&sid, 0, b"abc")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    match how {
        Unname::Remove => {
            let r = b.run(vec![nfs_argop4::OP_PUTROOTFH, remove("f")]).await;
            assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        }
        Unname::RenameOver => {
            let (gsid, gfh) = b.open_new_file("g").await;
            let r = b
                .run(vec![putfh(&gfh), write(&gsid, 0, b"other"), close(&gsid)])
                .await;
            assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
            let r = b
                .run(vec![
                    nfs_argop4::OP_PUTROOTFH,
                    nfs_argop4::OP_SAVEFH,
                    rename("g", "f"),
                ])
                .await;
            assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        }
    }

    // A's open still works: write more, read it all back, close.
    let r = a
        .run(vec![putfh(&fh), write(&sid, 3, b"def"), read_all(&sid)])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{how:?}: {:?}", r.resarray);
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[3] else {
        panic!("READ result {:?}", r.resarray)
    };
    assert_eq!(&rd.data[..], b"abcdef", "{how:?}");
    let r = a.run(vec![putfh(&fh), close(&sid)]).await;
    assert_eq!(
        r.status,
        nfsstat4::NFS4_OK,
        "{how:?}: CLOSE {:?}",
        r.resarray
    );

    // Closed: the nameless object is gone.
    let r = a
        .run(vec![
            putfh(&fh),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![1 << 4],
            }),
        ])
        .await;
    assert_eq!(
        r.status,
        nfsstat4::NFS4ERR_STALE,
        "{how:?}: {:?}",
        r.resarray
    );
    assert!(
        srv.server.held.is_empty(),
        "{how:?}: a hold outlived its open"
    );

    // What the name "f" shows now, through the other client.
    let (fsid, ffh) = match how {
        Unname::Remove => return None,
        Unname::RenameOver => b.open_new_file("f").await,
    };
    let r = b
        .run(vec![putfh(&ffh), read_all(&fsid), close(&fsid)])
        .await;
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[2] else {
        panic!("READ result {:?}", r.resarray)
    };
    Some(rd.data.to_vec())
}

#[tokio::test]
async fn open_file_outlives_remove_and_rename_memory() {
    for how in [Unname::Remove, Unname::RenameOver] {
        let srv = start_memory_server().await;
        let f = opener_goes_on(&srv, how).await;
        if let Unname::RenameOver = how {
            assert_eq!(
                f.as_deref(),
                Some(&b"other"[..]),
                "the name shows the new file"
            );
        }
    }
}

#[tokio::test]
async fn open_file_outlives_remove_and_rename_local() {
    for how in [Unname::Remove, Unname::RenameOver] {
        let (srv, dir) = start_local_server(&format!("open-outlives-{how:?}")).await;
        let f = opener_goes_on(&srv, how).await;
        let on_disk = std::fs::read(dir.join("f")).ok();
        let _ = std::fs::remove_dir_all(&dir);
        match how {
            Unname::Remove => assert_eq!(on_disk, None),
            Unname::RenameOver => {
                assert_eq!(f.as_deref(), Some(&b"other"[..]));
                assert_eq!(on_disk.as_deref(), Some(&b"other"[..]), "the file on disk");
            }
        }
    }
}
