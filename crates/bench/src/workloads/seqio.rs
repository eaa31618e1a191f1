//! Sequential read and write of one large file (seed 001 §3.2, §3.4): the
//! workers share one cursor, so together they scan the file from start to end
//! (and around again) in `io_size` requests (default 1 MiB). One run is one
//! pass over the file unless a duration or op budget is given.

use crate::workloads::randio::BlockIo;
use crate::workloads::Params;

/// seqread / seqwrite: default a 256 MiB file (times --scale), 1 MiB I/O.
pub fn sequential(write: bool, p: &Params) -> anyhow::Result<BlockIo> {
    let io = p.io_size.unwrap_or(1 << 20);
    let size = p.file_size.unwrap_or_else(|| p.scaled(256 << 20)).max(io);
    BlockIo::new(
        if write { "seqwrite" } else { "seqread" },
        write,
        false,
        size,
        io,
        p.sync,
        (size / io).max(1),
    )?
    .with_depth(p)
}
