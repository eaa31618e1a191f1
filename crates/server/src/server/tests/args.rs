//! The session-setup arguments and the memory export of the server's unit tests (the
//! integration tests build the same in `tests/common/args.rs`, which the library's
//! unit tests cannot reach without `#[path]`).

use crate::config::{BackendKind, Config, ExportConfig};
use bytes::Bytes;
use txnfs_proto::nfs4::*;

/// One read-write export `/` of a volatile in-memory file system, no grace period
/// unless asked for.
pub fn memory_config(state_dir: &std::path::Path, grace: bool) -> Config {
    Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            prebuilt: None,
        }],
        state_dir: Some(state_dir.to_path_buf()),
        grace,
        ..Config::default()
    }
}

pub fn exchange_id(owner: &[u8]) -> nfs_argop4 {
    nfs_argop4::OP_EXCHANGE_ID(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: [1; 8],
            co_ownerid: Bytes::copy_from_slice(owner),
        },
        eia_flags: 0,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![],
    })
}

/// CREATE_SESSION for the client `e` answered EXCHANGE_ID with; a back channel
/// secured with AUTH_NONE.
pub fn create_session(
    e: &EXCHANGE_ID4resok,
    fore: channel_attrs4,
    back: channel_attrs4,
) -> nfs_argop4 {
    nfs_argop4::OP_CREATE_SESSION(CREATE_SESSION4args {
        csa_clientid: e.eir_clientid,
        csa_sequence: e.eir_sequenceid,
        csa_flags: 0,
        csa_fore_chan_attrs: fore,
        csa_back_chan_attrs: back,
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
    })
}

/// Channel attributes with 1 MiB requests and replies, 64 KiB cached replies.
pub fn channel(max_operations: u32, max_requests: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 64 << 10,
        ca_maxoperations: max_operations,
        ca_maxrequests: max_requests,
        ca_rdma_ird: vec![],
    }
}

/// SEQUENCE in `slot`, which is also the highest slot the client uses.
pub fn sequence(sid: sessionid4, slot: u32, seqid: u32, cachethis: bool) -> nfs_argop4 {
    nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
        sa_sessionid: sid,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: slot,
        sa_cachethis: cachethis,
    })
}
