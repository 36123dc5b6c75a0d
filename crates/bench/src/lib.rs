//! ferrotx benchmarks. Each runs a real cluster (processes on loopback, or threads in one
//! process), measures throughput, CPU time and latency over a fixed window, and reports a
//! table and JSON.

pub mod cpu;
pub mod driver;
pub mod kv;
pub mod latency;
pub mod lossy;
pub mod png;
pub mod processes;
mod raster;
pub mod rpc;
pub mod smallbank;
pub mod sweep;
pub mod tatp;
pub mod workload;
