//! Export rules (exports(5), ADR 0043): which clients may use an export, read-only or
//! read-write, and as whom (squashing). `rules` holds the types and the one decision,
//! `exports_file` parses `/etc/exports`-style text (and each spec of the TOML
//! `clients` list), `hostnames` finds a client's verified host name for rules that
//! name hosts. A leaf: no I/O but the name lookups, no server types.

pub mod exports_file;
pub mod hostnames;
pub mod rules;

pub use exports_file::{parse_rule, ExportLine, ParseError, RuleError};
pub use rules::{
    squash_into, CallFlavor, CallTransport, Caller, ClientRule, ClientRules, ClientSpec, Decision,
    Flavor, Squash,
};

/// Deserializes a TOML `clients` list: each entry an exports(5) spec (`"10.0.0.0/8(ro)"`).
pub fn deserialize_clients<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<ClientRule>, D::Error> {
    use serde::Deserialize;
    let specs = Vec::<String>::deserialize(d)?;
    if specs.len() > rules::MAX_RULES {
        return Err(serde::de::Error::custom(RuleError::TooMany));
    }
    specs
        .iter()
        .map(|s| parse_rule(s).map_err(|e| serde::de::Error::custom(format!("client {s:?}: {e}"))))
        .collect()
}
