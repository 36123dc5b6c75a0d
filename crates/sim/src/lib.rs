//! Deterministic simulation of ferrotx: every endpoint of a cluster in one thread, on a
//! simulated network that drops, duplicates, delays, reorders and partitions datagrams,
//! all drawn from one seed, so that any failing run replays exactly.
//!
//! The production node runs unchanged: [`SimCluster`] builds every member's
//! `NodeCore` from a `Configuration` (placement, key hash, partition map) and its workers
//! over [`SimTransport`]; [`Simulator`] advances simulated time from event to event on
//! each node's drifting clock, pausing and crashing nodes. [`run::run`] runs one
//! [`run::Scenario`] (a workload's clients and checks, see [`scenarios`]) under the
//! [`FaultPlan`] its seed draws; `ferrotx sim` runs many.

pub mod cluster;
pub mod disk;
pub mod faults;
pub mod membership;
pub mod membership_scenarios;
mod network;
pub mod plot;
pub mod recovery_scenarios;
pub mod rpc_workload;
pub mod run;
pub mod scenarios;
pub mod seeds;
mod simulator;

pub use cluster::{Attack, SimCluster, TrapAction};
pub use faults::{FaultEvent, FaultKind, FaultPlan};
/// Recovery's counters and vote kinds, as reports show them.
pub use ferrotx_txn::participant::RecoveryStats;
pub use ferrotx_txn::recovery::VOTES;
pub use network::{Faults, SimNetwork, SimTransport};
pub use simulator::{NodeClock, Simulator};
