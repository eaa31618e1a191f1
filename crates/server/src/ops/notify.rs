//! Directory notifications (RFC 8881 §10.9, §20.4; ADR 0019): every namespace change
//! another client makes in a delegated directory becomes a `notify4` queued in the
//! state core for each holder, batched for the delay the holder asked for (at most
//! `txnfs_state::deleg::dir::MAX_BATCH_DELAY`) and sent as one CB_NOTIFY. A
//! notification that cannot be delivered recalls the directory delegation, and a
//! holder that does not return it within `Config::recall_wait` loses it.
//!
//! The ops call [`before`] ahead of the change (another client's directory delegation
//! that would not be told of it is recalled and the request held until it comes back,
//! `crate::recall`) and one of [`added`], [`removed`], [`renamed`] after it; those
//! also report the directory's attribute change. Changes of an object's attributes
//! (WRITE, SETATTR, a link count) call [`attrs_changed`]: CHANGE_CHILD_ATTRS for the
//! delegated directories it is an entry of, CHANGE_DIR_ATTRS if it is a delegated
//! directory itself. Sending the batches is `crate::dirnotify`'s.

use std::sync::Arc;

use bytes::Bytes;
use txnfs_backend::{Attrs, FileKey};
use txnfs_state::deleg::dir::notify_type;
use txnfs_state::deleg::{EntryUpdate, NotifyTarget};
use txnfs_state::{Access, FileId};
use txnfs_xdr::Encode;

use crate::cstate::Compound;
use crate::dirnotify::{no_attrs, remove_entry};
use crate::export::Export;
use crate::fh::ObjFh;
use crate::nfs::*;

/// The state id of the directory `dir` (attributes `dattrs`).
fn dir_id(c: &Compound, dir: &ObjFh, dattrs: &Attrs) -> FileId {
    c.srv.state_file_id(&dir.export, dattrs.fileid)
}

/// Before a change of `notify_type4` `kind` to the directory `dir`: wait until no
/// other client holds a directory delegation on it that would not be notified of the
/// change (such delegations are recalled; see `Server::clear_delegations`).
pub(crate) fn before(c: &Compound, dir: &ObjFh, dattrs: &Attrs, kind: u32) -> Result<(), nfsstat4> {
    if c.srv.core()?.delegations().is_empty() {
        return Ok(());
    }
    c.srv.clear_delegations(
        c.now,
        c.client,
        dir_id(c, dir, dattrs),
        Access::DirChange(kind),
        c.waited,
    )
}

/// Whether any delegation exists (the cheap test that skips extra lookups).
pub(crate) fn any(c: &Compound) -> bool {
    c.srv
        .core()
        .map(|core| !core.delegations().is_empty())
        .unwrap_or(false)
}

/// Queue one notification of `kind` for every other client's directory delegation on
/// `dir` that asked for it; `build` encodes it for a target (its attribute masks).
/// `updates` keeps the entries the delegations track up to date. Then the directory's
/// own attributes changed.
fn queue(
    c: &Compound,
    dir: &ObjFh,
    dattrs: &Attrs,
    kind: u32,
    updates: &[EntryUpdate],
    build: impl Fn(&NotifyTarget) -> Bytes,
) {
    let file = dir_id(c, dir, dattrs);
    let Ok(mut core) = c.srv.core() else {
        return;
    };
    if core.delegations().is_empty() {
        return;
    }
    let targets = core.dir_notify_targets(c.now, c.client, file, kind, updates);
    // Encoding reads attributes: not under the core's lock.
    drop(core);
    if !targets.is_empty() {
        let notices = crate::dirnotify::notices_for(&targets, kind, build);
        if let Ok(mut core) = c.srv.core() {
            core.queue_dir_notices(c.now, notices);
        }
    }
    attrs_changed(c, &dir.export, &dir.key);
}

/// The attributes of the object `key` changed (by the current client): queue
/// CHANGE_CHILD_ATTRS for the other clients' delegations of directories it is an
/// entry of, CHANGE_DIR_ATTRS for their delegations of it, each with the attributes
/// the holder asked for. A queued notice of the same object and name is replaced.
pub(crate) fn attrs_changed(c: &Compound, export: &Arc<Export>, key: &FileKey) {
    c.srv
        .attrs_changed_by(c.scope.ctx(), c.client, c.now, export, key);
}

/// An object named in a notification: its key and attributes (`None`: unknown).
pub(crate) type Obj<'a> = Option<(&'a FileKey, &'a Attrs)>;

/// `notify_entry4` of `name` with the attributes `mask` asks for of the object `obj`
/// (none when the object is unknown or its attributes cannot be encoded: the name is
/// what the holder needs).
fn entry(c: &Compound, dir: &ObjFh, name: &[u8], obj: Obj, mask: &[u32]) -> notify_entry4 {
    let attrs = match obj {
        Some((key, attrs)) if !mask.is_empty() => {
            let fh = c.srv.obj_fh(&dir.export, key.clone());
            c.srv.fattr(c.scope.ctx(), &fh, mask, Some(attrs), 1).ok()
        }
        _ => None,
    };
    notify_entry4 {
        ne_file: Bytes::copy_from_slice(name),
        ne_attrs: attrs.unwrap_or_else(no_attrs),
    }
}

/// The update of the tracked entries for `name` now naming `obj`.
fn add_update(c: &Compound, dir: &ObjFh, name: &[u8], obj: Obj) -> EntryUpdate {
    let name = Bytes::copy_from_slice(name);
    match obj {
        Some((_, a)) => EntryUpdate::Add(name, c.srv.state_file_id(&dir.export, a.fileid)),
        // Unknown object: at least the old name's object is no longer there.
        None => EntryUpdate::Remove(name),
    }
}

fn add_entry(
    c: &Compound,
    dir: &ObjFh,
    name: &[u8],
    obj: Obj,
    replaced: bool,
    mask: &[u32],
) -> notify_add4 {
    notify_add4 {
        nad_old_entry: if replaced {
            vec![remove_entry(name)]
        } else {
            Vec::new()
        },
        nad_new_entry: entry(c, dir, name, obj, mask),
        nad_new_entry_cookie: Vec::new(),
        nad_prev_entry: Vec::new(),
        nad_last_entry: false,
    }
}

/// `name` was added to `dir` (CREATE, OPEN that created, LINK, the target side of a
/// RENAME between directories), naming the object `obj`; `replaced`: an entry of that
/// name was replaced (RENAME over it).
pub(crate) fn added(
    c: &Compound,
    dir: &ObjFh,
    dattrs: &Attrs,
    name: &[u8],
    obj: Obj,
    replaced: bool,
) {
    let updates = [add_update(c, dir, name, obj)];
    queue(c, dir, dattrs, notify_type::ADD_ENTRY, &updates, |t| {
        add_entry(c, dir, name, obj, replaced, &t.child_attrs).to_bytes()
    });
}

/// `name` was removed from `dir` (REMOVE, the source side of a RENAME between
/// directories).
pub(crate) fn removed(c: &Compound, dir: &ObjFh, dattrs: &Attrs, name: &[u8]) {
    let updates = [EntryUpdate::Remove(Bytes::copy_from_slice(name))];
    queue(c, dir, dattrs, notify_type::REMOVE_ENTRY, &updates, |_| {
        remove_entry(name).to_bytes()
    });
}

/// `from` was renamed to `to` within `dir`, naming `obj`; `replaced`: `to` existed.
pub(crate) fn renamed(
    c: &Compound,
    dir: &ObjFh,
    dattrs: &Attrs,
    from: &[u8],
    to: &[u8],
    obj: Obj,
    replaced: bool,
) {
    let updates = [
        EntryUpdate::Remove(Bytes::copy_from_slice(from)),
        add_update(c, dir, to, obj),
    ];
    queue(c, dir, dattrs, notify_type::RENAME_ENTRY, &updates, |t| {
        notify_rename4 {
            nrn_old_entry: remove_entry(from),
            nrn_new_entry: add_entry(c, dir, to, obj, replaced, &t.child_attrs),
        }
        .to_bytes()
    });
}

/// SETATTR (`crate::ops::attr::setattr`), then the change of the object's attributes
/// for the directory delegations that follow it ([`attrs_changed`]). The op table
/// runs this for SETATTR, so that the attribute ops need not know about directory
/// delegations.
pub fn setattr(c: &mut Compound, a: &SETATTR4args) -> crate::errors::OpResult {
    let r = crate::ops::attr::setattr(c, a)?;
    if let Ok(o) = c.cobj() {
        let o = o.clone();
        attrs_changed(c, &o.export, &o.key);
    }
    Ok(r)
}
