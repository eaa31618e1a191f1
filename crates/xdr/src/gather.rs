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
    /// The first finished part, kept writable until the message is finished, so that
    /// words in it (a COMPOUND's status and result count) can be set at the end in
    /// place ([`GatherBuf::set_u32s`]). Empty until the first seal; it precedes `parts`.
    first: BytesMut,
    parts: Vec<Bytes>,
    /// Bytes in `first` and `parts`.
    parts_len: usize,
    /// Follows `parts` (and precedes `tail`, which is then empty).
    piped: Option<PipedTail>,
    tail: BytesMut,
}

impl GatherBuf {
    /// An empty message whose tail starts with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        GatherBuf {
            first: BytesMut::new(),
            parts: Vec::new(),
            parts_len: 0,
            piped: None,
            tail: BytesMut::with_capacity(capacity),
        }
    }

    /// [`GatherBuf::with_capacity`] whose first `capacity` bytes are split off this
    /// thread's buffer of message heads: no allocation of its own (two otherwise: the
    /// buffer, and its shared header when its first part is split off). What grows past
    /// `capacity` moves to a buffer of its own. A message kept for long (a reply cache)
    /// keeps its own copy of its small parts ([`Gathered::detached`]), so as not to
    /// pin the thread's buffer.
    pub fn in_thread_buffer(capacity: usize) -> Self {
        let tail = with_thread_heads(capacity, |heads| {
            // (Zeroed, so that the view split off is made of written bytes.)
            heads.resize(capacity, 0);
            let mut tail = heads.split_to(capacity);
            tail.clear();
            tail
        });
        GatherBuf {
            tail,
            ..GatherBuf::default()
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
            let done = self.tail.split();
            self.parts_len += done.len();
            if self.first.is_empty() && self.parts.is_empty() {
                self.first = done;
            } else {
                self.parts.push(done.freeze());
            }
        }
    }

    /// Sets each `(offset, value)` of `words` as a big-endian `u32`, in place, when all
    /// lie in the message's first part (sealed or not), which no one else can see
    /// before the message is finished. False (nothing changed) when they do not.
    pub fn set_u32s(&mut self, words: &[(usize, u32)]) -> bool {
        let part = if !self.first.is_empty() {
            &mut self.first
        } else if self.parts.is_empty() && self.piped.is_none() {
            &mut self.tail
        } else {
            return false;
        };
        if !words.iter().all(|&(w, _)| w + 4 <= part.len()) {
            return false;
        }
        for &(w, v) in words {
            part[w..w + 4].copy_from_slice(&v.to_be_bytes());
        }
        true
    }

    /// Makes the first part an ordinary one, when the message is finished.
    fn freeze_first(&mut self) {
        if !self.first.is_empty() {
            let first = self.first.split().freeze();
            self.parts.insert(0, first);
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
                // The cut falls in the first part, which stays the first part (its
                // words can still be set).
                self.first.truncate(len);
                self.parts_len = len;
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
        let (first, tail): (&[u8], &[u8]) = (&self.first, &self.tail);
        for p in std::iter::once(first)
            .chain(self.parts.iter().map(|p| &p[..]))
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
        // (The first part is still writable: copied, as the tail is.)
        let mut parts = Vec::with_capacity(self.parts.len() + 2);
        if !self.first.is_empty() {
            parts.push(Bytes::copy_from_slice(&self.first));
        }
        parts.extend(self.parts.iter().cloned());
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
        self.freeze_first();
        let len = self.len();
        Gathered {
            parts: self.parts,
            len,
            piped: self.piped,
        }
    }
}

/// The size of a thread's buffer of message heads ([`with_thread_heads`]).
const HEADS_BYTES: usize = 16 << 10;

thread_local! {
    static HEADS: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Runs `f` on this thread's buffer of message heads, empty and with room for `need`
/// bytes; `f` splits what it wrote off it, so that a small message part costs no
/// allocation of its own (a reply's first bytes, [`GatherBuf::in_thread_buffer`]; an
/// RPC record's head). The buffer is reused whole once nothing split off it is held
/// any more, else a new one is allocated.
pub fn with_thread_heads<R>(need: usize, f: impl FnOnce(&mut BytesMut) -> R) -> R {
    HEADS.with_borrow_mut(|heads| {
        // (Empty unless a writer panicked half-way.)
        heads.clear();
        if heads.capacity() < need {
            heads.reserve(HEADS_BYTES.max(need));
        }
        f(heads)
    })
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

    /// The same message with its small parts (under [`SHARE_MIN`] bytes: encoded
    /// fields, not file data) copied into one buffer of their own, for a message kept
    /// for long: it then keeps no thread's buffer of heads alive
    /// ([`GatherBuf::in_thread_buffer`]).
    pub fn detached(&self) -> Gathered {
        let small: usize = self
            .parts
            .iter()
            .filter(|p| p.len() < SHARE_MIN)
            .map(Bytes::len)
            .sum();
        if small == 0 {
            return self.clone();
        }
        let mut own = BytesMut::with_capacity(small);
        let parts = self
            .parts
            .iter()
            .map(|p| {
                if p.len() >= SHARE_MIN {
                    return p.clone();
                }
                own.put_slice(p);
                own.split().freeze()
            })
            .collect();
        Gathered {
            parts,
            len: self.len,
            piped: self.piped.clone(),
        }
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
    fn words_of_the_first_part_are_set_in_place_until_it_is_finished() {
        // Still in the tail.
        let mut b = GatherBuf::with_capacity(64);
        put_u32(b.tail(), 0);
        put_u32(b.tail(), 0);
        assert!(b.set_u32s(&[(0, 7)]));
        // Sealed, with file data and more after it.
        b.put_opaque_shared(data(4096));
        put_u32(b.tail(), 5);
        let first = b.first.as_ptr();
        assert!(b.set_u32s(&[(0, 9), (4, 10)]));
        assert!(
            !b.set_u32s(&[(12, 1)]),
            "a word past the first part is refused"
        );
        assert_eq!(
            &b.snapshot().prefix(8)[..],
            &[0, 0, 0, 9, 0, 0, 0, 10],
            "a snapshot sees them"
        );
        let g = b.finish();
        assert_eq!(g.parts()[0].as_ptr(), first, "set in place, not copied");
        assert_eq!(&g.parts()[0][..], &[0, 0, 0, 9, 0, 0, 0, 10, 0, 0, 16, 0]);
        assert_eq!(g.len(), 12 + 4096 + 4);
        // Cut back (a result too big for the reply): into the data, to the data, into
        // the first part. The first part stays where its words can be set.
        let mut t = GatherBuf::with_capacity(64);
        put_u32(t.tail(), 0);
        put_u32(t.tail(), 0);
        t.put_opaque_shared(data(4096));
        put_u32(t.tail(), 5);
        t.truncate(12 + 100);
        assert!(t.set_u32s(&[(0, 1)]), "after a cut in the data");
        t.truncate(12);
        assert!(t.set_u32s(&[(4, 2)]), "after a cut back to the data");
        t.truncate(8);
        put_u32(t.tail(), 3);
        assert!(t.set_u32s(&[(0, 4)]), "after a cut into the first part");
        let g = t.finish();
        assert_eq!(
            g.to_bytes(),
            Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 3])
        );
        // A buffer whose first part is file data has no words of its own to set.
        let mut d = GatherBuf::with_capacity(8);
        d.put_shared(data(4096));
        assert!(!d.set_u32s(&[(0, 1)]));
    }

    #[test]
    fn messages_in_the_thread_buffer_keep_their_bytes_and_kept_ones_detach() {
        // More messages held together than one thread buffer holds.
        let held: Vec<Gathered> = (0..300u32)
            .map(|i| {
                let mut b = GatherBuf::in_thread_buffer(256);
                put_u32(b.tail(), 0);
                for _ in 0..(i % 60) {
                    put_u32(b.tail(), i);
                }
                if i % 3 == 0 {
                    b.put_opaque_shared(data(2048));
                    put_u32(b.tail(), i);
                }
                assert!(b.set_u32s(&[(0, !i)]));
                b.finish()
            })
            .collect();
        for (i, g) in held.iter().enumerate() {
            let i = i as u32;
            let bytes = g.to_bytes();
            assert_eq!(&bytes[..4], &(!i).to_be_bytes(), "message {i}");
            let words = (i % 60) as usize;
            assert!(bytes[4..4 + 4 * words]
                .chunks(4)
                .all(|w| w == i.to_be_bytes()));
            let detached = g.detached();
            assert_eq!(&detached, g, "a detached copy is the same message");
            for (a, b) in detached.parts().iter().zip(g.parts()) {
                if b.len() < SHARE_MIN {
                    assert_ne!(a.as_ptr(), b.as_ptr(), "small parts are copied");
                } else {
                    assert_eq!(a.as_ptr(), b.as_ptr(), "file data is shared");
                }
            }
        }
    }
}
