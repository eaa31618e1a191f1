//! The server's small persistent state: the handle secret, a boot counter and the list
//! of clients that held state (for the grace period). Files are written atomically
//! (temporary file, fsync, rename) so a `kill -9` never leaves a torn one.

use bytes::Bytes;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub struct StateDir {
    dir: PathBuf,
}

fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::OpenOptions::new()
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
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
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
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
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
        let prev = fs::read_to_string(&p)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let next = prev.wrapping_add(1).max(1);
        write_atomic(&p, format!("{next}\n").as_bytes())?;
        Ok(next)
    }

    pub fn load_clients(&self) -> Vec<Bytes> {
        fs::read_to_string(self.dir.join("clients"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| unhex(l.trim()))
            .map(Bytes::from)
            .collect()
    }

    pub fn save_clients(&self, owners: &[Bytes]) -> io::Result<()> {
        let mut s = String::new();
        for o in owners {
            s.push_str(&hex(o));
            s.push('\n');
        }
        write_atomic(&self.dir.join("clients"), s.as_bytes())
    }
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
        let k2 = StateDir::open(&d).unwrap().handle_secret().unwrap();
        assert_eq!(k1, k2);
        let e1 = s.next_boot_epoch().unwrap();
        let e2 = s.next_boot_epoch().unwrap();
        assert_eq!(e2, e1 + 1);
        let owners = vec![
            Bytes::from_static(b"Linux NFSv4.1 vm1"),
            Bytes::from_static(b"\x00\xff"),
        ];
        s.save_clients(&owners).unwrap();
        assert_eq!(s.load_clients(), owners);
        fs::remove_dir_all(&d).unwrap();
    }
}
