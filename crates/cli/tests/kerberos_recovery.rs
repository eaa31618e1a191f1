//! Our NFS client recovers when the server forgets its RPCSEC_GSS context (ADR 0051):
//! the txnfs server in process with a krb5p-only export and the test KDC's keytab,
//! our client with the user's ticket. After a write, the server forgets every context
//! (`GssServer::forget_contexts`, as an eviction or a revocation would); the next
//! call gets AUTH_ERROR RPCSEC_GSS_CREDPROBLEM, the client's transport makes a new
//! connection with a new context and resends, and the bytes read back are the ones
//! written. Then the client's close sends RPCSEC_GSS_DESTROY and the server holds no
//! context.
//!
//! The KDC binaries come from Debian's krb5-kdc, krb5-admin-server and krb5-user; when
//! they are missing the test fails saying so.

use std::time::Duration;

use bytes::Bytes;
use txnfs_client::{Client, ClientConfig, Fs};
use txnfs_rpc::gss::{GssClientConfig, GssService};
use txnfs_server::exportrules::parse_rule;
use txnfs_server::{BackendKind, Config, ExportConfig, KerberosConfig, Server};
use txnfs_testbed::kdc::Kdc;

/// Wait (up to 5 s) for the server to hold `n` contexts.
async fn settle(srv: &Server, n: usize) {
    let gss = srv.gss().expect("serving with Kerberos");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while gss.contexts() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server holds {} RPCSEC_GSS contexts, not {n}",
            gss.contexts()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn the_client_recovers_when_the_server_forgets_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let kdc_dir = dir.path().join("kdc");
    std::fs::create_dir(&kdc_dir).unwrap();
    // This process's Kerberos calls use the test realm: before any thread exists.
    let kdc = Kdc::start_for_this_process(&kdc_dir);
    let map = kdc.write_gss_map(&dir.path().join("gss-map"), 0, 0);
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let state = dir.path().join("state");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let server = Server::new(Config {
            exports: vec![ExportConfig {
                name: "/".into(),
                path: export.clone(),
                backend: BackendKind::Local,
                read_only: false,
                clients: vec![parse_rule("127.0.0.1(rw,no_root_squash,sec=krb5p)").unwrap()],
                prebuilt: None,
            }],
            kerberos: Some(KerberosConfig {
                keytab: Some(kdc.service_keytab.clone()),
                map: Some(map.clone()),
            }),
            state_dir: Some(state),
            grace: false,
            ..Config::default()
        })
        .expect("server");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(txnfs_server::run(server.clone(), listener, async {
            let _ = stop_rx.await;
        }));

        let mut cfg = ClientConfig::new(addr);
        cfg.gss = Some(GssClientConfig {
            target: "nfs@localhost".into(),
            service: GssService::Privacy,
            ccache: Some(format!("FILE:{}", kdc.ccache.display())),
            program: txnfs_server::service::NFS_PROGRAM,
            version: 4,
        });
        cfg.max_attempts = 3;
        cfg.delegations = false;
        let client = tokio::time::timeout(Duration::from_secs(20), Client::connect(cfg))
            .await
            .expect("connect in time")
            .expect("krb5p client");
        settle(&server, 1).await;
        let fs = Fs::new(client.clone());
        let first: Bytes = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        for r in fs.vwrite(&[("f.bin", first.clone())], true).await {
            r.expect("write with the first context");
        }
        assert_eq!(client.stats().reconnects, 0);

        // The server forgets the context: the next call is refused CREDPROBLEM, and
        // the client recovers on a new connection with a new context.
        server.gss().expect("acceptor").forget_contexts();
        assert_eq!(server.gss().expect("acceptor").contexts(), 0);
        let back = fs.vread(&["f.bin"]).await;
        let back = back
            .into_iter()
            .next()
            .expect("one result")
            .expect("read after the server forgot the context");
        assert_eq!(back, first, "other bytes came back");
        assert_eq!(
            client.stats().reconnects,
            1,
            "one new connection for the new context"
        );
        assert_eq!(std::fs::read(export.join("f.bin")).unwrap(), first);
        // A write through the new context too.
        for r in fs
            .vwrite(&[("g.bin", Bytes::from_static(b"second"))], true)
            .await
        {
            r.expect("write with the new context");
        }
        assert_eq!(std::fs::read(export.join("g.bin")).unwrap(), b"second");

        // Closing sends RPCSEC_GSS_DESTROY: no context is left.
        drop(fs);
        client.close().await.expect("close");
        settle(&server, 0).await;
        let _ = stop_tx.send(());
        let _ = tokio::time::timeout(Duration::from_secs(15), serving).await;
    });
}
