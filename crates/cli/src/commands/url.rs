//! `nfs://host[:port]/path` URLs and local paths as command operands.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// The NFS port when the URL names none.
pub const DEFAULT_PORT: u16 = 2049;

/// A parsed `nfs://` URL. `path` is relative to the server's NFS root, normalized
/// ("a/b", "" for the root); `display` is how messages name it (the operand as typed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
    pub display: String,
}

/// Which server a URL talks to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerKey {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A command operand: a remote URL or a local path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Remote(NfsUrl),
    Local(PathBuf),
}

impl Location {
    pub fn parse(s: &str) -> Result<Location, String> {
        if is_url(s) {
            NfsUrl::parse(s).map(Location::Remote)
        } else {
            Ok(Location::Local(PathBuf::from(s)))
        }
    }
}

/// Whether an operand is meant as an `nfs://` URL.
pub fn is_url(s: &str) -> bool {
    s.len() >= 6 && s[..6].eq_ignore_ascii_case("nfs://")
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "bad %-escape".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "path is not UTF-8".to_string())
}

/// Normalize a path relative to the root: drop "" and ".", fold "..".
fn normalize(path: &str) -> Result<String, String> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err("path goes above the server's root".into());
                }
            }
            c => out.push(c),
        }
    }
    Ok(out.join("/"))
}

impl NfsUrl {
    /// Parse `nfs://host[:port][/path]`; host may be a name, IPv4 or `[IPv6]`.
    pub fn parse(s: &str) -> Result<NfsUrl, String> {
        if !is_url(s) {
            return Err("not an nfs:// URL".into());
        }
        let rest = &s[6..];
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = if let Some(r) = authority.strip_prefix('[') {
            let end = r.find(']').ok_or("unclosed '[' in host")?;
            let host = &r[..end];
            let after = &r[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err("junk after ']'".into()),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let port = match port {
            None | Some("") => DEFAULT_PORT,
            Some(p) => p.parse().map_err(|_| format!("bad port {p:?}"))?,
        };
        let path = normalize(&percent_decode(path)?)?;
        Ok(NfsUrl {
            host: host.to_string(),
            port,
            path,
            display: s.to_string(),
        })
    }

    pub fn server(&self) -> ServerKey {
        ServerKey {
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The same server, path `self/name`.
    pub fn child(&self, name: &str) -> NfsUrl {
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.path)
        };
        NfsUrl {
            host: self.host.clone(),
            port: self.port,
            path,
            display: format!("{}/{name}", self.display.trim_end_matches('/')),
        }
    }

    /// The same server, `rel` (relative to this URL) below it.
    pub fn join(&self, rel: &str) -> NfsUrl {
        if rel.is_empty() {
            return self.clone();
        }
        self.child(rel)
    }

    /// Last path component ("" for the root).
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }
}

impl ServerKey {
    pub fn addr(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| e.to_string())?
            .next()
            .ok_or_else(|| format!("{}: no address", self.host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = NfsUrl::parse("nfs://h/a//b/./c/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("h", 2049, "a/b/c")
        );
        let u = NfsUrl::parse("nfs://127.0.0.1:2050").unwrap();
        assert_eq!((u.port, u.path.as_str()), (2050, ""));
        let u = NfsUrl::parse("NFS://[::1]:7/x%20y").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 7, "x y")
        );
        assert_eq!(u.server().to_string(), "[::1]:7");
        assert!(NfsUrl::parse("nfs:///a").is_err());
        assert!(NfsUrl::parse("nfs://h:x/a").is_err());
        assert!(NfsUrl::parse("nfs://h/../a").is_err());
        assert!(NfsUrl::parse("nfs://h/a%zz").is_err());
        let c = NfsUrl::parse("nfs://h/d/").unwrap().child("f");
        assert_eq!(
            (c.path.as_str(), c.display.as_str()),
            ("d/f", "nfs://h/d/f")
        );
        assert_eq!(c.basename(), "f");
        assert_eq!(
            Location::parse("rel/x").unwrap(),
            Location::Local(PathBuf::from("rel/x"))
        );
    }
}
