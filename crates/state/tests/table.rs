//! Outcome tests for the state table: share reservations, stateid
//! validation, byte-range locks, FREE_STATEID, client expiry, limits.

use txnfs_state::StateError as E;
use txnfs_state::*;

mod common;
use common::lockt;

const EPOCH: u32 = 0x5eed_0001;
const F: FileId = 100;
const G: FileId = 200;
const C1: ClientId = 1;
const C2: ClientId = 2;
const R: u32 = SHARE_ACCESS_READ;
const W: u32 = SHARE_ACCESS_WRITE;
const RW: u32 = SHARE_ACCESS_BOTH;
const DN: u32 = SHARE_DENY_NONE;
const DR: u32 = SHARE_DENY_READ;
const DW: u32 = SHARE_DENY_WRITE;
const DB: u32 = SHARE_DENY_BOTH;
const READ_LT: LockType = LockType::Read;
const WRITE_LT: LockType = LockType::Write;

fn table() -> StateTable {
    StateTable::new(EPOCH, StateLimits::default())
}

/// The table's counters: open stateids, lock stateids, locked ranges.
fn stats(opens: usize, lock_states: usize, locks: usize) -> StateStats {
    StateStats {
        opens,
        lock_states,
        locks,
    }
}

fn with_seqid(sid: Stateid, seqid: u32) -> Stateid {
    Stateid { seqid, ..sid }
}

fn new_lock(
    file: FileId,
    open: Stateid,
    owner: &[u8],
    lock_type: LockType,
    offset: u64,
    length: u64,
) -> LockRequest {
    let locker = Locker::NewOwner {
        open_stateid: open,
        lock_owner: owner.to_vec(),
    };
    lock_request(file, locker, lock_type, offset, length)
}

/// A new lock-owner's read lock on the one byte at `offset`.
fn read_byte(file: FileId, open: Stateid, owner: &[u8], offset: u64) -> LockRequest {
    new_lock(file, open, owner, READ_LT, offset, 1)
}

fn existing_lock(
    file: FileId,
    sid: Stateid,
    lock_type: LockType,
    offset: u64,
    length: u64,
) -> LockRequest {
    let locker = Locker::Existing { lock_stateid: sid };
    lock_request(file, locker, lock_type, offset, length)
}

fn lock_request(
    file: FileId,
    locker: Locker,
    lock_type: LockType,
    offset: u64,
    length: u64,
) -> LockRequest {
    LockRequest {
        file,
        lock_type,
        offset,
        length,
        locker,
    }
}

fn held(client: ClientId, owner: &[u8], lock_type: LockType, offset: u64, length: u64) -> HeldLock {
    HeldLock {
        owner: LockOwner {
            client,
            owner: owner.to_vec(),
        },
        lock_type,
        offset,
        length,
    }
}

// ---------------------------------------------------------------- share reservations

#[test]
fn deny_write_blocks_writer_and_allows_reader() {
    let mut t = table();
    t.open(C1, b"a", F, R, DW).unwrap();
    // Another client's writer is refused, so is another owner of the same client.
    assert_eq!(t.open(C2, b"b", F, W, DN), Err(E::ShareDenied));
    assert_eq!(t.open(C1, b"b", F, RW, DN), Err(E::ShareDenied));
    // A plain reader is fine.
    t.open(C2, b"b", F, R, DN).unwrap();
    // Other files are unaffected.
    t.open(C2, b"b", G, W, DN).unwrap();
    assert_eq!(t.stats().opens, 3);
}

#[test]
fn two_readers_fine_and_deny_read_refused_while_reader_exists() {
    let mut t = table();
    t.open(C1, b"a", F, R, DN).unwrap();
    t.open(C2, b"b", F, R, DN).unwrap();
    // Denying read is impossible while others read; denying write is fine.
    assert_eq!(t.open(C2, b"c", F, R, DR), Err(E::ShareDenied));
    t.open(C2, b"c", F, R, DW).unwrap();
    // Now nobody else may write.
    assert_eq!(t.open(C1, b"d", F, W, DN), Err(E::ShareDenied));
}

#[test]
fn deny_both_is_exclusive() {
    let mut t = table();
    t.open(C1, b"a", F, RW, DB).unwrap();
    assert_eq!(t.open(C2, b"b", F, R, DN), Err(E::ShareDenied));
    assert_eq!(t.open(C2, b"b", F, W, DN), Err(E::ShareDenied));
}

#[test]
fn upgrade_of_own_open_keeps_other_and_bumps_seqid() {
    let mut t = table();
    let s1 = t.open(C1, b"a", F, R, DW).unwrap();
    assert_eq!(s1.seqid, 1);
    // Own deny-write does not block own write upgrade.
    let s2 = t.open(C1, b"a", F, W, DN).unwrap();
    assert_eq!(s2.other, s1.other);
    assert_eq!(s2.seqid, 2);
    assert_eq!(t.stats().opens, 1);
    // The union is held: write works and deny-write is still in force.
    t.check_io(C1, &s2, F, true).unwrap();
    assert_eq!(t.open(C2, b"b", F, W, DN), Err(E::ShareDenied));
    // Downgrade to the original read/deny-write is a subset.
    let s3 = t.open_downgrade(C1, &s2, F, R, DW).unwrap();
    assert_eq!(s3.seqid, 3);
    assert_eq!(t.check_io(C1, &s3, F, true), Err(E::OpenMode));
}

#[test]
fn failed_upgrade_changes_nothing() {
    let mut t = table();
    let a = t.open(C1, b"a", F, R, DN).unwrap();
    t.open(C2, b"b", F, R, DN).unwrap();
    assert_eq!(t.open(C1, b"a", F, R, DR), Err(E::ShareDenied));
    // Still seqid 1 and still no deny: a third reader gets in.
    t.test_stateid(C1, &a).unwrap();
    t.open(C2, b"c", F, R, DN).unwrap();
}

#[test]
fn open_rejects_bad_share_bits() {
    let mut t = table();
    assert_eq!(t.open(C1, b"a", F, 0, DN), Err(E::Inval));
    assert_eq!(t.open(C1, b"a", F, 4, DN), Err(E::Inval));
    assert_eq!(t.open(C1, b"a", F, R, 4), Err(E::Inval));
    assert_eq!(t.stats(), StateStats::default());
}

#[test]
fn open_downgrade_must_be_subset() {
    let mut t = table();
    let s = t.open(C1, b"a", F, R, DN).unwrap();
    assert_eq!(t.open_downgrade(C1, &s, F, RW, DN), Err(E::Inval));
    assert_eq!(t.open_downgrade(C1, &s, F, R, DW), Err(E::Inval));
    assert_eq!(t.open_downgrade(C1, &s, F, 0, DN), Err(E::Inval));
    // Wrong file, wrong client.
    assert_eq!(t.open_downgrade(C1, &s, G, R, DN), Err(E::BadStateid));
    assert_eq!(t.open_downgrade(C2, &s, F, R, DN), Err(E::BadStateid));
    let s2 = t.open_downgrade(C1, &s, F, R, DN).unwrap();
    assert_eq!(s2.seqid, 2);
    // The old seqid is now old.
    assert_eq!(t.open_downgrade(C1, &s, F, R, DN), Err(E::OldStateid));
}

#[test]
fn downgrade_releases_deny_for_others() {
    let mut t = table();
    let s = t.open(C1, b"a", F, RW, DW).unwrap();
    assert_eq!(t.open(C2, b"b", F, W, DN), Err(E::ShareDenied));
    t.open_downgrade(C1, &s, F, RW, DN).unwrap();
    t.open(C2, b"b", F, W, DN).unwrap();
}

// ---------------------------------------------------------------- open/close seqids

#[test]
fn open_close_seqids() {
    let mut t = table();
    let s1 = t.open(C1, b"a", F, R, DN).unwrap();
    assert_eq!(s1.seqid, 1);
    assert_eq!(&s1.other[..4], &EPOCH.to_be_bytes());
    let s2 = t.open(C1, b"a", F, R, DN).unwrap();
    assert_eq!((s2.seqid, s2.other), (2, s1.other));
    let fin = t.close(C1, &s2, F).unwrap();
    assert_eq!((fin.seqid, fin.other), (3, s1.other));
    assert_eq!(t.stats(), StateStats::default());
    assert!(!t.client_has_state(C1));
    // Gone: every form of it is now BAD_STATEID.
    assert_eq!(t.test_stateid(C1, &fin), Err(E::BadStateid));
    assert_eq!(t.close(C1, &fin, F), Err(E::BadStateid));
    // Re-opening gets a new `other` (the counter is never reused).
    let s3 = t.open(C1, b"a", F, R, DN).unwrap();
    assert_ne!(s3.other, s1.other);
    assert_eq!(s3.seqid, 1);
}

#[test]
fn close_with_old_seqid_is_old_and_seqid_zero_is_current() {
    let mut t = table();
    let s1 = t.open(C1, b"a", F, R, DN).unwrap();
    let s2 = t.open(C1, b"a", F, R, DN).unwrap();
    assert_eq!(t.close(C1, &s1, F), Err(E::OldStateid));
    assert_eq!(t.close(C1, &with_seqid(s2, 3), F), Err(E::BadStateid));
    assert_eq!(t.close(C1, &s2, G), Err(E::BadStateid));
    let fin = t.close(C1, &with_seqid(s2, 0), F).unwrap();
    assert_eq!(fin.seqid, 3);
}

#[test]
fn close_of_one_owner_keeps_others() {
    let mut t = table();
    let a = t.open(C1, b"a", F, R, DW).unwrap();
    let b = t.open(C1, b"b", F, R, DN).unwrap();
    t.close(C1, &a, F).unwrap();
    t.check_io(C1, &b, F, false).unwrap();
    // a's deny-write went away with it.
    t.open(C2, b"c", F, W, DN).unwrap();
    assert!(t.client_has_state(C1));
}

// ---------------------------------------------------------------- stateid validation

#[test]
fn old_bad_stale_stateids() {
    let mut t = table();
    let s1 = t.open(C1, b"a", F, RW, DN).unwrap();
    let s2 = t.open(C1, b"a", F, RW, DN).unwrap();
    assert_eq!(t.check_io(C1, &s1, F, false), Err(E::OldStateid));
    assert_eq!(t.test_stateid(C1, &s1), Err(E::OldStateid));
    t.check_io(C1, &s2, F, true).unwrap();
    t.check_io(C1, &with_seqid(s2, 0), F, true).unwrap();
    // A seqid from the future is bad.
    assert_eq!(
        t.check_io(C1, &with_seqid(s2, 3), F, false),
        Err(E::BadStateid)
    );
    assert_eq!(
        t.check_io(C1, &with_seqid(s2, u32::MAX), F, false),
        Err(E::OldStateid)
    );
    // Unknown counter under our epoch.
    let mut unknown = s2;
    unknown.other[11] ^= 0x55;
    assert_eq!(t.check_io(C1, &unknown, F, false), Err(E::BadStateid));
    assert_eq!(t.test_stateid(C1, &unknown), Err(E::BadStateid));
    // Another client's stateid, another file.
    assert_eq!(t.check_io(C2, &s2, F, false), Err(E::BadStateid));
    assert_eq!(t.test_stateid(C2, &s2), Err(E::BadStateid));
    assert_eq!(t.check_io(C1, &s2, G, false), Err(E::BadStateid));
    // From a previous server instance.
    let restarted = StateTable::new(EPOCH + 1, StateLimits::default());
    assert_eq!(restarted.check_io(C1, &s2, F, false), Err(E::StaleStateid));
    assert_eq!(restarted.test_stateid(C1, &s2), Err(E::StaleStateid));
}

#[test]
fn special_stateids() {
    let mut t = table();
    // No opens: anonymous I/O and bypass reads are fine.
    t.check_io(C1, &Stateid::ANONYMOUS, F, false).unwrap();
    t.check_io(C1, &Stateid::ANONYMOUS, F, true).unwrap();
    t.check_io(C1, &Stateid::READ_BYPASS, F, false).unwrap();
    t.check_io(C1, &Stateid::READ_BYPASS, F, true).unwrap();
    // The other special forms are never valid here.
    for s in [
        Stateid::CURRENT,
        Stateid::INVALID,
        Stateid {
            seqid: 7,
            other: [0; 12],
        },
        Stateid {
            seqid: 0,
            other: [0xff; 12],
        },
    ] {
        assert_eq!(t.check_io(C1, &s, F, false), Err(E::BadStateid), "{s:?}");
    }
    assert!(Stateid::CURRENT.is_current());
    assert!(Stateid::ANONYMOUS.is_special() && Stateid::READ_BYPASS.is_special());
    for s in [
        Stateid::ANONYMOUS,
        Stateid::READ_BYPASS,
        Stateid::CURRENT,
        Stateid::INVALID,
    ] {
        assert_eq!(t.test_stateid(C1, &s), Err(E::BadStateid));
        assert_eq!(t.free_stateid(C1, &s), Err(E::BadStateid));
    }

    // Deny-write: anonymous and bypass writes are LOCKED, reads fine.
    let s = t.open(C2, b"w", F, R, DW).unwrap();
    assert_eq!(t.check_io(C1, &Stateid::ANONYMOUS, F, true), Err(E::Locked));
    assert_eq!(
        t.check_io(C1, &Stateid::READ_BYPASS, F, true),
        Err(E::Locked)
    );
    t.check_io(C1, &Stateid::ANONYMOUS, F, false).unwrap();
    t.check_io(C1, &Stateid::ANONYMOUS, G, true).unwrap();
    // Deny-read: anonymous reads are LOCKED, bypass reads are not.
    t.close(C2, &s, F).unwrap();
    t.open(C2, b"r", F, W, DR).unwrap();
    assert_eq!(
        t.check_io(C1, &Stateid::ANONYMOUS, F, false),
        Err(E::Locked)
    );
    t.check_io(C1, &Stateid::READ_BYPASS, F, false).unwrap();
    t.check_io(C1, &Stateid::ANONYMOUS, F, true).unwrap();
}

#[test]
fn io_access_modes() {
    let mut t = table();
    let ro = t.open(C1, b"ro", F, R, DN).unwrap();
    let wo = t.open(C1, b"wo", F, W, DN).unwrap();
    t.check_io(C1, &ro, F, false).unwrap();
    assert_eq!(t.check_io(C1, &ro, F, true), Err(E::OpenMode));
    // READ through a write-only open is allowed (Linux client behaviour).
    t.check_io(C1, &wo, F, false).unwrap();
    t.check_io(C1, &wo, F, true).unwrap();
    // Lock stateids inherit their open's access.
    let l = t.lock(C1, new_lock(F, ro, b"lk", READ_LT, 0, 10)).unwrap();
    t.check_io(C1, &l, F, false).unwrap();
    assert_eq!(t.check_io(C1, &l, F, true), Err(E::OpenMode));
    assert_eq!(t.check_io(C1, &l, G, false), Err(E::BadStateid));
    assert_eq!(t.check_io(C2, &l, F, false), Err(E::BadStateid));
}

// ---------------------------------------------------------------- locks

#[test]
fn lock_stateid_lifecycle_and_seqids() {
    let mut t = table();
    let o = t.open(C1, b"a", F, RW, DN).unwrap();
    let l1 = t.lock(C1, new_lock(F, o, b"L", WRITE_LT, 0, 10)).unwrap();
    assert_eq!(l1.seqid, 1);
    assert_ne!(l1.other, o.other);
    assert_eq!(&l1.other[..4], &EPOCH.to_be_bytes());
    let l2 = t.lock(C1, existing_lock(F, l1, READ_LT, 20, 10)).unwrap();
    assert_eq!((l2.seqid, l2.other), (2, l1.other));
    // The open stateid's seqid is not affected by LOCK.
    t.test_stateid(C1, &o).unwrap();
    // Old lock seqid.
    assert_eq!(
        t.lock(C1, existing_lock(F, l1, READ_LT, 40, 1)),
        Err(E::OldStateid)
    );
    // new_lock_owner = TRUE for an owner that already has a lock stateid: reused.
    let l3 = t.lock(C1, read_byte(F, o, b"L", 40)).unwrap();
    assert_eq!((l3.seqid, l3.other), (3, l1.other));
    assert_eq!(t.stats(), stats(1, 1, 3));
    let l4 = t.locku(C1, &l3, F, 0, u64::MAX).unwrap();
    assert_eq!((l4.seqid, l4.other), (4, l1.other));
    // Still valid with no locks (RFC 8881 §8.2.4).
    t.test_stateid(C1, &l4).unwrap();
    assert_eq!(t.stats(), stats(1, 1, 0));
}

#[test]
fn lock_argument_errors() {
    let mut t = table();
    let ro = t.open(C1, b"a", F, R, DN).unwrap();
    let rw = t.open(C1, b"b", F, RW, DN).unwrap();
    assert_eq!(
        t.lock(C1, new_lock(F, ro, b"L", READ_LT, 0, 0)),
        Err(E::Inval)
    );
    assert_eq!(t.lock(C1, read_byte(F, ro, b"L", u64::MAX)), Err(E::Inval));
    assert_eq!(
        t.lock(C1, new_lock(F, ro, b"L", READ_LT, 10, u64::MAX - 5)),
        Err(E::Inval)
    );
    // Write lock through a read-only open.
    assert_eq!(
        t.lock(C1, new_lock(F, ro, b"L", WRITE_LT, 0, 1)),
        Err(E::OpenMode)
    );
    // Open stateid of another file / client.
    assert_eq!(t.lock(C1, read_byte(G, ro, b"L", 0)), Err(E::BadStateid));
    assert_eq!(t.lock(C2, read_byte(F, ro, b"L", 0)), Err(E::BadStateid));
    // An open stateid where a lock stateid is expected, and vice versa.
    assert_eq!(
        t.lock(C1, existing_lock(F, rw, READ_LT, 0, 1)),
        Err(E::BadStateid)
    );
    let l = t.lock(C1, new_lock(F, rw, b"L", WRITE_LT, 0, 1)).unwrap();
    assert_eq!(t.lock(C1, read_byte(F, l, b"M", 5)), Err(E::BadStateid));
    assert_eq!(t.locku(C1, &rw, F, 0, 1), Err(E::BadStateid));
    assert_eq!(t.locku(C1, &l, F, 0, 0), Err(E::Inval));
    assert_eq!(t.locku(C1, &l, G, 0, 1), Err(E::BadStateid));
    assert_eq!(t.lockt(C1, lockt(b"x", F, READ_LT, 3, 0)), Err(E::Inval));
    // Nothing leaked from the failures.
    assert_eq!(t.stats(), stats(2, 1, 1));
}

#[test]
fn lock_conflicts_across_owners_and_clients() {
    let mut t = table();
    let o1 = t.open(C1, b"o1", F, RW, DN).unwrap();
    let o2 = t.open(C2, b"o2", F, RW, DN).unwrap();
    let a = t
        .lock(C1, new_lock(F, o1, b"A", WRITE_LT, 100, 50))
        .unwrap();
    let denied = |offset, length, lock_type, client, owner: &[u8]| {
        Err(E::Denied(LockDenied {
            offset,
            length,
            lock_type,
            owner: LockOwner {
                client,
                owner: owner.to_vec(),
            },
        }))
    };
    // Another owner of the same client conflicts.
    assert_eq!(
        t.lock(C1, read_byte(F, o1, b"B", 149)),
        denied(100, 50, WRITE_LT, C1, b"A")
    );
    // The same owner bytes on another client are another owner.
    assert_eq!(
        t.lock(C2, new_lock(F, o2, b"A", READ_LT, 0, u64::MAX)),
        denied(100, 50, WRITE_LT, C1, b"A")
    );
    // Denied LOCKs with a new lock-owner created nothing.
    assert_eq!(t.stats().lock_states, 1);
    // Adjacent ranges are fine.
    let b = t
        .lock(C2, new_lock(F, o2, b"B", WRITE_LT, 150, 10))
        .unwrap();
    t.lock(C2, existing_lock(F, b, WRITE_LT, 0, 100)).unwrap();
    // Read locks share.
    t.locku(C1, &a, F, 100, 50).unwrap();
    let r1 = t
        .lock(C1, new_lock(F, o1, b"R1", READ_LT, 200, u64::MAX))
        .unwrap();
    let r2 = t
        .lock(C2, new_lock(F, o2, b"R2", READ_LT, 300, 10))
        .unwrap();
    // A write lock over someone else's read lock is refused, reporting the
    // to-EOF length.
    assert_eq!(
        t.lock(C2, existing_lock(F, with_seqid(r2, 0), WRITE_LT, 300, 10)),
        denied(200, u64::MAX, READ_LT, C1, b"R1")
    );
    // Upgrade of own read lock without others is fine.
    t.locku(C1, &r1, F, 0, u64::MAX).unwrap();
    t.lock(C2, existing_lock(F, with_seqid(r2, 0), WRITE_LT, 300, 10))
        .unwrap();
    // Other files are independent.
    let og = t.open(C1, b"o1", G, RW, DN).unwrap();
    t.lock(C1, new_lock(G, og, b"A", WRITE_LT, 0, u64::MAX))
        .unwrap();
}

#[test]
fn lockt_reports_conflicts() {
    let mut t = table();
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    t.lock(C1, new_lock(F, o, b"A", READ_LT, 10, 10)).unwrap();
    // Read vs read: fine; write vs read: denied; own locks never conflict.
    t.lockt(C2, lockt(b"X", F, READ_LT, 0, u64::MAX)).unwrap();
    match t.lockt(C2, lockt(b"X", F, WRITE_LT, 19, 5)) {
        Err(E::Denied(d)) => {
            assert_eq!((d.offset, d.length, d.lock_type), (10, 10, READ_LT));
            assert_eq!(
                d.owner,
                LockOwner {
                    client: C1,
                    owner: b"A".to_vec()
                }
            );
        }
        other => panic!("{other:?}"),
    }
    t.lockt(C1, lockt(b"A", F, WRITE_LT, 0, u64::MAX)).unwrap();
    t.lockt(C2, lockt(b"X", F, WRITE_LT, 20, 5)).unwrap();
    t.lockt(C2, lockt(b"X", F, WRITE_LT, 0, 10)).unwrap();
    t.lockt(C2, lockt(b"X", G, WRITE_LT, 0, u64::MAX)).unwrap();
    // LOCKT creates no state.
    assert_eq!(t.stats(), stats(1, 1, 1));
}

#[test]
fn same_owner_merge_split_upgrade_downgrade() {
    let mut t = table();
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    let l = t.lock(C1, new_lock(F, o, b"A", READ_LT, 0, 100)).unwrap();
    // A write lock over part of the read lock splits it.
    let l = t.lock(C1, existing_lock(F, l, WRITE_LT, 40, 20)).unwrap();
    assert_eq!(
        t.locks(F),
        vec![
            held(C1, b"A", READ_LT, 0, 40),
            held(C1, b"A", WRITE_LT, 40, 20),
            held(C1, b"A", READ_LT, 60, 40)
        ]
    );
    assert_eq!(t.stats().locks, 3);
    // Downgrading it back merges everything into one range.
    let l = t.lock(C1, existing_lock(F, l, READ_LT, 40, 20)).unwrap();
    assert_eq!(t.locks(F), vec![held(C1, b"A", READ_LT, 0, 100)]);
    // Adjacent and overlapping same-type locks merge; to EOF.
    let l = t.lock(C1, existing_lock(F, l, READ_LT, 100, 10)).unwrap();
    let l = t
        .lock(C1, existing_lock(F, l, READ_LT, 105, u64::MAX))
        .unwrap();
    assert_eq!(t.locks(F), vec![held(C1, b"A", READ_LT, 0, u64::MAX)]);
    // Upgrade the whole thing.
    let l = t
        .lock(C1, existing_lock(F, l, WRITE_LT, 0, u64::MAX))
        .unwrap();
    assert_eq!(t.locks(F), vec![held(C1, b"A", WRITE_LT, 0, u64::MAX)]);
    // A read lock in the middle of a write lock splits it into three.
    t.lock(C1, existing_lock(F, l, READ_LT, 10, 10)).unwrap();
    assert_eq!(
        t.locks(F),
        vec![
            held(C1, b"A", WRITE_LT, 0, 10),
            held(C1, b"A", READ_LT, 10, 10),
            held(C1, b"A", WRITE_LT, 20, u64::MAX)
        ]
    );
}

#[test]
fn locku_partial() {
    let mut t = table();
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    let l = t.lock(C1, new_lock(F, o, b"A", WRITE_LT, 0, 100)).unwrap();
    // Punch a hole.
    let l = t.locku(C1, &l, F, 10, 10).unwrap();
    assert_eq!(
        t.locks(F),
        vec![
            held(C1, b"A", WRITE_LT, 0, 10),
            held(C1, b"A", WRITE_LT, 20, 80)
        ]
    );
    // Another owner can lock the hole, not beyond.
    let o2 = t.open(C2, b"o", F, RW, DN).unwrap();
    t.lock(C2, new_lock(F, o2, b"B", WRITE_LT, 10, 10)).unwrap();
    assert!(matches!(
        t.lock(C2, new_lock(F, o2, b"C", WRITE_LT, 10, 11)),
        Err(E::Denied(_))
    ));
    // Unlock over the tail and beyond; unlocking unlocked ranges is fine.
    let l = t.locku(C1, &l, F, 50, u64::MAX).unwrap();
    let l = t.locku(C1, &l, F, 1000, 5).unwrap();
    assert_eq!(l.seqid, 4);
    assert_eq!(
        t.locks(F),
        vec![
            held(C1, b"A", WRITE_LT, 0, 10),
            held(C1, b"A", WRITE_LT, 20, 30),
            held(C2, b"B", WRITE_LT, 10, 10)
        ]
    );
}

#[test]
fn close_with_locks_held() {
    let mut t = table();
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    let l = t.lock(C1, read_byte(F, o, b"A", 0)).unwrap();
    assert_eq!(t.close(C1, &o, F), Err(E::LocksHeld));
    t.check_io(C1, &o, F, true).unwrap();
    let l = t.locku(C1, &l, F, 0, 1).unwrap();
    let fin = t.close(C1, &o, F).unwrap();
    assert_eq!(fin.seqid, 2);
    // The lock stateid (without locks) went away with its open.
    assert_eq!(t.test_stateid(C1, &l), Err(E::BadStateid));
    assert_eq!(t.stats(), StateStats::default());
    assert!(!t.client_has_state(C1));
}

#[test]
fn free_stateid() {
    let mut t = table();
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    let l = t.lock(C1, new_lock(F, o, b"A", WRITE_LT, 0, 10)).unwrap();
    assert_eq!(t.free_stateid(C1, &o), Err(E::LocksHeld));
    assert_eq!(t.free_stateid(C1, &l), Err(E::LocksHeld));
    assert_eq!(t.free_stateid(C2, &l), Err(E::BadStateid));
    let l2 = t.locku(C1, &l, F, 0, 10).unwrap();
    assert_eq!(t.free_stateid(C1, &l), Err(E::OldStateid));
    t.free_stateid(C1, &l2).unwrap();
    assert_eq!(t.test_stateid(C1, &l2), Err(E::BadStateid));
    assert_eq!(t.free_stateid(C1, &l2), Err(E::BadStateid));
    assert_eq!(t.stats(), stats(1, 0, 0));
    // The lock-owner can start over with a new lock stateid.
    let l3 = t.lock(C1, new_lock(F, o, b"A", WRITE_LT, 0, 10)).unwrap();
    assert_ne!(l3.other, l.other);
    assert_eq!(l3.seqid, 1);
    // FREE_STATEID never frees an open.
    assert_eq!(t.free_stateid(C1, &o), Err(E::LocksHeld));
}

#[test]
fn expire_client_frees_everything() {
    let mut t = table();
    let o1 = t.open(C1, b"o", F, RW, DW).unwrap();
    let og = t.open(C1, b"o", G, R, DN).unwrap();
    let l1 = t
        .lock(C1, new_lock(F, o1, b"A", WRITE_LT, 0, u64::MAX))
        .unwrap();
    t.lock(C1, read_byte(F, o1, b"B", 0)).unwrap_err();
    t.lock(C1, read_byte(G, og, b"A", 0)).unwrap();
    let o2 = t.open(C2, b"o", F, R, DN).unwrap();
    assert!(matches!(
        t.lock(C2, read_byte(F, o2, b"X", 5)),
        Err(E::Denied(_))
    ));
    assert_eq!(t.open(C2, b"w", F, W, DN), Err(E::ShareDenied));
    assert!(t.client_has_state(C1));

    assert_eq!(t.expire_client(C1), 4);
    assert!(!t.client_has_state(C1));
    assert_eq!(t.expire_client(C1), 0);
    for s in [o1, og, l1] {
        assert_eq!(t.test_stateid(C1, &s), Err(E::BadStateid));
    }
    // The other client's locks and opens now succeed.
    t.lock(C2, read_byte(F, o2, b"X", 5)).unwrap();
    t.open(C2, b"w", F, W, DN).unwrap();
    assert_eq!(t.stats(), stats(2, 1, 1));
    assert!(t.locks(G).is_empty());
    assert_eq!(t.expire_client(C2), 3);
    assert_eq!(t.stats(), StateStats::default());
}

// ---------------------------------------------------------------- limits

fn limits() -> StateLimits {
    StateLimits {
        max_open_owners_per_client: 2,
        max_lock_owners_per_client: 2,
        max_opens: 4,
        max_lock_states: 3,
        max_locks_per_file: 3,
        max_owner_len: 8,
    }
}

#[test]
fn limit_open_owners_per_client() {
    let mut t = StateTable::new(EPOCH, limits());
    t.open(C1, b"a", F, R, DN).unwrap();
    t.open(C1, b"b", F, R, DN).unwrap();
    assert_eq!(t.open(C1, b"c", F, R, DN), Err(E::Resource));
    // Known owners may open other files; other clients are unaffected.
    let ag = t.open(C1, b"a", G, R, DN).unwrap();
    assert_eq!(t.open(C2, b"c", F, R, DN).map(|_| ()), Ok(()));
    // Closing the last open of an owner frees its slot only if it was its last.
    t.close(C1, &ag, G).unwrap();
    assert_eq!(t.open(C1, b"c", F, R, DN), Err(E::Resource));
    assert_eq!(t.open(C1, b"a", F, R, DN).map(|s| s.seqid), Ok(2));
}

#[test]
fn limit_opens_and_owner_len() {
    let mut t = StateTable::new(EPOCH, limits());
    for f in 0..4 {
        t.open(C1 + f, b"a", F, R, DN).unwrap();
    }
    assert_eq!(t.open(C1, b"a", G, R, DN), Err(E::Resource));
    // Upgrades need no new state.
    t.open(C1, b"a", F, RW, DN).unwrap();
    assert_eq!(t.open(C1, b"123456789", F, R, DN), Err(E::Inval));
    t.expire_client(C1);
    t.open(C1, b"12345678", G, R, DN).unwrap();
}

#[test]
fn limit_lock_states_and_lock_owners() {
    let mut t = StateTable::new(EPOCH, limits());
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    t.lock(C1, read_byte(F, o, b"A", 0)).unwrap();
    t.lock(C1, read_byte(F, o, b"B", 0)).unwrap();
    // Third lock-owner for C1.
    assert_eq!(t.lock(C1, read_byte(F, o, b"C", 0)), Err(E::Resource));
    // Same owner on another file is fine (owner count unchanged).
    let og = t.open(C1, b"o", G, RW, DN).unwrap();
    t.lock(C1, read_byte(G, og, b"A", 0)).unwrap();
    // Fourth lock stateid server-wide.
    let o2 = t.open(C2, b"o", F, RW, DN).unwrap();
    assert_eq!(t.lock(C2, read_byte(F, o2, b"A", 0)), Err(E::Resource));
    assert_eq!(t.lock(C1, read_byte(F, o, b"123456789", 0)), Err(E::Inval));
    assert_eq!(t.stats(), stats(3, 3, 3));
}

#[test]
fn limit_locks_per_file() {
    let mut t = StateTable::new(EPOCH, limits());
    let o = t.open(C1, b"o", F, RW, DN).unwrap();
    let l = t.lock(C1, new_lock(F, o, b"A", WRITE_LT, 0, 100)).unwrap();
    let l = t.lock(C1, existing_lock(F, l, READ_LT, 10, 10)).unwrap();
    assert_eq!(t.stats().locks, 3);
    // A fourth range is refused, whether from LOCK or from a LOCKU split.
    assert_eq!(
        t.lock(C1, existing_lock(F, l, READ_LT, 50, 10)),
        Err(E::Resource)
    );
    assert_eq!(t.locku(C1, &l, F, 50, 10), Err(E::Resource));
    // Merging locks are fine at the limit, and so are shrinking unlocks.
    let l = t.lock(C1, existing_lock(F, l, WRITE_LT, 10, 10)).unwrap();
    assert_eq!(t.stats().locks, 1);
    let l = t.locku(C1, &l, F, 50, 10).unwrap();
    let l = t.locku(C1, &l, F, 70, 10).unwrap();
    assert_eq!(t.stats().locks, 3);
    t.locku(C1, &l, F, 0, 60).unwrap();
    assert_eq!(t.stats().locks, 2);
    // Locks of another owner count too.
    let o2 = t.open(C2, b"o", F, RW, DN).unwrap();
    t.lock(C2, read_byte(F, o2, b"B", 200)).unwrap();
    assert_eq!(t.lock(C2, read_byte(F, o2, b"B", 300)), Err(E::Resource));
    // Another file has its own budget.
    let og = t.open(C2, b"o", G, RW, DN).unwrap();
    t.lock(C2, read_byte(G, og, b"B", 300)).unwrap();
}

#[test]
fn many_opens_on_one_file_expire_quickly() {
    let mut t = table();
    let start = std::time::Instant::now();
    for c in 1..=8u64 {
        for o in 0..4000u32 {
            let s = t.open(c, &o.to_be_bytes(), F, R, DN).unwrap();
            if o % 8 == 0 {
                t.lock(
                    c,
                    new_lock(F, s, &o.to_be_bytes(), READ_LT, u64::from(o), 1),
                )
                .unwrap();
            }
        }
    }
    assert_eq!(t.stats(), stats(32_000, 4_000, 4_000));
    for c in 1..=8u64 {
        assert_eq!(t.expire_client(c), 4_500);
    }
    assert_eq!(t.stats(), StateStats::default());
    // Generous bound for debug builds on a loaded machine: quadratic
    // behaviour would take minutes.
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}
