//! A configuration: the members of a cluster, its endpoints and its partition map.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ferrotx_store::{PartitionId, TableSpec, VALUE_BYTES_MAX};
use ferrotx_wire::EndpointId;

use crate::error::ConfigError;
use crate::key_hash::hash_partition_key;
use crate::limits::{CONFIGURATION_ID_MAX, PARTITIONS_MAX, THREADS_PER_NODE_MAX};
use crate::member::{Member, check_members};
use crate::partition_map::PartitionMap;
use crate::ports::check_addresses;
use crate::resp::RespSettings;

/// Id of a configuration made by [`Configuration::local`]: the first configuration, the
/// same as the RPC engine's default (`ferrotx_rpc::Config::default().configuration`).
pub const LOCAL_CONFIGURATION_ID: u64 = 1;

/// A static cluster configuration: FaRM's ⟨id, members, failure domains⟩ (section 3; its
/// configuration manager will come with leases), with the partition map that FaRM's CM
/// keeps beside it (its mapping of regions to replicas).
///
/// Every datagram carries the configuration id, and a node drops datagrams of another
/// configuration (the RPC engine counts them), so all nodes of a running cluster must be
/// given the same configuration. Construction checks it whole; once built it is valid
/// and does not change (a reconfiguration makes a new one with a higher id).
///
/// Every node runs `threads_per_node` worker threads; thread `t` of node `n` is the RPC
/// endpoint `EndpointId::new(n, t)`, on the host of member `n`, at UDP port
/// `rpc_port_base + t`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Configuration {
    id: u64,
    threads_per_node: u16,
    /// In node id order.
    members: Vec<Member>,
    partitions: PartitionMap,
    /// The schema: every node hosts these tables in each of its partitions.
    tables: Vec<TableSpec>,
    /// How nodes serve Redis clients.
    resp: RespSettings,
    /// Each node's memory limit in bytes (`maxmemory`); 0: none.
    maxmemory: u64,
    /// Where the cluster key is (`key_file`), as written in the file: relative paths are
    /// relative to the configuration file. `None`: the configuration file's path with
    /// `.key` appended.
    key_file: Option<String>,
    /// What reaches the disk before a commit is acknowledged (`[durability]`).
    durability: Durability,
}

/// A cluster's durability mode (`[durability] mode`; docs/durability.md).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// Copies live in memory only: a crash of every copy at once loses them (the default).
    #[default]
    Memory,
    /// Logged on every copy's disk and synced at least every `flush_interval_ms`;
    /// acknowledged before the sync.
    Flush,
    /// A backup acknowledges COMMIT-BACKUP only once the record is synced: nothing
    /// acknowledged is lost when every node loses power.
    Sync,
}

impl DurabilityMode {
    /// The mode's name in the configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Flush => "flush",
            Self::Sync => "sync",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "memory" => Some(Self::Memory),
            "flush" => Some(Self::Flush),
            "sync" => Some(Self::Sync),
            _ => None,
        }
    }
}

/// The `[durability]` section.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Durability {
    pub mode: DurabilityMode,
    /// In `flush` mode, the longest time between syncs of a node's logs.
    pub flush_interval_ms: u64,
    /// A node checkpoints its copies into its logs, and truncates what the checkpoint
    /// covers, once its logs grew by this many MiB since its last checkpoint began.
    pub checkpoint_log_mb: u64,
    /// Each log segment's preallocated size, in MiB: a checkpoint truncates whole
    /// segments.
    pub segment_mb: u64,
}

/// `flush` mode's default interval (Redis's `everysec` is 1 s).
pub const DEFAULT_FLUSH_INTERVAL_MS: u64 = 100;

/// The default growth of a node's logs between checkpoints: four log segments.
pub const DEFAULT_CHECKPOINT_LOG_MB: u64 = 256;

/// The default size of a log segment.
pub const DEFAULT_SEGMENT_MB: u64 = 64;

impl Default for Durability {
    fn default() -> Self {
        Self {
            mode: DurabilityMode::Memory,
            flush_interval_ms: DEFAULT_FLUSH_INTERVAL_MS,
            checkpoint_log_mb: DEFAULT_CHECKPOINT_LOG_MB,
            segment_mb: DEFAULT_SEGMENT_MB,
        }
    }
}

/// The tables of a configuration that names none: table 1, `kv`, values of any size up
/// to 1 MiB (what the Redis-protocol front end stores).
pub fn default_tables() -> Vec<TableSpec> {
    vec![TableSpec::variable(1, "kv", VALUE_BYTES_MAX)]
}

impl Configuration {
    /// A configuration whose partition map is computed by [`PartitionMap::place`].
    pub fn new(
        id: u64,
        threads_per_node: u16,
        replicas: u8,
        members: Vec<Member>,
        partition_count: u32,
    ) -> Result<Self, ConfigError> {
        let members = check_common(id, threads_per_node, members)?;
        let partitions = PartitionMap::place(&members, partition_count, replicas)?;
        Ok(Self {
            id,
            threads_per_node,
            members,
            partitions,
            tables: default_tables(),
            resp: RespSettings::default(),
            maxmemory: 0,
            key_file: None,
            durability: Durability::default(),
        })
    }

    /// A configuration with a partition map given by the caller (for example the map of
    /// a previous configuration, changed by a reconfiguration). Every node of the map must
    /// be a member.
    pub fn with_partition_map(
        id: u64,
        threads_per_node: u16,
        members: Vec<Member>,
        partitions: PartitionMap,
    ) -> Result<Self, ConfigError> {
        let members = check_common(id, threads_per_node, members)?;
        let assignments = partitions.iter().map(|(_, r)| r.clone()).collect();
        let partitions = PartitionMap::from_assignments(
            &members,
            partitions.replicas_per_partition(),
            assignments,
        )?;
        Ok(Self {
            id,
            threads_per_node,
            members,
            partitions,
            tables: default_tables(),
            resp: RespSettings::default(),
            maxmemory: 0,
            key_file: None,
            durability: Durability::default(),
        })
    }

    /// A cluster of `nodes` nodes on this machine (127.0.0.1), each node its own failure
    /// domain (`node-0`, `node-1`, ...), with `partitions_per_node` times `nodes`
    /// partitions of `replicas` replicas, and id [`LOCAL_CONFIGURATION_ID`].
    ///
    /// Ports, from `port_base`, with `T = threads_per_node`: thread `t` of node `n` at
    /// `port_base + n * T + t` (the layout of the transport's `AddressBook::loopback`,
    /// which this configuration's [`Self::endpoint_addrs`] gives), then node `n`'s RESP port at
    /// `port_base + nodes * T + n`, then node `n`'s lease socket at
    /// `port_base + nodes * (T + 1) + n`. So the cluster uses `nodes * (T + 2)`
    /// consecutive ports.
    pub fn local(
        nodes: u16,
        replicas: u8,
        threads_per_node: u16,
        partitions_per_node: u32,
        port_base: u16,
    ) -> Result<Self, ConfigError> {
        let rpc_ports = u32::from(nodes) * u32::from(threads_per_node);
        let ports = rpc_ports + 2 * u32::from(nodes);
        if u32::from(port_base) + ports > u32::from(u16::MAX) + 1 {
            return Err(ConfigError::LocalPortOverflow { port_base, ports });
        }
        let port = |offset: u32| {
            u16::try_from(u32::from(port_base) + offset).expect("port range checked above")
        };
        let members = (0..nodes)
            .map(|node| Member {
                node,
                failure_domain: format!("node-{node}"),
                host: IpAddr::V4(Ipv4Addr::LOCALHOST),
                rpc_port_base: port(u32::from(node) * u32::from(threads_per_node)),
                resp_port: Some(port(rpc_ports + u32::from(node))),
                resp: None,
                lease_port: Some(port(rpc_ports + u32::from(nodes) + u32::from(node))),
            })
            .collect();
        let partition_count = u32::from(nodes).checked_mul(partitions_per_node).ok_or(
            ConfigError::TooManyPartitions {
                count: u32::MAX,
                max: PARTITIONS_MAX,
            },
        )?;
        Self::new(
            LOCAL_CONFIGURATION_ID,
            threads_per_node,
            replicas,
            members,
            partition_count,
        )
    }

    /// The same configuration with the schema `tables` instead: at least one table, ids
    /// and names unique.
    pub fn with_tables(mut self, tables: Vec<TableSpec>) -> Result<Self, ConfigError> {
        if tables.is_empty() {
            return Err(ConfigError::NoTables);
        }
        for (i, table) in tables.iter().enumerate() {
            if table.name.is_empty() {
                return Err(ConfigError::EmptyTableName { id: table.id.0 });
            }
            if let Some(other) = tables[..i].iter().find(|t| t.id == table.id) {
                return Err(ConfigError::DuplicateTable {
                    what: format!("id {} ({} and {})", table.id.0, other.name, table.name),
                });
            }
            if tables[..i].iter().any(|t| t.name == table.name) {
                return Err(ConfigError::DuplicateTable {
                    what: format!("name {:?}", table.name),
                });
            }
        }
        self.tables = tables;
        Ok(self)
    }

    /// The same configuration with each member's failure domain set to what `domain`
    /// gives for its node id, and the partition map placed anew for those domains
    /// ([`PartitionMap::place`]: a partition's copies in distinct domains where there are
    /// enough).
    pub fn with_failure_domains(self, domain: impl Fn(u16) -> String) -> Result<Self, ConfigError> {
        let mut members = self.members;
        for member in &mut members {
            member.failure_domain = domain(member.node);
        }
        let placed = Self::new(
            self.id,
            self.threads_per_node,
            self.partitions.replicas_per_partition(),
            members,
            self.partitions.partition_count(),
        )?;
        Ok(Self {
            tables: self.tables,
            resp: self.resp,
            ..placed
        })
    }

    /// The schema: the tables of every partition.
    pub fn tables(&self) -> &[TableSpec] {
        &self.tables
    }

    /// The same configuration with the Redis-protocol settings `resp` (limits above
    /// zero, a password that is not empty).
    pub fn with_resp(mut self, resp: RespSettings) -> Result<Self, ConfigError> {
        resp.check()?;
        self.resp = resp;
        Ok(self)
    }

    /// The same configuration with each member's Redis-protocol address set to what
    /// `addr` gives for it (`None`: no front end), in place of its `resp` or `resp_port`;
    /// checked like the other addresses.
    pub fn with_resp_addrs(
        mut self,
        mut addr: impl FnMut(&Member) -> Option<SocketAddr>,
    ) -> Result<Self, ConfigError> {
        for member in &mut self.members {
            member.resp = addr(member);
            member.resp_port = None;
        }
        check_addresses(&self.members, self.threads_per_node)?;
        Ok(self)
    }

    /// How nodes serve Redis clients.
    pub fn resp(&self) -> &RespSettings {
        &self.resp
    }

    /// The same configuration with each node's memory limit at `bytes` (0: none).
    pub fn with_maxmemory(mut self, bytes: u64) -> Self {
        self.maxmemory = bytes;
        self
    }

    /// Each node's memory limit (`maxmemory`), if there is one: past it, writes that
    /// would grow a node's store are refused, and the CM places no new copy there.
    pub fn maxmemory(&self) -> Option<u64> {
        Some(self.maxmemory).filter(|&bytes| bytes > 0)
    }

    /// The same configuration with its cluster key at `path` (see [`Self::key_file`]).
    pub fn with_key_file(mut self, path: Option<String>) -> Self {
        self.key_file = path;
        self
    }

    /// The durability mode and its settings.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The durability mode and its settings (`[durability]`).
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Where the cluster key is, as the file says (`key_file`): relative to the
    /// configuration file. `None`: the configuration file's path with `.key` appended.
    pub fn key_file(&self) -> Option<&str> {
        self.key_file.as_deref()
    }

    /// Its id, carried by every datagram.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Worker threads (RPC endpoints) of every node.
    pub fn threads_per_node(&self) -> u16 {
        self.threads_per_node
    }

    /// Replicas of each partition (f + 1).
    pub fn replicas(&self) -> u8 {
        self.partitions.replicas_per_partition()
    }

    /// The members, in node id order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member with node id `node`, if any.
    pub fn member(&self, node: u16) -> Option<&Member> {
        self.members
            .binary_search_by_key(&node, |member| member.node)
            .ok()
            .map(|index| &self.members[index])
    }

    /// The address of member `node`'s lease socket, if it is a member.
    pub fn lease_addr(&self, node: u16) -> Option<SocketAddr> {
        self.member(node)
            .map(|m| m.lease_addr(self.threads_per_node))
    }

    /// The partition map.
    pub fn partitions(&self) -> &PartitionMap {
        &self.partitions
    }

    /// The partition of a key whose hash is `key_hash`; see [`PartitionMap::partition_of`].
    pub fn partition_of(&self, key_hash: u64) -> PartitionId {
        self.partitions.partition_of(key_hash)
    }

    /// The partition of a row whose partition key (its locality hint, or else its whole
    /// key) is `partition_key`; see [`hash_partition_key`].
    pub fn partition_of_key(&self, partition_key: &[u8]) -> PartitionId {
        self.partition_of(hash_partition_key(partition_key))
    }

    /// Every endpoint of the cluster, in endpoint order (by node, then thread).
    pub fn endpoints(&self) -> impl Iterator<Item = EndpointId> + '_ {
        self.members.iter().flat_map(move |member| {
            (0..self.threads_per_node).map(move |thread| EndpointId::new(member.node, thread))
        })
    }

    /// The UDP address of `endpoint`, or `None` if it is not an endpoint of the cluster.
    pub fn endpoint_addr(&self, endpoint: EndpointId) -> Option<SocketAddr> {
        if endpoint.thread() >= self.threads_per_node {
            return None;
        }
        let member = self.member(endpoint.node())?;
        Some(member.rpc_addr(endpoint.thread()))
    }

    /// Every endpoint of the cluster with its UDP address, in endpoint order: what the
    /// transport's address book is collected from (`ferrotx_transport::AddressBook`
    /// implements `FromIterator` over these pairs). Plain addresses, so that this crate
    /// does not depend on the crate that opens sockets.
    pub fn endpoint_addrs(&self) -> impl Iterator<Item = (EndpointId, SocketAddr)> + '_ {
        self.endpoints().map(|endpoint| {
            let addr = self.endpoint_addr(endpoint).expect("endpoints are members");
            (endpoint, addr)
        })
    }
}

/// Checks the id, the thread count and the members, and returns the members in node id
/// order.
fn check_common(
    id: u64,
    threads_per_node: u16,
    mut members: Vec<Member>,
) -> Result<Vec<Member>, ConfigError> {
    if id > CONFIGURATION_ID_MAX {
        return Err(ConfigError::IdTooLarge {
            id,
            max: CONFIGURATION_ID_MAX,
        });
    }
    if threads_per_node == 0 {
        return Err(ConfigError::ZeroThreads);
    }
    if threads_per_node > THREADS_PER_NODE_MAX {
        return Err(ConfigError::TooManyThreads {
            threads: threads_per_node,
            max: THREADS_PER_NODE_MAX,
        });
    }
    check_members(&members)?;
    check_addresses(&members, threads_per_node)?;
    members.sort_by_key(|member| member.node);
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MEMBERS_MAX;
    use crate::testing::{member, members_in};

    #[test]
    fn local_cluster_layout() {
        let config = Configuration::local(3, 2, 4, 5, 40_000).unwrap();
        assert_eq!(config.id(), LOCAL_CONFIGURATION_ID);
        assert_eq!(config.threads_per_node(), 4);
        assert_eq!(config.replicas(), 2);
        assert_eq!(config.partitions().partition_count(), 15);
        assert_eq!(config.members().len(), 3);
        let node = config.member(2).unwrap();
        assert_eq!(node.failure_domain, "node-2");
        assert_eq!(node.rpc_port_base, 40_008);
        // RESP ports after all the RPC ports.
        assert_eq!(node.resp_addr(), Some("127.0.0.1:40014".parse().unwrap()));
        assert_eq!(config.member(3), None);
        // The same layout as the transport's loopback book: consecutive ports from
        // 40000, in endpoint order.
        let addrs: Vec<_> = config.endpoint_addrs().collect();
        let loopback: Vec<_> = (0..3u16)
            .flat_map(|node| (0..4u16).map(move |thread| EndpointId::new(node, thread)))
            .zip(40_000u16..)
            .map(|(endpoint, port)| (endpoint, SocketAddr::from((Ipv4Addr::LOCALHOST, port))))
            .collect();
        assert_eq!(addrs, loopback);
        for node in 0..3 {
            assert_eq!(config.partitions().primaries_on(node).count(), 5);
            assert_eq!(config.partitions().backups_on(node).count(), 5);
        }
        // Lease sockets after the RESP ports.
        assert_eq!(
            config.lease_addr(2),
            Some("127.0.0.1:40017".parse().unwrap())
        );
        // The whole range up to the last port.
        let config = Configuration::local(2, 1, 2, 1, u16::MAX - 7).unwrap();
        assert_eq!(config.member(1).unwrap().lease_port, Some(u16::MAX));
    }

    #[test]
    fn local_cluster_errors() {
        assert!(matches!(
            Configuration::local(2, 1, 2, 1, u16::MAX - 6),
            Err(ConfigError::LocalPortOverflow {
                port_base: 65_529,
                ports: 8
            })
        ));
        assert!(matches!(
            Configuration::local(0, 1, 2, 1, 7000),
            Err(ConfigError::NoMembers)
        ));
        assert!(matches!(
            Configuration::local(2, 3, 2, 1, 7000),
            Err(ConfigError::TooManyReplicas {
                replicas: 3,
                nodes: 2
            })
        ));
        assert!(matches!(
            Configuration::local(2, 1, 0, 1, 7000),
            Err(ConfigError::ZeroThreads)
        ));
        assert!(matches!(
            Configuration::local(2, 1, 1, 0, 7000),
            Err(ConfigError::ZeroPartitions)
        ));
        assert!(matches!(
            Configuration::local(2, 1, 1, u32::MAX, 7000),
            Err(ConfigError::TooManyPartitions { .. })
        ));
        assert!(matches!(
            Configuration::local(2, 1, 1, 1, 0),
            Err(ConfigError::PortZero { node: 0 })
        ));
    }

    #[test]
    fn resp_settings_and_addresses_can_be_replaced() {
        let config = Configuration::local(3, 1, 2, 1, 40_000).unwrap();
        assert_eq!(config.resp(), &RespSettings::default());
        let config = config
            .with_resp_addrs(|member| {
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    7379 + member.node,
                ))
            })
            .unwrap();
        for member in config.members() {
            assert_eq!(member.resp_port, None);
            assert_eq!(
                member.resp_addr(),
                Some(SocketAddr::from(([127, 0, 0, 1], 7379 + member.node)))
            );
        }
        // Onto an RPC port: refused.
        let clash = config
            .clone()
            .with_resp_addrs(|_| Some(SocketAddr::from(([127, 0, 0, 1], 40_001))));
        assert!(matches!(clash, Err(ConfigError::PortClash { .. })));
        let none = config.clone().with_resp_addrs(|_| None).unwrap();
        assert!(none.members().iter().all(|m| m.resp_addr().is_none()));

        let settings = RespSettings {
            requirepass: Some("secret".to_owned()),
            max_request_bytes: 1 << 20,
            max_clients: 5,
            pipeline_commands_max: 16,
            command_timeout_ms: 1_500,
        };
        let config = config.with_resp(settings.clone()).unwrap();
        assert_eq!(config.resp(), &settings);
        let zero = RespSettings {
            max_clients: 0,
            ..settings
        };
        assert!(matches!(
            config.with_resp(zero),
            Err(ConfigError::RespLimitZero { .. })
        ));
    }

    #[test]
    fn endpoints_and_addresses() {
        let mut members = members_in(&["a", "b"]);
        members[1].node = 9;
        members[1].rpc_port_base = 9000;
        let config = Configuration::new(4, 3, 2, members, 4).unwrap();
        let endpoints: Vec<EndpointId> = config.endpoints().collect();
        assert_eq!(
            endpoints,
            [
                EndpointId::new(0, 0),
                EndpointId::new(0, 1),
                EndpointId::new(0, 2),
                EndpointId::new(9, 0),
                EndpointId::new(9, 1),
                EndpointId::new(9, 2),
            ]
        );
        assert_eq!(
            config.endpoint_addr(EndpointId::new(9, 2)),
            Some("127.0.0.2:9002".parse().unwrap())
        );
        assert_eq!(config.endpoint_addr(EndpointId::new(9, 3)), None);
        assert_eq!(config.endpoint_addr(EndpointId::new(1, 0)), None);
        let addrs: Vec<_> = config.endpoint_addrs().collect();
        assert_eq!(addrs.len(), 6);
        for (endpoint, (listed, addr)) in endpoints.into_iter().zip(addrs) {
            assert_eq!(listed, endpoint);
            assert_eq!(Some(addr), config.endpoint_addr(endpoint));
        }
    }

    #[test]
    fn members_are_kept_in_node_order() {
        let mut members = members_in(&["a", "b", "c"]);
        members.reverse();
        let config = Configuration::new(1, 1, 2, members.clone(), 6).unwrap();
        let nodes: Vec<u16> = config.members().iter().map(|m| m.node).collect();
        assert_eq!(nodes, [0, 1, 2]);
        members.reverse();
        assert_eq!(Configuration::new(1, 1, 2, members, 6).unwrap(), config);
    }

    #[test]
    fn partition_of_key_hashes_the_partition_key() {
        let config = Configuration::local(3, 1, 1, 4, 7000).unwrap();
        let key = 77u64.to_be_bytes();
        assert_eq!(
            config.partition_of_key(&key),
            config.partition_of(hash_partition_key(&key))
        );
    }

    #[test]
    fn with_partition_map_checks_the_map_against_the_members() {
        let members = members_in(&["a", "b", "c"]);
        let map = PartitionMap::place(&members, 3, 2).unwrap();
        let config = Configuration::with_partition_map(2, 1, members.clone(), map.clone()).unwrap();
        assert_eq!(config.partitions(), &map);
        // Node 2 left, but the map still places partitions on it.
        assert!(matches!(
            Configuration::with_partition_map(3, 1, members[..2].to_vec(), map),
            Err(ConfigError::UnknownNode { node: 2, .. })
        ));
    }

    #[test]
    fn every_check_has_its_error() {
        let new = |id, threads, replicas, members: Vec<Member>, count| {
            Configuration::new(id, threads, replicas, members, count).unwrap_err()
        };
        let three = || members_in(&["a", "b", "c"]);
        assert!(matches!(
            new(CONFIGURATION_ID_MAX + 1, 1, 1, three(), 3),
            ConfigError::IdTooLarge { .. }
        ));
        assert!(matches!(new(1, 0, 1, three(), 3), ConfigError::ZeroThreads));
        assert!(matches!(
            new(1, THREADS_PER_NODE_MAX + 1, 1, three(), 3),
            ConfigError::TooManyThreads { .. }
        ));
        assert!(matches!(new(1, 1, 1, vec![], 3), ConfigError::NoMembers));
        let many: Vec<Member> = (0..=MEMBERS_MAX)
            .map(|n| member(u16::try_from(n).unwrap(), "a"))
            .collect();
        assert!(matches!(
            new(1, 1, 1, many, 3),
            ConfigError::TooManyMembers {
                count: 1025,
                max: 1024
            }
        ));
        let mut twice = three();
        twice[2].node = 0;
        assert!(matches!(
            new(1, 1, 1, twice, 3),
            ConfigError::DuplicateNode { node: 0 }
        ));
        let mut unnamed = three();
        unnamed[1].failure_domain.clear();
        assert!(matches!(
            new(1, 1, 1, unnamed, 3),
            ConfigError::EmptyFailureDomain { node: 1 }
        ));
        assert!(matches!(
            new(1, 1, 0, three(), 3),
            ConfigError::ZeroReplicas
        ));
        assert!(matches!(
            new(1, 1, 4, three(), 3),
            ConfigError::TooManyReplicas {
                replicas: 4,
                nodes: 3
            }
        ));
        assert!(matches!(
            new(1, 1, 1, three(), 0),
            ConfigError::ZeroPartitions
        ));
        assert!(matches!(
            new(1, 1, 1, three(), PARTITIONS_MAX + 1),
            ConfigError::TooManyPartitions { .. }
        ));
        let mut overflowing = three();
        overflowing[1].rpc_port_base = u16::MAX;
        assert!(matches!(
            new(1, 2, 1, overflowing, 3),
            ConfigError::PortOverflow { node: 1, .. }
        ));
        let mut shared_host = three();
        shared_host[1].host = shared_host[0].host;
        assert!(matches!(
            new(1, 2, 1, shared_host, 3),
            ConfigError::PortClash {
                port: 7000,
                first: 0,
                second: 1,
                ..
            }
        ));
    }
}
