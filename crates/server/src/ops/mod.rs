//! Operation handlers, one file per family. The op table (`compound::optable`) names the
//! handler of each op; nothing here dispatches.

pub mod attr;
pub mod deleg;
pub mod dir;
pub mod fh;
pub mod file;
pub mod lock;
pub mod notify;
pub mod session;
pub mod v40;
pub mod v42;
