//! Copies per payload byte (ADR 0052), held by pointer identity: a 1 MiB READ's data
//! leaves the COMPOUND executor as the very buffer the backend returned (v4.1, v4.0,
//! the slot's reply cache), and a 1 MiB WRITE's data reaches the backend as a slice
//! of the received request. Adding a copy anywhere on those paths fails these tests.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use txnfs_backend::layer::Layer;
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::{Attrs, Backend, Creds, FileKey, OpCtx, Result};
use txnfs_rawclient::{
    create_session, exchange_id, lookup, open_guarded, read, reclaim_complete, sequence,
    write_with, ANON,
};
use txnfs_server::compound::{execute, execute_request, Request};
use txnfs_server::nfs::*;
use txnfs_server::placement::WaitClock;
use txnfs_server::txnspan::TxnProc;
use txnfs_server::{BackendKind, Config, ExportConfig, PrebuiltBackend, Server};
use txnfs_xdr::{Decode, Encode, Gathered};

const MIB: usize = 1 << 20;

/// Where the buffers the backend handed out (READ) and was handed (WRITE) live.
#[derive(Default)]
struct Seen {
    reads: Vec<(usize, usize)>,
    writes: Vec<(usize, usize)>,
}

/// A layer noting the address and length of every read and write buffer.
struct Recorder {
    lower: Arc<dyn Backend>,
    seen: Mutex<Seen>,
}

impl Recorder {
    fn last_read(&self) -> (usize, usize) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        *seen.reads.last().expect("the backend was asked to read")
    }

    fn last_write(&self) -> (usize, usize) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        *seen.writes.last().expect("the backend was asked to write")
    }
}

impl Layer for Recorder {
    fn lower(&self) -> &dyn Backend {
        &*self.lower
    }

    fn read(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        let (data, eof) = self.lower.read(cx, key, offset, count)?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.reads.push((data.as_ptr() as usize, data.len()));
        Ok((data, eof))
    }

    fn write(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.writes.push((data.as_ptr() as usize, data.len()));
        drop(seen);
        self.lower.write(cx, key, offset, data, sync)
    }
}

struct Fixture {
    srv: Arc<Server>,
    rec: Arc<Recorder>,
    dir: std::path::PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(name: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("txnfs-zcopy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rec = Arc::new(Recorder {
        lower: Arc::new(MemoryBackend::new()),
        seen: Mutex::default(),
    });
    let cfg = Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            clients: Vec::new(),
            prebuilt: Some(PrebuiltBackend(rec.clone())),
        }],
        state_dir: Some(dir.clone()),
        grace: false,
        max_io_size: 4 * MIB as u32,
        // Replies of 1 MiB are cached in the slot (the default keeps 64 KiB).
        max_cached_reply: 4 * MIB as u32,
        ..Config::default()
    };
    let srv = Server::new(cfg).expect("server starts");
    Fixture { srv, rec, dir }
}

fn root() -> Creds {
    Creds {
        uid: 0,
        gid: 0,
        gids: vec![],
    }
}

fn args(ops: Vec<nfs_argop4>, minor: u32) -> Bytes {
    COMPOUND4args {
        tag: Bytes::from_static(b"zcopy"),
        minorversion: minor,
        argarray: ops,
    }
    .to_bytes()
}

/// Runs a COMPOUND as the RPC service does: the reply as the parts it is sent in.
fn run_parts(srv: &Server, args: Bytes) -> Gathered {
    let req = Request::decode(args).expect("COMPOUND header decodes");
    execute_request(srv, root(), 1, req, TxnProc::Plain, &WaitClock::default())
}

fn decoded(reply: &Gathered) -> COMPOUND4res {
    COMPOUND4res::from_bytes(reply.to_bytes()).expect("reply decodes")
}

fn run_ok(srv: &Server, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    let reply = execute(srv, root(), 1, args(ops, 1)).expect("COMPOUND header decodes");
    let res = COMPOUND4res::from_bytes(reply).expect("reply decodes");
    assert_eq!(res.status, nfsstat4::NFS4_OK, "{:?}", res.resarray);
    res
}

/// A session whose replies (and cached replies) may hold 4 MiB.
fn session(srv: &Server) -> sessionid4 {
    let r = run_ok(srv, vec![exchange_id(b"zcopy")]);
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    let big = channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 4 << 20,
        ca_maxresponsesize: 4 << 20,
        ca_maxresponsesize_cached: 4 << 20,
        ca_maxoperations: 16,
        ca_maxrequests: 4,
        ca_rdma_ird: vec![],
    };
    let r = run_ok(srv, vec![create_session(e, big.clone(), big)]);
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    let sid = s.csr_sessionid;
    run_ok(srv, vec![sequence(sid, 0, 1, false), reclaim_complete()]);
    sid
}

fn pattern() -> Bytes {
    Bytes::from((0..MIB).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

/// The part of `reply` that starts at `ptr` and is `len` long: the buffer itself.
fn holds_buffer(reply: &Gathered, (ptr, len): (usize, usize)) -> bool {
    reply
        .parts()
        .iter()
        .any(|p| p.as_ptr() as usize == ptr && p.len() == len)
}

fn read_data(res: &COMPOUND4res) -> Bytes {
    match res.resarray.last() {
        Some(nfs_resop4::OP_READ(READ4res::NFS4_OK(ok))) => ok.data.clone(),
        other => panic!("not a READ result: {other:?}"),
    }
}

/// v4.1: WRITE of 1 MiB from the request's own bytes; READ of 1 MiB as the backend's
/// buffer; its retransmission answered from the slot cache with that buffer again.
#[test]
fn one_mib_read_and_write_move_no_payload_byte_in_user_space() {
    let f = fixture("v41");
    let sid = session(&f.srv);
    let data = pattern();

    let request = args(
        vec![
            sequence(sid, 0, 2, false),
            nfs_argop4::OP_PUTROOTFH,
            open_guarded("big", b"owner"),
            write_with(&ANON, 0, stable_how4::UNSTABLE4, data.clone()),
        ],
        1,
    );
    let (start, end) = (
        request.as_ptr() as usize,
        request.as_ptr() as usize + request.len(),
    );
    let reply = run_parts(&f.srv, request.clone());
    assert_eq!(decoded(&reply).status, nfsstat4::NFS4_OK);
    let (ptr, len) = f.rec.last_write();
    assert_eq!(len, MIB);
    assert!(
        ptr >= start && ptr + len <= end,
        "WRITE data reached the backend copied, not as a slice of the request"
    );

    // (cachethis: a reply that changes nothing is kept only when asked, ADR 0003)
    let read_req = args(
        vec![
            sequence(sid, 0, 3, true),
            nfs_argop4::OP_PUTROOTFH,
            lookup("big"),
            read(&ANON, 0, MIB as u32),
        ],
        1,
    );
    let reply = run_parts(&f.srv, read_req.clone());
    let filled = f.rec.last_read();
    assert_eq!(filled.1, MIB);
    assert!(
        holds_buffer(&reply, filled),
        "READ data was copied on its way to the reply: parts {:?}",
        reply.parts().iter().map(Bytes::len).collect::<Vec<_>>()
    );
    assert_eq!(
        read_data(&decoded(&reply)),
        data,
        "the bytes read are those written"
    );

    // A retransmission (same slot, same sequence id): the cache shares the buffer too.
    let reads_before = f
        .rec
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reads
        .len();
    let replay = run_parts(&f.srv, read_req);
    let reads_after = f
        .rec
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reads
        .len();
    assert_eq!(
        reads_before, reads_after,
        "answered from the cache, not run again"
    );
    assert!(replay == reply, "the replay is the reply");
    assert!(
        holds_buffer(&replay, filled),
        "the slot's reply cache copied the READ data"
    );
}

/// v4.0 (no session): the READ data is the backend's buffer too.
#[test]
fn one_mib_read_of_nfsv40_is_the_backends_buffer() {
    let f = fixture("v40");
    let sid = session(&f.srv);
    run_ok(
        &f.srv,
        vec![
            sequence(sid, 0, 2, false),
            nfs_argop4::OP_PUTROOTFH,
            open_guarded("big", b"owner"),
            write_with(&ANON, 0, stable_how4::UNSTABLE4, pattern()),
        ],
    );
    let reply = run_parts(
        &f.srv,
        args(
            vec![
                nfs_argop4::OP_PUTROOTFH,
                lookup("big"),
                read(&ANON, 0, MIB as u32),
            ],
            0,
        ),
    );
    let res = decoded(&reply);
    assert_eq!(res.status, nfsstat4::NFS4_OK, "{:?}", res.resarray);
    let filled = f.rec.last_read();
    assert_eq!(filled.1, MIB);
    assert!(holds_buffer(&reply, filled), "v4.0 READ data was copied");
    assert_eq!(read_data(&res), pattern());
}
