//! Stacking backends: a [`Layer`] sits on a lower [`Backend`] and forwards every call it
//! does not change; a [`LayerRegistry`] builds an export's stack from layer names.
//!
//! A layer implements only what it changes: every [`Layer`] method defaults to calling
//! the same method on [`Layer::lower`], and every `Layer` is a `Backend` (blanket impl),
//! so layers stack to any depth behind an `Arc<dyn Backend>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::local::LocalBackend;
use crate::memory::{MemoryBackend, MemoryLimits};
use crate::{
    Advice, Attrs, Backend, BackendError, CloneMethod, CreateMode, Created, DirChange, DirEntry,
    DirWatch, FileKey, FileType, FsStats, JournalStats, Linked, Made, NodeKind, OpCtx,
    RenameChange, Result, SeekWhat, SetAttrs, Watch, WatchKind, XattrChange, XattrSet,
};

/// Writes the [`Layer`] trait and the blanket `impl<L: Layer> Backend for L` from the
/// list of [`Backend`] methods (`with_backend_methods` in the crate root): each `Layer`
/// method defaults to the same call on [`Layer::lower`], and each `Backend` method of a
/// layer calls its `Layer` method. The provided `Backend` methods forward too: a layer
/// passes the COMPOUND hooks down unless it overrides them.
macro_rules! layer_forwarding {
    (
        required {
            $($(#[$rdoc:meta])* fn $rname:ident(&self $(, $rarg:ident: $rty:ty)*) $(-> $rret:ty)?;)*
        }
        provided {
            $(
                $(#[$pdoc:meta])*
                fn $pname:ident(&self $(, $parg:ident: $pty:ty)*) $(-> $pret:ty)? $body:block
            )*
        }
    ) => {
        layer_forwarding! {
            $(fn $rname(&self $(, $rarg: $rty)*) $(-> $rret)?;)*
            $(fn $pname(&self $(, $parg: $pty)*) $(-> $pret)?;)*
        }
    };
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        /// A backend stacked on another. Override what the layer changes; the rest
        /// forwards.
        pub trait Layer: Send + Sync + 'static {
            /// The backend below this layer.
            fn lower(&self) -> &dyn Backend;
            $(
                fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                    self.lower().$name($($arg),*)
                }
            )*
            /// Not forwarded unless the layer says so (it would bypass the layer's
            /// `read`): `None`, and the server calls `read`.
            fn read_piped(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<Option<(txnfs_xdr::Piped, bool)>> {
                let _ = (cx, key, offset, count);
                Ok(None)
            }
        }

        impl<L: Layer> Backend for L {
            $(
                fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                    Layer::$name(self $(, $arg)*)
                }
            )*
            fn read_piped(&self, cx: &OpCtx, key: &FileKey, offset: u64, count: u32) -> Result<Option<(txnfs_xdr::Piped, bool)>> {
                Layer::read_piped(self, cx, key, offset, count)
            }
        }
    };
}

crate::with_backend_methods!(layer_forwarding);

// ---------------------------------------------------------------------------------------
// Building a stack from names

/// Where and how one layer of a stack is opened.
#[derive(Debug, Clone, Default)]
pub struct LayerArgs {
    /// The export's directory (used by `local`).
    pub path: PathBuf,
    /// `key=value` parameters given after the layer's name (`memory:max_bytes=1G`).
    pub params: BTreeMap<String, String>,
    /// A directory for the layer's persistent state of this export (the `txn` layer's
    /// journal), inside the server's state directory; `None` when the stack is built
    /// without one (tests), and a layer then keeps that state in memory.
    pub state: Option<PathBuf>,
    /// The identity of the export (ADR 0023), recorded in the layer's durable state
    /// (the `txn` layer's journal) so that it is never applied to anything else.
    pub identity: Vec<u8>,
}

type BaseFn = dyn Fn(&LayerArgs) -> Result<Arc<dyn Backend>> + Send + Sync;
type WrapFn = dyn Fn(Arc<dyn Backend>, &LayerArgs) -> Result<Arc<dyn Backend>> + Send + Sync;

enum Maker {
    /// A bottom layer: stores the data.
    Base(Box<BaseFn>),
    /// A layer over another.
    Wrap(Box<WrapFn>),
}

/// Why a stack description cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    #[error("empty layer list (known layers: {known})")]
    Empty { known: String },
    #[error("unknown layer {name:?} (known layers: {known})")]
    Unknown { name: String, known: String },
    #[error("layer {name:?} stores data and must be the last (bottom) layer of the list")]
    BaseNotLast { name: String },
    #[error("layer {name:?} wraps another layer and cannot be the last (bottom) layer")]
    NothingBelow { name: String },
    #[error("layer {name:?}: bad parameter {param:?} (want key=value)")]
    BadParam { name: String, param: String },
    #[error("layer {name:?}: {err}")]
    Open { name: String, err: BackendError },
}

/// Layer names to constructors. The list of a stack is written top first: requests
/// enter the first layer and the last one stores the data (`["txn", "local"]`).
pub struct LayerRegistry {
    makers: BTreeMap<String, Maker>,
}

impl Default for LayerRegistry {
    fn default() -> Self {
        Self::builtin()
    }
}

/// Splits `name:key=value,key=value` into the name and its parameters.
fn parse_spec(spec: &str) -> std::result::Result<(String, BTreeMap<String, String>), StackError> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut params = BTreeMap::new();
    for p in rest.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = p.split_once('=') else {
            return Err(StackError::BadParam {
                name: name.into(),
                param: p.into(),
            });
        };
        params.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok((name.trim().to_string(), params))
}

/// A size parameter: a number with an optional K/M/G/T suffix (powers of 1024).
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, shift) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 10),
        (i, 'm' | 'M') => (&v[..i], 20),
        (i, 'g' | 'G') => (&v[..i], 30),
        (i, 't' | 'T') => (&v[..i], 40),
        _ => (v, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

impl LayerRegistry {
    /// No layers at all.
    pub fn empty() -> Self {
        LayerRegistry {
            makers: BTreeMap::new(),
        }
    }

    /// The layers every server knows: `local` (a directory, the export's `path`;
    /// parameter `handles=auto|kernel|table`, ADR 0050),
    /// `memory` (volatile; parameters `max_file_size` and `max_bytes`) and `txn`
    /// (transactional COMPOUNDs, ADR 0021; parameters `lock_wait_ms`, `sync_undo=on|off`,
    /// `journal=disk|memory`).
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        r.register_base("local", |a: &LayerArgs| {
            let mut mode = crate::local::HandleMode::Auto;
            for (k, v) in &a.params {
                match k.as_str() {
                    "handles" => mode = v.parse()?,
                    _ => return Err(BackendError::Inval),
                }
            }
            let local = LocalBackend::open_with(&a.path, mode, a.state.as_deref())?;
            Ok(Arc::new(local) as Arc<dyn Backend>)
        });
        r.register_layer("txn", |lower, a: &LayerArgs| {
            let mut settings = crate::txn::TxnSettings::default();
            let mut journal = true;
            for (k, v) in &a.params {
                match (k.as_str(), v.as_str()) {
                    ("lock_wait_ms", v) => {
                        let ms = v.parse().map_err(|_| BackendError::Inval)?;
                        settings.lock_wait = std::time::Duration::from_millis(ms);
                    }
                    ("sync_undo", "on" | "true" | "1") => settings.sync_undo = true,
                    ("sync_undo", "off" | "false" | "0") => settings.sync_undo = false,
                    // A volatile store below needs no journal on disk: nothing it holds
                    // outlives the process, so there is nothing to recover.
                    ("journal", "memory") => journal = false,
                    ("journal", "disk") => journal = true,
                    _ => return Err(BackendError::Inval),
                }
            }
            let path = a
                .state
                .as_ref()
                .filter(|_| journal)
                .map(|d| d.join("txn.journal"));
            Ok(Arc::new(crate::txn::TxnLayer::open_as(
                lower,
                path.as_deref(),
                &a.identity,
                settings,
            )?) as Arc<dyn Backend>)
        });
        r.register_base("memory", |a: &LayerArgs| {
            let mut lim = MemoryLimits::default();
            for (k, v) in &a.params {
                let n = parse_size(v).ok_or(BackendError::Inval)?;
                match k.as_str() {
                    "max_file_size" => lim.max_file_size = n,
                    "max_bytes" => lim.max_bytes = n,
                    _ => return Err(BackendError::Inval),
                }
            }
            Ok(Arc::new(MemoryBackend::with_limits(lim)) as Arc<dyn Backend>)
        });
        r
    }

    /// Registers a bottom layer (one that stores data).
    pub fn register_base(
        &mut self,
        name: &str,
        make: impl Fn(&LayerArgs) -> Result<Arc<dyn Backend>> + Send + Sync + 'static,
    ) {
        self.makers.insert(name.into(), Maker::Base(Box::new(make)));
    }

    /// Registers a layer that wraps the stack below it.
    pub fn register_layer(
        &mut self,
        name: &str,
        make: impl Fn(Arc<dyn Backend>, &LayerArgs) -> Result<Arc<dyn Backend>> + Send + Sync + 'static,
    ) {
        self.makers.insert(name.into(), Maker::Wrap(Box::new(make)));
    }

    /// The registered names, comma-separated (for error messages).
    pub fn known(&self) -> String {
        self.makers.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Checks a stack description without opening anything.
    pub fn check<S: AsRef<str>>(&self, specs: &[S]) -> std::result::Result<(), StackError> {
        let Some(last) = specs.len().checked_sub(1) else {
            return Err(StackError::Empty {
                known: self.known(),
            });
        };
        for (i, spec) in specs.iter().enumerate() {
            let (name, _) = parse_spec(spec.as_ref())?;
            match self.makers.get(&name) {
                None => {
                    return Err(StackError::Unknown {
                        name,
                        known: self.known(),
                    })
                }
                Some(Maker::Base(_)) if i != last => return Err(StackError::BaseNotLast { name }),
                Some(Maker::Wrap(_)) if i == last => return Err(StackError::NothingBelow { name }),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Builds the stack `specs` (top first) for an export at `path`.
    pub fn build<S: AsRef<str>>(
        &self,
        specs: &[S],
        path: &Path,
    ) -> std::result::Result<Arc<dyn Backend>, StackError> {
        self.build_with_state(specs, path, None, b"")
    }

    /// Builds the stack `specs` (top first) for an export at `path`, whose layers keep
    /// their persistent state under `state` (see [`LayerArgs::state`]), bound to the
    /// export `identity` (see [`LayerArgs::identity`]).
    pub fn build_with_state<S: AsRef<str>>(
        &self,
        specs: &[S],
        path: &Path,
        state: Option<&Path>,
        identity: &[u8],
    ) -> std::result::Result<Arc<dyn Backend>, StackError> {
        self.check(specs)?;
        let mut below: Option<Arc<dyn Backend>> = None;
        for spec in specs.iter().rev() {
            let (name, params) = parse_spec(spec.as_ref())?;
            let args = LayerArgs {
                path: path.to_path_buf(),
                params,
                state: state.map(Path::to_path_buf),
                identity: identity.to_vec(),
            };
            let open_err = |err| StackError::Open {
                name: name.clone(),
                err,
            };
            below = Some(match (self.makers.get(&name), below.take()) {
                (Some(Maker::Base(f)), None) => f(&args).map_err(open_err)?,
                (Some(Maker::Wrap(f)), Some(lower)) => f(lower, &args).map_err(open_err)?,
                // `check` ruled the other cases out.
                _ => {
                    return Err(StackError::Unknown {
                        name,
                        known: self.known(),
                    })
                }
            });
        }
        below.ok_or(StackError::Empty {
            known: self.known(),
        })
    }
}
