//! Encoded messages made of several buffers: file data read from storage travels as its
//! own part, shared with the buffer it was read into, instead of being copied into the
//! message (ADR 0052).
//!
//! [`GatherBuf`] is the encoder's buffer: small items are written into its tail (a
//! `BytesMut`, as every [`crate::Encode`] impl expects), and [`GatherBuf::put_opaque_shared`]
//! appends an `opaque<>` whose bytes stay where they are. [`Gathered`] is the finished
//! message: a list of parts that a gathered write (`writev`) sends as they are.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::{pad_len, Piped, ZEROS};

/// Opaques shorter than this are copied into the tail: an extra iovec (and a part in
/// every cache holding the message) costs more than copying a few hundred bytes.
pub const SHARE_MIN: usize = 1024;

/// The end of a message held in a pipe (ADR 0065): an `opaque<>`'s data, then `pad`
/// zero bytes. Only the last item of a message can be piped; anything encoded after
/// it reads the data into memory first.
#[derive(Debug, Clone)]
pub struct PipedTail {
    pub data: Arc<Piped>,
    pub pad: usize,
}

impl PipedTail {
    /// Bytes on the wire: the data and its padding.
    pub fn len(&self) -> usize {
        self.data.len() + self.pad
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The zero bytes that follow the data.
    pub fn padding(&self) -> Bytes {
        Bytes::from_static(&ZEROS[..self.pad])
    }

    /// The data and padding in memory (read out of the pipe once).
    fn to_parts(&self) -> [Bytes; 2] {
        let data = self
            .data
            .to_bytes()
            .unwrap_or_else(|e| panic!("piped reply data lost before it was sent: {e}"));
        [data, self.padding()]
    }
}

/// A message being encoded: finished parts plus the tail being written.
#[derive(Debug, Default)]
pub struct GatherBuf {
    parts: Vec<Bytes>,
    /// Bytes in `parts`.
    parts_len: usize,
    /// Follows `parts` (and precedes `tail`, which is then empty).
    piped: Option<PipedTail>,
    tail: BytesMut,
}

impl GatherBuf {
    /// An empty message whose tail starts with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        GatherBuf {
            parts: Vec::new(),
            parts_len: 0,
            piped: None,
            tail: BytesMut::with_capacity(capacity),
        }
    }

    /// Bytes encoded so far, in all parts.
    pub fn len(&self) -> usize {
        self.parts_len + self.piped.as_ref().map_or(0, PipedTail::len) + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where small items are encoded (the end of the message).
    pub fn tail(&mut self) -> &mut BytesMut {
        &mut self.tail
    }

    /// Ends the current part here: what follows starts a new part. The bytes already
    /// written are not copied (the tail keeps its remaining capacity).
    pub fn seal(&mut self) {
        if !self.tail.is_empty() {
            self.unpipe();
            let done = self.tail.split().freeze();
            self.parts_len += done.len();
            self.parts.push(done);
        }
    }

    /// Appends a finished buffer as its own part, not copied.
    pub fn put_shared(&mut self, data: Bytes) {
        if data.len() < SHARE_MIN {
            self.tail.put_slice(&data);
            return;
        }
        self.seal();
        self.unpipe();
        self.parts_len += data.len();
        self.parts.push(data);
    }

    /// XDR `opaque<>` whose bytes wait in a pipe (ADR 0065): the message's last item
    /// (the same encoding as [`crate::put_opaque`]; anything encoded after it reads
    /// the data into memory).
    pub fn put_opaque_piped(&mut self, data: Piped) {
        let pad = pad_len(data.len());
        self.tail.put_u32(data.len() as u32);
        self.seal();
        self.unpipe();
        self.piped = Some(PipedTail {
            data: Arc::new(data),
            pad,
        });
    }

    /// Reads piped data into memory, as parts: something follows it.
    fn unpipe(&mut self) {
        if let Some(t) = self.piped.take() {
            for p in t.to_parts() {
                self.parts_len += p.len();
                self.parts.push(p);
            }
        }
    }

    /// XDR `opaque<>` whose bytes become their own part (from [`SHARE_MIN`] bytes on):
    /// the same encoding as [`crate::put_opaque`], without copying `data`.
    pub fn put_opaque_shared(&mut self, data: Bytes) {
        let pad = pad_len(data.len());
        self.tail.put_u32(data.len() as u32);
        self.put_shared(data);
        self.tail.put_slice(&ZEROS[..pad]);
    }

    /// Shortens the message to `len` bytes (parts past it are dropped, the part it
    /// falls in is cut without copying).
    pub fn truncate(&mut self, len: usize) {
        self.unpipe();
        if len >= self.parts_len {
            self.tail.truncate(len - self.parts_len);
            return;
        }
        self.tail.clear();
        while self.parts_len > len {
            let Some(mut last) = self.parts.pop() else {
                break;
            };
            self.parts_len -= last.len();
            if self.parts_len < len {
                last.truncate(len - self.parts_len);
                self.parts_len += last.len();
                self.parts.push(last);
            }
        }
    }

    /// A copy of the bytes from `at` to the end (for small results kept apart, such
    /// as an owner's replay cache).
    pub fn copy_from(&self, at: usize) -> Bytes {
        if self.piped.is_some() {
            return self.snapshot().to_bytes().slice(at.min(self.len())..);
        }
        let mut out = BytesMut::with_capacity(self.len().saturating_sub(at));
        let mut start = 0;
        let tail: &[u8] = &self.tail;
        for p in self
            .parts
            .iter()
            .map(|p| &p[..])
            .chain(std::iter::once(tail))
        {
            let end = start + p.len();
            if end > at {
                out.put_slice(&p[at.saturating_sub(start)..]);
            }
            start = end;
        }
        out.freeze()
    }

    /// The message so far, without consuming the buffer: the finished parts are
    /// shared, the tail is copied (call [`GatherBuf::seal`] first to share it too).
    pub fn snapshot(&self) -> Gathered {
        let mut parts = self.parts.clone();
        let mut piped = self.piped.clone();
        if !self.tail.is_empty() {
            if let Some(t) = piped.take() {
                parts.extend(t.to_parts());
            }
            parts.push(Bytes::copy_from_slice(&self.tail));
        }
        let mut g = Gathered::from_parts(parts);
        if let Some(t) = piped {
            g.len += t.len();
            g.piped = Some(t);
        }
        g
    }

    /// The finished message.
    pub fn finish(mut self) -> Gathered {
        self.seal();
        let len = self.len();
        Gathered {
            parts: self.parts,
            len,
            piped: self.piped,
        }
    }
}

/// An encoded message as parts, in order, and maybe a last part held in a pipe (ADR
/// 0065). Two messages are equal when their bytes are, however they are cut into parts.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    parts: Vec<Bytes>,
    /// Bytes in all parts, the piped one included.
    len: usize,
    piped: Option<PipedTail>,
}

impl Gathered {
    /// The message made of `parts` (empty parts are dropped).
    pub fn from_parts(parts: Vec<Bytes>) -> Self {
        let parts: Vec<Bytes> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let len = parts.iter().map(Bytes::len).sum();
        Gathered {
            parts,
            len,
            piped: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts in memory (all but a piped last one).
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The last part, if it waits in a pipe.
    pub fn piped(&self) -> Option<&PipedTail> {
        self.piped.as_ref()
    }

    /// The parts in memory (piped data read out into memory: a copy).
    pub fn into_parts(self) -> Vec<Bytes> {
        let mut parts = self.parts;
        if let Some(t) = self.piped {
            parts.extend(t.to_parts());
        }
        parts
    }

    /// The parts in memory, and the piped last one apart (not read out).
    pub fn into_parts_piped(self) -> (Vec<Bytes>, Option<PipedTail>) {
        (self.parts, self.piped)
    }

    /// The message in one buffer: shared when it is one part already, else copied
    /// (for callers that need contiguous bytes: tests, stores, whole-body wrapping).
    pub fn to_bytes(&self) -> Bytes {
        if self.piped.is_some() {
            let mut out = BytesMut::with_capacity(self.len);
            for p in self.clone().into_parts() {
                out.put_slice(&p);
            }
            return out.freeze();
        }
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = BytesMut::with_capacity(self.len);
                for p in many {
                    out.put_slice(p);
                }
                out.freeze()
            }
        }
    }

    /// The first `n` bytes (fewer if the message is shorter; a status word, say),
    /// copied only when they span parts.
    pub fn prefix(&self, n: usize) -> Bytes {
        match self.parts.first() {
            Some(first) if first.len() >= n => first.slice(..n),
            _ if self.piped.is_some() => {
                let all = self.to_bytes();
                all.slice(..n.min(all.len()))
            }
            _ => {
                let mut out = BytesMut::with_capacity(n);
                for p in &self.parts {
                    let want = n - out.len();
                    out.put_slice(&p[..p.len().min(want)]);
                    if out.len() == n {
                        break;
                    }
                }
                out.freeze()
            }
        }
    }

    /// Replaces bytes `at..at + 4` by `v` (big-endian), copying only the part that
    /// holds them. False (nothing changed) when no one part holds all four.
    pub fn set_u32(&mut self, at: usize, v: u32) -> bool {
        self.set_u32s(&[(at, v)])
    }

    /// [`Gathered::set_u32`] of several words that one part holds, copying it at most
    /// once.
    pub fn set_u32s(&mut self, words: &[(usize, u32)]) -> bool {
        let Some(&(at, _)) = words.first() else {
            return true;
        };
        let mut start = 0;
        for p in &mut self.parts {
            if at < start + p.len() {
                let inside = |&(w, _): &(usize, u32)| w >= start && w + 4 <= start + p.len();
                if !words.iter().all(inside) {
                    return false;
                }
                // In place when this part is the only view of its bytes (a finished
                // buffer's head usually is); else a copy of the part alone.
                let mut part = match std::mem::take(p).try_into_mut() {
                    Ok(unique) => unique,
                    Err(shared) => BytesMut::from(&shared[..]),
                };
                for &(w, v) in words {
                    part[w - start..w - start + 4].copy_from_slice(&v.to_be_bytes());
                }
                *p = part.freeze();
                return true;
            }
            start += p.len();
        }
        false
    }
}

impl From<Bytes> for Gathered {
    fn from(b: Bytes) -> Self {
        let len = b.len();
        let parts = if len == 0 { Vec::new() } else { vec![b] };
        Gathered {
            parts,
            len,
            piped: None,
        }
    }
}

impl PartialEq for Gathered {
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len {
            return false;
        }
        if self.piped.is_some() || other.piped.is_some() {
            return self.to_bytes() == other.to_bytes();
        }
        let mut a = self.parts.iter().flat_map(|p| p.chunks(4096));
        let mut b = other.parts.iter().flat_map(|p| p.chunks(4096));
        // Compare chunk by chunk even when the two are cut differently.
        let (mut x, mut y): (&[u8], &[u8]) = (&[], &[]);
        loop {
            if x.is_empty() {
                x = a.next().unwrap_or(&[]);
            }
            if y.is_empty() {
                y = b.next().unwrap_or(&[]);
            }
            if x.is_empty() || y.is_empty() {
                return x.is_empty() && y.is_empty();
            }
            let n = x.len().min(y.len());
            if x[..n] != y[..n] {
                return false;
            }
            x = &x[n..];
            y = &y[n..];
        }
    }
}

impl Eq for Gathered {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{put_opaque, put_u32};

    fn data(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| i as u8).collect::<Vec<u8>>())
    }

    #[test]
    fn shared_opaque_encodes_as_put_opaque_without_copying() {
        for n in [0, 3, SHARE_MIN - 1, SHARE_MIN, SHARE_MIN + 1, 1 << 20] {
            let d = data(n);
            let mut g = GatherBuf::with_capacity(16);
            g.tail().put_u32(7);
            g.put_opaque_shared(d.clone());
            g.tail().put_u32(9);
            let got = g.finish();
            let mut flat = BytesMut::new();
            flat.put_u32(7);
            put_opaque(&mut flat, &d);
            flat.put_u32(9);
            assert_eq!(got.to_bytes(), flat.freeze(), "n = {n}");
            let shared = got.parts().iter().any(|p| p.as_ptr() == d.as_ptr());
            assert_eq!(shared, n >= SHARE_MIN, "n = {n}: data shared, not copied");
        }
    }

    #[test]
    fn truncate_cuts_across_parts() {
        let mut g = GatherBuf::default();
        g.tail().put_slice(b"head");
        g.put_opaque_shared(data(2000));
        g.tail().put_slice(b"tail");
        let full = g.snapshot().to_bytes();
        for at in [0, 2, 4, 8, 100, 2008, 2010, full.len()] {
            let mut h = GatherBuf::default();
            h.tail().put_slice(b"head");
            h.put_opaque_shared(data(2000));
            h.tail().put_slice(b"tail");
            h.truncate(at);
            assert_eq!(h.len(), at);
            h.tail().put_slice(b"X");
            let mut want = BytesMut::from(&full[..at]);
            want.put_slice(b"X");
            assert_eq!(h.copy_from(0).len(), at + 1);
            assert_eq!(h.finish().to_bytes(), want.freeze(), "at = {at}");
        }
        assert_eq!(g.copy_from(2008), full.slice(2008..));
    }

    /// `n` bytes of `data(n)` in a pipe.
    fn piped(n: usize) -> Piped {
        use std::io::Write;
        let (rd, mut wr) = std::io::pipe().expect("pipe");
        let d = data(n);
        let writer = std::thread::spawn(move || wr.write_all(&d).expect("fill"));
        let p = Piped::new(std::fs::File::from(std::os::fd::OwnedFd::from(rd)), n);
        // Read out at once where the pipe is smaller than `n` (the writer waits).
        if n > 60_000 {
            p.to_bytes().expect("read out");
        }
        writer.join().expect("writer");
        p
    }

    /// A piped opaque encodes as `put_opaque`: as the message's last part when nothing
    /// follows it, read into memory, in order, when something does.
    #[test]
    fn piped_opaque_encodes_as_put_opaque() {
        for (n, after) in [(5, false), (5, true), (3000, false), (100_001, true)] {
            let mut g = GatherBuf::with_capacity(16);
            g.tail().put_u32(7);
            g.put_opaque_piped(piped(n));
            if after {
                g.tail().put_u32(9);
            }
            let mut flat = BytesMut::new();
            flat.put_u32(7);
            put_opaque(&mut flat, &data(n));
            if after {
                flat.put_u32(9);
            }
            assert_eq!(g.len(), flat.len(), "{n} {after}: length");
            assert_eq!(g.snapshot().to_bytes(), flat, "{n} {after}: snapshot");
            let got = g.finish();
            assert_eq!(got.piped().is_some(), !after, "{n} {after}: piped end");
            assert_eq!(got.len(), flat.len());
            assert_eq!(got.prefix(4), &flat[..4]);
            assert_eq!(got.to_bytes(), flat, "{n} {after}: bytes");
            assert_eq!(got, Gathered::from(flat.clone().freeze()));
            let parts: Vec<u8> = got.into_parts().concat();
            assert_eq!(parts, flat, "{n} {after}: parts read out");
        }
    }

    #[test]
    fn equality_ignores_where_parts_are_cut() {
        let a = Gathered::from_parts(vec![Bytes::from_static(b"abc"), Bytes::from_static(b"def")]);
        let b = Gathered::from_parts(vec![Bytes::from_static(b"a"), Bytes::from_static(b"bcdef")]);
        let c = Gathered::from(Bytes::from_static(b"abcdeX"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.prefix(4), Bytes::from_static(b"abcd"));
    }

    #[test]
    fn set_u32_copies_only_its_part() {
        let big = data(4096);
        let mut g = Gathered::from_parts(vec![Bytes::from_static(&[0; 8]), big.clone()]);
        assert!(g.set_u32(4, 0x01020304));
        assert_eq!(&g.parts()[0][..], &[0, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(g.parts()[1].as_ptr(), big.as_ptr());
        assert!(!g.set_u32(6, 1), "a word across two parts is refused");
        assert!(g.set_u32s(&[(0, 9), (4, 10)]));
        assert_eq!(&g.parts()[0][..], &[0, 0, 0, 9, 0, 0, 0, 10]);
        assert!(
            !g.set_u32s(&[(0, 1), (8, 1)]),
            "words in two parts are refused"
        );
        assert_eq!(&g.parts()[0][..4], &[0, 0, 0, 9], "and nothing changed");
    }

    #[test]
    fn set_u32s_patches_a_part_in_place_only_when_no_one_else_sees_it() {
        // A finished buffer's head: its only view, patched where it is.
        let mut b = GatherBuf::with_capacity(64);
        put_u32(b.tail(), 0);
        put_u32(b.tail(), 0);
        let mut g = b.finish();
        let head = g.parts()[0].as_ptr();
        assert!(g.set_u32s(&[(0, 7), (4, 8)]));
        assert_eq!(&g.parts()[0][..], &[0, 0, 0, 7, 0, 0, 0, 8]);
        assert_eq!(g.parts()[0].as_ptr(), head, "patched in place");
        // A part someone else holds too (a cached reply) is copied, and theirs stays.
        let kept = g.clone();
        assert!(g.set_u32(0, 1));
        assert_ne!(g.parts()[0].as_ptr(), head, "copied");
        assert_eq!(
            &kept.parts()[0][..4],
            &[0, 0, 0, 7],
            "the other view is unchanged"
        );
        assert_eq!(&g.parts()[0][..4], &[0, 0, 0, 1]);
    }
}
