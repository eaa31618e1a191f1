//! Model-based property tests.
//!
//! Byte-range locks: a per-byte model over bytes 0..64 plus one cell
//! standing for [64, EOF) must agree with the table for random sequences of
//! LOCK / LOCKU / LOCKT / FREE_STATEID / client expiry by three lock-owners
//! (two on one client, one on another), including conflicts.
//!
//! Share reservations: a model of (access, deny) per open-owner must agree
//! with the table for random OPEN / OPEN_DOWNGRADE / CLOSE sequences.

use proptest::prelude::*;
use std::collections::HashMap;
use txnfs_state::*;

mod common;
use common::lockt;

const FILE: FileId = 9;
/// Cells 0..64 are bytes; cell 64 is [64, u64::MAX].
const CELLS: usize = 65;
const OWNERS: usize = 3;

fn owner_client(o: usize) -> ClientId {
    if o < 2 {
        1
    } else {
        2
    }
}

fn owner_bytes(o: usize) -> Vec<u8> {
    vec![b'L', o as u8]
}

#[derive(Clone, Debug)]
enum Op {
    Lock {
        owner: usize,
        write: bool,
        offset: u64,
        length: u64,
        zero_seqid: bool,
    },
    Unlock {
        owner: usize,
        offset: u64,
        length: u64,
    },
    Test {
        owner: usize,
        write: bool,
        offset: u64,
        length: u64,
    },
    Free {
        owner: usize,
    },
    Expire {
        client: ClientId,
    },
}

/// (offset, length) with either offset + length <= 64 or length = to EOF.
fn range() -> impl Strategy<Value = (u64, u64)> {
    (0u64..=64, 1u64..=64, prop::bool::weighted(0.2)).prop_map(|(off, len, eof)| {
        if eof || off == 64 {
            (off, u64::MAX)
        } else {
            (off, 1 + (len - 1) % (64 - off))
        }
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..OWNERS, any::<bool>(), range(), prop::bool::weighted(0.2))
            .prop_map(|(owner, write, (offset, length), zero_seqid)| Op::Lock { owner, write, offset, length, zero_seqid }),
        3 => (0..OWNERS, range()).prop_map(|(owner, (offset, length))| Op::Unlock { owner, offset, length }),
        2 => (0..OWNERS, any::<bool>(), range()).prop_map(|(owner, write, (offset, length))| Op::Test { owner, write, offset, length }),
        1 => (0..OWNERS).prop_map(|owner| Op::Free { owner }),
        1 => prop_oneof![Just(1u64), Just(2u64)].prop_map(|client| Op::Expire { client }),
    ]
}

fn cells(offset: u64, length: u64) -> std::ops::Range<usize> {
    let start = offset as usize;
    if length == u64::MAX {
        start..CELLS
    } else {
        let end = (offset + length) as usize;
        assert!(
            end <= 64,
            "finite range beyond the model: {offset}+{length}"
        );
        start..end
    }
}

type Model = [[Option<LockType>; OWNERS]; CELLS];

fn conflicts(model: &Model, me: usize, write: bool, offset: u64, length: u64) -> bool {
    cells(offset, length).any(|c| {
        (0..OWNERS).any(|o| o != me && model[c][o].is_some_and(|t| write || t == LockType::Write))
    })
}

fn owner_index(owner: &LockOwner) -> usize {
    (0..OWNERS)
        .find(|&o| owner_client(o) == owner.client && owner_bytes(o) == owner.owner)
        .expect("unknown owner in the table")
}

/// A reported conflict must be a real lock of another owner, overlapping
/// the request, of a conflicting type.
fn check_denied(model: &Model, me: usize, write: bool, offset: u64, length: u64, d: &LockDenied) {
    let o = owner_index(&d.owner);
    assert_ne!(o, me, "denied by own lock");
    assert!(
        write || d.lock_type == LockType::Write,
        "read-read conflict reported"
    );
    let theirs: Vec<usize> = cells(d.offset, d.length).collect();
    for &c in &theirs {
        assert_eq!(
            model[c][o],
            Some(d.lock_type),
            "reported lock not held in the model"
        );
    }
    let mine = cells(offset, length);
    assert!(
        theirs.iter().any(|c| mine.contains(c)),
        "reported lock does not overlap"
    );
}

fn lock_type_for(write: bool) -> LockType {
    if write {
        LockType::Write
    } else {
        LockType::Read
    }
}

/// When the model says the request conflicts, the table must have answered
/// DENIED naming a holder the model agrees with. Returns whether the model
/// saw a conflict (the caller checks the success path otherwise).
fn denied_as_modelled<T: std::fmt::Debug>(
    model: &Model,
    owner: usize,
    write: bool,
    offset: u64,
    length: u64,
    res: &Result<T, StateError>,
) -> bool {
    if !conflicts(model, owner, write, offset, length) {
        return false;
    }
    match res {
        Err(StateError::Denied(d)) => check_denied(model, owner, write, offset, length, d),
        other => panic!("expected DENIED, got {other:?}"),
    }
    true
}

/// The table's locks must equal the model, in canonical form.
fn check_same(t: &StateTable, model: &Model) {
    let locks = t.locks(FILE);
    let mut seen: Model = [[None; OWNERS]; CELLS];
    let mut per_owner: HashMap<usize, Vec<&HeldLock>> = HashMap::new();
    for l in &locks {
        let o = owner_index(&l.owner);
        for c in cells(l.offset, l.length) {
            assert!(
                seen[c][o].is_none(),
                "overlapping ranges of one owner: {locks:?}"
            );
            seen[c][o] = Some(l.lock_type);
        }
        per_owner.entry(o).or_default().push(l);
    }
    assert_eq!(&seen, model, "table {locks:?}");
    // Canonical: sorted, same-type neighbours never touch.
    for ranges in per_owner.values() {
        for w in ranges.windows(2) {
            assert!(w[0].offset < w[1].offset);
            let end = w[0].offset + w[0].length;
            assert!(
                !(end == w[1].offset && w[0].lock_type == w[1].lock_type),
                "unmerged: {ranges:?}"
            );
        }
    }
    assert_eq!(t.stats().locks, locks.len());
}

struct Harness {
    t: StateTable,
    model: Model,
    opens: HashMap<ClientId, Stateid>,
    lock_sids: [Option<Stateid>; OWNERS],
}

impl Harness {
    fn new() -> Self {
        let mut h = Harness {
            t: StateTable::new(3, StateLimits::default()),
            model: [[None; OWNERS]; CELLS],
            opens: HashMap::new(),
            lock_sids: [None; OWNERS],
        };
        h.reopen(1);
        h.reopen(2);
        h
    }

    fn reopen(&mut self, client: ClientId) {
        let sid = self
            .t
            .open(
                client,
                b"open-owner",
                FILE,
                SHARE_ACCESS_BOTH,
                SHARE_DENY_NONE,
            )
            .expect("open");
        self.opens.insert(client, sid);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Lock {
                owner,
                write,
                offset,
                length,
                zero_seqid,
            } => {
                let client = owner_client(owner);
                let lock_type = lock_type_for(write);
                let locker = match self.lock_sids[owner] {
                    None => Locker::NewOwner {
                        open_stateid: self.opens[&client],
                        lock_owner: owner_bytes(owner),
                    },
                    Some(sid) => Locker::Existing {
                        lock_stateid: if zero_seqid {
                            Stateid { seqid: 0, ..sid }
                        } else {
                            sid
                        },
                    },
                };
                let res = self.t.lock(
                    client,
                    LockRequest {
                        file: FILE,
                        lock_type,
                        offset,
                        length,
                        locker,
                    },
                );
                if !denied_as_modelled(&self.model, owner, write, offset, length, &res) {
                    let sid = res.expect("lock should succeed");
                    match self.lock_sids[owner] {
                        None => assert_eq!(sid.seqid, 1),
                        Some(prev) => {
                            assert_eq!((sid.other, sid.seqid), (prev.other, prev.seqid + 1))
                        }
                    }
                    self.lock_sids[owner] = Some(sid);
                    for c in cells(offset, length) {
                        self.model[c][owner] = Some(lock_type);
                    }
                }
            }
            Op::Unlock {
                owner,
                offset,
                length,
            } => {
                let Some(prev) = self.lock_sids[owner] else {
                    return;
                };
                let sid = self
                    .t
                    .locku(owner_client(owner), &prev, FILE, offset, length)
                    .expect("locku");
                assert_eq!((sid.other, sid.seqid), (prev.other, prev.seqid + 1));
                self.lock_sids[owner] = Some(sid);
                for c in cells(offset, length) {
                    self.model[c][owner] = None;
                }
            }
            Op::Test {
                owner,
                write,
                offset,
                length,
            } => {
                let lock_type = lock_type_for(write);
                let res = self.t.lockt(
                    owner_client(owner),
                    lockt(&owner_bytes(owner), FILE, lock_type, offset, length),
                );
                if !denied_as_modelled(&self.model, owner, write, offset, length, &res) {
                    assert_eq!(res, Ok(()));
                }
            }
            Op::Free { owner } => {
                let Some(sid) = self.lock_sids[owner] else {
                    return;
                };
                let holds = (0..CELLS).any(|c| self.model[c][owner].is_some());
                let res = self.t.free_stateid(owner_client(owner), &sid);
                if holds {
                    assert_eq!(res, Err(StateError::LocksHeld));
                } else {
                    assert_eq!(res, Ok(()));
                    assert_eq!(
                        self.t.test_stateid(owner_client(owner), &sid),
                        Err(StateError::BadStateid)
                    );
                    self.lock_sids[owner] = None;
                }
            }
            Op::Expire { client } => {
                let states = 1
                    + (0..OWNERS)
                        .filter(|&o| owner_client(o) == client && self.lock_sids[o].is_some())
                        .count();
                assert_eq!(self.t.expire_client(client), states);
                assert!(!self.t.client_has_state(client));
                for o in (0..OWNERS).filter(|&o| owner_client(o) == client) {
                    if let Some(sid) = self.lock_sids[o].take() {
                        assert_eq!(
                            self.t.test_stateid(client, &sid),
                            Err(StateError::BadStateid)
                        );
                    }
                    for c in 0..CELLS {
                        self.model[c][o] = None;
                    }
                }
                self.reopen(client);
            }
        }
        check_same(&self.t, &self.model);
        let lock_states = self.lock_sids.iter().filter(|s| s.is_some()).count();
        assert_eq!(
            self.t.stats(),
            StateStats {
                opens: 2,
                lock_states,
                locks: self.t.locks(FILE).len()
            }
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn byte_range_locks_agree_with_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op);
        }
        // Closing needs every lock released; afterwards the table is empty.
        for client in [1u64, 2] {
            let open = h.opens[&client];
            let holds = (0..OWNERS).filter(|&o| owner_client(o) == client).any(|o| (0..CELLS).any(|c| h.model[c][o].is_some()));
            let res = h.t.close(client, &open, FILE);
            if holds {
                prop_assert_eq!(res, Err(StateError::LocksHeld));
                for o in (0..OWNERS).filter(|&o| owner_client(o) == client) {
                    if let Some(sid) = h.lock_sids[o] {
                        h.t.locku(client, &Stateid { seqid: 0, ..sid }, FILE, 0, u64::MAX).expect("locku all");
                    }
                }
                h.t.close(client, &open, FILE).expect("close after unlock");
            } else {
                prop_assert!(res.is_ok());
            }
        }
        prop_assert_eq!(h.t.stats(), StateStats::default());
        prop_assert!(!h.t.client_has_state(1) && !h.t.client_has_state(2));
    }
}

// ---------------------------------------------------------------- share model

#[derive(Clone, Debug)]
enum ShareOp {
    Open { who: usize, access: u32, deny: u32 },
    Downgrade { who: usize, access: u32, deny: u32 },
    Close { who: usize },
    Io { who: Option<usize>, write: bool },
}

/// Four open-owners: two per client.
fn who_client(w: usize) -> ClientId {
    (w / 2) as u64 + 1
}

fn share_op() -> impl Strategy<Value = ShareOp> {
    prop_oneof![
        4 => (0..4usize, 1u32..=3, 0u32..=3).prop_map(|(who, access, deny)| ShareOp::Open { who, access, deny }),
        2 => (0..4usize, 1u32..=3, 0u32..=3).prop_map(|(who, access, deny)| ShareOp::Downgrade { who, access, deny }),
        2 => (0..4usize).prop_map(|who| ShareOp::Close { who }),
        2 => (prop::option::of(0..4usize), any::<bool>()).prop_map(|(who, write)| ShareOp::Io { who, write }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn share_reservations_agree_with_model(ops in prop::collection::vec(share_op(), 1..60)) {
        let mut t = StateTable::new(11, StateLimits::default());
        // who -> (stateid, access, deny)
        let mut model: HashMap<usize, (Stateid, u32, u32)> = HashMap::new();
        for op in &ops {
            match *op {
                ShareOp::Open { who, access, deny } => {
                    let (na, nd) = model.get(&who).map_or((access, deny), |&(_, a, d)| (a | access, d | deny));
                    let conflict = model.iter().any(|(&w, &(_, a, d))| w != who && (d & na != 0 || a & nd != 0));
                    let res = t.open(who_client(who), &[who as u8], FILE, access, deny);
                    if conflict {
                        prop_assert_eq!(res, Err(StateError::ShareDenied));
                    } else {
                        let sid = res.expect("open");
                        if let Some(&(prev, _, _)) = model.get(&who) {
                            prop_assert_eq!((sid.other, sid.seqid), (prev.other, prev.seqid + 1));
                        } else {
                            prop_assert_eq!(sid.seqid, 1);
                        }
                        model.insert(who, (sid, na, nd));
                    }
                }
                ShareOp::Downgrade { who, access, deny } => {
                    let Some(&(sid, a, d)) = model.get(&who) else { continue };
                    let res = t.open_downgrade(who_client(who), &sid, FILE, access, deny);
                    if access & !a != 0 || deny & !d != 0 {
                        prop_assert_eq!(res, Err(StateError::Inval));
                    } else {
                        let new = res.expect("downgrade");
                        prop_assert_eq!(new.seqid, sid.seqid + 1);
                        model.insert(who, (new, access, deny));
                    }
                }
                ShareOp::Close { who } => {
                    let Some((sid, _, _)) = model.remove(&who) else { continue };
                    let fin = t.close(who_client(who), &sid, FILE).expect("close");
                    prop_assert_eq!(fin.seqid, sid.seqid + 1);
                    prop_assert_eq!(t.test_stateid(who_client(who), &sid), Err(StateError::BadStateid));
                }
                ShareOp::Io { who: None, write } => {
                    let bit = if write { SHARE_DENY_WRITE } else { SHARE_DENY_READ };
                    let denied = model.values().any(|&(_, _, d)| d & bit != 0);
                    let res = t.check_io(1, &Stateid::ANONYMOUS, FILE, write);
                    prop_assert_eq!(res, if denied { Err(StateError::Locked) } else { Ok(()) });
                }
                ShareOp::Io { who: Some(who), write } => {
                    let Some(&(sid, a, _)) = model.get(&who) else { continue };
                    let res = t.check_io(who_client(who), &sid, FILE, write);
                    let ok = !write || a & SHARE_ACCESS_WRITE != 0;
                    prop_assert_eq!(res, if ok { Ok(()) } else { Err(StateError::OpenMode) });
                }
            }
            prop_assert_eq!(t.stats().opens, model.len());
        }
    }
}
