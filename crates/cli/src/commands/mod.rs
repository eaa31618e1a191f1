//! The file commands of the `txnfs` binary (ls, stat, cat, cp, mkdir, rm, mv, ln), on
//! the vectorized client API, and what they share: connecting to the servers named by
//! the URLs, coreutils-style failure messages and exit codes, and `--stats`.

pub mod atomic;
pub mod cat;
pub mod cp;
mod cp_atomic;
mod cp_xattrs;
pub mod follow;
pub mod format;
mod interrupt;
pub mod ln;
pub mod lost;
pub mod ls;
pub mod mkdir;
pub mod mv;
pub mod progress;
pub mod rm;
mod sec;
pub mod stat;
pub mod stream;
mod tls;
pub mod url;

use clap::Args;
use std::collections::BTreeMap;
use std::future::Future;
use std::process::ExitCode;
use txnfs_client::{message, Attributes, Client, ClientConfig, ClientError, Fs};
use txnfs_proto::nfs4::nfsstat4;
use url::{NfsUrl, ServerKey};

/// Flags every file command takes.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Client options (file commands; before or after the command)")]
pub struct GlobalArgs {
    /// Uid to send in AUTH_SYS credentials (default: the calling user's).
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Gid to send in AUTH_SYS credentials (default: the calling user's).
    #[arg(long, value_name = "GID")]
    pub gid: Option<u32>,
    /// After the command, print to stderr the number of COMPOUNDs and of ops per op
    /// type sent to each server.
    #[arg(long)]
    pub stats: bool,
    /// Ask for no delegations and cache nothing (by default the client caches what the
    /// server delegates: reads, attributes, directory listings).
    #[arg(long)]
    pub no_delegations: bool,
    /// NFS version to speak: 4.2 or 4.1 (default: the highest the server accepts, as
    /// the Linux client's mount without vers=). On 4.1 copies on one server go
    /// through the client and sparse files are copied with their holes filled.
    #[arg(long, value_name = "VERSION", value_parser = parse_vers)]
    pub vers: Option<u32>,
    /// Speak RPC-with-TLS (RFC 9289): probe with AUTH_TLS, then every call inside
    /// TLS 1.3; the server's certificate must be signed by a CA of --tls-ca and name
    /// the host of the URL.
    #[arg(long)]
    pub tls: bool,
    /// The CAs (PEM) that vouch for the server's certificate (with --tls; default:
    /// the system's, /etc/ssl/certs/ca-certificates.crt).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) to present when the server asks (mTLS, exports
    /// with sec=mtls); with --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Security flavour: sys (AUTH_SYS, the default), or Kerberos v5 with the ticket
    /// of KRB5CCNAME (run kinit first): krb5 (signed headers), krb5i (signed calls),
    /// krb5p (encrypted calls). The server's principal is nfs/HOST of the URL.
    #[arg(long, value_name = "sys|krb5|krb5i|krb5p")]
    pub sec: Option<txnfs_client::Sec>,
}

impl GlobalArgs {
    /// These options given before the command (`txnfs --stats cp ...`), completed by
    /// those given after it (`txnfs cp --stats ...`).
    pub fn or(self, after: GlobalArgs) -> GlobalArgs {
        GlobalArgs {
            uid: after.uid.or(self.uid),
            gid: after.gid.or(self.gid),
            stats: self.stats || after.stats,
            no_delegations: self.no_delegations || after.no_delegations,
            vers: after.vers.or(self.vers),
            tls: self.tls || after.tls,
            tls_ca: after.tls_ca.or(self.tls_ca),
            tls_cert: after.tls_cert.or(self.tls_cert),
            tls_key: after.tls_key.or(self.tls_key),
            sec: after.sec.or(self.sec),
        }
    }

    /// The client options given, by flag name (a command that is not a file command
    /// refuses them).
    pub fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.uid.is_some() {
            v.push("--uid");
        }
        if self.gid.is_some() {
            v.push("--gid");
        }
        if self.stats {
            v.push("--stats");
        }
        if self.no_delegations {
            v.push("--no-delegations");
        }
        if self.vers.is_some() {
            v.push("--vers");
        }
        for (given, flag) in [
            (self.tls, "--tls"),
            (self.tls_ca.is_some(), "--tls-ca"),
            (self.tls_cert.is_some(), "--tls-cert"),
            (self.tls_key.is_some(), "--tls-key"),
            (self.sec.is_some(), "--sec"),
        ] {
            if given {
                v.push(flag);
            }
        }
        v
    }
}

/// `4.1` / `4.2` to a minor version.
fn parse_vers(s: &str) -> Result<u32, String> {
    match s {
        "4.2" => Ok(2),
        "4.1" => Ok(1),
        _ => Err(format!(
            "'{s}': txnfs speaks NFS 4.2 and 4.1 (leave --vers out for the highest)"
        )),
    }
}

/// One file command with its arguments.
pub enum FileCmd {
    Ls(ls::LsArgs),
    Stat(stat::StatArgs),
    Cat(cat::CatArgs),
    Cp(cp::CpArgs),
    Mkdir(mkdir::MkdirArgs),
    Rm(rm::RmArgs),
    Mv(mv::MvArgs),
    Ln(ln::LnArgs),
}

impl FileCmd {
    /// The command's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            FileCmd::Ls(_) => "ls",
            FileCmd::Stat(_) => "stat",
            FileCmd::Cat(_) => "cat",
            FileCmd::Cp(_) => "cp",
            FileCmd::Mkdir(_) => "mkdir",
            FileCmd::Rm(_) => "rm",
            FileCmd::Mv(_) => "mv",
            FileCmd::Ln(_) => "ln",
        }
    }
}

/// A usage error found after parsing (bad URL, missing operand): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Bail out with a usage error.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
}

/// What a command works with: connections (one session per server), and the count of
/// items that failed.
pub struct Ctx {
    pub global: GlobalArgs,
    conns: BTreeMap<ServerKey, Fs>,
    failures: usize,
    /// "cp", "rm", ...: how the one line of a lost connection names the command.
    command: &'static str,
    /// Set at the first lost connection (reported once): the command ends at its next
    /// request, and no later failure is reported.
    lost: bool,
    /// How far the command got, for that line.
    tally: Option<lost::Tally>,
    /// The clients of `conns`, as the signal handling sees them.
    connected: interrupt::Connected,
}

/// "No such file or directory (NFS4ERR_NOENT)" for NFS errors; the error's text
/// otherwise.
pub fn describe(e: &ClientError) -> String {
    match e {
        ClientError::Nfs { status, .. } => format!("{} ({status:?})", message(*status)),
        other => other.to_string(),
    }
}

/// An OS error as coreutils prints it ("No such file or directory", no "(os error 2)").
pub fn describe_io(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

impl Ctx {
    pub fn new(global: GlobalArgs, command: &'static str) -> Ctx {
        Ctx {
            global,
            conns: BTreeMap::new(),
            failures: 0,
            command,
            lost: false,
            tally: None,
            connected: Default::default(),
        }
    }

    /// Count `total` items (`noun`: "files") for the line a lost connection prints; the
    /// command adds to the returned tally as items are done.
    pub fn tally(&mut self, total: u64, noun: &'static str) -> lost::Tally {
        let t = lost::Tally::new(total, noun);
        self.tally = Some(t.clone());
        t
    }

    /// The session to `key`'s server (connected on first use); after a lost connection,
    /// the error that ends the command.
    pub async fn fs(&mut self, key: &ServerKey) -> anyhow::Result<Fs> {
        if self.lost {
            return Err(lost::ConnectionLost.into());
        }
        if let Some(fs) = self.conns.get(key) {
            return Ok(fs.clone());
        }
        let addr = key
            .addr()
            .map_err(|e| anyhow::anyhow!("cannot resolve '{}': {e}", key.host))?;
        let mut cfg = ClientConfig::new(addr);
        if let Some(u) = self.global.uid {
            cfg.uid = u;
        }
        if let Some(g) = self.global.gid {
            cfg.gid = g;
        }
        cfg.max_attempts = 3;
        cfg.delegations = !self.global.no_delegations;
        cfg.minor = self.global.vers;
        cfg.on_busy = Some(interrupt::busy_notice(key.to_string()));
        cfg.tls = tls::client_tls(&self.global, &key.host)?;
        cfg.gss = sec::client_gss(self.global.sec, &key.host);
        let client = Client::connect(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to {key}: {}", describe(&e)))?;
        self.connected.add(client.clone());
        let fs = Fs::new(client);
        self.conns.insert(key.clone(), fs.clone());
        Ok(fs)
    }

    /// Report one failed item: `txnfs: <what>: <why>` (nothing once the connection
    /// was lost: the failures that follow are its).
    pub fn fail(&mut self, what: impl std::fmt::Display, why: impl std::fmt::Display) {
        self.failures += 1;
        if !self.lost {
            eprintln!("txnfs: {what}: {why}");
        }
    }

    /// Report a failed NFS item; a lost connection ends the command with one line.
    pub fn fail_nfs(&mut self, what: impl std::fmt::Display, e: &ClientError) {
        match lost::connection_loss(e) {
            Some(_) if self.lost => self.failures += 1,
            Some(loss) => {
                let server = match (&loss.addr, self.conns.keys().next()) {
                    (Some(a), _) => a.clone(),
                    (None, Some(k)) if self.conns.len() == 1 => k.to_string(),
                    _ => "the server".into(),
                };
                eprintln!(
                    "{}",
                    lost::summary(self.command, &server, &loss, self.tally.as_ref())
                );
                self.lost = true;
                self.failures += 1;
            }
            None => self.fail(what, describe(e)),
        }
    }

    /// Report an operand whose symbolic links could not be resolved.
    pub fn fail_unresolved(&mut self, what: impl std::fmt::Display, e: follow::Unresolved) {
        match e {
            follow::Unresolved::Nfs(e) => self.fail_nfs(what, &e),
            other => self.fail(what, other),
        }
    }

    /// Report a failed local item.
    pub fn fail_io(&mut self, what: impl std::fmt::Display, e: &std::io::Error) {
        self.fail(what, describe_io(e));
    }

    /// Report a failure without an error text (e.g. "-r not specified; omitting ...").
    pub fn fail_msg(&mut self, msg: impl std::fmt::Display) {
        eprintln!("txnfs: {msg}");
        self.failures += 1;
    }

    pub fn failures(&self) -> usize {
        self.failures
    }

    /// Run a vectorized call per server over `urls` and put the results back in the
    /// order of `urls`. `f` gets the session and the paths of that server's URLs.
    pub async fn per_server<T, F, Fut>(
        &mut self,
        urls: &[&NfsUrl],
        f: F,
    ) -> anyhow::Result<Vec<Result<T, ClientError>>>
    where
        F: Fn(Fs, Vec<String>) -> Fut,
        Fut: Future<Output = Vec<Result<T, ClientError>>>,
    {
        self.per_server_idx(urls, |fs, idx| {
            f(fs, idx.iter().map(|&i| urls[i].path.clone()).collect())
        })
        .await
    }

    /// Like [`Ctx::per_server`], but `f` gets the indices (into `urls`) of the server's
    /// URLs, in order.
    pub async fn per_server_idx<T, F, Fut>(
        &mut self,
        urls: &[&NfsUrl],
        f: F,
    ) -> anyhow::Result<Vec<Result<T, ClientError>>>
    where
        F: Fn(Fs, Vec<usize>) -> Fut,
        Fut: Future<Output = Vec<Result<T, ClientError>>>,
    {
        let mut groups: BTreeMap<ServerKey, Vec<usize>> = BTreeMap::new();
        for (i, u) in urls.iter().enumerate() {
            groups.entry(u.server()).or_default().push(i);
        }
        let mut out: Vec<Option<Result<T, ClientError>>> = urls.iter().map(|_| None).collect();
        for (key, idx) in groups {
            let fs = self.fs(&key).await?;
            let res = split_retry(idx.clone(), |part| f(fs.clone(), part)).await;
            for (i, r) in idx.into_iter().zip(res) {
                out[i] = Some(r);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClientError::Local("no result".into()))))
            .collect())
    }

    /// Attributes of many URLs (symlinks not followed), in one vectorized call per server.
    pub async fn getattrs(
        &mut self,
        urls: &[&NfsUrl],
    ) -> anyhow::Result<Vec<Result<Attributes, ClientError>>> {
        self.per_server(urls, |fs, paths| async move { fs.vgetattrs(&paths).await })
            .await
    }

    /// Whether `u` is an existing directory (false when nothing is there), as a
    /// destination operand is checked; `None` when it cannot be stat'ed (reported).
    pub async fn existing_dir(&mut self, u: &NfsUrl) -> anyhow::Result<Option<bool>> {
        Ok(match self.getattrs(&[u]).await?.pop() {
            Some(Ok(at)) => Some(at.is_dir()),
            Some(Err(e)) if e.status() == Some(nfsstat4::NFS4ERR_NOENT) => Some(false),
            Some(Err(e)) => {
                self.fail_nfs(format!("cannot stat '{}'", u.display), &e);
                None
            }
            None => Some(false),
        })
    }

    /// Print `--stats` and close the sessions (after a lost connection, no flush
    /// or close is tried: they would wait for the server in vain).
    async fn finish(&mut self) {
        let conns = std::mem::take(&mut self.conns);
        for (key, fs) in conns {
            if self.global.stats {
                eprint!("{}", stats_text(&key, fs.client()));
            }
            if self.lost {
                continue;
            }
            // Writes kept under write delegations reach the server before we go: a
            // failure here is a failed command, not a silent loss.
            if let Err(e) = fs.vflush().await {
                self.fail(format!("flush to {key}"), describe(&e));
            }
            let client = fs.client().clone();
            drop(fs);
            // Best effort: the server drops the session at lease expiry anyway.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), client.close()).await;
        }
    }
}

/// The `--stats` block for one server.
pub fn stats_text(key: &ServerKey, client: &Client) -> String {
    let s = client.stats();
    let mut out = format!(
        "txnfs: stats for {key}: {} COMPOUNDs, {} ops ({} besides SEQUENCE)\n",
        s.compounds,
        s.total_ops(),
        s.ops_excluding_sequence()
    );
    out.push_str(&ops_table(&s.ops));
    if s.reconnects > 0 || s.session_recoveries > 0 {
        out.push_str(&format!(
            "  (reconnects {}, session recoveries {})\n",
            s.reconnects, s.session_recoveries
        ));
    }
    out
}

/// The ops sent, one per line, names left-aligned and counts right-aligned under an
/// "OP COUNT" header, the columns as wide as their widest cell.
pub fn ops_table(ops: &BTreeMap<&'static str, u64>) -> String {
    const NAME: &str = "OP";
    const COUNT: &str = "COUNT";
    let name_w = ops
        .keys()
        .map(|k| k.len())
        .chain([NAME.len()])
        .max()
        .unwrap_or(0);
    let count_w = ops
        .values()
        .map(|n| n.to_string().len())
        .chain([COUNT.len()])
        .max()
        .unwrap_or(0);
    let mut out = format!("  {NAME:<name_w$}  {COUNT:>count_w$}\n");
    for (op, n) in ops {
        out.push_str(&format!("  {op:<name_w$}  {n:>count_w$}\n"));
    }
    out
}

/// The signals a file command leaves on in good order (SIGINT, SIGTERM, SIGHUP):
/// it stops the command, flushes what it buffered, returns its delegations and ends
/// its sessions, so that no other client waits for a recall it would never answer.
struct Departure {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Departure {
    fn listen() -> std::io::Result<Departure> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Departure {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of them: its number.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => 2,
            _ = self.term.recv() => 15,
            _ = self.hup.recv() => 1,
        }
    }
}

/// How long a command stopped by a signal may take to leave (flush, return its
/// delegations, end its sessions); a second signal ends it at once.
const DEPART_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Run a file command: 0 on success, 1 if any item failed (or a fatal error), 2 for
/// usage errors, 128 + the signal's number when stopped by SIGINT, SIGTERM or SIGHUP.
/// However it ends, its sessions are closed first ([`Ctx::finish`]).
pub fn run(global: GlobalArgs, cmd: FileCmd) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("txnfs: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let mut signals = match Departure::listen() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot handle signals ({e}): a signal ends the command abruptly");
                None
            }
        };
        let mut ctx = Ctx::new(global, cmd.name());
        let connected = ctx.connected.clone();
        let stopped_by = {
            let work = async {
                match cmd {
                    FileCmd::Ls(a) => ls::run(&mut ctx, a).await,
                    FileCmd::Stat(a) => stat::run(&mut ctx, a).await,
                    FileCmd::Cat(a) => cat::run(&mut ctx, a).await,
                    FileCmd::Cp(a) => cp::run(&mut ctx, a).await,
                    FileCmd::Mkdir(a) => mkdir::run(&mut ctx, a).await,
                    FileCmd::Rm(a) => rm::run(&mut ctx, a).await,
                    FileCmd::Mv(a) => mv::run(&mut ctx, a).await,
                    FileCmd::Ln(a) => ln::run(&mut ctx, a).await,
                }
            };
            let signal = async {
                match signals.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(work);
            tokio::select! {
                r = &mut work => Ok(r),
                sig = signal => {
                    // A transaction whose commit was sent: its reply says what
                    // happened, so wait for it (within the departure bound).
                    let done = if connected.committing() {
                        tokio::time::timeout(DEPART_WITHIN, &mut work).await.ok()
                    } else {
                        None
                    };
                    Err((sig, done))
                }
            }
        };
        let r = match stopped_by {
            Ok(r) => r,
            Err((sig, done)) => {
                let committed = matches!(done, Some(Ok(()))) && ctx.failures() == 0;
                if committed {
                    eprintln!("txnfs: interrupted after the transaction had committed");
                }
                // The command is dropped where it stood; what it wrote so far is
                // flushed and its delegations returned, within a bound.
                let again = async {
                    match signals.as_mut() {
                        Some(s) => s.recv().await,
                        None => std::future::pending().await,
                    }
                };
                let depart = async {
                    // What the dropped command left open is rolled back first.
                    if let Some(outcome) = connected.interrupt().await {
                        if !committed {
                            eprintln!("txnfs: {}", outcome.message());
                        }
                    }
                    ctx.finish().await
                };
                tokio::select! {
                    _ = depart => {}
                    _ = again => {}
                    _ = tokio::time::sleep(DEPART_WITHIN) => {
                        eprintln!("txnfs: could not close the sessions in time");
                    }
                }
                return ExitCode::from(128 + sig as u8);
            }
        };
        ctx.finish().await;
        match r {
            // Its one line is out already.
            Err(e) if e.downcast_ref::<lost::ConnectionLost>().is_some() => ExitCode::FAILURE,
            Err(e) if e.downcast_ref::<UsageError>().is_some() => {
                eprintln!("txnfs: {e}\nTry 'txnfs --help' for more information.");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("txnfs: {e:#}");
                ExitCode::FAILURE
            }
            Ok(()) if ctx.failures() > 0 => ExitCode::FAILURE,
            Ok(()) => ExitCode::SUCCESS,
        }
    })
}

/// Whether a whole vectorized call failed because the server could not decode the
/// COMPOUND (RPC GARBAGE_ARGS): Ganesha refuses more than 1024 ops that way, not with
/// NFS4ERR_RESOURCE, so the client library does not learn its limit.
fn undecodable(results: &[Result<impl Sized, ClientError>]) -> bool {
    !results.is_empty()
        && results.iter().all(|r| match r {
            Err(e) => e.status().is_none() && e.to_string().contains("could not decode"),
            Ok(_) => false,
        })
}

/// Call `f` on `items` (indices of the caller's items); when the server could not
/// decode the COMPOUND, call it again on each half (recursively), so a vectorized call
/// never needs more ops than the server takes. Results are in the order of `items`.
pub async fn split_retry<T, F, Fut>(items: Vec<usize>, f: F) -> Vec<Result<T, ClientError>>
where
    F: Fn(Vec<usize>) -> Fut,
    Fut: Future<Output = Vec<Result<T, ClientError>>>,
{
    let n = items.len();
    let mut out: Vec<Option<Result<T, ClientError>>> = (0..n).map(|_| None).collect();
    // (offset into items, part)
    let mut todo: Vec<(usize, Vec<usize>)> = vec![(0, items)];
    while let Some((off, part)) = todo.pop() {
        let res = f(part.clone()).await;
        if part.len() > 1 && undecodable(&res) {
            tracing::debug!(
                items = part.len(),
                "server could not decode the COMPOUND; splitting"
            );
            let half = part.len() / 2;
            todo.push((off + half, part[half..].to_vec()));
            todo.push((off, part[..half].to_vec()));
            continue;
        }
        for (k, r) in res.into_iter().enumerate() {
            if let Some(slot) = out.get_mut(off + k) {
                *slot = Some(r);
            }
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(ClientError::Local("no result".into()))))
        .collect()
}

/// [`split_retry`] over `items` on one session: `f` gets the session and the items of
/// each part (cloned). Results are in the order of `items`.
pub async fn split_retry_items<I: Clone, T, F, Fut>(
    fs: &Fs,
    items: &[I],
    f: F,
) -> Vec<Result<T, ClientError>>
where
    F: Fn(Fs, Vec<I>) -> Fut,
    Fut: Future<Output = Vec<Result<T, ClientError>>>,
{
    split_retry((0..items.len()).collect(), |part| {
        f(fs.clone(), part.iter().map(|&k| items[k].clone()).collect())
    })
    .await
}

/// Parse URL operands; a bad one is a usage error.
pub fn parse_urls(args: &[String]) -> anyhow::Result<Vec<NfsUrl>> {
    args.iter()
        .map(|a| {
            if !url::is_url(a) {
                return usage(format!(
                    "'{a}' is not an nfs:// URL (expected nfs://host[:port]/path)"
                ));
            }
            NfsUrl::parse(a).or_else(|e| usage(format!("invalid URL '{a}': {e}")))
        })
        .collect()
}

/// The process umask (from /proc/self/status; 022 if unknown).
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the table has the count's last digit in one column and the name
    /// at one indent, whatever the widths of names and numbers.
    #[test]
    fn the_stats_table_is_aligned_for_any_widths() {
        let ops: BTreeMap<&'static str, u64> = [
            ("SEQUENCE", 7),
            ("BIND_CONN_TO_SESSION", 1),
            ("GETATTR", 12_345_678_901),
            ("RM", 0),
        ]
        .into_iter()
        .collect();
        let table = ops_table(&ops);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[0].trim_start().starts_with("OP"), "{table}");
        let width = lines[0].len();
        for l in &lines {
            assert_eq!(l.len(), width, "ragged row {l:?} in\n{table}");
            assert!(l.starts_with("  ") && !l.starts_with("   "), "{l:?}");
            assert!(l.ends_with(|c: char| c.is_ascii_alphanumeric()), "{l:?}");
        }
        // Names start in one column; counts are right-aligned (their ends line up).
        assert!(lines.iter().any(|l| l.trim_end().ends_with(" 12345678901")));
        let counts_start = width - "12345678901".len();
        for l in &lines[1..] {
            let (name, count) = l.split_at(counts_start);
            assert!(
                name.trim()
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_'),
                "{l:?}"
            );
            assert!(count.trim().parse::<u64>().is_ok(), "{l:?}");
        }
    }
}
