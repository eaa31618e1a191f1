//! File handles cannot be forged: every single-bit change, truncation,
//! extension, or an empty handle is refused (BADHANDLE / STALE /
//! FHEXPIRED) or, if some bit is not significant, still names the very same
//! object — never another file.

use bytes::Bytes;
use nfs_rs::{Nfs4ErrorCode as E, NfsError};
use txnfs_e2e::fixtures::must;
use txnfs_e2e::{create_with, is_nfs4, timed, Checks, ServerGuard};

fn refused(e: &NfsError) -> bool {
    [
        E::NFS4ERR_BADHANDLE,
        E::NFS4ERR_STALE,
        E::NFS4ERR_FHEXPIRED,
        E::NFS4ERR_MOVED,
        E::NFS4ERR_WRONGSEC,
    ]
    .iter()
    .any(|w| is_nfs4(e, *w))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_handles_are_refused() {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let fh = create_with(&server, &*m, "target", 0o600, b"secret").await;
    // Neighbours a mutated handle might land on.
    for i in 0..20 {
        create_with(&server, &*m, &format!("other-{i}"), 0o644, b"other").await;
    }
    let me = must(&server, "getattr", m.getattr(fh.clone())).await;
    let mut c = Checks::new(&server);
    let mut accepted_same = 0;
    let mut variants: Vec<(String, Vec<u8>)> = Vec::new();
    for byte in 0..fh.len() {
        for bit in [0u8, 3, 7] {
            let mut v = fh.to_vec();
            v[byte] ^= 1 << bit;
            variants.push((format!("bit {bit} of byte {byte}"), v));
        }
    }
    variants.push(("truncated by 1".into(), fh[..fh.len() - 1].to_vec()));
    variants.push(("half".into(), fh[..fh.len() / 2].to_vec()));
    let mut longer = fh.to_vec();
    longer.push(0);
    variants.push(("extended by 1".into(), longer));
    variants.push(("all zero".into(), vec![0; fh.len()]));
    for (what, v) in variants {
        match timed("getattr", m.getattr(Bytes::from(v))).await {
            Err(e) if refused(&e) => {}
            Err(e) => c.check(false, format!("{what}: unexpected error {e:?}")),
            Ok(a) if a.fileid == me.fileid => accepted_same += 1,
            Ok(a) => c.check(
                false,
                format!(
                    "{what}: a forged handle named ANOTHER object (fileid {})",
                    a.fileid
                ),
            ),
        }
    }
    eprintln!("{accepted_same} mutated handles still named the same file");
    if server.kind() == txnfs_e2e::ServerKind::Txnfs {
        // txnfs MACs its handles (ADR 0001): no bit is insignificant.
        c.check(
            accepted_same == 0,
            format!("{accepted_same} mutated handles were accepted"),
        );
    }
    // Longer than NFS4_FHSIZE (128): the argument does not decode — BADXDR
    // (txnfs) or an RPC-level GARBAGE_ARGS (Ganesha).
    match timed("getattr", m.getattr(Bytes::from(vec![0x41; 129]))).await {
        Err(e) if refused(&e) || is_nfs4(&e, E::NFS4ERR_BADXDR) => {}
        Err(e)
            if e.to_string().contains("request rejected")
                || format!("{e:?}").contains("request rejected") => {}
        Err(e) => c.check(false, format!("129-byte handle: unexpected error {e:?}")),
        Ok(a) => c.check(false, format!("129-byte handle accepted: {a:?}")),
    }
    // The empty handle.
    match timed("getattr", m.getattr(Bytes::new())).await {
        Err(e) if refused(&e) || is_nfs4(&e, E::NFS4ERR_NOFILEHANDLE) => {}
        Err(e) => c.check(false, format!("empty handle: unexpected error {e:?}")),
        Ok(a) => c.check(false, format!("empty handle accepted: {a:?}")),
    }
    // The session is still fine.
    let back = must(&server, "read", m.read(fh.clone(), 0, 100)).await;
    c.check(&back[..] == b"secret", "read after the forgery attempts");
    c.finish();
}
