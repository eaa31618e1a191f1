use super::*;
use crate::attrs::{self, Attributes};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use txnfs_xdr::Encode;

fn sid(n: u8) -> stateid4 {
    stateid4 {
        seqid: 1,
        other: [n; 12],
    }
}

fn read_deleg(n: u8) -> open_delegation4 {
    open_delegation4::OPEN_DELEGATE_READ(open_read_delegation4 {
        stateid: sid(n),
        recall: false,
        permissions: Default::default(),
    })
}

fn write_deleg(n: u8) -> open_delegation4 {
    open_delegation4::OPEN_DELEGATE_WRITE(open_write_delegation4 {
        stateid: sid(n),
        recall: false,
        space_limit: nfs_space_limit4::NFS_LIMIT_SIZE(0),
        permissions: Default::default(),
    })
}

fn attrs(size: u64, change: u64) -> Attributes {
    Attributes {
        kind: Some(crate::FileKind::Regular),
        size: Some(size),
        change: Some(change),
        ..Default::default()
    }
}

#[test]
fn read_delegation_serves_data_and_attributes_within_the_budget() {
    let c = DelegCache::new(true, 400);
    let fh = Bytes::from_static(b"fh1");
    c.open_reply(
        "d/a",
        &fh,
        &read_deleg(1),
        Some(attrs(3, 9)),
        Some(Bytes::from_static(b"abc")),
    );
    assert_eq!(c.read("d/./a"), Some(Bytes::from_static(b"abc")));
    assert_eq!(
        c.cached_attrs("d/a").map(|r| r.ok()),
        Some(Some(attrs(3, 9)))
    );
    // No delegation: nothing cached, whatever the reply carried.
    c.open_reply(
        "d/b",
        &Bytes::from_static(b"fh2"),
        &open_delegation4::OPEN_DELEGATE_NONE,
        Some(attrs(1, 1)),
        Some(Bytes::from_static(b"x")),
    );
    assert_eq!(c.read("d/b"), None);
    // A read delegation does not take writes.
    assert!(!c.buffer_write("d/a", &Bytes::from_static(b"new")));
    // LRU within the budget: 100 bytes per file at most (budget / 4).
    for i in 0..8u8 {
        let fh = Bytes::from(vec![b'f', i]);
        c.open_reply(
            &format!("e/{i}"),
            &fh,
            &read_deleg(10 + i),
            Some(attrs(90, 1)),
            Some(Bytes::from(vec![i; 90])),
        );
    }
    assert!(c.lock().bytes <= 400);
    assert_eq!(c.read("e/7"), Some(Bytes::from(vec![7; 90])));
    assert_eq!(c.read("e/0"), None, "least recently used data evicted");
    assert_eq!(c.held().0, 9, "delegations are kept when data is evicted");
}

#[test]
fn write_delegation_buffers_and_answers_cb_getattr() {
    let c = DelegCache::new(true, 1 << 20);
    let fh = Bytes::from_static(b"w");
    c.open_reply("f", &fh, &write_deleg(2), Some(attrs(5, 100)), None);
    assert!(c.buffer_write("f", &Bytes::from_static(b"0123456789")));
    assert_eq!(c.read("f"), Some(Bytes::from_static(b"0123456789")));
    let a = c.cached_attrs("f").and_then(|r| r.ok()).expect("attrs");
    assert_eq!((a.size, a.change), (Some(10), Some(101)));
    let f = c
        .getattr(&fh, &attrs::bitmap(&[attrs::CHANGE, attrs::SIZE]))
        .expect("answer");
    let back = attrs::decode(&f).expect("decodes");
    assert_eq!((back.size, back.change), (Some(10), Some(101)));
    assert_eq!(c.dirty_files(), vec![fh.clone()]);
    // Unknown handle, or a read delegation: BADHANDLE.
    assert_eq!(
        c.getattr(&Bytes::from_static(b"zz"), &[1 << 4]),
        Err(nfsstat4::NFS4ERR_BADHANDLE)
    );
}

#[test]
fn a_recall_that_overtakes_its_grant_is_remembered() {
    let c = DelegCache::new(true, 1 << 20);
    let fh = Bytes::from_static(b"r");
    assert_eq!(c.recall(&sid(3), &fh, false), nfsstat4::NFS4_OK);
    // No runtime client attached: the grant is dropped, not cached.
    c.open_reply("r", &fh, &read_deleg(3), Some(attrs(1, 1)), None);
    assert_eq!(c.held(), (0, 0));
    assert!(c.lock().early_recalls.is_empty());
}

fn entry(name: &str, fh: &str, size: u64) -> notify_entry4 {
    let mut vals = BytesMut::new();
    // Every bit of needed_entry_bits, in bit order.
    txnfs_xdr::put_u32(&mut vals, 1); // type
    txnfs_xdr::put_u64(&mut vals, 7); // change
    txnfs_xdr::put_u64(&mut vals, size); // size
    txnfs_xdr::put_u64(&mut vals, 1); // fsid
    txnfs_xdr::put_u64(&mut vals, 1);
    txnfs_xdr::put_opaque(&mut vals, fh.as_bytes()); // filehandle
    txnfs_xdr::put_u64(&mut vals, 42); // fileid
    txnfs_xdr::put_u32(&mut vals, 0o644); // mode
    txnfs_xdr::put_u32(&mut vals, 1); // numlinks
    txnfs_xdr::put_opaque(&mut vals, b"0"); // owner
    txnfs_xdr::put_opaque(&mut vals, b"0"); // group
    txnfs_xdr::put_u32(&mut vals, 0); // rawdev
    txnfs_xdr::put_u32(&mut vals, 0);
    txnfs_xdr::put_u64(&mut vals, 0); // space used
    for _ in 0..3 {
        txnfs_xdr::put_i64(&mut vals, 1); // times
        txnfs_xdr::put_u32(&mut vals, 0);
    }
    notify_entry4 {
        ne_file: Bytes::copy_from_slice(name.as_bytes()),
        ne_attrs: fattr4 {
            attrmask: needed_entry_bits(),
            attr_vals: vals.freeze(),
        },
    }
}

fn notify(kind: u32, vals: Bytes) -> notify4 {
    notify4 {
        notify_mask: attrs::bitmap(&[kind]),
        notify_vals: vals,
    }
}

#[test]
fn notifications_keep_a_listing_current_or_drop_it() {
    let c = DelegCache::new(true, 1 << 20);
    let dfh = Bytes::from_static(b"dir");
    let mut listing = BTreeMap::new();
    listing.insert(
        "old".to_string(),
        attrs::decode(&entry("old", "h-old", 1).ne_attrs).expect("attrs"),
    );
    c.dir_granted("d", &dfh, sid(5), true, Some(listing));
    assert_eq!(c.listing("d").map(|l| l.len()), Some(1));
    let add = notify_add4 {
        nad_old_entry: vec![],
        nad_new_entry: entry("new", "h-new", 3),
        nad_new_entry_cookie: vec![],
        nad_prev_entry: vec![],
        nad_last_entry: false,
    };
    let rename = notify_rename4 {
        nrn_old_entry: notify_remove4 {
            nrm_old_entry: notify_entry4 {
                ne_file: Bytes::from_static(b"old"),
                ne_attrs: fattr4::default(),
            },
            nrm_old_entry_cookie: 0,
        },
        nrn_new_entry: notify_add4 {
            nad_new_entry: entry("moved", "h-old", 1),
            ..add.clone()
        },
    };
    let st = c.notify(
        &sid(5),
        &dfh,
        &[
            notify(notify_type4::NOTIFY4_ADD_ENTRY as u32, add.to_bytes()),
            notify(notify_type4::NOTIFY4_RENAME_ENTRY as u32, rename.to_bytes()),
        ],
    );
    assert_eq!(st, nfsstat4::NFS4_OK);
    let names: Vec<String> = c
        .listing("d")
        .expect("kept")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["moved", "new"]);
    // Lookups: a listed name, and a name the delegated listing does not have.
    assert_eq!(
        c.cached_attrs("d/new")
            .and_then(|r| r.ok())
            .and_then(|a| a.size),
        Some(3)
    );
    assert_eq!(
        c.cached_attrs("d/nope")
            .and_then(|r| r.err())
            .and_then(|e| e.status()),
        Some(nfsstat4::NFS4ERR_NOENT)
    );
    // A removal, then an addition without the attributes a listing needs: dropped.
    let rm = notify_remove4 {
        nrm_old_entry: entry("new", "h-new", 3),
        nrm_old_entry_cookie: 0,
    };
    let thin = notify_add4 {
        nad_new_entry: notify_entry4 {
            ne_file: Bytes::from_static(b"thin"),
            ne_attrs: fattr4::default(),
        },
        ..add
    };
    c.notify(
        &sid(5),
        &dfh,
        &[
            notify(notify_type4::NOTIFY4_REMOVE_ENTRY as u32, rm.to_bytes()),
            notify(notify_type4::NOTIFY4_ADD_ENTRY as u32, thin.to_bytes()),
        ],
    );
    assert_eq!(c.listing("d"), None);
    assert_eq!(c.stats().notify_dropped, 1);
    assert_eq!(c.lock().bytes, 0);
    // Another stateid is refused.
    assert_eq!(c.notify(&sid(6), &dfh, &[]), nfsstat4::NFS4ERR_BAD_STATEID);
    // A notification before the grant: the listing that follows is not trusted.
    let d2 = Bytes::from_static(b"dir2");
    c.notify(&sid(7), &d2, &[]);
    c.dir_granted("e", &d2, sid(7), true, Some(BTreeMap::new()));
    assert_eq!(c.listing("e"), None);
    assert!(c.dir_delegated("e"));
}
