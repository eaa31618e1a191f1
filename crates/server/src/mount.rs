//! MOUNT version 3 (RFC 1813 appendix I), program 100005 on the NFS port: how an
//! NFSv3 client gets its first file handle. MNT resolves a path to an export's root,
//! or to a directory below it (as knfsd lets a client mount any directory of an
//! export), for a client the export's rules admit (else MNT3ERR_ACCES, ADR 0043), and
//! answers its handle with the flavours the client's rule allows; DUMP, UMNT and
//! UMNTALL keep the advisory list of who mounted what; EXPORT lists the exports with
//! their client specs as groups. The handle is the one NFSv4 gives the same object.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use txnfs_backend::{Creds, FileType};
use txnfs_proto::mnt3::*;
use txnfs_rpc::ReplyBody;
use txnfs_xdr::{Decode, Encode};

use crate::export::{CompoundScope, Export};
use crate::exportrules::{Caller, Decision, Flavor};
use crate::server::Server;

pub const MOUNT_PROGRAM: u32 = 100005;
pub const MOUNT_V3: u32 = 3;

const MOUNTPROC3_NULL: u32 = 0;
const MOUNTPROC3_MNT: u32 = 1;
const MOUNTPROC3_DUMP: u32 = 2;
const MOUNTPROC3_UMNT: u32 = 3;
const MOUNTPROC3_UMNTALL: u32 = 4;
const MOUNTPROC3_EXPORT: u32 = 5;

/// Entries of the mount list kept at most; past it MNT still answers but is not
/// listed (the list is advisory: RFC 1813 appendix I says clients must not rely on
/// it).
const MAX_MOUNTS: usize = 4096;

/// Who mounted what (DUMP): (client host, path), the host as its address.
#[derive(Default)]
pub struct Mounts {
    list: Mutex<BTreeSet<(String, Bytes)>>,
}

impl Mounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<(String, Bytes)>> {
        // Plain set updates in single statements: a poisoned lock is usable as it is.
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs one MOUNT call from `peer`.
pub async fn call(
    server: &Arc<Server>,
    mounts: &Arc<Mounts>,
    caller: Caller,
    peer: SocketAddr,
    proc_num: u32,
    args: Bytes,
) -> ReplyBody {
    let host = peer.ip().to_string();
    match proc_num {
        MOUNTPROC3_NULL => ReplyBody::Success(Bytes::new()),
        MOUNTPROC3_MNT => {
            let Ok(path) = dirpath::from_bytes(args) else {
                return ReplyBody::GarbageArgs;
            };
            let (server, mounts) = (server.clone(), mounts.clone());
            // Lookups on the backend: off the transport thread.
            let res = tokio::task::spawn_blocking(move || {
                let res = mnt(&server, &caller, &path);
                if matches!(res, mountres3::MNT3_OK(_)) {
                    let mut list = mounts.lock();
                    if list.len() < MAX_MOUNTS {
                        list.insert((host, path));
                    }
                }
                res
            })
            .await;
            match res {
                Ok(res) => ReplyBody::Success(res.to_bytes()),
                Err(e) => {
                    tracing::error!(%peer, "MNT task failed: {e}");
                    ReplyBody::SystemErr
                }
            }
        }
        MOUNTPROC3_DUMP => {
            let list = mounts.lock();
            let bodies = list
                .iter()
                .map(|(h, d)| mountbody {
                    ml_hostname: Bytes::copy_from_slice(h.as_bytes()),
                    ml_directory: d.clone(),
                })
                .collect();
            ReplyBody::Success(mountlist(bodies).to_bytes())
        }
        MOUNTPROC3_UMNT => {
            let Ok(path) = dirpath::from_bytes(args) else {
                return ReplyBody::GarbageArgs;
            };
            mounts.lock().remove(&(host, path));
            ReplyBody::Success(Bytes::new())
        }
        MOUNTPROC3_UMNTALL => {
            mounts.lock().retain(|(h, _)| *h != host);
            ReplyBody::Success(Bytes::new())
        }
        MOUNTPROC3_EXPORT => ReplyBody::Success(export_list(server).to_bytes()),
        _ => ReplyBody::ProcUnavail,
    }
}

/// EXPORT: every export, with its client specs as groups (`showmount -e`).
fn export_list(server: &Server) -> exports {
    exports(
        server
            .exports
            .snapshot()
            .exports
            .values()
            .map(|e| exportnode {
                ex_dir: Bytes::copy_from_slice(e.name.as_bytes()),
                ex_groups: groups(
                    e.clients
                        .rules()
                        .iter()
                        .map(|r| groupnode {
                            gr_name: Bytes::copy_from_slice(r.text.as_bytes()),
                        })
                        .collect(),
                ),
            })
            .collect(),
    )
}

/// The components of a path: "." and empty ones dropped; `None` for ".." (a mount
/// path never climbs).
fn components(path: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// The export whose name is the longest leading part of `path`, and the rest.
fn export_of<'p>(server: &Server, path: &'p [u8]) -> Option<(Arc<Export>, Vec<&'p [u8]>)> {
    let parts = components(path)?;
    server
        .exports
        .snapshot()
        .exports
        .values()
        .filter_map(|e| {
            let name = components(e.name.as_bytes())?;
            parts
                .starts_with(&name)
                .then(|| (e.clone(), parts[name.len()..].to_vec()))
        })
        .max_by_key(|(_, rest)| std::cmp::Reverse(rest.len()))
}

/// MNT: the handle of the directory `path` names, for a client the export admits.
fn mnt(server: &Server, caller: &Caller, path: &Bytes) -> mountres3 {
    use mountstat3::*;
    // An empty path is the root: clients that trim a trailing '/' (nfs-rs) send "/"
    // so. Any other path must be absolute.
    if !path.is_empty() && !path.starts_with(b"/") {
        return mountres3::default(MNT3ERR_NOENT);
    }
    let Some((export, rest)) = export_of(server, path) else {
        return mountres3::default(MNT3ERR_NOENT);
    };
    let flavors = match export.clients.decide(caller, &Creds::default()) {
        Decision::Allow { .. } => export
            .clients
            .rule_for(caller)
            .map(|r| r.sec.clone())
            .unwrap_or_default(),
        // `sec=tls` / `mtls` over a connection without (m)TLS: no flavour the client
        // could switch to would help, so the mount is refused (ADR 0049).
        Decision::WrongSec(allowed) => {
            tracing::info!(client = %caller.addr, export = %export.name, ?allowed, transport = ?caller.transport,
                "MNT refused: the export wants another security flavour or TLS");
            return mountres3::default(MNT3ERR_ACCES);
        }
        Decision::Denied => {
            tracing::info!(client = %caller.addr, export = %export.name, "MNT refused: no export rule matches the client");
            return mountres3::default(MNT3ERR_ACCES);
        }
    };
    let mut scope = CompoundScope::new(&server.exports);
    let resolved = (|| {
        let cx = scope
            .ctx_for(&export, &Creds::default(), None)
            .map_err(|_| MNT3ERR_SERVERFAULT)?;
        let mut key = export.root_key.clone();
        for name in rest {
            let (next, attrs) = export
                .backend
                .lookup(cx, &key, name)
                .map_err(|e| mount_status(&e))?;
            if attrs.ftype != FileType::Directory {
                return Err(MNT3ERR_NOTDIR);
            }
            key = next;
        }
        Ok(key)
    })();
    let _ = scope.finish(resolved.is_ok());
    let key = match resolved {
        Ok(key) => key,
        Err(s) => return mountres3::default(s),
    };
    let fhandle = server.fh_wire(&server.obj_fh(&export, key));
    if fhandle.len() > FHSIZE3 as usize {
        tracing::warn!(path = %String::from_utf8_lossy(path), "the handle is too long for NFSv3");
        return mountres3::default(MNT3ERR_SERVERFAULT);
    }
    mountres3::MNT3_OK(mountres3_ok {
        fhandle,
        // AUTH_SYS (1) for sys/tls/mtls, 390003-390005 for krb5/krb5i/krb5p.
        auth_flavors: Flavor::advertised(&flavors)
            .iter()
            .map(|f| f.pseudo_flavor() as i32)
            .collect(),
    })
}

fn mount_status(e: &txnfs_backend::BackendError) -> mountstat3 {
    use txnfs_backend::BackendError as B;
    match e {
        B::NotFound | B::Stale => mountstat3::MNT3ERR_NOENT,
        B::NotDir | B::SymlinkLoop => mountstat3::MNT3ERR_NOTDIR,
        B::Access | B::Perm => mountstat3::MNT3ERR_ACCES,
        B::NameTooLong => mountstat3::MNT3ERR_NAMETOOLONG,
        B::BadName | B::Inval => mountstat3::MNT3ERR_INVAL,
        B::Io(_) => mountstat3::MNT3ERR_IO,
        _ => mountstat3::MNT3ERR_SERVERFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_never_climb() {
        assert_eq!(components(b"/a//./b/"), Some(vec![&b"a"[..], b"b"]));
        assert_eq!(components(b"/a/../b"), None);
        assert_eq!(components(b"/"), Some(vec![]));
    }
}
