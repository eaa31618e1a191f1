//! Directory notifications leaving the server (RFC 8881 §10.9, §20.4; ADR 0019): the
//! CB_NOTIFY batches the state core queued for a directory delegation, sent after the
//! delay its holder asked for; on a failure the delegation is recalled, and revoked if
//! it is not back within `Config::recall_wait`. Also the attribute-change notices of
//! an object (CHANGE_CHILD_ATTRS, CHANGE_DIR_ATTRS), queued for the ops
//! (`crate::ops::notify`) and for finished asynchronous copies (`crate::offload`).

use std::sync::Arc;

use bytes::Bytes;
use txnfs_backend::{Attrs, FileKey, OpCtx};
use txnfs_state::deleg::{Notice, NoticeBatch, NotifyTarget};
use txnfs_state::ClientId;
use txnfs_xdr::Encode;

use crate::callback::{cb_compound, CallbackFailure};
use crate::export::Export;
use crate::nfs::*;
use crate::recall::Recall;
use crate::statecore::{stateid_to_wire, CoreAccess};

/// Encoded bytes of the `notify4` list of one CB_NOTIFY at most. The negotiated
/// back-channel request size is not recorded (ADR 0016), so this stays well
/// inside the smallest a client asks for: the Linux client's is one page, and the RPC
/// and CB_SEQUENCE headers, the stateid and the file handle take under 400 bytes.
const MAX_CB_NOTIFY_BYTES: usize = 2 << 10;

/// Encodes the attributes a mask asks for of an object (its key, the mask, the
/// attributes already read): the server's attribute encoding.
pub type EncodeAttrs<'a> = dyn Fn(&FileKey, &[u32], &Attrs) -> Option<fattr4> + 'a;

/// The attributes of the object `key` of `export` changed by `client` (`None`: not
/// by a client of a session): queue CHANGE_CHILD_ATTRS for the other clients'
/// delegations of directories it is an entry of, CHANGE_DIR_ATTRS for their
/// delegations of it, each with the attributes the holder asked for (`encode`
/// encodes a mask of them). A queued notice of the same object and name is
/// replaced. `cx` reads the attributes, `now` dates the notices.
pub fn attrs_changed(
    core: &dyn CoreAccess,
    cx: &OpCtx,
    client: Option<ClientId>,
    now: std::time::Instant,
    export: &Arc<Export>,
    key: &FileKey,
    encode: &EncodeAttrs<'_>,
) {
    // Only directory delegations hear of attribute changes: file delegations alone
    // (a write delegation per file written is common) must not cost a GETATTR here.
    let any = core
        .core()
        .map(|core| core.delegations().has_dir_delegations())
        .unwrap_or(false);
    if !any {
        return;
    }
    let Ok(attrs) = export.backend.getattr(cx, key) else {
        return;
    };
    let file = txnfs_state::file_id(export.id, attrs.fileid);
    let targets = match core.core() {
        Ok(core) => core.dir_attr_targets(client, file),
        Err(_) => return,
    };
    if targets.is_empty() {
        return;
    }
    let notices = targets
        .into_iter()
        .map(|t| {
            let ne_attrs = if t.attrs.is_empty() {
                None
            } else {
                encode(key, &t.attrs, &attrs)
            };
            let body = notify_attr4 {
                na_changed_entry: notify_entry4 {
                    ne_file: t.name.clone(),
                    ne_attrs: ne_attrs.unwrap_or_else(no_attrs),
                },
            }
            .to_bytes();
            let coalesce = Some((file, t.name));
            (
                t.id,
                Notice {
                    kind: t.kind,
                    body,
                    coalesce,
                },
            )
        })
        .collect();
    if let Ok(mut core) = core.core() {
        core.queue_dir_notices(now, notices);
    }
}

/// The `notify_remove4` of `name`. Its READDIR cookie is not known without reading
/// the directory, so it is 0 (never a cookie READDIR returns): holders find the entry
/// by name.
pub(crate) fn remove_entry(name: &[u8]) -> notify_remove4 {
    notify_remove4 {
        nrm_old_entry: notify_entry4 {
            ne_file: Bytes::copy_from_slice(name),
            ne_attrs: no_attrs(),
        },
        nrm_old_entry_cookie: 0,
    }
}

pub(crate) fn no_attrs() -> fattr4 {
    fattr4 {
        attrmask: Vec::new(),
        attr_vals: Bytes::new(),
    }
}

/// The `notify4` list of a batch: one `notify4` per notification, its mask the one
/// type bit, its value the encoded `notify_*4` (RFC 8881 §20.4.1).
pub fn notify4_list(notices: &[Notice]) -> Vec<notify4> {
    notices
        .iter()
        .map(|n| {
            let mut mask = vec![0u32; (n.kind / 32 + 1) as usize];
            mask[(n.kind / 32) as usize] = 1 << (n.kind % 32);
            notify4 {
                notify_mask: mask,
                notify_vals: n.body.clone(),
            }
        })
        .collect()
}

/// The core queued notifications for directory delegation `id`, and no runtime can
/// send them (the simulation): the delegation is recalled instead.
pub fn cannot_send(core: &dyn CoreAccess, now: std::time::Instant, id: u64) {
    if let Ok(mut core) = core.core() {
        core.recall_dir_delegation(now, id);
    }
}

/// Send directory delegation `id`'s queue (of `client`), batch after batch. On the
/// first failure the delegation is recalled; if it is not back after the recall wait,
/// it is revoked. The server spawns this once the holder's batching delay is over.
pub async fn flush(srv: Recall<'_>, client: ClientId, id: u64) {
    loop {
        let batch = match srv.core.core() {
            Ok(mut core) => core.take_dir_notices(id, MAX_CB_NOTIFY_BYTES),
            Err(_) => return,
        };
        let Some(batch) = batch else {
            return;
        };
        let more = batch.more;
        if let Err(e) = send(srv, &batch).await {
            tracing::info!(
                client = format_args!("{client:#x}"),
                "CB_NOTIFY failed ({e}): recalling the directory delegation"
            );
            let started = match srv.core.core() {
                Ok(mut core) => core.recall_dir_delegation(srv.clock.now(), id),
                Err(_) => false,
            };
            if started {
                tokio::time::sleep(srv.cfg.recall_wait()).await;
                if let Ok(mut core) = srv.core.core() {
                    core.revoke_delegations(&[id], txnfs_state::RevokeReason::Timeout);
                }
            }
            return;
        }
        if !more {
            return;
        }
    }
}

/// One CB_NOTIFY of batch `b`.
async fn send(srv: Recall<'_>, b: &NoticeBatch) -> Result<(), CallbackFailure> {
    let s = srv
        .callbacks
        .session_of(b.client)
        .ok_or(CallbackFailure::NoBackChannel)?;
    let op = nfs_cb_argop4::OP_CB_NOTIFY(CB_NOTIFY4args {
        cna_stateid: stateid_to_wire(&b.stateid),
        cna_fh: b.fh.clone(),
        cna_changes: notify4_list(&b.notices),
    });
    let r = cb_compound(&s, vec![op], srv.cfg.callback_timeout()).await;
    s.observe(&r);
    match r?.into_iter().next() {
        Some(nfs_cb_resop4::OP_CB_NOTIFY(CB_NOTIFY4res { cnr_status }))
            if cnr_status != nfsstat4::NFS4_OK =>
        {
            Err(CallbackFailure::Status(cnr_status))
        }
        _ => Ok(()),
    }
}

/// One notice of `kind` per target, each encoded by `build` for that target (its
/// attribute masks): what an NFS change (`crate::ops::notify`) and an outside change
/// (`crate::dirwatches`) queue. Encoding reads attributes: call it outside the core's
/// lock.
pub fn notices_for(
    targets: &[NotifyTarget],
    kind: u32,
    build: impl Fn(&NotifyTarget) -> Bytes,
) -> Vec<(u64, Notice)> {
    targets
        .iter()
        .map(|t| {
            let notice = Notice {
                kind,
                body: build(t),
                coalesce: None,
            };
            (t.id, notice)
        })
        .collect()
}
