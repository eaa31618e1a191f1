//! Round trips, wire layouts and hostile-input behaviour of the generated NFSv4 types.

use bytes::Bytes;
use proptest::prelude::*;
use support::roundtrip;
use txnfs_proto::nfs4::*;
use txnfs_proto::{Decode, Encode, XdrError};

mod support;

fn sid() -> sessionid4 {
    std::array::from_fn(|i| i as u8)
}

fn sequence() -> SEQUENCE4args {
    SEQUENCE4args {
        sa_sessionid: sid(),
        sa_sequenceid: 1,
        sa_slotid: 2,
        sa_highest_slotid: 3,
        sa_cachethis: true,
    }
}

fn attrs() -> fattr4 {
    fattr4 {
        attrmask: vec![1 << FATTR4_TYPE | 1 << FATTR4_SIZE, 1 << (FATTR4_MODE - 32)],
        attr_vals: Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 1, 0xed]),
    }
}

fn open_exclusive4_1() -> OPEN4args {
    OPEN4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: open_owner4 {
            clientid: 0x0102_0304_0506_0708,
            owner: Bytes::from_static(b"open id:1"),
        },
        openhow: openflag4::OPEN4_CREATE(createhow4::EXCLUSIVE4_1(creatverfattr {
            cva_verf: *b"verifier",
            cva_attrs: attrs(),
        })),
        claim: open_claim4::CLAIM_NULL(Bytes::from_static(b"file.txt")),
    }
}

/// Every op's arguments and result are decoded, run and encoded as these enums, so a
/// COMPOUND of small ops moves them several times each. The large arms (OPEN's,
/// CREATE's, ...) are boxed by the generator (`NFS4_BOXED_ARMS` in build.rs, ADR 0066);
/// an arm added or grown past 64 bytes fails here until it is boxed too.
#[test]
fn the_op_enums_stay_small() {
    assert!(
        std::mem::size_of::<nfs_argop4>() <= 72,
        "nfs_argop4 is {} bytes",
        std::mem::size_of::<nfs_argop4>()
    );
    assert!(
        std::mem::size_of::<nfs_resop4>() <= 72,
        "nfs_resop4 is {} bytes",
        std::mem::size_of::<nfs_resop4>()
    );
}

#[test]
fn sequence_args_byte_exact() {
    let b = roundtrip(&sequence());
    #[rustfmt::skip]
    let expect: [u8; 32] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, // sa_sessionid (fixed, no length)
        0, 0, 0, 1, // sa_sequenceid
        0, 0, 0, 2, // sa_slotid
        0, 0, 0, 3, // sa_highest_slotid
        0, 0, 0, 1, // sa_cachethis = TRUE
    ];
    assert_eq!(&b[..], &expect[..]);
}

#[test]
fn compound_with_sequence_putfh_open() {
    let c = COMPOUND4args {
        tag: Bytes::from_static(b"ab"),
        minorversion: 1,
        argarray: vec![
            nfs_argop4::OP_SEQUENCE(sequence()),
            nfs_argop4::OP_PUTFH(PUTFH4args {
                object: Bytes::from_static(&[0xaa; 20]),
            }),
            nfs_argop4::OP_OPEN(Box::new(open_exclusive4_1())),
            nfs_argop4::OP_GETFH,
        ],
    };
    let b = roundtrip(&c);
    // tag "ab" padded, minorversion, 4 ops, OP_SEQUENCE = 53, then SEQUENCE4args.
    assert_eq!(
        &b[..20],
        &[0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 53]
    );
    assert_eq!(&b[20..52], &sequence().to_bytes()[..]);
    // OP_PUTFH = 22, fh length 20.
    assert_eq!(&b[52..60], &[0, 0, 0, 22, 0, 0, 0, 20]);
    // The last op is OP_GETFH = 10 with no arguments.
    assert_eq!(&b[b.len() - 4..], &[0, 0, 0, 10]);
    assert_eq!(c.argarray[2].discriminant(), nfs_opnum4::OP_OPEN);
    assert_eq!(c.argarray[3].discriminant(), nfs_opnum4::OP_GETFH);
}

#[test]
fn open_createhow_variants() {
    let mut a = open_exclusive4_1();
    roundtrip(&a);
    for how in [
        createhow4::UNCHECKED4(attrs()),
        createhow4::GUARDED4(fattr4::default()),
        createhow4::EXCLUSIVE4([7; 8]),
    ] {
        a.openhow = openflag4::OPEN4_CREATE(how);
        roundtrip(&a);
    }
    a.openhow = openflag4::default(opentype4::OPEN4_NOCREATE);
    a.claim = open_claim4::CLAIM_FH;
    let b = roundtrip(&a);
    // ... owner, then openhow = OPEN4_NOCREATE (0), claim = CLAIM_FH (4).
    assert_eq!(&b[b.len() - 8..], &[0, 0, 0, 0, 0, 0, 0, 4]);
    let w = createhow4::EXCLUSIVE4_1(creatverfattr {
        cva_verf: [0; 8],
        cva_attrs: fattr4::default(),
    });
    assert_eq!(w.discriminant(), createmode4::EXCLUSIVE4_1);
    assert_eq!(&w.to_bytes()[..4], &[0, 0, 0, 3]);
}

#[test]
fn results() {
    let ok = OPEN4res::NFS4_OK(Box::new(OPEN4resok {
        stateid: stateid4 {
            seqid: 1,
            other: [9; 12],
        },
        cinfo: change_info4 {
            atomic: true,
            before: 1,
            after: 2,
        },
        rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
        attrset: vec![],
        delegation: open_delegation4::OPEN_DELEGATE_NONE_EXT(
            open_none_delegation4::WND4_CONTENTION(false),
        ),
    }));
    roundtrip(&ok);
    let err = OPEN4res::default(nfsstat4::NFS4ERR_NOENT);
    assert_eq!(&roundtrip(&err)[..], &[0, 0, 0, 2]);
    assert_eq!(err.discriminant(), nfsstat4::NFS4ERR_NOENT);
    assert_eq!(ok.discriminant(), nfsstat4::NFS4_OK);

    let res = COMPOUND4res {
        status: nfsstat4::NFS4ERR_NOENT,
        tag: Bytes::new(),
        resarray: vec![
            nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(SEQUENCE4resok {
                sr_sessionid: sid(),
                sr_sequenceid: 1,
                sr_slotid: 0,
                sr_highest_slotid: 0,
                sr_target_highest_slotid: 63,
                sr_status_flags: 0,
            })),
            nfs_resop4::OP_PUTFH(PUTFH4res {
                status: nfsstat4::NFS4_OK,
            }),
            nfs_resop4::OP_OPEN(err),
        ],
    };
    roundtrip(&res);
}

fn entries(n: usize) -> Vec<entry4> {
    (0..n)
        .map(|i| entry4 {
            cookie: i as u64 + 3,
            name: Bytes::from(format!("f{i}")),
            attrs: fattr4::default(),
        })
        .collect()
}

#[test]
fn readdir_three_entries() {
    let r = READDIR4res::NFS4_OK(READDIR4resok {
        cookieverf: [1; 8],
        reply: dirlist4 {
            entries: entries(3),
            eof: true,
        },
    });
    let b = roundtrip(&r);
    // status, verifier, then "value follows" + entry for each, a 0, then eof.
    let entry_len = 4 + 8 + 4 + 4 + 4 + 4; // follows, cookie, name "fN" padded, empty bitmap, empty attrs
    assert_eq!(b.len(), 4 + 8 + 3 * entry_len + 4 + 4);
    assert_eq!(&b[12..16], &[0, 0, 0, 1]);
    assert_eq!(&b[16..24], &3u64.to_be_bytes());
    assert_eq!(&b[b.len() - 8..], &[0, 0, 0, 0, 0, 0, 0, 1]);
    let empty = dirlist4 {
        entries: vec![],
        eof: false,
    };
    assert_eq!(&roundtrip(&empty)[..], &[0; 8]);
}

#[test]
fn long_entry_list_does_not_recurse() {
    let list = dirlist4 {
        entries: entries(200_000),
        eof: true,
    };
    let b = list.to_bytes();
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let d = dirlist4::from_bytes(b.clone()).expect("decodes");
            let again = d.to_bytes();
            assert_eq!(again, b);
            (d.entries.len(), d.entries[199_999].cookie)
        })
        .expect("spawn");
    assert_eq!(
        handle.join().expect("no stack overflow"),
        (200_000, 200_002)
    );
}

#[test]
fn unknown_opcode_is_bad_discriminant() {
    let mut b = bytes::BytesMut::new();
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]); // tag "", minor 1, 1 op
    b.extend_from_slice(&9999u32.to_be_bytes());
    let e = COMPOUND4args::from_bytes(b.freeze()).unwrap_err();
    assert_eq!(
        e,
        XdrError::BadDiscriminant {
            type_name: "nfs_argop4",
            value: 9999
        }
    );
    assert_eq!(
        nfs_argop4::from_bytes(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff])),
        Err(XdrError::BadDiscriminant {
            type_name: "nfs_argop4",
            value: -1
        })
    );
    // OP_ILLEGAL itself is a listed case.
    assert_eq!(
        nfs_argop4::from_bytes(Bytes::from(10044u32.to_be_bytes().to_vec())),
        Ok(nfs_argop4::OP_ILLEGAL)
    );
    // An unknown status in a result union with a default arm.
    assert_eq!(
        OPEN4res::from_bytes(Bytes::from_static(&[0, 0, 0, 3])),
        Err(XdrError::BadDiscriminant {
            type_name: "nfsstat4",
            value: 3
        })
    );
}

#[test]
fn limits_are_enforced() {
    let fh = PUTFH4args {
        object: Bytes::from(vec![0u8; NFS4_FHSIZE as usize + 1]),
    };
    assert_eq!(
        PUTFH4args::from_bytes(fh.to_bytes()),
        Err(XdrError::TooLong { len: 129, max: 128 })
    );
    // authsys_parms: gids<16>, machinename<255>.
    let cred = authsys_parms {
        stamp: 1,
        machinename: Bytes::from_static(b"host"),
        uid: 0,
        gid: 0,
        gids: (0..17).collect(),
    };
    assert_eq!(
        authsys_parms::from_bytes(cred.to_bytes()),
        Err(XdrError::TooLong { len: 17, max: 16 })
    );
    // A hostile array count does not allocate, it just runs out of input.
    let mut b = bytes::BytesMut::new();
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff]);
    assert!(matches!(
        COMPOUND4args::from_bytes(b.freeze()),
        Err(XdrError::Truncated { .. })
    ));
}

#[test]
fn misc_unions() {
    roundtrip(&settime4::SET_TO_CLIENT_TIME4(nfstime4 {
        seconds: -5,
        nseconds: 999_999_999,
    }));
    assert_eq!(
        &roundtrip(&settime4::default(time_how4::SET_TO_SERVER_TIME4))[..],
        &[0, 0, 0, 0]
    );
    roundtrip(&locker4::TRUE(open_to_lock_owner4 {
        open_seqid: 1,
        open_stateid: stateid4::default(),
        lock_seqid: 2,
        lock_owner: lock_owner4 {
            clientid: 5,
            owner: Bytes::from_static(b"lo"),
        },
    }));
    assert!(!locker4::FALSE(exist_lock_owner4 {
        lock_stateid: stateid4::default(),
        lock_seqid: 0,
    })
    .discriminant());
    let sec = callback_sec_parms4::AUTH_SYS(authsys_parms {
        stamp: 1,
        machinename: Bytes::from_static(b"client"),
        uid: 1000,
        gid: 1000,
        gids: vec![1000, 10],
    });
    assert_eq!(&roundtrip(&sec)[..4], &[0, 0, 0, 1]);
    assert_eq!(sec.discriminant(), AUTH_SYS);
    assert_eq!(&roundtrip(&secinfo4::default(AUTH_SYS))[..], &[0, 0, 0, 1]);
    assert_eq!(nfs_cb_argop4::OP_CB_ILLEGAL.discriminant(), 10044);
    roundtrip(&nfs_cb_argop4::OP_CB_ILLEGAL);
}

#[test]
fn enums_and_defaults() {
    assert_eq!(nfsstat4::default(), nfsstat4::NFS4_OK);
    assert_eq!(nfsstat4::from_i32(10008), Some(nfsstat4::NFS4ERR_DELAY));
    assert_eq!(nfs_ftype4::from_i32(0), None);
    assert_eq!(nfs_opnum4::OP_SEQUENCE as i32, 53);
    assert_eq!(fattr4::default().to_bytes().len(), 8);
    assert_eq!(NFS4_UINT64_MAX, u64::MAX);
}

// ---- property tests ----

fn bytes_up_to(n: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..=n).prop_map(Bytes::from)
}

fn arb_fattr() -> impl Strategy<Value = fattr4> {
    (
        proptest::collection::vec(any::<u32>(), 0..4),
        bytes_up_to(40),
    )
        .prop_map(|(m, v)| fattr4 {
            attrmask: m,
            attr_vals: v,
        })
}

fn arb_stateid() -> impl Strategy<Value = stateid4> {
    (any::<u32>(), any::<[u8; 12]>()).prop_map(|(seqid, other)| stateid4 { seqid, other })
}

fn arb_argop() -> impl Strategy<Value = nfs_argop4> {
    prop_oneof![
        (
            any::<[u8; 16]>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(|(s, q, a, b, c)| nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
                sa_sessionid: s,
                sa_sequenceid: q,
                sa_slotid: a,
                sa_highest_slotid: b,
                sa_cachethis: c,
            })),
        bytes_up_to(128).prop_map(|object| nfs_argop4::OP_PUTFH(PUTFH4args { object })),
        Just(nfs_argop4::OP_PUTROOTFH),
        Just(nfs_argop4::OP_GETFH),
        bytes_up_to(20).prop_map(|objname| nfs_argop4::OP_LOOKUP(LOOKUP4args { objname })),
        proptest::collection::vec(any::<u32>(), 0..3)
            .prop_map(|attr_request| nfs_argop4::OP_GETATTR(GETATTR4args { attr_request })),
        (arb_stateid(), any::<u64>(), any::<u32>()).prop_map(|(stateid, offset, count)| {
            nfs_argop4::OP_READ(READ4args {
                stateid,
                offset,
                count,
            })
        }),
        (arb_stateid(), any::<u64>(), bytes_up_to(64)).prop_map(|(stateid, offset, data)| {
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid,
                offset,
                stable: stable_how4::FILE_SYNC4,
                data,
            })
        }),
        (arb_stateid(), arb_fattr()).prop_map(|(stateid, obj_attributes)| {
            nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                stateid,
                obj_attributes,
            }))
        }),
        (any::<[u8; 8]>(), arb_fattr(), bytes_up_to(12)).prop_map(|(v, a, name)| {
            let mut o = open_exclusive4_1();
            o.openhow = openflag4::OPEN4_CREATE(createhow4::EXCLUSIVE4_1(creatverfattr {
                cva_verf: v,
                cva_attrs: a,
            }));
            o.claim = open_claim4::CLAIM_NULL(name);
            nfs_argop4::OP_OPEN(Box::new(o))
        }),
    ]
}

proptest! {
    #[test]
    fn compound_args_roundtrip(tag in bytes_up_to(16), minor in 0u32..3,
                               ops in proptest::collection::vec(arb_argop(), 0..6)) {
        let c = COMPOUND4args { tag, minorversion: minor, argarray: ops };
        let b = c.to_bytes();
        prop_assert_eq!(COMPOUND4args::from_bytes(b), Ok(c));
    }

    #[test]
    fn dirlist_roundtrip(raw in proptest::collection::vec((any::<u64>(), bytes_up_to(12), arb_fattr()), 0..20),
                         eof in any::<bool>()) {
        let d = dirlist4 {
            entries: raw.into_iter().map(|(cookie, name, attrs)| entry4 { cookie, name, attrs }).collect(),
            eof,
        };
        let b = d.to_bytes();
        prop_assert_eq!(dirlist4::from_bytes(b), Ok(d));
    }

    #[test]
    fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let b = Bytes::from(data);
        let _ = COMPOUND4args::from_bytes(b.clone());
        let _ = COMPOUND4res::from_bytes(b.clone());
        let _ = CB_COMPOUND4args::from_bytes(b.clone());
        let _ = CB_COMPOUND4res::from_bytes(b.clone());
        let _ = READDIR4res::from_bytes(b.clone());
        let _ = fattr4::from_bytes(b);
    }

    #[test]
    fn mutated_compounds_never_panic(ops in proptest::collection::vec(arb_argop(), 1..4),
                                     flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let c = COMPOUND4args { tag: Bytes::new(), minorversion: 1, argarray: ops };
        let mut b = c.to_bytes().to_vec();
        for (i, v) in flips {
            let i = i.index(b.len());
            b[i] = v;
        }
        let _ = COMPOUND4args::from_bytes(Bytes::from(b));
    }
}
