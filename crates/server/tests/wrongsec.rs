//! NFS4ERR_WRONGSEC where RFC 8881 §2.6.3.1.1 puts it, op by op, over real TCP with
//! raw COMPOUNDs (ADR 0043, ADR 0051). The export `/k` admits 127.0.0.1 only over
//! RPC-with-TLS (`sec=tls`: a plain connection is the wrong flavour, as AUTH_SYS is
//! for `sec=krb5p`, through the same rule decision, without a KDC) and 127.0.0.2 with
//! AUTH_SYS; `/open` admits everyone with AUTH_SYS. The client from 127.0.0.2
//! fetches the handles; the plain client from 127.0.0.1 must:
//!
//! - be able to ask which flavours `/k` wants: PUTFH + SECINFO_NO_NAME, PUTFH +
//!   SECINFO, PUTROOTFH + SECINFO succeed (§2.6.3.1.1.5);
//! - lose the current filehandle to SECINFO / SECINFO_NO_NAME (§2.6.3.1.1.8);
//! - get WRONGSEC at the put-filehandle op followed by any other op (§2.6.3.1.1.7),
//!   not at one followed by nothing (.6) or by another put-filehandle op (.2);
//! - get WRONGSEC at LOOKUP (.3), not at a LOOKUPP out of the export (.4);
//! - get no WRONGSEC at PUTFH + SAVEFH (.1), and WRONGSEC at a RESTOREFH of it.

mod common;

use bytes::Bytes;
use common::*;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use txnfs_rpc::RpcClient;
use txnfs_server::exportrules::parse_rule;
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig};

const HERE: [u8; 4] = [127, 0, 0, 1];
const OTHER: [u8; 4] = [127, 0, 0, 2];

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

async fn session_from(local: [u8; 4], addr: SocketAddr, owner: &[u8]) -> Session {
    let cl = RpcClient::connect_from(IpAddr::from(local), addr, sys_cred(0, 0))
        .await
        .unwrap();
    Session::on(cl, owner).await
}

fn putfh(fh: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

fn getattr() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![1 << FATTR4_TYPE],
    })
}

fn secinfo_no_name(style: secinfo_style4) -> nfs_argop4 {
    nfs_argop4::OP_SECINFO_NO_NAME(style)
}

fn secinfo(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_SECINFO(SECINFO4args {
        name: Bytes::copy_from_slice(name.as_bytes()),
    })
}

/// The statuses of every op after SEQUENCE, and the COMPOUND's.
fn statuses(r: &COMPOUND4res) -> (Vec<nfsstat4>, nfsstat4) {
    assert_eq!(
        status_of(&r.resarray[0]),
        nfsstat4::NFS4_OK,
        "SEQUENCE: {:?}",
        r.resarray
    );
    (r.resarray[1..].iter().map(status_of).collect(), r.status)
}

fn getfh(r: &COMPOUND4res) -> Bytes {
    match r.resarray.last() {
        Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(ok))) => ok.object.clone(),
        other => panic!("GETFH: {other:?} in {:?}", r.resarray),
    }
}

/// The answer of SECINFO / SECINFO_NO_NAME for `/k`: AUTH_SYS (over TLS) only.
fn assert_k_flavours(res: &nfs_resop4) {
    let list = match res {
        nfs_resop4::OP_SECINFO_NO_NAME(SECINFO4res::NFS4_OK(f))
        | nfs_resop4::OP_SECINFO(SECINFO4res::NFS4_OK(f)) => f,
        other => panic!("SECINFO: {other:?}"),
    };
    let flavours: Vec<u32> = list.iter().map(|f| f.discriminant()).collect();
    assert_eq!(flavours, vec![AUTH_SYS], "flavours of /k: {list:?}");
}

#[tokio::test]
async fn wrongsec_follows_rfc8881_2_6_3_1_1() {
    let top = tempfile::tempdir().unwrap();
    let (k, open) = (top.path().join("k"), top.path().join("open"));
    std::fs::create_dir_all(k.join("sub")).unwrap();
    std::fs::create_dir_all(&open).unwrap();
    std::fs::write(k.join("f"), b"secret").unwrap();
    let srv = start_server(move |state| Config {
        exports: vec![
            export(
                "/k",
                &k,
                &["127.0.0.1(rw,sec=tls)", "127.0.0.2(rw,sec=sys)"],
            ),
            export("/open", &open, &["127.0.0.0/8(rw)"]),
        ],
        state_dir: Some(state.to_path_buf()),
        grace: false,
        ..Config::default()
    })
    .await;

    // The handles, from the client the rules admit with AUTH_SYS.
    let mut other = session_from(OTHER, srv.addr, b"other").await;
    let mut fh_of = async |path: &[&str]| {
        let mut ops = vec![nfs_argop4::OP_PUTROOTFH];
        ops.extend(path.iter().map(|n| lookup(n)));
        ops.push(nfs_argop4::OP_GETFH);
        let r = other.run(ops).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{path:?}: {:?}", r.resarray);
        getfh(&r)
    };
    let k_root = fh_of(&["k"]).await;
    let k_file = fh_of(&["k", "f"]).await;
    let open_root = fh_of(&["open"]).await;

    use nfsstat4::*;
    let mut s = session_from(HERE, srv.addr, b"here").await;

    // §2.6.3.1.1.5: PUTFH + SECINFO_NO_NAME answers, with the flavour /k refuses.
    let r = s
        .run(vec![
            putfh(&k_root),
            secinfo_no_name(secinfo_style4::SECINFO_STYLE4_CURRENT_FH),
        ])
        .await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK], NFS4_OK));
    assert_k_flavours(&r.resarray[2]);

    // §2.6.3.1.1.8: SECINFO_NO_NAME consumed the current filehandle.
    let r = s
        .run(vec![
            putfh(&k_root),
            secinfo_no_name(secinfo_style4::SECINFO_STYLE4_CURRENT_FH),
            getattr(),
        ])
        .await;
    assert_eq!(
        statuses(&r),
        (
            vec![NFS4_OK, NFS4_OK, NFS4ERR_NOFILEHANDLE],
            NFS4ERR_NOFILEHANDLE
        )
    );

    // PUTFH + SECINFO of a name in /k; then the current filehandle is gone too.
    let r = s
        .run(vec![putfh(&k_root), secinfo("f"), nfs_argop4::OP_GETFH])
        .await;
    assert_eq!(
        statuses(&r),
        (
            vec![NFS4_OK, NFS4_OK, NFS4ERR_NOFILEHANDLE],
            NFS4ERR_NOFILEHANDLE
        )
    );
    assert_k_flavours(&r.resarray[2]);

    // SECINFO_NO_NAME of the parent of a file of /k: /k's flavours.
    let r = s
        .run(vec![
            putfh(&k_file),
            secinfo_no_name(secinfo_style4::SECINFO_STYLE4_PARENT),
        ])
        .await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK], NFS4_OK));
    assert_k_flavours(&r.resarray[2]);

    // PUTROOTFH + SECINFO of the export's name (the pseudo root is admitted).
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, secinfo("k")]).await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK], NFS4_OK));
    assert_k_flavours(&r.resarray[2]);

    // §2.6.3.1.1.7: PUTFH + anything else fails at PUTFH.
    for next in [getattr(), nfs_argop4::OP_GETFH, nfs_argop4::OP_READLINK] {
        let r = s.run(vec![putfh(&k_root), next.clone()]).await;
        assert_eq!(
            statuses(&r),
            (vec![NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC),
            "PUTFH + {next:?}"
        );
    }
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("k"), getattr()])
        .await;
    // §2.6.3.1.1.3: LOOKUP into /k fails, not the put-filehandle op before it.
    assert_eq!(
        statuses(&r),
        (vec![NFS4_OK, NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC)
    );
    let r = s.run(vec![putfh(&k_root), lookup("sub"), getattr()]).await;
    assert_eq!(
        statuses(&r),
        (vec![NFS4_OK, NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC)
    );

    // §2.6.3.1.1.6: a put-filehandle op that nothing uses does not fail.
    let r = s.run(vec![putfh(&k_root)]).await;
    assert_eq!(statuses(&r), (vec![NFS4_OK], NFS4_OK));

    // §2.6.3.1.1.2: only the last of several put-filehandle ops is checked.
    let r = s
        .run(vec![putfh(&k_root), putfh(&open_root), getattr()])
        .await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK, NFS4_OK], NFS4_OK));
    let r = s
        .run(vec![putfh(&open_root), putfh(&k_root), getattr()])
        .await;
    assert_eq!(
        statuses(&r),
        (vec![NFS4_OK, NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC)
    );

    // §2.6.3.1.1.4: LOOKUPP from /k's root reaches the pseudo root, which admits.
    let r = s
        .run(vec![putfh(&k_root), nfs_argop4::OP_LOOKUPP, getattr()])
        .await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK, NFS4_OK], NFS4_OK));
    // From inside /k the parent is /k: LOOKUPP fails.
    let r = s
        .run(vec![putfh(&k_file), nfs_argop4::OP_LOOKUPP, getattr()])
        .await;
    assert_eq!(
        statuses(&r),
        (vec![NFS4_OK, NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC)
    );

    // §2.6.3.1.1.1: PUTFH + SAVEFH do not fail; RESTOREFH checks again, and an op
    // on the unadmitted filehandle is refused.
    let r = s
        .run(vec![
            putfh(&k_file),
            nfs_argop4::OP_SAVEFH,
            putfh(&open_root),
            getattr(),
            nfs_argop4::OP_RESTOREFH,
            getattr(),
        ])
        .await;
    assert_eq!(
        statuses(&r),
        (
            vec![NFS4_OK, NFS4_OK, NFS4_OK, NFS4_OK, NFS4ERR_WRONGSEC],
            NFS4ERR_WRONGSEC
        )
    );
    let r = s
        .run(vec![putfh(&k_file), nfs_argop4::OP_SAVEFH, getattr()])
        .await;
    assert_eq!(
        statuses(&r),
        (vec![NFS4_OK, NFS4_OK, NFS4ERR_WRONGSEC], NFS4ERR_WRONGSEC)
    );
    // The saved filehandle of /k cannot be the source of a RENAME into /open... nor
    // of one in /k.
    let r = s
        .run(vec![
            putfh(&k_root),
            nfs_argop4::OP_SAVEFH,
            putfh(&open_root),
            nfs_argop4::OP_RENAME(RENAME4args {
                oldname: Bytes::from_static(b"f"),
                newname: Bytes::from_static(b"g"),
            }),
        ])
        .await;
    assert_eq!(
        statuses(&r),
        (
            vec![NFS4_OK, NFS4_OK, NFS4_OK, NFS4ERR_WRONGSEC],
            NFS4ERR_WRONGSEC
        )
    );
    assert!(top.path().join("k/f").exists());

    // The admitted client reads /k as before (the rules were not loosened).
    let r = other.run(vec![putfh(&k_file), getattr()]).await;
    assert_eq!(statuses(&r), (vec![NFS4_OK, NFS4_OK], NFS4_OK));
}
