//! Mounts for the tests that need a particular file system (as root): a tmpfs or bind
//! mount, or a loop image with a fresh XFS or Btrfs.

use std::path::Path;
use std::process::Command;

/// Runs `mount` (as root) and unmounts on drop.
pub struct Mounted(std::path::PathBuf);

impl Mounted {
    /// Mounts or fails the test: these tests need root (the server runs as root too),
    /// and a test that quietly skipped its checks would pass without testing anything.
    pub fn new(args: &[&str], target: &Path) -> Self {
        let out = Command::new("mount").args(args).arg(target).output();
        match out {
            Ok(o) if o.status.success() => Mounted(target.to_path_buf()),
            Ok(o) => panic!(
                "mount {args:?} {} failed (run the tests as root): {}",
                target.display(),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("cannot run mount: {e}"),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Not lazy: a loop device is released only when its file system is unmounted.
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A file-backed loop device with a fresh file system, mounted under a temp dir;
/// unmounting on drop also frees the loop device (`mount -o loop` sets autoclear).
pub struct LoopFs {
    // Fields drop in order: unmount first, then remove the mount point and the image.
    _mounted: Mounted,
    pub mnt: tempfile::TempDir,
    _image: tempfile::TempDir,
}

impl LoopFs {
    pub fn new(mkfs: &str, size: &str) -> Self {
        Self::with_args(mkfs, &[], size)
    }

    /// Like `new`, passing `args` to `mkfs` (e.g. `-m reflink=0`).
    pub fn with_args(mkfs: &str, args: &[&str], size: &str) -> Self {
        let image_dir = tempfile::tempdir().unwrap();
        let image = image_dir.path().join("fs.img");
        let ok = Command::new("truncate")
            .args(["-s", size])
            .arg(&image)
            .status()
            .unwrap();
        assert!(ok.success(), "truncate failed");
        let out = Command::new(mkfs).arg("-q").args(args).arg(&image).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("{mkfs} failed: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => panic!("{mkfs} not runnable ({e}): apt-get install btrfs-progs xfsprogs"),
        }
        let mnt = tempfile::tempdir().unwrap();
        let image = image.to_string_lossy().into_owned();
        let mounted = Mounted::new(&["-o", "loop", &image], mnt.path());
        LoopFs {
            _mounted: mounted,
            mnt,
            _image: image_dir,
        }
    }
}
