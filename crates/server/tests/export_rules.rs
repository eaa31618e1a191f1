//! Export rules and squashing end to end (ADR 0043), over real TCP: a second host is
//! played by a client bound to 127.0.0.2. Three exports of local directories:
//!
//! - `/data`: `127.0.0.1(rw)` — root squashed (the default), 127.0.0.2 refused;
//! - `/ro`:   `127.0.0.1(ro,no_root_squash)`;
//! - `/all`:  `127.0.0.0/8(rw,all_squash,anonuid=1000,anongid=1000)`.
//!
//! Outcomes asserted: who may mount (MOUNT's MNT, NFSv4 PUTROOTFH/LOOKUP/PUTFH, the
//! pseudo root's listing) and read (NFSv3 and NFSv4 on the handles), the owners of the
//! files created on disk (root squash, all squash with anonuid), and ROFS for every
//! change on the read-only export (NFSv4 and NFSv3), with ACCESS granting no write;
//! NLM locks on a handle are admitted by the same rules.

mod common;

use bytes::Bytes;
use common::*;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use txnfs_proto::mnt3::{self, mountres3, mountstat3};
use txnfs_proto::nfs3::*;
use txnfs_proto::nlm4::{nlm4_lock, nlm4_lockargs, nlm4_res, nlm4_stats};
use txnfs_rawclient::v3::{dirop, mountproc3, proc3, sattr_none, V3Client};
use txnfs_rawclient::{open_plain, size_fattr};
use txnfs_rpc::RpcClient;
use txnfs_server::exportrules::parse_rule;
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig};
use txnfs_xdr::{Decode, Encode};

const HERE: [u8; 4] = [127, 0, 0, 1];
const OTHER: [u8; 4] = [127, 0, 0, 2];

struct Dirs {
    top: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Self {
        let top = tempfile::tempdir().unwrap();
        for d in ["data", "ro", "all"] {
            let p = top.path().join(d);
            std::fs::create_dir(&p).unwrap();
            // Writable by the anonymous users the squashing makes of the callers.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::write(top.path().join("data/hello"), b"hello").unwrap();
        std::fs::write(top.path().join("ro/file"), b"read me").unwrap();
        Dirs { top }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.top.path().join(p)
    }
}

fn export(name: &str, path: &Path, rules: &[&str]) -> ExportConfig {
    ExportConfig {
        name: name.into(),
        path: path.to_path_buf(),
        backend: BackendKind::Local,
        read_only: false,
        clients: rules.iter().map(|r| parse_rule(r).unwrap()).collect(),
        prebuilt: None,
    }
}

async fn start(dirs: &Dirs) -> TestServer {
    let (data, ro, all) = (dirs.path("data"), dirs.path("ro"), dirs.path("all"));
    start_server(move |state| Config {
        exports: vec![
            export("/data", &data, &["127.0.0.1(rw)"]),
            export("/ro", &ro, &["127.0.0.1(ro,no_root_squash)"]),
            export(
                "/all",
                &all,
                &["127.0.0.0/8(rw,all_squash,anonuid=1000,anongid=1000)"],
            ),
        ],
        state_dir: Some(state.to_path_buf()),
        grace: false,
        ..Config::default()
    })
    .await
}

/// A v4.1 session from `local` as root.
async fn session_from(local: [u8; 4], addr: SocketAddr, owner: &[u8]) -> Session {
    session_as(local, addr, owner, 0).await
}

async fn session_as(local: [u8; 4], addr: SocketAddr, owner: &[u8], uid: u32) -> Session {
    let cl = RpcClient::connect_from(IpAddr::from(local), addr, sys_cred(uid, uid))
        .await
        .unwrap();
    Session::on(cl, owner).await
}

async fn v3_from(local: [u8; 4], addr: SocketAddr, uid: u32) -> V3Client {
    V3Client::connect_from(IpAddr::from(local), addr, sys_cred(uid, uid))
        .await
        .unwrap()
}

fn readdir() -> nfs_argop4 {
    nfs_argop4::OP_READDIR(READDIR4args {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 1000,
        maxcount: 8000,
        attr_request: vec![],
    })
}

/// The names READDIR of the pseudo root lists to `s`.
async fn root_names(s: &mut Session) -> Vec<String> {
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, readdir()]).await;
    let nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(rd)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    rd.reply
        .entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect()
}

/// The status of the last op of a COMPOUND and how many ops ran.
fn last(r: &COMPOUND4res) -> (usize, nfsstat4) {
    (r.resarray.len(), r.status)
}

fn getfh(r: &COMPOUND4res) -> Bytes {
    match r.resarray.last() {
        Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(ok))) => ok.object.clone(),
        other => panic!("GETFH: {other:?} in {:?}", r.resarray),
    }
}

fn mnt_status(r: &mountres3) -> mountstat3 {
    match r {
        mountres3::MNT3_OK(_) => mountstat3::MNT3_OK,
        mountres3::default(s) => *s,
    }
}

#[tokio::test]
async fn a_client_outside_the_rules_cannot_mount_or_read() {
    let dirs = Dirs::new();
    let srv = start(&dirs).await;

    // From 127.0.0.1: the pseudo root lists every export; /data is mounted and read.
    let mut here = session_from(HERE, srv.addr, b"here").await;
    assert_eq!(root_names(&mut here).await, vec!["all", "data", "ro"]);
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("data"),
            nfs_argop4::OP_GETFH,
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let data_fh = getfh(&r);
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args {
                object: data_fh.clone(),
            }),
            nfs_argop4::OP_SECINFO_NO_NAME(secinfo_style4::SECINFO_STYLE4_CURRENT_FH),
        ])
        .await;
    match &r.resarray[2] {
        nfs_resop4::OP_SECINFO_NO_NAME(SECINFO4res::NFS4_OK(f)) => {
            assert_eq!(f.len(), 1);
            assert_eq!(f[0].discriminant(), AUTH_SYS, "{f:?}");
        }
        other => panic!("SECINFO_NO_NAME: {other:?}"),
    }

    // From 127.0.0.2: only /all is there; /data is not found, and its handle is
    // refused.
    let mut other = session_from(OTHER, srv.addr, b"other").await;
    assert_eq!(root_names(&mut other).await, vec!["all"]);
    let r = other
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("data")])
        .await;
    assert_eq!(last(&r), (3, nfsstat4::NFS4ERR_NOENT));
    let r = other
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args {
                object: data_fh.clone(),
            }),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![],
            }),
        ])
        .await;
    assert_eq!(last(&r), (2, nfsstat4::NFS4ERR_ACCESS));
    let r = other
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("all")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);

    // MOUNT v3: MNT refused from 127.0.0.2, granted (AUTH_SYS) from 127.0.0.1.
    let v3_other = v3_from(OTHER, srv.addr, 0).await;
    assert_eq!(
        mnt_status(&v3_other.mnt("/data").await.unwrap()),
        mountstat3::MNT3ERR_ACCES
    );
    assert_eq!(
        mnt_status(&v3_other.mnt("/all").await.unwrap()),
        mountstat3::MNT3_OK
    );
    let v3_here = v3_from(HERE, srv.addr, 0).await;
    let root = match v3_here.mnt("/data").await.unwrap() {
        mountres3::MNT3_OK(ok) => {
            assert_eq!(ok.auth_flavors, vec![1], "AUTH_SYS");
            nfs_fh3 { data: ok.fhandle }
        }
        other => panic!("MNT /data from 127.0.0.1: {other:?}"),
    };
    // EXPORT lists each export's clients as its groups.
    let list = mnt3::exports::from_bytes(v3_here.mount_raw(mountproc3::EXPORT, &[]).await.unwrap())
        .unwrap();
    let data = list.0.iter().find(|e| &e.ex_dir[..] == b"/data").unwrap();
    assert_eq!(&data.ex_groups.0[0].gr_name[..], b"127.0.0.1");

    // NFSv3 on the handle: read from 127.0.0.1, refused from 127.0.0.2.
    let LOOKUP3res::NFS3_OK(ok) = v3_here.lookup(&root, "hello").await.unwrap() else {
        panic!("LOOKUP from 127.0.0.1")
    };
    let read = READ3args {
        file: ok.object.clone(),
        offset: 0,
        count: 100,
    };
    match v3_here
        .nfs::<_, READ3res>(proc3::READ, &read)
        .await
        .unwrap()
    {
        READ3res::NFS3_OK(r) => assert_eq!(&r.data[..], b"hello"),
        other => panic!("READ from 127.0.0.1: {other:?}"),
    }
    assert!(matches!(
        v3_other.lookup(&root, "hello").await.unwrap(),
        LOOKUP3res::default(nfsstat3::NFS3ERR_ACCES, _)
    ));
    let r: READ3res = v3_other.nfs(proc3::READ, &read).await.unwrap();
    assert!(
        matches!(r, READ3res::default(nfsstat3::NFS3ERR_ACCES, _)),
        "{r:?}"
    );
    let r: GETATTR3res = v3_other
        .nfs(proc3::GETATTR, &GETATTR3args { object: root })
        .await
        .unwrap();
    assert!(matches!(r, GETATTR3res::default(nfsstat3::NFS3ERR_ACCES)));

    // NLM (v3 locks, same port) on the file's handle: refused from 127.0.0.2, granted
    // from 127.0.0.1.
    assert_eq!(
        nlm_lock_from(OTHER, srv.addr, &ok.object.data).await,
        nlm4_stats::NLM4_FAILED
    );
    assert_eq!(
        nlm_lock_from(HERE, srv.addr, &ok.object.data).await,
        nlm4_stats::NLM4_GRANTED
    );
}

/// A non-blocking NLM4 LOCK of the whole file `fh` from `local`: its status.
async fn nlm_lock_from(local: [u8; 4], addr: SocketAddr, fh: &Bytes) -> nlm4_stats {
    let cl = RpcClient::connect_from(IpAddr::from(local), addr, sys_cred(0, 0))
        .await
        .unwrap();
    let host = format!("host-{}", local[3]);
    let args = nlm4_lockargs {
        cookie: Bytes::from_static(b"c"),
        block: false,
        exclusive: true,
        alock: nlm4_lock {
            caller_name: Bytes::from(host.clone()),
            fh: fh.clone(),
            oh: Bytes::from(format!("1@{host}")),
            svid: 1,
            l_offset: 0,
            l_len: 0,
        },
        reclaim: false,
        state: 1,
    };
    const NLM_PROGRAM: u32 = 100021;
    const NLM4_LOCK: u32 = 2;
    let reply = cl
        .call(NLM_PROGRAM, 4, NLM4_LOCK, args.to_bytes())
        .await
        .unwrap();
    nlm4_res::from_bytes(reply).unwrap().stat.stat
}

#[tokio::test]
async fn root_is_squashed_and_all_squash_uses_anonuid() {
    let dirs = Dirs::new();
    let srv = start(&dirs).await;

    // Root from 127.0.0.1 on /data (root_squash): the file belongs to nobody.
    let mut here = session_from(HERE, srv.addr, b"here").await;
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("data"),
            open_new("by-root"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let m = std::fs::metadata(dirs.path("data/by-root")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // A directory made by root, too.
    let r = here
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("data"), mkdir("d")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(std::fs::metadata(dirs.path("data/d")).unwrap().uid(), 65534);
    // Root squashed may not touch what only root may: a root-owned 0600 file.
    std::fs::write(dirs.path("data/secret"), b"s").unwrap();
    std::fs::set_permissions(
        dirs.path("data/secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("data"),
            open_plain("secret", OPEN4_SHARE_ACCESS_READ, b"o"),
        ])
        .await;
    assert_eq!(last(&r), (4, nfsstat4::NFS4ERR_ACCESS));
    // On /ro (no_root_squash) root stays root: it reads the root-only file.
    std::fs::set_permissions(dirs.path("ro/file"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("ro"),
            open_plain("file", OPEN4_SHARE_ACCESS_READ, b"o"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    // NFSv3 CREATE as root from 127.0.0.1: nobody's file as well.
    let v3 = v3_from(HERE, srv.addr, 0).await;
    let root = v3.root("/data").await;
    let r: CREATE3res = v3
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "v3-by-root"),
                how: createhow3::UNCHECKED(sattr_none()),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, CREATE3res::NFS3_OK(_)), "{r:?}");
    let m = std::fs::metadata(dirs.path("data/v3-by-root")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));

    // all_squash,anonuid=1000 on /all: any caller, from either address, is 1000.
    for (local, uid, name) in [(OTHER, 4242, "by-4242"), (HERE, 0, "by-root")] {
        let mut s = session_as(local, srv.addr, name.as_bytes(), uid).await;
        let r = s
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                lookup("all"),
                open_new(name),
            ])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let m = std::fs::metadata(dirs.path(&format!("all/{name}"))).unwrap();
        assert_eq!((m.uid(), m.gid()), (1000, 1000), "{name}");
    }
    // One COMPOUND through two exports acts as each one's rules say, in turn.
    let r = here
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("all"),
            open_new("both-all"),
            nfs_argop4::OP_PUTROOTFH,
            lookup("data"),
            open_new("both-data"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let owner = |p: &str| std::fs::metadata(dirs.path(p)).unwrap().uid();
    assert_eq!(
        (owner("all/both-all"), owner("data/both-data")),
        (1000, 65534)
    );
    let v3 = v3_from(OTHER, srv.addr, 4242).await;
    let root = v3.root("/all").await;
    let r: MKDIR3res = v3
        .nfs(
            proc3::MKDIR,
            &MKDIR3args {
                r#where: dirop(&root, "v3-dir"),
                attributes: sattr_none(),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, MKDIR3res::NFS3_OK(_)), "{r:?}");
    let m = std::fs::metadata(dirs.path("all/v3-dir")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1000));
}

#[tokio::test]
async fn a_read_only_rule_refuses_every_change_with_rofs() {
    let dirs = Dirs::new();
    let srv = start(&dirs).await;
    let mut s = session_from(HERE, srv.addr, b"ro").await;
    let ro = |op: nfs_argop4| {
        let mut ops = vec![nfs_argop4::OP_PUTROOTFH, lookup("ro")];
        if matches!(op, nfs_argop4::OP_RENAME(_)) {
            ops.push(nfs_argop4::OP_SAVEFH);
        }
        ops.push(op);
        ops
    };
    for op in [
        open_new("new"),
        mkdir("dir"),
        remove("file"),
        rename("file", "moved"),
        open_plain("file", OPEN4_SHARE_ACCESS_WRITE, b"w"),
        nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
            stateid: stateid4::default(),
            obj_attributes: size_fattr(0),
        })),
    ] {
        let name = format!("{:?}", op.discriminant());
        let ops = ro(op);
        let n = ops.len() + 1;
        let r = s.run(ops).await;
        assert_eq!(
            last(&r),
            (n, nfsstat4::NFS4ERR_ROFS),
            "{name}: {:?}",
            r.resarray
        );
    }
    // Reading works; ACCESS grants no modify, extend or delete.
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("ro"),
            nfs_argop4::OP_ACCESS(ACCESS4args { access: 0x3f }),
        ])
        .await;
    match &r.resarray[3] {
        nfs_resop4::OP_ACCESS(ACCESS4res::NFS4_OK(a)) => {
            assert_ne!(a.access & ACCESS4_READ, 0, "{a:?}");
            assert_eq!(
                a.access & (ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE),
                0,
                "{a:?}"
            );
        }
        other => panic!("ACCESS: {other:?}"),
    }
    assert!(std::fs::metadata(dirs.path("ro/new")).is_err());
    assert_eq!(std::fs::read(dirs.path("ro/file")).unwrap(), b"read me");

    // NFSv3: CREATE, MKDIR, WRITE, REMOVE and SETATTR are NFS3ERR_ROFS; ACCESS
    // grants no write.
    let v3 = v3_from(HERE, srv.addr, 0).await;
    let root = v3.root("/ro").await;
    let LOOKUP3res::NFS3_OK(file) = v3
        .nfs::<_, LOOKUP3res>(proc3::LOOKUP, &dirop(&root, "file"))
        .await
        .unwrap()
    else {
        panic!("LOOKUP file")
    };
    let file = file.object;
    let statuses: Vec<Option<nfsstat3>> = vec![
        txnfs_rawclient::v3::status3(
            &v3.call_raw(
                v3.rpc.next_xid(),
                100003,
                3,
                proc3::CREATE,
                &txnfs_xdr::Encode::to_bytes(&CREATE3args {
                    r#where: dirop(&root, "new"),
                    how: createhow3::UNCHECKED(sattr_none()),
                }),
            )
            .await
            .unwrap(),
        ),
        txnfs_rawclient::v3::status3(
            &v3.call_raw(
                v3.rpc.next_xid(),
                100003,
                3,
                proc3::MKDIR,
                &txnfs_xdr::Encode::to_bytes(&MKDIR3args {
                    r#where: dirop(&root, "dir"),
                    attributes: sattr_none(),
                }),
            )
            .await
            .unwrap(),
        ),
        txnfs_rawclient::v3::status3(
            &v3.call_raw(
                v3.rpc.next_xid(),
                100003,
                3,
                proc3::WRITE,
                &txnfs_xdr::Encode::to_bytes(&WRITE3args {
                    file: file.clone(),
                    offset: 0,
                    count: 1,
                    stable: stable_how::FILE_SYNC,
                    data: Bytes::from_static(b"x"),
                }),
            )
            .await
            .unwrap(),
        ),
        txnfs_rawclient::v3::status3(
            &v3.call_raw(
                v3.rpc.next_xid(),
                100003,
                3,
                proc3::REMOVE,
                &txnfs_xdr::Encode::to_bytes(&dirop(&root, "file")),
            )
            .await
            .unwrap(),
        ),
    ];
    assert!(
        statuses.iter().all(|s| *s == Some(nfsstat3::NFS3ERR_ROFS)),
        "{statuses:?}"
    );
    let r: ACCESS3res = v3
        .nfs(
            proc3::ACCESS,
            &ACCESS3args {
                object: file,
                access: 0x3f,
            },
        )
        .await
        .unwrap();
    let ACCESS3res::NFS3_OK(a) = r else {
        panic!("ACCESS3: {r:?}")
    };
    assert_ne!(a.access & ACCESS3_READ, 0);
    assert_eq!(
        a.access & (ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE),
        0
    );
    assert_eq!(std::fs::read(dirs.path("ro/file")).unwrap(), b"read me");
}

#[tokio::test]
async fn a_root_export_refuses_a_client_outside_its_rules_at_putrootfh() {
    let dirs = Dirs::new();
    let data = dirs.path("data");
    let srv = start_server(move |state| Config {
        exports: vec![export("/", &data, &["127.0.0.1(rw,no_root_squash)"])],
        state_dir: Some(state.to_path_buf()),
        grace: false,
        ..Config::default()
    })
    .await;
    let mut other = session_from(OTHER, srv.addr, b"other").await;
    let r = other
        .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH])
        .await;
    assert_eq!(last(&r), (2, nfsstat4::NFS4ERR_ACCESS));
    let v3 = v3_from(OTHER, srv.addr, 0).await;
    assert_eq!(
        mnt_status(&v3.mnt("/").await.unwrap()),
        mountstat3::MNT3ERR_ACCES
    );
    let mut here = session_from(HERE, srv.addr, b"here").await;
    let r = here
        .run(vec![nfs_argop4::OP_PUTROOTFH, open_new("mine")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(std::fs::metadata(dirs.path("data/mine")).unwrap().uid(), 0);
}
