//! Storage backends (the data path's bottom layer, like Ganesha's FSALs).
//!
//! A backend names objects by a [`FileKey`]: an opaque identity that stays valid across
//! server restarts for as long as the object exists (the local backend uses the kernel's
//! file handle; the memory backend an inode number). The server wraps keys into NFS file
//! handles (adding the export id and a MAC so clients cannot forge them); backends never
//! see NFS types. All calls are synchronous (a backend call is a plain syscall); a layer
//! must not rely on which thread makes one: the [`OpCtx`] says which COMPOUND it is for.
//!
//! Backends stack (see `docs/adr/0009-backend-layers.md`): a [`layer::Layer`] is a
//! backend that holds the backend below it and forwards what it does not change. Every
//! call on behalf of a COMPOUND, reads as well as changes, gets the [`OpCtx`] of the
//! COMPOUND it belongs to (only the export-level facts [`Backend::root`] and
//! [`Backend::clone_method`] take none), and [`Backend::begin_compound`] /
//! [`Backend::end_compound`] bracket a COMPOUND, so a layer can group a COMPOUND's calls
//! (undo logs, locks, fault injection) by the context alone, whichever thread makes them.

use bytes::Bytes;

mod blocking;
pub mod layer;
pub mod local;
pub mod memory;
mod reflink;
pub mod txn;
mod waitclock;
mod watch;

pub use waitclock::WaitClock;
pub use watch::{DirEvent, DirWatch, DirWatchHandle, Watch, WatchHandle, WatchKind};

/// Opaque, restart-stable identity of an object inside one backend (at most
/// [`MAX_KEY_LEN`] bytes).
pub type FileKey = Bytes;

/// The largest key a backend may produce (leaves room in the 128-byte NFS handle for the
/// export id and MAC).
pub const MAX_KEY_LEN: usize = 88;

/// Reads of at least this many bytes may go through a pipe ([`Backend::read_piped`],
/// ADR 0065): below, copying costs less than the pipe's four system calls, and the
/// server does not ask (a layer's `read_piped` may lock as its `read` does).
pub const PIPED_READ_MIN: u32 = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    BlockDev,
    CharDev,
    Fifo,
    Socket,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attrs {
    pub ftype: FileType,
    /// Permission bits including setuid/setgid/sticky (mask 0o7777).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub space_used: u64,
    /// (major, minor) for device nodes, else (0, 0).
    pub rdev: (u32, u32),
    /// Identifies the file system the object lives on.
    pub fsid: u64,
    /// Unique per object within `fsid`, stable across restarts (the inode number).
    pub fileid: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// Moves on every modification of data or metadata (NFSv4 `change`). Never goes back
    /// while the server runs.
    pub change: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    ServerNow,
    Client(Timestamp),
}

/// Attribute changes; `None` leaves a field unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

impl SetAttrs {
    pub fn is_empty(&self) -> bool {
        *self == SetAttrs::default()
    }
}

/// How a regular file is created (NFSv4 createmode4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Create or open the existing file (the given attributes are applied only when
    /// the file is new, except `size`, which applies in both cases).
    Unchecked,
    /// Fail with `Exists` if the name exists.
    Guarded,
    /// Exactly-once create: the verifier is stored with the file (in its atime/mtime, as
    /// knfsd does); a retry with the same verifier opens the file, another gives `Exists`.
    Exclusive([u8; 8]),
}

/// A non-regular object to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    Directory,
    Symlink(Bytes),
    Fifo,
    Socket,
    BlockDev(u32, u32),
    CharDev(u32, u32),
}

/// One directory entry ("." and ".." are never returned).
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: Bytes,
    /// Resume reading after this entry by passing this cookie to `readdir`. Never 0.
    pub cookie: u64,
    pub key: FileKey,
    pub attrs: Attrs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStats {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
    pub max_name_len: u32,
}

/// Backend failures; the server maps each to one NFS4ERR_*.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("stale file handle")]
    Stale,
    #[error("invalid name")]
    BadName,
    #[error("name too long")]
    NameTooLong,
    #[error("invalid argument")]
    Inval,
    #[error("no space left")]
    NoSpace,
    #[error("quota exceeded")]
    Quota,
    #[error("read-only file system")]
    ReadOnly,
    #[error("file too large")]
    FileTooBig,
    #[error("too many links")]
    MLink,
    #[error("cross-device link or rename")]
    XDev,
    #[error("symbolic link loop")]
    SymlinkLoop,
    #[error("not a symbolic link")]
    NotSymlink,
    #[error("operation not supported")]
    NotSupp,
    /// SEEK: no data at or after the offset, or the offset is at or past the end of
    /// file (NFS4ERR_NXIO).
    #[error("no such offset")]
    Nxio,
    /// The named extended attribute does not exist (NFS4ERR_NOXATTR).
    #[error("no such extended attribute")]
    NoXattr,
    /// An extended attribute's value (or the list of names) is larger than the caller
    /// takes or the file system allows (NFS4ERR_XATTR2BIG).
    #[error("extended attribute too large")]
    XattrTooBig,
    /// A layer refuses the call for now (e.g. a conflicting transaction holds the
    /// object); the client should retry later (NFS4ERR_DELAY).
    #[error("conflict, retry later")]
    Conflict,
    #[error("I/O error: {0}")]
    Io(String),
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// The longest name (one path component, in bytes) a backend accepts.
pub const NAME_MAX: usize = 255;

/// Checks one path component the way every backend does: empty, ".", "..", or containing
/// '/' or NUL gives `BadName`; longer than [`NAME_MAX`] bytes gives `NameTooLong`.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(BackendError::BadName);
    }
    if name.len() > NAME_MAX {
        return Err(BackendError::NameTooLong);
    }
    Ok(())
}

/// The largest extended-attribute value a backend takes (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 64 << 10;

/// Checks an extended-attribute name as RFC 8276 sends it (without `user.`) the way
/// every backend does: empty or containing NUL gives `Inval`; longer than Linux's
/// 255 bytes with the `user.` prefix gives `NameTooLong`.
pub fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(BackendError::Inval);
    }
    if name.len() > 255 - b"user.".len() {
        return Err(BackendError::NameTooLong);
    }
    Ok(())
}

/// Caller identity for ownership of new objects and permission checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// Who is calling and on behalf of which COMPOUND: handed to every backend call (but
/// [`Backend::root`] and [`Backend::clone_method`]), and to the COMPOUND hooks. A call
/// made outside any COMPOUND (tests, tools, a layer's own housekeeping) passes a context
/// with `compound` 0, e.g. [`OpCtx::for_creds`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpCtx {
    /// The caller; new objects belong to it (see [`Backend::create_file`]).
    pub creds: Creds,
    /// The NFS client id, when the COMPOUND runs in a session.
    pub client: Option<u64>,
    /// Unique per COMPOUND within one server run (never 0 for a real COMPOUND; 0 marks
    /// calls made outside any COMPOUND, e.g. by tests or tools).
    pub compound: u64,
    /// The COMPOUND is a transaction (ADR 0021): all of its changes happen or none do.
    /// Only a `txn` layer honours this; every other backend refuses such a COMPOUND in
    /// [`Backend::begin_compound`] with `NotSupp`, so it never runs non-atomically.
    pub txn: bool,
    /// Where a transactional COMPOUND stands in its transaction (one COMPOUND, or one of
    /// several; ADR 0021).
    pub span: TxnSpan,
    /// Where the COMPOUND's waits for others (a transaction's locks) are counted, so the
    /// server can leave them out of its execution time.
    pub waited: WaitClock,
}

/// The part a transactional COMPOUND plays in its transaction. A transaction of
/// several COMPOUNDs is named by the id the server gave it at `Begin`; its changes stay
/// invisible to everyone else, and undoable, until `Commit`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TxnSpan {
    /// The transaction is this COMPOUND: it commits at its end if every op succeeded.
    #[default]
    Whole,
    /// The first COMPOUND of transaction `id`, which stays open after it.
    Begin(u64),
    /// A further COMPOUND of the open transaction `id`.
    Continue(u64),
    /// The last COMPOUND of transaction `id`: it commits after its ops.
    Commit(u64),
    /// Roll transaction `id` back.
    Abort(u64),
}

impl TxnSpan {
    /// The transaction's name: its id, or the COMPOUND's for a one-COMPOUND one.
    pub fn key(self, compound: u64) -> u64 {
        match self {
            TxnSpan::Whole => compound,
            TxnSpan::Begin(id)
            | TxnSpan::Continue(id)
            | TxnSpan::Commit(id)
            | TxnSpan::Abort(id) => id,
        }
    }

    /// Does the transaction end with this COMPOUND (if it succeeds)?
    pub fn ends(self) -> bool {
        matches!(
            self,
            TxnSpan::Whole | TxnSpan::Commit(_) | TxnSpan::Abort(_)
        )
    }
}

impl OpCtx {
    /// A context outside any COMPOUND acting as `creds` (tests, tools).
    pub fn for_creds(creds: Creds) -> Self {
        OpCtx {
            creds,
            client: None,
            compound: 0,
            txn: false,
            span: TxnSpan::Whole,
            waited: WaitClock::default(),
        }
    }
}

/// How a directory's `change` moved across one mutation (NFSv4 `change_info4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirChange {
    pub before: u64,
    pub after: u64,
    /// True when nothing else changed the directory between `before` and `after` (the
    /// values were taken under the same lock as the mutation).
    pub atomic: bool,
}

/// What [`Backend::create_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub key: FileKey,
    pub attrs: Attrs,
    /// False when an existing file was opened (Unchecked, or an Exclusive retry).
    pub created: bool,
    /// The directory's change (before == after when nothing was created).
    pub dir: DirChange,
}

/// What [`Backend::make_node`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub key: FileKey,
    pub attrs: Attrs,
    pub dir: DirChange,
}

/// The two directories of a rename (the same values twice when they are one directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenameChange {
    pub from: DirChange,
    pub to: DirChange,
}

/// What [`Backend::link`] did: the file's new attributes and the directory's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    pub attrs: Attrs,
    pub dir: DirChange,
}

/// How [`Backend::clone_range`] shares data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneMethod {
    /// The destination shares the source's blocks (copy-on-write, e.g. FICLONERANGE on
    /// XFS or Btrfs): cheap, and no extra space until either side is written.
    Reflink,
    /// The bytes are copied (the time and space of a write of `len` bytes).
    Copy,
}

/// What [`Backend::seek`] looks for (NFSv4.2 SEEK, `lseek` SEEK_DATA / SEEK_HOLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}

/// A hint about how a range of a file will be used ([`Backend::advise`]; NFSv4.2
/// IO_ADVISE, `posix_fadvise`). Only the hints that act on the file's cached pages,
/// the same for every reader: the per-descriptor ones (sequential, random) would
/// steer one shared descriptor for every client at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// The range will be read soon: start reading it into the cache.
    WillNeed,
    /// The range will not be read again soon: its clean cached pages may go.
    DontNeed,
}

/// A transaction journal's counters ([`Backend::journal_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Bytes of records appended since the journal opened (framing included; a rewind
    /// does not take them back).
    pub appended_bytes: u64,
    /// Records appended since the journal opened.
    pub records: u64,
    /// Its length now (header included; a rewind shortens it).
    pub size: u64,
}

/// How [`Backend::setxattr`] treats an existing attribute (RFC 8276 `setxattr_option4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Either,
    /// Fail with `Exists` if the attribute exists.
    Create,
    /// Fail with `NoXattr` if it does not.
    Replace,
}

/// How an object's `change` moved across one change of its extended attributes.
pub type XattrChange = DirChange;

/// Hands the [`Backend`] methods, with their docs, to the macro `$then`, which writes an
/// item from them: `backend_trait` writes the trait itself, and `layer` writes the
/// `Layer` trait (each method forwards to the backend below) and its blanket `Backend`
/// impl. A method is declared here once and every one of those follows. Required methods
/// end in `;`; the provided ones (the COMPOUND hooks) carry their default body.
macro_rules! with_backend_methods {
    ($then:ident) => {
        $then! {
            required {
                /// The export's root directory. Without an [`OpCtx`]: a fact about the export,
                /// fixed when the backend opens (the server asks once, outside any COMPOUND),
                /// not something a COMPOUND reads.
                fn root(&self) -> Result<FileKey>;
                fn getattr(&self, cx: &OpCtx, key: &FileKey) -> Result<Attrs>;
                /// Look a name up in a directory, never following a final symlink.
                fn lookup(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<(FileKey, Attrs)>;
                /// The parent of a directory. At the export root, returns `NotFound` (the server
                /// itself decides what is above an export).
                fn lookup_parent(&self, cx: &OpCtx, dir: &FileKey) -> Result<(FileKey, Attrs)>;
                fn setattr(&self, cx: &OpCtx, key: &FileKey, attrs: &SetAttrs) -> Result<Attrs>;
                /// Read up to `count` bytes at `offset`; the flag is true at end of file. The
                /// server calls it inline on a runtime worker (small reads): a backend whose
                /// read must wait for a device does that part through `blocking::may_block`
                /// (the local backend: what the page cache lacks, ADR 0040).
                fn read(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<(Bytes, bool)>;
                /// Write `data` at `offset`; with `sync` the data (and the size) are on stable
                /// storage before this returns. Returns the post-write attributes.
                fn write(&self, cx: &OpCtx, key: &FileKey, offset: u64, data: &[u8], sync: bool) -> Result<Attrs>;
                /// Flush a file's data to stable storage.
                fn commit(&self, cx: &OpCtx, key: &FileKey) -> Result<()>;
                /// Create (or, per `mode`, open) a regular file. Returns the key, the attributes,
                /// whether the file was newly created, and the directory's change.
                ///
                /// A new object belongs to `cx.creds.uid` and `cx.creds.gid` (or, in a set-group-ID
                /// directory, to the directory's group); `attrs.uid` / `attrs.gid`, when given,
                /// override that, so the server must refuse values the caller may not set. Its mode
                /// is exactly `attrs.mode` (default 0o644 for files, 0o755 for directories), with
                /// no umask. With `Exclusive`, `attrs.atime`/`attrs.mtime` are ignored (the
                /// verifier lives there; set the times afterwards). An existing directory gives
                /// `IsDir`, an existing symlink `SymlinkLoop` (Unchecked) or `Exists`, another
                /// non-regular object `Exists`.
                fn create_file(&self, cx: &OpCtx, dir: &FileKey, name: &[u8], mode: CreateMode, attrs: &SetAttrs) -> Result<Created>;
                /// Create a directory, symlink, fifo, socket or device node; fails with `Exists`.
                /// Ownership and mode as for `create_file`; `attrs.size` gives `Inval`, and so does
                /// an empty symlink target or one containing NUL.
                fn make_node(&self, cx: &OpCtx, dir: &FileKey, name: &[u8], kind: &NodeKind, attrs: &SetAttrs) -> Result<Made>;
                /// Remove a non-directory or an empty directory (a non-empty one gives `NotEmpty`).
                /// Once the last link of an object is gone, its key is `Stale`.
                fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange>;
                /// POSIX rename semantics (replaces a compatible target atomically).
                fn rename(&self, cx: &OpCtx, from_dir: &FileKey, from: &[u8], to_dir: &FileKey, to: &[u8]) -> Result<RenameChange>;
                fn link(&self, cx: &OpCtx, file: &FileKey, dir: &FileKey, name: &[u8]) -> Result<Linked>;
                fn readlink(&self, cx: &OpCtx, key: &FileKey) -> Result<Bytes>;
                /// Entries after `cookie` (0 = from the start), at most `max_entries`; the flag is
                /// true when the end of the directory was reached. Cookies stay valid across calls
                /// and across entries being added or removed elsewhere in the directory.
                ///
                /// Cookies are opaque and never 0, but a backend may hand out any other value (the
                /// local backend passes the file system's `d_off` through, which can be small); a
                /// server that must avoid NFS's reserved cookies 1 and 2 maps them itself. A page
                /// may come back empty with the flag false only if `max_entries` is 0; it may come
                /// back empty with the flag true.
                fn readdir(&self, cx: &OpCtx, dir: &FileKey, cookie: u64, max_entries: usize) -> Result<(Vec<DirEntry>, bool)>;
                fn statfs(&self, cx: &OpCtx, key: &FileKey) -> Result<FsStats>;
                /// Make `len` bytes of `dst` at `dst_off` equal to `src` at `src_off` (both regular
                /// files of this backend; `dst` grows if needed), e.g. to save a range before a
                /// write overwrites it and to put it back on undo. `len` 0 means "to the end of
                /// `src`". Returns how the data was shared: [`CloneMethod::Reflink`] only when the
                /// blocks are really shared, else [`CloneMethod::Copy`].
                fn clone_range(&self, cx: &OpCtx, src: &FileKey, src_off: u64, dst: &FileKey, dst_off: u64, len: u64) -> Result<CloneMethod>;
                /// What [`Backend::clone_range`] does on this backend when the ranges are suitably
                /// aligned (decided once, when the backend is opened). Without an [`OpCtx`], like
                /// [`Backend::root`]: a fact about the export, not a call on a COMPOUND's behalf.
                fn clone_method(&self) -> CloneMethod;
                /// Keep `key`'s object alive while a client has it open: until the matching
                /// [`Backend::release`], it stays reachable by its key (getattr, read, write,
                /// setattr) even after REMOVE or a RENAME over it took its last name, as a
                /// POSIX open file does (the open state keeps the object alive). Counted:
                /// every successful `hold` needs one `release`. Fails like `getattr` when the
                /// object is already gone.
                fn hold(&self, cx: &OpCtx, key: &FileKey) -> Result<()>;
                /// Give back one [`Backend::hold`]; after the last one, an object without
                /// names is freed.
                fn release(&self, cx: &OpCtx, key: &FileKey);
            }
            provided {
                /// The type and fileid of `key`: what a READ or WRITE under an open,
                /// lock or delegation stateid needs to know of its file. Both never change
                /// while the object lives, so a backend may answer from a cache without
                /// a stat (the local one does); unlike [`Backend::getattr`], an answer
                /// does not say the object still has a link.
                fn identity(&self, cx: &OpCtx, key: &FileKey) -> Result<(FileType, u64)> {
                    let a = self.getattr(cx, key)?;
                    Ok((a.ftype, a.fileid))
                }
                /// A COMPOUND whose context is `cx` starts using this backend (called once per
                /// COMPOUND and export, before the first call on its behalf). An error fails the op
                /// that touched the export; `Conflict` tells the client to retry later. A
                /// transactional COMPOUND (`cx.txn`) is refused with `NotSupp` unless a layer
                /// that makes it atomic (`txn`) overrides this.
                fn begin_compound(&self, cx: &OpCtx) -> Result<()> {
                    if cx.txn {
                        return Err(BackendError::NotSupp);
                    }
                    Ok(())
                }
                /// The COMPOUND of `cx` is done (`ok`: every op succeeded). Called once for every
                /// successful `begin_compound`, before the reply is sent or cached. An error
                /// says a transaction (`cx.txn`) asked to commit could not be made durable
                /// and was rolled back: the server reports the COMPOUND as failed.
                fn end_compound(&self, cx: &OpCtx, ok: bool) -> Result<()> {
                    let _ = (cx, ok);
                    Ok(())
                }
                /// The COMPOUNDs (`OpCtx::compound`) whose transactions were cut off by the
                /// last stop and rolled back when this backend opened: a reply the server
                /// stored for one of them before its commit must be forgotten.
                fn rolled_back_at_start(&self) -> Vec<u64> {
                    Vec::new()
                }
                /// The counters of the transaction journal of this stack (`txn` keeps
                /// one), for `txnfs stats`; `None` when no layer journals.
                fn journal_stats(&self) -> Option<JournalStats> {
                    None
                }
                /// NFSv4.2 ALLOCATE: reserve storage for `len` bytes at `offset` of a regular
                /// file so that later writes there cannot fail for lack of space; a range
                /// past the end of file extends the file (as `fallocate` mode 0). The data
                /// read back does not change. Returns the attributes after.
                fn allocate(&self, cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
                    let _ = (cx, key, offset, len);
                    Err(BackendError::NotSupp)
                }
                /// NFSv4.2 DEALLOCATE: `len` bytes at `offset` read back as zeros and, where
                /// the file system can, take no storage (punch a hole); the size does not
                /// change. Returns the attributes after.
                fn deallocate(&self, cx: &OpCtx, key: &FileKey, offset: u64, len: u64) -> Result<Attrs> {
                    let _ = (cx, key, offset, len);
                    Err(BackendError::NotSupp)
                }
                /// NFSv4.2 SEEK: the first offset at or after `offset` that starts data
                /// (`Data`) or a hole (`Hole`; the end of file counts as one). `Nxio` when
                /// `offset` is at or past the end of file, or no data follows it.
                fn seek(&self, cx: &OpCtx, key: &FileKey, offset: u64, what: SeekWhat) -> Result<u64> {
                    let _ = (cx, key, offset, what);
                    Err(BackendError::NotSupp)
                }
                /// Acts on `advice` for `len` bytes at `offset` (0: to the end of file) if
                /// this backend can; whether it did. Never changes what is read back.
                fn advise(&self, cx: &OpCtx, key: &FileKey, offset: u64, len: u64, advice: Advice) -> Result<bool> {
                    let _ = (cx, key, offset, len, advice);
                    Ok(false)
                }
                /// Whether this backend stores extended attributes ([`Backend::getxattr`] and
                /// the rest; NFSv4.2 `xattr_support`). Names are those of the user namespace
                /// without its `user.` prefix, as RFC 8276 sends them.
                fn xattr_support(&self) -> bool {
                    false
                }
                /// The value of extended attribute `name` (`NoXattr` if there is none).
                fn getxattr(&self, cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<Bytes> {
                    let _ = (cx, key, name);
                    Err(BackendError::NotSupp)
                }
                /// Set extended attribute `name` to `value` as `how` says.
                fn setxattr(&self, cx: &OpCtx, key: &FileKey, name: &[u8], value: &[u8], how: XattrSet) -> Result<XattrChange> {
                    let _ = (cx, key, name, value, how);
                    Err(BackendError::NotSupp)
                }
                /// The names of the object's extended attributes, in a stable order.
                fn listxattrs(&self, cx: &OpCtx, key: &FileKey) -> Result<Vec<Bytes>> {
                    let _ = (cx, key);
                    Err(BackendError::NotSupp)
                }
                /// Remove extended attribute `name` (`NoXattr` if there is none).
                fn removexattr(&self, cx: &OpCtx, key: &FileKey, name: &[u8]) -> Result<XattrChange> {
                    let _ = (cx, key, name);
                    Err(BackendError::NotSupp)
                }
                /// The size of the regular file `name` in the directory `dir`, looked
                /// at without opening the file or taking any lock: a hint for placing a
                /// request before it runs (an OPEN that would truncate an existing
                /// non-empty file, ADR 0059). `None`: no such regular file, or this
                /// backend cannot tell cheaply.
                fn peek_size(&self, dir: &FileKey, name: &[u8]) -> Option<u64> {
                    let _ = (dir, name);
                    None
                }
                /// Whether `key`'s object lies inside this export's tree, as far as the
                /// backend can tell: the `txn` layer asks before every undo step, which
                /// must never touch anything outside its export. A backend whose keys can
                /// name nothing else (memory) says yes; `NotFound`/`Stale`: it is gone.
                fn contains(&self, key: &FileKey) -> Result<bool> {
                    let _ = key;
                    Ok(true)
                }
                /// Watch the regular file `key` for accesses from outside the server that
                /// conflict with a delegation of `kind` (ADR 0027), for as long as the
                /// returned [`Watch`] lives. The server asks when it grants a delegation
                /// and drops the watch when the file's last delegation ends.
                ///
                /// `Ok(None)`: nothing but the server can reach this backend's files (the
                /// memory backend), no watch is needed and the delegation stands.
                /// `Err(Conflict)`: the file is open outside in a way the delegation could
                /// not be protected from (open for writing, or for a write delegation open
                /// at all): grant none. Any other error: grant none either.
                fn watch_file(&self, cx: &OpCtx, key: &FileKey, kind: WatchKind) -> Result<Option<Watch>> {
                    let _ = (cx, key, kind);
                    Ok(None)
                }
                /// Watch the directory `key` for entries created, removed or renamed from
                /// outside the server (ADR 0047), for as long as the returned [`DirWatch`]
                /// lives; the server's own changes through this backend are left out. The
                /// server asks when it grants a directory delegation and drops the watch
                /// when the directory's last one ends.
                ///
                /// `Ok(None)`: nothing but the server can reach this backend's files (the
                /// memory backend). Any error: grant no directory delegation.
                fn watch_dir(&self, cx: &OpCtx, key: &FileKey) -> Result<Option<DirWatch>> {
                    let _ = (cx, key);
                    Ok(None)
                }
            }
        }
    };
}
pub(crate) use with_backend_methods;

/// Writes the [`Backend`] trait from the list in `with_backend_methods`: the list is
/// already the trait's items, so they pass through as they are.
macro_rules! backend_trait {
    (required { $($required:tt)* } provided { $($provided:tt)* }) => {
        /// The storage interface. Names passed in are single path components that the server
        /// has already validated (non-empty, no '/', no NUL, not "." or ".."); backends check
        /// again and answer `BadName` rather than trusting that.
        pub trait Backend: Send + Sync + 'static {
            $($required)*
            $($provided)*
            /// [`Backend::read`] with the data left in the page cache: `Some` when the
            /// backend put it into a pipe by reference (`splice`), for the server to
            /// splice into the socket without copying it (ADR 0065); `None` when it
            /// cannot (then the server calls `read`). Not forwarded by a [`Layer`]
            /// unless it says so: a layer that changes reads must see them.
            fn read_piped(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<Option<(txnfs_xdr::Piped, bool)>> {
                let _ = (cx, key, offset, count);
                Ok(None)
            }
        }
    };
}

with_backend_methods!(backend_trait);
