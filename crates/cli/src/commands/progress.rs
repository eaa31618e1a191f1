//! A one-line progress display on stderr for long copies: bytes, files, MB/s, redrawn
//! with a carriage return at most ten times a second. Shown when stderr is a terminal
//! and the copy is over 1 MiB (TXNFS_PROGRESS=1 forces it, =0 disables it).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Copies smaller than this get no progress line.
pub const THRESHOLD: u64 = 1 << 20;

pub struct Progress {
    enabled: bool,
    total_bytes: u64,
    total_files: u64,
    bytes: u64,
    files: u64,
    start: Instant,
    last: Option<Instant>,
    drawn: bool,
    /// The files done, for the line a lost connection prints.
    tally: Option<super::lost::Tally>,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl Progress {
    pub fn new(total_bytes: u64, total_files: u64) -> Progress {
        let enabled = match std::env::var("TXNFS_PROGRESS").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => std::io::stderr().is_terminal() && total_bytes > THRESHOLD,
        };
        Progress {
            enabled,
            total_bytes,
            total_files,
            bytes: 0,
            files: 0,
            start: Instant::now(),
            last: None,
            drawn: false,
            tally: None,
        }
    }

    /// Count the files done in `tally` too.
    pub fn counting(mut self, tally: super::lost::Tally) -> Progress {
        self.tally = Some(tally);
        self
    }

    /// Count bytes copied so far (of files still in progress).
    pub fn add_bytes(&mut self, n: u64) {
        self.bytes += n;
        self.draw(false);
    }

    /// Count finished files.
    pub fn add_files(&mut self, n: u64) {
        self.files += n;
        if let Some(t) = &self.tally {
            t.add(n);
        }
        self.draw(false);
    }

    fn line(&self) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let pct = if self.total_bytes > 0 {
            (self.bytes as f64 * 100.0 / self.total_bytes as f64).min(100.0)
        } else {
            100.0
        };
        format!(
            "\r{:.1}/{:.1} MiB ({pct:.0}%)  {}/{} files  {:.1} MB/s ",
            mib(self.bytes),
            mib(self.total_bytes),
            self.files,
            self.total_files,
            self.bytes as f64 / secs / 1e6
        )
    }

    fn draw(&mut self, force: bool) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if !force
            && self
                .last
                .is_some_and(|l| now - l < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        self.drawn = true;
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(self.line().as_bytes());
        let _ = e.flush();
    }

    /// Final line, then a newline (before any other message).
    pub fn finish(&mut self) {
        if self.enabled {
            self.draw(true);
            if self.drawn {
                eprintln!();
            }
            self.enabled = false;
        }
    }

    /// End the line so that an error message starts on its own line.
    pub fn interrupt(&mut self) {
        if self.enabled && self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}
