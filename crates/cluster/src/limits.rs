//! Bounds on a configuration's size.

/// Most members of a cluster. FaRM and FaSST ran on tens of machines (90 at most); 1,024
/// leaves room for growth while keeping the placement's two tables of counters per pair
/// of members (8 MiB at this bound, for a moment at start-up) and every node's address
/// book small.
pub const MEMBERS_MAX: usize = 1024;

/// Most worker threads (RPC endpoints) per node: more than the cores of any machine we
/// target, and it bounds each member's port range and the address book (members times
/// threads endpoints).
pub const THREADS_PER_NODE_MAX: u16 = 1024;

/// Most partitions of a cluster. Every node holds the whole partition map, and it travels
/// whole in configuration messages; 65,536 gives thousands of partitions per node on
/// clusters of tens of nodes, enough for balance and parallel recovery.
pub const PARTITIONS_MAX: u32 = 1 << 16;

/// Largest configuration id: TOML integers are signed 64-bit. Ids grow by one per
/// reconfiguration, so no cluster comes near it.
pub const CONFIGURATION_ID_MAX: u64 = i64::MAX as u64;
