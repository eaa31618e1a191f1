//! What a test does when a peer it needs is missing (NFS-Ganesha, the Linux-client VM,
//! a binary of the workspace): in CI it fails, elsewhere it says loudly that it was
//! skipped. A test that needs a peer never passes without it in CI.
//!
//! CI is an environment with `CI` set to `true` or `1` (`.ci/run` sets it; so do most CI
//! services).

use std::io::Write;
use std::path::PathBuf;

/// `CI` is `true` or `1` (any case): a missing peer is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI")
        .map(|v| {
            let v = v.trim();
            v == "1" || v.eq_ignore_ascii_case("true")
        })
        .unwrap_or(false)
}

/// `found` when the peer is there. When it is not (`None`): in CI a panic naming the
/// peer and how to get it; elsewhere a `SKIPPED:` line on stderr (not captured by the
/// test harness), and `None`, on which the test returns at once.
///
/// `what` names the peer ("NFS-Ganesha (ganesha.nfsd)"), `hint` how to get it.
pub fn require<T>(what: &str, found: Option<T>, hint: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    if in_ci() {
        panic!(
            "{test}: {what} is missing and CI is set: a test that needs it fails instead \
             of passing without it ({hint})"
        );
    }
    // Straight to the stderr file: the test harness captures `eprintln!` of a passing
    // test, which would make the skip silent.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {what} is missing ({hint}); set CI=true to make this fail"
    );
    None
}

/// `ganesha.nfsd` on `PATH`, per [`require`].
pub fn ganesha() -> Option<PathBuf> {
    require(
        "NFS-Ganesha (ganesha.nfsd on PATH)",
        crate::ganesha::find_bin(),
        crate::ganesha::INSTALL_HINT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_peer_is_returned() {
        assert_eq!(require("x", Some(3), "hint"), Some(3));
    }
}
