//! File data held in a pipe instead of memory (ADR 0065): the server splices a large
//! READ's data from the file into a pipe, so the pipe holds references to the page
//! cache's pages, not a copy, and the connection's writer splices the pipe into the
//! socket. A consumer that needs the bytes in memory (RPCSEC_GSS wrapping, TLS, a
//! reply kept for a retransmission, tests) reads them out of the pipe once, a copy,
//! and every later use shares that buffer.

use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

/// `len` bytes waiting in a pipe (its read end), or in memory once read out.
pub struct Piped {
    len: usize,
    state: Mutex<State>,
    /// Counts the pipes alive, if the maker bounds them ([`Piped::counted`]).
    live: Option<&'static AtomicUsize>,
}

enum State {
    /// The pipe's read end; the pipe holds exactly `len` bytes.
    Pipe(File),
    /// Read out into memory.
    Mem(Bytes),
    /// The pipe was handed to a writer ([`Piped::take_pipe`]).
    Taken,
}

impl Piped {
    /// `len` bytes that `read_end` (a pipe's read end, the write end closed or idle)
    /// holds, and nothing more.
    pub fn new(read_end: File, len: usize) -> Piped {
        Piped {
            len,
            state: Mutex::new(State::Pipe(read_end)),
            live: None,
        }
    }

    /// This pipe counted in `live` until it is dropped (the caller added it).
    pub fn counted(mut self, live: &'static AtomicUsize) -> Piped {
        self.live = Some(live);
        self
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes in memory: read out of the pipe the first time (one copy), shared
    /// after that. Fails only if the pipe held fewer bytes than `len`, or was taken.
    pub fn to_bytes(&self) -> io::Result<Bytes> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            State::Mem(b) => Ok(b.clone()),
            State::Taken => Err(io::Error::other("piped data already sent")),
            State::Pipe(f) => {
                let mut buf = Vec::with_capacity(self.len);
                f.take(self.len as u64).read_to_end(&mut buf)?;
                if buf.len() != self.len {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("pipe held {} of {} bytes", buf.len(), self.len),
                    ));
                }
                let b = Bytes::from(buf);
                *state = State::Mem(b.clone());
                Ok(b)
            }
        }
    }

    /// The pipe, to splice from, if its bytes were never read into memory; this value
    /// then holds nothing any more (and [`Piped::to_bytes`] fails). `None` if they were
    /// read out: use those.
    pub fn take_pipe(&self) -> Option<File> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*state, State::Pipe(_)) {
            return None;
        }
        match std::mem::replace(&mut *state, State::Taken) {
            State::Pipe(f) => Some(f),
            _ => None,
        }
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        if let Some(live) = self.live {
            live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Piped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Piped({} bytes)", self.len)
    }
}
