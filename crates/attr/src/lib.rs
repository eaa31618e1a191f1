//! The NFSv4.1 and NFSv4.2 attribute layer (RFC 8881 §5, RFC 7862 §12, RFC 8276, RFC 9754).
//!
//! * [`encode`] builds the `fattr4` of a GETATTR or READDIR reply from backend [`Attrs`].
//! * [`decode_setattrs`] turns the `fattr4` of SETATTR / CREATE / OPEN createattrs into
//!   backend [`SetAttrs`].
//! * [`compare`] implements the attribute comparison of VERIFY / NVERIFY.
//!
//! The API deliberately uses plain types (bitmaps as `&[u32]` / `Vec<u32>`, the attribute
//! values as the raw `attrlist4` [`Bytes`]) so that it does not depend on the generated
//! protocol types: `fattr4 { attrmask, attr_vals }` maps onto `(mask, vals)` directly.
//!
//! Bitmap layout (`bitmap4`): attribute `n` is bit `n % 32` of word `n / 32`.

use bytes::{Bytes, BytesMut};
use txnfs_backend::{Attrs, FileType, FsStats, SetAttrs, SetTime, Timestamp};
use txnfs_xdr::{get_array, get_i64, get_opaque, get_u32, get_u64, put_i64, put_opaque};
use txnfs_xdr::{put_u32, put_u64, XdrError};

/// Attribute numbers (RFC 8881 / nfs4.x `FATTR4_*`) of the attributes this crate knows.
pub mod fattr {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const ACL: u32 = 12;
    pub const ACLSUPPORT: u32 = 13;
    pub const ARCHIVE: u32 = 14;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const FS_LOCATIONS: u32 = 24;
    pub const HIDDEN: u32 = 25;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MIMETYPE: u32 = 32;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const QUOTA_AVAIL_HARD: u32 = 38;
    pub const QUOTA_AVAIL_SOFT: u32 = 39;
    pub const QUOTA_USED: u32 = 40;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const SYSTEM: u32 = 46;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_BACKUP: u32 = 49;
    pub const TIME_CREATE: u32 = 50;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const MODE_SET_MASKED: u32 = 74;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    // NFSv4.2 (RFC 7862 §12.2, RFC 8275, RFC 8276).
    pub const CLONE_BLKSIZE: u32 = 77;
    pub const SPACE_FREED: u32 = 78;
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    pub const MODE_UMASK: u32 = 81;
    pub const XATTR_SUPPORT: u32 = 82;
    // RFC 9754 (extending the opening of files).
    pub const TIME_DELEG_ACCESS: u32 = 84;
    pub const TIME_DELEG_MODIFY: u32 = 85;
    pub const OPEN_ARGUMENTS: u32 = 86;
}

/// What OPEN takes here (the `open_arguments` attribute, RFC 9754 §4): each field a
/// bitmap with bit N set for the supported value N of its `open_args_*4` enum.
pub mod open_args {
    /// READ, WRITE, BOTH.
    pub const SHARE_ACCESS: u32 = (1 << 1) | (1 << 2) | (1 << 3);
    /// NONE, READ, WRITE, BOTH.
    pub const SHARE_DENY: u32 = 0b1111;
    /// ANY_DELEG (3), NO_DELEG (4), CANCEL (5), DELEG_TIMESTAMPS (20). Not OPEN_XOR_DELEGATION
    /// (21), nor the signal/push wants (17, 18): an OPEN asking them is served without.
    pub const SHARE_ACCESS_WANT: u32 = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 20);
    /// NULL, PREVIOUS, DELEGATE_CUR, FH, DELEG_CUR_FH; not the DELEG_PREV claims (no
    /// delegation is reclaimed after a client restart).
    pub const OPEN_CLAIM: u32 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 4) | (1 << 5);
    /// UNCHECKED4, GUARDED, EXCLUSIVE4, EXCLUSIVE4_1.
    pub const CREATE_MODE: u32 = 0b1111;
}

/// `nfs_ftype4` values.
pub mod ftype {
    pub const NF4REG: u32 = 1;
    pub const NF4DIR: u32 = 2;
    pub const NF4BLK: u32 = 3;
    pub const NF4CHR: u32 = 4;
    pub const NF4LNK: u32 = 5;
    pub const NF4SOCK: u32 = 6;
    pub const NF4FIFO: u32 = 7;
}

/// `fattr4_fh_expire_type` value: handles never expire.
pub const FH4_PERSISTENT: u32 = 0;
/// `NFS4_FHSIZE`: the largest file handle.
pub const NFS4_FHSIZE: usize = 128;

/// nfsstat4 values of the errors this crate produces (see [`AttrError::nfsstat`]).
pub mod nfsstat {
    pub const NFS4ERR_INVAL: u32 = 22;
    pub const NFS4ERR_SERVERFAULT: u32 = 10006;
    pub const NFS4ERR_ATTRNOTSUPP: u32 = 10032;
    pub const NFS4ERR_BADXDR: u32 = 10036;
    pub const NFS4ERR_BADOWNER: u32 = 10039;
}

/// The uid/gid that "nobody" / "nogroup" map to.
pub const NOBODY_ID: u32 = 65534;

/// Every attribute we support, ascending. Includes the write-only TIME_ACCESS_SET and
/// TIME_MODIFY_SET (clients only send those if they appear in SUPPORTED_ATTRS).
const SUPPORTED: &[u32] = &[
    fattr::SUPPORTED_ATTRS,
    fattr::TYPE,
    fattr::FH_EXPIRE_TYPE,
    fattr::CHANGE,
    fattr::SIZE,
    fattr::LINK_SUPPORT,
    fattr::SYMLINK_SUPPORT,
    fattr::NAMED_ATTR,
    fattr::FSID,
    fattr::UNIQUE_HANDLES,
    fattr::LEASE_TIME,
    fattr::RDATTR_ERROR,
    fattr::ACLSUPPORT,
    fattr::CANSETTIME,
    fattr::CASE_INSENSITIVE,
    fattr::CASE_PRESERVING,
    fattr::CHOWN_RESTRICTED,
    fattr::FILEHANDLE,
    fattr::FILEID,
    fattr::FILES_AVAIL,
    fattr::FILES_FREE,
    fattr::FILES_TOTAL,
    fattr::HOMOGENEOUS,
    fattr::MAXFILESIZE,
    fattr::MAXLINK,
    fattr::MAXNAME,
    fattr::MAXREAD,
    fattr::MAXWRITE,
    fattr::MODE,
    fattr::NO_TRUNC,
    fattr::NUMLINKS,
    fattr::OWNER,
    fattr::OWNER_GROUP,
    fattr::RAWDEV,
    fattr::SPACE_AVAIL,
    fattr::SPACE_FREE,
    fattr::SPACE_TOTAL,
    fattr::SPACE_USED,
    fattr::TIME_ACCESS,
    fattr::TIME_ACCESS_SET,
    fattr::TIME_DELTA,
    fattr::TIME_METADATA,
    fattr::TIME_MODIFY,
    fattr::TIME_MODIFY_SET,
    fattr::MOUNTED_ON_FILEID,
    fattr::SUPPATTR_EXCLCREAT,
];

/// What NFSv4.2 adds to [`SUPPORTED`] (RFC 7862 §12.2, RFC 8275, RFC 8276); not
/// reported to, nor accepted from, a 4.1 COMPOUND (as knfsd's per-minor-version sets).
const SUPPORTED_42: &[u32] = &[
    fattr::CLONE_BLKSIZE,
    fattr::SPACE_FREED,
    fattr::CHANGE_ATTR_TYPE,
    fattr::MODE_UMASK,
    fattr::XATTR_SUPPORT,
    fattr::TIME_DELEG_ACCESS,
    fattr::TIME_DELEG_MODIFY,
    fattr::OPEN_ARGUMENTS,
];

/// `change_attr_type4` (RFC 7862 §12.2.3): what the `change` attribute promises. The
/// backends keep it increasing while the server runs but not across a restart in every
/// case (the local backend's is the ctime plus an in-memory tie-breaker), so nothing
/// stronger than "undefined" is claimed.
const NFS4_CHANGE_TYPE_IS_UNDEFINED: u32 = 4;

/// Attributes a client may set (SETATTR, CREATE, OPEN createattrs).
const WRITABLE: &[u32] = &[
    fattr::SIZE,
    fattr::MODE,
    fattr::OWNER,
    fattr::OWNER_GROUP,
    fattr::TIME_ACCESS_SET,
    fattr::TIME_MODIFY_SET,
    fattr::TIME_DELEG_ACCESS,
    fattr::TIME_DELEG_MODIFY,
];

/// Attributes that can only be set, never read.
const WRITE_ONLY: &[u32] = &[fattr::TIME_ACCESS_SET, fattr::TIME_MODIFY_SET];

/// Attributes that may be given with an EXCLUSIVE4_1 create. The backend keeps the
/// exclusive-create verifier in atime/mtime (as knfsd does), so, like knfsd, the time
/// attributes are left out (RFC 8881 §18.16.3).
const EXCLCREAT: &[u32] = &[fattr::SIZE, fattr::MODE, fattr::OWNER, fattr::OWNER_GROUP];

/// Attributes whose value comes from [`FsStats`].
const FSSTATS: &[u32] = &[
    fattr::FILES_AVAIL,
    fattr::FILES_FREE,
    fattr::FILES_TOTAL,
    fattr::SPACE_AVAIL,
    fattr::SPACE_FREE,
    fattr::SPACE_TOTAL,
];

/// Per-export (file system) information the attributes report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    /// FATTR4_FSID (major, minor). Reported instead of `Attrs::fsid`: the server decides
    /// what an NFS file system is.
    pub fsid: (u64, u64),
    /// FATTR4_LEASE_TIME, seconds.
    pub lease_time: u32,
    pub maxread: u64,
    pub maxwrite: u64,
    pub maxfilesize: u64,
    pub maxname: u32,
    pub maxlink: u32,
    pub time_delta: Timestamp,
    /// FATTR4_FH_EXPIRE_TYPE; [`FH4_PERSISTENT`] (0) for us.
    pub fh_expire_type: u32,
    pub link_support: bool,
    pub symlink_support: bool,
    /// The minor version of the COMPOUND asking: which attributes exist for it.
    pub minor: u32,
    /// FATTR4_CLONE_BLKSIZE: the alignment CLONE needs (0 where CLONE is not offered).
    pub clone_blksize: u32,
    /// FATTR4_XATTR_SUPPORT.
    pub xattr_support: bool,
}

/// Everything an attribute value may be computed from, for one object.
#[derive(Debug, Clone, Copy)]
pub struct AttrSource<'a> {
    pub attrs: &'a Attrs,
    /// The object's NFS file handle (FATTR4_FILEHANDLE).
    pub fh: &'a [u8],
    pub fs: &'a FsInfo,
    /// Needed for FILES_* and SPACE_AVAIL/FREE/TOTAL (see [`needs_fsstats`]); when it is
    /// `None` those attributes are left out of [`encode`]'s reply.
    pub fsstats: Option<&'a FsStats>,
    /// FATTR4_MOUNTED_ON_FILEID (the fileid of the object this one is mounted on, or its
    /// own fileid when it is not a mount point).
    pub mounted_on_fileid: u64,
    /// READDIR only: the nfsstat4 to report as FATTR4_RDATTR_ERROR. See [`encode`].
    pub rdattr_error: Option<u32>,
}

/// Why a client's attributes cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// The attribute with this number is not supported (NFS4ERR_ATTRNOTSUPP).
    #[error("attribute {0} is not supported")]
    NotSupp(u32),
    /// A read-only attribute was to be set, a write-only one or RDATTR_ERROR compared, or a
    /// value is out of range (NFS4ERR_INVAL).
    #[error("invalid attribute or attribute value")]
    Inval,
    /// The attribute values do not decode, or bytes are left over (NFS4ERR_BADXDR).
    #[error("malformed attribute values")]
    BadXdr,
    /// An owner / owner_group string we cannot map to an id (NFS4ERR_BADOWNER).
    #[error("owner string cannot be mapped to an id")]
    BadOwner,
    /// [`compare`] needs [`FsStats`] but [`AttrSource::fsstats`] is `None`: a server bug,
    /// call [`needs_fsstats`] first (NFS4ERR_SERVERFAULT).
    #[error("file system statistics needed but not supplied")]
    MissingFsStats,
}

impl AttrError {
    /// The nfsstat4 value to answer with.
    pub fn nfsstat(&self) -> u32 {
        match self {
            AttrError::NotSupp(_) => nfsstat::NFS4ERR_ATTRNOTSUPP,
            AttrError::Inval => nfsstat::NFS4ERR_INVAL,
            AttrError::BadXdr => nfsstat::NFS4ERR_BADXDR,
            AttrError::BadOwner => nfsstat::NFS4ERR_BADOWNER,
            AttrError::MissingFsStats => nfsstat::NFS4ERR_SERVERFAULT,
        }
    }
}

impl From<XdrError> for AttrError {
    fn from(_: XdrError) -> Self {
        AttrError::BadXdr
    }
}

// ---------------------------------------------------------------------------------------
// Bitmaps

/// True if attribute `bit` is set in `bitmap`.
pub fn bitmap_isset(bitmap: &[u32], bit: u32) -> bool {
    bitmap
        .get((bit / 32) as usize)
        .is_some_and(|w| w & (1 << (bit % 32)) != 0)
}

/// Set attribute `bit` in `bitmap`, growing it as needed.
pub fn bitmap_set(bitmap: &mut Vec<u32>, bit: u32) {
    let w = (bit / 32) as usize;
    if bitmap.len() <= w {
        bitmap.resize(w + 1, 0);
    }
    bitmap[w] |= 1 << (bit % 32);
}

/// Drop trailing zero words.
pub fn bitmap_trim(bitmap: &mut Vec<u32>) {
    while bitmap.last() == Some(&0) {
        bitmap.pop();
    }
}

/// A (trimmed) bitmap with exactly the given attributes set.
pub fn bitmap_of(bits: &[u32]) -> Vec<u32> {
    let mut v = Vec::new();
    for &b in bits {
        bitmap_set(&mut v, b);
    }
    v
}

/// The set bits of `bitmap`, ascending. A bit whose number does not fit in a u32 (only
/// possible with an absurdly long bitmap) is reported as `u32::MAX`.
fn set_bits(bitmap: &[u32]) -> impl Iterator<Item = u32> + '_ {
    bitmap.iter().enumerate().flat_map(|(i, &w)| {
        let base = u32::try_from(i).ok().and_then(|i| i.checked_mul(32));
        (0..32u32)
            .filter(move |b| w & (1 << b) != 0)
            .map(move |b| base.map_or(u32::MAX, |base| base + b))
    })
}

fn is_supported(bit: u32) -> bool {
    SUPPORTED.contains(&bit)
}

fn is_supported_in(bit: u32, minor: u32) -> bool {
    (is_supported(bit) && (minor >= 1 || !ONLY_41.contains(&bit)))
        || (minor >= 2 && SUPPORTED_42.contains(&bit))
}

/// What [`SUPPORTED`] has that NFSv4.0 does not define (RFC 7530 §5 ends at 55):
/// neither reported to nor accepted from a 4.0 COMPOUND.
const ONLY_41: &[u32] = &[fattr::SUPPATTR_EXCLCREAT];

/// The bitmap of every NFSv4.1 attribute we support (the FATTR4_SUPPORTED_ATTRS value
/// of a 4.1 COMPOUND).
pub fn supported_attrs() -> Vec<u32> {
    bitmap_of(SUPPORTED)
}

/// The FATTR4_SUPPORTED_ATTRS value for a COMPOUND of minor version `minor`.
pub fn supported_attrs_in(minor: u32) -> Vec<u32> {
    if minor == 0 {
        let v0: Vec<u32> = SUPPORTED
            .iter()
            .copied()
            .filter(|b| !ONLY_41.contains(b))
            .collect();
        return bitmap_of(&v0);
    }
    let mut v = supported_attrs();
    if minor >= 2 {
        for &b in SUPPORTED_42 {
            bitmap_set(&mut v, b);
        }
    }
    v
}

/// The FATTR4_SUPPATTR_EXCLCREAT value: attributes allowed in an EXCLUSIVE4_1 create's
/// `cva_attrs` (SIZE, MODE, OWNER, OWNER_GROUP; not the times, which hold the verifier).
/// Other attributes there must be refused with NFS4ERR_INVAL.
pub fn suppattr_exclcreat() -> Vec<u32> {
    bitmap_of(EXCLCREAT)
}

/// The attributes a client may set (SETATTR / CREATE / OPEN).
pub fn writable_attrs() -> Vec<u32> {
    bitmap_of(WRITABLE)
}

/// True if any requested attribute needs [`FsStats`] (FILES_AVAIL/FREE/TOTAL,
/// SPACE_AVAIL/FREE/TOTAL).
pub fn needs_fsstats(request: &[u32]) -> bool {
    FSSTATS.iter().any(|&b| bitmap_isset(request, b))
}

// ---------------------------------------------------------------------------------------
// Owners

/// The owner / owner_group string for an id: the decimal number ("0", "1000").
pub fn owner_string(id: u32) -> String {
    id.to_string()
}

/// Map an owner (or, with `group`, an owner_group) string to an id. Accepts a decimal id,
/// "root" (0) and "nobody" (65534; for groups also "nogroup"), each optionally followed by
/// "@domain" (the domain is ignored). Anything else is `None`.
pub fn parse_owner(s: &[u8], group: bool) -> Option<u32> {
    let name = match s.iter().position(|&c| c == b'@') {
        Some(at) => &s[..at],
        None => s,
    };
    match name {
        b"root" => Some(0),
        b"nobody" => Some(NOBODY_ID),
        b"nogroup" if group => Some(NOBODY_ID),
        _ if !name.is_empty() && name.len() <= 10 && name.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(name).ok()?.parse().ok()
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Values

/// The wire shape of an attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    U32,
    U64,
    Bool,
    Fsid,
    Time,
    SetTime,
    Spec,
    Bitmap,
    Fh,
    Owner {
        group: bool,
    },
    /// `mode_umask4`: a mode and the umask to apply to it (RFC 8275).
    ModeUmask,
    /// `open_arguments4`: five bitmaps (RFC 9754).
    OpenArguments,
}

fn kind(bit: u32) -> Option<Kind> {
    use fattr::*;
    Some(match bit {
        SUPPORTED_ATTRS | SUPPATTR_EXCLCREAT => Kind::Bitmap,
        TYPE | FH_EXPIRE_TYPE | LEASE_TIME | RDATTR_ERROR | ACLSUPPORT | MAXLINK | MAXNAME
        | MODE | NUMLINKS => Kind::U32,
        CHANGE | SIZE | FILEID | FILES_AVAIL | FILES_FREE | FILES_TOTAL | MAXFILESIZE | MAXREAD
        | MAXWRITE | SPACE_AVAIL | SPACE_FREE | SPACE_TOTAL | SPACE_USED | MOUNTED_ON_FILEID => {
            Kind::U64
        }
        LINK_SUPPORT | SYMLINK_SUPPORT | NAMED_ATTR | UNIQUE_HANDLES | CANSETTIME
        | CASE_INSENSITIVE | CASE_PRESERVING | CHOWN_RESTRICTED | HOMOGENEOUS | NO_TRUNC => {
            Kind::Bool
        }
        FSID => Kind::Fsid,
        TIME_ACCESS | TIME_DELTA | TIME_METADATA | TIME_MODIFY => Kind::Time,
        TIME_ACCESS_SET | TIME_MODIFY_SET => Kind::SetTime,
        RAWDEV => Kind::Spec,
        FILEHANDLE => Kind::Fh,
        OWNER => Kind::Owner { group: false },
        OWNER_GROUP => Kind::Owner { group: true },
        CLONE_BLKSIZE | CHANGE_ATTR_TYPE => Kind::U32,
        SPACE_FREED => Kind::U64,
        XATTR_SUPPORT => Kind::Bool,
        MODE_UMASK => Kind::ModeUmask,
        TIME_DELEG_ACCESS | TIME_DELEG_MODIFY => Kind::Time,
        OPEN_ARGUMENTS => Kind::OpenArguments,
        _ => return None,
    })
}

/// A decoded (or computed) attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    U32(u32),
    U64(u64),
    Bool(bool),
    Fsid(u64, u64),
    Time(Timestamp),
    SetTime(SetTime),
    Spec(u32, u32),
    /// Trimmed.
    Bitmap(Vec<u32>),
    Fh(Bytes),
    /// `None`: a string that maps to no id.
    Owner(Option<u32>),
    /// (mode, umask).
    ModeUmask(u32, u32),
    /// The five bitmaps of `open_arguments4`, one word each here.
    OpenArguments([u32; 5]),
}

fn ftype4(t: FileType) -> u32 {
    match t {
        FileType::Regular => ftype::NF4REG,
        FileType::Directory => ftype::NF4DIR,
        FileType::BlockDev => ftype::NF4BLK,
        FileType::CharDev => ftype::NF4CHR,
        FileType::Symlink => ftype::NF4LNK,
        FileType::Socket => ftype::NF4SOCK,
        FileType::Fifo => ftype::NF4FIFO,
    }
}

/// Our value of a readable attribute. `None` if there is nothing to report:
/// write-only attributes, RDATTR_ERROR without an error, FS statistics not supplied.
fn our_value(bit: u32, src: &AttrSource) -> Option<Value> {
    use fattr::*;
    let a = src.attrs;
    let fs = src.fs;
    let st = src.fsstats;
    Some(match bit {
        SUPPORTED_ATTRS => Value::Bitmap(supported_attrs_in(fs.minor)),
        TYPE => Value::U32(ftype4(a.ftype)),
        FH_EXPIRE_TYPE => Value::U32(fs.fh_expire_type),
        CHANGE => Value::U64(a.change),
        SIZE => Value::U64(a.size),
        LINK_SUPPORT => Value::Bool(fs.link_support),
        SYMLINK_SUPPORT => Value::Bool(fs.symlink_support),
        NAMED_ATTR => Value::Bool(false),
        FSID => Value::Fsid(fs.fsid.0, fs.fsid.1),
        UNIQUE_HANDLES => Value::Bool(true),
        LEASE_TIME => Value::U32(fs.lease_time),
        RDATTR_ERROR => Value::U32(src.rdattr_error?),
        ACLSUPPORT => Value::U32(0),
        CANSETTIME => Value::Bool(true),
        CASE_INSENSITIVE => Value::Bool(false),
        CASE_PRESERVING => Value::Bool(true),
        CHOWN_RESTRICTED => Value::Bool(true),
        FILEHANDLE => Value::Fh(Bytes::copy_from_slice(src.fh)),
        FILEID => Value::U64(a.fileid),
        FILES_AVAIL => Value::U64(st?.avail_files),
        FILES_FREE => Value::U64(st?.free_files),
        FILES_TOTAL => Value::U64(st?.total_files),
        HOMOGENEOUS => Value::Bool(true),
        MAXFILESIZE => Value::U64(fs.maxfilesize),
        MAXLINK => Value::U32(fs.maxlink),
        MAXNAME => Value::U32(fs.maxname),
        MAXREAD => Value::U64(fs.maxread),
        MAXWRITE => Value::U64(fs.maxwrite),
        MODE => Value::U32(a.mode & 0o7777),
        NO_TRUNC => Value::Bool(true),
        NUMLINKS => Value::U32(a.nlink),
        OWNER => Value::Owner(Some(a.uid)),
        OWNER_GROUP => Value::Owner(Some(a.gid)),
        RAWDEV => Value::Spec(a.rdev.0, a.rdev.1),
        SPACE_AVAIL => Value::U64(st?.avail_bytes),
        SPACE_FREE => Value::U64(st?.free_bytes),
        SPACE_TOTAL => Value::U64(st?.total_bytes),
        SPACE_USED => Value::U64(a.space_used),
        TIME_ACCESS => Value::Time(a.atime),
        TIME_DELTA => Value::Time(fs.time_delta),
        TIME_METADATA => Value::Time(a.ctime),
        TIME_MODIFY => Value::Time(a.mtime),
        MOUNTED_ON_FILEID => Value::U64(src.mounted_on_fileid),
        SUPPATTR_EXCLCREAT => Value::Bitmap(suppattr_exclcreat()),
        CLONE_BLKSIZE => Value::U32(fs.clone_blksize),
        // What removing the object would free: its space, unless other names keep it.
        SPACE_FREED => Value::U64(if a.nlink <= 1 || a.ftype == FileType::Directory {
            a.space_used
        } else {
            0
        }),
        CHANGE_ATTR_TYPE => Value::U32(NFS4_CHANGE_TYPE_IS_UNDEFINED),
        XATTR_SUPPORT => Value::Bool(fs.xattr_support),
        // The times as the server has them; a holder of delegated timestamps has newer
        // ones, which the server asks it for (CB_GETATTR) when another client reads.
        TIME_DELEG_ACCESS => Value::Time(a.atime),
        TIME_DELEG_MODIFY => Value::Time(a.mtime),
        OPEN_ARGUMENTS => Value::OpenArguments([
            open_args::SHARE_ACCESS,
            open_args::SHARE_DENY,
            open_args::SHARE_ACCESS_WANT,
            open_args::OPEN_CLAIM,
            open_args::CREATE_MODE,
        ]),
        _ => return None,
    })
}

fn put_time(out: &mut BytesMut, t: Timestamp) {
    put_i64(out, t.sec);
    put_u32(out, t.nsec);
}

fn put_value(out: &mut BytesMut, v: &Value) {
    match v {
        Value::U32(x) => put_u32(out, *x),
        Value::U64(x) => put_u64(out, *x),
        Value::Bool(b) => put_u32(out, u32::from(*b)),
        Value::Fsid(a, b) => {
            put_u64(out, *a);
            put_u64(out, *b);
        }
        Value::Time(t) => put_time(out, *t),
        Value::SetTime(SetTime::ServerNow) => put_u32(out, 0),
        Value::SetTime(SetTime::Client(t)) => {
            put_u32(out, 1);
            put_time(out, *t);
        }
        Value::Spec(a, b) => {
            put_u32(out, *a);
            put_u32(out, *b);
        }
        Value::Bitmap(words) => {
            put_u32(out, words.len() as u32);
            for &w in words {
                put_u32(out, w);
            }
        }
        Value::Fh(fh) => put_opaque(out, fh),
        Value::Owner(id) => put_opaque(out, owner_string(id.unwrap_or(NOBODY_ID)).as_bytes()),
        Value::ModeUmask(mode, umask) => {
            put_u32(out, *mode);
            put_u32(out, *umask);
        }
        Value::OpenArguments(maps) => {
            for &m in maps {
                put_u32(out, 1);
                put_u32(out, m);
            }
        }
    }
}

/// The largest bitmap value we accept from a client (words).
const MAX_BITMAP_WORDS: usize = 64;
/// The longest owner string we accept from a client.
const MAX_OWNER_LEN: usize = 1024;

fn get_time(src: &mut Bytes) -> Result<Timestamp, AttrError> {
    let sec = get_i64(src)?;
    let nsec = get_u32(src)?;
    Ok(Timestamp { sec, nsec })
}

fn get_value(k: Kind, src: &mut Bytes) -> Result<Value, AttrError> {
    Ok(match k {
        Kind::U32 => Value::U32(get_u32(src)?),
        Kind::U64 => Value::U64(get_u64(src)?),
        Kind::Bool => Value::Bool(match get_u32(src)? {
            0 => false,
            1 => true,
            _ => return Err(AttrError::BadXdr),
        }),
        Kind::Fsid => Value::Fsid(get_u64(src)?, get_u64(src)?),
        Kind::Time => Value::Time(get_time(src)?),
        Kind::SetTime => Value::SetTime(match get_u32(src)? {
            0 => SetTime::ServerNow,
            1 => SetTime::Client(get_time(src)?),
            _ => return Err(AttrError::BadXdr),
        }),
        Kind::Spec => Value::Spec(get_u32(src)?, get_u32(src)?),
        Kind::Bitmap => {
            let mut words = get_array::<u32>(src, MAX_BITMAP_WORDS)?;
            bitmap_trim(&mut words);
            Value::Bitmap(words)
        }
        Kind::Fh => Value::Fh(get_opaque(src, NFS4_FHSIZE)?),
        Kind::Owner { group } => {
            let s = get_opaque(src, MAX_OWNER_LEN)?;
            Value::Owner(parse_owner(&s, group))
        }
        Kind::ModeUmask => Value::ModeUmask(get_u32(src)?, get_u32(src)?),
        Kind::OpenArguments => {
            let mut maps = [0u32; 5];
            for m in &mut maps {
                let mut words = get_array::<u32>(src, MAX_BITMAP_WORDS)?;
                bitmap_trim(&mut words);
                *m = match words.as_slice() {
                    [] => 0,
                    [w] => *w,
                    // A value we never offer: unequal to ours in VERIFY.
                    _ => u32::MAX,
                };
            }
            Value::OpenArguments(maps)
        }
    })
}

/// Check a client's mask: every attribute must be supported (else `NotSupp` with the
/// lowest offending number), then `allowed` must accept each (else `Inval`).
fn check_mask(mask: &[u32], minor: u32, allowed: impl Fn(u32) -> bool) -> Result<(), AttrError> {
    if let Some(bit) = set_bits(mask).find(|&b| !is_supported_in(b, minor)) {
        return Err(AttrError::NotSupp(bit));
    }
    if set_bits(mask).any(|b| !allowed(b)) {
        return Err(AttrError::Inval);
    }
    Ok(())
}

/// Decode the values of every attribute in `mask` (already checked), in attribute-number
/// order; leftover bytes are `BadXdr`.
fn get_values(mask: &[u32], vals: &Bytes) -> Result<Vec<(u32, Value)>, AttrError> {
    let mut src = vals.clone();
    let mut out = Vec::new();
    for bit in set_bits(mask) {
        let k = kind(bit).ok_or(AttrError::NotSupp(bit))?;
        out.push((bit, get_value(k, &mut src)?));
    }
    if !src.is_empty() {
        return Err(AttrError::BadXdr);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The API

/// Encode the requested attributes we support, in attribute-number order. Returns the
/// bitmap of what was actually encoded (trailing zero words trimmed) and the `attrlist4`
/// bytes. Requested attributes we do not support, the write-only TIME_*_SET, and the
/// FS-statistics attributes when `src.fsstats` is `None` are silently left out
/// (RFC 8881 GETATTR).
///
/// FATTR4_RDATTR_ERROR is only encoded when requested and `src.rdattr_error` is `Some`.
/// When it is `Some(e)` with `e != 0` (NFS4_OK is 0), `src.attrs` is assumed meaningless and
/// only RDATTR_ERROR is encoded (or nothing, if it was not requested: the server must then
/// fail the READDIR with `e` instead, RFC 8881 §18.23.3).
pub fn encode(request: &[u32], src: &AttrSource) -> (Vec<u32>, Bytes) {
    let mut bitmap = Vec::new();
    let mut out = BytesMut::new();
    let failed = matches!(src.rdattr_error, Some(e) if e != 0);
    let v42: &[u32] = if src.fs.minor >= 2 { SUPPORTED_42 } else { &[] };
    for &bit in SUPPORTED.iter().chain(v42) {
        if !bitmap_isset(request, bit)
            || (failed && bit != fattr::RDATTR_ERROR)
            || (src.fs.minor == 0 && ONLY_41.contains(&bit))
        {
            continue;
        }
        if let Some(v) = our_value(bit, src) {
            put_value(&mut out, &v);
            bitmap_set(&mut bitmap, bit);
        }
    }
    bitmap_trim(&mut bitmap);
    (bitmap, out.freeze())
}

/// Decode a SETATTR / CREATE / OPEN createattrs `fattr4` (`mask`, `vals`).
///
/// Checks, in this order: an unsupported attribute gives `NotSupp(lowest such number)`
/// (NFS4ERR_ATTRNOTSUPP); a supported but read-only one gives `Inval`; then the values are
/// decoded: malformed or trailing bytes give `BadXdr`, an unmappable owner `BadOwner`, a
/// client time with `nseconds >= 10^9` `Inval`. MODE is masked with 0o7777.
///
/// Returns the changes and the attrsset bitmap (the mask, trimmed).
pub fn decode_setattrs(mask: &[u32], vals: &Bytes) -> Result<(SetAttrs, Vec<u32>), AttrError> {
    decode_setattrs_in(mask, vals, 1)
}

/// [`decode_setattrs`] for a COMPOUND of minor version `minor`: in 4.2 MODE_UMASK too
/// (RFC 8275), which sets the mode to `mode & !umask` (there are no inheritable ACLs
/// here to make the umask not apply). Given with MODE, it is `Inval`. Only creating
/// operations take it: SETATTR must refuse an attrsset that contains it.
pub fn decode_setattrs_in(
    mask: &[u32],
    vals: &Bytes,
    minor: u32,
) -> Result<(SetAttrs, Vec<u32>), AttrError> {
    check_mask(mask, minor, |b| {
        WRITABLE.contains(&b) || b == fattr::MODE_UMASK
    })?;
    if bitmap_isset(mask, fattr::MODE) && bitmap_isset(mask, fattr::MODE_UMASK) {
        return Err(AttrError::Inval);
    }
    let mut sa = SetAttrs::default();
    let mut attrsset = Vec::new();
    for (bit, v) in get_values(mask, vals)? {
        match (bit, v) {
            (fattr::SIZE, Value::U64(x)) => sa.size = Some(x),
            (fattr::MODE, Value::U32(x)) => sa.mode = Some(x & 0o7777),
            (fattr::MODE_UMASK, Value::ModeUmask(m, u)) => sa.mode = Some(m & !u & 0o7777),
            (fattr::OWNER, Value::Owner(id)) => sa.uid = Some(id.ok_or(AttrError::BadOwner)?),
            (fattr::OWNER_GROUP, Value::Owner(id)) => sa.gid = Some(id.ok_or(AttrError::BadOwner)?),
            (fattr::TIME_ACCESS_SET, Value::SetTime(t)) => sa.atime = Some(check_settime(t)?),
            (fattr::TIME_MODIFY_SET, Value::SetTime(t)) => sa.mtime = Some(check_settime(t)?),
            // RFC 9754 §5: the times a holder of delegated timestamps kept; the server
            // checks the stateid and that they do not go back (ADR 0030).
            (fattr::TIME_DELEG_ACCESS, Value::Time(t)) if sa.atime.is_none() => {
                sa.atime = Some(check_settime(SetTime::Client(t))?)
            }
            (fattr::TIME_DELEG_MODIFY, Value::Time(t)) if sa.mtime.is_none() => {
                sa.mtime = Some(check_settime(SetTime::Client(t))?)
            }
            _ => return Err(AttrError::Inval),
        }
        bitmap_set(&mut attrsset, bit);
    }
    bitmap_trim(&mut attrsset);
    Ok((sa, attrsset))
}

fn check_settime(t: SetTime) -> Result<SetTime, AttrError> {
    match t {
        SetTime::Client(ts) if ts.nsec >= 1_000_000_000 => Err(AttrError::Inval),
        t => Ok(t),
    }
}

/// VERIFY / NVERIFY: decode the client's `fattr4` and compare each attribute in it with
/// ours. `Ok(true)` if all are equal (VERIFY then succeeds, NVERIFY answers
/// NFS4ERR_SAME).
///
/// Errors: `NotSupp` for an unsupported attribute; `Inval` for RDATTR_ERROR and the
/// write-only TIME_*_SET (RFC 8881 §18.31.3); `BadXdr` for malformed values;
/// `MissingFsStats` if FS statistics are compared but `src.fsstats` is `None`. Owner
/// strings are compared by the id they map to (so "1000@domain" equals our "1000"); one
/// that maps to no id is simply unequal.
pub fn compare(mask: &[u32], vals: &Bytes, src: &AttrSource) -> Result<bool, AttrError> {
    check_mask(mask, src.fs.minor, |b| {
        b != fattr::RDATTR_ERROR && !WRITE_ONLY.contains(&b) && b != fattr::MODE_UMASK
    })?;
    let theirs = get_values(mask, vals)?;
    let mut equal = true;
    for (bit, v) in theirs {
        let ours = our_value(bit, src).ok_or(AttrError::MissingFsStats)?;
        let same = match (&v, &ours) {
            (Value::Owner(None), _) => false,
            _ => v == ours,
        };
        equal &= same;
    }
    Ok(equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_table_is_sorted_and_typed() {
        assert!(SUPPORTED.windows(2).all(|w| w[0] < w[1]));
        assert!(SUPPORTED_42.windows(2).all(|w| w[0] < w[1]));
        assert!(SUPPORTED.last() < SUPPORTED_42.first());
        for &b in SUPPORTED.iter().chain(SUPPORTED_42) {
            assert!(kind(b).is_some(), "attribute {b} has no wire kind");
        }
        for b in WRITABLE.iter().chain(EXCLCREAT).chain(FSSTATS) {
            assert!(is_supported_in(*b, 2));
        }
    }

    #[test]
    fn nfsv40_sees_no_41_attributes() {
        let v0 = supported_attrs_in(0);
        assert_eq!(
            v0.len(),
            2,
            "RFC 7530 defines attributes 0..=55 only: {v0:?}"
        );
        assert!(!bitmap_isset(&v0, fattr::SUPPATTR_EXCLCREAT));
        assert!(bitmap_isset(
            &supported_attrs_in(1),
            fattr::SUPPATTR_EXCLCREAT
        ));
        assert!(!is_supported_in(fattr::SUPPATTR_EXCLCREAT, 0));
        assert!(is_supported_in(fattr::MOUNTED_ON_FILEID, 0));
    }

    #[test]
    fn set_bits_ascending() {
        let v: Vec<u32> = set_bits(&[0b101, 0, 1 << 11]).collect();
        assert_eq!(v, vec![0, 2, 75]);
    }

    #[test]
    fn owners() {
        assert_eq!(parse_owner(b"1000", false), Some(1000));
        assert_eq!(parse_owner(b"1000@example.com", false), Some(1000));
        assert_eq!(parse_owner(b"root@x", true), Some(0));
        assert_eq!(parse_owner(b"nobody", false), Some(NOBODY_ID));
        assert_eq!(parse_owner(b"nogroup", true), Some(NOBODY_ID));
        assert_eq!(parse_owner(b"nogroup", false), None);
        assert_eq!(parse_owner(b"4294967295", false), Some(u32::MAX));
        assert_eq!(parse_owner(b"4294967296", false), None);
        assert_eq!(parse_owner(b"", false), None);
        assert_eq!(parse_owner(b"@dom", false), None);
        assert_eq!(parse_owner(b"+12", false), None);
        assert_eq!(parse_owner(b"alice", false), None);
    }
}
