//! Helpers shared by the integration tests of the generated types.

use bytes::Bytes;
use txnfs_proto::{Decode, Encode};

/// Encode `v`, check the encoding is 4-byte aligned and decodes back to `v` exactly,
/// consuming every byte; the encoding.
pub fn roundtrip<T: Encode + Decode + PartialEq + std::fmt::Debug>(v: &T) -> Bytes {
    let b = v.to_bytes();
    assert_eq!(b.len() % 4, 0, "XDR is 4-byte aligned");
    let mut src = b.clone();
    let back = T::decode(&mut src).expect("decodes what it encoded");
    assert_eq!(&back, v);
    assert!(src.is_empty(), "decode consumed everything");
    b
}
