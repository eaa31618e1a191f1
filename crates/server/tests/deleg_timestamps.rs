//! Delegated timestamps and the `open_arguments` attribute (RFC 9754, "Extending the
//! Opening of Files in NFSv4.2"): what OPEN takes, the `*_ATTRS_DELEG` delegations
//! granted on OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS over 4.2 (never over 4.1), the
//! holder's SETATTR of `time_deleg_*` (its delegation's stateid only; a read one the
//! access time only; never backwards), and CB_GETATTR asking the holder for its times
//! when another client reads them.

mod common;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::deleg::*;
use common::peer::*;
use common::*;
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

const WANT_TIMESTAMPS: u32 = OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;

/// The file `name` holding "x", made and closed by a client without a back channel.
async fn make_file(o: &mut Session, name: &str) {
    let (sid, _) = o.open_new_file(name).await;
    o.run_ok(vec![
        nfs_argop4::OP_PUTROOTFH,
        lookup(name),
        nfs_argop4::OP_WRITE(WRITE4args {
            stateid: sid.clone(),
            offset: 0,
            stable: stable_how4::FILE_SYNC4,
            data: Bytes::from_static(b"x"),
        }),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: sid,
        }),
    ])
    .await;
}

fn set_time(bit: u32, sec: i64, nsec: u32) -> fattr4 {
    let mut v = BytesMut::new();
    v.put_i64(sec);
    v.put_u32(nsec);
    let mut attrmask = vec![0u32; 3];
    attrmask[(bit / 32) as usize] = 1 << (bit % 32);
    fattr4 {
        attrmask,
        attr_vals: v.freeze(),
    }
}

fn setattr(fh: &Bytes, stateid: &stateid4, attrs: fattr4) -> Vec<nfs_argop4> {
    vec![
        putfh(fh),
        nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
            stateid: stateid.clone(),
            obj_attributes: attrs,
        })),
    ]
}

/// The time_modify (53) of `fh` in a GETATTR reply: (sec, nsec).
fn mtime_of(r: &COMPOUND4res) -> (i64, u32) {
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    let mut v = g.obj_attributes.attr_vals.clone();
    (v.get_i64(), v.get_u32())
}

fn getattr_mtime(fh: &Bytes) -> Vec<nfs_argop4> {
    vec![
        putfh(fh),
        nfs_argop4::OP_GETATTR(GETATTR4args {
            attr_request: vec![0, 1 << (53 - 32)],
        }),
    ]
}

const TIME_DELEG_ACCESS: u32 = 84;
const TIME_DELEG_MODIFY: u32 = 85;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_arguments_say_what_open_takes() {
    let srv = deleg_server(10_000).await;
    let mut h = Holder::with_minor(&srv, b"holder", 2).await;
    let r = h
        .run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![0, 0, 1 << (86 - 64)],
            }),
        ])
        .await;
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(g.obj_attributes.attrmask, vec![0, 0, 1 << 22]);
    let mut v = g.obj_attributes.attr_vals.clone();
    let mut maps = Vec::new();
    for _ in 0..5 {
        assert_eq!(v.get_u32(), 1, "one word per bitmap");
        maps.push(v.get_u32());
    }
    assert!(v.is_empty());
    // share access READ, WRITE, BOTH; every deny; ANY/NO/CANCEL and DELEG_TIMESTAMPS;
    // NULL, PREVIOUS, DELEGATE_CUR, FH, DELEG_CUR_FH; the four create modes.
    assert_eq!(maps, vec![0b1110, 0b1111, 0x0010_0038, 0b11_0111, 0b1111]);
    // A 4.1 COMPOUND has no such attribute: asked, it is left out.
    let mut h41 = Holder::new(&srv, b"holder-41").await;
    let r = h41
        .run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![0, 0, 1 << (86 - 64)],
            }),
        ])
        .await;
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert!(g.obj_attributes.attrmask.iter().all(|w| *w == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_of_delegated_timestamps_keeps_the_files_times() {
    let srv = deleg_server(10_000).await;
    let mut o = Session::new(srv.addr, b"other-client").await;
    for name in ["f", "g", "r"] {
        make_file(&mut o, name).await;
    }
    // Over 4.1 the want is ignored: a plain write delegation.
    let mut h41 = Holder::new(&srv, b"holder-41").await;
    let want_write = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG;
    let (_, d, _) = h41.open("g", want_write | WANT_TIMESTAMPS).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_WRITE(_)),
        "4.1: {d:?}"
    );

    let mut h = Holder::with_minor(&srv, b"holder", 2).await;
    let (osid, d, fh) = h.open("f", want_write | WANT_TIMESTAMPS).await;
    let open_delegation4::OPEN_DELEGATE_WRITE_ATTRS_DELEG(w) = &d else {
        panic!("4.2 with WANT_DELEG_TIMESTAMPS: {d:?}")
    };
    let dsid = w.stateid.clone();

    // Only the delegation's stateid sets the delegated times.
    let r = h
        .run(setattr(
            &fh,
            &osid,
            set_time(TIME_DELEG_MODIFY, 2_000_000_000, 5),
        ))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BAD_STATEID);
    h.run_ok(setattr(
        &fh,
        &dsid,
        set_time(TIME_DELEG_MODIFY, 2_000_000_000, 5),
    ))
    .await;
    assert_eq!(
        mtime_of(&h.run_ok(getattr_mtime(&fh)).await),
        (2_000_000_000, 5)
    );
    // An older time does not move it back.
    h.run_ok(setattr(&fh, &dsid, set_time(TIME_DELEG_MODIFY, 1000, 0)))
        .await;
    assert_eq!(
        mtime_of(&h.run_ok(getattr_mtime(&fh)).await),
        (2_000_000_000, 5)
    );
    // Not the delegated and the plain modify time at once.
    let mut both = set_time(TIME_DELEG_MODIFY, 2_000_000_001, 0);
    both.attrmask[1] = 1 << (54 - 32); // time_modify_set: SET_TO_SERVER_TIME4
    let mut v = BytesMut::new();
    v.put_u32(0);
    v.extend_from_slice(&both.attr_vals);
    both.attr_vals = v.freeze();
    assert_eq!(
        h.run(setattr(&fh, &dsid, both)).await.status,
        nfsstat4::NFS4ERR_INVAL
    );

    // Another client reading the time: the server asks the holder (CB_GETATTR with
    // time_deleg_modify) and answers with the holder's time.
    h.p.getattr_answer = Some((1, u64::MAX));
    h.p.getattr_mtime = Some((2_100_000_000, 7));
    let holder = tokio::spawn(async move {
        let call = h.p.next_call(T).await.expect("a CB_COMPOUND");
        (h, call)
    });
    let r = o.run(getattr_mtime(&fh)).await;
    let (mut h, call) = holder.await.unwrap();
    let cb = CB_COMPOUND4args::from_bytes(call.args).expect("CB args");
    let Some(nfs_cb_argop4::OP_CB_GETATTR(ga)) = cb.argarray.get(1) else {
        panic!("{:?}", cb.argarray)
    };
    assert_eq!(ga.attr_request.get(2).copied(), Some(3 << 20), "{ga:?}");
    assert_eq!(mtime_of(&r), (2_100_000_000, 7));

    // A read delegation with delegated timestamps: the access time only.
    let want_read = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG;
    let (_, d, rfh) = h.open("r", want_read | WANT_TIMESTAMPS).await;
    let open_delegation4::OPEN_DELEGATE_READ_ATTRS_DELEG(rd) = &d else {
        panic!("read with WANT_DELEG_TIMESTAMPS: {d:?}")
    };
    let rsid = rd.stateid.clone();
    assert_eq!(
        h.run(setattr(
            &rfh,
            &rsid,
            set_time(TIME_DELEG_MODIFY, 2_000_000_000, 0)
        ))
        .await
        .status,
        nfsstat4::NFS4ERR_INVAL
    );
    h.run_ok(setattr(
        &rfh,
        &rsid,
        set_time(TIME_DELEG_ACCESS, 2_000_000_000, 0),
    ))
    .await;
    // Another client's delegation stateid is not this one's to use.
    let mut h2 = Holder::with_minor(&srv, b"holder-2", 2).await;
    assert_eq!(
        h2.run(setattr(
            &rfh,
            &rsid,
            set_time(TIME_DELEG_ACCESS, 2_000_000_001, 0)
        ))
        .await
        .status,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
}
