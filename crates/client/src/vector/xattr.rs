//! Extended attributes of many files (NFSv4.2, RFC 8276): the user namespace only,
//! names as NFS carries them (without Linux's `user.` prefix, §5.3).

use super::{Fs, Item};
use crate::ClientError;
use bytes::Bytes;
use txnfs_proto::nfs4::*;

/// Names per LISTXATTRS reply we ask for.
const LIST_BYTES: u32 = 64 << 10;

/// One file's extended attributes: (name, value).
pub type Xattrs = Vec<(Bytes, Bytes)>;

/// What a call answers on an NFSv4.1 session, where no extended attribute exists.
fn no_xattrs(op: &'static str) -> ClientError {
    ClientError::nfs(op, 0, nfsstat4::NFS4ERR_NOTSUPP)
}

impl Fs {
    /// Does this session carry extended attributes (NFSv4.2)? Servers that do not keep
    /// them answer the calls below with NFS4ERR_NOTSUPP.
    pub fn speaks_xattrs(&self) -> bool {
        self.client.minor_version() >= 2
    }

    /// The extended attributes of each path: LISTXATTRS (following its cookie), then
    /// one GETXATTR per name, all vectorized.
    pub async fn vgetxattrs<S: AsRef<str>>(&self, paths: &[S]) -> Vec<Result<Xattrs, ClientError>> {
        if !self.speaks_xattrs() {
            return paths.iter().map(|_| Err(no_xattrs("LISTXATTRS"))).collect();
        }
        let mut names: Vec<Result<Vec<Bytes>, ClientError>> =
            paths.iter().map(|_| Ok(Vec::new())).collect();
        // (path index, cookie) still to list.
        let mut todo: Vec<(usize, u64)> = (0..paths.len()).map(|i| (i, 0)).collect();
        while !todo.is_empty() {
            let mut items = Vec::new();
            let mut sent = Vec::new();
            for (i, cookie) in todo {
                match self.resolve(paths[i].as_ref()) {
                    Ok(mut ops) => {
                        ops.push(nfs_argop4::OP_LISTXATTRS(LISTXATTRS4args {
                            lxa_cookie: cookie,
                            lxa_maxcount: LIST_BYTES,
                        }));
                        items.push(Item {
                            ops,
                            reply_estimate: LIST_BYTES as usize + 128,
                            optional_from: None,
                        });
                        sent.push(i);
                    }
                    Err(e) => names[i] = Err(e),
                }
            }
            todo = Vec::new();
            for (i, r) in sent.into_iter().zip(self.run(items).await) {
                let listed = r.and_then(|v| {
                    v.into_iter()
                        .find_map(|x| match x {
                            nfs_resop4::OP_LISTXATTRS(LISTXATTRS4res::NFS4_OK(ok)) => Some(ok),
                            _ => None,
                        })
                        .ok_or_else(|| ClientError::Protocol("no LISTXATTRS".into()))
                });
                match (listed, &mut names[i]) {
                    (Ok(ok), Ok(have)) => {
                        let more = !ok.lxr_eof && !ok.lxr_names.is_empty();
                        have.extend(ok.lxr_names);
                        if more {
                            todo.push((i, ok.lxr_cookie));
                        }
                    }
                    (Err(e), slot) => *slot = Err(e),
                    _ => {}
                }
            }
        }
        // One GETXATTR per name.
        let mut items = Vec::new();
        let mut owner = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let Ok(n) = n else { continue };
            for name in n {
                let Ok(mut ops) = self.resolve(paths[i].as_ref()) else {
                    continue;
                };
                ops.push(nfs_argop4::OP_GETXATTR(GETXATTR4args {
                    gxa_name: name.clone(),
                }));
                items.push(Item {
                    ops,
                    reply_estimate: 64 << 10,
                    optional_from: None,
                });
                owner.push((i, name.clone()));
            }
        }
        let mut out: Vec<Result<Xattrs, ClientError>> =
            names.into_iter().map(|n| n.map(|_| Vec::new())).collect();
        for ((i, name), r) in owner.into_iter().zip(self.run(items).await) {
            let value = r.and_then(|v| {
                v.into_iter()
                    .find_map(|x| match x {
                        nfs_resop4::OP_GETXATTR(GETXATTR4res::NFS4_OK(value)) => Some(value),
                        _ => None,
                    })
                    .ok_or_else(|| ClientError::Protocol("no GETXATTR".into()))
            });
            match (value, &mut out[i]) {
                (Ok(v), Ok(have)) => have.push((name, v)),
                // Removed between the listing and the read: not there to copy.
                (
                    Err(ClientError::Nfs {
                        status: nfsstat4::NFS4ERR_NOXATTR,
                        ..
                    }),
                    _,
                ) => {}
                (Err(e), slot) => *slot = Err(e),
                _ => {}
            }
        }
        out
    }

    /// Set extended attributes: (path, name, value), each created or replaced.
    pub async fn vsetxattrs<S: AsRef<str>>(
        &self,
        sets: &[(S, Bytes, Bytes)],
    ) -> Vec<Result<(), ClientError>> {
        if !self.speaks_xattrs() {
            return sets.iter().map(|_| Err(no_xattrs("SETXATTR"))).collect();
        }
        let (items, errs) = super::meta::items_for(sets, 200, |(p, name, value)| {
            let mut ops = self.resolve(p.as_ref())?;
            ops.push(nfs_argop4::OP_SETXATTR(Box::new(SETXATTR4args {
                sxa_option: setxattr_option4::SETXATTR4_EITHER,
                sxa_key: name.clone(),
                sxa_value: value.clone(),
            })));
            Ok(ops)
        });
        let res = self.run(items).await;
        super::meta::merge(errs, res, |r| r.map(|_| ()))
    }
}
