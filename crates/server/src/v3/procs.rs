//! The NFSv3 procedure table (RFC 1813 §3.3), one row per procedure as the v4 op table
//! (`crate::compound::optable`) has one per op: its handler, whether its reply goes
//! into the duplicate request cache (not idempotent: ADR 0039, knfsd's
//! `RC_REPLBUFF`/`RC_REPLSTAT` procedures), and how it may wait on storage
//! (`crate::placement`). A test fails when a procedure of `nfs3.x` has no row.

use bytes::Bytes;
use txnfs_proto::nfs3::*;
use txnfs_xdr::{Decode, Encode, GatherBuf, Gathered, XdrError};

use crate::cstate::Compound;
use crate::placement::{Blocking, INLINE_IO_BYTES};
use crate::v3::{attr, create, dir, file, fs, readdir};

/// A procedure run on its encoded arguments: the encoded result (READ's data a part
/// of its own, ADR 0052) and its status, or arguments that do not decode
/// (GARBAGE_ARGS).
pub type Handler = fn(&mut Compound, Bytes) -> Result<(Gathered, nfsstat3), XdrError>;

pub struct Proc3 {
    pub name: &'static str,
    pub run: Handler,
    /// Not idempotent: a retransmission must get the first reply (ADR 0039).
    pub cached: bool,
    /// How the call with these (encoded) arguments may wait on storage, as the v4 op
    /// table answers for the same op: small READs and unstable WRITEs and SETATTRs
    /// without a size do not.
    pub blocking: fn(&Bytes) -> Blocking,
}

fn blocks_if(b: bool) -> Blocking {
    if b {
        Blocking::Yes
    } else {
        Blocking::No
    }
}

/// A peek at the arguments for placement; arguments that do not decode are refused
/// wherever the call runs, so they may as well run inline.
fn peek<A: Decode>(args: &Bytes) -> Option<A> {
    A::from_bytes(args.clone()).ok()
}

fn read_blocks(args: &Bytes) -> Blocking {
    match peek::<READ3args>(args) {
        Some(r) if r.count as usize > INLINE_IO_BYTES => Blocking::LargeIo,
        _ => Blocking::No,
    }
}

fn write_blocks(args: &Bytes) -> Blocking {
    match peek::<WRITE3args>(args) {
        Some(w) if w.stable != stable_how::UNSTABLE => {
            if w.data.len() > INLINE_IO_BYTES {
                Blocking::Yes
            } else {
                Blocking::Sync
            }
        }
        Some(w) if w.data.len() > INLINE_IO_BYTES => Blocking::LargeIo,
        _ => Blocking::No,
    }
}

/// Whether a CREATE would truncate an existing non-empty file: UNCHECKED with a size,
/// of a name that is such a file now (a hint, as `Request::truncates_a_file` for v4).
pub fn truncates_a_file(srv: &crate::server::Server, proc_num: u32, args: &Bytes) -> bool {
    const CREATE: u32 = 8;
    if proc_num != CREATE {
        return false;
    }
    let Some(CREATE3args {
        r#where,
        how: createhow3::UNCHECKED(s),
    }) = peek::<CREATE3args>(args)
    else {
        return false;
    };
    if !matches!(s.size, set_size3::TRUE(_)) {
        return false;
    }
    crate::placement::names_a_non_empty_file(srv, &r#where.dir.data, &r#where.name)
}

/// Truncating can free many blocks; other attribute changes are quick.
fn setattr_blocks(args: &Bytes) -> Blocking {
    blocks_if(
        peek::<SETATTR3args>(args)
            .is_some_and(|s| matches!(s.new_attributes.size, set_size3::TRUE(_))),
    )
}

/// The status of a v3 result.
pub trait Status3 {
    fn status(&self) -> nfsstat3;
}

/// How a v3 result is encoded into a reply: whole into its tail, except READ's.
pub trait Reply3: Encode + Status3 {
    /// `piped`: the data the procedure left in a pipe (READ only; ADR 0065).
    fn gather(&self, piped: Option<txnfs_xdr::Piped>, out: &mut GatherBuf) {
        drop(piped);
        self.encode(out.tail());
    }
}

impl Reply3 for READ3res {
    fn gather(&self, piped: Option<txnfs_xdr::Piped>, out: &mut GatherBuf) {
        crate::compound::payload::encode_read3(self, piped, out);
    }
}

macro_rules! status3 {
    ($($res:ident),* $(,)?) => {$(
        impl Status3 for $res {
            fn status(&self) -> nfsstat3 {
                match self {
                    $res::NFS3_OK(_) => nfsstat3::NFS3_OK,
                    $res::default(s, ..) => *s,
                }
            }
        }
    )*};
}

macro_rules! reply3 {
    ($($res:ident),* $(,)?) => {$(
        impl Reply3 for $res {}
    )*};
}

status3!(
    GETATTR3res,
    SETATTR3res,
    LOOKUP3res,
    ACCESS3res,
    READLINK3res,
    READ3res,
    WRITE3res,
    CREATE3res,
    MKDIR3res,
    SYMLINK3res,
    MKNOD3res,
    REMOVE3res,
    RMDIR3res,
    RENAME3res,
    LINK3res,
    READDIR3res,
    READDIRPLUS3res,
    FSSTAT3res,
    FSINFO3res,
    PATHCONF3res,
    COMMIT3res,
);

reply3!(
    GETATTR3res,
    SETATTR3res,
    LOOKUP3res,
    ACCESS3res,
    READLINK3res,
    WRITE3res,
    CREATE3res,
    MKDIR3res,
    SYMLINK3res,
    MKNOD3res,
    REMOVE3res,
    RMDIR3res,
    RENAME3res,
    LINK3res,
    READDIR3res,
    READDIRPLUS3res,
    FSSTAT3res,
    FSINFO3res,
    PATHCONF3res,
    COMMIT3res,
);

/// Decodes the arguments, runs `f`, encodes its result.
fn run<A: Decode, Res: Reply3>(
    c: &mut Compound,
    args: Bytes,
    f: fn(&mut Compound, A) -> Res,
) -> Result<(Gathered, nfsstat3), XdrError> {
    let a = A::from_bytes(args)?;
    let res = f(c, a);
    let mut out = GatherBuf::default();
    res.gather(c.piped.take(), &mut out);
    Ok((out.finish(), res.status()))
}

macro_rules! row {
    ($name:literal, $f:path, cached: $cached:expr, by $blocking:path) => {
        Proc3 {
            name: $name,
            run: |c, args| run(c, args, $f),
            cached: $cached,
            blocking: $blocking,
        }
    };
    ($name:literal, $f:path, cached: $cached:expr, $blocking:ident) => {
        Proc3 {
            name: $name,
            run: |c, args| run(c, args, $f),
            cached: $cached,
            blocking: |_| Blocking::$blocking,
        }
    };
}

/// Rows by procedure number (RFC 1813 §3.3: 0 NULL … 21 COMMIT).
pub static PROCS: [Proc3; 22] = [
    Proc3 {
        name: "NULL",
        run: |_, _| Ok((Gathered::default(), nfsstat3::NFS3_OK)),
        cached: false,
        blocking: |_| Blocking::No,
    },
    row!("GETATTR", attr::getattr3, cached: false, No),
    row!("SETATTR", attr::setattr3, cached: true, by setattr_blocks),
    row!("LOOKUP", dir::lookup3, cached: false, No),
    row!("ACCESS", attr::access3, cached: false, No),
    row!("READLINK", dir::readlink3, cached: false, No),
    row!("READ", file::read3, cached: false, by read_blocks),
    row!("WRITE", file::write3, cached: true, by write_blocks),
    row!("CREATE", create::create3, cached: true, Metadata),
    row!("MKDIR", create::mkdir3, cached: true, Metadata),
    row!("SYMLINK", create::symlink3, cached: true, Metadata),
    row!("MKNOD", create::mknod3, cached: true, Metadata),
    row!("REMOVE", dir::remove3, cached: true, Metadata),
    row!("RMDIR", dir::rmdir3, cached: true, Metadata),
    row!("RENAME", dir::rename3, cached: true, Metadata),
    row!("LINK", dir::link3, cached: true, Metadata),
    // A listing reads many inodes.
    row!("READDIR", readdir::readdir3, cached: false, Yes),
    row!("READDIRPLUS", readdir::readdirplus3, cached: false, Yes),
    row!("FSSTAT", fs::fsstat3, cached: false, No),
    row!("FSINFO", fs::fsinfo3, cached: false, No),
    row!("PATHCONF", fs::pathconf3, cached: false, No),
    row!("COMMIT", file::commit3, cached: false, Sync),
];

/// The row of procedure `proc_num`, if v3 has one.
pub fn proc3(proc_num: u32) -> Option<&'static Proc3> {
    PROCS.get(proc_num as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The procedures of `spec/nfs3.x`'s program, in order: every one has its row.
    #[test]
    fn every_procedure_of_the_spec_has_a_row() {
        let spec = include_str!("../../../proto/spec/nfs3.x");
        let mut names = Vec::new();
        for line in spec.lines() {
            let l = line.trim();
            if let Some((_, rest)) = l.split_once("NFSPROC3_") {
                if let Some((name, num)) = rest.split_once('(') {
                    let num = num
                        .rsplit('=')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .trim_end_matches(';');
                    if let Ok(n) = num.trim().parse::<u32>() {
                        names.push((n, name.trim().to_string()));
                    }
                }
            }
        }
        assert_eq!(names.len(), 22, "procedures found in nfs3.x: {names:?}");
        for (n, name) in names {
            let row = proc3(n).unwrap_or_else(|| panic!("no row for {name}"));
            assert_eq!(row.name, name, "row {n}");
        }
        assert!(proc3(22).is_none());
    }

    #[test]
    fn placement_depends_on_the_arguments_as_for_v4() {
        use txnfs_xdr::Encode;
        let fh = nfs_fh3::default();
        let read = |count| {
            READ3args {
                file: fh.clone(),
                offset: 0,
                count,
            }
            .to_bytes()
        };
        let write = |stable, len| {
            WRITE3args {
                file: fh.clone(),
                offset: 0,
                count: len as u32,
                stable,
                data: Bytes::from(vec![0u8; len]),
            }
            .to_bytes()
        };
        let setattr = |size| {
            SETATTR3args {
                object: fh.clone(),
                new_attributes: sattr3 {
                    mode: set_mode3::default(false),
                    uid: set_uid3::default(false),
                    gid: set_gid3::default(false),
                    size,
                    atime: set_atime::default(time_how::DONT_CHANGE),
                    mtime: set_mtime::default(time_how::DONT_CHANGE),
                },
                guard: sattrguard3::FALSE,
            }
            .to_bytes()
        };
        let at = |n: u32, args: Bytes| (PROCS[n as usize].blocking)(&args);
        assert_eq!(at(6, read(4096)), Blocking::No);
        assert_eq!(at(6, read(1 << 20)), Blocking::LargeIo);
        assert_eq!(at(7, write(stable_how::UNSTABLE, 4096)), Blocking::No);
        assert_eq!(at(7, write(stable_how::FILE_SYNC, 4096)), Blocking::Sync);
        assert_eq!(at(7, write(stable_how::DATA_SYNC, 4096)), Blocking::Sync);
        assert_eq!(at(21, Bytes::new()), Blocking::Sync, "COMMIT");
        assert_eq!(
            at(7, write(stable_how::FILE_SYNC, 128 << 10)),
            Blocking::Yes
        );
        assert_eq!(
            at(7, write(stable_how::UNSTABLE, 128 << 10)),
            Blocking::LargeIo
        );
        assert_eq!(at(2, setattr(set_size3::default(false))), Blocking::No);
        assert_eq!(at(2, setattr(set_size3::TRUE(0))), Blocking::Yes);
        assert_eq!(at(12, Bytes::new()), Blocking::Metadata);
        assert_eq!(at(1, Bytes::new()), Blocking::No);
    }
}
