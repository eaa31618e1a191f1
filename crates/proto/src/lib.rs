//! Protocol types generated from the XDR specifications in `spec/` by `txnfs-xdrgen`
//! (see `docs/adr/0002-xdr-codegen.md` for the naming conventions).
//!
//! Names are verbatim from the specifications (`nfs4::COMPOUND4args`,
//! `nfs4::nfs_argop4::OP_SEQUENCE`, ...). Every type implements
//! [`txnfs_xdr::Encode`] and [`txnfs_xdr::Decode`].

pub use txnfs_xdr::{Decode, Encode, XdrError};

/// Declares module `$name` holding the Rust that `build.rs` generated into
/// `OUT_DIR/$file`, with the lints generated code does not meet allowed. Exported
/// (hidden) for this crate's own tests, which include a test specification's output.
#[doc(hidden)]
#[macro_export]
macro_rules! include_generated {
    ($(#[$attr:meta])* $vis:vis mod $name:ident = $file:literal) => {
        $(#[$attr])*
        #[allow(
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            unreachable_patterns,
            unused_parens,
            dead_code,
            clippy::all,
            missing_docs
        )]
        $vis mod $name {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    };
}

include_generated! {
    /// NFSv4.x (RFC 8881 / RFC 7862 / RFC 8276), from `spec/nfs4.x`.
    pub mod nfs4 = "nfs4.rs"
}

include_generated! {
    /// NFSv3 (RFC 1813), from `spec/nfs3.x`.
    pub mod nfs3 = "nfs3.rs"
}

include_generated! {
    /// MOUNT v3 (RFC 1813 appendix I), from `spec/mnt3.x`.
    pub mod mnt3 = "mnt3.rs"
}

include_generated! {
    /// NLM version 4 (X/Open XNFS chapter 10), from `spec/nlm4.x`.
    pub mod nlm4 = "nlm4.rs"
}

include_generated! {
    /// NSM version 1 (X/Open XNFS chapter 11), from `spec/sm.x`.
    pub mod sm = "sm.rs"
}

/// The RPC procedure number of a transactional COMPOUND (ADR 0021): COMPOUND's own
/// number (1) with the top bit set, carrying COMPOUND4args and answering COMPOUND4res.
/// Standard clients never send it; servers that do not run transactions answer
/// PROC_UNAVAIL (RFC 5531), so a transaction is never executed non-atomically.
pub const PROC_TXN_COMPOUND: u32 = 0x8000_0001;

/// A transaction of several COMPOUNDs of one session (ADR 0021): BEGIN opens it and runs
/// its first COMPOUND, CONTINUE runs more, COMMIT runs the last and commits, ABORT rolls
/// it back. Each carries COMPOUND4args; the session has at most one open.
pub const PROC_TXN_BEGIN: u32 = 0x8000_0002;
pub const PROC_TXN_CONTINUE: u32 = 0x8000_0003;
pub const PROC_TXN_COMMIT: u32 = 0x8000_0004;
pub const PROC_TXN_ABORT: u32 = 0x8000_0005;

/// Per-operation protocol facts (names, flags) shared by client and server (ADR 0007).
pub mod ops;
pub mod reply_bound;
