//! Client host names for rules that name hosts (`client.example.com`,
//! `*.example.com`): the peer address's reverse name, confirmed by a forward lookup
//! of that name that yields the address again (as knfsd's mountd does, so a PTR record
//! alone cannot claim a name). Looked up on the blocking pool, never on a transport
//! thread, only when some export's rules name hosts, and cached per address.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a looked-up name (or its absence) is trusted.
pub const NAME_TTL: Duration = Duration::from_secs(300);

/// Addresses whose names are remembered at most; past it expired entries go, then all.
pub const MAX_NAMES: usize = 4096;

type Entry = (Option<Arc<str>>, Instant);

/// The cache of verified names, by address.
#[derive(Default)]
pub struct HostNames {
    cache: Mutex<HashMap<IpAddr, Entry>>,
}

impl HostNames {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Entry>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The verified name of `addr`, if it has one: from the cache, else looked up on
    /// the blocking pool (the caller's task waits, its thread does not).
    pub async fn name_of(&self, addr: IpAddr) -> Option<Arc<str>> {
        let now = Instant::now();
        if let Some((name, at)) = self.lock().get(&addr) {
            if now.duration_since(*at) < NAME_TTL {
                return name.clone();
            }
        }
        let name = tokio::task::spawn_blocking(move || verified_name(addr))
            .await
            .ok()
            .flatten()
            .map(Arc::<str>::from);
        let mut cache = self.lock();
        if cache.len() >= MAX_NAMES {
            cache.retain(|_, (_, at)| now.duration_since(*at) < NAME_TTL);
            if cache.len() >= MAX_NAMES {
                cache.clear();
            }
        }
        cache.insert(addr, (name.clone(), now));
        name
    }
}

/// `addr`'s reverse name (lower case, no trailing dot) if its forward lookup gives
/// `addr` back.
pub fn verified_name(addr: IpAddr) -> Option<String> {
    let name = reverse(addr)?.trim_end_matches('.').to_ascii_lowercase();
    let confirmed = (name.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .any(|a| a.ip().to_canonical() == addr);
    if !confirmed {
        tracing::debug!(%addr, %name, "reverse name not confirmed by its forward lookup");
    }
    confirmed.then_some(name)
}

/// getnameinfo(3) with NI_NAMEREQD: the address's name, or none.
fn reverse(addr: IpAddr) -> Option<String> {
    let sa = raw_addr(SocketAddr::new(addr, 0));
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: `sa` is a properly initialised sockaddr of the length given, and `host`
    // a writable buffer of the length given; getnameinfo writes a NUL-terminated
    // string into it on success.
    let rc = unsafe {
        libc::getnameinfo(
            sa.as_ptr(),
            sa.len(),
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: on success `host` holds a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(host.as_ptr()) };
    name.to_str().ok().map(str::to_string)
}

/// A socket address as the C library takes it.
enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawAddr {
    fn as_ptr(&self) -> *const libc::sockaddr {
        match self {
            RawAddr::V4(a) => (a as *const libc::sockaddr_in).cast(),
            RawAddr::V6(a) => (a as *const libc::sockaddr_in6).cast(),
        }
    }

    fn len(&self) -> libc::socklen_t {
        (match self {
            RawAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
            RawAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
        }) as libc::socklen_t
    }
}

fn raw_addr(a: SocketAddr) -> RawAddr {
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: an all-zero sockaddr_in is valid; the fields are set below.
            let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            RawAddr::V4(s)
        }
        SocketAddr::V6(a) => {
            // SAFETY: an all-zero sockaddr_in6 is valid; the fields are set below.
            let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            RawAddr::V6(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_a_confirmed_name() {
        // /etc/hosts names 127.0.0.1 "localhost" on every system the tests run on.
        assert_eq!(
            verified_name("127.0.0.1".parse().unwrap()).as_deref(),
            Some("localhost")
        );
    }
}
