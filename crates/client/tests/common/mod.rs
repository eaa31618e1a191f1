//! The txnfs server in process (memory export, no grace period) and clients of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use txnfs_client::{Client, ClientConfig};
use txnfs_server::{BackendKind, Config, ExportConfig, Server};

pub struct TestServer {
    pub addr: SocketAddr,
    pub server: Arc<Server>,
    state_dir: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

pub async fn start_memory_server() -> TestServer {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state_dir = std::env::temp_dir().join(format!(
        "txnfs-client-bc-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let cfg = Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            prebuilt: None,
        }],
        state_dir: Some(state_dir.clone()),
        grace: false,
        ..Config::default()
    };
    let server = Server::new(cfg).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let s2 = server.clone();
    let task = tokio::spawn(async move {
        let _ = txnfs_server::run(s2, listener, std::future::pending()).await;
    });
    TestServer {
        addr,
        server,
        state_dir,
        task,
    }
}

/// A client of `addr` as root; `delegations` switches the delegation cache.
pub async fn connect(addr: SocketAddr, delegations: bool) -> Client {
    let mut cfg = ClientConfig::new(addr);
    cfg.delegations = delegations;
    cfg.uid = 0;
    cfg.gid = 0;
    cfg.max_attempts = 5;
    Client::connect(cfg).await.expect("connect")
}
