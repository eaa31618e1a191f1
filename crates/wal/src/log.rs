//! The log file: appends, group commit, restart and replacement.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::frame::{frame, framed_len, MAX_PAYLOAD};

/// When an appended record is written to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// At once, with one `pwrite` under the log's lock: the record is in the page cache
    /// (safe from `kill -9`) when [`Log::append`] returns, and on stable storage once
    /// [`Log::wait`] returns. For write-ahead records that must precede their change.
    WriteThrough,
    /// By the next group-commit leader, with the other records appended meanwhile, in
    /// one write. A record is in no file before [`Log::wait`] runs for it.
    Buffered,
}

/// A position in the log: everything appended up to it. Positions grow for the life of
/// a [`Log`] (they are not file offsets: a restart or replacement does not reset them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub(crate) u64);

impl Lsn {
    /// A position no record reaches (a record the log refused: waiting for it reports
    /// the log's failure).
    pub const NEVER: Lsn = Lsn(u64::MAX);
}

/// Counters (measurements and tests).
#[derive(Debug, Default)]
pub struct LogStats {
    /// Records appended.
    pub records: AtomicU64,
    /// Bytes appended (records with their frames; not headers, restarts or
    /// replacements).
    pub bytes: AtomicU64,
    /// `fdatasync`s of the log file (a replacement's syncs count as one).
    pub syncs: AtomicU64,
    /// Replacements of the whole file ([`Log::replace`]) written.
    pub rewrites: AtomicU64,
}

/// Why the log did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: io::Error },
    /// A write of buffered records failed earlier: those records are lost and nothing
    /// appended after them can be made durable.
    #[error("{}: failed earlier ({cause}); nothing appended since is durable", path.display())]
    Failed { path: PathBuf, cause: String },
    #[error("record of {0} bytes is too long for a durable log")]
    TooLong(usize),
}

impl From<LogError> for io::Error {
    fn from(e: LogError) -> io::Error {
        match e {
            LogError::Io { ref err, .. } => io::Error::new(err.kind(), e.to_string()),
            e => io::Error::other(e.to_string()),
        }
    }
}

type Result<T> = std::result::Result<T, LogError>;

#[cfg(test)]
pub(crate) type SyncHook = Box<dyn Fn(u64) -> io::Result<()> + Send + Sync>;

struct Inner {
    /// `None`: a log in memory only (nothing it protects outlives the process).
    file: Option<Arc<File>>,
    /// The file's length once everything appended is written.
    len: u64,
    /// The position after the last record appended.
    lsn: u64,
    /// Every position up to this one is on stable storage.
    durable: u64,
    /// Records appended and not yet written ([`Mode::Buffered`]): they go at
    /// `len - pending.len()`, or after `replace`.
    pending: Vec<u8>,
    /// Contents that replace the whole file at the next flush.
    replace: Option<Vec<u8>>,
    /// A leader is writing and syncing.
    syncing: bool,
    /// Why buffered records were lost (the log accepts nothing more).
    failed: Option<String>,
}

/// One append-only log file (see the crate documentation).
pub struct Log {
    path: PathBuf,
    mode: Mode,
    inner: Mutex<Inner>,
    synced: Condvar,
    stats: Arc<LogStats>,
    #[cfg(test)]
    pub(crate) sync_hook: Mutex<Option<SyncHook>>,
}

impl Log {
    fn with(path: PathBuf, mode: Mode, file: Option<File>, len: u64) -> Log {
        Log {
            path,
            mode,
            inner: Mutex::new(Inner {
                file: file.map(Arc::new),
                len,
                lsn: 0,
                durable: 0,
                pending: Vec::new(),
                replace: None,
                syncing: false,
                failed: None,
            }),
            synced: Condvar::new(),
            stats: Arc::default(),
            #[cfg(test)]
            sync_hook: Mutex::new(None),
        }
    }

    fn io_err(&self) -> impl Fn(io::Error) -> LogError + '_ {
        |err| LogError::Io {
            path: self.path.clone(),
            err,
        }
    }

    /// A log that lives in memory only: appends are counted, nothing is written.
    pub fn in_memory(len: u64) -> Log {
        Log::with(PathBuf::from("(memory)"), Mode::WriteThrough, None, len)
    }

    /// Opens (or creates) the log file at `path`, whose valid records end at `end` (a
    /// [`crate::scan`]'s [`crate::Recovery::end`], or the end of a header the caller
    /// will write): appends go there. With `truncate_tail`, whatever the file holds past
    /// `end` (a torn or corrupt tail) is cut off first.
    pub fn open(path: &Path, end: u64, truncate_tail: bool, mode: Mode) -> Result<Log> {
        let err = |err| LogError::Io {
            path: path.to_path_buf(),
            err,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        if truncate_tail && file.metadata().map_err(err)?.len() > end {
            file.set_len(end).map_err(err)?;
        }
        Ok(Log::with(path.to_path_buf(), mode, Some(file), end))
    }

    /// Makes `contents` the whole file at `path`, durably (temporary file, fsync,
    /// rename, fsync of the directory), and opens it as a log whose appends follow.
    pub fn create(path: &Path, contents: &[u8], mode: Mode) -> Result<Log> {
        let file = rewrite(path, contents).map_err(|err| LogError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        Ok(Log::with(
            path.to_path_buf(),
            mode,
            Some(file),
            contents.len() as u64,
        ))
    }

    /// The log's counters (shared: a store may hand them out as its own).
    pub fn stats(&self) -> &Arc<LogStats> {
        &self.stats
    }

    /// The file the log writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The file's length once everything appended is written.
    pub fn len(&self) -> u64 {
        self.lock().len
    }

    /// The position after the last record appended: [`Log::wait`] on it makes
    /// everything appended so far durable.
    pub fn end(&self) -> Lsn {
        Lsn(self.lock().lsn)
    }

    /// Whether nothing at all is in the file (not even a header).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one record (framed here) and returns the position [`Log::wait`] takes
    /// to make it durable. In [`Mode::WriteThrough`] the record is written before this
    /// returns; a failed write is reported, and the next record goes where it would have.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn> {
        if payload.len() > MAX_PAYLOAD {
            return Err(LogError::TooLong(payload.len()));
        }
        let n = framed_len(payload.len()) as u64;
        let mut g = self.lock();
        if let Some(cause) = &g.failed {
            return Err(LogError::Failed {
                path: self.path.clone(),
                cause: cause.clone(),
            });
        }
        match self.mode {
            Mode::WriteThrough => {
                if let Some(f) = &g.file {
                    let mut out = Vec::new();
                    frame(&mut out, payload);
                    f.write_all_at(&out, g.len).map_err(self.io_err())?;
                }
            }
            Mode::Buffered => frame(&mut g.pending, payload),
        }
        g.len += n;
        g.lsn += n;
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes.fetch_add(n, Ordering::Relaxed);
        Ok(Lsn(g.lsn))
    }

    /// Returns once the record at `lsn` (and every earlier one) is on stable storage.
    /// Group commit: the first waiter to find no flush running becomes the leader; it
    /// writes what is buffered and `fdatasync`s while later waiters wait for it, and
    /// every record appended before its sync is covered by it.
    ///
    /// A leader's failure to sync records already written is reported to that leader
    /// only (the next waiter tries again); a failed write of buffered records or of a
    /// replacement fails the log for good ([`LogError::Failed`]).
    pub fn wait(&self, lsn: Lsn) -> Result<()> {
        let mut g = self.lock();
        loop {
            if let Some(cause) = &g.failed {
                return Err(LogError::Failed {
                    path: self.path.clone(),
                    cause: cause.clone(),
                });
            }
            if g.durable >= lsn.0 {
                return Ok(());
            }
            if g.syncing {
                g = self.synced.wait(g).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            g.syncing = true;
            let upto = g.lsn;
            let pending = std::mem::take(&mut g.pending);
            let replace = g.replace.take();
            let at = g.len - pending.len() as u64;
            let file = g.file.clone();
            drop(g);
            let carried = replace.is_some() || !pending.is_empty();
            let result = self.flush(file, at, pending, replace, upto);
            g = self.lock();
            g.syncing = false;
            self.synced.notify_all();
            match result {
                Ok(new_file) => {
                    if let Some(f) = new_file {
                        g.file = Some(Arc::new(f));
                    }
                    g.durable = g.durable.max(upto);
                }
                Err(err) if carried => {
                    tracing::error!(
                        "{}: {err}: records were lost; nothing appended from now on is durable",
                        self.path.display()
                    );
                    g.failed = Some(err.to_string());
                }
                Err(err) => {
                    return Err(LogError::Io {
                        path: self.path.clone(),
                        err,
                    })
                }
            }
        }
    }

    /// One leader's I/O, outside the lock: the replacement (with the records buffered
    /// after it) as a new file, or the buffered records at `at`; then the sync. Returns
    /// the new file of a replacement.
    fn flush(
        &self,
        file: Option<Arc<File>>,
        at: u64,
        pending: Vec<u8>,
        replace: Option<Vec<u8>>,
        upto: u64,
    ) -> io::Result<Option<File>> {
        let Some(file) = file else {
            return Ok(None);
        };
        let new_file = match replace {
            Some(mut contents) => {
                contents.extend_from_slice(&pending);
                let f = rewrite(&self.path, &contents)?;
                self.stats.rewrites.fetch_add(1, Ordering::Relaxed);
                Some(f)
            }
            None => {
                if !pending.is_empty() {
                    file.write_all_at(&pending, at)?;
                }
                file.sync_data()?;
                None
            }
        };
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        #[cfg(not(test))]
        let _ = upto;
        #[cfg(test)]
        if let Some(hook) = &*self
            .sync_hook
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            hook(upto)?;
        }
        Ok(new_file)
    }

    /// Writes `head` at the start of the file and syncs it; appends restart right after
    /// it, and every record appended before counts as durable (it is forgotten: its
    /// bytes may remain past the new end, so records must carry something, such as a
    /// generation, that tells a reader they are stale). Buffered records are dropped.
    /// For when nothing waits on the log.
    pub fn restart(&self, head: &[u8]) -> Result<()> {
        let mut g = self.lock();
        if let Some(f) = &g.file {
            f.write_all_at(head, 0).map_err(self.io_err())?;
            f.sync_data().map_err(self.io_err())?;
            self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        g.pending.clear();
        g.replace = None;
        g.len = head.len() as u64;
        g.durable = g.lsn;
        Ok(())
    }

    /// Replaces the whole file with `contents` (a compaction: a header and the records
    /// still live, which must stand for every record appended so far). Written by the
    /// next group-commit leader as a new file (temporary file, fsync, rename, fsync of
    /// the directory); records appended after this call follow `contents` in it.
    pub fn replace(&self, contents: Vec<u8>) {
        let mut g = self.lock();
        g.len = contents.len() as u64;
        g.pending.clear();
        g.replace = Some(contents);
    }
}

/// Writes `data` as the whole file at `path` (temporary file, fsync, rename, fsync of
/// the directory) and returns it opened for writing.
fn rewrite(path: &Path, data: &[u8]) -> io::Result<File> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        File::open(parent)?.sync_all()?;
    }
    OpenOptions::new().read(true).write(true).open(path)
}
