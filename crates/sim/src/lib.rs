//! Deterministic simulation of the txnfs NFSv4.1 server (ADR 0010).
//!
//! Several simulated clients drive the server's COMPOUND executor in process (no
//! sockets) on a simulated clock, through a fault-injecting backend, with lost replies,
//! retransmissions, cut connections, lease expiry and server restarts. Clients whose
//! back channel the simulation declares working get delegations; the CB_RECALLs the
//! server asks for are delivered by the simulation, and answered promptly, late or
//! never. A seed decides everything; the same seed replays the same run. Invariants are
//! checked as each reply arrives and after every step; the first violation names the
//! seed and step.
//!
//! Transactions (ADR 0021, [`txn`]): the backend stack is the txn layer over the fault
//! layer over the memory backend, so injected faults hit transactions mid-way.
//! Clients send random transactional COMPOUNDs (mkdir, create + write, overwrite,
//! SETATTR size and mode, remove, rename of files and directories, link; some end on
//! purpose with an op that fails) among the plain traffic; some transactions are cut
//! short by a crash (driven on the layer directly, then a restart over the same
//! backend and journal, recovery itself crashing now and then), some run into another
//! transaction held open. After each, the touched directories and entries must be
//! exactly what the model predicts: a committed transaction's effects all there, an
//! aborted, failed or crashed one's none.

pub mod actions;
pub mod client;
pub mod fault;
pub mod model;
pub mod oracle;
pub mod rng;
pub mod server_port;
pub mod sim;
pub mod txn;
pub mod wire;

pub use sim::{run, Failure, SimConfig, Stats, Violation, ViolationKind};

/// Seeds and steps from the environment (TXNFS_SIM_SEEDS, TXNFS_SIM_STEPS), with
/// defaults sized for a debug build on a small machine.
pub fn env_sizes(default_seeds: u64, default_steps: u64) -> (u64, u64) {
    let get = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    (
        get("TXNFS_SIM_SEEDS", default_seeds),
        get("TXNFS_SIM_STEPS", default_steps),
    )
}

/// Run seeds `first..first + seeds`; stops at the first failure.
pub fn run_seeds(first: u64, seeds: u64, steps: u64) -> Result<Vec<Stats>, Failure> {
    (first..first + seeds)
        .map(|seed| run(SimConfig::for_seed(seed, steps)))
        .collect()
}
