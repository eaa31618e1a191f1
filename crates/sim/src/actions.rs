//! Choosing what a client does next, and building the COMPOUND for it. Names and
//! payloads carry a request number so every effect is attributable to one request.

use crate::client::{Intent, LOCK_OWNERS};
use crate::model::{range_end, LockRec};
use crate::sim::{Sim, Violation, ViolationKind as K};
use crate::wire::{self, Fh, ANON};
use bytes::{BufMut, Bytes, BytesMut};
use txnfs_proto::nfs4::*;

/// The special "current stateid" (RFC 8881 §16.2.3.1.2).
const CURRENT: stateid4 = stateid4 {
    seqid: 1,
    other: [0; 12],
};

fn pick<T: Clone>(sim: &mut Sim, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[sim.rng.index(v.len())].clone())
    }
}

fn req(sim: &mut Sim) -> u64 {
    let n = sim.next_req;
    sim.next_req += 1;
    n
}

/// A payload unique to this request: its number, then seeded bytes.
fn payload(sim: &mut Sim, n: u64) -> Bytes {
    let len = 8 + sim.rng.below(120) as usize;
    let mut b = BytesMut::with_capacity(len);
    b.put_u64(n);
    while b.len() < len {
        b.put_u8(sim.rng.below(256) as u8);
    }
    b.freeze()
}

fn parent_of(sim: &Sim, fh: &Fh) -> Option<(Fh, Bytes)> {
    sim.model
        .obj(fh)
        .map(|o| (o.parent.clone(), o.name.clone()))
}

/// Files this client has open that still exist.
fn my_open_files(sim: &Sim, ci: usize) -> Vec<Fh> {
    sim.clients[ci]
        .opens
        .keys()
        .filter(|f| sim.model.obj(f).is_some_and(|o| o.alive))
        .cloned()
        .collect()
}

fn small_range(sim: &mut Sim) -> (u64, u64) {
    let offset = sim.rng.below(256);
    let length = if sim.rng.chance(100) {
        u64::MAX
    } else {
        1 + sim.rng.below(48)
    };
    (offset, length)
}

/// Send `intent`; with some probability its reply is lost (the client retransmits later).
fn go(sim: &mut Sim, ci: usize, intent: Intent, ops: Vec<nfs_argop4>) -> Result<(), Violation> {
    let lose = sim.rng.chance(sim.mix.lose);
    sim.send(ci, intent, ops, lose)
}

pub fn random_action(sim: &mut Sim, ci: usize) -> Result<(), Violation> {
    if let Some((file, sid)) = sim.clients[ci].dead_stateids.pop() {
        sim.clients[ci].dead_stateids.clear();
        if sim.model.obj(&file).is_some_and(|o| o.alive) {
            return stale_write(sim, ci, file, sid);
        }
    }
    if let Some(r) = deleg_housekeeping(sim, ci) {
        return r;
    }
    let choice = sim.rng.below(100);
    let files = sim.model.live_files();
    let mine = my_open_files(sim, ci);
    match choice {
        0..=9 => open_create(sim, ci),
        10..=14 => match pick(sim, &files) {
            Some(f) if !sim.clients[ci].opens.contains_key(&f) => open_existing(sim, ci, f),
            _ => open_create(sim, ci),
        },
        15..=17 => match pick(sim, &files) {
            Some(f) => deny_probe(sim, ci, f),
            None => open_create(sim, ci),
        },
        18..=37 => match pick(sim, &mine) {
            Some(f) => write(sim, ci, f),
            None => open_create(sim, ci),
        },
        38..=49 => match pick(sim, &files) {
            Some(f) => read(sim, ci, f),
            None => Ok(()),
        },
        50..=53 => {
            let closable: Vec<Fh> = mine
                .into_iter()
                .filter(|f| !sim.clients[ci].holds_locks(f))
                .collect();
            match pick(sim, &closable) {
                Some(f) => {
                    let sid = sim.clients[ci].opens[&f].clone();
                    let ops = vec![
                        wire::putfh(&f),
                        nfs_argop4::OP_CLOSE(CLOSE4args {
                            seqid: 0,
                            open_stateid: sid,
                        }),
                    ];
                    go(sim, ci, Intent::Close { file: f }, ops)
                }
                None => Ok(()),
            }
        }
        54..=65 => match pick(sim, &mine) {
            Some(f) => lock(sim, ci, f),
            None => Ok(()),
        },
        66..=71 => unlock(sim, ci),
        72..=77 => match pick(sim, &files) {
            Some(f) => lockt(sim, ci, f),
            None => Ok(()),
        },
        78..=81 => {
            let dirs = sim.model.live_dirs();
            let dir = pick(sim, &dirs).unwrap_or_else(|| sim.model.root.clone());
            let name = wire::name(&format!("d{}", req(sim)));
            let ops = vec![
                wire::putfh(&dir),
                nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                    objtype: createtype4::NF4DIR,
                    objname: name.clone(),
                    createattrs: wire::empty_fattr(),
                })),
                nfs_argop4::OP_GETFH,
            ];
            go(sim, ci, Intent::Mkdir { dir, name }, ops)
        }
        82..=85 => {
            let objs: Vec<Fh> = sim
                .model
                .objs
                .iter()
                .filter(|o| o.alive)
                .map(|o| o.fh.clone())
                .collect();
            let Some(obj) = pick(sim, &objs) else {
                return Ok(());
            };
            let Some((parent, name)) = parent_of(sim, &obj) else {
                return Ok(());
            };
            let ops = vec![
                wire::putfh(&parent),
                nfs_argop4::OP_REMOVE(REMOVE4args { target: name }),
            ];
            go(sim, ci, Intent::Remove { obj }, ops)
        }
        86..=89 => match pick(sim, &files) {
            Some(f) => rename(sim, ci, f),
            None => Ok(()),
        },
        90..=93 => match pick(sim, &mine) {
            Some(f) => {
                let size = sim.rng.below(300);
                let sid = sim.clients[ci].opens[&f].clone();
                let ops = vec![
                    wire::putfh(&f),
                    nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                        stateid: sid,
                        obj_attributes: wire::size_fattr(size),
                    })),
                ];
                go(sim, ci, Intent::Truncate { file: f, size }, ops)
            }
            None => Ok(()),
        },
        _ => {
            let mut objs = sim.model.live_dirs();
            objs.extend(files);
            let Some(obj) = pick(sim, &objs) else {
                return Ok(());
            };
            let ops = vec![wire::putfh(&obj), wire::getattr_change_size()];
            go(sim, ci, Intent::Getattr { obj }, ops)
        }
    }
}

/// What a client does about its delegations, now and then: free the ones it learned
/// were revoked (FREE_STATEID), find out which after SEQUENCE said some are
/// (TEST_STATEID), or give one back unasked (DELEGRETURN). `None`: nothing this time.
fn deleg_housekeeping(sim: &mut Sim, ci: usize) -> Option<Result<(), Violation>> {
    let c = &sim.clients[ci];
    if !c.revoked.is_empty() && sim.rng.chance(600) {
        let sid = c.revoked[0].clone();
        let ops = vec![wire::free_stateid(&sid)];
        return Some(go(sim, ci, Intent::FreeStateid { sid }, ops));
    }
    let c = &sim.clients[ci];
    if c.saw_revoked_flag && sim.rng.chance(600) {
        let sids: Vec<stateid4> = c.delegs.values().map(|d| d.0.clone()).collect();
        let ops = vec![wire::test_stateid(&sids)];
        return Some(go(sim, ci, Intent::TestStateids { sids }, ops));
    }
    let c = &sim.clients[ci];
    if !c.delegs.is_empty() && sim.rng.chance(40) {
        let held: Vec<(Fh, stateid4)> = c
            .delegs
            .iter()
            .map(|(f, d)| (f.clone(), d.0.clone()))
            .collect();
        let (file, sid) = pick(sim, &held)?;
        return Some(sim.deleg_return(ci, file, sid));
    }
    None
}

/// The share (access, deny) a client's ordinary opens ask for.
const OPEN_BOTH: (u32, u32) = (OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE);

/// PUTFH of `dir`, an OPEN of `name` there by `owner` with the share `(access, deny)`
/// (creating the file if `create`), then `then` on the opened file.
fn open_ops(
    dir: &Fh,
    name: &Bytes,
    owner: &Bytes,
    (access, deny): (u32, u32),
    create: bool,
    then: nfs_argop4,
) -> Vec<nfs_argop4> {
    vec![
        wire::putfh(dir),
        wire::open(name, owner, access, deny, wire::openhow(create)),
        then,
    ]
}

fn open_create(sim: &mut Sim, ci: usize) -> Result<(), Violation> {
    let dirs = sim.model.live_dirs();
    let dir = pick(sim, &dirs).unwrap_or_else(|| sim.model.root.clone());
    let name = wire::name(&format!("f{}", req(sim)));
    let owner = sim.clients[ci].open_owner();
    let ops = open_ops(&dir, &name, &owner, OPEN_BOTH, true, nfs_argop4::OP_GETFH);
    go(sim, ci, Intent::OpenCreate { dir, name }, ops)
}

fn open_existing(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let Some((parent, name)) = parent_of(sim, &file) else {
        return Ok(());
    };
    let owner = sim.clients[ci].open_owner();
    let ops = open_ops(
        &parent,
        &name,
        &owner,
        OPEN_BOTH,
        false,
        nfs_argop4::OP_GETFH,
    );
    go(sim, ci, Intent::Open { file }, ops)
}

/// OPEN for reading by a fresh owner, closed at once: with DENY_BOTH granted exactly
/// when no other owner has the file open; with DENY_NONE (half the time) when no
/// other owner denies reading, which is how clients come to share read delegations.
fn deny_probe(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let Some((parent, name)) = parent_of(sim, &file) else {
        return Ok(());
    };
    let owner = sim.clients[ci].probe_owner();
    let close = nfs_argop4::OP_CLOSE(CLOSE4args {
        seqid: 0,
        open_stateid: CURRENT,
    });
    let deny = if sim.rng.chance(500) {
        OPEN4_SHARE_DENY_BOTH
    } else {
        OPEN4_SHARE_DENY_NONE
    };
    let share = (OPEN4_SHARE_ACCESS_READ, deny);
    let ops = open_ops(&parent, &name, &owner, share, false, close);
    go(sim, ci, Intent::DenyProbe { file, deny }, ops)
}

fn write(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let n = req(sim);
    let data = payload(sim, n);
    let offset = sim.rng.below(256);
    let sync = sim.rng.chance(500);
    let commit = !sync && sim.rng.chance(600);
    // A holder writes with its delegation stateid now and then (with a read
    // delegation's, rarely: OPENMODE).
    let deleg = match sim.clients[ci].delegs.get(&file).cloned() {
        Some((d, true)) if sim.rng.chance(400) => Some(d),
        Some((d, false)) if sim.rng.chance(100) => Some(d),
        _ => None,
    };
    let sid = deleg
        .clone()
        .unwrap_or_else(|| sim.clients[ci].opens[&file].clone());
    let stable = if sync {
        stable_how4::FILE_SYNC4
    } else {
        stable_how4::UNSTABLE4
    };
    let mut ops = vec![
        wire::putfh(&file),
        wire::write_with(&sid, offset, stable, data.clone()),
    ];
    if commit {
        ops.push(nfs_argop4::OP_COMMIT(COMMIT4args {
            offset: 0,
            count: 0,
        }));
    }
    go(
        sim,
        ci,
        Intent::Write {
            file,
            offset,
            data,
            commit,
            deleg,
        },
        ops,
    )
}

fn read(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let offset = sim.rng.below(300);
    let count = 1 + sim.rng.below(200) as u32;
    let deleg = match sim.clients[ci].delegs.get(&file).cloned() {
        Some((d, _)) if sim.rng.chance(400) => Some(d),
        _ => None,
    };
    let sid = deleg
        .clone()
        .or_else(|| sim.clients[ci].opens.get(&file).cloned());
    let anon = sid.is_none();
    let ops = vec![
        wire::putfh(&file),
        wire::read(&sid.unwrap_or(ANON), offset, count),
    ];
    go(
        sim,
        ci,
        Intent::Read {
            file,
            offset,
            count,
            anon,
            deleg,
        },
        ops,
    )
}

fn lock(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let owner = sim.rng.index(LOCK_OWNERS);
    let (offset, length) = small_range(sim);
    let end = range_end(offset, length);
    let write = sim.rng.chance(500);
    let held = sim.clients[ci].locks.get(&(file.clone(), owner)).cloned();
    if held.as_ref().is_some_and(|h| {
        h.ranges
            .iter()
            .any(|r| r.0 < end && offset < range_end(r.0, r.1))
    }) {
        // Keep each owner's ranges disjoint so the model stays a set of grants.
        return Ok(());
    }
    let op = match held.and_then(|h| h.sid) {
        Some(sid) => wire::lock_existing(write, offset, length, &sid),
        None => {
            let open = sim.clients[ci].opens[&file].clone();
            wire::lock_new_owner(
                write,
                offset,
                length,
                &open,
                &sim.clients[ci].lock_owner(owner),
            )
        }
    };
    let intent = Intent::Lock {
        file: file.clone(),
        owner,
        offset,
        length,
        write,
    };
    go(sim, ci, intent, vec![wire::putfh(&file), op])
}

fn unlock(sim: &mut Sim, ci: usize) -> Result<(), Violation> {
    type Held = (Fh, usize, (u64, u64, bool), stateid4);
    let held: Vec<Held> = sim.clients[ci]
        .locks
        .iter()
        .filter(|((f, _), _)| sim.model.obj(f).is_some_and(|o| o.alive))
        .flat_map(|((f, k), h)| {
            h.ranges
                .iter()
                .filter_map(|r| Some((f.clone(), *k, *r, h.sid.clone()?)))
                .collect::<Vec<_>>()
        })
        .collect();
    let Some((file, owner, (offset, length, write), sid)) = pick(sim, &held) else {
        return Ok(());
    };
    let ops = vec![wire::putfh(&file), wire::locku(write, offset, length, &sid)];
    go(
        sim,
        ci,
        Intent::Locku {
            file,
            owner,
            offset,
            length,
            write,
        },
        ops,
    )
}

fn lockt(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    // Test as one of the client's own owners (their own locks never conflict) or as
    // an owner holding nothing.
    let owner = sim.rng.index(LOCK_OWNERS + 1);
    let (offset, length) = small_range(sim);
    let write = sim.rng.chance(500);
    let ops = vec![
        wire::putfh(&file),
        wire::lockt(write, offset, length, &sim.clients[ci].lock_owner(owner)),
    ];
    go(
        sim,
        ci,
        Intent::Lockt {
            file,
            owner,
            offset,
            length,
            write,
        },
        ops,
    )
}

fn rename(sim: &mut Sim, ci: usize, file: Fh) -> Result<(), Violation> {
    let Some((from, _)) = parent_of(sim, &file) else {
        return Ok(());
    };
    let Some((_, old)) = parent_of(sim, &file) else {
        return Ok(());
    };
    let dirs = sim.model.live_dirs();
    let to = pick(sim, &dirs).unwrap_or_else(|| sim.model.root.clone());
    let name = wire::name(&format!("r{}", req(sim)));
    let ops = vec![
        wire::putfh(&from),
        nfs_argop4::OP_SAVEFH,
        wire::putfh(&to),
        nfs_argop4::OP_RENAME(RENAME4args {
            oldname: old,
            newname: name.clone(),
        }),
    ];
    go(
        sim,
        ci,
        Intent::Rename {
            obj: file,
            to_dir: to,
            name,
        },
        ops,
    )
}

/// Invariant 5: after client `dead` expired, another client must be able to take its
/// locks and deny-open its files.
pub fn probe_released(
    sim: &mut Sim,
    dead: usize,
    locks: Vec<LockRec>,
    files: Vec<Fh>,
    delegated: Vec<Fh>,
) -> Result<(), Violation> {
    let others: Vec<usize> = (0..sim.clients.len())
        .filter(|&i| i != dead && sim.clients[i].session.is_some() && !sim.clients[i].expect_dead)
        .collect();
    let Some(ci) = pick(sim, &others) else {
        return Ok(());
    };
    sim.retransmit(ci, true)?;
    if sim.clients[ci].session.is_none() {
        return Ok(());
    }
    for f in files.iter().take(2) {
        if sim.model.obj(f).is_some_and(|o| o.alive) {
            deny_probe(sim, ci, f.clone())?;
        }
    }
    // Its delegations must not hold anyone up either: a conflicting OPEN or WRITE
    // goes ahead without DELAY (the server revokes a courtesy client's delegation at
    // the conflict; the model forgot them, so a DELAY for them fails the run).
    for f in delegated.iter().take(2) {
        if sim.clients[ci].session.is_none() || !sim.model.obj(f).is_some_and(|o| o.alive) {
            continue;
        }
        sim.stats.expired_deleg_probes += 1;
        if sim.clients[ci].opens.contains_key(f) {
            write(sim, ci, f.clone())?;
        } else {
            open_existing(sim, ci, f.clone())?;
        }
    }
    for l in locks.iter().take(2) {
        if !sim.model.obj(&l.file).is_some_and(|o| o.alive) {
            continue;
        }
        if !sim.clients[ci].opens.contains_key(&l.file) {
            open_existing(sim, ci, l.file.clone())?;
            sim.retransmit(ci, true)?;
        }
        if sim.clients[ci].session.is_none() || !sim.clients[ci].opens.contains_key(&l.file) {
            continue;
        }
        let length = if l.end == u64::MAX {
            u64::MAX
        } else {
            l.end - l.start
        };
        let owner = LOCK_OWNERS - 1;
        let mine = sim.clients[ci].locks.get(&(l.file.clone(), owner)).cloned();
        if mine.as_ref().is_some_and(|h| {
            h.ranges
                .iter()
                .any(|r| r.0 < l.end && l.start < range_end(r.0, r.1))
        }) {
            continue;
        }
        let op = match mine.and_then(|h| h.sid) {
            Some(sid) => wire::lock_existing(true, l.start, length, &sid),
            None => {
                let open = sim.clients[ci].opens[&l.file].clone();
                wire::lock_new_owner(
                    true,
                    l.start,
                    length,
                    &open,
                    &sim.clients[ci].lock_owner(owner),
                )
            }
        };
        let intent = Intent::Lock {
            file: l.file.clone(),
            owner,
            offset: l.start,
            length,
            write: true,
        };
        sim.send(ci, intent, vec![wire::putfh(&l.file), op], false)?;
    }
    Ok(())
}

/// End-of-run audit from client `ci`: read every live file whole, and test every lock
/// the model holds from an owner that holds nothing.
pub fn audit(sim: &mut Sim, ci: usize) -> Result<(), Violation> {
    for f in sim.model.live_files() {
        let count = sim.model.obj(&f).map_or(0, |o| o.data.len()) as u32 + 64;
        let ops = vec![wire::putfh(&f), wire::read(&ANON, 0, count)];
        sim.send(
            ci,
            Intent::Read {
                file: f,
                offset: 0,
                count,
                anon: true,
                deleg: None,
            },
            ops,
            false,
        )?;
        if sim.clients[ci].session.is_none() {
            return Err(Violation::new(
                K::SessionLost,
                "the audit client lost its session",
            ));
        }
    }
    let locks = sim.model.locks.clone();
    for l in locks {
        if !sim.model.obj(&l.file).is_some_and(|o| o.alive) {
            continue;
        }
        let length = if l.end == u64::MAX {
            u64::MAX
        } else {
            l.end - l.start
        };
        let owner = LOCK_OWNERS; // holds nothing
        let ops = vec![
            wire::putfh(&l.file),
            wire::lockt(true, l.start, length, &sim.clients[ci].lock_owner(owner)),
        ];
        let intent = Intent::Lockt {
            file: l.file.clone(),
            owner,
            offset: l.start,
            length,
            write: true,
        };
        sim.send(ci, intent, ops, false)?;
    }
    Ok(())
}

/// A WRITE with an open stateid of the client's dead session (invariant 5).
fn stale_write(sim: &mut Sim, ci: usize, file: Fh, sid: stateid4) -> Result<(), Violation> {
    let n = req(sim);
    let data = payload(sim, n);
    let ops = vec![
        wire::putfh(&file),
        wire::write_with(&sid, 0, stable_how4::FILE_SYNC4, data.clone()),
    ];
    let after_restart = sim.clients[ci].dead_by_restart;
    let intent = Intent::StaleWrite {
        file,
        data,
        after_restart,
    };
    go(sim, ci, intent, ops)
}
