//! A ferrotx node: worker threads, each one endpoint with its transport, RPC engine and
//! coroutine executor.
//!
//! [`NodeCore`] is the deterministic part, shared with the simulator: the node's
//! partitions built from a `Configuration`, and each worker's engine, participant and
//! coordinator assembled over any transport. [`Node`] runs a core's workers on OS
//! threads with UDP or in-process queues and the real clock.
//!
//! [`Worker`] is one iteration of FaSST's master loop, deterministic and driven with
//! `now` by its caller, so the simulator runs it unchanged. [`run`] drives a worker with
//! the real clock on the current thread: it busy-polls while there is work, spins briefly
//! when there is none, then sleeps in the kernel until a datagram or a timer wakes it.

mod coordination;
mod copies;
mod core;
mod disk;
mod drops;
mod durability;
mod group_commit;
mod keys;
mod lease;
pub mod lives;
mod local_cluster;
mod node;
mod placement;
mod poller;
pub mod restore;
mod runtime;
mod worker;

pub use coordination::{CALL_TIMEOUT_MIN, CoordinationHealth, call_timeout};
pub use copies::{CopiesError, CopyDigest, CopyDigests, CopyRole, TableDigest, copy_digests};
pub use core::{CoreOptions, CoreWorker, NodeCore};
pub use disk::FsStorage;
pub use drops::DropStats;
pub use durability::{
    DataDirError, NodeLogs, check_data_dir, cluster_id_bytes, durability_segment_bytes,
};
pub use ferrotx_txn::participant::RecoveryStats;
pub use ferrotx_txn::recovery::{VOTES as RECOVERY_VOTES, Vote as RecoveryVote};
pub use group_commit::{LogShare, SyncThread, WorkerLog};
pub use keys::{
    ClusterKeys, KEY_RELOAD, KEY_WAIT, KeyError, cluster_id, key_path, load_keys, new_key_line,
    process_auth, random_bytes, read_key_file, write_new_key_file,
};
pub use lease::{
    LeaseError, LeaseStatus, LeaseThread, LeaseTuning, Link, MemoryLock, REALTIME_PRIORITY,
};
pub use local_cluster::{CopyRead, LocalCluster};
pub use node::{
    AttachError, Node, NodeHandle, NodeOptions, ShipStats, SpawnError, StartError, WorkerReport,
    incarnation_from_clock, resident_bytes,
};
pub use placement::ClusterPlacement;
pub use poller::{Polled, Poller};
pub use runtime::{Flow, Idle, run, run_with};
pub use worker::{BATCH_DATAGRAMS, Worker};
