//! Record framing and the recovery scan.
//!
//! A record is `[len u32][checksum u64][payload]`, big-endian, `checksum` the FNV-1a-64
//! of the payload. Records follow one another with no padding, after whatever header
//! the file's owner puts first. The scan reads records from a start offset until the
//! first one that is torn (its frame header or payload runs past the end of the data),
//! fails its checksum, or is refused by the reader (a payload that does not decode, a
//! record of an older generation): the records before it are the valid prefix.

/// Bytes of a record's frame before its payload: length and checksum.
pub const FRAME_HEADER: usize = 12;

/// The largest payload a frame can carry.
pub const MAX_PAYLOAD: usize = u32::MAX as usize;

/// FNV-1a-64 of `b`: detects torn, stale and corrupt records; not a defence against an
/// adversary (durable logs live in the server's private state directory).
pub fn checksum(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// How many bytes `payload_len` bytes of payload take framed.
pub fn framed_len(payload_len: usize) -> usize {
    FRAME_HEADER + payload_len
}

/// Appends `payload`, framed, to `out`.
///
/// # Panics
/// If `payload` is longer than [`MAX_PAYLOAD`] (a caller's bug: records are small).
pub fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    assert!(payload.len() <= MAX_PAYLOAD, "durable log record too long");
    out.reserve(framed_len(payload.len()));
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&checksum(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Why the scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// At the end of the data: every byte after the start belongs to a valid record.
    Clean,
    /// A record's frame header or payload runs past the end of the data (a write cut
    /// short by a crash).
    Torn,
    /// A record whose payload does not match its checksum.
    Corrupt,
    /// A well-framed record the reader refused.
    Refused,
}

/// The outcome of [`scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Where the valid prefix ends (the offset of the first record not accepted, or the
    /// end of the data): appends continue here.
    pub end: u64,
    /// Records accepted.
    pub records: usize,
    pub tail: Tail,
}

/// The record at `at`: its payload, or why there is none.
fn record_at(data: &[u8], at: usize) -> Result<&[u8], Tail> {
    if at >= data.len() {
        return Err(if at == data.len() {
            Tail::Clean
        } else {
            Tail::Torn
        });
    }
    let head = data.get(at..at + FRAME_HEADER).ok_or(Tail::Torn)?;
    let (len, sum) = head.split_at(4);
    let len = u32::from_be_bytes(len.try_into().map_err(|_| Tail::Torn)?) as usize;
    let sum = u64::from_be_bytes(sum.try_into().map_err(|_| Tail::Torn)?);
    let start = at + FRAME_HEADER;
    let payload = data.get(start..start + len).ok_or(Tail::Torn)?;
    if checksum(payload) != sum {
        return Err(Tail::Corrupt);
    }
    Ok(payload)
}

/// Reads the records of `data` from offset `start`, giving each payload to `accept`
/// in order, until the data ends, a record is torn or corrupt, or `accept` returns
/// `false` (that record is not part of the valid prefix).
pub fn scan(data: &[u8], start: usize, mut accept: impl FnMut(&[u8]) -> bool) -> Recovery {
    let mut at = start;
    let mut records = 0;
    let tail = loop {
        match record_at(data, at) {
            Ok(payload) => {
                if !accept(payload) {
                    break Tail::Refused;
                }
                records += 1;
                at += framed_len(payload.len());
            }
            Err(t) => break t,
        }
    };
    Recovery {
        end: at as u64,
        records,
        tail,
    }
}
