//! Errors of the cluster layer.

use std::net::IpAddr;
use std::path::PathBuf;

/// Why a configuration was refused. Each message names the setting to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read the cluster configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The text is not TOML of the configuration's format (syntax, a missing or unknown
    /// field, a value of the wrong type).
    #[error("invalid cluster configuration: {0}")]
    Parse(#[from] toml::de::Error),
    /// The configuration id does not fit a TOML integer (a signed 64-bit number).
    #[error("configuration id {id} is above {max}: TOML integers are signed 64-bit")]
    IdTooLarge {
        /// The id given.
        id: u64,
        /// The largest id allowed.
        max: u64,
    },
    /// The configuration lists no member.
    #[error("the cluster has no member: list at least one `[[member]]`")]
    NoMembers,
    /// More members than `MEMBERS_MAX`.
    #[error("the cluster lists {count} members, more than the limit of {max}")]
    TooManyMembers {
        /// Members listed.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Two members have the same node id.
    #[error("node {node} is listed twice: give every member its own `node` id")]
    DuplicateNode {
        /// The repeated id.
        node: u16,
    },
    /// A member has an empty failure domain.
    #[error(
        "node {node} has an empty `failure_domain`: name what fails with it (its rack, its \
         power supply, or the node itself)"
    )]
    EmptyFailureDomain {
        /// The member.
        node: u16,
    },
    /// A member's host is an unspecified address (0.0.0.0 or ::), which peers cannot send to.
    #[error(
        "node {node} has host {host}, which no peer can send to: give the address the \
         other nodes reach it at"
    )]
    UnspecifiedHost {
        /// The member.
        node: u16,
        /// The address given.
        host: IpAddr,
    },
    /// `threads_per_node` is 0.
    #[error("`threads_per_node` is 0: every node needs at least one worker thread")]
    ZeroThreads,
    /// `threads_per_node` is above `THREADS_PER_NODE_MAX`.
    #[error("`threads_per_node` is {threads}, more than the limit of {max}")]
    TooManyThreads {
        /// Threads asked for.
        threads: u16,
        /// The limit.
        max: u16,
    },
    /// `replicas` is 0.
    #[error("`replicas` is 0: each partition needs a primary (replicas = f + 1)")]
    ZeroReplicas,
    /// `replicas` is larger than the number of members, so some partition would need two
    /// replicas on one node.
    #[error(
        "`replicas` is {replicas} but the cluster has only {nodes} members: each replica of \
         a partition needs its own node, so lower `replicas` or add members"
    )]
    TooManyReplicas {
        /// Replicas asked for.
        replicas: u8,
        /// Members of the cluster.
        nodes: usize,
    },
    /// `partition_count` is 0.
    #[error("`partition_count` is 0: the cluster needs at least one partition")]
    ZeroPartitions,
    /// `partition_count` is above `PARTITIONS_MAX`.
    #[error("`partition_count` is {count}, more than the limit of {max}")]
    TooManyPartitions {
        /// Partitions asked for.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// A member's `rpc_port_base`, `resp_port` or `resp` port is 0 (an ephemeral port no
    /// peer or client can know).
    #[error("node {node} has port 0: give fixed ports, so that its peers know where to send")]
    PortZero {
        /// The member.
        node: u16,
    },
    /// A member's RPC ports (`rpc_port_base` + thread) pass 65,535.
    #[error(
        "node {node} needs {threads} RPC ports (one per thread) from port {rpc_port_base}, \
         which passes port 65535: lower its `rpc_port_base`"
    )]
    PortOverflow {
        /// The member.
        node: u16,
        /// Its first RPC port.
        rpc_port_base: u16,
        /// Threads per node, one port each.
        threads: u16,
    },
    /// A local cluster's ports (`nodes` times `threads` RPC ports, then one RESP port per
    /// node) pass 65,535.
    #[error(
        "a local cluster needs {ports} ports from port {port_base}, which passes port 65535: \
         lower the port base, or use fewer nodes or threads"
    )]
    LocalPortOverflow {
        /// The first port.
        port_base: u16,
        /// Ports the cluster needs.
        ports: u32,
    },
    /// Two members on one host, or one member's RPC and RESP ports, share a port (two
    /// members with the same `resp` address included).
    #[error(
        "port {port} of host {host} is used by node {first} and by node {second}: give \
         members on one host port ranges that do not overlap"
    )]
    PortClash {
        /// The host.
        host: IpAddr,
        /// The first port both use.
        port: u16,
        /// One member using it (the lower node id).
        first: u16,
        /// The other member using it (the same node if its RESP port is among its RPC ports).
        second: u16,
    },
    /// A partition map lists another number of partitions than `partition_count`.
    #[error(
        "the partition map lists {listed} partitions but `partition_count` is {expected}: \
         list every partition once, or drop the `[[partition]]` entries to have them placed"
    )]
    PartitionCountMismatch {
        /// Partitions listed.
        listed: usize,
        /// `partition_count`.
        expected: u32,
    },
    /// A partition map is not in partition order (entry `position` has id `id`).
    #[error("partition entry {position} has id {id}: list partitions in order, 0, 1, 2, ...")]
    PartitionOutOfOrder {
        /// Position in the list, from 0.
        position: usize,
        /// The id found there.
        id: u32,
    },
    /// A partition has another number of replicas than `replicas`.
    #[error(
        "partition {partition} has {count} replicas but `replicas` is {expected}: give it \
         one primary and {expected} - 1 backups"
    )]
    WrongReplicaCount {
        /// The partition.
        partition: u32,
        /// Replicas listed (primary and backups).
        count: usize,
        /// `replicas`.
        expected: u8,
    },
    /// A partition is placed on a node that is not a member.
    #[error("partition {partition} is placed on node {node}, which is not a member")]
    UnknownNode {
        /// The partition.
        partition: u32,
        /// The node named.
        node: u16,
    },
    /// A partition names one node twice among its replicas.
    #[error(
        "partition {partition} has two replicas on node {node}: put each replica on its own node"
    )]
    RepeatedNode {
        /// The partition.
        partition: u32,
        /// The node named twice.
        node: u16,
    },
    /// The configuration lists `[[table]]` entries but none is valid, or an empty list.
    #[error("the schema has no table: list at least one `[[table]]`, or none for the default")]
    NoTables,
    /// Two tables share an id or a name.
    #[error("two tables share the {what}: give each table its own id and name")]
    DuplicateTable {
        /// What they share.
        what: String,
    },
    /// A table has an empty name.
    #[error("table {id} has an empty name")]
    EmptyTableName {
        /// Its id.
        id: u16,
    },
    /// A table entry gives both or neither of `value_bytes` and `max_value_bytes`, or a
    /// size over the limit.
    #[error(
        "table {name:?}: give exactly one of `value_bytes` (fixed size) and \
         `max_value_bytes` (variable size), at most {max}"
    )]
    TableValueSize {
        /// The table.
        name: String,
        /// The largest value size allowed.
        max: usize,
    },
    /// A table's `partition_key_bytes` is out of range.
    #[error("table {name:?}: `partition_key_bytes` must be 1 to {max} (the longest key)")]
    PartitionKeyBytes {
        /// The table.
        name: String,
        /// The longest key.
        max: usize,
    },
    /// A member gives both `resp` and `resp_port`.
    #[error(
        "node {node} gives both `resp` (an address) and `resp_port` (a port of its host): \
         keep one"
    )]
    RespAddressTwice {
        /// The member.
        node: u16,
    },
    /// A limit of the `[resp]` table is 0.
    #[error("`[resp] {setting}` is 0: give a limit above zero, or leave it out for the default")]
    RespLimitZero {
        /// The setting.
        setting: &'static str,
    },
    /// `[resp] requirepass` is an empty string.
    #[error(
        "`[resp] requirepass` is empty: give a password, or leave it out to let clients in \
         without one"
    )]
    EmptyRequirePass,
    /// `maxmemory` is not a memory size.
    #[error(
        "`maxmemory` is {0:?}: give bytes (a number) or a size with a unit: \"512mb\", \"2gb\", \
         \"100k\" (0: no limit)"
    )]
    MaxMemory(String),
    /// The `[durability]` section is wrong.
    #[error("[durability]: {0}")]
    Durability(String),
}
