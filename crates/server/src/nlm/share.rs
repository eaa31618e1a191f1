//! DOS share reservations of NLM (NLM4_SHARE, NLM4_UNSHARE; X/Open XNFS §10.14.6):
//! a host's owner opens a file with an access (none, read, write, both) and denies
//! others a mode. They conflict among NLM hosts only, as knfsd's do (NFSv4 has its own
//! share reservations with OPEN).

use std::collections::HashMap;
use std::sync::Mutex;

use txnfs_state::{ClientId, FileId};

/// Share reservations kept at most per file; past it SHARE is refused.
pub const MAX_SHARES_PER_FILE: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Share {
    host: ClientId,
    owner: Vec<u8>,
    /// Bit 1 read, bit 2 write (`fsh4_access`).
    access: u32,
    /// Bit 1 deny read, bit 2 deny write (`fsh4_mode`).
    deny: u32,
}

/// Why a SHARE is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareError {
    /// Another owner's reservation conflicts.
    Denied,
    /// Too many reservations on the file.
    NoSpace,
}

#[derive(Default)]
pub struct Shares {
    files: Mutex<HashMap<FileId, Vec<Share>>>,
}

impl Shares {
    /// SHARE: `owner` of `host` takes (`access`, `deny`) on `file`; its own earlier
    /// reservation there is replaced.
    pub fn share(
        &self,
        file: FileId,
        host: ClientId,
        owner: &[u8],
        access: u32,
        deny: u32,
    ) -> Result<(), ShareError> {
        let mut files = super::lock(&self.files);
        let list = files.entry(file).or_default();
        let conflict = list.iter().any(|s| {
            !(s.host == host && s.owner == owner) && (access & s.deny != 0 || deny & s.access != 0)
        });
        if conflict {
            return Err(ShareError::Denied);
        }
        list.retain(|s| !(s.host == host && s.owner == owner));
        if list.len() >= MAX_SHARES_PER_FILE {
            return Err(ShareError::NoSpace);
        }
        list.push(Share {
            host,
            owner: owner.to_vec(),
            access,
            deny,
        });
        Ok(())
    }

    /// UNSHARE: the reservation of `owner` of `host` on `file` goes.
    pub fn unshare(&self, file: FileId, host: ClientId, owner: &[u8]) {
        let mut files = super::lock(&self.files);
        if let Some(list) = files.get_mut(&file) {
            list.retain(|s| !(s.host == host && s.owner == owner));
            if list.is_empty() {
                files.remove(&file);
            }
        }
    }

    /// Whether `host` holds a reservation.
    pub fn holds(&self, host: ClientId) -> bool {
        super::lock(&self.files)
            .values()
            .any(|list| list.iter().any(|s| s.host == host))
    }

    /// Every reservation of `host` goes (FREE_ALL, a reboot).
    pub fn release_host(&self, host: ClientId) {
        let mut files = super::lock(&self.files);
        files.retain(|_, list| {
            list.retain(|s| s.host != host);
            !list.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_modes_conflict_between_owners() {
        let s = Shares::default();
        s.share(1, 1, b"a", 1, 2).unwrap(); // read, deny write
        assert_eq!(s.share(1, 2, b"b", 2, 0), Err(ShareError::Denied));
        s.share(1, 2, b"b", 1, 0).unwrap();
        // The owner's own reservation is replaced, not in conflict.
        s.share(1, 1, b"a", 3, 0).unwrap();
        s.unshare(1, 1, b"a");
        s.release_host(2);
        s.share(1, 3, b"c", 3, 3).unwrap();
    }
}
