//! Optional NFSv4.1 features that nfs-rs can ask for: pathconf attributes,
//! named attributes (OPENATTR, used by nfs-rs's xattr calls) and ACLs. Neither
//! txnfs nor Ganesha (FSAL VFS) supports named attributes or the acl
//! attribute; each must refuse in exactly the way the RFC prescribes
//! (OPENATTR: NFS4ERR_NOTSUPP; GETATTR: the attribute left out), so a wrong
//! status fails, and the session must stay usable.

use bytes::Bytes;
use nfs_rs::{Mount, Nfs4ErrorCode as E, NfsError};
use txnfs_e2e::{create_with, ok, timed, Checks, ServerGuard, ServerKind};

/// OPENATTR on a server without named attributes: RFC 8881 §18.17.3 gives
/// NFS4ERR_NOTSUPP exactly (not INVAL, not a decode error).
fn refused_notsupp<T: std::fmt::Debug>(c: &mut Checks<'_>, what: &str, r: nfs_rs::Result<T>) {
    match r {
        Err(NfsError::Nfs4(E::NFS4ERR_NOTSUPP)) => {}
        other => c.check(
            false,
            format!("{what}: want NFS4ERR_NOTSUPP, got {other:?}"),
        ),
    }
}

/// GETATTR of an attribute the server does not support: the reply leaves it
/// out of the returned bitmap (RFC 8881 §5.6; GETATTR has no ATTRNOTSUPP),
/// which nfs-rs reports as exactly this message. Any status or other
/// decode error is a wrong answer.
fn attr_left_out<T: std::fmt::Debug>(
    c: &mut Checks<'_>,
    what: &str,
    r: nfs_rs::Result<T>,
    attr: &str,
) {
    let want = format!("server did not return {attr}");
    match r {
        Err(NfsError::Xdr(msg)) if msg == want => {}
        other => c.check(
            false,
            format!("{what}: want {attr} left out of the reply ({want:?}), got {other:?}"),
        ),
    }
}

async fn still_usable(c: &mut Checks<'_>, m: &dyn Mount, fh: &Bytes, after: &str) {
    match timed("getattr", m.getattr(fh.clone())).await {
        Ok(a) => c.check(
            a.filesize == 5,
            format!("after {after}: wrong size {}", a.filesize),
        ),
        Err(e) => c.check(false, format!("session unusable after {after}: {e:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_features_fail_cleanly() {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let fh = create_with(&server, &*m, "f", 0o644, b"hello").await;
    let mut c = Checks::new(&server);

    // pathconf
    let pc = ok(
        &server,
        "pathconf",
        timed("pathconf", m.pathconf_with_support(fh.clone())).await,
    );
    eprintln!("pathconf: {pc:?}");
    if pc.available.name_max {
        c.check(
            pc.values.name_max >= 255,
            format!("name_max {}", pc.values.name_max),
        );
    }
    if pc.available.linkmax {
        c.check(
            pc.values.linkmax >= 2,
            format!("linkmax {}", pc.values.linkmax),
        );
    }
    if pc.available.no_trunc {
        c.check(
            pc.values.no_trunc,
            "no_trunc false, yet long names are refused (NAMETOOLONG)",
        );
    }
    if pc.available.case_insensitive {
        c.check(
            !pc.values.case_insensitive,
            "case_insensitive on a Linux directory",
        );
    }
    still_usable(&mut c, &*m, &fh, "pathconf").await;

    // Named attributes (OPENATTR): neither server supports them, and both
    // must say NOTSUPP.
    let caps = m.capabilities();
    eprintln!("mount capabilities: {caps:?}");
    c.check(!caps.named_attributes, "named attributes advertised");
    refused_notsupp(
        &mut c,
        "setxattr (OPENATTR)",
        timed(
            "setxattr",
            m.setxattr(fh.clone(), "user.e2e", Bytes::from_static(b"value")),
        )
        .await,
    );
    still_usable(&mut c, &*m, &fh, "setxattr").await;
    if server.kind() != ServerKind::Ganesha {
        // (Ganesha 4.3 rejects this OPENATTR+LOOKUP compound at the RPC
        // level, "request rejected" — a Ganesha quirk, so txnfs only.)
        refused_notsupp(
            &mut c,
            "getxattr (OPENATTR)",
            timed("getxattr", m.getxattr(fh.clone(), "user.e2e")).await,
        );
        still_usable(&mut c, &*m, &fh, "getxattr").await;
    }

    // ACLs: neither server supports the acl attribute (not in
    // supported_attrs), so GETATTR leaves it out; aclsupport itself is
    // supported and answers.
    c.check(!caps.acl, "acl advertised");
    attr_left_out(
        &mut c,
        "GETATTR acl",
        timed("getacl", m.getacl(fh.clone())).await,
        "FATTR4_ACL",
    );
    still_usable(&mut c, &*m, &fh, "getacl").await;
    let aclsupport = c.expect_ok(
        "GETATTR aclsupport",
        timed("aclsupport", m.aclsupport(fh.clone())).await,
    );
    eprintln!("aclsupport: {aclsupport:?}");
    if server.kind() == ServerKind::Txnfs {
        // txnfs supports no ACE type at all.
        c.check(
            format!("{aclsupport:?}") == "Some(AclSupport(0))",
            format!("txnfs aclsupport {aclsupport:?}, want 0"),
        );
    }
    still_usable(&mut c, &*m, &fh, "aclsupport").await;
    c.finish();
}
