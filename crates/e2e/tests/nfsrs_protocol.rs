//! Protocol-level behaviour visible through `nfs-rs` (NFSv4.1): file size
//! limits, time stamps, many requests in flight on one
//! session, directory paging with small replies, and WRITE/COMMIT verifiers.

use bytes::Bytes;
use nfs_rs::{DirectoryCookie, Mount, Nfs4ErrorCode as E, WriteCommitted, OPEN_BOTH};
use txnfs_e2e::fixtures::{
    create_open, must, set_mode, set_size, set_times, start_and_mount, whole_second, CheckCalls,
};
use txnfs_e2e::{
    create_with, join_all, list_dir, ok, pattern, read_exact, timed, Checks, ServerGuard,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_limits() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "g", 0o644, b"guard").await;
    let mut c = Checks::new(&server);

    // (nfs-rs 0.8.8 ignores `guard_ctime` on NFSv4.1 — v4 has no SETATTR
    // guard, it would take a VERIFY op — so a guarded SETATTR is not tested.)

    // Offsets past the maximum file size.
    must(&server, "open", m.open_path("g", OPEN_BOTH)).await;
    c.call_err(
        "WRITE at offset u64::MAX - 2",
        m.write(fh.clone(), u64::MAX - 2, Bytes::from_static(b"xyz")),
        &[E::NFS4ERR_FBIG, E::NFS4ERR_INVAL],
    )
    .await;
    c.call_err(
        "SETATTR size u64::MAX",
        set_size(&*m, &fh, u64::MAX),
        &[E::NFS4ERR_FBIG, E::NFS4ERR_INVAL],
    )
    .await;
    match timed("read", m.read(fh.clone(), u64::MAX - 10, 5)).await {
        Ok(b) => c.check(b.is_empty(), "READ far past EOF returned bytes"),
        // Ganesha answers FBIG for an offset past its maximum file size.
        Err(e) if txnfs_e2e::is_nfs4(&e, E::NFS4ERR_FBIG) => {}
        Err(e) => c.check(false, format!("READ far past EOF failed: {e:?}")),
    }
    must(&server, "close", m.close(fh.clone())).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        attr.filesize == 5,
        format!("size changed to {}", attr.filesize),
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_follow_changes() {
    let (server, m) = start_and_mount().await;
    let dir = must(&server, "mkdir", m.mkdir_path("d", 0o755)).await.fh;
    let fh = create_with(&server, &*m, "d/f", 0o644, b"v1").await;
    let old = whole_second(1_000_000_000);
    must(&server, "set old times", set_times(&*m, &fh, old, old)).await;
    must(&server, "set old dir times", set_times(&*m, &dir, old, old)).await;
    let before = must(&server, "getattr", m.getattr(fh.clone())).await;
    let mut c = Checks::new(&server);
    c.check(before.mtime.seconds == old.seconds, "mtime was not set");

    // WRITE moves mtime (and ctime) forward.
    must(&server, "open", m.open_path("d/f", OPEN_BOTH)).await;
    txnfs_e2e::write_all(&server, &*m, &fh, 0, b"v2").await;
    must(&server, "close", m.close(fh.clone())).await;
    let after = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        after.mtime.seconds > old.seconds + 1000,
        format!("mtime after WRITE: {:?}", after.mtime),
    );
    c.check(
        (after.ctime.seconds, after.ctime.nseconds)
            >= (before.ctime.seconds, before.ctime.nseconds),
        "ctime went backwards after WRITE",
    );

    // SETATTR mode moves ctime, not mtime.
    let t0 = after;
    std::thread::sleep(std::time::Duration::from_millis(20));
    must(&server, "chmod", set_mode(&*m, &fh, 0o600)).await;
    let t1 = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        (t1.ctime.seconds, t1.ctime.nseconds) > (t0.ctime.seconds, t0.ctime.nseconds),
        format!(
            "ctime not advanced by chmod: {:?} -> {:?}",
            t0.ctime, t1.ctime
        ),
    );
    c.check(
        (t1.mtime.seconds, t1.mtime.nseconds) == (t0.mtime.seconds, t0.mtime.nseconds),
        "chmod changed mtime",
    );

    // Creating and removing entries moves the directory's mtime.
    create_with(&server, &*m, "d/g", 0o644, b"").await;
    let dattr = must(&server, "getattr dir", m.getattr(dir.clone())).await;
    c.check(
        dattr.mtime.seconds > old.seconds + 1000,
        format!("dir mtime after CREATE: {:?}", dattr.mtime),
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight() {
    let (server, m) = start_and_mount().await;
    let data = pattern(77, 64 * 1024);
    let fh = create_with(&server, &*m, "hot", 0o644, &data).await;
    let m_ref: &dyn Mount = &*m;
    // 256 concurrent READs and GETATTRs on one session: more than any
    // reasonable slot table, so the client must queue and the server must
    // keep its slot/sequence bookkeeping straight.
    let jobs: Vec<_> = (0..256u64)
        .map(|i| {
            let fh = fh.clone();
            let data = &data;
            async move {
                if i % 2 == 0 {
                    let off = (i * 97) % 60_000;
                    let got = m_ref.read(fh, off, 1000).await?;
                    Ok::<bool, nfs_rs::NfsError>(got[..] == data[off as usize..off as usize + 1000])
                } else {
                    Ok(m_ref.getattr(fh).await?.filesize == data.len() as u64)
                }
            }
        })
        .collect();
    let results = timed("256 concurrent requests", join_all(jobs)).await;
    let mut c = Checks::new(&server);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(true) => {}
            Ok(false) => c.check(false, format!("request {i} returned wrong data")),
            Err(e) => c.check(false, format!("request {i} failed: {e:?}")),
        }
    }
    if let Some(limits) = m.nfs41_channel_limits().await {
        c.check(
            limits.max_requests >= 1 && limits.max_operations >= 8,
            format!("session limits look wrong: {limits:?}"),
        );
    }
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_small_pages_and_resume() {
    let server = ServerGuard::start_default();
    let m = server.mount_with("uid=0&gid=0&readdir-buffer=1024").await;
    let dir = must(&server, "mkdir", m.mkdir_path("dir", 0o755)).await.fh;
    let names: Vec<String> = (0..300)
        .map(|i| format!("{i:03}-{}", "n".repeat(60)))
        .collect();
    let m_ref: &dyn Mount = &*m;
    for batch in names.chunks(16) {
        let jobs: Vec<_> = batch
            .iter()
            .map(|n| {
                let dir = dir.clone();
                async move {
                    let o = m_ref.create(dir, n, Some(0o644)).await?;
                    m_ref.close(o.fh).await
                }
            })
            .collect();
        for r in join_all(jobs).await {
            ok(&server, "create", r);
        }
    }
    let mut c = Checks::new(&server);

    // Small replies: many pages, each name exactly once.
    let mut listed = ok(&server, "list", list_dir(&*m, dir.clone()).await);
    let pages_hint = listed.len();
    listed.sort();
    c.check(
        listed == names,
        format!(
            "small-page listing: {} names, first differences: {:?}",
            pages_hint,
            {
                let l: std::collections::HashSet<_> = listed.iter().collect();
                names
                    .iter()
                    .filter(|n| !l.contains(n))
                    .take(3)
                    .collect::<Vec<_>>()
            }
        ),
    );

    // Page by page: count pages, resume the second half on a NEW mount
    // with the saved cookie + verifier.
    let mut pos = DirectoryCookie::default();
    let mut first_half = Vec::new();
    let mut pages = 0;
    while first_half.len() < 150 {
        let page = must(&server, "page", m.readdirplus_page(dir.clone(), pos)).await;
        pages += 1;
        first_half.extend(page.entries.into_iter().map(|e| e.file_name));
        if page.eof {
            break;
        }
        pos = page.next;
    }
    c.check(
        pages >= 3,
        format!("readdir-buffer=1024 gave only {pages} page(s) for 150+ entries"),
    );
    let m2 = server.mount_with("uid=0&gid=0&readdir-buffer=1024").await;
    let mut rest = Vec::new();
    loop {
        let page = match timed("page", m2.readdirplus_page(dir.clone(), pos)).await {
            Ok(p) => p,
            Err(e) => {
                c.check(
                    false,
                    format!("resuming a listing on a new mount failed: {e:?}"),
                );
                break;
            }
        };
        rest.extend(page.entries.into_iter().map(|e| e.file_name));
        if page.eof {
            break;
        }
        pos = page.next;
    }
    let mut all: Vec<String> = first_half.into_iter().chain(rest).collect();
    all.sort();
    c.check(
        all == names,
        format!("resumed listing has {} names, want 300", all.len()),
    );

    // Removing entries in the middle of a listing: no duplicates, no errors,
    // every entry that was not removed is still listed.
    let page = must(
        &server,
        "page 1",
        m.readdirplus_page(dir.clone(), DirectoryCookie::default()),
    )
    .await;
    let mut seen: Vec<String> = page.entries.into_iter().map(|e| e.file_name).collect();
    let removed: Vec<&String> = names
        .iter()
        .filter(|n| !seen.contains(n))
        .step_by(3)
        .collect();
    for n in &removed {
        must(&server, "remove", m.remove(dir.clone(), n)).await;
    }
    let mut pos = page.next;
    let mut eof = page.eof;
    while !eof {
        match timed("page", m.readdirplus_page(dir.clone(), pos)).await {
            Ok(p) => {
                seen.extend(p.entries.into_iter().map(|e| e.file_name));
                eof = p.eof;
                pos = p.next;
            }
            Err(e) => {
                c.check(
                    false,
                    format!("continuing a listing after removals failed: {e:?}"),
                );
                break;
            }
        }
    }
    let mut uniq = seen.clone();
    uniq.sort();
    uniq.dedup();
    c.check(
        uniq.len() == seen.len(),
        "a name was listed twice after removals",
    );
    let missing: Vec<_> = names
        .iter()
        .filter(|n| !removed.contains(n) && !seen.contains(n))
        .collect();
    c.check(
        missing.is_empty(),
        format!("surviving entries not listed: {missing:?}"),
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_commit_verifiers() {
    let (server, m) = start_and_mount().await;
    let fh = create_open(&server, &*m, "v").await;
    let w1 = must(
        &server,
        "write 1",
        m.write(fh.clone(), 0, Bytes::from(pattern(1, 100_000))),
    )
    .await;
    let w2 = must(
        &server,
        "write 2",
        m.write(fh.clone(), 100_000, Bytes::from_static(b"tail")),
    )
    .await;
    let mut c = Checks::new(&server);
    c.check(w1.count == 100_000 || w1.count > 0, "short write count 0");
    c.check(
        w1.verifier.is_some() && w1.verifier == w2.verifier,
        "write verifiers differ within one server instance",
    );
    let cv = must(&server, "commit", m.commit_with_verifier(fh.clone(), 0, 0)).await;
    if w1.committed != WriteCommitted::FileSync {
        c.check(
            cv == w1.verifier,
            format!("COMMIT verifier {cv:?} != WRITE verifier {:?}", w1.verifier),
        );
    }
    must(
        &server,
        "commit_write_batch",
        m.commit_write_batch(fh.clone(), 0, 0, &[w1, w2]),
    )
    .await;
    must(&server, "close", m.close(fh.clone())).await;
    let back = ok(
        &server,
        "read",
        read_exact(&*m, fh.clone(), 0, 100_004).await,
    );
    c.check(
        back.len() == 100_004 && &back[100_000..] == b"tail",
        "data after commit",
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_reply_too_small_for_one_entry() {
    let server = ServerGuard::start_default();
    let m = server.mount_with("uid=0&gid=0&readdir-buffer=64").await;
    let long = "l".repeat(200);
    create_with(&server, &*m, &long, 0o644, b"").await;
    // A maxcount that cannot hold one entry: TOOSMALL (RFC 8881 18.23.4),
    // not an empty non-EOF page.
    let r = timed(
        "readdir page",
        m.readdirplus_page(m.getfh().await, DirectoryCookie::default()),
    )
    .await;
    match r {
        Err(e) if txnfs_e2e::is_nfs4(&e, E::NFS4ERR_TOOSMALL) => {}
        Err(e) => panic!(
            "READDIR with maxcount 64: want NFS4ERR_TOOSMALL, got {e:?}\n{}",
            server.log_tail(20)
        ),
        Ok(p) => panic!(
            "READDIR with maxcount 64 returned a page ({} entries, eof {})",
            p.entries.len(),
            p.eof
        ),
    }
    // The session is fine afterwards.
    must(&server, "getattr", m.getattr_path(&long)).await;
}
