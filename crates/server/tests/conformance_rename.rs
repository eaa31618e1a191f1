//! RENAME onto itself over real TCP (RFC 8881 §18.26.3, issue 8): when source and
//! target name the same object — the same name in the same directory, or two hard
//! links to one file — RENAME returns NFS4_OK and changes nothing, so both
//! change_info4s show `before == after` and the directories' change attribute does
//! not move. Files and directories, on the memory and the local backend.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_server::nfs::*;
use txnfs_server::BackendKind;

/// GETATTR of the `change` attribute (bit 3).
fn getattr_change() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![1 << 3],
    })
}

fn change_of(r: &nfs_resop4) -> u64 {
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = r else {
        panic!("GETATTR result {r:?}")
    };
    let v = &g.obj_attributes.attr_vals;
    u64::from_be_bytes(v[..8].try_into().expect("8 bytes of change"))
}

fn link(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_LINK(LINK4args {
        newname: Bytes::copy_from_slice(name.as_bytes()),
    })
}

/// root: file "f" with hard links "g" and "sub/h", directory "d".
async fn populate(s: &mut Session) {
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, open_new("f")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(open)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: open.stateid.clone(),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("d"),
            nfs_argop4::OP_PUTROOTFH,
            mkdir("sub"),
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            nfs_argop4::OP_SAVEFH,
            nfs_argop4::OP_PUTROOTFH,
            link("g"),
            lookup("sub"),
            link("h"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

/// RENAME `from` (in the root) to `to` (in the root, or in `sub` when `to_sub`), and
/// checks that it succeeded and changed nothing.
async fn rename_onto_itself(s: &mut Session, from: &str, to: &str, to_sub: bool) {
    let mut target = vec![nfs_argop4::OP_PUTROOTFH];
    if to_sub {
        target.push(lookup("sub"));
    }
    let mut ops = vec![nfs_argop4::OP_PUTROOTFH, getattr_change()];
    ops.extend(target.clone());
    ops.push(getattr_change());
    ops.extend([nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_SAVEFH]);
    ops.extend(target);
    ops.extend([
        rename(from, to),
        getattr_change(),
        nfs_argop4::OP_RESTOREFH,
        getattr_change(),
        lookup(from),
    ]);
    let r = s.run(ops).await;
    let what = format!("RENAME {from} to {}{to}", if to_sub { "sub/" } else { "" });
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{what}: {:?}", r.resarray);
    let res = &r.resarray[1..];
    let src_before = change_of(&res[1]);
    let dst_before = change_of(&res[if to_sub { 4 } else { 3 }]);
    let at = res
        .iter()
        .position(|x| matches!(x, nfs_resop4::OP_RENAME(_)))
        .expect("RENAME result");
    let nfs_resop4::OP_RENAME(RENAME4res::NFS4_OK(ok)) = &res[at] else {
        panic!("{what}: {:?}", res[at])
    };
    assert_eq!(
        ok.source_cinfo.before, ok.source_cinfo.after,
        "{what}: source change_info"
    );
    assert_eq!(
        ok.target_cinfo.before, ok.target_cinfo.after,
        "{what}: target change_info"
    );
    assert_eq!(ok.source_cinfo.before, src_before, "{what}");
    assert_eq!(ok.target_cinfo.before, dst_before, "{what}");
    assert_eq!(change_of(&res[at + 1]), dst_before, "{what}: target change");
    assert_eq!(change_of(&res[at + 3]), src_before, "{what}: source change");
}

async fn check(mut s: Session) {
    populate(&mut s).await;
    rename_onto_itself(&mut s, "f", "f", false).await;
    rename_onto_itself(&mut s, "d", "d", false).await;
    rename_onto_itself(&mut s, "f", "g", false).await;
    rename_onto_itself(&mut s, "g", "h", true).await;
    // Every name is still there.
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            nfs_argop4::OP_PUTROOTFH,
            lookup("g"),
            nfs_argop4::OP_PUTROOTFH,
            lookup("d"),
            nfs_argop4::OP_PUTROOTFH,
            lookup("sub"),
            lookup("h"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

#[tokio::test]
async fn rename_onto_itself_changes_nothing_memory() {
    let (_srv, s) = start_with_session(b"rename-self-mem").await;
    check(s).await;
}

#[tokio::test]
async fn rename_onto_itself_changes_nothing_local() {
    let dir = std::env::temp_dir().join(format!("txnfs-rename-self-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("export directory");
    let export = dir.clone();
    let srv = start_server(move |state_dir| {
        let mut c = memory_config(state_dir, false);
        c.exports[0].backend = BackendKind::Local;
        c.exports[0].path = export;
        c
    })
    .await;
    let s = Session::new(srv.addr, b"rename-self-local").await;
    check(s).await;
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}
