//! INFO: which sections a client asked for, and their text from numbers the node keeps.
//!
//! The format is Redis's: each section is a `# Name` line then `field:value` lines, all
//! ending in CRLF, with an empty line between sections, sent as a verbatim string (a
//! bulk string in RESP2). Sections come in a fixed order whatever the order asked.
//! ferrotx has the sections server, clients and stats (with the Redis fields that mean
//! something here; the others are left out, not faked) and its own `ferrotx` section.
//! `INFO`, `INFO default`, `INFO all` and `INFO everything` give all four; section names
//! are compared without case and unknown ones are ignored, as in Redis.

use crate::config::{MAXMEMORY_POLICY, human_bytes};
use crate::number::write_u64;
use crate::protocol::Args;
use crate::reply::Reply;

/// One INFO section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoSection {
    /// `# Server`: version, process, port, uptime.
    Server,
    /// `# Clients`: connections.
    Clients,
    /// `# Memory`: the node's memory use and limit.
    Memory,
    /// `# Stats`: counters.
    Stats,
    /// `# ferrotx`: the node and its cluster.
    Ferrotx,
}

impl InfoSection {
    /// Every section, in the order INFO prints them.
    pub const ALL: [Self; 5] = [
        Self::Server,
        Self::Clients,
        Self::Memory,
        Self::Stats,
        Self::Ferrotx,
    ];

    /// The section's name as INFO takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Clients => "clients",
            Self::Memory => "memory",
            Self::Stats => "stats",
            Self::Ferrotx => "ferrotx",
        }
    }

    /// The section's heading.
    fn heading(self) -> &'static str {
        match self {
            Self::Server => "# Server\r\n",
            Self::Clients => "# Clients\r\n",
            Self::Memory => "# Memory\r\n",
            Self::Stats => "# Stats\r\n",
            Self::Ferrotx => "# ferrotx\r\n",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// `INFO [section ...]`: the sections asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    /// One bit per [`InfoSection`].
    sections: u8,
}

impl InfoRequest {
    /// Every section.
    pub fn all() -> Self {
        Self {
            sections: InfoSection::ALL
                .iter()
                .fold(0, |bits, section| bits | section.bit()),
        }
    }

    /// The sections INFO's arguments (after the name) ask for.
    pub fn parse(args: Args<'_>) -> Self {
        if args.len() <= 1 {
            return Self::all();
        }
        let mut request = Self { sections: 0 };
        for name in args.iter().skip(1) {
            let name = crate::command::table::c_string_prefix(name, usize::MAX);
            if [&b"default"[..], b"all", b"everything"]
                .iter()
                .any(|all| name.eq_ignore_ascii_case(all))
            {
                return Self::all();
            }
            for section in InfoSection::ALL {
                if name.eq_ignore_ascii_case(section.name().as_bytes()) {
                    request.sections |= section.bit();
                }
            }
        }
        request
    }

    /// True if `section` was asked for.
    pub fn includes(&self, section: InfoSection) -> bool {
        self.sections & section.bit() != 0
    }

    /// INFO's reply: the sections asked for, from `stats`, reporting `redis_version`
    /// as the Redis version (clients read it to decide what they may use).
    pub fn reply(&self, redis_version: &str, stats: &InfoStats) -> Reply {
        let mut text = Vec::with_capacity(1024);
        let mut first = true;
        for section in InfoSection::ALL {
            if !self.includes(section) {
                continue;
            }
            if !first {
                text.extend_from_slice(b"\r\n");
            }
            first = false;
            text.extend_from_slice(section.heading().as_bytes());
            let mut field = |name: &str, value: &[u8]| {
                text.extend_from_slice(name.as_bytes());
                text.push(b':');
                text.extend_from_slice(value);
                text.extend_from_slice(b"\r\n");
            };
            let number = |value: u64| {
                let mut text = Vec::with_capacity(20);
                write_u64(&mut text, value);
                text
            };
            match section {
                InfoSection::Server => {
                    field("redis_version", redis_version.as_bytes());
                    field("redis_mode", b"standalone");
                    field("ferrotx_version", stats.ferrotx_version.as_bytes());
                    field("arch_bits", &number(usize::BITS.into()));
                    field("process_id", &number(stats.process_id.into()));
                    field("tcp_port", &number(stats.tcp_port.into()));
                    field("server_time_usec", &number(stats.server_time_usec));
                    field("uptime_in_seconds", &number(stats.uptime_seconds));
                    field("uptime_in_days", &number(stats.uptime_seconds / 86_400));
                }
                InfoSection::Clients => {
                    field("connected_clients", &number(stats.connected_clients));
                    field("maxclients", &number(stats.clients_max));
                    field("blocked_clients", b"0");
                }
                InfoSection::Memory => {
                    // Redis's order; the figures clients read also in human form.
                    for (name, value, human) in [
                        ("used_memory", stats.used_memory, true),
                        ("used_memory_rss", stats.used_memory_rss, true),
                        ("used_memory_peak", stats.used_memory_peak, true),
                        ("used_memory_dataset", stats.used_memory_dataset, false),
                        ("maxmemory", stats.maxmemory, true),
                    ] {
                        field(name, &number(value));
                        if human {
                            field(&format!("{name}_human"), human_bytes(value).as_bytes());
                        }
                    }
                    field("maxmemory_policy", MAXMEMORY_POLICY.as_bytes());
                }
                InfoSection::Stats => {
                    field(
                        "total_connections_received",
                        &number(stats.total_connections_received),
                    );
                    field(
                        "total_commands_processed",
                        &number(stats.total_commands_processed),
                    );
                    field(
                        "total_net_input_bytes",
                        &number(stats.total_net_input_bytes),
                    );
                    field(
                        "total_net_output_bytes",
                        &number(stats.total_net_output_bytes),
                    );
                    field("rejected_connections", &number(stats.rejected_connections));
                    field("expired_keys", b"0");
                    field("evicted_keys", b"0");
                    field("keyspace_hits", &number(stats.keyspace_hits));
                    field("keyspace_misses", &number(stats.keyspace_misses));
                    field("total_error_replies", &number(stats.total_error_replies));
                }
                InfoSection::Ferrotx => {
                    field("node_id", &number(stats.node_id.into()));
                    field("cluster_nodes", &number(stats.cluster_nodes.into()));
                    field("partitions", &number(stats.partitions.into()));
                    field("replicas", &number(stats.replicas.into()));
                    field(
                        "transactions_committed",
                        &number(stats.transactions_committed),
                    );
                    field("transactions_aborted", &number(stats.transactions_aborted));
                    for (name, value) in &stats.extra {
                        field(name, value.as_bytes());
                    }
                }
            }
        }
        Reply::Verbatim {
            format: *b"txt",
            text: text.into(),
        }
    }
}

/// The numbers INFO reports, gathered by the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoStats {
    /// ferrotx's version (this crate's by default).
    pub ferrotx_version: &'static str,
    /// The node process's id.
    pub process_id: u32,
    /// The Redis port the node listens on.
    pub tcp_port: u16,
    /// The time now, in microseconds since the Unix epoch.
    pub server_time_usec: u64,
    /// Seconds since the node started.
    pub uptime_seconds: u64,
    /// Redis clients connected to this node now.
    pub connected_clients: u64,
    /// Most Redis clients this node accepts at once.
    pub clients_max: u64,
    /// Redis connections accepted since the start.
    pub total_connections_received: u64,
    /// Commands run since the start.
    pub total_commands_processed: u64,
    /// Bytes read from Redis clients since the start.
    pub total_net_input_bytes: u64,
    /// Bytes written to Redis clients since the start.
    pub total_net_output_bytes: u64,
    /// Connections refused (over the client limit) since the start.
    pub rejected_connections: u64,
    /// Bytes the node uses by its own account ([`crate::config`]'s `maxmemory` is
    /// compared with this): its store's, and its resident memory before data.
    pub used_memory: u64,
    /// The node process's resident memory now (0 if unknown).
    pub used_memory_rss: u64,
    /// The highest `used_memory` since the start.
    pub used_memory_peak: u64,
    /// The store's part of `used_memory`: objects, index slots and values kept out of line.
    pub used_memory_dataset: u64,
    /// The node's memory limit (`maxmemory`); 0: none.
    pub maxmemory: u64,
    /// Key reads that found the key.
    pub keyspace_hits: u64,
    /// Key reads that did not.
    pub keyspace_misses: u64,
    /// Error replies sent since the start.
    pub total_error_replies: u64,
    /// This node's id in the cluster.
    pub node_id: u32,
    /// The number of nodes in the cluster.
    pub cluster_nodes: u32,
    /// The number of partitions.
    pub partitions: u32,
    /// Copies of each partition (primary and backups).
    pub replicas: u32,
    /// Transactions committed by this node's Redis clients.
    pub transactions_committed: u64,
    /// Transaction attempts aborted (and retried) for them.
    pub transactions_aborted: u64,
    /// More `field:value` lines for the ferrotx section, in order.
    pub extra: Vec<(String, String)>,
}

impl Default for InfoStats {
    fn default() -> Self {
        Self {
            ferrotx_version: env!("CARGO_PKG_VERSION"),
            process_id: 0,
            tcp_port: 0,
            server_time_usec: 0,
            uptime_seconds: 0,
            connected_clients: 0,
            clients_max: 0,
            total_connections_received: 0,
            total_commands_processed: 0,
            total_net_input_bytes: 0,
            total_net_output_bytes: 0,
            rejected_connections: 0,
            used_memory: 0,
            used_memory_rss: 0,
            used_memory_peak: 0,
            used_memory_dataset: 0,
            maxmemory: 0,
            keyspace_hits: 0,
            keyspace_misses: 0,
            total_error_replies: 0,
            node_id: 0,
            cluster_nodes: 0,
            partitions: 0,
            replicas: 0,
            transactions_committed: 0,
            transactions_aborted: 0,
            extra: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ArgsBuf;
    use crate::reply::ProtocolVersion;

    fn request(args: &[&str]) -> InfoRequest {
        InfoRequest::parse(ArgsBuf::new(args).args())
    }

    fn text(reply: &Reply) -> String {
        match reply {
            Reply::Verbatim { format, text } => {
                assert_eq!(format, b"txt");
                String::from_utf8(text.to_vec()).unwrap()
            }
            other => panic!("not verbatim: {other:?}"),
        }
    }

    #[test]
    fn section_selection() {
        assert_eq!(request(&["INFO"]), InfoRequest::all());
        assert_eq!(request(&["INFO", "default"]), InfoRequest::all());
        assert_eq!(request(&["INFO", "ALL"]), InfoRequest::all());
        assert_eq!(request(&["INFO", "everything"]), InfoRequest::all());
        let some = request(&["INFO", "Stats", "nosuch", "server"]);
        assert!(some.includes(InfoSection::Server));
        assert!(some.includes(InfoSection::Stats));
        assert!(!some.includes(InfoSection::Clients));
        assert!(!some.includes(InfoSection::Ferrotx));
    }

    #[test]
    fn sections_in_fixed_order_with_blank_lines_between() {
        let stats = InfoStats {
            connected_clients: 3,
            clients_max: 10_000,
            keyspace_hits: 7,
            ..InfoStats::default()
        };
        let reply = request(&["INFO", "stats", "clients"]).reply("7.0.15", &stats);
        let text = text(&reply);
        assert!(text.starts_with(
            "# Clients\r\nconnected_clients:3\r\nmaxclients:10000\r\nblocked_clients:0\r\n\
             \r\n# Stats\r\n"
        ));
        assert!(text.contains("\r\nkeyspace_hits:7\r\n"));
        assert!(text.ends_with("total_error_replies:0\r\n"));
        assert!(!text.contains("# Server"));
    }

    #[test]
    fn server_and_ferrotx_sections() {
        let stats = InfoStats {
            process_id: 42,
            tcp_port: 6379,
            uptime_seconds: 200_000,
            node_id: 2,
            cluster_nodes: 3,
            extra: vec![("coroutines".to_owned(), "20".to_owned())],
            ..InfoStats::default()
        };
        let text = text(&InfoRequest::all().reply("7.0.15", &stats));
        assert!(text.starts_with("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"));
        assert!(text.contains("\r\nprocess_id:42\r\ntcp_port:6379\r\n"));
        assert!(text.contains("\r\nuptime_in_seconds:200000\r\nuptime_in_days:2\r\n"));
        assert!(text.contains("\r\n\r\n# ferrotx\r\nnode_id:2\r\ncluster_nodes:3\r\n"));
        assert!(text.ends_with("coroutines:20\r\n"));
    }

    #[test]
    fn no_known_section_is_empty() {
        let reply = request(&["INFO", "keyspace"]).reply("7.0.15", &InfoStats::default());
        assert_eq!(reply.to_bytes(ProtocolVersion::Resp2), b"$0\r\n\r\n");
        assert_eq!(reply.to_bytes(ProtocolVersion::Resp3), b"=4\r\ntxt:\r\n");
    }
}
