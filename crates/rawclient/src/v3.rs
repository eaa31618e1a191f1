//! Raw NFSv3 and MOUNT v3 calls over `txnfs_rpc::RpcClient` (RFC 1813) for protocol
//! tests: typed arguments in, typed results out, every xid under the test's control
//! when it wants to retransmit, and builders for the arguments the tests send most.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::mnt3::{self, mountres3};
use txnfs_proto::nfs3::*;
use txnfs_rpc::{Credential, RpcClient, RpcError};
use txnfs_xdr::{Decode, Encode};

use crate::tcp::CallError;

pub const NFS_PROGRAM: u32 = 100003;
pub const NFS_V3: u32 = 3;
pub const MOUNT_PROGRAM: u32 = 100005;
pub const MOUNT_V3: u32 = 3;

/// NFSv3 procedure numbers (RFC 1813 §3.3).
pub mod proc3 {
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
}

/// MOUNT v3 procedure numbers (RFC 1813 appendix I).
pub mod mountproc3 {
    pub const NULL: u32 = 0;
    pub const MNT: u32 = 1;
    pub const DUMP: u32 = 2;
    pub const UMNT: u32 = 3;
    pub const UMNTALL: u32 = 4;
    pub const EXPORT: u32 = 5;
}

/// One connection speaking NFSv3 and MOUNT v3.
pub struct V3Client {
    pub rpc: RpcClient,
    /// The bound of each call (a dropped call never gets a reply).
    pub timeout: Duration,
}

impl V3Client {
    pub async fn connect(addr: SocketAddr, cred: Credential) -> Result<Self, RpcError> {
        Ok(V3Client {
            rpc: RpcClient::connect(addr, cred).await?,
            timeout: Duration::from_secs(10),
        })
    }

    /// As [`V3Client::connect`], from the local address `local` (another loopback
    /// address plays another host).
    pub async fn connect_from(
        local: std::net::IpAddr,
        addr: SocketAddr,
        cred: Credential,
    ) -> Result<Self, RpcError> {
        Ok(V3Client {
            rpc: RpcClient::connect_from(local, addr, cred).await?,
            timeout: Duration::from_secs(10),
        })
    }

    /// Encoded `args` to `prog`/`vers`/`proc_num` with transaction id `xid`: the
    /// encoded results.
    pub async fn call_raw(
        &self,
        xid: u32,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: &[u8],
    ) -> Result<Bytes, CallError> {
        let msg = txnfs_rpc::encode_call(xid, prog, vers, proc_num, self.rpc.credential(), args);
        let wire = txnfs_rpc::record(&msg);
        tokio::time::timeout(self.timeout, self.rpc.call_raw_record(xid, wire))
            .await
            .map_err(|_| CallError::Timeout(self.timeout))?
            .map_err(CallError::Rpc)
    }

    /// NFSv3 procedure `proc_num` with transaction id `xid` (the same xid twice is a
    /// retransmission).
    pub async fn nfs_xid<A: Encode, R: Decode>(
        &self,
        xid: u32,
        proc_num: u32,
        args: &A,
    ) -> Result<R, CallError> {
        let b = self
            .call_raw(xid, NFS_PROGRAM, NFS_V3, proc_num, &args.to_bytes())
            .await?;
        R::from_bytes(b).map_err(|e| CallError::Decode(e.to_string()))
    }

    /// NFSv3 procedure `proc_num` with a fresh xid.
    pub async fn nfs<A: Encode, R: Decode>(&self, proc_num: u32, args: &A) -> Result<R, CallError> {
        self.nfs_xid(self.rpc.next_xid(), proc_num, args).await
    }

    /// MOUNT v3 procedure `proc_num` with a fresh xid; the encoded results.
    pub async fn mount_raw(&self, proc_num: u32, args: &[u8]) -> Result<Bytes, CallError> {
        let xid = self.rpc.next_xid();
        self.call_raw(xid, MOUNT_PROGRAM, MOUNT_V3, proc_num, args)
            .await
    }

    /// MNT of `path`.
    pub async fn mnt(&self, path: &str) -> Result<mountres3, CallError> {
        let path: mnt3::dirpath = Bytes::copy_from_slice(path.as_bytes());
        let b = self.mount_raw(mountproc3::MNT, &path.to_bytes()).await?;
        mountres3::from_bytes(b).map_err(|e| CallError::Decode(e.to_string()))
    }

    /// The root handle of `path` from MNT; panics when MNT fails (a test's setup).
    pub async fn root(&self, path: &str) -> nfs_fh3 {
        match self.mnt(path).await {
            Ok(mountres3::MNT3_OK(ok)) => nfs_fh3 { data: ok.fhandle },
            other => panic!("MNT {path}: {other:?}"),
        }
    }

    /// LOOKUP of `name` in `dir`.
    pub async fn lookup(&self, dir: &nfs_fh3, name: &str) -> Result<LOOKUP3res, CallError> {
        let what = dirop(dir, name);
        self.nfs(proc3::LOOKUP, &LOOKUP3args { what }).await
    }

    /// GETATTR of `fh`.
    pub async fn getattr(&self, fh: &nfs_fh3) -> Result<GETATTR3res, CallError> {
        let object = fh.clone();
        self.nfs(proc3::GETATTR, &GETATTR3args { object }).await
    }

    /// READ of up to `count` bytes of `fh` at `offset`.
    pub async fn read(&self, fh: &nfs_fh3, offset: u64, count: u32) -> Result<READ3res, CallError> {
        let file = fh.clone();
        let args = READ3args {
            file,
            offset,
            count,
        };
        self.nfs(proc3::READ, &args).await
    }

    /// WRITE of all of `data` to `fh` at `offset`, as `stable`.
    pub async fn write(
        &self,
        fh: &nfs_fh3,
        offset: u64,
        data: &[u8],
        stable: stable_how,
    ) -> Result<WRITE3res, CallError> {
        let args = WRITE3args {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Bytes::copy_from_slice(data),
        };
        self.nfs(proc3::WRITE, &args).await
    }
}

/// `sattr3` that sets nothing.
pub fn sattr_none() -> sattr3 {
    sattr3 {
        mode: set_mode3::default(false),
        uid: set_uid3::default(false),
        gid: set_gid3::default(false),
        size: set_size3::default(false),
        atime: set_atime::default(time_how::DONT_CHANGE),
        mtime: set_mtime::default(time_how::DONT_CHANGE),
    }
}

/// `sattr3` that sets the mode only.
pub fn sattr_mode(mode: u32) -> sattr3 {
    sattr3 {
        mode: set_mode3::TRUE(mode),
        ..sattr_none()
    }
}

pub fn dirop(dir: &nfs_fh3, name: &str) -> diropargs3 {
    diropargs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name.as_bytes()),
    }
}

/// The status of any v3 result that starts with one (every one does).
pub fn status3(reply: &Bytes) -> Option<nfsstat3> {
    let mut b = reply.clone();
    nfsstat3::decode(&mut b).ok()
}
