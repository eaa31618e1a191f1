//! RPCSEC_GSS version 1 (RFC 2203) with the Kerberos v5 mechanism (RFC 1964/4121):
//! the security flavours krb5 (header signed), krb5i (arguments and results signed)
//! and krb5p (arguments and results encrypted).
//!
//! - [`gssapi`]: the system's MIT GSS-API library, loaded at run time.
//! - [`wire`]: the credential, INIT results and protected bodies (RFC 2203 §5).
//! - [`window`]: the per-context sequence window (§5.3.3.1).
//! - `context`: the server's contexts by handle, bounded, with expiry.
//! - `server`: the control procedures and data-call checks of a server.
//! - `client`: context creation and protected calls of a client.

pub(crate) mod client;
mod context;
pub mod gssapi;
pub(crate) mod server;
pub mod window;
pub mod wire;

pub use client::GssClientConfig;
pub use gssapi::{GssError, KRB5_MECH_OID};
pub use server::{GssCaller, GssServer, GssServerConfig};
pub use wire::GssService;
