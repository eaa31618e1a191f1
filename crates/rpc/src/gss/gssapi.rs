//! The few GSS-API v2 calls (RFC 2744, the C bindings) RPCSEC_GSS needs, from the
//! system's MIT Kerberos library `libgssapi_krb5.so.2` loaded at run time: a binary
//! built here runs where the library is missing, and only Kerberos then fails, with an
//! error naming the Debian package (`libgssapi-krb5-2`).
//!
//! Every handle the library returns is owned by one Rust value that releases it on
//! drop ([`Cred`], [`SecContext`]); buffers the library allocates are copied into a
//! `Vec` and released at once.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

type OmUint32 = u32;
type Handle = *mut c_void;

#[repr(C)]
struct BufferDesc {
    length: usize,
    value: *mut c_void,
}

impl BufferDesc {
    fn empty() -> Self {
        BufferDesc {
            length: 0,
            value: ptr::null_mut(),
        }
    }

    /// A descriptor that borrows `data` (the library only reads input buffers).
    fn borrowing(data: &[u8]) -> Self {
        BufferDesc {
            length: data.len(),
            value: data.as_ptr() as *mut c_void,
        }
    }
}

#[repr(C)]
struct OidDesc {
    length: OmUint32,
    elements: *const c_void,
}

#[repr(C)]
struct OidSetDesc {
    count: usize,
    elements: *const OidDesc,
}

#[repr(C)]
struct KeyValueElement {
    key: *const c_char,
    value: *const c_char,
}

#[repr(C)]
struct KeyValueSet {
    count: OmUint32,
    elements: *const KeyValueElement,
}

/// The Kerberos v5 mechanism, 1.2.840.113554.1.2.2 (RFC 1964), DER body.
pub const KRB5_MECH_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];
/// GSS_C_NT_HOSTBASED_SERVICE, 1.2.840.113554.1.2.1.4: names like `nfs@host`.
const NT_HOSTBASED_SERVICE: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x01, 0x04];

const GSS_C_INITIATE: c_int = 1;
const GSS_C_ACCEPT: c_int = 2;
const GSS_C_INDEFINITE: OmUint32 = 0xffff_ffff;
const GSS_C_MUTUAL_FLAG: OmUint32 = 2;
const GSS_C_REPLAY_FLAG: OmUint32 = 4;
const GSS_C_SEQUENCE_FLAG: OmUint32 = 8;
const GSS_C_INTEG_FLAG: OmUint32 = 32;
const GSS_C_CONF_FLAG: OmUint32 = 16;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
/// Routine errors are the bits 16..24 of a major status; the low bits are
/// supplementary information (GSS_S_CONTINUE_NEEDED is bit 0).
const ROUTINE_ERROR_MASK: OmUint32 = 0x00ff_0000;
const CALLING_ERROR_MASK: OmUint32 = 0xff00_0000;
pub const GSS_S_CONTINUE_NEEDED: OmUint32 = 1;
pub const GSS_S_CONTEXT_EXPIRED: OmUint32 = 12 << 16;
pub const GSS_S_NO_CONTEXT: OmUint32 = 8 << 16;
pub const GSS_S_BAD_SIG: OmUint32 = 6 << 16;

/// The Debian package that ships the library.
pub const LIBRARY_PACKAGE: &str = "libgssapi-krb5-2";
const LIBRARY_FILE: &str = "libgssapi_krb5.so.2";

/// A failed GSS-API call.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GssError {
    #[error("Kerberos unavailable: cannot load {LIBRARY_FILE} ({why}); install the Debian package {LIBRARY_PACKAGE}")]
    NoLibrary { why: String },
    #[error("{call}: {message} (major {major:#x}, minor {minor})")]
    Failed {
        call: &'static str,
        major: u32,
        minor: u32,
        message: String,
    },
    #[error("{0} contains a NUL byte")]
    BadString(String),
}

impl GssError {
    /// The major status of a failed call (0 for the others).
    pub fn major(&self) -> u32 {
        match self {
            GssError::Failed { major, .. } => *major,
            _ => 0,
        }
    }
}

type ImportName =
    unsafe extern "C" fn(*mut OmUint32, *const BufferDesc, *const OidDesc, *mut Handle) -> OmUint32;
type AcquireCredFrom = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    OmUint32,
    *const OidSetDesc,
    c_int,
    *const KeyValueSet,
    *mut Handle,
    *mut c_void,
    *mut OmUint32,
) -> OmUint32;
type AcceptSecContext = unsafe extern "C" fn(
    *mut OmUint32,
    *mut Handle,
    Handle,
    *const BufferDesc,
    *const c_void,
    *mut Handle,
    *mut *const OidDesc,
    *mut BufferDesc,
    *mut OmUint32,
    *mut OmUint32,
    *mut Handle,
) -> OmUint32;
type InitSecContext = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    *mut Handle,
    Handle,
    *const OidDesc,
    OmUint32,
    OmUint32,
    *const c_void,
    *const BufferDesc,
    *mut *const OidDesc,
    *mut BufferDesc,
    *mut OmUint32,
    *mut OmUint32,
) -> OmUint32;
type GetMic = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    OmUint32,
    *const BufferDesc,
    *mut BufferDesc,
) -> OmUint32;
type VerifyMic = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    *const BufferDesc,
    *const BufferDesc,
    *mut OmUint32,
) -> OmUint32;
type Wrap = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    c_int,
    OmUint32,
    *const BufferDesc,
    *mut c_int,
    *mut BufferDesc,
) -> OmUint32;
type Unwrap = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    *const BufferDesc,
    *mut BufferDesc,
    *mut c_int,
    *mut OmUint32,
) -> OmUint32;
type DisplayName =
    unsafe extern "C" fn(*mut OmUint32, Handle, *mut BufferDesc, *mut *const OidDesc) -> OmUint32;
type DisplayStatus = unsafe extern "C" fn(
    *mut OmUint32,
    OmUint32,
    c_int,
    *const OidDesc,
    *mut OmUint32,
    *mut BufferDesc,
) -> OmUint32;
type ReleaseBuffer = unsafe extern "C" fn(*mut OmUint32, *mut BufferDesc) -> OmUint32;
type ReleaseHandle = unsafe extern "C" fn(*mut OmUint32, *mut Handle) -> OmUint32;
type DeleteSecContext =
    unsafe extern "C" fn(*mut OmUint32, *mut Handle, *mut BufferDesc) -> OmUint32;

/// The library's entry points. The `Library` is kept alive as long as them.
struct Api {
    _lib: libloading::Library,
    import_name: ImportName,
    acquire_cred_from: AcquireCredFrom,
    accept_sec_context: AcceptSecContext,
    init_sec_context: InitSecContext,
    get_mic: GetMic,
    verify_mic: VerifyMic,
    wrap: Wrap,
    unwrap: Unwrap,
    display_name: DisplayName,
    display_status: DisplayStatus,
    release_buffer: ReleaseBuffer,
    release_name: ReleaseHandle,
    release_cred: ReleaseHandle,
    delete_sec_context: DeleteSecContext,
}

fn load() -> Result<Api, String> {
    // SAFETY: loading MIT's GSS-API library runs its ELF constructors, which only set
    // up its own mutexes and error tables; it has no initialisation order requirements.
    let lib = unsafe { libloading::Library::new(LIBRARY_FILE) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: `$ty` is the C prototype of `$name` in MIT's <gssapi/gssapi.h>
            // (RFC 2744 §7, gss_acquire_cred_from from <gssapi/gssapi_ext.h>); the
            // pointer is copied out and used only while `_lib` (kept in `Api`) lives.
            let s: libloading::Symbol<$ty> =
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| e.to_string())?;
            *s
        }};
    }
    Ok(Api {
        import_name: sym!("gss_import_name", ImportName),
        acquire_cred_from: sym!("gss_acquire_cred_from", AcquireCredFrom),
        accept_sec_context: sym!("gss_accept_sec_context", AcceptSecContext),
        init_sec_context: sym!("gss_init_sec_context", InitSecContext),
        get_mic: sym!("gss_get_mic", GetMic),
        verify_mic: sym!("gss_verify_mic", VerifyMic),
        wrap: sym!("gss_wrap", Wrap),
        unwrap: sym!("gss_unwrap", Unwrap),
        display_name: sym!("gss_display_name", DisplayName),
        display_status: sym!("gss_display_status", DisplayStatus),
        release_buffer: sym!("gss_release_buffer", ReleaseBuffer),
        release_name: sym!("gss_release_name", ReleaseHandle),
        release_cred: sym!("gss_release_cred", ReleaseHandle),
        delete_sec_context: sym!("gss_delete_sec_context", DeleteSecContext),
        _lib: lib,
    })
}

fn api() -> Result<&'static Api, GssError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load)
        .as_ref()
        .map_err(|why| GssError::NoLibrary { why: why.clone() })
}

/// Whether the library can be loaded (for a clear message at start).
pub fn available() -> Result<(), GssError> {
    api().map(|_| ())
}

fn mech() -> OidDesc {
    OidDesc {
        length: KRB5_MECH_OID.len() as OmUint32,
        elements: KRB5_MECH_OID.as_ptr() as *const c_void,
    }
}

/// Copy a buffer the library allocated and release it.
fn take_buffer(api: &Api, buf: &mut BufferDesc) -> Vec<u8> {
    let out = if buf.value.is_null() || buf.length == 0 {
        Vec::new()
    } else {
        // SAFETY: the library filled `buf` with `length` bytes at `value`, valid until
        // gss_release_buffer below.
        unsafe { std::slice::from_raw_parts(buf.value as *const u8, buf.length) }.to_vec()
    };
    let mut minor = 0;
    // SAFETY: `buf` came from the library and is released exactly once.
    unsafe { (api.release_buffer)(&mut minor, buf) };
    out
}

/// The text of a status code: the GSS message, then the mechanism's (the useful one:
/// "Key table entry not found", "Ticket expired", ...).
fn status_text(api: &Api, major: OmUint32, minor: OmUint32) -> String {
    let mut parts = Vec::new();
    for (code, kind) in [(major, GSS_C_GSS_CODE), (minor, GSS_C_MECH_CODE)] {
        if code == 0 {
            continue;
        }
        let mech = mech();
        let mut more: OmUint32 = 0;
        // A bounded loop: each status has at most a few messages.
        for _ in 0..4 {
            let (mut m, mut buf) = (0, BufferDesc::empty());
            // SAFETY: all pointers are valid locals; `buf` is released by take_buffer.
            let r = unsafe { (api.display_status)(&mut m, code, kind, &mech, &mut more, &mut buf) };
            if r != 0 {
                break;
            }
            let text = String::from_utf8_lossy(&take_buffer(api, &mut buf)).into_owned();
            if !text.is_empty() {
                parts.push(text);
            }
            if more == 0 {
                break;
            }
        }
    }
    parts.join(": ")
}

fn check(api: &Api, call: &'static str, major: OmUint32, minor: OmUint32) -> Result<(), GssError> {
    if major & (ROUTINE_ERROR_MASK | CALLING_ERROR_MASK) == 0 {
        return Ok(());
    }
    Err(GssError::Failed {
        call,
        major,
        minor,
        message: status_text(api, major, minor),
    })
}

/// A credential handle (gss_cred_id_t).
pub struct Cred(Handle);

// SAFETY: MIT's credential records carry their own mutex (krb5_gss_cred_id_rec.lock);
// a handle may be used from several threads at once and released from any thread.
unsafe impl Send for Cred {}
// SAFETY: as above.
unsafe impl Sync for Cred {}

impl Drop for Cred {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            let mut minor = 0;
            // SAFETY: the handle came from gss_acquire_cred_from and is released once.
            unsafe { (api.release_cred)(&mut minor, &mut self.0) };
        }
    }
}

/// Acquire a Kerberos credential, for accepting (from `keytab`, or the library's
/// default `/etc/krb5.keytab`/`KRB5_KTNAME`) or initiating (from `ccache`, or
/// `KRB5CCNAME`'s default).
fn acquire(usage: c_int, key: &str, store: Option<&str>) -> Result<Cred, GssError> {
    let api = api()?;
    let value = store
        .map(|s| CString::new(s).map_err(|_| GssError::BadString(s.to_string())))
        .transpose()?;
    let key = CString::new(key).map_err(|_| GssError::BadString(key.to_string()))?;
    let element = value.as_ref().map(|v| KeyValueElement {
        key: key.as_ptr(),
        value: v.as_ptr(),
    });
    let set = element.as_ref().map(|e| KeyValueSet {
        count: 1,
        elements: e,
    });
    let mech = mech();
    let mechs = OidSetDesc {
        count: 1,
        elements: &mech,
    };
    let (mut minor, mut cred) = (0, ptr::null_mut());
    // SAFETY: every pointer is a valid local that outlives the call; outputs we do not
    // want are NULL, which RFC 2744 allows.
    let major = unsafe {
        (api.acquire_cred_from)(
            &mut minor,
            ptr::null_mut(),
            GSS_C_INDEFINITE,
            &mechs,
            usage,
            set.as_ref()
                .map_or(ptr::null(), |s| s as *const KeyValueSet),
            &mut cred,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    check(api, "gss_acquire_cred_from", major, minor)?;
    Ok(Cred(cred))
}

/// The acceptor credential of a server: every key of `keytab` (no name: a client may
/// ask for any service principal the keytab holds).
pub fn acceptor_cred(keytab: Option<&Path>) -> Result<Cred, GssError> {
    let keytab = keytab.map(|p| p.to_string_lossy().into_owned());
    acquire(GSS_C_ACCEPT, "keytab", keytab.as_deref())
}

/// The initiator credential of a client from its credential cache.
pub fn initiator_cred(ccache: Option<&str>) -> Result<Cred, GssError> {
    acquire(GSS_C_INITIATE, "ccache", ccache)
}

/// A security context (gss_ctx_id_t), being established or complete.
pub struct SecContext(Handle);

// SAFETY: a context may be used from any thread, but not from two at once (its
// sequence state is unlocked); every user keeps it behind a `Mutex` or `&mut`.
unsafe impl Send for SecContext {}

impl Drop for SecContext {
    fn drop(&mut self) {
        if self.0.is_null() {
            return;
        }
        if let Ok(api) = api() {
            let mut minor = 0;
            // SAFETY: the handle came from accept/init_sec_context and is deleted once;
            // no output token is asked for.
            unsafe { (api.delete_sec_context)(&mut minor, &mut self.0, ptr::null_mut()) };
        }
    }
}

/// One step of establishing a context.
pub struct Step {
    /// The token to send to the peer (may be empty).
    pub token: Vec<u8>,
    /// GSS_S_CONTINUE_NEEDED: another token is expected.
    pub continue_needed: bool,
}

/// What a completed acceptor step tells about the initiator.
pub struct Accepted {
    pub step: Step,
    /// The client's principal, e.g. `alice@TXNFS.TEST` (known once complete).
    pub principal: Option<String>,
    /// Seconds the context stays valid.
    pub lifetime_secs: u32,
}

impl SecContext {
    /// No context yet: the first accept/init step creates it.
    pub fn new() -> Self {
        SecContext(ptr::null_mut())
    }

    /// Accept the initiator's `token` (RFC 2744 §5.1).
    pub fn accept(&mut self, cred: &Cred, token: &[u8]) -> Result<Accepted, GssError> {
        let api = api()?;
        let input = BufferDesc::borrowing(token);
        let (mut minor, mut name, mut out) = (0, ptr::null_mut(), BufferDesc::empty());
        let (mut flags, mut time_rec) = (0, 0);
        // SAFETY: `self.0` is NULL or a context of this library; the input buffer
        // borrows `token`, alive for the call; outputs are valid locals.
        let major = unsafe {
            (api.accept_sec_context)(
                &mut minor,
                &mut self.0,
                cred.0,
                &input,
                ptr::null(),
                &mut name,
                ptr::null_mut(),
                &mut out,
                &mut flags,
                &mut time_rec,
                ptr::null_mut(),
            )
        };
        let token = take_buffer(api, &mut out);
        let principal = if name.is_null() {
            None
        } else {
            let p = display_name(api, name);
            let mut m = 0;
            // SAFETY: `name` came from accept_sec_context and is released once.
            unsafe { (api.release_name)(&mut m, &mut name) };
            p
        };
        check(api, "gss_accept_sec_context", major, minor)?;
        Ok(Accepted {
            step: Step {
                token,
                continue_needed: major & GSS_S_CONTINUE_NEEDED != 0,
            },
            principal,
            lifetime_secs: time_rec,
        })
    }

    /// One initiator step towards the service `target` (`nfs@host`), with the peer's
    /// last `token` (empty at first). Asks for mutual authentication, integrity and
    /// confidentiality.
    pub fn init(&mut self, cred: &Cred, target: &str, token: &[u8]) -> Result<Step, GssError> {
        let api = api()?;
        let name = import_hostbased(api, target)?;
        let mech = mech();
        let input = BufferDesc::borrowing(token);
        let (mut minor, mut out) = (0, BufferDesc::empty());
        let flags = GSS_C_MUTUAL_FLAG
            | GSS_C_REPLAY_FLAG
            | GSS_C_SEQUENCE_FLAG
            | GSS_C_INTEG_FLAG
            | GSS_C_CONF_FLAG;
        // SAFETY: as in `accept`; `name.0` is a live name released by its drop.
        let major = unsafe {
            (api.init_sec_context)(
                &mut minor,
                cred.0,
                &mut self.0,
                name.0,
                &mech,
                flags,
                0,
                ptr::null(),
                &input,
                ptr::null_mut(),
                &mut out,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        let token = take_buffer(api, &mut out);
        check(api, "gss_init_sec_context", major, minor)?;
        Ok(Step {
            token,
            continue_needed: major & GSS_S_CONTINUE_NEEDED != 0,
        })
    }

    /// The MIC of `msg` (default QOP).
    pub fn get_mic(&mut self, msg: &[u8]) -> Result<Vec<u8>, GssError> {
        let api = api()?;
        let input = BufferDesc::borrowing(msg);
        let (mut minor, mut out) = (0, BufferDesc::empty());
        // SAFETY: a complete context, a borrowed input and a local output.
        let major = unsafe { (api.get_mic)(&mut minor, self.0, 0, &input, &mut out) };
        let mic = take_buffer(api, &mut out);
        check(api, "gss_get_mic", major, minor)?;
        Ok(mic)
    }

    pub fn verify_mic(&mut self, msg: &[u8], mic: &[u8]) -> Result<(), GssError> {
        let api = api()?;
        let (m, t) = (BufferDesc::borrowing(msg), BufferDesc::borrowing(mic));
        let (mut minor, mut qop) = (0, 0);
        // SAFETY: as in `get_mic`, with two borrowed inputs.
        let major = unsafe { (api.verify_mic)(&mut minor, self.0, &m, &t, &mut qop) };
        check(api, "gss_verify_mic", major, minor)
    }

    /// Seal `msg` (encrypted: `confidential`).
    pub fn wrap(&mut self, msg: &[u8], confidential: bool) -> Result<Vec<u8>, GssError> {
        let api = api()?;
        let input = BufferDesc::borrowing(msg);
        let (mut minor, mut conf, mut out) = (0, 0, BufferDesc::empty());
        // SAFETY: as in `get_mic`.
        let major = unsafe {
            (api.wrap)(
                &mut minor,
                self.0,
                c_int::from(confidential),
                0,
                &input,
                &mut conf,
                &mut out,
            )
        };
        let sealed = take_buffer(api, &mut out);
        check(api, "gss_wrap", major, minor)?;
        if confidential && conf == 0 {
            return Err(GssError::Failed {
                call: "gss_wrap",
                major,
                minor,
                message: "confidentiality not available".into(),
            });
        }
        Ok(sealed)
    }

    /// Open a sealed token; the bool says whether it was encrypted.
    pub fn unwrap(&mut self, sealed: &[u8]) -> Result<(Vec<u8>, bool), GssError> {
        let api = api()?;
        let input = BufferDesc::borrowing(sealed);
        let (mut minor, mut conf, mut qop, mut out) = (0, 0, 0, BufferDesc::empty());
        // SAFETY: as in `get_mic`.
        let major =
            unsafe { (api.unwrap)(&mut minor, self.0, &input, &mut out, &mut conf, &mut qop) };
        let msg = take_buffer(api, &mut out);
        check(api, "gss_unwrap", major, minor)?;
        Ok((msg, conf != 0))
    }
}

impl Default for SecContext {
    fn default() -> Self {
        Self::new()
    }
}

/// A name handle, released on drop.
struct Name(Handle);

impl Drop for Name {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            let mut minor = 0;
            // SAFETY: the handle came from gss_import_name and is released once.
            unsafe { (api.release_name)(&mut minor, &mut self.0) };
        }
    }
}

fn import_hostbased(api: &Api, service: &str) -> Result<Name, GssError> {
    let input = BufferDesc::borrowing(service.as_bytes());
    let oid = OidDesc {
        length: NT_HOSTBASED_SERVICE.len() as OmUint32,
        elements: NT_HOSTBASED_SERVICE.as_ptr() as *const c_void,
    };
    let (mut minor, mut name) = (0, ptr::null_mut());
    // SAFETY: borrowed input and OID, local output.
    let major = unsafe { (api.import_name)(&mut minor, &input, &oid, &mut name) };
    check(api, "gss_import_name", major, minor)?;
    Ok(Name(name))
}

fn display_name(api: &Api, name: Handle) -> Option<String> {
    let (mut minor, mut out) = (0, BufferDesc::empty());
    // SAFETY: `name` is a live name handle; the output type is not wanted (NULL).
    let major = unsafe { (api.display_name)(&mut minor, name, &mut out, ptr::null_mut()) };
    let text = take_buffer(api, &mut out);
    (major == 0).then(|| String::from_utf8_lossy(&text).into_owned())
}

/// The library's text for a status a peer reported.
pub fn describe(major: u32, minor: u32) -> String {
    match api() {
        Ok(api) => status_text(api, major, minor),
        Err(e) => e.to_string(),
    }
}
