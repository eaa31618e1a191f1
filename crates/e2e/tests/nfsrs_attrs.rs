//! Attributes seen through READDIR agree with GETATTR and with the host:
//! type, size, mode, fileid, nlink (also of directories), and the
//! per-entry file handles READDIR returns are usable.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

use nfs_rs::DirectoryCookie;
use txnfs_e2e::fixtures::{must, CheckCalls};
use txnfs_e2e::{create_with, Checks, ServerGuard};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_attributes_match_getattr_and_host() {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let dir = must(&server, "mkdir", m.mkdir_path("d", 0o755)).await.fh;
    for i in 0..30usize {
        let mode = [0o600, 0o640, 0o644, 0o755][i % 4];
        create_with(
            &server,
            &*m,
            &format!("d/file-{i}"),
            mode,
            &vec![b'x'; i * 1000],
        )
        .await;
    }
    for i in 0..5 {
        must(&server, "mkdir", m.mkdir_path(&format!("d/sub-{i}"), 0o750)).await;
        for j in 0..i {
            must(
                &server,
                "mkdir",
                m.mkdir_path(&format!("d/sub-{i}/n{j}"), 0o755),
            )
            .await;
        }
    }
    for i in 0..5 {
        must(
            &server,
            "symlink",
            m.symlink_path(&format!("target-{i}"), &format!("d/link-{i}")),
        )
        .await;
    }
    must(&server, "link", m.link_path("d/file-3", "d/hard-3")).await;

    let mut c = Checks::new(&server);
    let mut pos = DirectoryCookie::default();
    let mut entries = Vec::new();
    loop {
        let page = must(&server, "page", m.readdirplus_page(dir.clone(), pos)).await;
        entries.extend(page.entries);
        if page.eof {
            break;
        }
        pos = page.next;
    }
    c.check(
        entries.len() == 41,
        format!("{} entries, want 41", entries.len()),
    );
    let mut fileids = HashSet::new();
    let host_dir = server.export_dir().join("d");
    for e in &entries {
        let Some(attr) = &e.attr else {
            c.check(
                false,
                format!("{}: READDIR returned no attributes", e.file_name),
            );
            continue;
        };
        let real = must(&server, "lookup", m.lookup(dir.clone(), &e.file_name)).await;
        let g = must(&server, "getattr", m.getattr(real.fh.clone())).await;
        let n = &e.file_name;
        // (name, from READDIR, from GETATTR); the mode in octal, permission bits only.
        let pairs = [
            ("type", attr.type_.to_string(), g.type_.to_string()),
            ("size", attr.filesize.to_string(), g.filesize.to_string()),
            (
                "mode",
                format!("{:o}", attr.file_mode & 0o7777),
                format!("{:o}", g.file_mode & 0o7777),
            ),
            ("fileid", attr.fileid.to_string(), g.fileid.to_string()),
            ("nlink", attr.nlink.to_string(), g.nlink.to_string()),
            ("entry fileid", e.fileid.to_string(), g.fileid.to_string()),
        ];
        for (field, listed, got) in pairs {
            c.check(
                listed == got,
                format!("{n}: {field} {listed} vs GETATTR {got}"),
            );
        }
        if !e.handle.is_empty() {
            c.check(
                e.handle == real.fh,
                format!("{n}: READDIR handle differs from LOOKUP's"),
            );
        }
        if !n.starts_with("hard-") && !n.starts_with("file-3") {
            c.check(
                fileids.insert(g.fileid),
                format!("{n}: fileid {} not unique", g.fileid),
            );
        }
        let host = std::fs::symlink_metadata(host_dir.join(n)).unwrap();
        c.check(
            host.len() == g.filesize,
            format!("{n}: host size {} vs {}", host.len(), g.filesize),
        );
        c.check(
            u64::from(g.nlink) == host.nlink(),
            format!("{n}: nlink {} vs host {}", g.nlink, host.nlink()),
        );
        c.check(
            host.mode() & 0o7777 == g.file_mode & 0o7777 || host.file_type().is_symlink(),
            format!(
                "{n}: mode {:o} vs host {:o}",
                g.file_mode & 0o7777,
                host.mode() & 0o7777
            ),
        );
    }
    // Directory link counts follow subdirectories (2 + number of subdirs).
    let d = must(&server, "getattr d", m.getattr(dir.clone())).await;
    let host_d = std::fs::metadata(&host_dir).unwrap();
    c.check(
        u64::from(d.nlink) == host_d.nlink(),
        format!("dir nlink {} vs host {}", d.nlink, host_d.nlink()),
    );
    // The handle of a file replaced by RENAME is stale afterwards.
    let victim = must(&server, "lookup victim", m.lookup_path("d/file-5"))
        .await
        .fh;
    must(
        &server,
        "rename over",
        m.rename_path("d/file-6", "d/file-5"),
    )
    .await;
    c.call_err(
        "GETATTR of a file replaced by RENAME",
        m.getattr(victim),
        &[nfs_rs::Nfs4ErrorCode::NFS4ERR_STALE],
    )
    .await;
    c.finish();
}
