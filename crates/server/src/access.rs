//! The export rules applied to one request (ADR 0043): a COMPOUND (or an NFSv3 call)
//! is admitted to an export when its current filehandle first names an object of it,
//! and then acts with the identity the matching rule gives it (root or all squashed);
//! a client no rule matches gets NFS4ERR_ACCESS (NFS3ERR_ACCES), one whose flavour the
//! rule does not allow NFS4ERR_WRONGSEC. Read-only rules make every change NFS4ERR_ROFS
//! ([`Compound::read_only`]); the pseudo file system shows a client only the exports
//! it may use ([`Compound::may_see`]).

use crate::cstate::Compound;
use crate::export::{Export, PseudoChild};
use crate::exportrules::{squash_into, CallFlavor, CallTransport, Caller, Flavor};
use crate::nfs::nfsstat4;
use txnfs_proto::nfs3::nfsstat3;
use txnfs_rpc::{CallInfo, Credential};

/// Why a request may not use an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No rule matches the client.
    Denied,
    /// The matching rule allows other flavours.
    WrongSec,
}

impl From<Refusal> for nfsstat4 {
    fn from(r: Refusal) -> nfsstat4 {
        match r {
            Refusal::Denied => nfsstat4::NFS4ERR_ACCESS,
            Refusal::WrongSec => nfsstat4::NFS4ERR_WRONGSEC,
        }
    }
}

impl From<Refusal> for nfsstat3 {
    fn from(_: Refusal) -> nfsstat3 {
        // NFSv3 has no WRONGSEC: both are "not for you".
        nfsstat3::NFS3ERR_ACCES
    }
}

impl From<Refusal> for crate::errors::OpError {
    fn from(r: Refusal) -> Self {
        nfsstat4::from(r).into()
    }
}

/// The caller of an RPC call: its address, its verified host name when some export's
/// rules name hosts (looked up off the transport thread, cached), its flavour.
pub async fn caller_of(srv: &crate::server::Server, info: &CallInfo) -> Caller {
    let mut caller = Caller::at(info.peer.ip());
    if matches!(info.cred, Credential::None) {
        caller.flavor = CallFlavor::None;
    }
    // RPCSEC_GSS (ADR 0051): the service it used, and whether the principal has a
    // local identity.
    if let Some(g) = &info.gss {
        caller.flavor = CallFlavor::Kerberos {
            flavor: match g.service {
                txnfs_rpc::gss::GssService::None => Flavor::Krb5,
                txnfs_rpc::gss::GssService::Integrity => Flavor::Krb5i,
                txnfs_rpc::gss::GssService::Privacy => Flavor::Krb5p,
            },
            mapped: srv.principals.creds_of(&g.principal).is_some(),
        };
    }
    // RPC-with-TLS (ADR 0049): the certificate gates `mtls` exports; the identity
    // the request acts as is still its AUTH_SYS one, squashed by the rule.
    caller.transport = match &info.tls {
        None => CallTransport::Plain,
        Some(t) if t.mutual() => CallTransport::MutualTls,
        Some(_) => CallTransport::Tls,
    };
    if srv.exports.needs_names() {
        caller.name = srv.exports.hostnames.name_of(caller.addr).await;
    }
    caller
}

impl Compound<'_> {
    /// Admits this request to `export`: from now on it acts as the identity the
    /// matching rule gives the caller's claimed one.
    pub fn admit(&mut self, export: &Export) -> Result<(), Refusal> {
        match export.clients.admitting(&self.caller) {
            Ok(rule) => {
                squash_into(rule, self.caller.flavor, &self.rpc_creds, &mut self.creds);
                Ok(())
            }
            Err(Some(_)) => Err(Refusal::WrongSec),
            Err(None) => {
                tracing::debug!(caller = %self.caller.addr, export = %export.name, "no export rule matches the client");
                Err(Refusal::Denied)
            }
        }
    }

    /// Whether `export` is read-only for this caller (for the export as a whole, or by
    /// the rule that matches it).
    pub fn read_only(&self, export: &Export) -> bool {
        export.read_only
            || export
                .clients
                .rule_for(&self.caller)
                .is_none_or(|r| r.read_only)
    }

    /// The flavours this caller may use on `export` (SECINFO): the matching rule's,
    /// else AUTH_SYS (what the server speaks; the client is refused anyway).
    pub fn flavors(&self, export: &Export) -> Vec<Flavor> {
        export
            .clients
            .rule_for(&self.caller)
            .map_or_else(|| vec![Flavor::Sys], |r| r.sec.clone())
    }

    /// Whether this caller sees `child` of a pseudo directory: an export it may use,
    /// or a pseudo directory leading to one.
    pub fn may_see(&self, child: &PseudoChild) -> bool {
        visible(&self.srv.exports.snapshot(), &self.caller, child, 0)
    }
}

fn visible(
    exports: &crate::export::ExportSet,
    caller: &Caller,
    child: &PseudoChild,
    depth: usize,
) -> bool {
    match child {
        PseudoChild::Export(id) => exports
            .get(*id)
            .is_some_and(|e| e.clients.rule_for(caller).is_some()),
        // The tree has as many levels as export names have components; the bound
        // only guards against a malformed one.
        PseudoChild::Node(n) => {
            depth < 256
                && exports.node(*n).is_some_and(|node| {
                    node.children
                        .values()
                        .any(|c| visible(exports, caller, c, depth + 1))
                })
        }
    }
}
