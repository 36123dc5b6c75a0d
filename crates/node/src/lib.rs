//! A ferrotx node: worker threads, each one endpoint with its transport, RPC engine and
//! coroutine executor.
//!
//! [`Worker`] is one iteration of FaSST's master loop, deterministic and driven with
//! `now` by its caller, so the simulator runs it unchanged. [`run`] drives a worker with
//! the real clock on the current thread: it busy-polls while there is work, spins briefly
//! when there is none, then sleeps in the kernel until a datagram or a timer wakes it.

mod local_cluster;
mod node;
mod placement;
mod runtime;
mod worker;

pub use local_cluster::{CopyRead, LocalCluster};
pub use node::{Node, NodeHandle, NodeOptions, SpawnError, WorkerReport, incarnation_from_clock};
pub use placement::ClusterPlacement;
pub use runtime::{Idle, run};
pub use worker::{BATCH_DATAGRAMS, Worker};
