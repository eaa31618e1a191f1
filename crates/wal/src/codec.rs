//! The encoding of durable records' fields: big-endian integers, byte strings as
//! `[len u32][bytes]` with no padding, fixed-size arrays as their bytes. Decoding is
//! bounded by the bytes present: a length is checked against what remains before
//! anything is allocated.

use bytes::{Buf, Bytes};

/// Why a payload did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record truncated: needed {needed} bytes, {remaining} remain")]
    Truncated { needed: usize, remaining: usize },
    #[error("unknown {what} tag {tag}")]
    Tag { what: &'static str, tag: u8 },
}

type Result<T> = std::result::Result<T, DecodeError>;

/// A record's payload being written.
#[derive(Debug, Default, Clone)]
pub struct Enc(Vec<u8>);

impl Enc {
    pub fn new() -> Enc {
        Enc(Vec::with_capacity(64))
    }

    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.0.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Enc {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// `[len u32][v]`.
    ///
    /// # Panics
    /// If `v` is 4 GiB or longer (record fields are small).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Enc {
        let n = u32::try_from(v.len()).expect("durable record field too long");
        self.u32(n);
        self.0.extend_from_slice(v);
        self
    }

    /// The bytes of a fixed-size field, no length.
    pub fn fixed(&mut self, v: &[u8]) -> &mut Enc {
        self.0.extend_from_slice(v);
        self
    }

    /// `[count u32][u32...]`.
    pub fn u32s(&mut self, v: &[u32]) -> &mut Enc {
        let n = u32::try_from(v.len()).expect("durable record field too long");
        self.u32(n);
        for x in v {
            self.u32(*x);
        }
        self
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

/// A record's payload being read; byte strings are slices of it (no copy).
#[derive(Debug, Clone)]
pub struct Dec(Bytes);

impl Dec {
    pub fn new(payload: Bytes) -> Dec {
        Dec(payload)
    }

    /// Reads from a copy of `payload`.
    pub fn copy_from(payload: &[u8]) -> Dec {
        Dec(Bytes::copy_from_slice(payload))
    }

    fn need(&self, needed: usize) -> Result<()> {
        if self.0.remaining() < needed {
            return Err(DecodeError::Truncated {
                needed,
                remaining: self.0.remaining(),
            });
        }
        Ok(())
    }

    pub fn remaining(&self) -> usize {
        self.0.remaining()
    }

    pub fn u8(&mut self) -> Result<u8> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    pub fn u32(&mut self) -> Result<u32> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    pub fn u64(&mut self) -> Result<u64> {
        self.need(8)?;
        Ok(self.0.get_u64())
    }

    pub fn i64(&mut self) -> Result<i64> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }

    /// A `[len u32][bytes]` field.
    pub fn bytes(&mut self) -> Result<Bytes> {
        let n = self.u32()? as usize;
        self.need(n)?;
        Ok(self.0.split_to(n))
    }

    /// A fixed-size field.
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.need(N)?;
        let mut a = [0u8; N];
        self.0.copy_to_slice(&mut a);
        Ok(a)
    }

    /// A `[count u32][u32...]` field.
    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.u32()? as usize;
        self.need(n.saturating_mul(4))?;
        (0..n).map(|_| self.u32()).collect()
    }
}
