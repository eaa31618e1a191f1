//! txnfs-client: an async NFSv4.1 and NFSv4.2 client with a vectorized API (ADR 0028).
//!
//! Three layers:
//! - [`Client`]: the session (EXCHANGE_ID, CREATE_SESSION, slots, SEQUENCE, lease
//!   renewal, reconnect with exactly-once retries, recovery after a server restart);
//! - [`Compound`] / [`Reply`]: a typed COMPOUND builder whose results come back typed,
//!   with the index and status of the op that failed;
//! - [`Fs`]: the vectorized API (vNFS style): every call takes many items and packs as
//!   many of them per COMPOUND as the negotiated limits allow.
//!
//! Transactions ([`txn`], ADR 0021): [`Client::compound_txn`] sends a COMPOUND that a
//! txnfs server runs all-or-nothing, [`Client::transaction`] builds one from path-based
//! steps, and `Fs::v*_atomic` are the vectorized calls as one transaction.
//!
//! Beside them, the session's back channel: a [`callback`] service (CB_SEQUENCE,
//! CB_RECALL, CB_GETATTR, CB_NOTIFY, CB_RECALL_ANY) and a delegation cache that `Fs`
//! uses for what the server delegates — file data and attributes under read and write
//! delegations (writes buffered under the latter), listings and lookups under directory
//! delegations (ADR 0018). [`ClientConfig::delegations`] switches it off.
//!
//! ```no_run
//! # async fn demo() -> Result<(), txnfs_client::ClientError> {
//! use txnfs_client::{Client, ClientConfig, Fs};
//! let client = Client::connect(ClientConfig::new("127.0.0.1:2049".parse().unwrap())).await?;
//! let fs = Fs::new(client.clone());
//! // 20 small files in one COMPOUND: OPEN + READ + CLOSE each.
//! let paths: Vec<String> = (0..20).map(|i| format!("dir/f{i}")).collect();
//! for r in fs.vread(&paths).await {
//!     let data = r?;
//!     println!("{} bytes", data.len());
//! }
//! println!("{} COMPOUNDs", client.stats().compounds);
//! # Ok(()) }
//! ```

pub mod attrs;
pub mod batch;
pub mod blocking;
pub mod busy;
mod cache;
pub mod callback;
mod client;
pub mod compound;
mod error;
pub mod optimes;
pub mod sec;
mod slots;
mod transport;
pub mod txn;
pub mod vector;

pub use attrs::{Attributes, FileKind, SetAttributes, Time};
pub use batch::{BatchConfig, BatchMode, BatchStats};
pub use busy::{Busy, BusyNotice};
pub use cache::{CacheStats, DEFAULT_CACHE_BYTES};
pub use callback::CallbackStats;
pub use client::{Client, ClientConfig, Limits, Stats};
pub use compound::{Compound, CreateHow, Reply};
pub use error::{message, ClientError};
pub use optimes::{OpTimesSnapshot, OpTiming, TransportCounters};
pub use sec::Sec;
pub use txn::{StepResult, Transaction};
pub use vector::{is_copy_unsupported, DirEntry, Fs, Xattrs};
