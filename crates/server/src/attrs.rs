//! The attributes the server reports of a file handle (RFC 8881 §5): an export
//! object's from its backend, a pseudo directory's made up, encoded and compared by
//! `txnfs_attr` with what the server adds (its limits, the file system's, the handle,
//! `mounted_on_fileid`), and READDIR's cookie verifier.

use txnfs_attr::{AttrSource, FsInfo};
use txnfs_backend::{Attrs, FileType, OpCtx, Timestamp};

use crate::config::Config;
use crate::errors::OpError;
use crate::export::{Exports, PseudoNode, PSEUDO_FSID};
use crate::fh::Fh;
use crate::handle::HandleCodec;
use crate::nfs::fattr4;

/// What the attributes are made of besides the backends: the server lends it
/// (`Server::attrs`).
#[derive(Clone, Copy)]
pub struct Attributes<'a> {
    pub cfg: &'a Config,
    pub exports: &'a Exports,
    pub handles: &'a HandleCodec,
    /// When this instance started (a pseudo directory's times).
    pub boot_time: Timestamp,
    /// This instance's boot epoch (a pseudo directory's change attribute).
    pub boot_epoch: u32,
}

impl Attributes<'_> {
    fn pseudo_attrs(&self, n: u16) -> Attrs {
        let children = self
            .exports
            .snapshot()
            .node(n)
            .map_or(0, |x| x.children.len());
        Attrs {
            ftype: FileType::Directory,
            mode: 0o555,
            nlink: 2 + children as u32,
            uid: 0,
            gid: 0,
            size: 4096,
            space_used: 4096,
            rdev: (0, 0),
            fsid: 0,
            fileid: PseudoNode::fileid(n),
            atime: self.boot_time,
            mtime: self.boot_time,
            ctime: self.boot_time,
            change: self.boot_epoch as u64,
        }
    }

    /// The attributes of `fh`.
    pub fn attrs_of(&self, cx: &OpCtx, fh: &Fh) -> Result<Attrs, OpError> {
        match fh {
            Fh::Pseudo(n) => Ok(self.pseudo_attrs(*n)),
            Fh::Obj(o) => Ok(o.export.backend.getattr(cx, &o.key)?),
        }
    }

    fn fs_info(&self, fh: &Fh, minor: u32) -> FsInfo {
        let fsid = match fh {
            Fh::Pseudo(_) => PSEUDO_FSID,
            Fh::Obj(o) => o.export.fsid(),
        };
        let (clone_blksize, xattr_support) = match fh {
            Fh::Pseudo(_) => (0, false),
            // CLONE is offered where blocks are shared; FICLONERANGE wants ranges
            // aligned to the file system block (4 KiB on the file systems that share).
            Fh::Obj(o) => (
                if o.export.backend.clone_method() == txnfs_backend::CloneMethod::Reflink {
                    4096
                } else {
                    0
                },
                o.export.backend.xattr_support(),
            ),
        };
        FsInfo {
            fsid,
            lease_time: self.cfg.lease_time,
            maxread: self.cfg.max_io_size as u64,
            maxwrite: self.cfg.max_io_size as u64,
            maxfilesize: i64::MAX as u64,
            maxname: 255,
            maxlink: 65000,
            time_delta: Timestamp { sec: 0, nsec: 1 },
            fh_expire_type: 0, // FH4_PERSISTENT
            link_support: true,
            symlink_support: true,
            minor,
            clone_blksize,
            xattr_support,
        }
    }

    fn mounted_on_fileid(&self, fh: &Fh, attrs: &Attrs) -> u64 {
        if let Fh::Obj(o) = fh {
            if o.key == o.export.root_key && o.export.parent_node.is_some() {
                // The export root as seen from the pseudo directory it is mounted on.
                return (1u64 << 62) | o.export.id as u64;
            }
        }
        attrs.fileid
    }

    /// Hands `f` what the attribute layer needs about `fh`, whose attributes are
    /// `attrs`, to encode or compare `mask` for a COMPOUND of minor version `minor`.
    fn with_attr_source<R>(
        &self,
        cx: &OpCtx,
        fh: &Fh,
        attrs: &Attrs,
        mask: &[u32],
        minor: u32,
        f: impl FnOnce(&AttrSource) -> R,
    ) -> Result<R, OpError> {
        let stats = if txnfs_attr::needs_fsstats(mask) {
            match fh {
                Fh::Obj(o) => Some(o.export.backend.statfs(cx, &o.key)?),
                Fh::Pseudo(_) => Some(txnfs_backend::FsStats::default()),
            }
        } else {
            None
        };
        let fs = self.fs_info(fh, minor);
        let wire = fh.wire(self.handles);
        Ok(f(&AttrSource {
            attrs,
            fh: &wire,
            fs: &fs,
            fsstats: stats.as_ref(),
            mounted_on_fileid: self.mounted_on_fileid(fh, attrs),
            rdattr_error: None,
        }))
    }

    /// Encode the requested attributes of `fh` as a COMPOUND of minor version `minor`
    /// sees them; `known` avoids a second stat when the caller (READDIR) already has
    /// them.
    pub fn fattr(
        &self,
        cx: &OpCtx,
        fh: &Fh,
        request: &[u32],
        known: Option<&Attrs>,
        minor: u32,
    ) -> Result<fattr4, OpError> {
        let attrs = match known {
            Some(a) => a.clone(),
            None => self.attrs_of(cx, fh)?,
        };
        let (attrmask, attr_vals) =
            self.with_attr_source(cx, fh, &attrs, request, minor, |src| {
                txnfs_attr::encode(request, src)
            })?;
        Ok(fattr4 {
            attrmask,
            attr_vals,
        })
    }

    /// VERIFY/NVERIFY: whether the client's attributes equal ours.
    pub fn compare_attrs(
        &self,
        cx: &OpCtx,
        fh: &Fh,
        f: &fattr4,
        minor: u32,
    ) -> Result<bool, OpError> {
        let attrs = self.attrs_of(cx, fh)?;
        self.with_attr_source(cx, fh, &attrs, &f.attrmask, minor, |src| {
            txnfs_attr::compare(&f.attrmask, &f.attr_vals, src)
        })?
        .map_err(|e| OpError::Status(crate::errors::status_from_u32(e.nfsstat())))
    }

    /// READDIR cookie verifier: constant per directory, so cookies stay usable across
    /// server restarts (our cookies are the file system's own stable offsets).
    pub fn cookieverf(&self, fh: &Fh) -> [u8; 8] {
        let id = match fh {
            Fh::Pseudo(_) => 0u16,
            Fh::Obj(o) => o.export.id,
        };
        let mut v = *b"txnfs\0\0\0";
        v[6..].copy_from_slice(&id.to_be_bytes());
        v
    }
}
