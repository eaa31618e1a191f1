//! The server's use of the state core through `compound::execute` on a ManualClock:
//! lock poisoning is a reported fault, BIND_CONN_TO_SESSION never claims a back
//! channel, client lists are persisted newest-first and read back strictly.

use crate::config::Config;
use crate::nfs::*;
use crate::server::{Server, ServerError};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use txnfs_backend::Creds;
use txnfs_state::clock::{Clock, ManualClock};
use txnfs_state::{ClientList, Effect};
use txnfs_xdr::{Decode, Encode};

#[allow(dead_code)]
mod args;
use args::*;

struct Fixture {
    srv: Arc<Server>,
    clock: Arc<ManualClock>,
    dir: std::path::PathBuf,
}

fn config(dir: &std::path::Path, grace: bool) -> Config {
    Config {
        lease_time: 10,
        ..memory_config(dir, grace)
    }
}

fn fixture(name: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("txnfs-core-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(ManualClock::new());
    let srv = Server::with_clock(config(&dir, false), clock.clone()).unwrap();
    Fixture { srv, clock, dir }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(srv: &Server, conn: u64, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    let args = COMPOUND4args {
        tag: Bytes::from_static(b"t"),
        minorversion: 1,
        argarray: ops,
    }
    .to_bytes();
    let creds = Creds {
        uid: 0,
        gid: 0,
        gids: vec![],
    };
    let reply = crate::compound::execute(srv, creds, conn, args).unwrap();
    COMPOUND4res::from_bytes(reply).unwrap()
}

/// EXCHANGE_ID + CREATE_SESSION; returns the session id.
fn session(srv: &Server, owner: &'static [u8]) -> sessionid4 {
    let r = run(srv, 1, vec![exchange_id(owner)]);
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    let r = run(
        srv,
        1,
        vec![create_session(e, channel(100, 4), channel(100, 4))],
    );
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    s.csr_sessionid
}

#[test]
fn a_poisoned_core_is_rechecked_reported_and_taken_back_into_service() {
    let f = fixture("poison");
    let sid = session(&f.srv, b"victim");
    assert_eq!(
        run(&f.srv, 1, vec![sequence(sid, 0, 1, false)]).status,
        nfsstat4::NFS4_OK
    );
    // A thread panics while holding the core's lock.
    let srv = f.srv.clone();
    let panicked = std::thread::spawn(move || {
        let _held = srv.core.lock().unwrap();
        panic!("deliberate panic while holding the state core");
    })
    .join();
    assert!(panicked.is_err());
    assert!(f.srv.core.is_poisoned());
    assert_eq!(f.srv.core_faults.load(Ordering::Relaxed), 0);

    // The next request finds it, rechecks the core, clears the poison and is served.
    let r = run(&f.srv, 1, vec![sequence(sid, 0, 2, false)]);
    assert_eq!(r.status, nfsstat4::NFS4_OK, "not SERVERFAULT, not DELAY");
    assert_eq!(f.srv.core_faults.load(Ordering::Relaxed), 1);
    assert_eq!(f.srv.core_invariant_failures.load(Ordering::Relaxed), 0);
    assert!(!f.srv.core.is_poisoned());
    assert!(f.srv.core().is_ok());
    assert_eq!(
        f.srv.core_faults.load(Ordering::Relaxed),
        1,
        "reported once"
    );

    // Housekeeping goes on as before: leases still expire.
    f.clock.advance(Duration::from_secs(3 * 10));
    f.srv.tick();
    let counts = f
        .srv
        .core
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .sessions()
        .counts();
    assert_eq!(counts, (0, 0), "the silent client expired");
}

#[test]
fn bind_conn_to_session_answers_per_the_back_channel_setting() {
    let f = fixture("bind");
    let sid = session(&f.srv, b"binder");
    use channel_dir_from_client4 as D;
    use channel_dir_from_server4 as S;
    let (both, back) = if crate::server::OFFER_BACK_CHANNEL {
        (Ok(S::CDFS4_BOTH), Ok(S::CDFS4_BACK))
    } else {
        (Ok(S::CDFS4_FORE), Err(nfsstat4::NFS4ERR_INVAL))
    };
    for (dir, want) in [
        (D::CDFC4_FORE, Ok(S::CDFS4_FORE)),
        (D::CDFC4_FORE_OR_BOTH, both),
        (D::CDFC4_BACK_OR_BOTH, both),
        (D::CDFC4_BACK, back),
    ] {
        let r = run(
            &f.srv,
            9,
            vec![nfs_argop4::OP_BIND_CONN_TO_SESSION(
                BIND_CONN_TO_SESSION4args {
                    bctsa_sessid: sid,
                    bctsa_dir: dir,
                    bctsa_use_conn_in_rdma_mode: false,
                },
            )],
        );
        let got = match &r.resarray[0] {
            nfs_resop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4res::NFS4_OK(ok)) => {
                Ok(ok.bctsr_dir)
            }
            _ => Err(r.status),
        };
        assert_eq!(got, want, "{dir:?}");
    }
    let conns = f.srv.core().unwrap().sessions().connections(&sid);
    assert_eq!(conns, vec![1, 9]);
}

#[test]
fn an_outdated_client_list_is_not_written_over_a_newer_one() {
    let f = fixture("generations");
    let list = |generation, owner: &'static [u8]| {
        Effect::PersistClients(ClientList {
            generation,
            owners: vec![Bytes::from_static(owner)],
            sessions_only: Vec::new(),
        })
    };
    f.srv.apply(vec![list(100, b"newest")]);
    f.srv.apply(vec![list(99, b"older")]);
    assert_eq!(
        f.srv.statedir.load_clients().unwrap(),
        vec![Bytes::from_static(b"newest")]
    );
}

/// A session of client `owner` that says it reclaims nothing and opens (creates) a
/// file `owner`: the client holds state.
fn holds_an_open(srv: &Server, owner: &'static [u8]) -> sessionid4 {
    let sid = session(srv, owner);
    let r = run(srv, 1, vec![sequence(sid, 0, 1, false), reclaim_complete()]);
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let name = std::str::from_utf8(owner).unwrap();
    let r = run(
        srv,
        1,
        vec![
            sequence(sid, 0, 2, false),
            nfs_argop4::OP_PUTROOTFH,
            open_guarded(name, owner),
        ],
    );
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    sid
}

/// Grace that does not punish everyone (ADR 0036): a restart waits only for the
/// clients that held state; with none there is no grace period at all; and once every
/// one of them has reclaimed (RECLAIM_COMPLETE) grace is over, long before its time.
#[test]
fn grace_waits_only_for_clients_that_held_state_and_ends_when_they_reclaimed() {
    let dir = std::env::temp_dir().join(format!("txnfs-core-grace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    struct RemoveDir(std::path::PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = RemoveDir(dir.clone());
    let clock = Arc::new(ManualClock::new());
    let start = || Server::with_clock(config(&dir, true), clock.clone()).unwrap();

    let srv = start();
    session(&srv, b"only-looked");
    drop(srv);
    let srv = start();
    assert!(
        !srv.core().unwrap().in_grace(clock.now()),
        "no client held state: no grace period"
    );
    holds_an_open(&srv, b"held-state");
    session(&srv, b"only-looked-too");
    drop(srv);

    let srv = start();
    assert!(srv.core().unwrap().in_grace(clock.now()));
    assert_eq!(
        srv.statedir.load_clients().unwrap(),
        vec![Bytes::from_static(b"held-state")],
        "only the client that held state is waited for"
    );
    // It comes back and has nothing (more) to reclaim: grace ends at once.
    let sid = session(&srv, b"held-state");
    clock.advance(Duration::from_secs(1));
    let r = run(
        &srv,
        1,
        vec![sequence(sid, 0, 1, false), reclaim_complete()],
    );
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        !srv.core().unwrap().in_grace(clock.now()),
        "grace ends when every client that held state reclaimed (1 s of a 10 s grace)"
    );
}

#[test]
fn a_restart_waits_for_persisted_clients_and_refuses_a_corrupt_list() {
    let dir = std::env::temp_dir().join(format!("txnfs-core-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    struct RemoveDir(std::path::PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = RemoveDir(dir.clone());
    let first = Server::with_clock(config(&dir, false), Arc::new(ManualClock::new())).unwrap();
    holds_an_open(&first, b"before-restart");
    let clock = Arc::new(ManualClock::new());
    // While it runs, the state directory is its own.
    match Server::with_clock(config(&dir, true), clock.clone()) {
        Err(ServerError::StateDirInUse(e)) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("PID {}", std::process::id())),
                "{msg}"
            );
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("two servers on one state directory"),
    }
    assert_eq!(
        Arc::strong_count(&first),
        1,
        "nothing else holds the server"
    );
    drop(first);
    let again = Server::with_clock(config(&dir, true), clock.clone()).unwrap();
    assert!(again.core().unwrap().in_grace(clock.now()));
    clock.advance(Duration::from_secs(10));
    again.tick();
    assert!(
        !again.core().unwrap().in_grace(clock.now()),
        "grace lasts one lease"
    );
    drop(again);

    std::fs::write(dir.join("clients"), "zz\n").unwrap();
    match Server::with_clock(config(&dir, true), clock) {
        Err(ServerError::StateDir { path, err }) => {
            assert!(path.ends_with("clients"), "{path}");
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started with a corrupt client list"),
    }
}

/// Without a runtime (the simulation drives the executor so) no CB_NOTIFY can be sent:
/// a notification that falls due recalls the directory delegation instead, and the
/// recall waits with the other undelivered callbacks; GET_DIR_DELEGATION answers
/// GDD4_UNAVAIL (no back channel is ever up).
#[test]
fn without_a_runtime_a_due_notification_recalls_the_directory_delegation() {
    let f = fixture("dirdeleg");
    let crate::fh::Fh::Obj(root) = f.srv.root_fh() else {
        panic!("the memory export is the root")
    };
    let fileid = root
        .export
        .backend
        .getattr(&txnfs_backend::OpCtx::default(), &root.key)
        .unwrap()
        .fileid;
    let dir = f.srv.state_file_id(&root.export, fileid);
    let holder = 0xdead;
    let g = f
        .srv
        .core()
        .unwrap()
        .grant_dir_delegation(
            f.clock.now(),
            holder,
            dir,
            txnfs_state::deleg::DirParams {
                types: 1 << 3,
                child_attrs: vec![],
                dir_attrs: vec![],
                delay: Duration::ZERO,
            },
            true,
            root.wire.clone(),
        )
        .unwrap();
    let sid = session(&f.srv, b"changer");
    let r = run(
        &f.srv,
        1,
        vec![
            sequence(sid, 0, 1, false),
            nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false }),
        ],
    );
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = run(
        &f.srv,
        1,
        vec![
            sequence(sid, 0, 2, false),
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_CREATE(Box::new(CREATE4args {
                objtype: createtype4::NF4DIR,
                objname: Bytes::from_static(b"x"),
                createattrs: fattr4 {
                    attrmask: vec![],
                    attr_vals: Bytes::new(),
                },
            })),
        ],
    );
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let sent = f.srv.take_undelivered_callbacks();
    assert_eq!(
        sent,
        vec![(
            holder,
            txnfs_state::Callback::Recall {
                stateid: g.stateid,
                fh: root.wire.clone(),
                truncate: false,
            }
        )]
    );
    assert_eq!(f.srv.core().unwrap().delegations().stats().recalled, 1);
    let r = run(
        &f.srv,
        1,
        vec![
            sequence(sid, 0, 3, false),
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GET_DIR_DELEGATION(Box::new(GET_DIR_DELEGATION4args {
                gdda_signal_deleg_avail: false,
                gdda_notification_types: vec![1 << 3],
                gdda_child_attr_delay: nfstime4::default(),
                gdda_dir_attr_delay: nfstime4::default(),
                gdda_child_attributes: vec![],
                gdda_dir_attributes: vec![],
            })),
        ],
    );
    assert_eq!(
        r.resarray[2],
        nfs_resop4::OP_GET_DIR_DELEGATION(GET_DIR_DELEGATION4res::NFS4_OK(
            GET_DIR_DELEGATION4res_non_fatal::GDD4_UNAVAIL(false)
        ))
    );
}
