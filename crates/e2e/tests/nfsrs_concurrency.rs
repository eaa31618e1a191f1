//! Two clients changing one directory at the same time: create, write,
//! rename and remove racing with each other and with directory listings,
//! and MKDIR races on the same names (exactly one winner per name).

use std::collections::BTreeSet;

use bytes::Bytes;
use nfs_rs::Mount;
use txnfs_e2e::fixtures::{host_file, must, two_mounts};
use txnfs_e2e::{join_all, list_dir, ok, timed, ServerGuard};

const ITER: usize = 100;

/// The results of the clients' jobs, or a panic with the first error and
/// the server log tail.
fn both_ok<T>(server: &ServerGuard, results: Vec<Result<T, String>>) -> Vec<T> {
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}\nserver log tail:\n{}", server.log_tail(20))))
        .collect()
}

async fn churn(m: &dyn Mount, dir: Bytes, who: usize) -> Result<BTreeSet<String>, String> {
    let mut kept = BTreeSet::new();
    for i in 0..ITER {
        let tmp = format!("tmp-{who}-{i}");
        let fin = format!("final-{who}-{i}");
        let o = m
            .create(dir.clone(), &tmp, Some(0o644))
            .await
            .map_err(|e| format!("create {tmp}: {e:?}"))?;
        let body = Bytes::from(format!("{who}:{i}:").repeat(10));
        nfs_rs::write_all(m, o.fh.clone(), 0, body)
            .await
            .map_err(|e| format!("write {tmp}: {e:?}"))?;
        m.close(o.fh)
            .await
            .map_err(|e| format!("close {tmp}: {e:?}"))?;
        m.rename(dir.clone(), &tmp, dir.clone(), &fin)
            .await
            .map_err(|e| format!("rename {tmp} -> {fin}: {e:?}"))?;
        if i % 3 == 0 {
            m.remove(dir.clone(), &fin)
                .await
                .map_err(|e| format!("remove {fin}: {e:?}"))?;
        } else {
            kept.insert(fin);
        }
        if i % 10 == 0 {
            // List while the other client is changing the directory.
            let names = list_dir(m, dir.clone())
                .await
                .map_err(|e| format!("readdir during churn: {e:?}"))?;
            let uniq: BTreeSet<_> = names.iter().collect();
            if uniq.len() != names.len() {
                return Err("readdir during churn listed a name twice".into());
            }
        }
    }
    Ok(kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_churn_one_directory() {
    let server = ServerGuard::start_default();
    let (a, b) = two_mounts(&server).await;
    let dir = must(&server, "mkdir", a.mkdir_path("churn", 0o755))
        .await
        .fh;
    let results = timed(
        "churn",
        join_all(vec![churn(&*a, dir.clone(), 0), churn(&*b, dir.clone(), 1)]),
    )
    .await;
    let want: BTreeSet<String> = both_ok(&server, results).into_iter().flatten().collect();
    let listed: BTreeSet<String> = ok(&server, "final readdir", list_dir(&*b, dir.clone()).await)
        .into_iter()
        .collect();
    assert_eq!(listed, want, "directory after churn (over NFS)");
    let host: BTreeSet<String> = std::fs::read_dir(server.export_dir().join("churn"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(host, want, "directory after churn (on the host)");
    for name in want.iter().take(20) {
        let mut parts = name.trim_start_matches("final-").split('-');
        let (who, i) = (parts.next().unwrap(), parts.next().unwrap());
        let body = std::fs::read(server.export_dir().join("churn").join(name)).unwrap();
        assert_eq!(
            body,
            format!("{who}:{i}:").repeat(10).into_bytes(),
            "{name}"
        );
    }
}

async fn race(mount: &dyn Mount, root: Bytes) -> Result<Vec<usize>, String> {
    let mut wins = Vec::new();
    for i in 0..50 {
        match mount.mkdir(root.clone(), &format!("d{i}"), 0o755).await {
            Ok(_) => wins.push(i),
            Err(e) if e.is_exist() => {}
            Err(e) => return Err(format!("mkdir d{i}: {e:?}")),
        }
    }
    Ok(wins)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_races_have_one_winner() {
    let server = ServerGuard::start_default();
    let (a, b) = two_mounts(&server).await;
    let root = a.getfh().await;
    let results = timed(
        "mkdir race",
        join_all(vec![race(&*a, root.clone()), race(&*b, root.clone())]),
    )
    .await;
    let mut all: Vec<usize> = both_ok(&server, results).into_iter().flatten().collect();
    all.sort();
    assert_eq!(
        all,
        (0..50).collect::<Vec<_>>(),
        "each name created exactly once"
    );
    assert_eq!(std::fs::read_dir(server.export_dir()).unwrap().count(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_mount_work_and_unmount() {
    let server = ServerGuard::start_default();
    const N: usize = 16;
    let url = server.url();
    let jobs: Vec<_> = (0..N)
        .map(|i| {
            let url = url.clone();
            async move {
                let m = nfs_rs::parse_url_and_mount(&url)
                    .await
                    .map_err(|e| format!("mount {i}: {e:?}"))?;
                let o = m
                    .create_path(&format!("client-{i}"), Some(0o644))
                    .await
                    .map_err(|e| format!("create {i}: {e:?}"))?;
                nfs_rs::write_all(&*m, o.fh.clone(), 0, Bytes::from(format!("client {i}")))
                    .await
                    .map_err(|e| format!("write {i}: {e:?}"))?;
                m.close(o.fh)
                    .await
                    .map_err(|e| format!("close {i}: {e:?}"))?;
                m.umount().await.map_err(|e| format!("umount {i}: {e:?}"))?;
                Ok::<(), String>(())
            }
        })
        .collect();
    for r in timed("16 clients", join_all(jobs)).await {
        if let Err(e) = r {
            panic!("{e}\nserver log tail:\n{}", server.log_tail(20));
        }
    }
    for i in 0..N {
        let body = host_file(&server, format!("client-{i}"));
        assert_eq!(body, format!("client {i}").into_bytes());
    }
    // The server still serves a fresh client afterwards.
    let m = server.mount().await;
    let names = ok(&server, "readdir", list_dir(&*m, m.getfh().await).await);
    assert_eq!(names.len(), N);
}
