//! A small blocking wrapper for scripts and tests: owns a runtime and runs any
//! vectorized call to completion.
//!
//! ```no_run
//! use txnfs_client::blocking::BlockingFs;
//! let fs = BlockingFs::connect("127.0.0.1:2049".parse().unwrap()).unwrap();
//! let sizes = fs.run(|fs| async move { fs.vgetattrs(&["a", "b"]).await });
//! ```

use crate::{Client, ClientConfig, ClientError, Fs};
use std::future::Future;
use std::net::SocketAddr;

pub struct BlockingFs {
    rt: tokio::runtime::Runtime,
    fs: Fs,
}

impl BlockingFs {
    pub fn connect(addr: SocketAddr) -> Result<Self, ClientError> {
        Self::with_config(ClientConfig::new(addr))
    }

    pub fn with_config(cfg: ClientConfig) -> Result<Self, ClientError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| ClientError::Local(format!("cannot start a runtime: {e}")))?;
        let client = rt.block_on(Client::connect(cfg))?;
        Ok(BlockingFs {
            rt,
            fs: Fs::new(client),
        })
    }

    /// Run `f` with the async [`Fs`] and wait for it.
    pub fn run<T, Fut: Future<Output = T>>(&self, f: impl FnOnce(Fs) -> Fut) -> T {
        self.rt.block_on(f(self.fs.clone()))
    }

    pub fn fs(&self) -> &Fs {
        &self.fs
    }
}
