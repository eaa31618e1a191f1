//! `txnfs`: the one binary. `txnfs serve DIR` exports DIR over NFSv3, 4.0, 4.1 and
//! 4.2; `ls`, `stat`, `cat`, `cp`, `mkdir`, `rm`, `mv` and `ln` work on
//! nfs://host[:port]/path URLs through the vectorized client.

mod bench;
mod commands;
mod reload;
mod serve;
mod startup;
mod stats;

use clap::{Parser, Subcommand};
use commands::{FileCmd, GlobalArgs};

#[derive(Parser)]
#[command(
    name = "txnfs",
    version,
    about = "A user-space NFS server (NFSv3, 4.0, 4.1, 4.2), and file commands that talk NFSv4.2",
    long_about = "txnfs is a user-space NFS server (NFSv3, 4.0, 4.1 and 4.2), with coreutils-like file commands \
                  on nfs://host[:port]/path URLs that pack many operations per COMPOUND.\n\n\
                  Quick start:  txnfs serve /srv/data\n\
                  then, on a Linux client:  mount -t nfs SERVER:/ /mnt\n\
                  or without mounting:      txnfs ls -l nfs://SERVER/",
    after_help = "EXAMPLES:\n  \
    txnfs serve --listen 127.0.0.1:2050 /srv/data\n  \
    txnfs ls -lR nfs://127.0.0.1:2050/\n  \
    txnfs cp -R ./photos nfs://127.0.0.1:2050/photos\n  \
    txnfs cp nfs://127.0.0.1:2050/photos/a.jpg /tmp/\n  \
    txnfs cat nfs://127.0.0.1:2050/notes.txt\n  \
    txnfs mkdir -p nfs://127.0.0.1:2050/a/b/c\n  \
    txnfs mv nfs://127.0.0.1:2050/a nfs://127.0.0.1:2050/b\n  \
    txnfs ln -s notes.txt nfs://127.0.0.1:2050/latest\n  \
    txnfs rm -r nfs://127.0.0.1:2050/b\n  \
    txnfs --stats cp -R ./tree nfs://127.0.0.1:2050/t   (COMPOUNDs and ops per op type)\n  \
    txnfs cp -R --atomic ./tree nfs://127.0.0.1:2050/t  (one transaction: all or nothing)\n\n\
    URLs: nfs://host[:port]/path, port 2049 by default, path relative to the server's \
    NFS root (%XX escapes allowed).\n\
    Credentials: AUTH_SYS with the caller's uid/gid, or --uid/--gid.\n\
    Exit status: 0 on success, 1 if any item failed, 2 on usage errors."
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve directories over NFSv3, 4.0, 4.1 and 4.2 (listens on 127.0.0.1:2049 by default).
    Serve(serve::ServeArgs),
    /// List directory contents.
    Ls {
        #[command(flatten)]
        args: commands::ls::LsArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Show file attributes.
    Stat {
        #[command(flatten)]
        args: commands::stat::StatArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Print files to stdout.
    Cat {
        #[command(flatten)]
        args: commands::cat::CatArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Copy files and trees between local paths and NFS URLs.
    Cp {
        #[command(flatten)]
        args: commands::cp::CpArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Create directories.
    Mkdir {
        #[command(flatten)]
        args: commands::mkdir::MkdirArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Remove files or trees.
    Rm {
        #[command(flatten)]
        args: commands::rm::RmArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Rename or move files.
    Mv {
        #[command(flatten)]
        args: commands::mv::MvArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// Make hard or symbolic links.
    Ln {
        #[command(flatten)]
        args: commands::ln::LnArgs,
        #[command(flatten)]
        client: GlobalArgs,
    },
    /// A running server's counters: ops, latencies, errors, bytes, clients,
    /// delegations (read from its state directory's control socket).
    Stats(stats::StatsArgs),
    /// Make a running server read its configuration again and apply the export
    /// changes, the TLS certificate and the principal map (through its state
    /// directory's control socket; SIGHUP does the same).
    Reload(reload::ReloadArgs),
    /// Benchmarks: run a workload, or compare servers side by side (runs the separate
    /// txnfs-bench binary: `txnfs bench --help`).
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_log = if matches!(cli.cmd, Cmd::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TXNFS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log)),
        )
        .with_writer(std::io::stderr)
        // Colour codes are for a terminal; in a log file or journal they are noise.
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .init();
    // The client options belong to the file commands: given before `serve` or
    // `bench` (where they did nothing) they are refused (`--vers` is the runner's for
    // `bench`).
    let given = cli.global.given();
    let misplaced: Vec<&str> = match &cli.cmd {
        Cmd::Serve(_) | Cmd::Stats(_) | Cmd::Reload(_) => given,
        Cmd::Bench(_) => given.into_iter().filter(|f| *f != "--vers").collect(),
        _ => Vec::new(),
    };
    if !misplaced.is_empty() {
        eprintln!(
            "txnfs: {} {} an option of the file commands (ls, stat, cat, cp, mkdir, rm, mv, \
             ln), not of this command",
            misplaced.join(", "),
            if misplaced.len() == 1 { "is" } else { "are" }
        );
        return std::process::ExitCode::from(2);
    }
    let (file_cmd, client) = match cli.cmd {
        Cmd::Serve(a) => return exit_code(serve::run(a)),
        Cmd::Stats(a) => return exit_code(stats::run(a)),
        Cmd::Reload(a) => return exit_code(reload::run(a)),
        Cmd::Ls { args, client } => (FileCmd::Ls(args), client),
        Cmd::Stat { args, client } => (FileCmd::Stat(args), client),
        Cmd::Cat { args, client } => (FileCmd::Cat(args), client),
        Cmd::Cp { args, client } => (FileCmd::Cp(args), client),
        Cmd::Mkdir { args, client } => (FileCmd::Mkdir(args), client),
        Cmd::Rm { args, client } => (FileCmd::Rm(args), client),
        Cmd::Mv { args, client } => (FileCmd::Mv(args), client),
        Cmd::Ln { args, client } => (FileCmd::Ln(args), client),
        Cmd::Bench(a) => {
            let e = bench::exec(a, cli.global.vers);
            eprintln!("txnfs: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    commands::run(cli.global.or(client), file_cmd)
}

/// The exit status of a command that is not a file command: its error on stderr.
fn exit_code(r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("txnfs: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
