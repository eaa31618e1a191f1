//! Client-side attributes: the bitmaps we ask for, decoding of fattr4 replies, and
//! encoding of attributes to set (SETATTR, OPEN/CREATE createattrs).

use bytes::{Bytes, BytesMut};
use txnfs_proto::nfs4::{fattr4, nfs_ftype4};
use txnfs_xdr as xdr;

use crate::ClientError;

pub const TYPE: u32 = 1;
pub const CHANGE: u32 = 3;
pub const SIZE: u32 = 4;
pub const FSID: u32 = 8;
pub const LEASE_TIME: u32 = 10;
pub const RDATTR_ERROR: u32 = 11;
pub const FILEHANDLE: u32 = 19;
pub const FILEID: u32 = 20;
pub const MODE: u32 = 33;
pub const NUMLINKS: u32 = 35;
pub const OWNER: u32 = 36;
pub const OWNER_GROUP: u32 = 37;
pub const RAWDEV: u32 = 41;
pub const SPACE_USED: u32 = 45;
pub const TIME_ACCESS: u32 = 47;
pub const TIME_ACCESS_SET: u32 = 48;
pub const TIME_METADATA: u32 = 52;
pub const TIME_MODIFY: u32 = 53;
pub const TIME_MODIFY_SET: u32 = 54;

/// Build a bitmap4 from attribute numbers.
pub fn bitmap(bits: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = Vec::new();
    for b in bits {
        let w = (*b / 32) as usize;
        if v.len() <= w {
            v.resize(w + 1, 0);
        }
        v[w] |= 1 << (b % 32);
    }
    v
}

/// What `stat` shows: type, size, mode, links, owners, times, ids, change.
pub fn stat_bitmap() -> Vec<u32> {
    bitmap(&[
        TYPE,
        CHANGE,
        SIZE,
        FSID,
        FILEID,
        MODE,
        NUMLINKS,
        OWNER,
        OWNER_GROUP,
        RAWDEV,
        SPACE_USED,
        TIME_ACCESS,
        TIME_METADATA,
        TIME_MODIFY,
    ])
}

/// `stat_bitmap` plus the file handle (READDIR entries, so no LOOKUP is needed).
pub fn stat_fh_bitmap() -> Vec<u32> {
    let mut b = stat_bitmap();
    b[0] |= 1 << FILEHANDLE;
    b[0] |= 1 << RDATTR_ERROR;
    b
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Block,
    Char,
    Socket,
    Fifo,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// Decoded attributes; fields not returned by the server are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub kind: Option<FileKind>,
    pub change: Option<u64>,
    pub size: Option<u64>,
    pub fsid: Option<(u64, u64)>,
    pub lease_time: Option<u32>,
    pub rdattr_error: Option<u32>,
    pub fh: Option<Bytes>,
    pub fileid: Option<u64>,
    pub mode: Option<u32>,
    pub nlink: Option<u32>,
    pub owner: Option<Bytes>,
    pub group: Option<Bytes>,
    pub rdev: Option<(u32, u32)>,
    pub space_used: Option<u64>,
    pub atime: Option<Time>,
    pub ctime: Option<Time>,
    pub mtime: Option<Time>,
}

impl Attributes {
    pub fn is_dir(&self) -> bool {
        self.kind == Some(FileKind::Directory)
    }
    /// Numeric owner, when the server sends numeric ids (or "root"/"nobody").
    pub fn uid(&self) -> Option<u32> {
        self.owner.as_ref().and_then(|o| parse_id(o))
    }
    pub fn gid(&self) -> Option<u32> {
        self.group.as_ref().and_then(|o| parse_id(o))
    }
}

fn parse_id(s: &[u8]) -> Option<u32> {
    let name = s.split(|c| *c == b'@').next().unwrap_or(s);
    match name {
        b"root" => Some(0),
        b"nobody" | b"nogroup" => Some(65534),
        _ => std::str::from_utf8(name).ok()?.parse().ok(),
    }
}

fn kind(v: u32) -> FileKind {
    match nfs_ftype4::from_i32(v as i32) {
        Some(nfs_ftype4::NF4REG) => FileKind::Regular,
        Some(nfs_ftype4::NF4DIR) => FileKind::Directory,
        Some(nfs_ftype4::NF4LNK) => FileKind::Symlink,
        Some(nfs_ftype4::NF4BLK) => FileKind::Block,
        Some(nfs_ftype4::NF4CHR) => FileKind::Char,
        Some(nfs_ftype4::NF4SOCK) => FileKind::Socket,
        Some(nfs_ftype4::NF4FIFO) => FileKind::Fifo,
        _ => FileKind::Other,
    }
}

fn time(src: &mut Bytes) -> Result<Time, xdr::XdrError> {
    Ok(Time {
        sec: xdr::get_i64(src)?,
        nsec: xdr::get_u32(src)?,
    })
}

/// Decode a fattr4 whose bits are all among those this module knows.
pub fn decode(f: &fattr4) -> Result<Attributes, ClientError> {
    let mut a = Attributes::default();
    let mut src = f.attr_vals.clone();
    let bad = |e: xdr::XdrError| ClientError::Protocol(format!("attribute values: {e}"));
    for (w, word) in f.attrmask.iter().enumerate() {
        for bit in 0..32 {
            if word & (1 << bit) == 0 {
                continue;
            }
            let n = w as u32 * 32 + bit;
            let s = &mut src;
            match n {
                0 => {
                    xdr::get_array::<u32>(s, 64).map_err(bad)?;
                }
                TYPE => a.kind = Some(kind(xdr::get_u32(s).map_err(bad)?)),
                2 | 28 | 29 => {
                    xdr::get_u32(s).map_err(bad)?;
                }
                CHANGE => a.change = Some(xdr::get_u64(s).map_err(bad)?),
                SIZE => a.size = Some(xdr::get_u64(s).map_err(bad)?),
                5 | 6 | 7 | 9 | 15..=18 | 26 | 34 => {
                    xdr::get_bool(s).map_err(bad)?;
                }
                FSID => {
                    a.fsid = Some((xdr::get_u64(s).map_err(bad)?, xdr::get_u64(s).map_err(bad)?))
                }
                LEASE_TIME => a.lease_time = Some(xdr::get_u32(s).map_err(bad)?),
                RDATTR_ERROR => a.rdattr_error = Some(xdr::get_u32(s).map_err(bad)?),
                13 => {
                    xdr::get_u32(s).map_err(bad)?;
                }
                FILEHANDLE => a.fh = Some(xdr::get_opaque(s, 128).map_err(bad)?),
                FILEID => a.fileid = Some(xdr::get_u64(s).map_err(bad)?),
                21..=23 | 27 | 30 | 31 | 42..=44 | 55 => {
                    xdr::get_u64(s).map_err(bad)?;
                }
                MODE => a.mode = Some(xdr::get_u32(s).map_err(bad)?),
                NUMLINKS => a.nlink = Some(xdr::get_u32(s).map_err(bad)?),
                OWNER => a.owner = Some(xdr::get_opaque(s, 1024).map_err(bad)?),
                OWNER_GROUP => a.group = Some(xdr::get_opaque(s, 1024).map_err(bad)?),
                RAWDEV => {
                    a.rdev = Some((xdr::get_u32(s).map_err(bad)?, xdr::get_u32(s).map_err(bad)?))
                }
                SPACE_USED => a.space_used = Some(xdr::get_u64(s).map_err(bad)?),
                TIME_ACCESS => a.atime = Some(time(s).map_err(bad)?),
                51 => {
                    time(s).map_err(bad)?;
                }
                TIME_METADATA => a.ctime = Some(time(s).map_err(bad)?),
                TIME_MODIFY => a.mtime = Some(time(s).map_err(bad)?),
                other => {
                    return Err(ClientError::Protocol(format!(
                        "server returned attribute {other} we did not ask for"
                    )))
                }
            }
        }
    }
    Ok(a)
}

/// Attributes to set; `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttributes {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// `Some(None)` = the server's current time.
    pub atime: Option<Option<Time>>,
    pub mtime: Option<Option<Time>>,
}

fn put_settime(out: &mut BytesMut, t: &Option<Time>) {
    match t {
        None => xdr::put_u32(out, 0), // SET_TO_SERVER_TIME4
        Some(t) => {
            xdr::put_u32(out, 1); // SET_TO_CLIENT_TIME4
            xdr::put_i64(out, t.sec);
            xdr::put_u32(out, t.nsec);
        }
    }
}

/// Encode attributes to set, in attribute-number order.
pub fn encode_set(s: &SetAttributes) -> fattr4 {
    let mut bits = Vec::new();
    let mut out = BytesMut::new();
    if let Some(v) = s.size {
        bits.push(SIZE);
        xdr::put_u64(&mut out, v);
    }
    if let Some(v) = s.mode {
        bits.push(MODE);
        xdr::put_u32(&mut out, v & 0o7777);
    }
    if let Some(v) = s.uid {
        bits.push(OWNER);
        xdr::put_opaque(&mut out, v.to_string().as_bytes());
    }
    if let Some(v) = s.gid {
        bits.push(OWNER_GROUP);
        xdr::put_opaque(&mut out, v.to_string().as_bytes());
    }
    if let Some(t) = &s.atime {
        bits.push(TIME_ACCESS_SET);
        put_settime(&mut out, t);
    }
    if let Some(t) = &s.mtime {
        bits.push(TIME_MODIFY_SET);
        put_settime(&mut out, t);
    }
    fattr4 {
        attrmask: bitmap(&bits),
        attr_vals: out.freeze(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_words() {
        assert_eq!(bitmap(&[1, 33]), vec![2, 2]);
        assert_eq!(bitmap(&[]), Vec::<u32>::new());
    }

    #[test]
    fn decode_selected() {
        let mut v = BytesMut::new();
        xdr::put_u32(&mut v, 2); // TYPE dir
        xdr::put_u64(&mut v, 4096); // SIZE
        xdr::put_u32(&mut v, 0o755); // MODE
        xdr::put_opaque(&mut v, b"1000"); // OWNER
        let f = fattr4 {
            attrmask: bitmap(&[TYPE, SIZE, MODE, OWNER]),
            attr_vals: v.freeze(),
        };
        let a = decode(&f).unwrap();
        assert!(a.is_dir());
        assert_eq!(a.size, Some(4096));
        assert_eq!(a.mode, Some(0o755));
        assert_eq!(a.uid(), Some(1000));
        assert_eq!(a.nlink, None);
        // truncated values are an error, not a panic
        let f = fattr4 {
            attrmask: bitmap(&[TYPE, SIZE]),
            attr_vals: Bytes::from_static(&[0, 0, 0, 1]),
        };
        assert!(decode(&f).is_err());
    }

    #[test]
    fn encode_set_order() {
        let f = encode_set(&SetAttributes {
            mode: Some(0o600),
            size: Some(5),
            ..Default::default()
        });
        assert_eq!(f.attrmask, bitmap(&[SIZE, MODE]));
        assert_eq!(f.attr_vals.len(), 12);
    }
}
