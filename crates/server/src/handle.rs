//! NFS file handles: what the client holds, and how we check it (ADR 0001).
//!
//! Wire layout (at most 128 bytes, NFS4_FHSIZE):
//! `version (1) | kind (1) | export id (2, BE) | key (0..=88) | tag (16)`
//! where `tag = HMAC-SHA256(secret, everything before it)[..16]`. The secret lives in the
//! server's state directory, so handles survive restarts; a client cannot mint a handle
//! for an object it was never given (the backend would resolve any kernel handle on the
//! file system, so the tag is what keeps clients inside their export).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use txnfs_backend::{FileKey, MAX_KEY_LEN};

const VERSION: u8 = 1;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 4;
pub const MAX_HANDLE_LEN: usize = HEADER_LEN + MAX_KEY_LEN + TAG_LEN;

/// What a handle names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleTarget {
    /// A directory of the pseudo file system (exports' ancestors), by node index.
    Pseudo(u16),
    /// An object inside an export.
    Object { export: u16, key: FileKey },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Not one of ours (wrong length/version/kind): NFS4ERR_BADHANDLE.
    #[error("malformed file handle")]
    Malformed,
    /// Well-formed but the tag does not verify (forged or from another server
    /// secret): NFS4ERR_BADHANDLE as well, logged louder.
    #[error("file handle failed verification")]
    Forged,
}

/// Mints and verifies handles with the server's secret.
#[derive(Clone)]
pub struct HandleCodec {
    mac: Hmac<Sha256>,
    /// Which codec this is (its clones share the secret, and so the id), for the
    /// verified-handle cache.
    id: u64,
}

/// How many handles each thread remembers having verified (per slot, the last one whose
/// tag's first byte picked it).
const VERIFIED_SLOTS: usize = 32;

thread_local! {
    /// Handles this thread verified lately: a handle byte-for-byte equal to one of them,
    /// for the same codec, verifies without the HMAC (about a tenth of a small READ's
    /// server CPU went to it: ADR 0064 addendum). The comparison is constant-time, as
    /// the tag's is, so timing tells nothing about a remembered handle's bytes.
    static VERIFIED: RefCell<Vec<(u64, Bytes)>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    /// HMACs this thread computed to verify a handle: the tests see the memory used.
    static HMACS_RUN: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Codec ids (one per secret as loaded).
static NEXT_CODEC: AtomicU64 = AtomicU64::new(1);

/// Whether `a` and `b` hold the same bytes, in time that depends on their lengths only
/// (every byte is looked at; the lengths are not secret).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (wa, wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (wa.remainder(), wb.remainder());
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or_default());
    let words = wa.zip(wb).fold(0u64, |d, (x, y)| d | (word(x) ^ word(y)));
    let rest = ra.iter().zip(rb).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(words | u64::from(rest)) == 0
}

impl HandleCodec {
    pub fn new(secret: &[u8; 32]) -> Self {
        // HMAC accepts keys of any length; 32 bytes can never be rejected.
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC-SHA256 accepts any key length"));
        let id = NEXT_CODEC.fetch_add(1, Ordering::Relaxed);
        Self { mac, id }
    }

    /// Whether `fh`'s tag verifies: remembered by this thread, else by the HMAC (and
    /// then remembered).
    fn verified(&self, fh: &[u8]) -> bool {
        let (body, tag) = fh.split_at(fh.len() - TAG_LEN);
        let slot = usize::from(tag[0]) % VERIFIED_SLOTS;
        let known = VERIFIED.with_borrow(|v| {
            v.get(slot)
                .is_some_and(|(id, h)| *id == self.id && same_bytes(h, fh))
        });
        if known {
            return true;
        }
        #[cfg(test)]
        HMACS_RUN.set(HMACS_RUN.get() + 1);
        let mut m = self.mac.clone();
        m.update(body);
        // Constant-time comparison of the truncated tag.
        if m.verify_truncated_left(tag).is_err() {
            return false;
        }
        VERIFIED.with_borrow_mut(|v| {
            if v.is_empty() {
                v.resize(VERIFIED_SLOTS, (0, Bytes::new()));
            }
            // A copy: a slice of `fh` would keep its whole request buffer alive.
            v[slot] = (self.id, Bytes::copy_from_slice(fh));
        });
        true
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_LEN] {
        let mut m = self.mac.clone();
        m.update(body);
        let full = m.finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    pub fn encode(&self, target: &HandleTarget) -> Bytes {
        let mut b = BytesMut::with_capacity(MAX_HANDLE_LEN);
        b.put_u8(VERSION);
        match target {
            HandleTarget::Pseudo(node) => {
                b.put_u8(0);
                b.put_u16(*node);
            }
            HandleTarget::Object { export, key } => {
                debug_assert!(key.len() <= MAX_KEY_LEN);
                b.put_u8(1);
                b.put_u16(*export);
                b.put_slice(key);
            }
        }
        let t = self.tag(&b);
        b.put_slice(&t);
        b.freeze()
    }

    pub fn decode(&self, fh: &Bytes) -> Result<HandleTarget, HandleError> {
        if fh.len() < HEADER_LEN + TAG_LEN || fh.len() > MAX_HANDLE_LEN || fh[0] != VERSION {
            return Err(HandleError::Malformed);
        }
        if !self.verified(fh) {
            return Err(HandleError::Forged);
        }
        let body = &fh[..fh.len() - TAG_LEN];
        let id = u16::from_be_bytes([body[2], body[3]]);
        match body[1] {
            0 if body.len() == HEADER_LEN => Ok(HandleTarget::Pseudo(id)),
            1 => Ok(HandleTarget::Object {
                export: id,
                key: fh.slice(HEADER_LEN..fh.len() - TAG_LEN),
            }),
            _ => Err(HandleError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_remembered_handle_verifies_only_itself_for_its_own_codec() {
        let c = HandleCodec::new(&[7; 32]);
        let t = HandleTarget::Object {
            export: 1,
            key: Bytes::from_static(b"remembered"),
        };
        let fh = c.encode(&t);
        // The first decode verifies by HMAC and remembers; the second by the memory.
        let before = HMACS_RUN.get();
        assert_eq!(c.decode(&fh), Ok(t.clone()));
        assert_eq!(HMACS_RUN.get(), before + 1);
        assert_eq!(c.decode(&fh), Ok(t));
        assert_eq!(
            HMACS_RUN.get(),
            before + 1,
            "a remembered handle runs no HMAC"
        );
        // Same slot (the tag's first byte), any other byte changed: forged.
        for i in [1, 5, fh.len() - 1] {
            let mut bad = fh.to_vec();
            bad[i] ^= 0x40;
            assert!(c.decode(&Bytes::from(bad)).is_err(), "byte {i}");
        }
        // Another server's codec on this thread does not take this one's memory.
        let other = HandleCodec::new(&[8; 32]);
        assert_eq!(other.decode(&fh), Err(HandleError::Forged));
    }

    #[test]
    fn same_bytes_sees_every_byte() {
        let a: Vec<u8> = (0..37).collect();
        assert!(same_bytes(&a, &a.clone()));
        for i in 0..a.len() {
            let mut b = a.clone();
            b[i] ^= 1;
            assert!(!same_bytes(&a, &b), "byte {i}");
        }
        assert!(!same_bytes(&a, &a[..36]));
        assert!(same_bytes(&[], &[]));
    }

    #[test]
    fn round_trip_and_forgery() {
        let c = HandleCodec::new(&[7; 32]);
        let t = HandleTarget::Object {
            export: 3,
            key: Bytes::from_static(b"kernel-handle-bytes"),
        };
        let fh = c.encode(&t);
        assert!(fh.len() <= 128);
        assert_eq!(c.decode(&fh), Ok(t));
        // flip one bit of the key: the tag no longer verifies
        let mut bad = fh.to_vec();
        bad[6] ^= 1;
        assert_eq!(c.decode(&Bytes::from(bad)), Err(HandleError::Forged));
        // another server secret does not accept our handles
        let other = HandleCodec::new(&[8; 32]);
        assert_eq!(other.decode(&fh), Err(HandleError::Forged));
        assert_eq!(
            c.decode(&c.encode(&HandleTarget::Pseudo(0))),
            Ok(HandleTarget::Pseudo(0))
        );
        assert_eq!(
            c.decode(&Bytes::from_static(b"short")),
            Err(HandleError::Malformed)
        );
    }

    proptest! {
        #[test]
        fn random_handles_never_verify(data in proptest::collection::vec(any::<u8>(), 0..130)) {
            let c = HandleCodec::new(&[1; 32]);
            prop_assert!(c.decode(&Bytes::from(data)).is_err());
        }
    }
}
