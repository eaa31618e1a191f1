//! `/etc/exports`-style text (exports(5)): one export per line, its path first, then
//! client specs, each `CLIENT(OPTIONS)`:
//!
//! ```text
//! # path        clients
//! /srv/data     127.0.0.1(rw,no_root_squash) 10.0.0.0/8(ro) *(ro,all_squash,anonuid=1000)
//! /srv/pub      -ro,all_squash  *.lan.example.com  192.168.1.0/24(rw)
//! ```
//!
//! `#` starts a comment, a `\` at the end of a line continues it, a path with spaces
//! is written in double quotes. A token `-OPTIONS` right after the path sets the
//! defaults of the specs that follow; `(OPTIONS)` alone is `*(OPTIONS)`. Every error
//! names its line and column. [`parse_rule`] reads one spec (the TOML `clients` list
//! uses it too).

use super::rules::{ClientRule, ClientSpec, Flavor, Squash, MAX_RULES};
use std::net::IpAddr;

/// Options accepted for compatibility with exports(5) and ignored: txnfs always
/// behaves as they ask or the difference does not apply to it.
const IGNORED: &[&str] = &[
    "sync",
    "async",
    "no_subtree_check",
    "subtree_check",
    "insecure",
    "wdelay",
    "no_wdelay",
    "hide",
    "nohide",
    "crossmnt",
];

/// What is wrong with a spec or a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(
        "unknown option {0:?} (known: ro, rw, root_squash, no_root_squash, all_squash, \
         anonuid=N, anongid=N, sec=sys[:krb5:krb5i:krb5p:tls:mtls]; ignored: {ignored})",
        ignored = IGNORED.join(", ")
    )]
    UnknownOption(String),
    #[error("option {0:?} wants a number (e.g. {0}=1000)")]
    BadNumber(String),
    #[error("{0:?} is not a client: write an address, a network (10.0.0.0/8), a host name, a wildcard (*.example.com) or *")]
    BadClient(String),
    #[error("{0:?}: the prefix length must be 0-32 for IPv4, 0-128 for IPv6, or a netmask")]
    BadPrefix(String),
    #[error("netgroups ({0:?}) are not supported")]
    Netgroup(String),
    #[error("\"(\" without its \")\"")]
    Unclosed,
    #[error("unexpected text {0:?} after \")\"")]
    Trailing(String),
    #[error("unknown security flavour {0:?} (known: sys, krb5, krb5i, krb5p, tls, mtls)")]
    UnknownFlavor(String),
    #[error("option \"secure\" is not supported: txnfs does not check client source ports (write insecure, or leave it out)")]
    Secure,
    #[error("the export path {0:?} must be absolute")]
    NotAbsolute(String),
    #[error("export {0:?} has no client: add one, e.g. {0} 127.0.0.1(rw) or {0} *(ro)")]
    NoClients(String),
    #[error("export {0:?} is listed twice")]
    Duplicate(String),
    #[error("more than {MAX_RULES} clients for one export")]
    TooMany,
    #[error("unterminated quote")]
    Quote,
}

/// A [`RuleError`] at a place in the text (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {err}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub err: RuleError,
}

/// One line's export: its path and its rules, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportLine {
    pub path: String,
    pub rules: Vec<ClientRule>,
    /// Where the line starts (for messages).
    pub line: usize,
}

/// Parses one spec, `CLIENT(OPTIONS)`, `CLIENT` or `(OPTIONS)`, starting from the
/// defaults of exports(5).
pub fn parse_rule(text: &str) -> Result<ClientRule, RuleError> {
    parse_rule_from(text, &ClientRule::new(ClientSpec::Any, "*")).map_err(|(_, e)| e)
}

/// Parses the whole text.
pub fn parse(text: &str) -> Result<Vec<ExportLine>, ParseError> {
    let mut out: Vec<ExportLine> = Vec::new();
    for (tokens, first_line) in logical_lines(text)? {
        let Some((path, rest)) = tokens.split_first() else {
            continue;
        };
        let at = |t: &Token, offset: usize, err| ParseError {
            line: t.line,
            column: t.column + offset,
            err,
        };
        if !path.text.starts_with('/') {
            return Err(at(path, 0, RuleError::NotAbsolute(path.text.clone())));
        }
        if out.iter().any(|e| e.path == path.text) {
            return Err(at(path, 0, RuleError::Duplicate(path.text.clone())));
        }
        let mut template = ClientRule::new(ClientSpec::Any, "*");
        let mut rest = rest;
        if let Some(first) = rest.first().filter(|t| t.text.starts_with('-')) {
            apply_options(&first.text[1..], &mut template)
                .map_err(|(off, e)| at(first, 1 + off, e))?;
            rest = &rest[1..];
        }
        if rest.is_empty() {
            return Err(at(path, 0, RuleError::NoClients(path.text.clone())));
        }
        if rest.len() > MAX_RULES {
            return Err(at(&rest[MAX_RULES], 0, RuleError::TooMany));
        }
        let rules = rest
            .iter()
            .map(|t| parse_rule_from(&t.text, &template).map_err(|(off, e)| at(t, off, e)))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(ExportLine {
            path: path.text.clone(),
            rules,
            line: first_line,
        });
    }
    Ok(out)
}

/// A word of a logical line and where it starts.
#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
    column: usize,
}

/// The text's logical lines (continuations joined, comments dropped) as tokens, each
/// with the number of the line it starts on.
fn logical_lines(text: &str) -> Result<Vec<(Vec<Token>, usize)>, ParseError> {
    let mut lines = Vec::new();
    let mut cur: Vec<Token> = Vec::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if cur.is_empty() {
            start = n;
        }
        let (mut toks, continued) = tokens(raw, n)?;
        cur.append(&mut toks);
        if !continued && !cur.is_empty() {
            lines.push((std::mem::take(&mut cur), start));
        }
    }
    if !cur.is_empty() {
        lines.push((cur, start));
    }
    Ok(lines)
}

/// The tokens of one physical line, and whether a `\` continues it.
fn tokens(raw: &str, line: usize) -> Result<(Vec<Token>, bool), ParseError> {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '#' {
            break;
        }
        if c == '\\' && chars[i + 1..].iter().all(|c| c.is_whitespace()) {
            return Ok((out, true));
        }
        let column = i + 1;
        let mut text = String::new();
        if c == '"' {
            let Some(end) = chars[i + 1..].iter().position(|&c| c == '"') else {
                return Err(ParseError {
                    line,
                    column,
                    err: RuleError::Quote,
                });
            };
            text.extend(&chars[i + 1..i + 1 + end]);
            i += end + 2;
        } else {
            // A spec's options may not hold spaces, but "(" ... ")" keeps a
            // spec whole up to its ")" so the error can point into it.
            let mut depth = 0;
            while i < chars.len() {
                let c = chars[i];
                if depth == 0 && (c.is_whitespace() || c == '#') {
                    break;
                }
                match c {
                    '(' => depth += 1,
                    ')' => depth = 0,
                    _ => {}
                }
                text.push(c);
                i += 1;
            }
        }
        out.push(Token { text, line, column });
    }
    Ok((out, false))
}

/// Parses a spec from `template`'s options; an error carries its character offset in
/// `text`.
fn parse_rule_from(text: &str, template: &ClientRule) -> Result<ClientRule, (usize, RuleError)> {
    let (client, opts) = match text.find('(') {
        Some(open) => {
            let Some(close) = text[open..].find(')').map(|c| open + c) else {
                return Err((open, RuleError::Unclosed));
            };
            if close + 1 < text.len() {
                return Err((close + 1, RuleError::Trailing(text[close + 1..].into())));
            }
            (&text[..open], Some((open + 1, &text[open + 1..close])))
        }
        None => (text, None),
    };
    let client = if client.is_empty() { "*" } else { client };
    let mut rule = template.clone();
    rule.spec = parse_client(client).map_err(|e| (0, e))?;
    rule.text = client.to_string();
    if let Some((at, opts)) = opts {
        apply_options(opts, &mut rule).map_err(|(off, e)| (at + off, e))?;
    }
    Ok(rule)
}

/// Applies comma-separated options to `rule`; an error carries its offset in `opts`.
fn apply_options(opts: &str, rule: &mut ClientRule) -> Result<(), (usize, RuleError)> {
    let mut at = 0;
    for opt in opts.split(',') {
        let here = at;
        at += opt.len() + 1;
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (opt.trim(), None),
        };
        let number = || {
            value
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| (here, RuleError::BadNumber(key.into())))
        };
        match (key, value) {
            ("", None) => {}
            ("ro", None) => rule.read_only = true,
            ("rw", None) => rule.read_only = false,
            ("root_squash", None) => rule.squash = Squash::Root,
            ("no_root_squash", None) => rule.squash = Squash::None,
            ("all_squash", None) => rule.squash = Squash::All,
            ("no_all_squash", None) => rule.squash = Squash::Root,
            ("anonuid", _) => rule.anonuid = number()?,
            ("anongid", _) => rule.anongid = number()?,
            ("sec", Some(list)) => {
                let mut sec = Vec::new();
                for name in list.split(':') {
                    let f = Flavor::parse(name.trim())
                        .ok_or_else(|| (here, RuleError::UnknownFlavor(name.into())))?;
                    if !sec.contains(&f) {
                        sec.push(f);
                    }
                }
                rule.sec = sec;
            }
            ("secure", None) => return Err((here, RuleError::Secure)),
            (k, None) if IGNORED.contains(&k) => {}
            _ => return Err((here, RuleError::UnknownOption(opt.trim().into()))),
        }
    }
    Ok(())
}

/// The client part of a spec.
fn parse_client(s: &str) -> Result<ClientSpec, RuleError> {
    if s == "*" {
        return Ok(ClientSpec::Any);
    }
    if s.starts_with('@') {
        return Err(RuleError::Netgroup(s.into()));
    }
    if let Some((addr, prefix)) = s.split_once('/') {
        let addr: IpAddr = addr.parse().map_err(|_| RuleError::BadClient(s.into()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match prefix.parse::<u8>() {
            Ok(b) if b <= max => b,
            Ok(_) => return Err(RuleError::BadPrefix(s.into())),
            Err(_) => netmask_bits(prefix).ok_or_else(|| RuleError::BadPrefix(s.into()))?,
        };
        return Ok(ClientSpec::Net(network(addr.to_canonical(), bits), bits));
    }
    if let Ok(addr) = s.parse::<IpAddr>() {
        return Ok(ClientSpec::Addr(addr.to_canonical()));
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let lower = s.trim_end_matches('.').to_ascii_lowercase();
    if lower.is_empty() || !lower.chars().all(|c| ok(c) || c == '*' || c == '?') {
        return Err(RuleError::BadClient(s.into()));
    }
    Ok(if lower.contains(['*', '?']) {
        ClientSpec::Pattern(lower)
    } else {
        ClientSpec::Host(lower)
    })
}

/// The prefix length of a contiguous IPv4 netmask (255.255.255.0 → 24).
fn netmask_bits(mask: &str) -> Option<u8> {
    let m = u32::from(mask.parse::<std::net::Ipv4Addr>().ok()?);
    let bits = m.leading_ones();
    (m.checked_shl(bits).unwrap_or(0) == 0).then_some(bits as u8)
}

/// `addr` with its host bits cleared.
fn network(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, usize, RuleError) {
        let e = parse(text).expect_err(text);
        (e.line, e.column, e.err)
    }

    #[test]
    fn a_typical_file() {
        let text = "# exports\n\
            /srv/data 127.0.0.1(rw,no_root_squash) 10.0.0.0/8(ro) *(ro,all_squash,anonuid=1000)\n\
            \n\
            \"/srv/with space\"  -rw,all_squash \\\n   192.168.1.0/255.255.255.0 *.Lan.example.com.(ro)  # trailing\n\
            /srv/pub (rw) fd00::/8 host1\n";
        let e = parse(text).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path, "/srv/data");
        let r = &e[0].rules;
        assert_eq!(r[0].spec, ClientSpec::Addr("127.0.0.1".parse().unwrap()));
        assert!(!r[0].read_only && r[0].squash == Squash::None);
        assert_eq!(r[1].spec, ClientSpec::Net("10.0.0.0".parse().unwrap(), 8));
        assert!(r[1].read_only && r[1].squash == Squash::Root);
        assert_eq!(r[2].spec, ClientSpec::Any);
        assert_eq!(
            (r[2].squash, r[2].anonuid, r[2].anongid),
            (Squash::All, 1000, 65534)
        );
        assert_eq!(e[1].path, "/srv/with space");
        assert_eq!(e[1].line, 4);
        let r = &e[1].rules;
        assert_eq!(
            r[0].spec,
            ClientSpec::Net("192.168.1.0".parse().unwrap(), 24)
        );
        assert!(!r[0].read_only && r[0].squash == Squash::All);
        assert_eq!(r[1].spec, ClientSpec::Pattern("*.lan.example.com".into()));
        assert!(r[1].read_only && r[1].squash == Squash::All);
        let r = &e[2].rules;
        assert_eq!(
            (r[0].spec.clone(), r[0].read_only),
            (ClientSpec::Any, false)
        );
        assert_eq!(r[1].spec, ClientSpec::Net("fd00::".parse().unwrap(), 8));
        assert_eq!(r[2].spec, ClientSpec::Host("host1".into()));
        assert!(r[2].read_only, "exports(5): ro by default");
        assert_eq!(r[2].sec, vec![Flavor::Sys]);
        // exports(5) options txnfs has no use for are accepted.
        parse("/a *(rw,sync,no_subtree_check,insecure)").unwrap();
    }

    #[test]
    fn errors_name_line_and_column() {
        assert_eq!(
            err("/a 1.2.3.4(rw)\n/b  10.0.0.1(rw,bogus)"),
            (2, 17, RuleError::UnknownOption("bogus".into()))
        );
        assert_eq!(
            err("\n\n  data *(ro)"),
            (3, 3, RuleError::NotAbsolute("data".into()))
        );
        assert_eq!(
            err("/a 10.0.0.0/33"),
            (1, 4, RuleError::BadPrefix("10.0.0.0/33".into()))
        );
        assert_eq!(
            err("/a 10.0.0.0/255.0.255.0").2,
            RuleError::BadPrefix("10.0.0.0/255.0.255.0".into())
        );
        assert_eq!(err("/a *(rw"), (1, 5, RuleError::Unclosed));
        assert_eq!(err("/a *(rw)x"), (1, 9, RuleError::Trailing("x".into())));
        assert_eq!(
            err("/a *(anonuid=x)"),
            (1, 6, RuleError::BadNumber("anonuid".into()))
        );
        assert_eq!(
            err("/a *(rw,anonuid)").2,
            RuleError::BadNumber("anonuid".into())
        );
        assert_eq!(
            err("/a *(sec=sys:krb9)").2,
            RuleError::UnknownFlavor("krb9".into())
        );
        assert_eq!(err("/a *(secure)").2, RuleError::Secure);
        assert_eq!(
            err("/a @trusted(rw)").2,
            RuleError::Netgroup("@trusted".into())
        );
        assert_eq!(err("/a ho_st(rw)").2, RuleError::BadClient("ho_st".into()));
        assert_eq!(err("/a\n"), (1, 1, RuleError::NoClients("/a".into())));
        assert_eq!(err("/a *\n/a *"), (2, 1, RuleError::Duplicate("/a".into())));
        assert_eq!(
            err("/a -rw,nope *"),
            (1, 8, RuleError::UnknownOption("nope".into()))
        );
        assert_eq!(err("\"/a *"), (1, 1, RuleError::Quote));
        let msg = parse("/a\n/b 10.0.0.1(rw,bogus)").unwrap_err().to_string();
        assert!(
            msg.starts_with("line 1, column 1: export \"/a\" has no client"),
            "{msg}"
        );
    }

    #[test]
    fn one_spec() {
        let r = parse_rule("10.1.2.3/16(rw,root_squash,anongid=7,sec=sys)").unwrap();
        assert_eq!(r.spec, ClientSpec::Net("10.1.0.0".parse().unwrap(), 16));
        assert_eq!(
            (r.read_only, r.anongid, r.text.as_str()),
            (false, 7, "10.1.2.3/16")
        );
        assert_eq!(
            parse_rule("::ffff:10.0.0.1").unwrap().spec,
            ClientSpec::Addr("10.0.0.1".parse().unwrap())
        );
        // RPC-with-TLS (ADR 0049) and Kerberos (ADR 0051) flavours are served.
        assert_eq!(
            parse_rule("*(rw,sec=mtls:tls)").unwrap().sec,
            vec![Flavor::Mtls, Flavor::Tls]
        );
        assert_eq!(
            parse_rule("*(rw,sec=krb5p:krb5i:krb5)").unwrap().sec,
            vec![Flavor::Krb5p, Flavor::Krb5i, Flavor::Krb5]
        );
    }
}
