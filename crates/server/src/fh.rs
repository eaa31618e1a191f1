//! File handles as the executor and the server hold them: a current or saved filehandle
//! resolved to the pseudo-file-system node or the export object it names. Encoding and
//! decoding the wire form is the server's (`Server::fh_from_wire`, `crate::handle`).

use std::sync::Arc;

use bytes::Bytes;
use txnfs_backend::FileKey;

use crate::export::Export;
use crate::handle::{HandleCodec, HandleTarget};

/// A current or saved filehandle, resolved to what it names.
#[derive(Clone)]
pub enum Fh {
    /// A pseudo-file-system directory.
    Pseudo(u16),
    Obj(ObjFh),
}

#[derive(Clone)]
pub struct ObjFh {
    pub export: Arc<Export>,
    pub key: FileKey,
    /// The handle as the client sees it.
    pub wire: Bytes,
}

impl Fh {
    /// The handle as the client sees it (a pseudo node's is encoded by `handles`).
    pub fn wire(&self, handles: &HandleCodec) -> Bytes {
        match self {
            Fh::Pseudo(n) => handles.encode(&HandleTarget::Pseudo(*n)),
            Fh::Obj(o) => o.wire.clone(),
        }
    }
}
