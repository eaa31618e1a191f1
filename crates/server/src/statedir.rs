//! The server's small persistent state: the handle secret, a boot counter and the list
//! of clients that held state (for the grace period). Files are written atomically
//! (temporary file, fsync, rename) so a `kill -9` never leaves a torn one; every write
//! uses its own temporary file, so concurrent writers never interleave in one (the
//! server also serialises client-list writes and skips outdated ones). Read errors
//! other than "not there yet" are errors: the caller refuses to start rather than
//! silently forget whom the grace period must wait for.
//!
//! One server per state directory: [`StateDir::open`] takes an exclusive `flock` on
//! `<dir>/lock` (and writes the process's PID into it) before anything else in the
//! directory is read or written, and keeps it until the `StateDir` is dropped. The
//! kernel releases it when the process dies, `kill -9` included.

use bytes::Bytes;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The durable session store lives in the state directory too (ADR 0022).
pub mod sessionstore;

pub struct StateDir {
    dir: PathBuf,
    /// `<dir>/lock`, flocked exclusively while this value lives.
    _lock: fs::File,
}

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "lock";

/// Why a state directory cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another server (process, or instance in this process) holds the directory.
    #[error(
        "state directory {} is in use by another txnfs server ({}); stop it, or give this \
         server its own --state-dir",
        dir.display(),
        holder(*pid)
    )]
    InUse { dir: PathBuf, pid: Option<u32> },
    #[error("state directory {}: {err}", dir.display())]
    Io { dir: PathBuf, err: io::Error },
}

fn holder(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("PID {p}"),
        None => "PID unknown: it has not written it yet".into(),
    }
}

/// A temporary name next to `path` that no other writer in any process uses.
fn temp_path(path: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{n}", std::process::id()));
    path.with_file_name(name)
}

pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = temp_path(path);
    let r = write_then_rename(&tmp, path, data);
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

fn write_then_rename(tmp: &Path, path: &Path, data: &[u8]) -> io::Result<()> {
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(tmp, path)?;
    if let Some(parent) = path.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl StateDir {
    /// Creates the directory if needed and locks it for this instance (see the module
    /// documentation): [`OpenError::InUse`] names the PID of the server holding it.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        let io_err = |err| OpenError::Io {
            dir: dir.to_path_buf(),
            err,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err)?;
        let lock = Self::lock(dir)?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    fn lock(dir: &Path) -> Result<fs::File, OpenError> {
        use rustix::fs::{flock, FlockOperation};
        let io_err = |err| OpenError::Io {
            dir: dir.to_path_buf(),
            err,
        };
        // Not truncated on open: the holder's PID must stay readable to a loser.
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))
            .map_err(io_err)?;
        match flock(&f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                return Err(OpenError::InUse {
                    dir: dir.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(e) => return Err(io_err(e.into())),
        }
        f.set_len(0).map_err(io_err)?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(io_err)?;
        Ok(f)
    }

    /// The 32-byte secret that authenticates file handles; created once.
    pub fn handle_secret(&self) -> io::Result<[u8; 32]> {
        let p = self.dir.join("handle-secret");
        let mut key = [0u8; 32];
        match fs::read(&p) {
            Ok(b) if b.len() == 32 => {
                key.copy_from_slice(&b);
                return Ok(key);
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not 32 bytes; remove it to make a new one (all file handles change)",
                        p.display()
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        write_atomic(&p, &key)?;
        Ok(key)
    }

    /// A number that differs on every start (stateids, session ids and client ids carry
    /// it so that those of a previous instance are recognised as stale).
    pub fn next_boot_epoch(&self) -> io::Result<u32> {
        let p = self.dir.join("boot-epoch");
        // An unreadable counter must not restart at 1: stateids of an earlier instance
        // with the same epoch would be taken for current ones.
        let prev = match fs::read_to_string(&p) {
            Ok(s) => s.trim().parse::<u32>().map_err(|_| {
                invalid(format!(
                    "{} does not hold a number; remove it to start a new count",
                    p.display()
                ))
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let next = prev.wrapping_add(1).max(1);
        write_atomic(&p, format!("{next}\n").as_bytes())?;
        Ok(next)
    }

    /// The owners of the clients that held state, saved by the previous instance (see
    /// [`StateDir::load_client_list`]).
    pub fn load_clients(&self) -> io::Result<Vec<Bytes>> {
        Ok(self.load_client_list()?.held_state)
    }

    /// The clients saved by the previous instance: none if it never saved any; an
    /// unreadable or corrupt file is an error. One line per client: its owner in hex,
    /// followed by ` session` for a client that held no state but a persistent session
    /// (ADR 0036; a line without it, as all lines before, held state).
    pub fn load_client_list(&self) -> io::Result<SavedClients> {
        let p = self.dir.join("clients");
        let text = match fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SavedClients::default()),
            Err(e) => return Err(e),
        };
        let mut saved = SavedClients::default();
        for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (owner, list) = match l.split_once(' ') {
                Some((o, SESSION_ONLY)) => (o, &mut saved.sessions_only),
                Some(_) => (l, &mut saved.held_state),
                None => (l, &mut saved.held_state),
            };
            let owner = unhex(owner).map(Bytes::from).ok_or_else(|| {
                invalid(format!(
                    "{} has a line that is not a hex owner ({l:?}); fix or remove it \
                     (removing it skips the grace period for those clients)",
                    p.display()
                ))
            })?;
            list.push(owner);
        }
        Ok(saved)
    }

    /// Save the owners of the clients that hold state (a restart waits for them).
    pub fn save_clients(&self, owners: &[Bytes]) -> io::Result<()> {
        self.save_client_list(owners, &[])
    }

    /// Save the owners of the clients that hold state and of those that hold only a
    /// persistent session (restored after a restart, not waited for).
    pub fn save_client_list(
        &self,
        held_state: &[Bytes],
        sessions_only: &[Bytes],
    ) -> io::Result<()> {
        let mut s = String::new();
        for o in held_state {
            s.push_str(&hex(o));
            s.push('\n');
        }
        for o in sessions_only {
            s.push_str(&hex(o));
            s.push(' ');
            s.push_str(SESSION_ONLY);
            s.push('\n');
        }
        write_atomic(&self.dir.join("clients"), s.as_bytes())
    }
}

/// The mark of a client-list line whose client held only a persistent session.
const SESSION_ONLY: &str = "session";

/// The clients a previous instance saved.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SavedClients {
    /// Held opens, locks or delegations: the grace period waits for them to reclaim.
    pub held_state: Vec<Bytes>,
    /// Held only a persistent session: restored, not waited for.
    pub sessions_only: Vec<Bytes>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_secret_epoch_and_clients() {
        let d = std::env::temp_dir().join(format!("txnfs-statedir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let s = StateDir::open(&d).unwrap();
        let k1 = s.handle_secret().unwrap();
        drop(s);
        let s = StateDir::open(&d).unwrap();
        let k2 = s.handle_secret().unwrap();
        assert_eq!(k1, k2);
        let e1 = s.next_boot_epoch().unwrap();
        let e2 = s.next_boot_epoch().unwrap();
        assert_eq!(e2, e1 + 1);
        let owners = vec![
            Bytes::from_static(b"Linux NFSv4.1 vm1"),
            Bytes::from_static(b"\x00\xff"),
        ];
        s.save_clients(&owners).unwrap();
        assert_eq!(s.load_clients().unwrap(), owners);
        let sessions_only = vec![Bytes::from_static(b"persistent, no state")];
        s.save_client_list(&owners[..1], &sessions_only).unwrap();
        assert_eq!(
            s.load_client_list().unwrap(),
            SavedClients {
                held_state: owners[..1].to_vec(),
                sessions_only
            }
        );
        assert_eq!(s.load_clients().unwrap(), owners[..1].to_vec());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_open_is_refused_until_the_first_is_dropped() {
        let (d, s) = fresh("lock");
        match StateDir::open(&d) {
            Err(OpenError::InUse { dir, pid }) => {
                assert_eq!(dir, d);
                assert_eq!(pid, Some(std::process::id()));
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("opened a locked state directory"),
        }
        drop(s);
        let again = StateDir::open(&d).expect("free once the holder is gone");
        drop(again);
        fs::remove_dir_all(&d).unwrap();
    }

    fn fresh(name: &str) -> (PathBuf, StateDir) {
        let d = std::env::temp_dir().join(format!("txnfs-statedir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let s = StateDir::open(&d).unwrap();
        (d, s)
    }

    #[test]
    fn unreadable_or_corrupt_files_are_errors() {
        let (d, s) = fresh("errors");
        assert_eq!(
            s.load_clients().unwrap(),
            Vec::<Bytes>::new(),
            "none saved yet"
        );
        fs::write(d.join("clients"), "6869\nnot-hex\n").unwrap();
        let e = s.load_clients().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        fs::remove_file(d.join("clients")).unwrap();
        fs::create_dir(d.join("clients")).unwrap();
        assert!(s.load_clients().is_err(), "a read error is reported");
        fs::write(d.join("boot-epoch"), "garbage").unwrap();
        assert_eq!(
            s.next_boot_epoch().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn concurrent_saves_never_tear_or_collide() {
        let (d, s) = fresh("concurrent");
        let s = std::sync::Arc::new(s);
        let threads: Vec<_> = (0..8u8)
            .map(|i| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for j in 0..20u8 {
                        let owners = vec![Bytes::from(vec![i; 64]), Bytes::from(vec![j; 64])];
                        s.save_clients(&owners).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let got = s.load_clients().unwrap();
        assert_eq!(got.len(), 2, "one whole list survives");
        assert!(got
            .iter()
            .all(|o| o.len() == 64 && o.iter().all(|b| *b == o[0])));
        let leftovers = fs::read_dir(&d)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0, "no temporary file is left behind");
        fs::remove_dir_all(&d).unwrap();
    }
}
