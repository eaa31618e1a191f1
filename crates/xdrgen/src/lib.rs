//! Code generator from the XDR language (RFC 4506 section 6) to Rust.
//!
//! The generated code targets the `txnfs_xdr` runtime (`Encode`/`Decode` over
//! `bytes::Bytes`). See `docs/adr/0002-xdr-codegen.md` for the naming and mapping
//! conventions. Typical use is from a `build.rs`:
//!
//! ```ignore
//! let rust = txnfs_xdrgen::generate(&std::fs::read_to_string("spec/nfs4.x")?)?;
//! ```

pub mod ast;
mod gen;
mod parse;

pub use parse::parse;

/// Why a specification could not be turned into Rust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("line {line}: {msg}")]
    Syntax { line: usize, msg: String },
    #[error("{0}")]
    Semantic(String),
}

/// Choices of the Rust mapping that the XDR text cannot express.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Union arms of these (named) types are carried as `Box<T>`. A Rust enum is as
    /// large as its largest arm, and it is moved whole: one rare, large arm (NFSv4's
    /// OPEN among its many small ops) would make every value of the union pay for it.
    pub boxed_arms: Vec<String>,
}

/// Parse an XDR specification and generate the Rust module body for it.
pub fn generate(src: &str) -> Result<String, Error> {
    generate_with(src, &Options::default())
}

/// [`generate`], with mapping choices.
pub fn generate_with(src: &str, options: &Options) -> Result<String, Error> {
    let spec = parse(src)?;
    gen::generate(&spec, options)
}
