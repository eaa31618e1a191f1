//! MOUNT v3 (RFC 1813 appendix I) on the NFS port, the NFSv3 duplicate request cache
//! (a retransmission with the same xid gets the first reply, ADR 0039), and the write
//! verifier, which changes when the server restarts (RFC 1813 §3.3.7) while handles
//! and READDIR cookies with their verifier do not.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_proto::mnt3::{self, mountres3, mountstat3};
use txnfs_proto::nfs3::*;
use txnfs_rawclient::v3::{dirop, mountproc3, proc3, sattr_none, V3Client};
use txnfs_xdr::{Decode, Encode};

fn mnt_status(r: &mountres3) -> mountstat3 {
    match r {
        mountres3::MNT3_OK(_) => mountstat3::MNT3_OK,
        mountres3::default(s) => *s,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_resolves_exports_and_their_directories() {
    // Two exports under a pseudo root, one with a subdirectory.
    let a = std::env::temp_dir().join(format!("txnfs-v3-mnt-a-{}", std::process::id()));
    let b = std::env::temp_dir().join(format!("txnfs-v3-mnt-b-{}", std::process::id()));
    std::fs::create_dir_all(a.join("sub/deeper")).unwrap();
    std::fs::write(a.join("file"), b"x").unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (pa, pb) = (a.clone(), b.clone());
    let srv = start_server(move |state| {
        let mut cfg = local_config(pa, state);
        cfg.exports[0].name = "/data".into();
        let mut second = cfg.exports[0].clone();
        second.name = "/other/b".into();
        second.path = pb;
        cfg.exports.push(second);
        cfg
    })
    .await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    assert!(c.mount_raw(mountproc3::NULL, &[]).await.unwrap().is_empty());

    // MNT of an export: its root handle, AUTH_SYS.
    let root = match c.mnt("/data").await.unwrap() {
        mountres3::MNT3_OK(ok) => {
            assert_eq!(ok.auth_flavors, vec![1]);
            assert!(ok.fhandle.len() <= 64);
            nfs_fh3 { data: ok.fhandle }
        }
        other => panic!("MNT /data: {other:?}"),
    };
    // A directory below it (with untidy slashes): LOOKUP's handle of the same one.
    let sub = c.root("/data//sub/./deeper/").await;
    let LOOKUP3res::NFS3_OK(s) = c
        .nfs(
            proc3::LOOKUP,
            &LOOKUP3args {
                what: dirop(&root, "sub"),
            },
        )
        .await
        .unwrap()
    else {
        panic!("LOOKUP sub")
    };
    let LOOKUP3res::NFS3_OK(d) = c
        .nfs(
            proc3::LOOKUP,
            &LOOKUP3args {
                what: dirop(&s.object, "deeper"),
            },
        )
        .await
        .unwrap()
    else {
        panic!("LOOKUP deeper")
    };
    assert_eq!(d.object, sub);
    assert_eq!(
        mnt_status(&c.mnt("/other/b").await.unwrap()),
        mountstat3::MNT3_OK
    );
    // Unknown paths, paths that climb, the pseudo directory above an export, a file.
    for (path, want) in [
        ("/nope", mountstat3::MNT3ERR_NOENT),
        ("/data/missing", mountstat3::MNT3ERR_NOENT),
        ("/data/../other/b", mountstat3::MNT3ERR_NOENT),
        ("/other", mountstat3::MNT3ERR_NOENT),
        ("data", mountstat3::MNT3ERR_NOENT),
        ("/data/file", mountstat3::MNT3ERR_NOTDIR),
    ] {
        assert_eq!(mnt_status(&c.mnt(path).await.unwrap()), want, "MNT {path}");
    }

    // DUMP lists what this host mounted; UMNT takes one off, UMNTALL the rest.
    assert_eq!(
        dump(&c).await,
        vec!["/data", "/data//sub/./deeper/", "/other/b"]
    );
    let path: mnt3::dirpath = Bytes::from_static(b"/data");
    assert!(c
        .mount_raw(mountproc3::UMNT, &path.to_bytes())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(dump(&c).await, vec!["/data//sub/./deeper/", "/other/b"]);
    c.mount_raw(mountproc3::UMNTALL, &[]).await.unwrap();
    assert!(dump(&c).await.is_empty());

    // EXPORT: both exports, with their client specs: without rules, this host only.
    let reply = c.mount_raw(mountproc3::EXPORT, &[]).await.unwrap();
    let list = mnt3::exports::from_bytes(reply).unwrap();
    let mut dirs: Vec<&[u8]> = list.0.iter().map(|e| &e.ex_dir[..]).collect();
    dirs.sort();
    assert_eq!(dirs, vec![&b"/data"[..], b"/other/b"]);
    for e in &list.0 {
        let groups: Vec<&[u8]> = e.ex_groups.0.iter().map(|g| &g.gr_name[..]).collect();
        assert_eq!(groups, vec![&b"127.0.0.0/8"[..], b"::1"]);
    }
    drop(srv);
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// DUMP: the directories this host mounted, sorted.
async fn dump(c: &V3Client) -> Vec<String> {
    let b = c.mount_raw(mountproc3::DUMP, &[]).await.unwrap();
    let list = mnt3::mountlist::from_bytes(b).unwrap();
    let mut dirs: Vec<String> = list
        .0
        .iter()
        .map(|m| {
            assert_eq!(&m.ml_hostname[..], b"127.0.0.1");
            String::from_utf8(m.ml_directory.to_vec()).unwrap()
        })
        .collect();
    dirs.sort();
    dirs
}

/// The bytes of a v3 reply, for comparing replies byte for byte.
async fn raw(c: &V3Client, xid: u32, proc_num: u32, args: &impl Encode) -> Bytes {
    c.call_raw(xid, 100003, 3, proc_num, &args.to_bytes())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retransmission_gets_the_first_reply_and_runs_once() {
    let srv = start_memory_server().await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;

    // CREATE GUARDED, retransmitted with the same xid: the first reply (OK, the same
    // handle), not EXIST.
    let create = CREATE3args {
        r#where: dirop(&root, "f"),
        how: createhow3::GUARDED(sattr_none()),
    };
    let xid = 0x5eed_0001;
    let first = raw(&c, xid, proc3::CREATE, &create).await;
    assert!(matches!(
        CREATE3res::from_bytes(first.clone()),
        Ok(CREATE3res::NFS3_OK(_))
    ));
    let again = raw(&c, xid, proc3::CREATE, &create).await;
    assert_eq!(again, first, "the cached reply, byte for byte");
    // With a new xid it is a new call: EXIST.
    let new = raw(&c, xid + 1, proc3::CREATE, &create).await;
    assert!(matches!(
        CREATE3res::from_bytes(new),
        Ok(CREATE3res::default(nfsstat3::NFS3ERR_EXIST, _))
    ));

    // REMOVE, retransmitted: NFS3_OK twice, one effect; a new xid: NOENT.
    let remove = REMOVE3args {
        object: dirop(&root, "f"),
    };
    let xid = 0x5eed_0100;
    let first = raw(&c, xid, proc3::REMOVE, &remove).await;
    assert!(matches!(
        REMOVE3res::from_bytes(first.clone()),
        Ok(REMOVE3res::NFS3_OK(_))
    ));
    let again = raw(&c, xid, proc3::REMOVE, &remove).await;
    assert_eq!(again, first);
    let new = raw(&c, xid + 1, proc3::REMOVE, &remove).await;
    assert!(matches!(
        REMOVE3res::from_bytes(new),
        Ok(REMOVE3res::default(nfsstat3::NFS3ERR_NOENT, _))
    ));

    // The same xid from another connection of the same host is the same call (a
    // client that reconnected from another port).
    let mkdir = MKDIR3args {
        r#where: dirop(&root, "d"),
        attributes: sattr_none(),
    };
    let xid = 0x5eed_0200;
    let first = raw(&c, xid, proc3::MKDIR, &mkdir).await;
    let other = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    assert_eq!(raw(&other, xid, proc3::MKDIR, &mkdir).await, first);

    // The same xid with other arguments is another call.
    let mkdir2 = MKDIR3args {
        r#where: dirop(&root, "d2"),
        attributes: sattr_none(),
    };
    let second = raw(&c, xid, proc3::MKDIR, &mkdir2).await;
    assert!(matches!(
        MKDIR3res::from_bytes(second),
        Ok(MKDIR3res::NFS3_OK(_))
    ));

    // Idempotent procedures are not cached: LOOKUP with a reused xid runs again.
    let lookup = LOOKUP3args {
        what: dirop(&root, "gone"),
    };
    let xid = 0x5eed_0300;
    let before = raw(&c, xid, proc3::LOOKUP, &lookup).await;
    assert!(matches!(
        LOOKUP3res::from_bytes(before),
        Ok(LOOKUP3res::default(nfsstat3::NFS3ERR_NOENT, _))
    ));
    let made = CREATE3args {
        r#where: dirop(&root, "gone"),
        how: createhow3::UNCHECKED(sattr_none()),
    };
    raw(&c, 0x5eed_0301, proc3::CREATE, &made).await;
    let after = raw(&c, xid, proc3::LOOKUP, &lookup).await;
    assert!(matches!(
        LOOKUP3res::from_bytes(after),
        Ok(LOOKUP3res::NFS3_OK(_))
    ));
}

/// A server of one local export on `export`, with its state in `state`; stopped by
/// `stop`.
async fn serve(
    export: &std::path::Path,
    state: &std::path::Path,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> TestServer {
    let (export, state) = (export.to_path_buf(), state.to_path_buf());
    start_server_until(move |_| local_config(export, &state), async move {
        let _ = stop.await;
    })
    .await
}

async fn write_verf(c: &V3Client, fh: &nfs_fh3) -> [u8; 8] {
    let r: WRITE3res = c
        .nfs(
            proc3::WRITE,
            &WRITE3args {
                file: fh.clone(),
                offset: 0,
                count: 3,
                stable: stable_how::UNSTABLE,
                data: Bytes::from_static(b"abc"),
            },
        )
        .await
        .unwrap();
    match r {
        WRITE3res::NFS3_OK(ok) => ok.verf,
        other => panic!("WRITE: {other:?}"),
    }
}

async fn commit_verf(c: &V3Client, fh: &nfs_fh3) -> [u8; 8] {
    let r: COMMIT3res = c
        .nfs(
            proc3::COMMIT,
            &COMMIT3args {
                file: fh.clone(),
                offset: 0,
                count: 0,
            },
        )
        .await
        .unwrap();
    match r {
        COMMIT3res::NFS3_OK(ok) => ok.verf,
        other => panic!("COMMIT: {other:?}"),
    }
}

/// One READDIR page of `dir` after `cookie`: the names, the cookie to go on from
/// (`None` at the end), the verifier.
async fn readdir_page(
    c: &V3Client,
    dir: &nfs_fh3,
    cookie: u64,
    cookieverf: [u8; 8],
) -> (Vec<String>, Option<u64>, [u8; 8]) {
    let r: READDIR3res = c
        .nfs(
            proc3::READDIR,
            &READDIR3args {
                dir: dir.clone(),
                cookie,
                cookieverf,
                count: 400,
            },
        )
        .await
        .unwrap();
    let READDIR3res::NFS3_OK(ok) = r else {
        panic!("READDIR after {cookie}: {r:?}")
    };
    let names = ok
        .reply
        .entries
        .iter()
        .map(|e| String::from_utf8(e.name.to_vec()).unwrap())
        .collect();
    let last = ok.reply.entries.last().map(|e| e.cookie);
    let next = if ok.reply.eof { None } else { last };
    (names, next, ok.cookieverf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_verifier_changes_on_restart_and_handles_stay() {
    let base = std::env::temp_dir().join(format!("txnfs-v3-restart-{}", std::process::id()));
    let (export, state) = (base.join("export"), base.join("state"));
    std::fs::create_dir_all(&export).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let mut srv = serve(&export, &state, stopped).await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;
    let r: CREATE3res = c
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "f"),
                how: createhow3::UNCHECKED(sattr_none()),
            },
        )
        .await
        .unwrap();
    let CREATE3res::NFS3_OK(ok) = r else {
        panic!("CREATE: {r:?}")
    };
    let post_op_fh3::TRUE(f) = ok.obj else {
        panic!("no handle")
    };
    let before = write_verf(&c, &f).await;
    assert_eq!(commit_verf(&c, &f).await, before);
    // A listing begun before the restart: its first page.
    for i in 0..30 {
        std::fs::write(export.join(format!("n{i:02}")), b"").unwrap();
    }
    let (mut names, mut cookie, verf) = readdir_page(&c, &root, 0, [0; 8]).await;
    assert!(cookie.is_some(), "more than one page");
    drop(c);

    // A clean stop, then a new server on the same state directory.
    stop.send(()).unwrap();
    (&mut srv.task).await.unwrap();
    let server = std::sync::Arc::downgrade(&srv.server);
    drop(srv);
    for _ in 0..100 {
        if server.strong_count() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let srv = serve(&export, &state, stopped).await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    // The handle from before the restart still names the file.
    let r: GETATTR3res = c
        .nfs(proc3::GETATTR, &GETATTR3args { object: f.clone() })
        .await
        .unwrap();
    assert!(matches!(r, GETATTR3res::NFS3_OK(_)), "{r:?}");
    // The listing goes on with the cookie and verifier from before the restart: the
    // cookies are the file system's offsets and the verifier is the export's.
    while let Some(at) = cookie {
        let (more, next, again) = readdir_page(&c, &root, at, verf).await;
        assert_eq!(again, verf);
        names.extend(more);
        cookie = next;
    }
    names.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("n{i:02}")).collect();
    want.extend(["f".to_string(), ".".to_string(), "..".to_string()]);
    want.sort();
    assert_eq!(names, want);
    // The verifier is another: a client must resend its uncommitted writes.
    let after = commit_verf(&c, &f).await;
    assert_ne!(after, before, "COMMIT's verifier after a restart");
    assert_eq!(write_verf(&c, &f).await, after);
    drop(srv);
    let _ = std::fs::remove_dir_all(&base);
}
