//! NFSv3 over real TCP (RFC 1813 §3.3): every procedure with its success and its
//! main failures, against a local export whose files the test also reads on the
//! host. The calls go through the raw v3 client (`txnfs_rawclient::v3`).

mod common;

use bytes::Bytes;
use common::*;
use txnfs_proto::nfs3::*;
use txnfs_rawclient::v3::{dirop, proc3, sattr_mode, sattr_none, V3Client};

async fn client(srv: &TestServer) -> V3Client {
    V3Client::connect(srv.addr, root_cred())
        .await
        .expect("connect")
}

fn fh_of(obj: &post_op_fh3) -> nfs_fh3 {
    match obj {
        post_op_fh3::TRUE(fh) => fh.clone(),
        post_op_fh3::FALSE => panic!("no handle in the reply"),
    }
}

fn attrs_of(a: &post_op_attr) -> fattr3 {
    match a {
        post_op_attr::TRUE(a) => a.clone(),
        post_op_attr::FALSE => panic!("no attributes in the reply"),
    }
}

async fn create(c: &V3Client, dir: &nfs_fh3, name: &str, how: createhow3) -> CREATE3res {
    c.nfs(
        proc3::CREATE,
        &CREATE3args {
            r#where: dirop(dir, name),
            how,
        },
    )
    .await
    .unwrap()
}

async fn create_ok(c: &V3Client, dir: &nfs_fh3, name: &str) -> nfs_fh3 {
    match create(c, dir, name, createhow3::GUARDED(sattr_mode(0o644))).await {
        CREATE3res::NFS3_OK(ok) => fh_of(&ok.obj),
        other => panic!("CREATE {name}: {other:?}"),
    }
}

fn status_of_getattr(r: &GETATTR3res) -> nfsstat3 {
    match r {
        GETATTR3res::NFS3_OK(_) => nfsstat3::NFS3_OK,
        GETATTR3res::default(s) => *s,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_read_write_commit_and_attributes() {
    let (srv, dir) = start_local_server("v3-files").await;
    let c = client(&srv).await;
    let root = c.root("/").await;

    // GETATTR of the root: a directory.
    let GETATTR3res::NFS3_OK(r) = c.getattr(&root).await.unwrap() else {
        panic!("GETATTR root")
    };
    assert_eq!(r.obj_attributes.r#type, ftype3::NF3DIR);

    // LOOKUP of a missing name: NOENT, with the directory's attributes.
    match c.lookup(&root, "missing").await.unwrap() {
        LOOKUP3res::default(s, fail) => {
            assert_eq!(s, nfsstat3::NFS3ERR_NOENT);
            assert!(matches!(fail.dir_attributes, post_op_attr::TRUE(_)));
        }
        other => panic!("LOOKUP missing: {other:?}"),
    }

    // CREATE GUARDED; again: EXIST. The directory's wcc data is exact.
    let f = match create(&c, &root, "f", createhow3::GUARDED(sattr_mode(0o640))).await {
        CREATE3res::NFS3_OK(ok) => {
            assert!(
                matches!(ok.dir_wcc.before, pre_op_attr::TRUE(_)),
                "pre-op attributes"
            );
            assert!(matches!(ok.dir_wcc.after, post_op_attr::TRUE(_)));
            assert_eq!(attrs_of(&ok.obj_attributes).mode, 0o640);
            fh_of(&ok.obj)
        }
        other => panic!("CREATE f: {other:?}"),
    };
    match create(&c, &root, "f", createhow3::GUARDED(sattr_none())).await {
        CREATE3res::default(s, _) => assert_eq!(s, nfsstat3::NFS3ERR_EXIST),
        other => panic!("GUARDED over an existing file: {other:?}"),
    }
    // LOOKUP finds the same handle.
    let LOOKUP3res::NFS3_OK(l) = c.lookup(&root, "f").await.unwrap() else {
        panic!("LOOKUP f")
    };
    assert_eq!(l.object, f);

    // WRITE: FILE_SYNC is answered FILE_SYNC, UNSTABLE UNSTABLE; both with the
    // server's verifier, which COMMIT repeats.
    let verf = match c
        .write(&f, 0, b"hello ", stable_how::FILE_SYNC)
        .await
        .unwrap()
    {
        WRITE3res::NFS3_OK(ok) => {
            assert_eq!((ok.count, ok.committed), (6, stable_how::FILE_SYNC));
            assert!(matches!(ok.file_wcc.before, pre_op_attr::TRUE(_)));
            assert_eq!(attrs_of(&ok.file_wcc.after).size, 6);
            ok.verf
        }
        other => panic!("WRITE: {other:?}"),
    };
    match c
        .write(&f, 6, b"world", stable_how::UNSTABLE)
        .await
        .unwrap()
    {
        WRITE3res::NFS3_OK(ok) => {
            assert_eq!(
                (ok.count, ok.committed, ok.verf),
                (5, stable_how::UNSTABLE, verf)
            );
        }
        other => panic!("WRITE unstable: {other:?}"),
    }
    let commit: COMMIT3res = c
        .nfs(
            proc3::COMMIT,
            &COMMIT3args {
                file: f.clone(),
                offset: 0,
                count: 0,
            },
        )
        .await
        .unwrap();
    match commit {
        COMMIT3res::NFS3_OK(ok) => assert_eq!(ok.verf, verf),
        other => panic!("COMMIT: {other:?}"),
    }
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"hello world");

    // READ: the bytes, eof at the end.
    let read: READ3res = c
        .nfs(
            proc3::READ,
            &READ3args {
                file: f.clone(),
                offset: 0,
                count: 100,
            },
        )
        .await
        .unwrap();
    match read {
        READ3res::NFS3_OK(ok) => {
            assert_eq!(
                (&ok.data[..], ok.count, ok.eof),
                (&b"hello world"[..], 11, true)
            );
        }
        other => panic!("READ: {other:?}"),
    }

    // SETATTR with a stale guard: NOT_SYNC, nothing changed; with the right one, done.
    let GETATTR3res::NFS3_OK(now) = c.getattr(&f).await.unwrap() else {
        panic!("GETATTR f")
    };
    let mut truncate = sattr_none();
    truncate.size = set_size3::TRUE(5);
    let stale_guard = nfstime3 {
        seconds: now.obj_attributes.ctime.seconds.wrapping_sub(100),
        nseconds: 0,
    };
    let r: SETATTR3res = c
        .nfs(
            proc3::SETATTR,
            &SETATTR3args {
                object: f.clone(),
                new_attributes: truncate.clone(),
                guard: sattrguard3::TRUE(stale_guard),
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, SETATTR3res::default(nfsstat3::NFS3ERR_NOT_SYNC, _)),
        "{r:?}"
    );
    let r: SETATTR3res = c
        .nfs(
            proc3::SETATTR,
            &SETATTR3args {
                object: f.clone(),
                new_attributes: truncate,
                guard: sattrguard3::TRUE(now.obj_attributes.ctime),
            },
        )
        .await
        .unwrap();
    match r {
        SETATTR3res::NFS3_OK(ok) => assert_eq!(attrs_of(&ok.obj_wcc.after).size, 5),
        other => panic!("SETATTR: {other:?}"),
    }
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"hello");

    // ACCESS: root may do everything to a file it asks about but look it up.
    let r: ACCESS3res = c
        .nfs(
            proc3::ACCESS,
            &ACCESS3args {
                object: f.clone(),
                access: ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_LOOKUP,
            },
        )
        .await
        .unwrap();
    match r {
        ACCESS3res::NFS3_OK(ok) => assert_eq!(ok.access, ACCESS3_READ | ACCESS3_MODIFY),
        other => panic!("ACCESS: {other:?}"),
    }

    // READ of a directory: ISDIR; WRITE of one: ISDIR.
    let r: READ3res = c
        .nfs(
            proc3::READ,
            &READ3args {
                file: root.clone(),
                offset: 0,
                count: 1,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, READ3res::default(nfsstat3::NFS3ERR_ISDIR, _)),
        "{r:?}"
    );

    // FSSTAT, FSINFO, PATHCONF of the root.
    let r: FSSTAT3res = c
        .nfs(
            proc3::FSSTAT,
            &FSSTAT3args {
                fsroot: root.clone(),
            },
        )
        .await
        .unwrap();
    match r {
        FSSTAT3res::NFS3_OK(ok) => assert!(ok.tbytes > 0 && ok.tbytes >= ok.fbytes),
        other => panic!("FSSTAT: {other:?}"),
    }
    let r: FSINFO3res = c
        .nfs(
            proc3::FSINFO,
            &FSINFOargs {
                fsroot: root.clone(),
            },
        )
        .await
        .unwrap();
    match r {
        FSINFO3res::NFS3_OK(ok) => {
            assert!(ok.rtmax >= 4096 && ok.wtmax >= 4096 && ok.dtpref > 0);
            assert_ne!(ok.properties & FSF3_CANSETTIME, 0);
        }
        other => panic!("FSINFO: {other:?}"),
    }
    let r: PATHCONF3res = c
        .nfs(proc3::PATHCONF, &PATHCONF3args { object: f.clone() })
        .await
        .unwrap();
    match r {
        PATHCONF3res::NFS3_OK(ok) => assert_eq!((ok.name_max, ok.no_trunc), (255, true)),
        other => panic!("PATHCONF: {other:?}"),
    }
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_create_is_exactly_once() {
    let srv = start_memory_server().await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let verf = *b"verifier";
    let first = match create(&c, &root, "x", createhow3::EXCLUSIVE(verf)).await {
        CREATE3res::NFS3_OK(ok) => fh_of(&ok.obj),
        other => panic!("EXCLUSIVE: {other:?}"),
    };
    // The client's retransmission (a new xid, as after a reconnect): the same file.
    match create(&c, &root, "x", createhow3::EXCLUSIVE(verf)).await {
        CREATE3res::NFS3_OK(ok) => assert_eq!(fh_of(&ok.obj), first),
        other => panic!("EXCLUSIVE retransmitted: {other:?}"),
    }
    // Another client's verifier: EXIST.
    match create(&c, &root, "x", createhow3::EXCLUSIVE(*b"another!")).await {
        CREATE3res::default(s, _) => assert_eq!(s, nfsstat3::NFS3ERR_EXIST),
        other => panic!("EXCLUSIVE with another verifier: {other:?}"),
    }
    // A name that is a directory: EXIST in every mode.
    let r: MKDIR3res = c
        .nfs(
            proc3::MKDIR,
            &MKDIR3args {
                r#where: dirop(&root, "dir"),
                attributes: sattr_none(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, MKDIR3res::NFS3_OK(_)), "{r:?}");
    for how in [
        createhow3::UNCHECKED(sattr_none()),
        createhow3::GUARDED(sattr_none()),
        createhow3::EXCLUSIVE(verf),
    ] {
        match create(&c, &root, "dir", how).await {
            CREATE3res::default(s, _) => assert_eq!(s, nfsstat3::NFS3ERR_EXIST),
            other => panic!("CREATE over a directory: {other:?}"),
        }
    }
    // UNCHECKED over it opens it.
    match create(&c, &root, "x", createhow3::UNCHECKED(sattr_none())).await {
        CREATE3res::NFS3_OK(ok) => assert_eq!(fh_of(&ok.obj), first),
        other => panic!("UNCHECKED over an existing file: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_links_and_names() {
    let (srv, dir) = start_local_server("v3-dirs").await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let f = create_ok(&c, &root, "f").await;

    // MKDIR; again: EXIST.
    let mkdir = |name: &'static str| MKDIR3args {
        r#where: dirop(&root, name),
        attributes: sattr_mode(0o755),
    };
    let d = match c
        .nfs::<_, MKDIR3res>(proc3::MKDIR, &mkdir("d"))
        .await
        .unwrap()
    {
        MKDIR3res::NFS3_OK(ok) => {
            assert_eq!(attrs_of(&ok.obj_attributes).r#type, ftype3::NF3DIR);
            fh_of(&ok.obj)
        }
        other => panic!("MKDIR: {other:?}"),
    };
    let r: MKDIR3res = c.nfs(proc3::MKDIR, &mkdir("d")).await.unwrap();
    assert!(
        matches!(r, MKDIR3res::default(nfsstat3::NFS3ERR_EXIST, _)),
        "{r:?}"
    );
    create_ok(&c, &d, "inner").await;

    // SYMLINK and READLINK; READLINK of a file: INVAL.
    let r: SYMLINK3res = c
        .nfs(
            proc3::SYMLINK,
            &SYMLINK3args {
                r#where: dirop(&root, "l"),
                symlink: symlinkdata3 {
                    symlink_attributes: sattr_none(),
                    symlink_data: Bytes::from_static(b"f"),
                },
            },
        )
        .await
        .unwrap();
    let l = match r {
        SYMLINK3res::NFS3_OK(ok) => fh_of(&ok.obj),
        other => panic!("SYMLINK: {other:?}"),
    };
    let r: READLINK3res = c
        .nfs(proc3::READLINK, &READLINK3args { symlink: l })
        .await
        .unwrap();
    match r {
        READLINK3res::NFS3_OK(ok) => assert_eq!(&ok.data[..], b"f"),
        other => panic!("READLINK: {other:?}"),
    }
    let r: READLINK3res = c
        .nfs(proc3::READLINK, &READLINK3args { symlink: f.clone() })
        .await
        .unwrap();
    assert!(
        matches!(r, READLINK3res::default(nfsstat3::NFS3ERR_INVAL, _)),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_link(dir.join("l")).unwrap(),
        std::path::PathBuf::from("f")
    );

    // MKNOD: a FIFO is made; a character device is root's only; a bad type BADTYPE.
    let r: MKNOD3res = c
        .nfs(
            proc3::MKNOD,
            &MKNOD3args {
                r#where: dirop(&root, "fifo"),
                what: mknoddata3::NF3FIFO(sattr_mode(0o600)),
            },
        )
        .await
        .unwrap();
    match r {
        MKNOD3res::NFS3_OK(ok) => assert_eq!(attrs_of(&ok.obj_attributes).r#type, ftype3::NF3FIFO),
        MKNOD3res::default(s, _) => assert_eq!(s, nfsstat3::NFS3ERR_NOTSUPP, "MKNOD FIFO"),
    }
    let user = V3Client::connect(srv.addr, sys_cred(1000, 1000))
        .await
        .unwrap();
    let r: MKNOD3res = user
        .nfs(
            proc3::MKNOD,
            &MKNOD3args {
                r#where: dirop(&root, "chr"),
                what: mknoddata3::NF3CHR(devicedata3 {
                    dev_attributes: sattr_none(),
                    spec: specdata3 {
                        specdata1: 1,
                        specdata2: 3,
                    },
                }),
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, MKNOD3res::default(nfsstat3::NFS3ERR_PERM, _)),
        "{r:?}"
    );

    // LINK: the file gets a second name and link count 2; LINK to a directory: ISDIR.
    let link = |file: &nfs_fh3, name: &'static str| LINK3args {
        file: file.clone(),
        link: dirop(&root, name),
    };
    let r: LINK3res = c.nfs(proc3::LINK, &link(&f, "f2")).await.unwrap();
    match r {
        LINK3res::NFS3_OK(ok) => {
            assert_eq!(attrs_of(&ok.file_attributes).nlink, 2);
            assert!(matches!(ok.linkdir_wcc.before, pre_op_attr::TRUE(_)));
        }
        other => panic!("LINK: {other:?}"),
    }
    let r: LINK3res = c.nfs(proc3::LINK, &link(&d, "d2")).await.unwrap();
    assert!(
        matches!(r, LINK3res::default(nfsstat3::NFS3ERR_ISDIR, _)),
        "{r:?}"
    );

    // REMOVE of a directory: ISDIR; RMDIR of a file: NOTDIR; of a full one: NOTEMPTY.
    let remove = |name: &'static str| REMOVE3args {
        object: dirop(&root, name),
    };
    let rmdir = |name: &'static str| RMDIR3args {
        object: dirop(&root, name),
    };
    let r: REMOVE3res = c.nfs(proc3::REMOVE, &remove("d")).await.unwrap();
    assert!(
        matches!(r, REMOVE3res::default(nfsstat3::NFS3ERR_ISDIR, _)),
        "{r:?}"
    );
    let r: RMDIR3res = c.nfs(proc3::RMDIR, &rmdir("f")).await.unwrap();
    assert!(
        matches!(r, RMDIR3res::default(nfsstat3::NFS3ERR_NOTDIR, _)),
        "{r:?}"
    );
    let r: RMDIR3res = c.nfs(proc3::RMDIR, &rmdir("d")).await.unwrap();
    assert!(
        matches!(r, RMDIR3res::default(nfsstat3::NFS3ERR_NOTEMPTY, _)),
        "{r:?}"
    );
    let r: REMOVE3res = c.nfs(proc3::REMOVE, &remove("missing")).await.unwrap();
    assert!(
        matches!(r, REMOVE3res::default(nfsstat3::NFS3ERR_NOENT, _)),
        "{r:?}"
    );

    // RENAME f2 → g: both wcc data exact.
    let r: RENAME3res = c
        .nfs(
            proc3::RENAME,
            &RENAME3args {
                fromfile: dirop(&root, "f2"),
                tofile: dirop(&root, "g"),
            },
        )
        .await
        .unwrap();
    match r {
        RENAME3res::NFS3_OK(ok) => {
            assert!(matches!(ok.fromdir_wcc.before, pre_op_attr::TRUE(_)));
            assert!(matches!(ok.todir_wcc.after, post_op_attr::TRUE(_)));
        }
        other => panic!("RENAME: {other:?}"),
    }
    assert!(dir.join("g").exists() && !dir.join("f2").exists());

    // REMOVE g; the file lives on as f. Then the removed name's LOOKUP: NOENT.
    let r: REMOVE3res = c.nfs(proc3::REMOVE, &remove("g")).await.unwrap();
    assert!(matches!(r, REMOVE3res::NFS3_OK(_)), "{r:?}");
    assert!(matches!(
        c.lookup(&root, "g").await.unwrap(),
        LOOKUP3res::default(nfsstat3::NFS3ERR_NOENT, _)
    ));
    // LOOKUP of "." and "..": the directory itself, and at the export's root the root.
    let LOOKUP3res::NFS3_OK(dot) = c.lookup(&d, "..").await.unwrap() else {
        panic!("LOOKUP ..")
    };
    assert_eq!(dot.object, root);
    let LOOKUP3res::NFS3_OK(up) = c.lookup(&root, "..").await.unwrap() else {
        panic!("LOOKUP .. of the root")
    };
    assert_eq!(up.object, root);
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_and_readdirplus_with_cookie_verifiers() {
    let srv = start_memory_server().await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let mut names: Vec<String> = (0..40).map(|i| format!("file-{i:02}")).collect();
    for n in &names {
        create_ok(&c, &root, n).await;
    }
    // READDIR in small pages, following the cookies with the verifier given.
    let mut seen = Vec::new();
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    loop {
        let r: READDIR3res = c
            .nfs(
                proc3::READDIR,
                &READDIR3args {
                    dir: root.clone(),
                    cookie,
                    cookieverf: verf,
                    count: 512,
                },
            )
            .await
            .unwrap();
        let READDIR3res::NFS3_OK(ok) = r else {
            panic!("READDIR: {r:?}")
        };
        verf = ok.cookieverf;
        for e in &ok.reply.entries {
            seen.push(String::from_utf8(e.name.to_vec()).unwrap());
            cookie = e.cookie;
        }
        if ok.reply.eof {
            break;
        }
        assert!(!ok.reply.entries.is_empty());
    }
    let mut want = vec![".".to_string(), "..".to_string()];
    want.append(&mut names);
    seen.sort();
    want.sort();
    assert_eq!(seen, want);

    // A cookie with a verifier that is not ours: BAD_COOKIE.
    let r: READDIR3res = c
        .nfs(
            proc3::READDIR,
            &READDIR3args {
                dir: root.clone(),
                cookie,
                cookieverf: *b"stalever",
                count: 4096,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, READDIR3res::default(nfsstat3::NFS3ERR_BAD_COOKIE, _)),
        "{r:?}"
    );
    // A count too small for one entry: TOOSMALL.
    let r: READDIR3res = c
        .nfs(
            proc3::READDIR,
            &READDIR3args {
                dir: root.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                count: 100,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, READDIR3res::default(nfsstat3::NFS3ERR_TOOSMALL, _)),
        "{r:?}"
    );

    // READDIRPLUS: each entry's handle is LOOKUP's, its attributes its GETATTR's.
    let r: READDIRPLUS3res = c
        .nfs(
            proc3::READDIRPLUS,
            &READDIRPLUS3args {
                dir: root.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 8192,
                maxcount: 65536,
            },
        )
        .await
        .unwrap();
    let READDIRPLUS3res::NFS3_OK(ok) = r else {
        panic!("READDIRPLUS: {r:?}")
    };
    assert!(ok.reply.eof);
    assert_eq!(ok.reply.entries.len(), 42);
    for e in ok
        .reply
        .entries
        .iter()
        .filter(|e| e.name.starts_with(b"file-"))
    {
        let name = std::str::from_utf8(&e.name).unwrap();
        let LOOKUP3res::NFS3_OK(l) = c.lookup(&root, name).await.unwrap() else {
            panic!("LOOKUP {name}")
        };
        assert_eq!(fh_of(&e.name_handle), l.object, "{name}");
        assert_eq!(attrs_of(&e.name_attributes).fileid, e.fileid);
    }
    // READDIR of a file: NOTDIR.
    let f = create_ok(&c, &root, "plain").await;
    let r: READDIR3res = c
        .nfs(
            proc3::READDIR,
            &READDIR3args {
                dir: f,
                cookie: 0,
                cookieverf: [0; 8],
                count: 4096,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, READDIR3res::default(nfsstat3::NFS3ERR_NOTDIR, _)),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_handles_stale_handles_garbage_and_read_only_exports() {
    let srv = start_memory_server().await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let f = create_ok(&c, &root, "f").await;

    // A forged handle (one bit of its key flipped): BADHANDLE; a short one too.
    let mut forged = f.data.to_vec();
    forged[5] ^= 1;
    let forged = nfs_fh3 {
        data: Bytes::from(forged),
    };
    assert_eq!(
        status_of_getattr(&c.getattr(&forged).await.unwrap()),
        nfsstat3::NFS3ERR_BADHANDLE
    );
    let short = nfs_fh3 {
        data: Bytes::from_static(b"short"),
    };
    assert_eq!(
        status_of_getattr(&c.getattr(&short).await.unwrap()),
        nfsstat3::NFS3ERR_BADHANDLE
    );

    // A removed file's handle: STALE.
    let r: REMOVE3res = c
        .nfs(
            proc3::REMOVE,
            &REMOVE3args {
                object: dirop(&root, "f"),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, REMOVE3res::NFS3_OK(_)));
    assert_eq!(
        status_of_getattr(&c.getattr(&f).await.unwrap()),
        nfsstat3::NFS3ERR_STALE
    );

    // Arguments that do not decode: GARBAGE_ARGS, and the connection serves on.
    let garbage = c
        .call_raw(c.rpc.next_xid(), 100003, 3, proc3::LOOKUP, &[0, 0, 0])
        .await;
    assert!(
        matches!(
            garbage,
            Err(txnfs_rawclient::tcp::CallError::Rpc(
                txnfs_rpc::RpcError::GarbageArgs
            ))
        ),
        "{garbage:?}"
    );
    // A procedure v3 does not have: PROC_UNAVAIL.
    let unknown = c.call_raw(c.rpc.next_xid(), 100003, 3, 22, &[]).await;
    assert!(
        matches!(
            unknown,
            Err(txnfs_rawclient::tcp::CallError::Rpc(
                txnfs_rpc::RpcError::ProcUnavail
            ))
        ),
        "{unknown:?}"
    );
    assert_eq!(
        status_of_getattr(&c.getattr(&root).await.unwrap()),
        nfsstat3::NFS3_OK
    );

    // A read-only export: every change is ROFS, reads work.
    let ro = start_server(|dir| {
        let mut cfg = memory_config(dir, false);
        cfg.exports[0].read_only = true;
        cfg
    })
    .await;
    let c = client(&ro).await;
    let root = c.root("/").await;
    match create(&c, &root, "f", createhow3::UNCHECKED(sattr_none())).await {
        CREATE3res::default(s, _) => assert_eq!(s, nfsstat3::NFS3ERR_ROFS),
        other => panic!("CREATE on a read-only export: {other:?}"),
    }
    let r: MKDIR3res = c
        .nfs(
            proc3::MKDIR,
            &MKDIR3args {
                r#where: dirop(&root, "d"),
                attributes: sattr_none(),
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, MKDIR3res::default(nfsstat3::NFS3ERR_ROFS, _)),
        "{r:?}"
    );
    let r: SETATTR3res = c
        .nfs(
            proc3::SETATTR,
            &SETATTR3args {
                object: root.clone(),
                new_attributes: sattr_mode(0o700),
                guard: sattrguard3::FALSE,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, SETATTR3res::default(nfsstat3::NFS3ERR_ROFS, _)),
        "{r:?}"
    );
    assert_eq!(
        status_of_getattr(&c.getattr(&root).await.unwrap()),
        nfsstat3::NFS3_OK
    );
}

/// Hostile input: every procedure's arguments cut short at every length up to a real
/// call's, and random bytes, get GARBAGE_ARGS or a well-formed reply — never a panic,
/// a dropped call or a closed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_random_arguments_never_break_the_server() {
    use txnfs_rawclient::tcp::CallError;
    use txnfs_rpc::RpcError;
    use txnfs_xdr::Encode;
    let srv = start_memory_server().await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let f = create_ok(&c, &root, "f").await;
    // A well-formed call of each kind; its prefixes are the malformed ones.
    let calls: Vec<(u32, Bytes)> = vec![
        (
            proc3::SETATTR,
            SETATTR3args {
                object: f.clone(),
                new_attributes: sattr_mode(0o600),
                guard: sattrguard3::FALSE,
            }
            .to_bytes(),
        ),
        (
            proc3::LOOKUP,
            LOOKUP3args {
                what: dirop(&root, "f"),
            }
            .to_bytes(),
        ),
        (
            proc3::WRITE,
            WRITE3args {
                file: f.clone(),
                offset: 0,
                count: 3,
                stable: stable_how::UNSTABLE,
                data: Bytes::from_static(b"abc"),
            }
            .to_bytes(),
        ),
        (
            proc3::CREATE,
            CREATE3args {
                r#where: dirop(&root, "g"),
                how: createhow3::EXCLUSIVE(*b"12345678"),
            }
            .to_bytes(),
        ),
        (
            proc3::SYMLINK,
            SYMLINK3args {
                r#where: dirop(&root, "l"),
                symlink: symlinkdata3 {
                    symlink_attributes: sattr_none(),
                    symlink_data: Bytes::from_static(b"t"),
                },
            }
            .to_bytes(),
        ),
        (
            proc3::MKNOD,
            MKNOD3args {
                r#where: dirop(&root, "n"),
                what: mknoddata3::NF3FIFO(sattr_none()),
            }
            .to_bytes(),
        ),
        (
            proc3::RENAME,
            RENAME3args {
                fromfile: dirop(&root, "x"),
                tofile: dirop(&root, "y"),
            }
            .to_bytes(),
        ),
        (
            proc3::LINK,
            LINK3args {
                file: f.clone(),
                link: dirop(&root, "k"),
            }
            .to_bytes(),
        ),
        (
            proc3::READDIRPLUS,
            READDIRPLUS3args {
                dir: root.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 100,
                maxcount: 1000,
            }
            .to_bytes(),
        ),
    ];
    let mut garbage = 0;
    for (proc_num, full) in &calls {
        for len in 0..full.len() {
            match c
                .call_raw(c.rpc.next_xid(), 100003, 3, *proc_num, &full[..len])
                .await
            {
                Err(CallError::Rpc(RpcError::GarbageArgs)) => garbage += 1,
                // A prefix that happens to decode (an opaque cut at its end) is a call.
                Ok(_) => {}
                Err(e) => panic!(
                    "procedure {proc_num} with {len} of {} bytes: {e}",
                    full.len()
                ),
            }
        }
    }
    assert!(garbage > 100, "{garbage} malformed calls refused");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..200u32 {
        let bytes: Vec<u8> = (0..(i % 97))
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let proc_num = 1 + i % 21;
        match c
            .call_raw(c.rpc.next_xid(), 100003, 3, proc_num, &bytes)
            .await
        {
            Ok(_) | Err(CallError::Rpc(RpcError::GarbageArgs)) => {}
            Err(e) => panic!("procedure {proc_num} with random bytes: {e}"),
        }
    }
    assert_eq!(srv.server.stats.snapshot().panics, 0);
    assert_eq!(
        status_of_getattr(&c.getattr(&root).await.unwrap()),
        nfsstat3::NFS3_OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_sync_writes_are_answered_file_sync() {
    let srv = start_memory_server().await;
    let c = client(&srv).await;
    let root = c.root("/").await;
    let f = create_ok(&c, &root, "f").await;
    match c.write(&f, 0, b"abc", stable_how::DATA_SYNC).await.unwrap() {
        WRITE3res::NFS3_OK(ok) => assert_eq!((ok.count, ok.committed), (3, stable_how::FILE_SYNC)),
        other => panic!("WRITE DATA_SYNC: {other:?}"),
    }
    // More data than `count` says: only `count` bytes are written; less is INVAL.
    let r: WRITE3res = c
        .nfs(
            proc3::WRITE,
            &WRITE3args {
                file: f.clone(),
                offset: 0,
                count: 5,
                stable: stable_how::FILE_SYNC,
                data: Bytes::from_static(b"abc"),
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(r, WRITE3res::default(nfsstat3::NFS3ERR_INVAL, _)),
        "{r:?}"
    );
    let r: WRITE3res = c
        .nfs(
            proc3::WRITE,
            &WRITE3args {
                file: f.clone(),
                offset: 0,
                count: 1,
                stable: stable_how::FILE_SYNC,
                data: Bytes::from_static(b"XYZ"),
            },
        )
        .await
        .unwrap();
    match r {
        WRITE3res::NFS3_OK(ok) => assert_eq!(attrs_of(&ok.file_wcc.after).size, 3),
        other => panic!("WRITE: {other:?}"),
    }
    let r: READ3res = c
        .nfs(
            proc3::READ,
            &READ3args {
                file: f,
                offset: 0,
                count: 10,
            },
        )
        .await
        .unwrap();
    match r {
        READ3res::NFS3_OK(ok) => assert_eq!(&ok.data[..], b"Xbc"),
        other => panic!("READ: {other:?}"),
    }
}
