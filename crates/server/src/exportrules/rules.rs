//! Which clients may use an export, and as whom (exports(5) semantics, ADR 0043).
//!
//! An export has an ordered list of [`ClientRule`]s: a client spec (address, CIDR
//! network, host name, wildcard) with its options (`ro`/`rw`, root squash, anonymous
//! ids, security flavours). The first rule whose spec matches the caller applies; a
//! caller no rule matches may not use the export at all. [`ClientRules::decide`] is
//! the one pure function that answers "may this caller use this export, and with which
//! identity and rights?"; the server asks it at every put-filehandle of an export
//! object (NFSv4), at every NFSv3 handle and at MOUNT's MNT.
//!
//! A spec's text is `CLIENT(OPTIONS)` as in `/etc/exports`: `127.0.0.1(rw)`,
//! `10.0.0.0/8(ro)`, `*(ro,all_squash,anonuid=1000)`; without options the defaults of
//! exports(5) apply (`ro`, `root_squash`, `anonuid=anongid=65534`, `sec=sys`).

use std::net::IpAddr;
use std::sync::Arc;

use txnfs_backend::Creds;

/// The anonymous identity (nobody) when a rule names none.
pub const ANON_ID: u32 = 65534;

/// Client rules one export may have at most.
pub const MAX_RULES: usize = 1024;

/// Who a client spec matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSpec {
    /// `*`: every client.
    Any,
    /// One address (`10.1.2.3`, `::1`).
    Addr(IpAddr),
    /// A network in CIDR notation (`10.0.0.0/8`, `fd00::/8`); the host bits are zero.
    Net(IpAddr, u8),
    /// A host name (lower case), matched against the client's verified reverse name.
    Host(String),
    /// `*.example.com` and friends: a host name pattern with `*` and `?` (lower case).
    Pattern(String),
}

/// Whose identity is replaced by the anonymous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Squash {
    /// `root_squash` (the default): uid 0 and gid 0 become the anonymous ids.
    #[default]
    Root,
    /// `no_root_squash`: identities as sent.
    None,
    /// `all_squash`: every caller is the anonymous user.
    All,
}

/// A security flavour a rule allows (`sec=`). `sys` is AUTH_SYS (or AUTH_NONE) over
/// any connection; `tls` the same over RPC-with-TLS only, `mtls` over TLS with a
/// client certificate the server verified (RFC 9289; ADR 0049). `krb5`, `krb5i` and
/// `krb5p` are RPCSEC_GSS with Kerberos v5 and the service none, integrity or privacy
/// (RFC 2203, RFC 2623 §2.2; ADR 0051), over any connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    Sys,
    Krb5,
    Krb5i,
    Krb5p,
    Tls,
    Mtls,
}

impl Flavor {
    pub fn parse(s: &str) -> Option<Flavor> {
        Some(match s {
            "sys" => Flavor::Sys,
            "krb5" => Flavor::Krb5,
            "krb5i" => Flavor::Krb5i,
            "krb5p" => Flavor::Krb5p,
            "tls" => Flavor::Tls,
            "mtls" => Flavor::Mtls,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Flavor::Sys => "sys",
            Flavor::Krb5 => "krb5",
            Flavor::Krb5i => "krb5i",
            Flavor::Krb5p => "krb5p",
            Flavor::Tls => "tls",
            Flavor::Mtls => "mtls",
        }
    }

    /// Whether a request authenticated by `flavor` over `transport` is of this
    /// flavour: `sys` is AUTH_SYS or AUTH_NONE over any connection, `tls` the same
    /// over TLS, `mtls` over TLS with a verified client certificate; a Kerberos
    /// flavour exactly that RPCSEC_GSS service (as knfsd: krb5p does not stand in for
    /// krb5), over any connection.
    pub fn admits(self, flavor: CallFlavor, transport: CallTransport) -> bool {
        let unauthenticated = matches!(flavor, CallFlavor::Sys | CallFlavor::None);
        match self {
            Flavor::Sys => unauthenticated,
            Flavor::Tls => unauthenticated && transport != CallTransport::Plain,
            Flavor::Mtls => unauthenticated && transport == CallTransport::MutualTls,
            Flavor::Krb5 | Flavor::Krb5i | Flavor::Krb5p => {
                matches!(flavor, CallFlavor::Kerberos { flavor, .. } if flavor == self)
            }
        }
    }

    /// The RPC flavour number a client is told (MOUNT's list, SECINFO): AUTH_SYS for
    /// `sys`, `tls` and `mtls` (RFC 9289 has no number of its own), the Kerberos
    /// pseudo-flavours 390003-390005 (RFC 2623 §2.2) for the others.
    pub fn pseudo_flavor(self) -> u32 {
        match self {
            Flavor::Sys | Flavor::Tls | Flavor::Mtls => 1,
            Flavor::Krb5 => 390003,
            Flavor::Krb5i => 390004,
            Flavor::Krb5p => 390005,
        }
    }

    /// `flavors` as a client is told them: in order, each pseudo-flavour once.
    pub fn advertised(flavors: &[Flavor]) -> Vec<Flavor> {
        let mut out: Vec<Flavor> = Vec::new();
        for &f in flavors {
            if !out.iter().any(|o| o.pseudo_flavor() == f.pseudo_flavor()) {
                out.push(f);
            }
        }
        out
    }
}

/// One client spec with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    pub spec: ClientSpec,
    /// The spec as written (MOUNT's EXPORT lists it as a group).
    pub text: String,
    pub read_only: bool,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
    /// Allowed flavours in order of preference (SECINFO lists them so).
    pub sec: Vec<Flavor>,
}

impl ClientRule {
    /// A rule for `spec` with the defaults of exports(5): `ro`, `root_squash`, nobody,
    /// `sec=sys`.
    pub fn new(spec: ClientSpec, text: impl Into<String>) -> Self {
        ClientRule {
            spec,
            text: text.into(),
            read_only: true,
            squash: Squash::Root,
            anonuid: ANON_ID,
            anongid: ANON_ID,
            sec: vec![Flavor::Sys],
        }
    }
}

impl ClientRule {
    /// The rule as an exports(5) spec with every option spelled out:
    /// `10.0.0.0/8(rw,root_squash)`, `*(ro,all_squash,anonuid=1000,anongid=65534)`.
    pub fn describe(&self) -> String {
        let mut opts: Vec<String> = vec![
            if self.read_only { "ro" } else { "rw" }.into(),
            match self.squash {
                Squash::Root => "root_squash",
                Squash::None => "no_root_squash",
                Squash::All => "all_squash",
            }
            .into(),
        ];
        if self.squash != Squash::None && (self.anonuid != ANON_ID || self.anongid != ANON_ID) {
            opts.push(format!("anonuid={}", self.anonuid));
            opts.push(format!("anongid={}", self.anongid));
        }
        if self.sec != [Flavor::Sys] {
            let sec: Vec<&str> = self.sec.iter().map(|f| f.name()).collect();
            opts.push(format!("sec={}", sec.join(":")));
        }
        format!("{}({})", self.text, opts.join(","))
    }
}

/// How a request authenticated itself, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFlavor {
    /// AUTH_SYS: the identity it claims.
    Sys,
    /// AUTH_NONE: served where `sys` is, as the anonymous user.
    None,
    /// RPCSEC_GSS with Kerberos v5 and the service `flavor` names (`Krb5`, `Krb5i`,
    /// `Krb5p`); `mapped`: the principal has a local identity (the principal map or a
    /// local user), else it acts as the rule's anonymous user.
    Kerberos { flavor: Flavor, mapped: bool },
}

/// The connection a request arrived on (RFC 9289).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallTransport {
    /// Plain TCP.
    Plain,
    /// TLS, the client presented no certificate (or the server verifies none).
    Tls,
    /// TLS with a client certificate the server verified against its client CA.
    MutualTls,
}

/// The caller of one request: its address (IPv4-mapped IPv6 addresses as IPv4), its
/// verified host name when a rule needs one, how it authenticated, and over what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub addr: IpAddr,
    pub name: Option<Arc<str>>,
    pub flavor: CallFlavor,
    pub transport: CallTransport,
}

impl Caller {
    /// A caller at `addr` with no host name known, authenticated with AUTH_SYS.
    pub fn at(addr: IpAddr) -> Self {
        Caller {
            addr: addr.to_canonical(),
            name: None,
            flavor: CallFlavor::Sys,
            transport: CallTransport::Plain,
        }
    }

    /// A caller in this process (tests, tools calling the executor directly): as a
    /// client on the loopback interface.
    pub fn local() -> Self {
        Caller::at(IpAddr::from([127, 0, 0, 1]))
    }
}

/// What a caller may do on an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed: with this identity, read-only or not.
    Allow { creds: Creds, read_only: bool },
    /// The client matches a rule whose flavours do not include the request's: the
    /// allowed ones (NFS4ERR_WRONGSEC; SECINFO lists them).
    WrongSec(Vec<Flavor>),
    /// No rule matches the client (NFS4ERR_ACCESS, NFS3ERR_ACCES, MNT3ERR_ACCES).
    Denied,
}

/// An export's rules, first match wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRules {
    rules: Vec<ClientRule>,
}

impl ClientRules {
    pub fn new(rules: Vec<ClientRule>) -> Self {
        ClientRules { rules }
    }

    /// The rules of an export configured without any: this host only (127.0.0.0/8 and
    /// ::1), read-write, identities as sent — `txnfs serve DIR` as before, and nothing
    /// for other hosts until the administrator says which (ADR 0043).
    pub fn local_only() -> Self {
        let rw = |spec, text: &str| ClientRule {
            read_only: false,
            squash: Squash::None,
            ..ClientRule::new(spec, text)
        };
        ClientRules::new(vec![
            rw(
                ClientSpec::Net(IpAddr::from([127, 0, 0, 0]), 8),
                "127.0.0.0/8",
            ),
            rw(
                ClientSpec::Addr(IpAddr::from(std::net::Ipv6Addr::LOCALHOST)),
                "::1",
            ),
        ])
    }

    pub fn rules(&self) -> &[ClientRule] {
        &self.rules
    }

    /// Whether matching needs the caller's host name (some rule names hosts).
    pub fn needs_names(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(r.spec, ClientSpec::Host(_) | ClientSpec::Pattern(_)))
    }

    /// The first rule matching `caller`, if any.
    pub fn rule_for(&self, caller: &Caller) -> Option<&ClientRule> {
        self.rules.iter().find(|r| matches(&r.spec, caller))
    }

    /// May `caller`, claiming `creds`, use the export, and as whom?
    pub fn decide(&self, caller: &Caller, creds: &Creds) -> Decision {
        match self.admitting(caller) {
            Ok(rule) => Decision::Allow {
                creds: squash(rule, caller.flavor, creds),
                read_only: rule.read_only,
            },
            Err(Some(sec)) => Decision::WrongSec(sec.to_vec()),
            Err(None) => Decision::Denied,
        }
    }

    /// The rule that lets `caller` use the export; else `Err` with the flavours of the
    /// rule that matches it but not its flavour, or `None` when no rule matches.
    pub fn admitting(&self, caller: &Caller) -> Result<&ClientRule, Option<&[Flavor]>> {
        let rule = self.rule_for(caller).ok_or(None)?;
        // AUTH_NONE rides on `sys` (as nobody): both are "no authentication"; `tls`
        // and `mtls` ask the same of the connection they arrive on.
        if rule
            .sec
            .iter()
            .any(|f| f.admits(caller.flavor, caller.transport))
        {
            Ok(rule)
        } else {
            Err(Some(&rule.sec))
        }
    }
}

/// The identity `creds` of a caller authenticated by `flavor` becomes under `rule`:
/// `all_squash`, AUTH_NONE and a Kerberos principal without a local identity give the
/// anonymous ids; `root_squash` maps uid 0 and gid
/// 0 (also among the supplementary groups) to them; `no_root_squash` keeps them.
pub fn squash(rule: &ClientRule, flavor: CallFlavor, creds: &Creds) -> Creds {
    let mut out = Creds::default();
    squash_into(rule, flavor, creds, &mut out);
    out
}

/// [`squash`] into `out`, which allocates nothing when `out` already holds the result
/// (every PUTFH admits its caller again: ADR 0064 addendum).
pub fn squash_into(rule: &ClientRule, flavor: CallFlavor, creds: &Creds, out: &mut Creds) {
    let anon = rule.squash == Squash::All
        || matches!(
            flavor,
            CallFlavor::None | CallFlavor::Kerberos { mapped: false, .. }
        );
    let root = rule.squash == Squash::Root;
    let id = |id: u32, anon_id: u32| {
        if anon || (root && id == 0) {
            anon_id
        } else {
            id
        }
    };
    out.uid = id(creds.uid, rule.anonuid);
    out.gid = id(creds.gid, rule.anongid);
    let gids =
        creds
            .gids
            .iter()
            .filter(|_| !anon)
            .map(|&g| if root && g == 0 { rule.anongid } else { g });
    if !out.gids.iter().copied().eq(gids.clone()) {
        out.gids.clear();
        out.gids.extend(gids);
    }
}

/// Does `spec` match `caller`?
pub fn matches(spec: &ClientSpec, caller: &Caller) -> bool {
    match spec {
        ClientSpec::Any => true,
        ClientSpec::Addr(a) => a.to_canonical() == caller.addr,
        ClientSpec::Net(net, bits) => in_net(caller.addr, *net, *bits),
        ClientSpec::Host(h) => caller.name.as_deref().is_some_and(|n| n == h),
        ClientSpec::Pattern(p) => caller
            .name
            .as_deref()
            .is_some_and(|n| glob(p.as_bytes(), n.as_bytes())),
    }
}

/// Is `addr` inside `net/bits`? (Different address families never match.)
fn in_net(addr: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Shell-style match of a host name: `*` any run of characters, `?` one.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys(uid: u32, gid: u32, gids: &[u32]) -> Creds {
        Creds {
            uid,
            gid,
            gids: gids.to_vec(),
        }
    }

    fn at(a: &str) -> Caller {
        Caller::at(a.parse().unwrap())
    }

    #[test]
    fn networks_and_addresses() {
        assert!(in_net(
            "10.1.2.3".parse().unwrap(),
            "10.0.0.0".parse().unwrap(),
            8
        ));
        assert!(!in_net(
            "11.1.2.3".parse().unwrap(),
            "10.0.0.0".parse().unwrap(),
            8
        ));
        assert!(in_net(
            "1.2.3.4".parse().unwrap(),
            "0.0.0.0".parse().unwrap(),
            0
        ));
        assert!(in_net(
            "fd00::1".parse().unwrap(),
            "fd00::".parse().unwrap(),
            8
        ));
        assert!(!in_net(
            "::1".parse().unwrap(),
            "127.0.0.0".parse().unwrap(),
            8
        ));
        // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
        let mapped = Caller::at("::ffff:127.0.0.1".parse().unwrap());
        assert!(ClientRules::local_only().rule_for(&mapped).is_some());
        assert!(ClientRules::local_only().rule_for(&at("::1")).is_some());
        assert!(ClientRules::local_only()
            .rule_for(&at("10.0.0.1"))
            .is_none());
        assert!(matches(
            &ClientSpec::Addr("127.0.0.1".parse().unwrap()),
            &at("127.0.0.1")
        ));
        assert!(!matches(
            &ClientSpec::Addr("127.0.0.1".parse().unwrap()),
            &at("127.0.0.2")
        ));
    }

    #[test]
    fn host_names_and_patterns_need_a_verified_name() {
        let mut c = at("10.0.0.5");
        let pat = ClientSpec::Pattern("*.example.com".into());
        let host = ClientSpec::Host("a.example.com".into());
        assert!(!matches(&pat, &c) && !matches(&host, &c));
        c.name = Some("a.example.com".into());
        assert!(matches(&pat, &c) && matches(&host, &c));
        c.name = Some("a.example.org".into());
        assert!(!matches(&pat, &c));
        assert!(glob(b"web?.lan", b"web1.lan") && !glob(b"web?.lan", b"web12.lan"));
    }

    #[test]
    fn first_matching_rule_wins() {
        let rules = ClientRules::new(vec![
            ClientRule {
                read_only: false,
                ..ClientRule::new(ClientSpec::Addr("10.0.0.1".parse().unwrap()), "10.0.0.1")
            },
            ClientRule::new(
                ClientSpec::Net("10.0.0.0".parse().unwrap(), 8),
                "10.0.0.0/8",
            ),
        ]);
        let d = |a| rules.decide(&at(a), &sys(1000, 1000, &[]));
        assert!(matches!(
            d("10.0.0.1"),
            Decision::Allow {
                read_only: false,
                ..
            }
        ));
        assert!(matches!(
            d("10.0.0.2"),
            Decision::Allow {
                read_only: true,
                ..
            }
        ));
        assert_eq!(d("192.168.0.1"), Decision::Denied);
    }

    #[test]
    fn squashing() {
        let mut r = ClientRule::new(ClientSpec::Any, "*");
        let root = sys(0, 0, &[0, 5]);
        assert_eq!(
            squash(&r, CallFlavor::Sys, &root),
            sys(ANON_ID, ANON_ID, &[ANON_ID, 5])
        );
        assert_eq!(
            squash(&r, CallFlavor::Sys, &sys(7, 8, &[9])),
            sys(7, 8, &[9])
        );
        r.squash = Squash::None;
        assert_eq!(squash(&r, CallFlavor::Sys, &root), root);
        assert_eq!(
            squash(&r, CallFlavor::None, &root),
            sys(ANON_ID, ANON_ID, &[])
        );
        r.squash = Squash::All;
        r.anonuid = 1000;
        r.anongid = 100;
        assert_eq!(
            squash(&r, CallFlavor::Sys, &sys(7, 8, &[9])),
            sys(1000, 100, &[])
        );
    }

    #[test]
    fn rules_describe_themselves_as_specs() {
        let d: Vec<String> = ClientRules::local_only()
            .rules()
            .iter()
            .map(ClientRule::describe)
            .collect();
        assert_eq!(
            d,
            ["127.0.0.0/8(rw,no_root_squash)", "::1(rw,no_root_squash)"]
        );
        let r = ClientRule {
            squash: Squash::All,
            anonuid: 1000,
            ..ClientRule::new(ClientSpec::Any, "*")
        };
        assert_eq!(r.describe(), "*(ro,all_squash,anonuid=1000,anongid=65534)");
    }

    #[test]
    fn a_rule_without_sys_answers_wrongsec() {
        let r = ClientRule {
            sec: vec![Flavor::Krb5p, Flavor::Krb5],
            ..ClientRule::new(ClientSpec::Any, "*")
        };
        let rules = ClientRules::new(vec![r]);
        assert_eq!(
            rules.decide(&at("10.0.0.1"), &sys(1, 1, &[])),
            Decision::WrongSec(vec![Flavor::Krb5p, Flavor::Krb5])
        );
    }

    #[test]
    fn kerberos_flavours_admit_exactly_their_service() {
        let rules = ClientRules::new(vec![ClientRule {
            read_only: false,
            sec: vec![Flavor::Krb5p, Flavor::Krb5i],
            ..ClientRule::new(ClientSpec::Any, "*")
        }]);
        let krb = |flavor, mapped| Caller {
            flavor: CallFlavor::Kerberos { flavor, mapped },
            ..at("10.0.0.1")
        };
        let alice = sys(1000, 100, &[]);
        for f in [Flavor::Krb5p, Flavor::Krb5i] {
            assert_eq!(
                rules.decide(&krb(f, true), &alice),
                Decision::Allow {
                    creds: alice.clone(),
                    read_only: false
                },
                "{f:?}"
            );
        }
        // krb5 (header only) is not krb5i; AUTH_SYS and AUTH_NONE are not Kerberos.
        let wrongsec = Decision::WrongSec(vec![Flavor::Krb5p, Flavor::Krb5i]);
        assert_eq!(rules.decide(&krb(Flavor::Krb5, true), &alice), wrongsec);
        assert_eq!(rules.decide(&at("10.0.0.1"), &alice), wrongsec);
        let none = Caller {
            flavor: CallFlavor::None,
            ..at("10.0.0.1")
        };
        assert_eq!(rules.decide(&none, &alice), wrongsec);
        // A principal without a local identity acts as the anonymous user; a mapped
        // root is squashed like AUTH_SYS root.
        assert_eq!(
            rules.decide(&krb(Flavor::Krb5p, false), &alice),
            Decision::Allow {
                creds: sys(ANON_ID, ANON_ID, &[]),
                read_only: false
            }
        );
        assert!(matches!(
            rules.decide(&krb(Flavor::Krb5p, true), &sys(0, 0, &[])),
            Decision::Allow { creds, .. } if creds.uid == ANON_ID
        ));
        // A `sys` export does not take Kerberos calls (knfsd's exact match).
        let sys_only = ClientRules::new(vec![ClientRule::new(ClientSpec::Any, "*")]);
        assert_eq!(
            sys_only.decide(&krb(Flavor::Krb5, true), &alice),
            Decision::WrongSec(vec![Flavor::Sys])
        );
    }

    #[test]
    fn advertised_flavours_collapse_the_tls_ones_into_auth_sys() {
        assert_eq!(
            Flavor::advertised(&[Flavor::Tls, Flavor::Krb5p, Flavor::Sys, Flavor::Mtls]),
            vec![Flavor::Tls, Flavor::Krb5p]
        );
        let numbers: Vec<u32> = [Flavor::Sys, Flavor::Krb5, Flavor::Krb5i, Flavor::Krb5p]
            .iter()
            .map(|f| f.pseudo_flavor())
            .collect();
        assert_eq!(numbers, [1, 390003, 390004, 390005]);
    }

    #[test]
    fn tls_flavours_ask_the_connection() {
        let rule = |sec: Vec<Flavor>| {
            ClientRules::new(vec![ClientRule {
                read_only: false,
                sec,
                ..ClientRule::new(ClientSpec::Any, "*")
            }])
        };
        let over = |transport| Caller {
            transport,
            ..at("10.0.0.1")
        };
        let me = sys(1000, 100, &[]);
        let allowed = |rules: &ClientRules, t| matches!(rules.decide(&over(t), &me), Decision::Allow { ref creds, .. } if *creds == me);
        let tls = rule(vec![Flavor::Tls]);
        assert_eq!(
            tls.decide(&over(CallTransport::Plain), &me),
            Decision::WrongSec(vec![Flavor::Tls])
        );
        assert!(allowed(&tls, CallTransport::Tls));
        assert!(allowed(&tls, CallTransport::MutualTls));
        let mtls = rule(vec![Flavor::Mtls]);
        for t in [CallTransport::Plain, CallTransport::Tls] {
            assert_eq!(
                mtls.decide(&over(t), &me),
                Decision::WrongSec(vec![Flavor::Mtls])
            );
        }
        assert!(allowed(&mtls, CallTransport::MutualTls));
        // `sys` takes every connection; a list takes what any of its flavours takes.
        let sys_rule = rule(vec![Flavor::Sys]);
        for t in [
            CallTransport::Plain,
            CallTransport::Tls,
            CallTransport::MutualTls,
        ] {
            assert!(allowed(&sys_rule, t));
        }
        let either = rule(vec![Flavor::Mtls, Flavor::Tls]);
        assert!(allowed(&either, CallTransport::Tls));
        assert!(!allowed(&either, CallTransport::Plain));
        // Squashing applies over TLS as over TCP (the certificate gates, ADR 0049).
        let squashed = ClientRules::new(vec![ClientRule {
            sec: vec![Flavor::Tls],
            ..ClientRule::new(ClientSpec::Any, "*")
        }]);
        assert_eq!(
            squashed.decide(&over(CallTransport::Tls), &sys(0, 0, &[])),
            Decision::Allow {
                creds: sys(ANON_ID, ANON_ID, &[]),
                read_only: true
            }
        );
    }
}
