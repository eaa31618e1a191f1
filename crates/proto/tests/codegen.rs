//! Mappings of the generator that nfs4.x does not exercise, on `tests/xdrgen_test.x`.

use bytes::{Bytes, BytesMut};
use support::roundtrip;
use txnfs_xdr::{Decode, Encode, XdrError};

mod support;

txnfs_proto::include_generated! {
    mod t = "xdrgen_test.rs"
}
use t::*;

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

fn holder() -> holder {
    holder {
        head: vec![
            node {
                p: point { x: 1, y: -2 },
            },
            node {
                p: point { x: 3, y: 4 },
            },
        ],
        maybe: Some(Box::new(point { x: 9, y: 10 })),
        q: vec![1, 2, 3, 4],
        pair: vec![7, 8],
        label: Bytes::from_static(b"abc"),
        r#type: -1,
        items: vec![Bytes::from_static(b"x"), Bytes::from_static(b"yyyy")],
        nl: nodelist(vec![node {
            p: point { x: 5, y: 6 },
        }]),
        f3: [1, 2, 3],
        u: 11,
        uh: u64::MAX,
    }
}

#[test]
fn constants() {
    assert_eq!(MAXN, 4u32);
    assert_eq!(NEGATIVE, -7i64);
    assert_eq!(BIG, 0x1_0000_0000u64);
    assert_eq!(TRUE, 1u32);
}

#[test]
fn holder_roundtrip_and_layout() {
    let h = holder();
    let b = roundtrip(&h);
    let w = words(&b);
    #[rustfmt::skip]
    let expect: Vec<u32> = vec![
        1, 1, 0xffff_ffff, 0xffff_fffe, // head: node 1 follows, x=1, y=-2
        1, 3, 0, 4, 0,                  // node 2, then end of list
        1, 9, 0, 10,                    // maybe: present
        1, 2, 3, 4,                     // quad: no length prefix
        7, 8,                           // pair[2]: no length prefix
        3, u32::from_be_bytes(*b"abc\0"), // label
        0xffff_ffff,                    // type
        2, 1, u32::from_be_bytes(*b"x\0\0\0"), 4, u32::from_be_bytes(*b"yyyy"), // items
        1, 5, 0, 6, 0,                  // nl
        u32::from_be_bytes([1, 2, 3, 0]), // f3: fixed opaque, padded
        11, 0xffff_ffff, 0xffff_ffff,
    ];
    assert_eq!(w, expect);
}

#[test]
fn bounds_are_enforced_through_typedefs() {
    // label is string<8>.
    let mut h = holder();
    h.label = Bytes::from_static(b"123456789");
    assert_eq!(
        holder::from_bytes(h.to_bytes()),
        Err(XdrError::TooLong { len: 9, max: 8 })
    );
    // items is smalls = small<3>, small = opaque<4>: the inner bound applies too.
    let mut h = holder();
    h.items = vec![Bytes::from_static(b"12345")];
    assert_eq!(
        holder::from_bytes(h.to_bytes()),
        Err(XdrError::TooLong { len: 5, max: 4 })
    );
    let mut h = holder();
    h.items = vec![Bytes::new(); 4];
    assert_eq!(
        holder::from_bytes(h.to_bytes()),
        Err(XdrError::TooLong { len: 4, max: 3 })
    );
}

#[test]
fn truncated_input_is_an_error_at_every_length() {
    let b = holder().to_bytes();
    for n in 0..b.len() {
        assert!(
            matches!(
                holder::from_bytes(b.slice(..n)),
                Err(XdrError::Truncated { .. })
            ),
            "prefix of {n} bytes"
        );
    }
}

#[test]
fn numeric_union_labels() {
    assert_eq!(words(&roundtrip(&numbered::V0)), vec![0]);
    assert_eq!(
        words(&roundtrip(&numbered::V1(point { x: 1, y: 2 }))),
        vec![1, 1, 0, 2]
    );
    assert_eq!(words(&roundtrip(&numbered::Vneg1(5))), vec![0xffff_ffff, 5]);
    assert_eq!(
        words(&roundtrip(&numbered::default(42, -1))),
        vec![42, 0xffff_ffff, 0xffff_ffff]
    );
    assert_eq!(numbered::default(42, 0).discriminant(), 42);
    assert_eq!(numbered::Vneg1(0).discriminant(), -1);

    assert_eq!(words(&roundtrip(&bigdisc::V5)), vec![0, 5]);
    assert_eq!(bigdisc::V5.discriminant(), 5u64);
    assert_eq!(
        bigdisc::from_bytes(Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 5])),
        Err(XdrError::BadDiscriminant {
            type_name: "bigdisc",
            value: 0x1_0000_0005
        })
    );
}

#[test]
fn enum_unions_and_bool_unions() {
    assert_eq!(words(&roundtrip(&colored::RED(3))), vec![0, 3]);
    assert_eq!(words(&roundtrip(&colored::NEG)), vec![0xffff_fffe]);
    assert_eq!(words(&roundtrip(&colored::default(color::GREEN))), vec![1]);
    assert_eq!(colored::NEG.discriminant(), color::NEG);
    // A value that is not a member of the discriminant enum, even with a default arm.
    assert_eq!(
        colored::from_bytes(Bytes::from_static(&[0, 0, 0, 7])),
        Err(XdrError::BadDiscriminant {
            type_name: "color",
            value: 7
        })
    );
    assert_eq!(words(&roundtrip(&flag::TRUE(-3))), vec![1, 0xffff_fffd]);
    assert_eq!(words(&roundtrip(&flag::default(false))), vec![0]);
    assert!(flag::TRUE(0).discriminant());
    assert_eq!(
        flag::from_bytes(Bytes::from_static(&[0, 0, 0, 2])),
        Err(XdrError::BadBool(2))
    );
}

#[test]
fn enums() {
    assert_eq!(color::from_i32(-2), Some(color::NEG));
    assert_eq!(color::from_i32(5), None);
    assert_eq!(color::default(), color::RED);
    assert_eq!(words(&roundtrip(&color::NEG)), vec![0xffff_fffe]);
    assert_eq!(
        color::from_bytes(Bytes::from_static(&[0, 0, 0, 9])),
        Err(XdrError::BadDiscriminant {
            type_name: "color",
            value: 9
        })
    );
}

#[test]
fn defaults_are_derived_where_possible() {
    let p = point::default();
    assert_eq!(p, point { x: 0, y: 0 });
    let n = nodelist::default();
    assert!(n.0.is_empty());
    let mut out = BytesMut::new();
    n.encode(&mut out);
    assert_eq!(&out[..], &[0, 0, 0, 0]);
}
