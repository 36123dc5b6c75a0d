//! Deterministic simulation of ferrotx: every endpoint of a cluster in one thread, on a
//! simulated network that drops, duplicates, delays, reorders and partitions datagrams,
//! all drawn from one seed, so that any failing run replays exactly.
//!
//! The production `Worker` (transport, RPC engine, executor) runs unchanged over
//! [`SimTransport`]; [`Simulator`] advances simulated time from event to event.

pub mod cluster;
pub mod faults;
mod network;
pub mod rpc_workload;
pub mod run;
pub mod scenarios;
pub mod seeds;
mod simulator;
pub mod txn_workload;

/// The checker of strict serializability, now in the workload crate (the simulator
/// drives its workloads and checkers from there).
pub use ferrotx_workload::check::serializability;

pub use cluster::SimCluster;
pub use faults::{FaultEvent, FaultKind, FaultPlan};
pub use network::{Faults, SimNetwork, SimTransport};
pub use simulator::{NodeClock, Simulator};
