//! The client's delegation cache against the real txnfs server in process (which grants
//! read and write delegations, recalls them and asks CB_GETATTR; ADR 0017): what is
//! served without RPCs, what another client sees after a recall, and what goes back.

mod common;

use bytes::Bytes;
use common::*;
use std::time::Duration;
use txnfs_client::{Client, Fs};

fn ops(c: &Client, name: &str) -> u64 {
    c.stats().ops.get(name).copied().unwrap_or(0)
}

fn server_delegations(srv: &TestServer) -> txnfs_state::deleg::DelegStats {
    srv.server.core().expect("core").delegations().stats()
}

async fn wait_until_none_held(c: &Client) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.delegations_held() != (0, 0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn write_plain(srv: &TestServer, path: &str, data: &'static [u8]) {
    // A client without delegations writes the file and goes away.
    let w = connect(srv.addr, false).await;
    let fs = Fs::new(w.clone());
    for r in fs.vwrite(&[(path, Bytes::from_static(data))], true).await {
        r.expect("write");
    }
    w.close().await.expect("close writer");
}

/// Under a read delegation the second read of a file, and its GETATTR, send nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_read_of_a_delegated_file_sends_no_rpc() {
    let srv = start_memory_server().await;
    write_plain(&srv, "r.txt", b"read me twice").await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    let first = fs.vread(&["r.txt"]).await;
    assert_eq!(
        first[0].as_ref().expect("first read"),
        &Bytes::from_static(b"read me twice")
    );
    assert_eq!(a.delegations_held(), (1, 0), "{:?}", a.cache_stats());
    assert_eq!(a.cache_stats().read_delegations, 1);
    let (reads, opens, compounds) = (ops(&a, "READ"), ops(&a, "OPEN"), a.stats().compounds);
    for _ in 0..3 {
        let again = fs.vread(&["r.txt"]).await;
        assert_eq!(
            again[0].as_ref().expect("cached read"),
            &Bytes::from_static(b"read me twice")
        );
    }
    let st = fs.vgetattrs(&["r.txt"]).await;
    assert_eq!(st[0].as_ref().expect("stat").size, Some(13));
    assert_eq!(ops(&a, "READ"), reads, "no READ sent");
    assert_eq!(ops(&a, "OPEN"), opens, "no OPEN sent");
    assert_eq!(a.stats().compounds, compounds, "no COMPOUND at all");
    assert_eq!(a.cache_stats().read_hits, 3);
    assert_eq!(a.cache_stats().attr_hits, 1);

    // Closing the client returns the delegation.
    a.close().await.expect("close");
    let s = server_delegations(&srv);
    assert_eq!((s.granted, s.returned, s.outstanding), (1, 1, 0), "{s:?}");
}

/// Without delegations (the switch off) every read goes to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_delegations_off_every_read_is_sent() {
    let srv = start_memory_server().await;
    write_plain(&srv, "r.txt", b"abc").await;
    let a = connect(srv.addr, false).await;
    let fs = Fs::new(a.clone());
    for _ in 0..3 {
        let r = fs.vread(&["r.txt"]).await;
        assert_eq!(r[0].as_ref().expect("read"), &Bytes::from_static(b"abc"));
    }
    assert_eq!(ops(&a, "READ"), 3);
    assert_eq!(a.delegations_held(), (0, 0));
    assert_eq!(server_delegations(&srv).granted, 0);
    a.close().await.expect("close");
}

/// A write under a write delegation stays in the client; another client's OPEN makes
/// the server recall it; the holder flushes and returns it, and the other client reads
/// the new bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_open_gets_the_content_flushed_on_recall() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(&[("w.txt", Bytes::from_static(b"first version"))], false)
        .await
    {
        r.expect("first write");
    }
    assert_eq!(
        a.cache_stats().write_delegations,
        1,
        "{:?}",
        a.cache_stats()
    );
    let writes = ops(&a, "WRITE");
    for r in fs
        .vwrite(
            &[("w.txt", Bytes::from_static(b"second, longer version"))],
            false,
        )
        .await
    {
        r.expect("buffered write");
    }
    assert_eq!(ops(&a, "WRITE"), writes, "buffered, not sent");
    assert_eq!(a.cache_stats().buffered_writes, 1);
    // The holder reads its own buffered data.
    assert_eq!(
        fs.vread(&["w.txt"]).await[0].as_ref().expect("own read"),
        &Bytes::from_static(b"second, longer version")
    );

    let b = connect(srv.addr, false).await;
    let fs_b = Fs::new(b.clone());
    let got = fs_b.vread(&["w.txt"]).await;
    assert_eq!(
        got[0].as_ref().expect("B reads"),
        &Bytes::from_static(b"second, longer version")
    );
    // B's OPEN was let through when the server got A's DELEGRETURN; A notes the return
    // when the DELEGRETURN's reply comes back, a moment later.
    wait_until_none_held(&a).await;
    let st = a.cache_stats();
    assert_eq!((st.recalls, st.flushes, st.returns), (1, 1, 1), "{st:?}");
    assert_eq!(ops(&a, "DELEGRETURN"), 1);
    assert_eq!(a.delegations_held(), (0, 0));
    let s = server_delegations(&srv);
    assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0), "{s:?}");
    b.close().await.expect("close b");
    a.close().await.expect("close a");
}

/// A buffered write that makes the file shorter: the flush truncates it (SETATTR with
/// the delegation stateid) before writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_truncates_a_file_that_got_shorter() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(
            &[("t.txt", Bytes::from_static(b"a rather long first line"))],
            false,
        )
        .await
    {
        r.expect("first write");
    }
    for r in fs
        .vwrite(&[("t.txt", Bytes::from_static(b"short"))], false)
        .await
    {
        r.expect("buffered write");
    }
    fs.vflush().await.expect("flush");
    assert_eq!(a.cache_stats().flushes, 1);
    assert_eq!(a.delegations_held(), (1, 0), "a flush keeps the delegation");
    let b = connect(srv.addr, false).await;
    let got = Fs::new(b.clone()).vread(&["t.txt"]).await;
    assert_eq!(
        got[0].as_ref().expect("read"),
        &Bytes::from_static(b"short")
    );
    b.close().await.expect("close b");
    a.close().await.expect("close a");
}

/// A stable whole-file write of a file under a write delegation goes under it: PUTFH,
/// SETATTR of the size (the file got shorter), WRITE, GETATTR; no OPEN, CLOSE or
/// DELEGRETURN, and the delegation stays. The bytes are on the server: another client
/// (whose OPEN recalls the delegation) reads them. Afterwards the write goes through an
/// OPEN again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_rewrite_under_a_write_delegation_sends_no_open() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    let write = |data: &'static [u8]| {
        let fs = fs.clone();
        async move {
            for r in fs
                .vwrite(&[("s.txt", Bytes::from_static(data))], true)
                .await
            {
                r.expect("stable write");
            }
        }
    };
    write(b"a rather long first version").await;
    assert_eq!(
        a.cache_stats().write_delegations,
        1,
        "no write delegation granted"
    );
    let count =
        |a: &Client| ["OPEN", "CLOSE", "DELEGRETURN", "SETATTR", "WRITE"].map(|op| ops(a, op));
    let before = count(&a);
    write(b"second").await;
    let after = count(&a);
    let sent: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
    assert_eq!(
        sent,
        [0, 0, 0, 1, 1],
        "OPEN, CLOSE, DELEGRETURN, SETATTR, WRITE sent"
    );
    assert_eq!(a.delegations_held(), (1, 0), "the delegation stays");
    assert_eq!(
        fs.vread(&["s.txt"]).await[0]
            .as_ref()
            .expect("read from the cache"),
        &Bytes::from_static(b"second")
    );
    let b = connect(srv.addr, false).await;
    let fs_b = Fs::new(b.clone());
    assert_eq!(
        fs_b.vread(&["s.txt"]).await[0]
            .as_ref()
            .expect("read by another client"),
        &Bytes::from_static(b"second")
    );
    wait_until_none_held(&a).await;
    assert_eq!(a.delegations_held(), (0, 0), "recalled and returned");
    let opens = ops(&a, "OPEN");
    write(b"third, through an OPEN").await;
    assert_eq!(ops(&a, "OPEN"), opens + 1);
    assert_eq!(
        fs_b.vread(&["s.txt"]).await[0]
            .as_ref()
            .expect("read again"),
        &Bytes::from_static(b"third, through an OPEN")
    );
    b.close().await.expect("close b");
    a.close().await.expect("close a");
}

/// A write under a delegation the server has revoked (without a recall the holder
/// could see) fails, and the file goes through an OPEN instead: the caller sees
/// success and another client reads the new bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_under_a_revoked_delegation_goes_through_an_open() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(&[("r.txt", Bytes::from_static(b"first"))], true)
        .await
    {
        r.expect("first write");
    }
    assert_eq!(
        a.cache_stats().write_delegations,
        1,
        "no write delegation granted"
    );
    {
        let mut core = srv.server.core().expect("core");
        // Delegation ids are a counter with the top bit set (state crate, `deleg`).
        let ids: Vec<u64> = (0..1_000).map(|n| (1 << 63) | n).collect();
        core.revoke_delegations(&ids, txnfs_state::deleg::RevokeReason::Timeout);
    }
    assert_eq!(
        server_delegations(&srv).revoked,
        1,
        "the delegation was not revoked"
    );
    let opens = ops(&a, "OPEN");
    let writes = ops(&a, "WRITE");
    // (A lease renewal in between would tell the client first: then it writes
    // through an OPEN at once.)
    let unaware = a.delegations_held() == (1, 0);
    for r in fs
        .vwrite(&[("r.txt", Bytes::from_static(b"second"))], true)
        .await
    {
        r.expect("write after the revocation");
    }
    assert_eq!(ops(&a, "OPEN"), opens + 1, "written through an OPEN");
    if unaware {
        assert_eq!(
            ops(&a, "WRITE"),
            writes + 2,
            "tried under the delegation, then through the OPEN"
        );
    }
    assert_eq!(a.cache_stats().delegated_writes, 0);
    let b = connect(srv.addr, false).await;
    assert_eq!(
        Fs::new(b.clone()).vread(&["r.txt"]).await[0]
            .as_ref()
            .expect("read by another client"),
        &Bytes::from_static(b"second")
    );
    b.close().await.expect("close b");
    a.close().await.expect("close a");
}

/// Another client's GETATTR of a write-delegated file is answered through CB_GETATTR
/// with the holder's buffered size, without a recall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cb_getattr_answers_the_buffered_size() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(&[("g.txt", Bytes::from_static(b"12345"))], false)
        .await
    {
        r.expect("first write");
    }
    let buffered = Bytes::from(vec![b'x'; 3000]);
    for r in fs.vwrite(&[("g.txt", buffered)], false).await {
        r.expect("buffered write");
    }
    let b = connect(srv.addr, false).await;
    let st = Fs::new(b.clone()).vgetattrs(&["g.txt"]).await;
    assert_eq!(st[0].as_ref().expect("B's stat").size, Some(3000));
    assert_eq!(a.cache_stats().getattr_answered, 1, "{:?}", a.cache_stats());
    assert_eq!(a.callback_stats().ops.get("CB_GETATTR"), Some(&1));
    assert_eq!(a.cache_stats().recalls, 0, "no recall for a GETATTR");
    assert_eq!(a.delegations_held(), (1, 0));
    b.close().await.expect("close b");
    // Close flushes and returns: the bytes are on the server afterwards.
    a.close().await.expect("close a");
    let c = connect(srv.addr, false).await;
    let got = Fs::new(c.clone()).vread(&["g.txt"]).await;
    assert_eq!(got[0].as_ref().expect("read").len(), 3000);
    c.close().await.expect("close c");
}

/// Removing a delegated file through the holder returns the delegation first; the
/// server is left with nothing outstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_and_rename_return_the_delegation() {
    let srv = start_memory_server().await;
    write_plain(&srv, "x.txt", b"x").await;
    write_plain(&srv, "y.txt", b"y").await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs.vread(&["x.txt", "y.txt"]).await {
        r.expect("read");
    }
    assert_eq!(a.delegations_held(), (2, 0));
    for r in fs.vremove(&["x.txt"], false).await {
        r.expect("remove");
    }
    for r in fs.vrename(&[("y.txt", "z.txt")]).await {
        r.expect("rename");
    }
    assert_eq!(a.delegations_held(), (0, 0));
    let got = fs.vread(&["z.txt"]).await;
    assert_eq!(got[0].as_ref().expect("read z"), &Bytes::from_static(b"y"));
    assert!(fs.vread(&["y.txt"]).await[0].is_err(), "old name gone");
    tokio::time::sleep(Duration::from_millis(10)).await;
    a.close().await.expect("close");
    assert_eq!(server_delegations(&srv).outstanding, 0);
}

/// CB_RECALL_ANY (played through the client's callback entry, as the back channel would
/// deliver it): the client keeps the number asked for and returns the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_any_returns_all_but_the_kept() {
    use txnfs_client::callback::{encode_cb_compound, CB_PROGRAM};
    use txnfs_server::nfs::*;
    let srv = start_memory_server().await;
    for f in ["a", "b", "c"] {
        write_plain(&srv, f, b"data").await;
    }
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs.vread(&["a", "b", "c"]).await {
        r.expect("read");
    }
    assert_eq!(a.delegations_held(), (3, 0));
    // The server calls back in the session's minor version (4.2 here, negotiated).
    let args = encode_cb_compound(
        b"",
        a.minor_version(),
        &[
            nfs_cb_argop4::OP_CB_SEQUENCE(CB_SEQUENCE4args {
                csa_sessionid: a.session_id(),
                csa_sequenceid: 1,
                csa_slotid: 0,
                csa_highest_slotid: 0,
                csa_cachethis: false,
                csa_referring_call_lists: vec![],
            }),
            nfs_cb_argop4::OP_CB_RECALL_ANY(CB_RECALL_ANY4args {
                craa_objects_to_keep: 1,
                craa_type_mask: vec![1 << RCA4_TYPE_MASK_RDATA_DLG],
            }),
        ],
    );
    let call = txnfs_rpc::IncomingCall {
        xid: 1,
        prog: CB_PROGRAM,
        vers: 1,
        proc_num: 1,
        cred: txnfs_rpc::OpaqueAuth::none(),
        args,
    };
    let txnfs_rpc::CallReply::Success(reply) = a.handle_callback(&call) else {
        panic!("CB_COMPOUND not answered");
    };
    let res = <CB_COMPOUND4res as txnfs_xdr::Decode>::from_bytes(reply).expect("decodes");
    assert_eq!(res.status, nfsstat4::NFS4_OK);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while a.delegations_held() != (1, 0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.delegations_held(), (1, 0));
    assert_eq!(server_delegations(&srv).outstanding, 1);
    assert_eq!(server_delegations(&srv).returned, 2);
    a.close().await.expect("close");
}

/// Listings against a server that does not grant directory delegations (txnfs with
/// delegations off answers GDD4_UNAVAIL; Ganesha NOTSUPP, see the vector tests):
/// correct, nothing cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_work_where_directory_delegations_are_not_granted() {
    let srv = start_memory_server_with(|cfg| cfg.delegations = false).await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs.vmkdir(&["d"], 0o755, false).await {
        r.expect("mkdir");
    }
    for r in fs
        .vwrite(
            &[
                ("d/1", Bytes::from_static(b"1")),
                ("d/2", Bytes::from_static(b"22")),
            ],
            true,
        )
        .await
    {
        r.expect("write");
    }
    for _ in 0..3 {
        let l = fs.vlistdir(&["d"], false).await;
        let names: Vec<String> = l[0]
            .as_ref()
            .expect("list")
            .iter()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(names, vec!["1", "2"]);
    }
    assert_eq!(ops(&a, "READDIR"), 3);
    assert_eq!(a.delegations_held(), (0, 0));
    assert_eq!(a.cache_stats().list_hits, 0);
    a.close().await.expect("close");
}

/// Under a directory delegation the second listing and lookups are served from the
/// cache, and CB_NOTIFY brings another client's new entry in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_directory_is_listed_from_the_cache_and_kept_current() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs.vmkdir(&["d"], 0o755, false).await {
        r.expect("mkdir");
    }
    write_plain(&srv, "d/1", b"1").await;
    let first = fs.vlistdir(&["d"], false).await;
    assert_eq!(first[0].as_ref().expect("list").len(), 1);
    assert_eq!(a.delegations_held().1, 1, "directory delegation granted");
    let readdirs = ops(&a, "READDIR");
    let lookups = a.stats().compounds;
    let again = fs.vlistdir(&["d"], false).await;
    assert_eq!(again[0].as_ref().ok(), first[0].as_ref().ok());
    let missing = fs.vgetattrs(&["d/none"]).await;
    assert!(missing[0].is_err());
    assert_eq!(ops(&a, "READDIR"), readdirs, "listed from the cache");
    assert_eq!(a.stats().compounds, lookups, "no COMPOUND for the lookup");
    // Another client adds an entry: CB_NOTIFY updates the cached listing.
    write_plain(&srv, "d/2", b"22").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let l = fs.vlistdir(&["d"], false).await;
        if l[0].as_ref().map(|v| v.len()).unwrap_or(0) == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "CB_NOTIFY never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(a.cache_stats().notify_applied >= 1);
    assert_eq!(
        ops(&a, "READDIR"),
        readdirs,
        "the new entry came by CB_NOTIFY"
    );
    let new = fs.vgetattrs(&["d/2"]).await;
    assert_eq!(new[0].as_ref().expect("lookup from cache").size, Some(2));

    // Another client removes and renames: the cached listing follows.
    let b = connect(srv.addr, false).await;
    let fs_b = Fs::new(b.clone());
    for r in fs_b.vremove(&["d/1"], false).await {
        r.expect("remove");
    }
    for r in fs_b.vrename(&[("d/2", "d/3")]).await {
        r.expect("rename");
    }
    let names = |l: &[Result<Vec<txnfs_client::DirEntry>, txnfs_client::ClientError>]| {
        l[0].as_ref()
            .map(|v| v.iter().map(|e| e.name.clone()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    loop {
        let l = fs.vlistdir(&["d"], false).await;
        if names(&l) == vec!["3".to_string()] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "listing {:?}",
            names(&l)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        ops(&a, "READDIR"),
        readdirs,
        "kept current by CB_NOTIFY alone"
    );
    assert_eq!(a.cache_stats().notify_dropped, 0);
    b.close().await.expect("close b");

    // Our own change drops the listing (the server does not notify us of it); the next
    // listing reads the directory once and is cached again.
    for r in fs
        .vwrite(&[("d/mine", Bytes::from_static(b"m"))], true)
        .await
    {
        r.expect("own write");
    }
    let l = fs.vlistdir(&["d"], false).await;
    assert_eq!(names(&l), vec!["3".to_string(), "mine".to_string()]);
    assert_eq!(ops(&a, "READDIR"), readdirs + 1);
    let l = fs.vlistdir(&["d"], false).await;
    assert_eq!(names(&l), vec!["3".to_string(), "mine".to_string()]);
    assert_eq!(ops(&a, "READDIR"), readdirs + 1, "cached again");
    a.close().await.expect("close");
    assert_eq!(server_delegations(&srv).outstanding, 0);
}

/// A server that never grants: reads stay correct, and after a few OPENs without a
/// grant the client stops carrying GETFH/GETATTR in its reads (today's lean COMPOUNDs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_grants_gets_lean_reads() {
    let srv = start_memory_server_with(|cfg| cfg.delegations = false).await;
    let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for n in &names {
        write_plain(&srv, n, b"same bytes").await;
    }
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs.vread(&names).await {
        assert_eq!(r.expect("read"), Bytes::from_static(b"same bytes"));
    }
    let getfh = ops(&a, "GETFH");
    assert!(
        getfh >= 16,
        "the first reads asked for handles: {:?}",
        a.stats()
    );
    let (getattrs, compounds) = (ops(&a, "GETATTR"), a.stats().compounds);
    for r in fs.vread(&names).await {
        assert_eq!(r.expect("read"), Bytes::from_static(b"same bytes"));
    }
    assert_eq!(ops(&a, "GETFH"), getfh, "no GETFH once nothing is granted");
    assert_eq!(ops(&a, "GETATTR"), getattrs);
    assert_eq!(a.stats().compounds, compounds + 1, "20 reads, one COMPOUND");
    assert_eq!(a.delegations_held(), (0, 0));
    assert_eq!(server_delegations(&srv).granted, 0);
    a.close().await.expect("close");
}

/// No stale cache: another client's write recalls the reader's delegation, and the
/// reader's next read (and stat) fetches the new bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_write_recalls_and_the_next_read_is_fresh() {
    let srv = start_memory_server().await;
    write_plain(&srv, "s.txt", b"old").await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    assert_eq!(
        fs.vread(&["s.txt"]).await[0].as_ref().expect("read"),
        &Bytes::from_static(b"old")
    );
    assert_eq!(a.delegations_held(), (1, 0));
    // B overwrites the file: its OPEN for write waits for A's DELEGRETURN.
    write_plain(&srv, "s.txt", b"brand new").await;
    wait_until_none_held(&a).await;
    assert_eq!(a.cache_stats().recalls, 1);
    let reads = ops(&a, "READ");
    assert_eq!(
        fs.vread(&["s.txt"]).await[0].as_ref().expect("read again"),
        &Bytes::from_static(b"brand new")
    );
    assert_eq!(ops(&a, "READ"), reads + 1, "read from the server");
    assert_eq!(
        fs.vgetattrs(&["s.txt"]).await[0]
            .as_ref()
            .expect("stat")
            .size,
        Some(9)
    );
    a.close().await.expect("close");
    let s = server_delegations(&srv);
    assert_eq!((s.recalled, s.revoked, s.outstanding), (1, 0, 0), "{s:?}");
}

/// A delegation the server revokes (its recall wait is 1 ms here, shorter than the
/// flush of 8 MiB of buffered writes): the holder stops using it at once, FREE_STATEIDs
/// it when the server says DELEG_REVOKED, and reads the other client's bytes afterwards.
/// (The buffered bytes are lost with the delegation, as RFC 8881 §10.4.6 has it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_delegation_is_dropped_and_freed() {
    let srv = start_memory_server_with(|cfg| cfg.recall_wait_ms = Some(1)).await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(&[("v.txt", Bytes::from_static(b"v1"))], false)
        .await
    {
        r.expect("first write");
    }
    assert_eq!(a.cache_stats().write_delegations, 1);
    let big = Bytes::from(vec![7u8; 8 << 20]);
    for r in fs.vwrite(&[("v.txt", big)], false).await {
        r.expect("buffered write");
    }
    assert_eq!(a.cache_stats().buffered_writes, 1);
    write_plain(&srv, "v.txt", b"after!").await;
    wait_until_none_held(&a).await;
    assert_eq!(a.delegations_held(), (0, 0));
    assert_eq!(
        fs.vread(&["v.txt"]).await[0].as_ref().expect("read again"),
        &Bytes::from_static(b"after!")
    );
    let st = a.cache_stats();
    let s = server_delegations(&srv);
    assert_eq!((s.recalled, s.revoked), (1, 1), "{s:?}");
    assert_eq!((st.recalls, st.revoked, st.returns), (1, 1, 0), "{st:?}");
    assert_eq!(ops(&a, "FREE_STATEID"), 1, "the revoked stateid is freed");
    // Nothing left on the server: DESTROY_CLIENTID (refused while delegations are held)
    // succeeds.
    a.close().await.expect("close");
    assert_eq!(server_delegations(&srv).outstanding, 0);
}

/// `ls -lR` twice: the second run is served from delegated directories' listings
/// without a single COMPOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_recursive_listing_sends_nothing() {
    let srv = start_memory_server().await;
    let w = connect(srv.addr, false).await;
    let fs_w = Fs::new(w.clone());
    let dirs: Vec<String> = (0..4)
        .flat_map(|a| (0..3).map(move |b| format!("t/d{a}/e{b}")))
        .collect();
    for r in fs_w.vmkdir(&dirs, 0o755, true).await {
        r.expect("mkdir");
    }
    let files: Vec<(String, Bytes)> = dirs
        .iter()
        .flat_map(|d| (0..5).map(move |f| (format!("{d}/f{f}"), Bytes::from(vec![b'x'; f]))))
        .collect();
    for r in fs_w.vwrite(&files, true).await {
        r.expect("write");
    }
    w.close().await.expect("close writer");

    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    let first = fs.vlistdir(&["t"], true).await;
    let first = first[0].as_ref().expect("ls -lR");
    assert_eq!(first.len(), 4 + 12 + 60);
    assert_eq!(
        a.delegations_held().1,
        1 + 4 + 12,
        "every directory delegated"
    );
    let compounds = a.stats().compounds;
    let second = fs.vlistdir(&["t"], true).await;
    assert_eq!(second[0].as_ref().expect("ls -lR again"), first);
    assert_eq!(
        a.stats().compounds,
        compounds,
        "no COMPOUND for the second run"
    );
    assert_eq!(a.cache_stats().list_hits, 17);
    a.close().await.expect("close");
    assert_eq!(server_delegations(&srv).outstanding, 0);
}

/// A large file written through under a write delegation (nothing of it cached): another
/// client's stat still gets the true size (the holder does not claim to know it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_written_file_reports_its_true_size() {
    let srv = start_memory_server().await;
    let a = connect(srv.addr, true).await;
    let fs = Fs::new(a.clone());
    let big = Bytes::from(vec![3u8; 3 << 20]);
    for r in fs.vwrite(&[("big", big)], false).await {
        r.expect("write");
    }
    let b = connect(srv.addr, false).await;
    let st = Fs::new(b.clone()).vgetattrs(&["big"]).await;
    assert_eq!(st[0].as_ref().expect("stat").size, Some(3 << 20));
    let got = Fs::new(b.clone()).vread(&["big"]).await;
    assert_eq!(got[0].as_ref().expect("read").len(), 3 << 20);
    b.close().await.expect("close b");
    a.close().await.expect("close a");
    assert_eq!(server_delegations(&srv).outstanding, 0);
}

/// A recall of a delegation whose grant the client has not processed yet is answered
/// by returning it at once. Here the grant is in a vectorized read whose other file the
/// server holds for a third client's delegation (one COMPOUND: the grant is in its held
/// reply): waiting for the grant would make whoever recalled it wait as long, and two
/// clients doing this to each other would wait until the server revoked both. The held
/// COMPOUND runs on its connection's reader, so this also needs the server to let it
/// give way once its own client is recalled (ADR 0062).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_of_a_grant_not_yet_processed_is_returned_at_once() {
    // The silent holder keeps a's read of y waiting for the recall wait (5 s).
    let srv = start_memory_server_with(|c| c.recall_wait_ms = Some(5_000)).await;
    write_plain(&srv, "x", b"x0").await;
    // B: a write delegation on y (which it writes), then silent (its runtime does not
    // run until told).
    let addr = srv.addr;
    let (b_tx, b_rx) = std::sync::mpsc::channel();
    let (wake_tx, wake_rx) = std::sync::mpsc::channel::<()>();
    let b_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let b = rt.block_on(async {
            let b = connect(addr, true).await;
            for r in Fs::new(b.clone())
                .vwrite(&[("y", Bytes::from_static(b"y1"))], true)
                .await
            {
                r.expect("b writes y");
            }
            b
        });
        b_tx.send(b.cache_stats().write_delegations)
            .expect("report");
        let _ = wake_rx.recv();
        rt.block_on(async {
            let _ = b.close().await;
        });
    });
    let b_held = tokio::task::spawn_blocking(move || b_rx.recv().expect("b ready"))
        .await
        .expect("join");
    assert_eq!(b_held, 1, "b holds no write delegation on y");

    // A reads x and y in one call (one COMPOUND): x is granted a read delegation, y
    // waits for B.
    let a = connect(srv.addr, true).await;
    let a_fs = Fs::new(a.clone());
    let read = tokio::spawn(async move { a_fs.vread(&["x", "y"]).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while server_delegations(&srv).recalled == 0 || server_delegations(&srv).granted < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "y's recall and x's grant never happened: {:?}",
            server_delegations(&srv)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // C writes x: A is recalled while its read still waits, and returns x at once.
    let c = connect(srv.addr, false).await;
    let started = std::time::Instant::now();
    for r in Fs::new(c.clone())
        .vwrite(&[("x", Bytes::from_static(b"x2"))], true)
        .await
    {
        r.expect("c writes x");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "c waited {took:?}: the recall was answered only when a's read ended"
    );
    assert!(
        !read.is_finished(),
        "a's read ended before c's write: nothing was tested"
    );

    // The silent holder loses y; a's read then goes through.
    let got = read.await.expect("join");
    assert_eq!(
        got[0].as_ref().expect("a reads x"),
        &Bytes::from_static(b"x0")
    );
    assert_eq!(
        got[1].as_ref().expect("a reads y"),
        &Bytes::from_static(b"y1")
    );
    let s = server_delegations(&srv);
    assert_eq!(s.revoked, 1, "only b's delegation is revoked: {s:?}");
    wake_tx.send(()).expect("wake b");
    b_thread.join().expect("b ends");
    c.close().await.expect("close c");
    a.close().await.expect("close a");
}
