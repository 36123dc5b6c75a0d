//! ferrotx benchmarks. Each runs a real cluster (processes on loopback, or threads in one
//! process), measures throughput, CPU time and latency over a fixed window, and reports a
//! table and JSON.

pub mod cpu;
pub mod disk;
pub mod driver;
pub mod failover;
pub mod kv;
pub mod latency;
pub mod lossy;
pub mod plot;
pub mod processes;
pub mod restore;
pub mod rpc;
pub mod sweep;
pub mod timeline;

// The workloads live in their own crate (used by the simulator and tests too); these
// paths stay for the binary and the reports.
pub use ferrotx_workload::{smallbank, tatp, workload};
