//! The vectorized API against real servers: txnfs (the binary) and NFS-Ganesha (when
//! installed), with the same expectations on both, and RPC counts from the client's own
//! statistics.

use bytes::Bytes;
use std::net::SocketAddr;
use txnfs_client::{Client, ClientConfig, FileKind, Fs, SetAttributes};
use txnfs_e2e::{ServerGuard, ServerKind};

fn kinds() -> Vec<ServerKind> {
    let mut k = vec![ServerKind::Txnfs];
    if txnfs_e2e::peer::ganesha().is_some() {
        k.push(ServerKind::Ganesha);
    }
    k
}

/// Ganesha serializes on one machine-wide port set; run server kinds one after another
/// inside a test and the tests themselves one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Env {
    server: ServerGuard,
    fs: Fs,
    /// Directory under the NFS root where the test works ("" for txnfs, "export" for
    /// Ganesha's pseudo path).
    base: String,
}

impl Env {
    async fn new(kind: ServerKind) -> Env {
        let server = ServerGuard::start(kind);
        let addr: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
        let mut cfg = ClientConfig::new(addr);
        cfg.uid = 0;
        cfg.gid = 0;
        let client = Client::connect(cfg).await.expect("connect");
        let base = server.export_path().trim_matches('/').to_string();
        Env {
            server,
            fs: Fs::new(client),
            base,
        }
    }

    fn p(&self, rel: &str) -> String {
        if self.base.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.base)
        }
    }

    fn compounds(&self) -> u64 {
        self.fs.client().stats().compounds
    }

    /// Make the directory `rel` and write `files` (name in it, data) into it with one
    /// vwrite; its path and the files' (path, data).
    async fn dir_with_files(
        &self,
        rel: &str,
        files: impl Iterator<Item = (String, Bytes)>,
        stable: bool,
    ) -> (String, Vec<(String, Bytes)>) {
        let dir = self.p(rel);
        all_ok("mkdir", self.fs.vmkdir(&[&dir], 0o755, true).await);
        let files: Vec<(String, Bytes)> = files.map(|(n, d)| (format!("{dir}/{n}"), d)).collect();
        all_ok("vwrite", self.fs.vwrite(&files, stable).await);
        (dir, files)
    }
}

fn content(i: usize, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|k| ((k * 31 + i * 7) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn all_ok<T: std::fmt::Debug>(what: &str, v: Vec<Result<T, txnfs_client::ClientError>>) -> Vec<T> {
    v.into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("{what} item {i}: {e}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_small_files_in_one_compound() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        let small = (0..20).map(|i| (format!("f{i}"), content(i, 4096)));
        let (_, files) = env.dir_with_files("small", small, true).await;
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let before = env.compounds();
        let data = all_ok("vread", env.fs.vread(&paths).await);
        // txnfs granted the writer write delegations: it reads its own files from its
        // cache, with no COMPOUND. (The host-side check below must come after: a local
        // reader breaks the write delegation's kernel lease, ADR 0027, and the writer
        // would then ask the server for that file.) Ganesha grants none by default: one
        // COMPOUND.
        let sent = env.compounds() - before;
        let expected = match kind {
            ServerKind::Txnfs => 0,
            _ => 1,
        };
        assert_eq!(sent, expected, "{kind:?}: the writer's 20 reads");
        // host-side check of what landed on disk
        let disk = std::fs::read(env.server.export_dir().join("small/f7")).unwrap();
        assert_eq!(disk, content(7, 4096).to_vec(), "{kind:?}");
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d, &content(i, 4096), "{kind:?} file {i}");
        }
        if kind != ServerKind::Txnfs {
            continue;
        }
        // Another client (no delegations): 20 reads in one COMPOUND, while the writer's
        // 20 delegations are recalled and the reads wait for them.
        let addr: SocketAddr = format!("127.0.0.1:{}", env.server.port()).parse().unwrap();
        let mut cfg = ClientConfig::new(addr);
        (cfg.uid, cfg.gid, cfg.delegations) = (0, 0, false);
        let reader = Fs::new(Client::connect(cfg).await.expect("connect"));
        let before = reader.client().stats().compounds;
        let data = all_ok("vread", reader.vread(&paths).await);
        assert_eq!(
            reader.client().stats().compounds - before,
            1,
            "{kind:?}: 20 reads in one COMPOUND"
        );
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d, &content(i, 4096), "{kind:?} file {i} (other client)");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_calls_agree_on_both_servers() {
    let _g = SERIAL.lock().await;
    let mut outcomes = Vec::new();
    for kind in kinds() {
        let env = Env::new(kind).await;
        let d = |r: &str| env.p(r);
        all_ok(
            "mkdir -p",
            env.fs.vmkdir(&[d("a/b/c"), d("a/x")], 0o750, true).await,
        );
        // mkdir without -p of an existing dir fails with EXIST
        let r = env.fs.vmkdir(&[d("a/b")], 0o755, false).await;
        assert_eq!(
            r[0].as_ref().unwrap_err().status(),
            Some(txnfs_proto::nfs4::nfsstat4::NFS4ERR_EXIST)
        );
        all_ok(
            "vwrite",
            env.fs
                .vwrite(
                    &[(d("a/b/c/file"), Bytes::from_static(b"hello world"))],
                    false,
                )
                .await,
        );
        all_ok(
            "symlink",
            env.fs.vsymlink(&[(d("a/link"), "b/c/file")]).await,
        );
        let t = all_ok("readlink", env.fs.vreadlink(&[d("a/link")]).await);
        assert_eq!(t, vec!["b/c/file".to_string()]);
        all_ok(
            "hardlink",
            env.fs.vhardlink(&[(d("a/b/c/file"), d("a/x/hard"))]).await,
        );
        all_ok(
            "setattr",
            env.fs
                .vsetattrs(&[(
                    d("a/x/hard"),
                    SetAttributes {
                        mode: Some(0o600),
                        size: Some(5),
                        ..Default::default()
                    },
                )])
                .await,
        );
        all_ok(
            "rename",
            env.fs.vrename(&[(d("a/x/hard"), d("a/renamed"))]).await,
        );
        let attrs = env
            .fs
            .vgetattrs(&[d("a/renamed"), d("a/b/c/file"), d("a/link"), d("a/missing")])
            .await;
        let a0 = attrs[0].as_ref().unwrap();
        let a1 = attrs[1].as_ref().unwrap();
        assert_eq!(a0.size, Some(5));
        assert_eq!(a0.mode.map(|m| m & 0o7777), Some(0o600));
        assert_eq!(a0.nlink, Some(2));
        assert_eq!(a0.fileid, a1.fileid, "hard link: same file");
        assert_eq!(attrs[2].as_ref().unwrap().kind, Some(FileKind::Symlink));
        assert_eq!(
            attrs[3].as_ref().unwrap_err().status(),
            Some(txnfs_proto::nfs4::nfsstat4::NFS4ERR_NOENT)
        );
        let data = all_ok("vread", env.fs.vread(&[d("a/b/c/file")]).await);
        assert_eq!(&data[0][..], b"hello");
        let listing = all_ok("ls -R", env.fs.vlistdir(&[d("a")], true).await);
        let names: Vec<String> = listing[0]
            .iter()
            .map(|e| {
                e.path
                    .trim_start_matches(&format!("{}/", env.base))
                    .to_string()
            })
            .collect();
        // non-recursive remove of a non-empty directory fails; recursive succeeds
        let r = env.fs.vremove(&[d("a")], false).await;
        assert_eq!(
            r[0].as_ref().unwrap_err().status(),
            Some(txnfs_proto::nfs4::nfsstat4::NFS4ERR_NOTEMPTY)
        );
        all_ok("rm -r", env.fs.vremove(&[d("a")], true).await);
        let gone = env.fs.vgetattrs(&[d("a")]).await;
        assert!(gone[0].is_err());
        assert!(!env.server.export_dir().join("a").exists());
        outcomes.push((kind, names));
    }
    if outcomes.len() == 2 {
        assert_eq!(
            outcomes[0].1, outcomes[1].1,
            "same tree on txnfs and Ganesha"
        );
    }
}

/// A 1,000-file tree: ls -lR, cp -R (mkdir + write) and rm -r use at least 20x fewer
/// RPCs than one op per RPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_operations_are_rpc_economical() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        let root = env.p("tree");
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for a in 0..10 {
            for b in 0..10 {
                let d = format!("{root}/d{a}/e{b}");
                for f in 0..10 {
                    files.push((format!("{d}/f{f}"), content(f, 100)));
                }
                dirs.push(d);
            }
        }
        let c = env.fs.client().clone();
        c.reset_stats();
        all_ok("mkdir -p", env.fs.vmkdir(&dirs, 0o755, true).await);
        all_ok("write", env.fs.vwrite(&files, true).await);
        let cp = c.stats();
        c.reset_stats();
        let listing = all_ok("ls -lR", env.fs.vlistdir(&[&root], true).await);
        assert_eq!(listing[0].len(), 1000 + 100 + 10, "{kind:?}");
        let ls = c.stats();
        c.reset_stats();
        all_ok("rm -r", env.fs.vremove(&[&root], true).await);
        let rm = c.stats();
        for (what, s) in [("cp -R", &cp), ("ls -lR", &ls), ("rm -r", &rm)] {
            let ops = s.ops_excluding_sequence();
            eprintln!(
                "{kind:?} {what}: {} COMPOUNDs for {ops} ops (ratio {:.0}x)",
                s.compounds,
                ops as f64 / s.compounds as f64
            );
            assert!(
                s.compounds * 20 <= ops,
                "{kind:?} {what}: {} COMPOUNDs for {ops} ops",
                s.compounds
            );
        }
        assert!(!env.server.export_dir().join("tree").exists());
    }
}

/// Files written with FILE_SYNC are spread over the COMPOUNDs the client sends at once
/// (one server thread per COMPOUND can then sync them side by side, ADR 0061), while
/// reads of the same files still share one COMPOUND; the bytes land either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stable_writes_are_spread_over_the_slots_reads_are_packed() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        all_ok(
            "mkdir",
            env.fs.vmkdir(&[env.p("spread")], 0o755, true).await,
        );
        let files: Vec<(String, Bytes)> = (0..16)
            .map(|i| (env.p(&format!("spread/f{i}")), content(i, 4096)))
            .collect();
        let parallel = (env.fs.client().limits().slots as u64).clamp(1, 16);
        let before = env.compounds();
        all_ok("vwrite", env.fs.vwrite(&files, true).await);
        let sent = env.compounds() - before;
        let per = 16u64.div_ceil(parallel);
        // Ganesha's limits may cut further: at least as many there.
        assert!(
            sent == 16u64.div_ceil(per) || (kind != ServerKind::Txnfs && sent > 16 / per),
            "{kind:?}: 16 FILE_SYNC files in {sent} COMPOUNDs with {parallel} slots"
        );
        if kind == ServerKind::Txnfs {
            assert!(
                sent > 1,
                "txnfs grants more than one slot: the files are spread"
            );
        }
        for i in [0, 7, 15] {
            let disk = std::fs::read(env.server.export_dir().join(format!("spread/f{i}")))
                .expect("on disk");
            assert_eq!(disk, content(i, 4096).to_vec(), "{kind:?} file {i}");
        }
        let addr: SocketAddr = format!("127.0.0.1:{}", env.server.port()).parse().unwrap();
        let mut cfg = ClientConfig::new(addr);
        (cfg.uid, cfg.gid, cfg.delegations) = (0, 0, false);
        let reader = Fs::new(Client::connect(cfg).await.expect("connect"));
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let before = reader.client().stats().compounds;
        let back = all_ok("vread", reader.vread(&paths).await);
        assert_eq!(
            reader.client().stats().compounds - before,
            1,
            "{kind:?}: 16 reads in one COMPOUND"
        );
        assert_eq!(back[3], content(3, 4096), "{kind:?}");
    }
}

/// Cutting the connection during a large vwrite loses and duplicates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cut_during_vwrite() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        let big = content(3, 32 << 20);
        let files: Vec<(String, Bytes)> = vec![
            (env.p("big"), big.clone()),
            (env.p("small1"), content(1, 1000)),
            (env.p("small2"), content(2, 1000)),
        ];
        let fs = env.fs.clone();
        let writer = tokio::spawn(async move { fs.vwrite(&files, false).await });
        // Cut the connection three times while WRITEs are in flight.
        let start = env.compounds();
        for k in 1..=3 {
            while env.compounds() < start + 2 * k && !writer.is_finished() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            env.fs.client().sever_connection().await;
        }
        let r = writer.await.unwrap();
        all_ok("vwrite across cuts", r);
        assert!(
            env.fs.client().stats().reconnects >= 1,
            "{kind:?}: the connection was cut"
        );
        let disk = std::fs::read(env.server.export_dir().join("big")).unwrap();
        assert_eq!(disk.len(), big.len(), "{kind:?}");
        assert!(disk == big.to_vec(), "{kind:?}: content differs");
        let back = all_ok(
            "vread",
            env.fs
                .vread(&[env.p("small1"), env.p("small2"), env.p("big")])
                .await,
        );
        assert_eq!(back[0], content(1, 1000));
        assert_eq!(back[1], content(2, 1000));
        // 32 MiB: read in many chunks, joined once.
        assert!(back[2] == big, "{kind:?}: the large file read back differs");
    }
}

/// vopen/vclose and vcopy on both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_close_and_copy() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        let files: Vec<(String, Bytes)> = (0..5)
            .map(|i| (env.p(&format!("src{i}")), content(i, 3000 + i)))
            .collect();
        all_ok("vwrite", env.fs.vwrite(&files, true).await);
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let opened = all_ok(
            "vopen",
            env.fs
                .vopen(&paths, txnfs_proto::nfs4::OPEN4_SHARE_ACCESS_READ, None)
                .await,
        );
        assert_eq!(opened.len(), 5);
        assert!(opened.iter().all(|o| !o.fh.is_empty()), "{kind:?}");
        all_ok("vclose", env.fs.vclose(&opened).await);
        // Closing twice: txnfs answers BAD_STATEID for every file (the stateids are
        // gone); Ganesha 4.3 accepts a second CLOSE of the same stateid.
        let again = env.fs.vclose(&opened).await;
        if kind == ServerKind::Txnfs {
            assert!(again.iter().all(|r| r.is_err()), "{kind:?}: {again:?}");
        }
        let pairs: Vec<(String, String)> = (0..5)
            .map(|i| (env.p(&format!("src{i}")), env.p(&format!("dst{i}"))))
            .collect();
        all_ok("vcopy", env.fs.vcopy(&pairs).await);
        for i in 0..5 {
            let disk = std::fs::read(env.server.export_dir().join(format!("dst{i}"))).unwrap();
            assert_eq!(disk, content(i, 3000 + i).to_vec(), "{kind:?} dst{i}");
        }
        // a missing source fails that item only
        let r = env
            .fs
            .vcopy(&[(env.p("nope"), env.p("x")), (env.p("src0"), env.p("y"))])
            .await;
        assert_eq!(
            r[0].as_ref().unwrap_err().status(),
            Some(txnfs_proto::nfs4::nfsstat4::NFS4ERR_NOENT)
        );
        assert!(r[1].is_ok());
    }
}

/// A server restart (kill -9): the client re-establishes its session and carries on;
/// file handles stay valid on txnfs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_recovers_after_server_restart() {
    let _g = SERIAL.lock().await;
    let mut env = Env::new(ServerKind::Txnfs).await;
    all_ok(
        "vwrite",
        env.fs
            .vwrite(&[("before".to_string(), Bytes::from_static(b"kept"))], true)
            .await,
    );
    env.server.restart();
    let data = all_ok("vread after restart", env.fs.vread(&["before"]).await);
    assert_eq!(&data[0][..], b"kept");
    all_ok(
        "vwrite after restart",
        env.fs
            .vwrite(&[("after".to_string(), Bytes::from_static(b"new"))], true)
            .await,
    );
    let s = env.fs.client().stats();
    assert!(s.session_recoveries >= 1, "{s:?}");
    assert!(s.reconnects >= 1, "{s:?}");
}

/// Thousands of state-changing items: every COMPOUND's reply must fit the server's reply
/// cache (else REP_TOO_BIG_TO_CACHE fails an item per COMPOUND and, e.g., `rm -r`
/// leaves files behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_files_in_one_directory() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        let env = Env::new(kind).await;
        let empty = (0..3000).map(|i| (format!("empty-file-{i:05}"), Bytes::new()));
        let (dir, _) = env.dir_with_files("many", empty, false).await;
        assert_eq!(
            std::fs::read_dir(env.server.export_dir().join("many"))
                .unwrap()
                .count(),
            3000,
            "{kind:?}"
        );
        let list = all_ok("ls", env.fs.vlistdir(&[&dir], false).await);
        assert_eq!(list[0].len(), 3000, "{kind:?}");
        all_ok("rm -r", env.fs.vremove(&[&dir], true).await);
        assert!(!env.server.export_dir().join("many").exists(), "{kind:?}");
    }
}

/// The client negotiates the highest minor version (4.2 with both servers, which offer
/// 1 and 2), speaks 4.1 when told to, and `vcopy` gives the same files either way:
/// with COPY where the server copies (txnfs on 4.2: no READ or WRITE sent), through the
/// client elsewhere (4.1; Ganesha, whose COPY the probe finds unusable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minor_version_negotiated_and_vcopy_the_same_on_each() {
    let _g = SERIAL.lock().await;
    for kind in kinds() {
        for forced in [None, Some(1)] {
            let env = Env::new(kind).await;
            let mut cfg = ClientConfig::new(
                format!("127.0.0.1:{}", env.server.port())
                    .parse()
                    .expect("addr"),
            );
            cfg.uid = 0;
            cfg.gid = 0;
            cfg.minor = forced;
            let fs = Fs::new(Client::connect(cfg).await.expect("connect"));
            let want = forced.unwrap_or(2);
            assert_eq!(fs.client().minor_version(), want, "{kind:?} {forced:?}");
            let (dir, files) = env
                .dir_with_files(
                    "src",
                    (0..5).map(|i| (format!("f{i}"), content(i, 3000 + i * 70_000))),
                    true,
                )
                .await;
            let pairs: Vec<(String, String)> = files
                .iter()
                .map(|(p, _)| (p.clone(), p.replace(&dir, &env.p("dst"))))
                .collect();
            all_ok("mkdir", fs.vmkdir(&[env.p("dst")], 0o755, true).await);
            let before = fs.client().stats();
            all_ok("vcopy", fs.vcopy(&pairs).await);
            let after = fs.client().stats();
            let sent = |op: &str| {
                after.ops.get(op).copied().unwrap_or(0) - before.ops.get(op).copied().unwrap_or(0)
            };
            let server_side = kind == ServerKind::Txnfs && want == 2;
            eprintln!(
                "{kind:?} 4.{want}: COPY {} READ {} WRITE {}",
                sent("COPY"),
                sent("READ"),
                sent("WRITE")
            );
            if server_side {
                assert_eq!(sent("COPY"), 5 + 1, "one COPY per file and the probe");
                assert_eq!((sent("READ"), sent("WRITE")), (0, 0));
            } else {
                assert!(sent("READ") >= 5 && sent("WRITE") >= 5);
            }
            let got = all_ok(
                "vread",
                fs.vread(&pairs.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>())
                    .await,
            );
            for ((_, data), g) in files.iter().zip(got) {
                assert_eq!(&g, data, "{kind:?} 4.{want}");
            }
        }
    }
}
