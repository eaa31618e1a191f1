//! NFS-Ganesha as the reference server: the one configuration every tool
//! uses (the e2e harness, `txnfs bench compare`, and the Linux-client VM
//! tests through `txnfs bench ganesha-conf`), and the one way to start it.
//!
//! What matters about the configuration:
//! * FSAL VFS exports, NFSv4.1 (and 4.2) only, TCP only, on 127.0.0.1.
//! * pNFS off (`PNFS_MDS = false`): Ganesha advertises a pNFS metadata
//!   server by default although FSAL VFS serves no layouts, and nfs-rs then
//!   sends a failing LAYOUTGET before I/O.
//! * Graceless unless a test asks for a grace period; numeric owners;
//!   no root squash (the tests run as root).
//!
//! Ganesha still uses fixed paths such as `/var/run/ganesha`, so tools that
//! may run beside each other serialise with [`lock`].

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One EXPORT block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// Host directory.
    pub path: PathBuf,
    /// Pseudo path clients mount ("/export").
    pub pseudo: String,
    pub read_only: bool,
}

/// A Ganesha configuration; [`Config::render`] gives the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub port: u16,
    /// Recovery (state) directory.
    pub recovery_root: PathBuf,
    pub exports: Vec<Export>,
    /// No grace period after start (the default).
    pub graceless: bool,
    /// Lease time in seconds (also the grace period); Ganesha's default when `None`.
    pub lease_time: Option<u32>,
    /// Grant delegations (Ganesha's default is off).
    pub delegations: bool,
    /// Serve NFSv3 too, with MOUNT on this port (Ganesha's MOUNT has a port of its own;
    /// exports are mounted by their pseudo path). `None`: NFSv4 only.
    pub nfsv3_mount_port: Option<u16>,
}

/// The pseudo path of the single export of [`Config::single`].
pub const EXPORT_PSEUDO: &str = "/export";

impl Config {
    /// One read-write export of `export_dir` at `/export`, graceless.
    pub fn single(port: u16, export_dir: &Path, recovery_root: &Path) -> Config {
        Config {
            port,
            recovery_root: recovery_root.to_path_buf(),
            exports: vec![Export {
                path: export_dir.to_path_buf(),
                pseudo: EXPORT_PSEUDO.into(),
                read_only: false,
            }],
            graceless: true,
            lease_time: None,
            delegations: false,
            nfsv3_mount_port: None,
        }
    }

    /// The configuration file.
    pub fn render(&self) -> String {
        let lease = self
            .lease_time
            .map(|l| format!("    Lease_Lifetime = {l};\n    Grace_Period = {l};\n"))
            .unwrap_or_default();
        let (protocols, v3) = match self.nfsv3_mount_port {
            Some(p) => (
                "3, 4",
                format!("    MNT_Port = {p};\n    Mount_Path_Pseudo = true;\n"),
            ),
            None => ("4", String::new()),
        };
        let mut conf = format!(
            r#"# NFS-Ganesha (FSAL VFS) as txnfs's reference server; rendered by txnfs-testbed's
# ganesha module (crates/testbed/src/ganesha.rs). NFSv4.1 only, TCP only, 127.0.0.1 only.
NFS_CORE_PARAM {{
    Bind_addr = 127.0.0.1;
    NFS_Port = {port};
    Protocols = {protocols};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
{v3}}}
NFSv4 {{
    Graceless = {graceless};
    # Ganesha advertises a pNFS MDS by default although FSAL VFS serves no
    # layouts; nfs-rs would then send a failing LAYOUTGET before I/O.
    PNFS_MDS = false;
    PNFS_DS = false;
    Minor_Versions = 1, 2;
    RecoveryRoot = {state};
    Only_Numeric_Owners = true;
    Delegations = {delegations};
{lease}}}
NFS_KRB5 {{ Active_krb5 = false; }}
"#,
            port = self.port,
            protocols = protocols,
            v3 = v3,
            graceless = self.graceless,
            delegations = self.delegations,
            state = self.recovery_root.display()
        );
        for (i, e) in self.exports.iter().enumerate() {
            conf.push_str(&format!(
                r#"EXPORT {{
    Export_Id = {id};
    Path = {path};
    Pseudo = {pseudo};
    Access_Type = {access};
    Squash = No_Root_Squash;
    Protocols = {protocols};
    Transports = TCP;
    SecType = sys;
    Delegations = {deleg};
    FSAL {{ Name = VFS; }}
}}
"#,
                id = i + 1,
                protocols = protocols,
                path = e.path.display(),
                pseudo = e.pseudo,
                access = if e.read_only { "RO" } else { "RW" },
                deleg = if self.delegations { "RW" } else { "None" },
            ));
        }
        conf
    }
}

/// `ganesha.nfsd` on `PATH`.
pub fn find_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("ganesha.nfsd"))
        .find(|p| p.is_file())
}

/// What to install when Ganesha is missing.
pub const INSTALL_HINT: &str = "apt-get install nfs-ganesha nfs-ganesha-vfs";

/// Write `conf` to `work/ganesha.conf` and start `bin` in the foreground
/// (`-F`) with its log at `log` (also its stdout and stderr) and its PID
/// file in `work`. The caller owns the child and stops it by PID.
pub fn spawn(bin: &Path, conf: &Config, work: &Path, log: &Path) -> std::io::Result<Child> {
    let conf_path = work.join("ganesha.conf");
    std::fs::write(&conf_path, conf.render())?;
    let out = OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    Command::new(bin)
        .arg("-F")
        .arg("-L")
        .arg(log)
        .arg("-f")
        .arg(&conf_path)
        .arg("-p")
        .arg(work.join("ganesha.pid"))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
}

/// Lock file serialising Ganesha instances of tools that may run at once
/// (`flock` locks conflict between open file descriptions, also inside one
/// process).
pub const LOCK_PATH: &str = "/tmp/txnfs-ganesha.lock";

/// Take the machine-wide Ganesha lock (held while the returned file is
/// open), waiting up to `wait` with a note on stderr while another run has it.
pub fn lock(wait: Duration) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)?;
    let start = Instant::now();
    let mut told = false;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !told {
                    eprintln!("waiting for another Ganesha run to finish (lock {LOCK_PATH})");
                    told = true;
                }
                if start.elapsed() > wait {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("another Ganesha run held {LOCK_PATH} for over {wait:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_export_config() {
        let c =
            Config::single(12345, Path::new("/tmp/x/export"), Path::new("/tmp/x/state")).render();
        for needle in [
            "NFS_Port = 12345;",
            "Bind_addr = 127.0.0.1;",
            "Path = /tmp/x/export;",
            "Pseudo = /export;",
            "Access_Type = RW;",
            "Graceless = true;",
            "PNFS_MDS = false;",
            "PNFS_DS = false;",
            "Minor_Versions = 1, 2;",
            "RecoveryRoot = /tmp/x/state;",
            "FSAL { Name = VFS; }",
            "Protocols = 4;",
        ] {
            assert!(c.contains(needle), "{needle} missing in\n{c}");
        }
        assert!(!c.contains("Lease_Lifetime"));
        assert_eq!(c.matches("EXPORT {").count(), 1);
    }

    #[test]
    fn several_exports_lease_and_grace() {
        let mut c = Config::single(1, Path::new("/e"), Path::new("/s"));
        c.graceless = false;
        c.lease_time = Some(10);
        c.exports.push(Export {
            path: "/ro".into(),
            pseudo: "/x/ro".into(),
            read_only: true,
        });
        let text = c.render();
        assert!(text.contains("Graceless = false;"));
        assert!(text.contains("Lease_Lifetime = 10;\n    Grace_Period = 10;"));
        assert!(text.contains(
            "Export_Id = 2;\n    Path = /ro;\n    Pseudo = /x/ro;\n    Access_Type = RO;"
        ));
    }
}
