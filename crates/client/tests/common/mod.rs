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
    start_memory_server_with(|_| {}).await
}

/// A memory server whose configuration `tweak` adjusts.
pub async fn start_memory_server_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
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
            clients: Vec::new(),
            prebuilt: None,
        }],
        state_dir: Some(state_dir.clone()),
        grace: false,
        ..Config::default()
    };
    let mut cfg = cfg;
    tweak(&mut cfg);
    let server = Server::new(cfg).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    SERVERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((addr, Arc::downgrade(&server)));
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

static SERVERS: std::sync::Mutex<Vec<(SocketAddr, std::sync::Weak<Server>)>> =
    std::sync::Mutex::new(Vec::new());

fn server_of(addr: SocketAddr) -> Option<Arc<Server>> {
    SERVERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(a, _)| *a == addr)
        .and_then(|(_, s)| s.upgrade())
}

/// The server grants delegations only over a back channel it has seen working (its
/// CB_NULL probe answered): wait for that, as a client that opens files a moment after
/// mounting would.
pub async fn wait_back_channel_up(server: Option<Arc<Server>>, c: &Client) {
    let Some(server) = server else { return };
    let sid = c.session_id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let up = server
            .callbacks
            .session(&sid)
            .is_some_and(|s| s.path() == txnfs_server::callback::PathState::Up);
        if up {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the server never saw the back channel up");
}

/// A client of `addr` as root; `delegations` switches the delegation cache.
pub async fn connect(addr: SocketAddr, delegations: bool) -> Client {
    let mut cfg = ClientConfig::new(addr);
    cfg.delegations = delegations;
    cfg.uid = 0;
    cfg.gid = 0;
    cfg.max_attempts = 5;
    let c = Client::connect(cfg).await.expect("connect");
    if delegations {
        wait_back_channel_up(server_of(addr), &c).await;
    }
    c
}
