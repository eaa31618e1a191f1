//! A WRITE larger than the advertised maxwrite (issue 8, item 9): clients such as the
//! Python `nfs4fs` fill their negotiated request size, which is a little larger than
//! maxwrite, so the server writes maxwrite bytes and answers with the short count, as
//! knfsd and Ganesha do, instead of refusing the WRITE with NFS4ERR_INVAL.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_rpc::RpcClient;
use txnfs_server::nfs::*;

/// A session whose fore channel asks for requests as large as the server's records, so
/// that a WRITE of more than maxwrite bytes fits into one request.
async fn big_request_session(addr: std::net::SocketAddr, max_request: u32) -> Session {
    let cl: RpcClient = connect(addr).await;
    let r = call(&cl, vec![exchange_id(b"short-write")]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("EXCHANGE_ID result {:?}", r.resarray)
    };
    let mut fore = channel(1000, 4);
    fore.ca_maxrequestsize = max_request;
    let r = call(&cl, vec![create_session(e, fore, channel(1000, 1))]).await;
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("CREATE_SESSION result {:?}", r.resarray)
    };
    assert!(
        s.csr_fore_chan_attrs.ca_maxrequestsize >= max_request,
        "the server grants requests of {} bytes, the test needs {max_request}",
        s.csr_fore_chan_attrs.ca_maxrequestsize
    );
    reclaim_complete(&cl, s.csr_sessionid).await;
    Session {
        cl,
        clientid: e.eir_clientid,
        sid: s.csr_sessionid,
        seq: 0,
    }
}

/// A pattern that differs at every offset a short write could cut at.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Sends one WRITE of maxwrite + 40 KiB at offset 7 and checks the short count; returns
/// the bytes a READ of the whole file gives back (through the protocol) and the data
/// sent.
async fn write_past_maxwrite(srv: &TestServer) -> (Vec<u8>, Vec<u8>, u32) {
    let max_io = srv.server.cfg.max_io_size;
    let max_request = srv.server.cfg.max_record_size as u32;
    let data = pattern(max_io as usize + (40 << 10));
    let mut s = big_request_session(srv.addr, max_request).await;
    let (sid, fh) = s.open_new_file("big.bin").await;
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: sid.clone(),
                offset: 7,
                stable: stable_how4::FILE_SYNC4,
                data: Bytes::from(data.clone()),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_WRITE(WRITE4res::NFS4_OK(w)) = &r.resarray[2] else {
        panic!("WRITE result {:?}", r.resarray)
    };
    assert_eq!(w.count, max_io, "a short write of exactly maxwrite bytes");
    assert_eq!(w.committed, stable_how4::FILE_SYNC4);

    // Read the file back in maxread pieces: offset 7 + maxwrite bytes, no more.
    let mut back = Vec::new();
    loop {
        let r = s
            .run(vec![
                nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
                nfs_argop4::OP_READ(READ4args {
                    stateid: sid.clone(),
                    offset: back.len() as u64,
                    count: max_io,
                }),
            ])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[2] else {
            panic!("READ result {:?}", r.resarray)
        };
        back.extend_from_slice(&rd.data);
        if rd.eof || rd.data.is_empty() {
            break;
        }
    }
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh }),
            nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    (back, data, max_io)
}

fn expected_file(data: &[u8], max_io: u32) -> Vec<u8> {
    let mut want = vec![0u8; 7];
    want.extend_from_slice(&data[..max_io as usize]);
    want
}

#[tokio::test]
async fn write_larger_than_maxwrite_is_short_memory() {
    let srv = start_memory_server().await;
    let (back, data, max_io) = write_past_maxwrite(&srv).await;
    assert_eq!(back.len(), 7 + max_io as usize);
    assert!(
        back == expected_file(&data, max_io),
        "bytes read back differ"
    );
}

#[tokio::test]
async fn write_larger_than_maxwrite_is_short_local() {
    let (srv, dir) = start_local_server("short-write").await;
    let (back, data, max_io) = write_past_maxwrite(&srv).await;
    let on_disk = std::fs::read(dir.join("big.bin")).expect("file on disk");
    let _ = std::fs::remove_dir_all(&dir);
    let want = expected_file(&data, max_io);
    assert_eq!(on_disk.len(), want.len());
    assert!(on_disk == want, "bytes on disk differ");
    assert!(back == want, "bytes read back differ");
}
