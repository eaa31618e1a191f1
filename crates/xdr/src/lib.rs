//! XDR (RFC 4506) encoding and decoding.
//!
//! Decoding works over [`bytes::Bytes`] so that opaque payloads (READ/WRITE data, file
//! handles, names) are zero-copy slices of the received record. Every decoder is bounded:
//! a length prefix is checked against the bytes actually remaining before anything is
//! allocated, so a hostile 4-byte length can never make us reserve gigabytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};

mod gather;
mod piped;
pub use gather::{with_thread_heads, GatherBuf, Gathered, PipedTail, SHARE_MIN};
pub use piped::Piped;

/// Why a buffer could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XdrError {
    #[error("XDR input truncated: needed {needed} bytes, {remaining} remain")]
    Truncated { needed: usize, remaining: usize },
    #[error("XDR length {len} exceeds the limit {max}")]
    TooLong { len: usize, max: usize },
    #[error("XDR value {value} is not a valid {type_name}")]
    BadDiscriminant { type_name: &'static str, value: i64 },
    #[error("XDR bool must be 0 or 1, got {0}")]
    BadBool(u32),
    #[error("XDR padding is not zero")]
    BadPadding,
}

pub type Result<T> = std::result::Result<T, XdrError>;

/// A type that can be written in XDR form.
pub trait Encode {
    fn encode(&self, out: &mut BytesMut);

    /// Encode into a fresh buffer (convenience for tests and small messages).
    fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }
}

/// A type that can be read from XDR form. `src` is advanced past the value.
pub trait Decode: Sized {
    fn decode(src: &mut Bytes) -> Result<Self>;

    /// Decode a value from the start of `src` (trailing bytes are ignored, as RPC allows).
    fn from_bytes(mut src: Bytes) -> Result<Self> {
        let v = Self::decode(&mut src)?;
        Ok(v)
    }
}

#[inline]
pub fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

#[inline]
fn need(src: &Bytes, n: usize) -> Result<()> {
    if src.remaining() < n {
        Err(XdrError::Truncated {
            needed: n,
            remaining: src.remaining(),
        })
    } else {
        Ok(())
    }
}

pub fn get_u32(src: &mut Bytes) -> Result<u32> {
    need(src, 4)?;
    Ok(src.get_u32())
}

pub fn get_i32(src: &mut Bytes) -> Result<i32> {
    need(src, 4)?;
    Ok(src.get_i32())
}

pub fn get_u64(src: &mut Bytes) -> Result<u64> {
    need(src, 8)?;
    Ok(src.get_u64())
}

pub fn get_i64(src: &mut Bytes) -> Result<i64> {
    need(src, 8)?;
    Ok(src.get_i64())
}

pub fn get_bool(src: &mut Bytes) -> Result<bool> {
    match get_u32(src)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(XdrError::BadBool(v)),
    }
}

fn skip_padding(src: &mut Bytes, len: usize) -> Result<()> {
    let p = pad_len(len);
    need(src, p)?;
    // RFC 4506 requires zero padding; we are lenient on receipt (as most servers are)
    // because some clients leave garbage there.
    src.advance(p);
    Ok(())
}

/// Variable-length opaque (`opaque x<max>`), zero-copy.
pub fn get_opaque(src: &mut Bytes, max: usize) -> Result<Bytes> {
    let len = get_u32(src)? as usize;
    if len > max {
        return Err(XdrError::TooLong { len, max });
    }
    need(src, len)?;
    let data = src.split_to(len);
    skip_padding(src, len)?;
    Ok(data)
}

/// Fixed-length opaque (`opaque x[N]`).
pub fn get_fixed_opaque<const N: usize>(src: &mut Bytes) -> Result<[u8; N]> {
    need(src, N)?;
    let mut a = [0u8; N];
    src.copy_to_slice(&mut a);
    skip_padding(src, N)?;
    Ok(a)
}

/// Decode a counted array (`T x<max>`) without trusting the count for allocation.
pub fn get_array<T: Decode>(src: &mut Bytes, max: usize) -> Result<Vec<T>> {
    let len = get_u32(src)? as usize;
    if len > max {
        return Err(XdrError::TooLong { len, max });
    }
    // Every XDR item is at least 4 bytes, except void; bound the preallocation.
    let mut v = Vec::with_capacity(len.min(src.remaining() / 4));
    for _ in 0..len {
        v.push(T::decode(src)?);
    }
    Ok(v)
}

/// Decode an XDR optional-data linked list (`T *next` chain) iteratively into a Vec.
pub fn get_list<T: Decode>(src: &mut Bytes) -> Result<Vec<T>> {
    let mut v = Vec::new();
    while get_bool(src)? {
        v.push(T::decode(src)?);
    }
    Ok(v)
}

pub fn put_u32(out: &mut BytesMut, v: u32) {
    out.put_u32(v);
}
pub fn put_i32(out: &mut BytesMut, v: i32) {
    out.put_i32(v);
}
pub fn put_u64(out: &mut BytesMut, v: u64) {
    out.put_u64(v);
}
pub fn put_i64(out: &mut BytesMut, v: i64) {
    out.put_i64(v);
}
pub fn put_bool(out: &mut BytesMut, v: bool) {
    out.put_u32(v as u32);
}

const ZEROS: [u8; 4] = [0; 4];

pub fn put_opaque(out: &mut BytesMut, data: &[u8]) {
    out.put_u32(data.len() as u32);
    put_fixed_opaque(out, data);
}

pub fn put_fixed_opaque(out: &mut BytesMut, data: &[u8]) {
    out.put_slice(data);
    out.put_slice(&ZEROS[..pad_len(data.len())]);
}

pub fn put_array<T: Encode>(out: &mut BytesMut, items: &[T]) {
    out.put_u32(items.len() as u32);
    for i in items {
        i.encode(out);
    }
}

/// Encode a Vec as an XDR optional-data linked list (iteratively: no recursion depth).
pub fn put_list<T: Encode>(out: &mut BytesMut, items: &[T]) {
    for i in items {
        out.put_u32(1);
        i.encode(out);
    }
    out.put_u32(0);
}

macro_rules! prim {
    ($t:ty, $get:ident, $put:ident) => {
        impl Encode for $t {
            #[inline]
            fn encode(&self, out: &mut BytesMut) {
                $put(out, *self)
            }
        }
        impl Decode for $t {
            #[inline]
            fn decode(src: &mut Bytes) -> Result<Self> {
                $get(src)
            }
        }
    };
}
prim!(u32, get_u32, put_u32);
prim!(i32, get_i32, put_i32);
prim!(u64, get_u64, put_u64);
prim!(i64, get_i64, put_i64);
prim!(bool, get_bool, put_bool);

impl Encode for () {
    fn encode(&self, _out: &mut BytesMut) {}
}
impl Decode for () {
    fn decode(_src: &mut Bytes) -> Result<Self> {
        Ok(())
    }
}

/// `opaque<>` / `string<>` without an explicit bound.
impl Encode for Bytes {
    fn encode(&self, out: &mut BytesMut) {
        put_opaque(out, self)
    }
}
impl Decode for Bytes {
    fn decode(src: &mut Bytes) -> Result<Self> {
        get_opaque(src, u32::MAX as usize)
    }
}

impl<const N: usize> Encode for [u8; N] {
    fn encode(&self, out: &mut BytesMut) {
        put_fixed_opaque(out, self)
    }
}
impl<const N: usize> Decode for [u8; N] {
    fn decode(src: &mut Bytes) -> Result<Self> {
        get_fixed_opaque::<N>(src)
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut BytesMut) {
        put_array(out, self)
    }
}
impl<T: Decode> Decode for Vec<T> {
    fn decode(src: &mut Bytes) -> Result<Self> {
        get_array(src, u32::MAX as usize)
    }
}

/// XDR optional data (`T *x`) that is not a self-referential list.
impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Some(v) => {
                out.put_u32(1);
                v.encode(out)
            }
            None => out.put_u32(0),
        }
    }
}
impl<T: Decode> Decode for Option<T> {
    fn decode(src: &mut Bytes) -> Result<Self> {
        if get_bool(src)? {
            Ok(Some(T::decode(src)?))
        } else {
            Ok(None)
        }
    }
}

impl<T: Encode> Encode for Box<T> {
    fn encode(&self, out: &mut BytesMut) {
        (**self).encode(out)
    }
}
impl<T: Decode> Decode for Box<T> {
    fn decode(src: &mut Bytes) -> Result<Self> {
        Ok(Box::new(T::decode(src)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn opaque_is_padded_and_zero_copy() {
        let mut b = BytesMut::new();
        put_opaque(&mut b, b"abcde");
        assert_eq!(b.len(), 4 + 8);
        let mut src = b.freeze();
        let base = src.as_ptr() as usize;
        let v = get_opaque(&mut src, 16).unwrap();
        assert_eq!(&v[..], b"abcde");
        assert_eq!(v.as_ptr() as usize, base + 4, "slice must share the buffer");
        assert!(src.is_empty());
    }

    #[test]
    fn hostile_lengths_are_rejected_without_allocation() {
        let mut src = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            get_opaque(&mut src, usize::MAX),
            Err(XdrError::Truncated { .. })
        ));
        let mut src = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]);
        assert!(get_array::<u32>(&mut src, usize::MAX).is_err());
        let mut src = Bytes::from_static(&[0, 0, 0, 9]);
        assert_eq!(
            get_opaque(&mut src, 8),
            Err(XdrError::TooLong { len: 9, max: 8 })
        );
        let mut src = Bytes::from_static(&[0, 0, 0, 2]);
        assert_eq!(get_bool(&mut src), Err(XdrError::BadBool(2)));
    }

    proptest! {
        #[test]
        fn roundtrip(a in any::<u32>(), b in any::<i64>(), v in proptest::collection::vec(any::<u8>(), 0..40),
                     l in proptest::collection::vec(any::<u64>(), 0..10)) {
            let mut out = BytesMut::new();
            a.encode(&mut out);
            b.encode(&mut out);
            Bytes::from(v.clone()).encode(&mut out);
            put_list(&mut out, &l);
            l.encode(&mut out);
            let mut src = out.freeze();
            prop_assert_eq!(u32::decode(&mut src).unwrap(), a);
            prop_assert_eq!(i64::decode(&mut src).unwrap(), b);
            prop_assert_eq!(&Bytes::decode(&mut src).unwrap()[..], &v[..]);
            prop_assert_eq!(get_list::<u64>(&mut src).unwrap(), l.clone());
            prop_assert_eq!(Vec::<u64>::decode(&mut src).unwrap(), l);
            prop_assert!(src.is_empty());
        }

        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut src = Bytes::from(data);
            let _ = get_opaque(&mut src.clone(), 1 << 20);
            let _ = get_array::<u64>(&mut src.clone(), 1 << 20);
            let _ = get_list::<u32>(&mut src);
        }
    }
}
