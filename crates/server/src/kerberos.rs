//! Kerberos (RPCSEC_GSS, ADR 0051) on the server side of the NFS service: the
//! configuration (keytab, principal map), and which local identity a verified
//! principal acts as.
//!
//! The map file has one principal a line, `#` comments and blank lines ignored:
//!
//! ```text
//! alice@EXAMPLE.TEST   1000 1000
//! backup@EXAMPLE.TEST  34   34   4,24
//! ```
//!
//! (principal, uid, gid, and optionally the supplementary gids, comma-separated,
//! brackets allowed). A principal without a line acts as the local user of its name
//! (`alice@ANY.REALM` → `alice` of /etc/passwd, with the groups /etc/group gives
//! her) when there is one and it has no instance (`nfs/host@REALM` is a machine);
//! else as the export rule's anonymous user (`anonuid`/`anongid`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use txnfs_backend::Creds;

/// `txnfs serve --keytab FILE --gss-map FILE`, or TOML `kerberos = { keytab = ..., map = ... }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KerberosConfig {
    /// The keytab with the service keys (`nfs/HOST@REALM`). Unset: the library's
    /// default (`KRB5_KTNAME`, else /etc/krb5.keytab).
    #[serde(default)]
    pub keytab: Option<PathBuf>,
    /// The principal → uid/gid map file.
    #[serde(default)]
    pub map: Option<PathBuf>,
}

impl KerberosConfig {
    /// The acceptor credential from the keytab (fails naming what is missing:
    /// the library's package, the keytab, its keys).
    pub fn acceptor(&self) -> Result<std::sync::Arc<txnfs_rpc::gss::GssServer>, KerberosError> {
        txnfs_rpc::gss::GssServer::new(&txnfs_rpc::gss::GssServerConfig {
            keytab: self.keytab.clone(),
        })
        .map_err(|e| KerberosError::Keytab {
            keytab: self
                .keytab
                .as_ref()
                .map_or_else(|| "the default keytab".into(), |p| p.display().to_string()),
            why: e.to_string(),
        })
    }
}

/// A bad map file or keytab.
#[derive(Debug, thiserror::Error)]
pub enum KerberosError {
    #[error("principal map {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("principal map {path} line {line}: {why} (expected: PRINCIPAL UID GID [GID,GID...])")]
    Line {
        path: String,
        line: usize,
        why: String,
    },
    #[error("Kerberos keytab {keytab}: {why}")]
    Keytab { keytab: String, why: String },
}

/// The server's RPCSEC_GSS acceptor: on when Kerberos is configured or an export
/// rule names a Kerberos flavour (then with the default keytab).
pub fn acceptor_for(
    server: &crate::server::Server,
) -> Result<Option<Arc<txnfs_rpc::gss::GssServer>>, KerberosError> {
    use crate::exportrules::Flavor;
    let wanted = server.exports.snapshot().exports.values().any(|e| {
        e.clients.rules().iter().any(|r| {
            r.sec
                .iter()
                .any(|f| matches!(f, Flavor::Krb5 | Flavor::Krb5i | Flavor::Krb5p))
        })
    });
    if let Some(g) = server.gss.get() {
        return Ok(Some(g.clone()));
    }
    let acceptor = match (&server.cfg.kerberos, wanted) {
        (Some(k), _) => k.acceptor()?,
        (None, true) => KerberosConfig::default().acceptor()?,
        (None, false) => return Ok(None),
    };
    Ok(Some(server.gss.get_or_init(|| acceptor).clone()))
}

/// How long a local user looked up in /etc/passwd is remembered.
const LOCAL_USER_TTL: Duration = Duration::from_secs(60);
/// Principals remembered at once (the cache is emptied when it is full).
const MAX_REMEMBERED: usize = 4096;

/// Principal → identity, from the map file and the local users. The map file's lines
/// can be replaced while serving ([`PrincipalMap::replace_with`], a reload): every call
/// looks its principal up anew, so the next call of a principal acts as the new line
/// says.
#[derive(Debug, Default)]
pub struct PrincipalMap {
    lines: RwLock<Arc<HashMap<String, Creds>>>,
    /// Where local users come from (tests point these elsewhere).
    passwd: PathBuf,
    group: PathBuf,
    /// Local-user lookups (every call of a principal needs one).
    remembered: Mutex<HashMap<String, (Instant, Option<Creds>)>>,
}

impl PrincipalMap {
    /// The map of `cfg` (empty without a file).
    pub fn load(cfg: Option<&KerberosConfig>) -> Result<Self, KerberosError> {
        let mut map = PrincipalMap {
            lines: RwLock::default(),
            passwd: PathBuf::from("/etc/passwd"),
            group: PathBuf::from("/etc/group"),
            remembered: Mutex::default(),
        };
        if let Some(path) = cfg.and_then(|c| c.map.as_deref()) {
            let text = std::fs::read_to_string(path).map_err(|err| KerberosError::Read {
                path: path.display().to_string(),
                err,
            })?;
            let lines = parse(&text).map_err(|(line, why)| KerberosError::Line {
                path: path.display().to_string(),
                line,
                why,
            })?;
            map.lines = RwLock::new(Arc::new(lines));
        }
        Ok(map)
    }

    /// Look local users up in these files instead of /etc's.
    pub fn with_user_files(mut self, passwd: &Path, group: &Path) -> Self {
        self.passwd = passwd.to_path_buf();
        self.group = group.to_path_buf();
        self
    }

    /// The principals the map file names.
    pub fn len(&self) -> usize {
        self.current_lines().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn current_lines(&self) -> Arc<HashMap<String, Creds>> {
        self.lines.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes `next`'s map file lines (it was loaded, and so checked, by
    /// [`PrincipalMap::load`]); local users are looked up again from the next call on.
    /// Where local users come from stays as it was.
    pub fn replace_with(&self, next: PrincipalMap) {
        let lines = next.current_lines();
        *self.lines.write().unwrap_or_else(|p| p.into_inner()) = lines;
        self.remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The identity `principal` acts as, or `None` (the anonymous user).
    pub fn creds_of(&self, principal: &str) -> Option<Creds> {
        if let Some(c) = self.current_lines().get(principal) {
            return Some(c.clone());
        }
        let (name, _realm) = principal.rsplit_once('@').unwrap_or((principal, ""));
        if name.is_empty() || name.contains('/') {
            return None;
        }
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, c)) = remembered.get(principal) {
            if at.elapsed() < LOCAL_USER_TTL {
                return c.clone();
            }
        }
        let c = local_user(&self.passwd, &self.group, name);
        if remembered.len() >= MAX_REMEMBERED {
            remembered.clear();
        }
        remembered.insert(principal.to_string(), (Instant::now(), c.clone()));
        c
    }
}

/// The map file's lines; an error is (line number, what is wrong).
fn parse(text: &str) -> Result<HashMap<String, Creds>, (usize, String)> {
    let mut out = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |why: String| (i + 1, why);
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !(3..=4).contains(&fields.len()) {
            return Err(err(format!("{} fields", fields.len())));
        }
        let number = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| err(format!("{s:?} is not a number")))
        };
        let gids = match fields.get(3) {
            None => Vec::new(),
            Some(list) => list
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .filter(|g| !g.trim().is_empty())
                .map(|g| number(g.trim()))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let creds = Creds {
            uid: number(fields[1])?,
            gid: number(fields[2])?,
            gids,
        };
        if out.insert(fields[0].to_string(), creds).is_some() {
            return Err(err(format!("{} is mapped twice", fields[0])));
        }
    }
    Ok(out)
}

/// `name` from a passwd(5) file, with its supplementary groups from group(5).
fn local_user(passwd: &Path, group: &Path, name: &str) -> Option<Creds> {
    let text = std::fs::read_to_string(passwd).ok()?;
    let (uid, gid) = text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })?;
    let gids = std::fs::read_to_string(group)
        .map(|t| {
            t.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    let member = f.len() >= 4 && f[3].split(',').any(|m| m.trim() == name);
                    member.then(|| f[2].parse::<u32>().ok()).flatten()
                })
                .filter(|&g| g != gid)
                .collect()
        })
        .unwrap_or_default();
    Some(Creds { uid, gid, gids })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32, gid: u32, gids: &[u32]) -> Creds {
        Creds {
            uid,
            gid,
            gids: gids.to_vec(),
        }
    }

    #[test]
    fn map_lines_parse_and_errors_name_the_line() {
        let m =
            parse("# who is who\n\nalice@EX.TEST 1000 1000\nbob@EX.TEST 1001 100 [4,24] # ops\n")
                .unwrap();
        assert_eq!(m["alice@EX.TEST"], creds(1000, 1000, &[]));
        assert_eq!(m["bob@EX.TEST"], creds(1001, 100, &[4, 24]));
        assert_eq!(parse("a@X 1\n").unwrap_err().0, 1);
        assert_eq!(
            parse("\na@X 1 x\n").unwrap_err(),
            (2, "\"x\" is not a number".into())
        );
        assert_eq!(parse("a@X 1 1\na@X 2 2\n").unwrap_err().0, 2);
    }

    #[test]
    fn unmapped_principals_fall_back_to_local_users_then_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        let passwd = dir.path().join("passwd");
        let group = dir.path().join("group");
        std::fs::write(
            &passwd,
            "root:x:0:0::/root:/bin/sh\ncarol:x:1002:1002::/h:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            &group,
            "carol:x:1002:\nstaff:x:50:carol,dave\nother:x:51:dave\n",
        )
        .unwrap();
        let map_file = dir.path().join("map");
        std::fs::write(&map_file, "alice@EX.TEST 1000 1000 7\n").unwrap();
        let cfg = KerberosConfig {
            keytab: None,
            map: Some(map_file),
        };
        let map = PrincipalMap::load(Some(&cfg))
            .unwrap()
            .with_user_files(&passwd, &group);
        assert_eq!(map.creds_of("alice@EX.TEST"), Some(creds(1000, 1000, &[7])));
        assert_eq!(
            map.creds_of("carol@EX.TEST"),
            Some(creds(1002, 1002, &[50]))
        );
        assert_eq!(
            map.creds_of("alice@OTHER.TEST"),
            None,
            "the map is per principal"
        );
        assert_eq!(map.creds_of("nobody-here@EX.TEST"), None);
        assert_eq!(
            map.creds_of("carol/admin@EX.TEST"),
            None,
            "an instance is not the user"
        );
        assert_eq!(map.creds_of("nfs/localhost@EX.TEST"), None);
    }

    #[test]
    fn a_replaced_map_answers_the_next_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let (passwd, group) = (dir.path().join("passwd"), dir.path().join("group"));
        std::fs::write(&passwd, "carol:x:1002:1002::/h:/bin/sh\n").unwrap();
        std::fs::write(&group, "").unwrap();
        let map_file = dir.path().join("map");
        std::fs::write(&map_file, "alice@EX.TEST 1000 1000\n").unwrap();
        let cfg = KerberosConfig {
            keytab: None,
            map: Some(map_file.clone()),
        };
        let map = PrincipalMap::load(Some(&cfg))
            .unwrap()
            .with_user_files(&passwd, &group);
        assert_eq!(map.creds_of("carol@EX.TEST"), Some(creds(1002, 1002, &[])));
        std::fs::write(
            &map_file,
            "alice@EX.TEST 2000 2000\ncarol@EX.TEST 3000 3000 [5]\n",
        )
        .unwrap();
        map.replace_with(PrincipalMap::load(Some(&cfg)).unwrap());
        assert_eq!(map.len(), 2);
        assert_eq!(map.creds_of("alice@EX.TEST"), Some(creds(2000, 2000, &[])));
        assert_eq!(map.creds_of("carol@EX.TEST"), Some(creds(3000, 3000, &[5])));
        // Without a map file: local users again, from the same files as before.
        map.replace_with(PrincipalMap::load(None).unwrap());
        assert!(map.is_empty());
        assert_eq!(map.creds_of("alice@EX.TEST"), None);
        assert_eq!(map.creds_of("carol@EX.TEST"), Some(creds(1002, 1002, &[])));
    }

    #[test]
    fn a_missing_map_file_is_an_error_naming_it() {
        let cfg = KerberosConfig {
            keytab: None,
            map: Some(PathBuf::from("/nonexistent/txnfs-map")),
        };
        let e = PrincipalMap::load(Some(&cfg)).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/txnfs-map"), "{e}");
    }
}
