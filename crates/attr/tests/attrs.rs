//! Outcome tests for the attribute layer: byte-exact fattr4 encoding, SETATTR decoding and
//! VERIFY comparison.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use txnfs_attr::*;
use txnfs_backend::{Attrs, FileType, FsStats, SetAttrs, SetTime, Timestamp};

fn sample_attrs() -> Attrs {
    Attrs {
        ftype: FileType::Regular,
        mode: 0o100644,
        nlink: 2,
        uid: 1000,
        gid: 100,
        size: 0x0102_0304_0506_0708,
        space_used: 8192,
        rdev: (0, 0),
        fsid: 77,
        fileid: 4242,
        atime: Timestamp {
            sec: 1_700_000_000,
            nsec: 1,
        },
        mtime: Timestamp {
            sec: 1_700_000_123,
            nsec: 456_789,
        },
        ctime: Timestamp {
            sec: 1_700_000_200,
            nsec: 999_999_999,
        },
        change: 0xdead_beef,
    }
}

fn sample_fs() -> FsInfo {
    FsInfo {
        fsid: (0x11, 0x2233),
        lease_time: 90,
        maxread: 1 << 20,
        maxwrite: 1 << 20,
        maxfilesize: u64::MAX >> 1,
        maxname: 255,
        maxlink: 65000,
        time_delta: Timestamp { sec: 0, nsec: 1 },
        fh_expire_type: FH4_PERSISTENT,
        link_support: true,
        symlink_support: true,
        minor: 1,
        clone_blksize: 0,
        xattr_support: false,
    }
}

fn sample_stats() -> FsStats {
    FsStats {
        total_bytes: 1 << 40,
        free_bytes: 1 << 39,
        avail_bytes: 1 << 38,
        total_files: 1_000_000,
        free_files: 500_000,
        avail_files: 400_000,
        max_name_len: 255,
    }
}

const FH: &[u8] = b"\x01\x02\x03\x04\x05"; // odd length: exercises opaque padding

/// The sample attributes, file system and file system statistics together.
struct Sample {
    a: Attrs,
    fs: FsInfo,
    st: FsStats,
}

fn sample() -> Sample {
    Sample {
        a: sample_attrs(),
        fs: sample_fs(),
        st: sample_stats(),
    }
}

fn src<'a>(a: &'a Attrs, fs: &'a FsInfo, st: Option<&'a FsStats>) -> AttrSource<'a> {
    AttrSource {
        attrs: a,
        fh: FH,
        fs,
        fsstats: st,
        mounted_on_fileid: 4242,
        rdattr_error: None,
    }
}

/// A reader for walking an attrlist4 by hand.
struct R(Bytes, usize);
impl R {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.0[self.1..self.1 + n];
        self.1 += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn done(&self) -> bool {
        self.1 == self.0.len()
    }
}

fn all_bits() -> Vec<u32> {
    vec![u32::MAX; 4] // every attribute number 0..128
}

#[test]
fn full_request_round_trip() {
    let Sample { a, fs, st } = sample();
    let s = src(&a, &fs, Some(&st));
    let (bm, vals) = encode(&all_bits(), &s);

    // Everything supported except the write-only times and RDATTR_ERROR (no error given).
    let mut expect = supported_attrs();
    for b in [
        fattr::TIME_ACCESS_SET,
        fattr::TIME_MODIFY_SET,
        fattr::RDATTR_ERROR,
    ] {
        expect[(b / 32) as usize] &= !(1 << (b % 32));
    }
    assert_eq!(bm, expect);
    assert_eq!(bm.len(), 3, "attribute 75 lives in word 2");

    let mut r = R(vals.clone(), 0);
    // 0 SUPPORTED_ATTRS
    let n = r.u32();
    let words: Vec<u32> = (0..n).map(|_| r.u32()).collect();
    assert_eq!(words, supported_attrs());
    // 1 TYPE: byte exact
    assert_eq!(r.take(4), &[0, 0, 0, 1]);
    assert_eq!(r.u32(), FH4_PERSISTENT); // 2
    assert_eq!(r.u64(), 0xdead_beef); // 3 CHANGE
    assert_eq!(r.take(8), &[1, 2, 3, 4, 5, 6, 7, 8]); // 4 SIZE, byte exact
    assert_eq!(r.u32(), 1); // 5 LINK_SUPPORT
    assert_eq!(r.u32(), 1); // 6 SYMLINK_SUPPORT
    assert_eq!(r.u32(), 0); // 7 NAMED_ATTR
    assert_eq!(
        r.take(16),
        &[0, 0, 0, 0, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x22, 0x33]
    ); // 8 FSID, byte exact
    assert_eq!(r.u32(), 1); // 9 UNIQUE_HANDLES
    assert_eq!(r.u32(), 90); // 10 LEASE_TIME
    assert_eq!(r.u32(), 0); // 13 ACLSUPPORT
    assert_eq!(r.u32(), 1); // 15 CANSETTIME
    assert_eq!(r.u32(), 0); // 16 CASE_INSENSITIVE
    assert_eq!(r.u32(), 1); // 17 CASE_PRESERVING
    assert_eq!(r.u32(), 1); // 18 CHOWN_RESTRICTED
    assert_eq!(r.take(12), b"\0\0\0\x05\x01\x02\x03\x04\x05\0\0\0"); // 19 FILEHANDLE
    assert_eq!(r.u64(), 4242); // 20 FILEID
    assert_eq!(r.u64(), 400_000); // 21 FILES_AVAIL
    assert_eq!(r.u64(), 500_000); // 22 FILES_FREE
    assert_eq!(r.u64(), 1_000_000); // 23 FILES_TOTAL
    assert_eq!(r.u32(), 1); // 26 HOMOGENEOUS
    assert_eq!(r.u64(), u64::MAX >> 1); // 27 MAXFILESIZE
    assert_eq!(r.u32(), 65000); // 28 MAXLINK
    assert_eq!(r.u32(), 255); // 29 MAXNAME
    assert_eq!(r.u64(), 1 << 20); // 30 MAXREAD
    assert_eq!(r.u64(), 1 << 20); // 31 MAXWRITE
    assert_eq!(r.take(4), &[0, 0, 0x01, 0xa4]); // 33 MODE, type bits gone
    assert_eq!(r.u32(), 1); // 34 NO_TRUNC
    assert_eq!(r.u32(), 2); // 35 NUMLINKS
    assert_eq!(r.take(8), b"\0\0\0\x041000"); // 36 OWNER, byte exact (no pad needed)
    assert_eq!(r.take(8), b"\0\0\0\x03100\0"); // 37 OWNER_GROUP, padded
    assert_eq!((r.u32(), r.u32()), (0, 0)); // 41 RAWDEV
    assert_eq!(r.u64(), 1 << 38); // 42 SPACE_AVAIL
    assert_eq!(r.u64(), 1 << 39); // 43 SPACE_FREE
    assert_eq!(r.u64(), 1 << 40); // 44 SPACE_TOTAL
    assert_eq!(r.u64(), 8192); // 45 SPACE_USED
    assert_eq!((r.i64(), r.u32()), (1_700_000_000, 1)); // 47 TIME_ACCESS
    assert_eq!((r.i64(), r.u32()), (0, 1)); // 51 TIME_DELTA
    assert_eq!((r.i64(), r.u32()), (1_700_000_200, 999_999_999)); // 52 TIME_METADATA
    let mut t = BytesMut::new();
    t.put_i64(1_700_000_123);
    t.put_u32(456_789);
    assert_eq!(r.take(12), &t[..]); // 53 TIME_MODIFY, byte exact
    assert_eq!(r.u64(), 4242); // 55 MOUNTED_ON_FILEID
    let n = r.u32(); // 75 SUPPATTR_EXCLCREAT
    let words: Vec<u32> = (0..n).map(|_| r.u32()).collect();
    assert_eq!(words, suppattr_exclcreat());
    assert_eq!(
        words,
        bitmap_of(&[fattr::SIZE, fattr::MODE, fattr::OWNER, fattr::OWNER_GROUP])
    );
    assert!(r.done(), "no bytes after the last attribute");

    // What we encoded compares equal to ourselves.
    assert_eq!(compare(&bm, &vals, &s), Ok(true));
}

#[test]
fn owner_padding_and_file_types() {
    let mut a = sample_attrs();
    a.uid = 12345;
    a.gid = 0;
    let fs = sample_fs();
    let (bm, vals) = encode(
        &bitmap_of(&[fattr::OWNER, fattr::OWNER_GROUP]),
        &src(&a, &fs, None),
    );
    assert_eq!(bm, bitmap_of(&[fattr::OWNER, fattr::OWNER_GROUP]));
    assert_eq!(&vals[..], b"\0\0\0\x0512345\0\0\0\0\0\0\x010\0\0\0");

    for (t, n) in [
        (FileType::Regular, 1),
        (FileType::Directory, 2),
        (FileType::BlockDev, 3),
        (FileType::CharDev, 4),
        (FileType::Symlink, 5),
        (FileType::Socket, 6),
        (FileType::Fifo, 7),
    ] {
        a.ftype = t;
        a.rdev = (8, 1);
        let (_, vals) = encode(
            &bitmap_of(&[fattr::TYPE, fattr::RAWDEV]),
            &src(&a, &fs, None),
        );
        assert_eq!(&vals[..], &[0, 0, 0, n, 0, 0, 0, 8, 0, 0, 0, 1]);
    }
}

#[test]
fn request_order_independence() {
    let Sample { a, fs, st } = sample();
    let s = src(&a, &fs, Some(&st));
    let wanted = [
        fattr::TIME_MODIFY,
        fattr::TYPE,
        fattr::MOUNTED_ON_FILEID,
        fattr::SIZE,
        fattr::OWNER,
        fattr::FSID,
        fattr::SPACE_AVAIL,
        fattr::SUPPATTR_EXCLCREAT,
        fattr::MODE,
    ];
    let forward = bitmap_of(&wanted);
    let mut rev = wanted;
    rev.reverse();
    let backward = bitmap_of(&rev);
    let mut padded = forward.clone();
    padded.extend([0, 0, 0]); // trailing zero words change nothing
    let r1 = encode(&forward, &s);
    assert_eq!(r1, encode(&backward, &s));
    assert_eq!(r1, encode(&padded, &s));

    // The values come in attribute-number order: the whole equals the concatenation of
    // one-attribute encodings, ascending.
    let mut sorted = wanted;
    sorted.sort();
    let mut cat = BytesMut::new();
    for b in sorted {
        let (bm, v) = encode(&bitmap_of(&[b]), &s);
        assert_eq!(bm, bitmap_of(&[b]));
        cat.extend_from_slice(&v);
    }
    assert_eq!(r1.1, cat.freeze());
    assert_eq!(r1.0, forward);
}

#[test]
fn unsupported_and_write_only_bits_dropped() {
    let Sample { a, fs, .. } = sample();
    let s = src(&a, &fs, None);
    let req = bitmap_of(&[
        fattr::SIZE,
        fattr::ACL,
        fattr::ARCHIVE,
        fattr::FS_LOCATIONS,
        fattr::TIME_ACCESS_SET,
        fattr::TIME_MODIFY_SET,
        fattr::TIME_CREATE,
        fattr::RDATTR_ERROR,
        fattr::SPACE_TOTAL, // FS stats not supplied
        82,                 // xattr_support (4.2)
        200,
    ]);
    let (bm, vals) = encode(&req, &s);
    assert_eq!(bm, vec![1 << fattr::SIZE]);
    assert_eq!(&vals[..], &[1, 2, 3, 4, 5, 6, 7, 8]);

    // Nothing supported requested: empty bitmap (trimmed), no values.
    let (bm, vals) = encode(&bitmap_of(&[fattr::ACL, 100]), &s);
    assert!(bm.is_empty());
    assert!(vals.is_empty());
    let (bm, vals) = encode(&[], &s);
    assert!(bm.is_empty() && vals.is_empty());
}

#[test]
fn fsstats_needs() {
    assert!(!needs_fsstats(&bitmap_of(&[
        fattr::SIZE,
        fattr::SPACE_USED,
        fattr::MAXNAME
    ])));
    // FILES_AVAIL, FILES_FREE, FILES_TOTAL and SPACE_AVAIL, SPACE_FREE, SPACE_TOTAL: two
    // runs of consecutive attribute numbers.
    let files = fattr::FILES_AVAIL..=fattr::FILES_TOTAL;
    let space = fattr::SPACE_AVAIL..=fattr::SPACE_TOTAL;
    assert_eq!((files.clone().count(), space.clone().count()), (3, 3));
    assert_eq!(fattr::FILES_FREE, fattr::FILES_AVAIL + 1);
    assert_eq!(fattr::SPACE_FREE, fattr::SPACE_AVAIL + 1);
    for b in files.chain(space) {
        assert!(needs_fsstats(&bitmap_of(&[fattr::TYPE, b])), "{b}");
    }
    assert!(!needs_fsstats(&[]));
}

#[test]
fn rdattr_error_for_readdir() {
    let Sample { a, fs, .. } = sample();
    let mut s = src(&a, &fs, None);
    let req = bitmap_of(&[fattr::TYPE, fattr::RDATTR_ERROR, fattr::FILEID]);

    // Not a READDIR: RDATTR_ERROR is not encoded.
    let (bm, _) = encode(&req, &s);
    assert_eq!(bm, bitmap_of(&[fattr::TYPE, fattr::FILEID]));

    // READDIR entry that is fine: rdattr_error = NFS4_OK alongside the rest.
    s.rdattr_error = Some(0);
    let (bm, vals) = encode(&req, &s);
    assert_eq!(bm, req);
    assert_eq!(&vals[4..8], &[0, 0, 0, 0]);
    assert_eq!(vals.len(), 4 + 4 + 8);

    // READDIR entry whose attributes failed: only the error.
    s.rdattr_error = Some(70); // NFS4ERR_STALE
    let (bm, vals) = encode(&req, &s);
    assert_eq!(bm, bitmap_of(&[fattr::RDATTR_ERROR]));
    assert_eq!(&vals[..], &[0, 0, 0, 70]);
    let (bm, vals) = encode(&bitmap_of(&[fattr::TYPE]), &s);
    assert!(bm.is_empty() && vals.is_empty());
}

// ----------------------------------------------------------------------------------------
// SETATTR

fn opaque(out: &mut BytesMut, s: &[u8]) {
    out.put_u32(s.len() as u32);
    out.put_slice(s);
    out.put_bytes(0, (4 - s.len() % 4) % 4);
}

#[test]
fn setattrs_all_fields() {
    let mask = bitmap_of(&[
        fattr::TIME_MODIFY_SET,
        fattr::SIZE,
        fattr::MODE,
        fattr::OWNER,
        fattr::OWNER_GROUP,
        fattr::TIME_ACCESS_SET,
    ]);
    let mut v = BytesMut::new();
    v.put_u64(4096); // 4 SIZE
    v.put_u32(0o104755); // 33 MODE: type bits are masked off
    opaque(&mut v, b"1000@example.org"); // 36 OWNER
    opaque(&mut v, b"root"); // 37 OWNER_GROUP
    v.put_u32(1); // 48 TIME_ACCESS_SET: SET_TO_CLIENT_TIME4
    v.put_i64(-5);
    v.put_u32(999_999_999);
    v.put_u32(0); // 54 TIME_MODIFY_SET: SET_TO_SERVER_TIME4
    let (sa, set) = decode_setattrs(&mask, &v.freeze()).unwrap();
    assert_eq!(
        sa,
        SetAttrs {
            mode: Some(0o4755),
            uid: Some(1000),
            gid: Some(0),
            size: Some(4096),
            atime: Some(SetTime::Client(Timestamp {
                sec: -5,
                nsec: 999_999_999
            })),
            mtime: Some(SetTime::ServerNow),
        }
    );
    assert_eq!(set, mask);

    // Each field alone, and trailing zero words are trimmed from attrsset.
    let mut v = BytesMut::new();
    opaque(&mut v, b"nobody");
    let (sa, set) = decode_setattrs(&[0, 1 << (fattr::OWNER - 32), 0, 0], &v.freeze()).unwrap();
    assert_eq!(sa.uid, Some(65534));
    assert_eq!(set, vec![0, 1 << (fattr::OWNER - 32)]);

    let mut v = BytesMut::new();
    v.put_u32(1);
    v.put_i64(1_600_000_000);
    v.put_u32(0);
    let (sa, _) = decode_setattrs(&bitmap_of(&[fattr::TIME_MODIFY_SET]), &v.freeze()).unwrap();
    assert_eq!(
        sa.mtime,
        Some(SetTime::Client(Timestamp {
            sec: 1_600_000_000,
            nsec: 0
        }))
    );
    assert_eq!(sa.atime, None);

    // Empty mask: nothing to do.
    let (sa, set) = decode_setattrs(&[], &Bytes::new()).unwrap();
    assert!(sa.is_empty() && set.is_empty());
}

#[test]
fn setattrs_errors() {
    let u64v = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 9]);
    // Read-only attributes.
    for b in [
        fattr::FILEID,
        fattr::TYPE,
        fattr::CHANGE,
        fattr::SUPPORTED_ATTRS,
        fattr::RDATTR_ERROR,
        fattr::TIME_MODIFY,
    ] {
        assert_eq!(
            decode_setattrs(&bitmap_of(&[b]), &u64v),
            Err(AttrError::Inval),
            "{b}"
        );
    }
    assert_eq!(AttrError::Inval.nfsstat(), 22);
    // Unknown attributes: NotSupp with the lowest offending number, even next to a
    // read-only one (ATTRNOTSUPP is checked over the whole mask first).
    assert_eq!(
        decode_setattrs(&bitmap_of(&[fattr::SIZE, fattr::ACL, 99]), &u64v),
        Err(AttrError::NotSupp(fattr::ACL))
    );
    assert_eq!(
        decode_setattrs(&bitmap_of(&[fattr::FILEID, 82]), &u64v),
        Err(AttrError::NotSupp(82))
    );
    assert_eq!(AttrError::NotSupp(12).nfsstat(), 10032);

    // Truncated values.
    let size = bitmap_of(&[fattr::SIZE]);
    assert_eq!(
        decode_setattrs(&size, &Bytes::from_static(&[0, 0, 0, 1])),
        Err(AttrError::BadXdr)
    );
    assert_eq!(
        decode_setattrs(&size, &Bytes::new()),
        Err(AttrError::BadXdr)
    );
    let owner = bitmap_of(&[fattr::OWNER]);
    assert_eq!(
        decode_setattrs(&owner, &Bytes::from_static(b"\0\0\0\x081000")),
        Err(AttrError::BadXdr)
    );
    let mtime = bitmap_of(&[fattr::TIME_MODIFY_SET]);
    assert_eq!(
        decode_setattrs(&mtime, &Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0])),
        Err(AttrError::BadXdr)
    );
    // Bad settime4 discriminant.
    assert_eq!(
        decode_setattrs(&mtime, &Bytes::from_static(&[0, 0, 0, 2])),
        Err(AttrError::BadXdr)
    );
    // Trailing garbage.
    assert_eq!(
        decode_setattrs(
            &size,
            &Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0])
        ),
        Err(AttrError::BadXdr)
    );
    // Mask says MODE but the value is missing after SIZE.
    assert_eq!(
        decode_setattrs(&bitmap_of(&[fattr::SIZE, fattr::MODE]), &u64v),
        Err(AttrError::BadXdr)
    );
    assert_eq!(AttrError::BadXdr.nfsstat(), 10036);

    // nseconds out of range.
    let mut v = BytesMut::new();
    v.put_u32(1);
    v.put_i64(0);
    v.put_u32(1_000_000_000);
    assert_eq!(decode_setattrs(&mtime, &v.freeze()), Err(AttrError::Inval));

    // Owners we cannot map.
    for bad in [
        &b"alice"[..],
        b"alice@example.org",
        b"",
        b"@x",
        b"-1",
        b"99999999999",
        b"\xff\xfe",
    ] {
        let mut v = BytesMut::new();
        opaque(&mut v, bad);
        let v = v.freeze();
        assert_eq!(decode_setattrs(&owner, &v), Err(AttrError::BadOwner));
        assert_eq!(
            decode_setattrs(&bitmap_of(&[fattr::OWNER_GROUP]), &v),
            Err(AttrError::BadOwner)
        );
    }
    assert_eq!(AttrError::BadOwner.nfsstat(), 10039);
}

#[test]
fn exclcreat_and_writable() {
    let w = writable_attrs();
    assert_eq!(
        w,
        bitmap_of(&[
            fattr::SIZE,
            fattr::MODE,
            fattr::OWNER,
            fattr::OWNER_GROUP,
            fattr::TIME_ACCESS_SET,
            fattr::TIME_MODIFY_SET,
            fattr::TIME_DELEG_ACCESS,
            fattr::TIME_DELEG_MODIFY
        ])
    );
    // The delegated times are NFSv4.2 attributes (RFC 9754).
    let sup = supported_attrs_in(2);
    for bit in 0..96 {
        if bitmap_isset(&w, bit) || bitmap_isset(&suppattr_exclcreat(), bit) {
            assert!(bitmap_isset(&sup, bit), "{bit}");
        }
    }
}

// ----------------------------------------------------------------------------------------
// VERIFY / NVERIFY

#[test]
fn compare_equal_and_unequal() {
    let Sample { a, fs, st } = sample();
    let s = src(&a, &fs, Some(&st));

    let mask = bitmap_of(&[fattr::SIZE, fattr::MODE, fattr::OWNER]);
    let mut v = BytesMut::new();
    v.put_u64(a.size);
    v.put_u32(0o644);
    opaque(&mut v, b"1000@some.domain"); // maps to the same id
    assert_eq!(compare(&mask, &v.freeze(), &s), Ok(true));

    let mut v = BytesMut::new();
    v.put_u64(a.size + 1);
    v.put_u32(0o644);
    opaque(&mut v, b"1000");
    assert_eq!(compare(&mask, &v.freeze(), &s), Ok(false));

    let mut v = BytesMut::new();
    v.put_u64(a.size);
    v.put_u32(0o644);
    opaque(&mut v, b"alice"); // unmappable: simply not the same
    assert_eq!(compare(&mask, &v.freeze(), &s), Ok(false));

    // Each encodable attribute alone compares equal against our own encoding, and unequal
    // once a byte of its value is flipped (or the value changes length).
    let sup = supported_attrs();
    for bit in 0..96u32 {
        if !bitmap_isset(&sup, bit)
            || [
                fattr::RDATTR_ERROR,
                fattr::TIME_ACCESS_SET,
                fattr::TIME_MODIFY_SET,
            ]
            .contains(&bit)
        {
            continue;
        }
        let m = bitmap_of(&[bit]);
        let (bm, vals) = encode(&m, &s);
        assert_eq!(bm, m, "{bit}");
        assert_eq!(compare(&m, &vals, &s), Ok(true), "{bit}");
        // Flip the last bit of the first 8 bytes (bools become 0/1 swapped), or of the
        // first character of an owner string (its tail may be padding).
        let mut changed = vals.to_vec();
        let i = if bit == fattr::OWNER || bit == fattr::OWNER_GROUP {
            4
        } else {
            changed.len().min(8) - 1
        };
        changed[i] ^= 1;
        let r = compare(&m, &Bytes::from(changed), &s);
        assert!(
            r == Ok(false) || r == Err(AttrError::BadXdr),
            "{bit}: {r:?}"
        );
    }

    // Bitmaps compare regardless of trailing zero words.
    let mut v = BytesMut::new();
    let words = supported_attrs();
    v.put_u32(words.len() as u32 + 2);
    for w in words.iter().chain(&[0, 0]) {
        v.put_u32(*w);
    }
    assert_eq!(
        compare(&bitmap_of(&[fattr::SUPPORTED_ATTRS]), &v.freeze(), &s),
        Ok(true)
    );
}

#[test]
fn compare_errors() {
    let Sample { a, fs, .. } = sample();
    let s = src(&a, &fs, None);
    let zero4 = Bytes::from_static(&[0, 0, 0, 0]);
    assert_eq!(
        compare(&bitmap_of(&[fattr::RDATTR_ERROR]), &zero4, &s),
        Err(AttrError::Inval)
    );
    assert_eq!(
        compare(&bitmap_of(&[fattr::TIME_MODIFY_SET]), &zero4, &s),
        Err(AttrError::Inval)
    );
    assert_eq!(
        compare(&bitmap_of(&[fattr::TYPE, fattr::ACL]), &zero4, &s),
        Err(AttrError::NotSupp(fattr::ACL))
    );
    assert_eq!(
        compare(&bitmap_of(&[fattr::SIZE]), &zero4, &s),
        Err(AttrError::BadXdr)
    );
    assert_eq!(
        compare(
            &bitmap_of(&[fattr::TYPE]),
            &Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0]),
            &s
        ),
        Err(AttrError::BadXdr)
    );
    // A bool that is neither 0 nor 1.
    assert_eq!(
        compare(
            &bitmap_of(&[fattr::NO_TRUNC]),
            &Bytes::from_static(&[0, 0, 0, 2]),
            &s
        ),
        Err(AttrError::BadXdr)
    );
    // FS statistics compared without being supplied: a server bug, reported as such.
    let v = Bytes::from_static(&[0; 8]);
    assert_eq!(
        compare(&bitmap_of(&[fattr::SPACE_FREE]), &v, &s),
        Err(AttrError::MissingFsStats)
    );
    assert_eq!(AttrError::MissingFsStats.nfsstat(), 10006);
}

// ----------------------------------------------------------------------------------------
// Properties

proptest! {
    #[test]
    fn decode_setattrs_never_panics(
        mask in proptest::collection::vec(any::<u32>(), 0..5),
        vals in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let _ = decode_setattrs(&mask, &Bytes::from(vals));
    }

    #[test]
    fn decode_setattrs_writable_masks_never_panic(
        pick in proptest::collection::vec(any::<bool>(), 6),
        vals in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        // Focus on masks that get past the mask checks, so value decoding is exercised.
        let w = [fattr::SIZE, fattr::MODE, fattr::OWNER, fattr::OWNER_GROUP,
                 fattr::TIME_ACCESS_SET, fattr::TIME_MODIFY_SET];
        let bits: Vec<u32> = w.iter().zip(&pick).filter(|(_, p)| **p).map(|(b, _)| *b).collect();
        let mask = bitmap_of(&bits);
        if let Ok((_, set)) = decode_setattrs(&mask, &Bytes::from(vals)) {
            prop_assert_eq!(set, mask);
        }
    }

    #[test]
    fn compare_never_panics(
        mask in proptest::collection::vec(any::<u32>(), 0..4),
        vals in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let Sample { a, fs, st } = sample();
        let _ = compare(&mask, &Bytes::from(vals), &src(&a, &fs, Some(&st)));
    }

    #[test]
    fn encode_then_compare_is_equal(
        req in proptest::collection::vec(any::<u32>(), 0..4),
        uid in any::<u32>(), size in any::<u64>(), sec in any::<i64>(), nsec in 0u32..1_000_000_000,
    ) {
        let mut a = sample_attrs();
        a.uid = uid;
        a.size = size;
        a.mtime = Timestamp { sec, nsec };
        let fs = sample_fs();
        let st = sample_stats();
        let s = src(&a, &fs, Some(&st));
        let (bm, vals) = encode(&req, &s);
        prop_assert!(bm.last() != Some(&0));
        // Only requested, supported attributes are returned.
        for (i, w) in bm.iter().enumerate() {
            prop_assert_eq!(w & !req[i], 0);
            prop_assert_eq!(w & !supported_attrs().get(i).copied().unwrap_or(0), 0);
        }
        prop_assert_eq!(compare(&bm, &vals, &s), Ok(true));
    }
}

/// NFSv4.2 adds its attributes for a 4.2 COMPOUND only (RFC 7862 §12.2): a 4.1 one
/// neither sees them in SUPPORTED_ATTRS nor may set MODE_UMASK; in 4.2 MODE_UMASK
/// applies the umask, and is refused together with MODE.
#[test]
fn v42_attributes_exist_in_v42_only() {
    use txnfs_attr::fattr::*;
    let v41 = supported_attrs_in(1);
    let v42 = supported_attrs_in(2);
    for b in [
        CLONE_BLKSIZE,
        SPACE_FREED,
        CHANGE_ATTR_TYPE,
        MODE_UMASK,
        XATTR_SUPPORT,
    ] {
        assert!(!bitmap_isset(&v41, b), "{b} in 4.1");
        assert!(bitmap_isset(&v42, b), "{b} not in 4.2");
    }
    let mask = bitmap_of(&[MODE_UMASK]);
    let vals = Bytes::from_static(&[0, 0, 0x01, 0xff, 0, 0, 0, 0o22]);
    assert_eq!(
        decode_setattrs(&mask, &vals).unwrap_err(),
        AttrError::NotSupp(MODE_UMASK)
    );
    let (set, bits) = decode_setattrs_in(&mask, &vals, 2).unwrap();
    assert_eq!(set.mode, Some(0o755));
    assert_eq!(bits, mask);
    let both = bitmap_of(&[MODE, MODE_UMASK]);
    let vals = Bytes::from_static(&[0, 0, 0x01, 0xff, 0, 0, 0x01, 0xff, 0, 0, 0, 0o22]);
    assert_eq!(
        decode_setattrs_in(&both, &vals, 2).unwrap_err(),
        AttrError::Inval
    );
    // Encoded for 4.2 only.
    let mut fs = sample_fs();
    let attrs = sample_attrs();
    let request = bitmap_of(&[XATTR_SUPPORT, CLONE_BLKSIZE, SPACE_FREED]);
    fn src<'a>(attrs: &'a Attrs, fs: &'a FsInfo) -> AttrSource<'a> {
        AttrSource {
            attrs,
            fh: b"fh",
            fs,
            fsstats: None,
            mounted_on_fileid: 1,
            rdattr_error: None,
        }
    }
    assert!(encode(&request, &src(&attrs, &fs)).0.is_empty());
    fs.minor = 2;
    fs.xattr_support = true;
    fs.clone_blksize = 4096;
    let (bits, vals) = encode(&request, &src(&attrs, &fs));
    assert_eq!(bits, request);
    assert_eq!(vals.len(), 4 + 8 + 4);
}
