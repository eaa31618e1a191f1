//! The optional NFSv3 and MOUNT modules: list typedefs and v3 directory lists.

use bytes::Bytes;
use txnfs_proto::{mnt3, nfs3, Decode, Encode};

#[test]
fn mount_exports_list_typedef() {
    let ex = mnt3::exports(vec![
        mnt3::exportnode {
            ex_dir: Bytes::from_static(b"/export"),
            ex_groups: mnt3::groups(vec![
                mnt3::groupnode {
                    gr_name: Bytes::from_static(b"a"),
                },
                mnt3::groupnode {
                    gr_name: Bytes::from_static(b"b"),
                },
            ]),
        },
        mnt3::exportnode {
            ex_dir: Bytes::from_static(b"/"),
            ex_groups: mnt3::groups::default(),
        },
    ]);
    let b = ex.to_bytes();
    assert_eq!(mnt3::exports::from_bytes(b.clone()), Ok(ex));
    #[rustfmt::skip]
    let expect: &[u8] = &[
        0, 0, 0, 1, 0, 0, 0, 7, b'/', b'e', b'x', b'p', b'o', b'r', b't', 0,
        0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0, 0,
        0, 0, 0, 1, 0, 0, 0, 1, b'b', 0, 0, 0,
        0, 0, 0, 0,
        0, 0, 0, 1, 0, 0, 0, 1, b'/', 0, 0, 0,
        0, 0, 0, 0,
        0, 0, 0, 0,
    ];
    assert_eq!(&b[..], expect);
    let ok = mnt3::mountres3::MNT3_OK(mnt3::mountres3_ok {
        fhandle: Bytes::from_static(&[1; 8]),
        auth_flavors: vec![1],
    });
    assert_eq!(mnt3::mountres3::from_bytes(ok.to_bytes()), Ok(ok));
}

#[test]
fn nfs3_readdir_list() {
    let l = nfs3::dirlist3 {
        entries: (0..3)
            .map(|i| nfs3::entry3 {
                fileid: i,
                name: Bytes::from_static(b"n"),
                cookie: i + 1,
            })
            .collect(),
        eof: true,
    };
    assert_eq!(nfs3::dirlist3::from_bytes(l.to_bytes()), Ok(l));
}
