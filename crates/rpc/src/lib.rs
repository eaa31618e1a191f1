//! ONC RPC v2 (RFC 5531) over TCP with record marking: a server transport ([`serve`] an
//! [`RpcService`]) and an async client ([`RpcClient`]).
//!
//! The server reads records from each connection, answers what the transport can answer
//! itself (RPC_MISMATCH, AUTH_ERROR, PROG_UNAVAIL, PROG_MISMATCH, GARBAGE_ARGS for a
//! malformed call header), and runs every other call as its own task, at most
//! [`ServerConfig::max_in_flight_per_conn`] per connection. Replies are written in
//! completion order by one writer task per connection, gathering the replies ready at the
//! same time into one vectored write.
//!
//! ```no_run
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use txnfs_rpc::{serve, CallInfo, Credential, ReplyBody, RpcClient, RpcService, ServerConfig};
//!
//! struct Echo;
//! impl RpcService for Echo {
//!     fn programs(&self) -> Vec<(u32, u32, u32)> {
//!         vec![(400000, 1, 1)]
//!     }
//!     async fn call(&self, info: CallInfo, args: Bytes) -> ReplyBody {
//!         match info.proc_num {
//!             0 => ReplyBody::Success(Bytes::new()),
//!             1 => ReplyBody::Success(args),
//!             _ => ReplyBody::ProcUnavail,
//!         }
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(serve(listener, Arc::new(Echo), ServerConfig::default(), async {
//!     let _ = stopped.await;
//! }));
//! let client = RpcClient::connect(addr, Credential::None).await?;
//! assert_eq!(client.call(400000, 1, 1, Bytes::from_static(b"hi")).await?, "hi");
//! let _ = stop.send(());
//! server.await??;
//! # Ok(())
//! # }
//! ```
//!
//! # Callbacks: the back channel
//!
//! The server can call the client back over the client's own connection (the NFSv4.1 back
//! channel, RFC 8881 §2.10.3.1). Every accepted connection has a [`BackChannel`], a
//! cloneable handle the service gets in [`CallInfo::back_channel`] and, once per
//! connection, in [`RpcService::connection_opened`] (a default no-op method).
//! [`BackChannel::call`] sends an RFC 5531 CALL (AUTH_NONE or AUTH_SYS credential, null
//! verifier) through the connection's writer, as one whole record between replies, and
//! waits for the REPLY with the same xid:
//!
//! - xids are chosen per connection and never repeat among outstanding callbacks; the
//!   client's own xids are a separate space.
//! - A SUCCESS reply yields its encoded results; every other reply status is a typed
//!   [`CallbackError`] (`ProgUnavail`, `GarbageArgs`, `SystemErr`, `AuthError`, ...).
//! - No reply within the caller's timeout: [`CallbackError::Timeout`]; the call is
//!   forgotten and a late reply is dropped like any reply with an unknown xid (logged; the
//!   connection keeps serving).
//! - A reply that cannot be decoded fails its call with `MalformedReply` if its xid is
//!   pending and is dropped otherwise.
//! - When the connection closes, pending callbacks fail at once with `ConnectionClosed`,
//!   and so does every later call on the handle.
//! - At most [`ServerConfig::max_callbacks_per_conn`] callbacks wait at the same time;
//!   one more fails with `TooManyOutstanding`.
//!
//! ```no_run
//! use std::time::Duration;
//! use bytes::Bytes;
//! use txnfs_rpc::{BackChannel, CallbackError, Credential};
//!
//! /// CB_NULL (procedure 0) of the NFSv4.1 callback program.
//! async fn probe(back_channel: &BackChannel, cb_program: u32) -> Result<(), CallbackError> {
//!     back_channel
//!         .call(cb_program, 1, 0, &Credential::None, Bytes::new(), Duration::from_secs(5))
//!         .await
//!         .map(|_results| ())
//! }
//! ```

//!
//! # RPC-with-TLS (RFC 9289)
//!
//! With [`ServerConfig::tls`] (a [`ServerTls`] from PEM files) a connection whose first
//! call is the AUTH_TLS probe is answered STARTTLS and continues inside TLS 1.3; each
//! call's [`CallInfo::tls`] says so and names a verified client certificate. A client
//! with [`ClientConfig::tls`] (a [`ClientTls`]) sends the probe and verifies the
//! server's certificate; [`RpcError::TlsRefused`] and [`RpcError::TlsHandshake`] say
//! why not.
//!
//! # RPCSEC_GSS (RFC 2203) with Kerberos v5
//!
//! With [`ServerConfig::gss`] (a [`gss::GssServer`] over a keytab) calls with the
//! RPCSEC_GSS flavour are verified, and [`CallInfo::gss`] names the principal and the
//! service (krb5, krb5i, krb5p); replies are signed or sealed to match. A client with
//! [`ClientConfig::gss`] creates a context at connect and protects every call.

mod backchannel;
mod budget;
mod client;
pub mod gss;
pub mod msg;
pub mod portmap;
mod record;
mod server;
mod starttls;
mod tls;
mod writer;
mod x509name;

pub use backchannel::{BackChannel, CallbackError, DEFAULT_MAX_CALLBACKS_PER_CONN};
pub use budget::{InFlightBudget, BUDGET_UNIT, DEFAULT_IN_FLIGHT_BYTES};
pub use client::{
    decode_reply, CallFuture, CallHandler, CallReply, ClientConfig, IncomingCall, RpcClient,
    DESTROY_WAIT,
};
pub use msg::{encode_call, record, AuthStat, AuthSys, Credential, OpaqueAuth};
pub use record::read_record;
pub use server::behind::{calls_waiting_behind, on_connection_reader};
pub use server::{
    serve, CallInfo, ReplyBody, RpcService, ServerConfig, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_RECORD_SIZE, SHUTDOWN_GRACE,
};
pub use starttls::{HANDSHAKE_TIMEOUT, STARTTLS};
pub use tls::{ClientTls, ServerTls, TlsConfigError, TlsPeer, ALPN_SUNRPC};
pub use writer::WriteCounts;

pub use txnfs_xdr::{Gathered, XdrError};

use std::net::SocketAddr;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed RPC reply: {0}")]
    Xdr(#[from] XdrError),
    /// MSG_DENIED / RPC_MISMATCH: the server speaks RPC versions `low..=high`.
    #[error("RPC version mismatch: server supports {low}..={high}")]
    RpcMismatch { low: u32, high: u32 },
    /// MSG_DENIED / AUTH_ERROR.
    #[error("RPC authentication error: {0:?}")]
    AuthError(AuthStat),
    #[error("program unavailable")]
    ProgUnavail,
    #[error("program version mismatch: server supports {low}..={high}")]
    ProgMismatch { low: u32, high: u32 },
    #[error("procedure unavailable")]
    ProcUnavail,
    #[error("server could not decode the arguments")]
    GarbageArgs,
    #[error("server system error")]
    SystemErr,
    #[error("connection lost")]
    Disconnected,
    /// The server does not offer RPC-with-TLS (it refused the AUTH_TLS probe).
    #[error("{addr} refused TLS: {why}")]
    TlsRefused { addr: SocketAddr, why: String },
    /// The TLS handshake failed: an untrusted or mismatched certificate, mostly.
    #[error("TLS handshake with {addr} failed: {why}")]
    TlsHandshake { addr: SocketAddr, why: String },
    /// RPCSEC_GSS (Kerberos) failed: no credentials, a refused ticket, a bad verifier.
    #[error("Kerberos (RPCSEC_GSS) with {addr} failed: {why}")]
    Gss { addr: SocketAddr, why: String },
    #[error("record of {size} bytes exceeds the limit {max}")]
    RecordTooLarge { size: usize, max: usize },
}
