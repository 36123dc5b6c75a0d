//! The cluster's static configuration: its members, their failure domains and addresses,
//! and the partition map (each partition on a primary and f backups, on distinct nodes
//! and, where the cluster has enough of them, distinct failure domains).
//!
//! A [`Configuration`] comes from a TOML file ([`Configuration::from_toml_str`],
//! [`Configuration::load`]; format below) or is generated for a cluster on this machine
//! ([`Configuration::local`]). It is checked whole when built, with a [`ConfigError`] that says what to fix. It gives the
//! transport every endpoint's address ([`Configuration::endpoint_addrs`], from which the
//! transport builds its address book), the RPC engine its
//! configuration id (datagrams of another id are dropped and counted there), and
//! transactions the partition of each key and the nodes of each partition.
//!
//! Keys go to partitions by [`hash_partition_key`], a hash fixed for all builds and
//! versions, over the row's partition key (its locality hint) if its table has one, or
//! else over its whole key.
//!
//! The crate is sans-IO, like the protocol crates: only [`Configuration::load`] reads a
//! file. Membership changes (leases, reconfiguration, recovery) will build on it.
//!
//! ```
//! use ferrotx_cluster::{Configuration, hash_partition_key};
//! use ferrotx_wire::EndpointId;
//!
//! // Three nodes of four threads on 127.0.0.1, eight partitions per node, two replicas.
//! let config = Configuration::local(3, 2, 4, 8, 40_000)?;
//! assert_eq!(config.partitions().partition_count(), 24);
//!
//! // Where the row with partition key 42 lives.
//! let partition = config.partition_of(hash_partition_key(&42u64.to_be_bytes()));
//! let replicas = config.partitions().replicas(partition);
//! assert_eq!(replicas.backups.len(), 1);
//! assert_ne!(replicas.primary, replicas.backups[0]);
//!
//! // Thread 3 of node 2 listens on port 40000 + 2 * 4 + 3.
//! assert_eq!(config.endpoint_addrs().count(), 12);
//! assert_eq!(config.endpoint_addr(EndpointId::new(2, 3)), Some("127.0.0.1:40011".parse()?));
//!
//! // Written as TOML and read back.
//! let text = config.to_toml_string();
//! assert_eq!(Configuration::from_toml_str(&text)?, config);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## File format
//!
//! A commented example is `config/example.toml` in this crate. In short:
//!
//! ```toml
//! id = 1                  # configuration id, carried by every datagram
//! threads_per_node = 4    # worker threads (RPC endpoints) per node
//! replicas = 3            # f + 1: a primary and f backups per partition
//! partition_count = 24    # partitions of the cluster
//!
//! [[member]]              # one per node
//! node = 0
//! failure_domain = "rack-a"
//! host = "10.0.0.1"       # an address, not a name
//! rpc_port_base = 7000    # thread t at rpc_port_base + t
//! resp_port = 6379        # optional: the Redis-protocol front end on this host's port,
//! # or resp = "127.0.0.1:6379" (its own address; one of the two at most)
//!
//! [resp]                  # optional: how nodes serve Redis clients
//! requirepass = "secret"  # optional: clients must AUTH first
//! max_request_bytes = 67108864   # default 64 MiB
//! max_clients = 10000     # default 10,000
//! pipeline_commands_max = 64   # default 64: pipelined commands per transaction
//! command_timeout_ms = 5000    # default 5 s: longest a command runs before it answers
//!
//! [[partition]]           # optional: all partitions, in order, or none
//! id = 0
//! primary = 0
//! backups = [1, 2]
//! ```
//!
//! Without `[[partition]]` entries the map is computed by [`PartitionMap::place`], which
//! every node does identically. With them, they must list every partition, in order, and
//! are taken as they are (a map after a reconfiguration is not a placement's).
//! [`Configuration::to_toml_string`] writes them only when the map is not the placement's,
//! so that the text parses back to an equal configuration. Unknown fields are errors, so
//! a misspelt setting is not silently ignored.

mod configuration;
mod coordination;
mod error;
mod key_hash;
mod limits;
mod load;
mod member;
mod partition_map;
mod placement;
mod ports;
mod resp;
mod toml_format;
mod view;

pub use configuration::{
    Configuration, DEFAULT_CHECKPOINT_LOG_MB, DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_SEGMENT_MB,
    Durability, DurabilityMode, LOCAL_CONFIGURATION_ID, default_tables,
};
pub use coordination::{CoordinationError, CoordinationService, MemoryCoordination};
pub use error::ConfigError;
pub use key_hash::hash_partition_key;
pub use limits::{CONFIGURATION_ID_MAX, MEMBERS_MAX, PARTITIONS_MAX, THREADS_PER_NODE_MAX};
pub use member::Member;
pub use partition_map::{PartitionMap, Replicas};
pub use resp::{
    RESP_CLIENTS_MAX_DEFAULT, RESP_PIPELINE_COMMANDS_MAX_DEFAULT, RESP_REQUEST_BYTES_MAX_DEFAULT,
    RespSettings,
};
pub use view::{BACKUP_CMS_MAX, NO_NODE, View, ViewError, ViewMember, memory_full};
#[cfg(test)]
mod testing;
