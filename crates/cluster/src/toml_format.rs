//! The TOML form of a configuration; the format is described in the crate documentation.

use serde::{Deserialize, Serialize};

use ferrotx_store::{KEY_BYTES_MAX, TableSpec, VALUE_BYTES_MAX, ValueSize};

use crate::configuration::{Configuration, Durability, DurabilityMode, default_tables};
use crate::error::ConfigError;
use crate::member::Member;
use crate::partition_map::{PartitionMap, Replicas};
use crate::resp::RespSettings;

/// The whole file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigurationFile {
    id: u64,
    threads_per_node: u16,
    replicas: u8,
    partition_count: u32,
    /// The cluster key's file, relative to this file (default: this file's path with
    /// `.key` appended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_file: Option<String>,
    /// Each node's memory limit: bytes, or a size with Redis's units ("512mb").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    maxmemory: Option<MemorySize>,
    #[serde(default, skip_serializing_if = "RespSection::is_empty")]
    resp: RespSection,
    #[serde(default, skip_serializing_if = "DurabilitySection::is_default")]
    durability: DurabilitySection,
    #[serde(rename = "member", default)]
    members: Vec<Member>,
    #[serde(rename = "partition", default, skip_serializing_if = "Vec::is_empty")]
    partitions: Vec<PartitionEntry>,
    #[serde(rename = "table", default, skip_serializing_if = "Vec::is_empty")]
    tables: Vec<TableEntry>,
}

/// `[durability]`: `mode = "memory" | "flush" | "sync"`, `flush_interval_ms`.
#[derive(Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
struct DurabilitySection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flush_interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint_log_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    segment_mb: Option<u64>,
}

impl DurabilitySection {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    fn to_durability(&self) -> Result<Durability, ConfigError> {
        let mut durability = Durability::default();
        if let Some(mode) = &self.mode {
            durability.mode = DurabilityMode::parse(mode).ok_or_else(|| {
                ConfigError::Durability(format!(
                    "mode {mode:?} is none of \"memory\", \"flush\", \"sync\""
                ))
            })?;
        }
        if let Some(ms) = self.flush_interval_ms {
            if ms == 0 || ms > 60_000 {
                return Err(ConfigError::Durability(format!(
                    "flush_interval_ms {ms} is outside 1..=60000"
                )));
            }
            durability.flush_interval_ms = ms;
        }
        if let Some(mb) = self.checkpoint_log_mb {
            if mb == 0 || mb > 1 << 20 {
                return Err(ConfigError::Durability(format!(
                    "checkpoint_log_mb {mb} is outside 1..=1048576"
                )));
            }
            durability.checkpoint_log_mb = mb;
        }
        if let Some(mb) = self.segment_mb {
            if mb == 0 || mb > 4096 {
                return Err(ConfigError::Durability(format!(
                    "segment_mb {mb} is outside 1..=4096"
                )));
            }
            durability.segment_mb = mb;
        }
        Ok(durability)
    }

    fn from_durability(durability: Durability) -> Self {
        let default = Durability::default();
        Self {
            mode: (durability.mode != default.mode).then(|| durability.mode.name().to_string()),
            flush_interval_ms: (durability.flush_interval_ms != default.flush_interval_ms)
                .then_some(durability.flush_interval_ms),
            checkpoint_log_mb: (durability.checkpoint_log_mb != default.checkpoint_log_mb)
                .then_some(durability.checkpoint_log_mb),
            segment_mb: (durability.segment_mb != default.segment_mb)
                .then_some(durability.segment_mb),
        }
    }
}

/// `maxmemory`'s value: a number of bytes, or text with a unit.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum MemorySize {
    Bytes(u64),
    Text(String),
}

impl MemorySize {
    fn bytes(&self) -> Result<u64, ConfigError> {
        match self {
            Self::Bytes(bytes) => Ok(*bytes),
            Self::Text(text) => ferrotx_store::parse_memory(text.trim().as_bytes())
                .ok_or_else(|| ConfigError::MaxMemory(text.clone())),
        }
    }
}

/// One `[[table]]` entry: exactly one of `value_bytes` (every value has this size, the
/// fast path) and `max_value_bytes` (values of any size up to it).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableEntry {
    id: u16,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_value_bytes: Option<usize>,
    /// Keys are placed by their first this many bytes (a locality hint: rows sharing
    /// them share a partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partition_key_bytes: Option<u8>,
}

impl TableEntry {
    fn to_spec(&self) -> Result<TableSpec, ConfigError> {
        let bad = || ConfigError::TableValueSize {
            name: self.name.clone(),
            max: VALUE_BYTES_MAX,
        };
        let spec = match (self.value_bytes, self.max_value_bytes) {
            (Some(n), None) if n <= VALUE_BYTES_MAX => TableSpec::fixed(self.id, &self.name, n),
            (None, Some(n)) if n <= VALUE_BYTES_MAX => TableSpec::variable(self.id, &self.name, n),
            _ => return Err(bad()),
        };
        match self.partition_key_bytes {
            None => Ok(spec),
            Some(n) if (1..=KEY_BYTES_MAX).contains(&usize::from(n)) => {
                Ok(spec.with_partition_key(usize::from(n)))
            }
            Some(_) => Err(ConfigError::PartitionKeyBytes {
                name: self.name.clone(),
                max: KEY_BYTES_MAX,
            }),
        }
    }

    fn from_spec(spec: &TableSpec) -> Self {
        let (value_bytes, max_value_bytes) = match spec.value_size {
            ValueSize::Fixed(n) => (Some(n), None),
            ValueSize::Variable(n) => (None, Some(n)),
        };
        Self {
            id: spec.id.0,
            name: spec.name.clone(),
            value_bytes,
            max_value_bytes,
            partition_key_bytes: spec.partition_key_bytes,
        }
    }
}

/// The `[resp]` table: every field optional, a missing one takes its default.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RespSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requirepass: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_request_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_clients: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pipeline_commands_max: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command_timeout_ms: Option<u64>,
}

impl RespSection {
    fn is_empty(&self) -> bool {
        self.requirepass.is_none()
            && self.max_request_bytes.is_none()
            && self.max_clients.is_none()
            && self.pipeline_commands_max.is_none()
            && self.command_timeout_ms.is_none()
    }

    fn to_settings(&self) -> RespSettings {
        let default = RespSettings::default();
        RespSettings {
            requirepass: self.requirepass.clone(),
            max_request_bytes: self.max_request_bytes.unwrap_or(default.max_request_bytes),
            max_clients: self.max_clients.unwrap_or(default.max_clients),
            pipeline_commands_max: self
                .pipeline_commands_max
                .unwrap_or(default.pipeline_commands_max),
            command_timeout_ms: self
                .command_timeout_ms
                .unwrap_or(default.command_timeout_ms),
        }
    }

    /// The section of `settings`, with only what differs from the defaults.
    fn from_settings(settings: &RespSettings) -> Self {
        let default = RespSettings::default();
        Self {
            requirepass: settings.requirepass.clone(),
            max_request_bytes: (settings.max_request_bytes != default.max_request_bytes)
                .then_some(settings.max_request_bytes),
            max_clients: (settings.max_clients != default.max_clients)
                .then_some(settings.max_clients),
            pipeline_commands_max: (settings.pipeline_commands_max
                != default.pipeline_commands_max)
                .then_some(settings.pipeline_commands_max),
            command_timeout_ms: (settings.command_timeout_ms != default.command_timeout_ms)
                .then_some(settings.command_timeout_ms),
        }
    }
}

/// One `[[partition]]` entry.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionEntry {
    id: u32,
    primary: u16,
    backups: Vec<u16>,
}

/// First line of the text [`Configuration::to_toml_string`] writes.
const HEADER: &str = "# ferrotx cluster configuration (see crates/cluster/config/example.toml)\n";

impl Configuration {
    /// Parses and checks a configuration in TOML (format in the [crate] documentation and
    /// in `crates/cluster/config/example.toml`).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let file: ConfigurationFile = toml::from_str(text)?;
        let resp = file.resp.to_settings();
        let maxmemory = file.maxmemory.as_ref().map_or(Ok(0), MemorySize::bytes)?;
        let key_file = file.key_file.clone();
        let durability = file.durability.to_durability()?;
        let tables = if file.tables.is_empty() {
            default_tables()
        } else {
            file.tables
                .iter()
                .map(TableEntry::to_spec)
                .collect::<Result<_, _>>()?
        };
        if file.partitions.is_empty() {
            return Self::new(
                file.id,
                file.threads_per_node,
                file.replicas,
                file.members,
                file.partition_count,
            )?
            .with_tables(tables)?
            .with_resp(resp)
            .map(|config| {
                config
                    .with_maxmemory(maxmemory)
                    .with_key_file(key_file)
                    .with_durability(durability)
            });
        }
        if file.partitions.len() != file.partition_count as usize {
            return Err(ConfigError::PartitionCountMismatch {
                listed: file.partitions.len(),
                expected: file.partition_count,
            });
        }
        let mut assignments = Vec::with_capacity(file.partitions.len());
        for (position, entry) in file.partitions.into_iter().enumerate() {
            if entry.id as usize != position {
                return Err(ConfigError::PartitionOutOfOrder {
                    position,
                    id: entry.id,
                });
            }
            assignments.push(Replicas {
                primary: entry.primary,
                backups: entry.backups,
            });
        }
        let partitions = PartitionMap::from_assignments(&file.members, file.replicas, assignments)?;
        Self::with_partition_map(file.id, file.threads_per_node, file.members, partitions)?
            .with_tables(tables)?
            .with_resp(resp)
            .map(|config| {
                config
                    .with_maxmemory(maxmemory)
                    .with_key_file(key_file)
                    .with_durability(durability)
            })
    }

    /// The configuration as TOML, which [`Self::from_toml_str`] reads back to an equal
    /// configuration. The partition map is written only if it is not the one
    /// [`PartitionMap::place`] computes from the members.
    pub fn to_toml_string(&self) -> String {
        let placed = PartitionMap::place(
            self.members(),
            self.partitions().partition_count(),
            self.replicas(),
        )
        .expect("a valid configuration's members can be placed");
        let partitions = if placed == *self.partitions() {
            Vec::new()
        } else {
            self.partitions()
                .iter()
                .map(|(partition, replicas)| PartitionEntry {
                    id: partition.0,
                    primary: replicas.primary,
                    backups: replicas.backups.clone(),
                })
                .collect()
        };
        let file = ConfigurationFile {
            id: self.id(),
            threads_per_node: self.threads_per_node(),
            replicas: self.replicas(),
            partition_count: self.partitions().partition_count(),
            key_file: self.key_file().map(str::to_string),
            maxmemory: self.maxmemory().map(MemorySize::Bytes),
            resp: RespSection::from_settings(self.resp()),
            durability: DurabilitySection::from_durability(self.durability()),
            members: self.members().to_vec(),
            partitions,
            tables: if self.tables() == default_tables().as_slice() {
                Vec::new()
            } else {
                self.tables().iter().map(TableEntry::from_spec).collect()
            },
        };
        let body = toml::to_string(&file).expect("a valid configuration is representable in TOML");
        format!("{HEADER}{body}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ferrotx_store::PartitionId;

    use super::*;

    const EXAMPLE: &str = include_str!("../config/example.toml");

    /// A small valid file, with `extra` appended.
    fn file(extra: &str) -> String {
        format!(
            "id = 7\nthreads_per_node = 2\nreplicas = 2\npartition_count = 3\n\
             [[member]]\nnode = 0\nfailure_domain = \"a\"\nhost = \"127.0.0.1\"\n\
             rpc_port_base = 7000\n\
             [[member]]\nnode = 1\nfailure_domain = \"b\"\nhost = \"127.0.0.1\"\n\
             rpc_port_base = 7002\nresp_port = 6379\n{extra}"
        )
    }

    fn parse_error(text: &str) -> ConfigError {
        Configuration::from_toml_str(text).unwrap_err()
    }

    #[test]
    fn durability_parses_round_trips_and_refuses_unknown_modes() {
        let base = file("");
        let config = Configuration::from_toml_str(&base).unwrap();
        assert_eq!(config.durability(), Durability::default());
        assert!(!config.to_toml_string().contains("durability"));
        let text = format!(
            "{base}[durability]\nmode = \"sync\"\nflush_interval_ms = 250\ncheckpoint_log_mb = 64\nsegment_mb = 2\n"
        );
        let config = Configuration::from_toml_str(&text).unwrap();
        assert_eq!(config.durability().mode, DurabilityMode::Sync);
        assert_eq!(config.durability().flush_interval_ms, 250);
        assert_eq!(config.durability().checkpoint_log_mb, 64);
        assert_eq!(config.durability().segment_mb, 2);
        let again = Configuration::from_toml_str(&config.to_toml_string()).unwrap();
        assert_eq!(again, config);
        let error = parse_error(&format!("{base}[durability]\nmode = \"fsync\"\n"));
        assert!(error.to_string().contains("\"fsync\""), "{error}");
        let error = parse_error(&format!("{base}[durability]\nflush_interval_ms = 0\n"));
        assert!(error.to_string().contains("flush_interval_ms"), "{error}");
        let error = parse_error(&format!("{base}[durability]\ncheckpoint_log_mb = 0\n"));
        assert!(error.to_string().contains("checkpoint_log_mb"), "{error}");
    }

    #[test]
    fn maxmemory_in_bytes_or_with_a_unit_round_trips() {
        let base = file("");
        assert_eq!(
            Configuration::from_toml_str(&base).unwrap().maxmemory(),
            None
        );
        for (given, bytes) in [
            ("1048576", 1u64 << 20),
            ("\"1mb\"", 1 << 20),
            ("\"2G\"", 2_000_000_000),
        ] {
            let text = format!("maxmemory = {given}\n{base}");
            let config = Configuration::from_toml_str(&text).unwrap();
            assert_eq!(config.maxmemory(), Some(bytes), "{given}");
            let again = Configuration::from_toml_str(&config.to_toml_string()).unwrap();
            assert_eq!(again, config);
        }
        let zero = Configuration::from_toml_str(&format!("maxmemory = 0\n{base}")).unwrap();
        assert_eq!(zero.maxmemory(), None);
        let error = parse_error(&format!("maxmemory = \"lots\"\n{base}"));
        assert!(error.to_string().contains("maxmemory"), "{error}");
    }

    #[test]
    fn tables_default_parse_and_round_trip() {
        let config = Configuration::from_toml_str(&file("")).unwrap();
        assert_eq!(config.tables(), default_tables().as_slice());
        let text = file(
            "[[table]]\nid = 3\nname = \"accounts\"\nvalue_bytes = 8\n\
             [[table]]\nid = 4\nname = \"blobs\"\nmax_value_bytes = 4096\n\
             partition_key_bytes = 8\n",
        );
        let config = Configuration::from_toml_str(&text).unwrap();
        assert_eq!(
            config.tables(),
            &[
                TableSpec::fixed(3, "accounts", 8),
                TableSpec::variable(4, "blobs", 4096).with_partition_key(8)
            ]
        );
        let again = Configuration::from_toml_str(&config.to_toml_string()).unwrap();
        assert_eq!(again, config);
    }

    #[test]
    fn resp_settings_and_addresses_parse_and_round_trip() {
        // Without a [resp] table: the defaults, and nothing written back.
        let plain = Configuration::from_toml_str(&file("")).unwrap();
        assert_eq!(plain.resp(), &RespSettings::default());
        assert!(!plain.to_toml_string().contains("[resp]"));

        let text = file(
            "[resp]\nrequirepass = \"s3cret\"\nmax_request_bytes = 1048576\nmax_clients = 50\n\
             pipeline_commands_max = 1\n",
        )
        .replace(
            "rpc_port_base = 7000\n",
            "rpc_port_base = 7000\nresp = \"127.0.0.1:7379\"\n",
        );
        let config = Configuration::from_toml_str(&text).unwrap();
        assert_eq!(
            config.resp(),
            &RespSettings {
                requirepass: Some("s3cret".to_owned()),
                max_request_bytes: 1 << 20,
                max_clients: 50,
                pipeline_commands_max: 1,
                command_timeout_ms: 5_000,
            }
        );
        assert_eq!(
            config.member(0).unwrap().resp_addr(),
            Some("127.0.0.1:7379".parse().unwrap())
        );
        assert_eq!(
            config.member(1).unwrap().resp_addr(),
            Some("127.0.0.1:6379".parse().unwrap())
        );
        let written = config.to_toml_string();
        assert!(written.contains("resp = \"127.0.0.1:7379\""), "{written}");
        assert_eq!(Configuration::from_toml_str(&written).unwrap(), config);

        // One setting given: the others keep their defaults, and only it is written.
        let some = Configuration::from_toml_str(&file("[resp]\nmax_clients = 7\n")).unwrap();
        assert_eq!(some.resp().max_clients, 7);
        assert_eq!(
            some.resp().max_request_bytes,
            RespSettings::default().max_request_bytes
        );
        let written = some.to_toml_string();
        assert!(
            written.contains("max_clients = 7") && !written.contains("max_request_bytes"),
            "{written}"
        );
        assert_eq!(Configuration::from_toml_str(&written).unwrap(), some);
        // IPv6 addresses too.
        let v6 = file("").replace(
            "rpc_port_base = 7000\n",
            "rpc_port_base = 7000\nresp = \"[::1]:7379\"\n",
        );
        let v6 = Configuration::from_toml_str(&v6).unwrap();
        assert_eq!(
            Configuration::from_toml_str(&v6.to_toml_string()).unwrap(),
            v6
        );
    }

    #[test]
    fn bad_resp_settings_are_refused_with_the_reason() {
        let message = |text: String| parse_error(&text).to_string();
        assert_eq!(
            message(file("[resp]\nmax_clients = 0\n")),
            "`[resp] max_clients` is 0: give a limit above zero, or leave it out for the default"
        );
        assert!(matches!(
            parse_error(&file("[resp]\nmax_request_bytes = 0\n")),
            ConfigError::RespLimitZero {
                setting: "max_request_bytes"
            }
        ));
        assert!(matches!(
            parse_error(&file("[resp]\nrequirepass = \"\"\n")),
            ConfigError::EmptyRequirePass
        ));
        let unknown = message(file("[resp]\nmaxclients = 3\n"));
        assert!(unknown.contains("unknown field `maxclients`"), "{unknown}");
        let negative = parse_error(&file("[resp]\nmax_clients = -1\n"));
        assert!(matches!(negative, ConfigError::Parse(_)), "{negative:?}");
        // Two members on one address, and both forms on one member.
        let same = file("").replace(
            "rpc_port_base = 7000\n",
            "rpc_port_base = 7000\nresp = \"127.0.0.1:6379\"\n",
        );
        let error = message(same);
        assert!(
            error.contains("port 6379 of host 127.0.0.1 is used by node 0 and by node 1"),
            "{error}"
        );
        let both = file("").replace(
            "resp_port = 6379\n",
            "resp_port = 6379\nresp = \"127.0.0.1:1\"\n",
        );
        assert!(matches!(
            parse_error(&both),
            ConfigError::RespAddressTwice { node: 1 }
        ));
        let bad = file("").replace("resp_port = 6379\n", "resp = \"localhost:6379\"\n");
        assert!(matches!(parse_error(&bad), ConfigError::Parse(_)));
    }

    #[test]
    fn bad_tables_are_refused_with_the_reason() {
        let both = file("[[table]]\nid = 3\nname = \"t\"\nvalue_bytes = 8\nmax_value_bytes = 9\n");
        assert!(matches!(
            parse_error(&both),
            ConfigError::TableValueSize { .. }
        ));
        let neither = file("[[table]]\nid = 3\nname = \"t\"\n");
        assert!(matches!(
            parse_error(&neither),
            ConfigError::TableValueSize { .. }
        ));
        let huge = file("[[table]]\nid = 3\nname = \"t\"\nmax_value_bytes = 2000000\n");
        assert!(matches!(
            parse_error(&huge),
            ConfigError::TableValueSize { .. }
        ));
        let twice = file(
            "[[table]]\nid = 3\nname = \"t\"\nvalue_bytes = 8\n\
             [[table]]\nid = 3\nname = \"u\"\nvalue_bytes = 8\n",
        );
        let error = parse_error(&twice);
        assert!(error.to_string().contains("id 3"), "{error}");
        let hint =
            file("[[table]]\nid = 3\nname = \"t\"\nvalue_bytes = 8\npartition_key_bytes = 17\n");
        assert!(matches!(
            parse_error(&hint),
            ConfigError::PartitionKeyBytes { .. }
        ));
        let empty = file("[[table]]\nid = 3\nname = \"\"\nvalue_bytes = 8\n");
        assert!(matches!(
            parse_error(&empty),
            ConfigError::EmptyTableName { id: 3 }
        ));
    }

    #[test]
    fn the_example_file_parses() {
        let config = Configuration::from_toml_str(EXAMPLE).unwrap();
        assert_eq!(config.id(), 1);
        assert_eq!(config.threads_per_node(), 4);
        assert_eq!(config.replicas(), 3);
        assert_eq!(config.members().len(), 6);
        assert_eq!(config.partitions().partition_count(), 24);
        assert_eq!(config.endpoint_addrs().count(), 24);
        let domain = |node: u16| config.member(node).unwrap().failure_domain.clone();
        for (_, replicas) in config.partitions().iter() {
            let racks: BTreeSet<String> = replicas.nodes().map(domain).collect();
            assert_eq!(racks.len(), 3, "{replicas:?}");
        }
        for member in config.members() {
            assert_eq!(config.partitions().primaries_on(member.node).count(), 4);
            assert_eq!(config.partitions().backups_on(member.node).count(), 8);
            assert_eq!(member.resp_port, Some(6379));
        }
        assert_eq!(
            Configuration::from_toml_str(&config.to_toml_string()).unwrap(),
            config
        );
    }

    #[test]
    fn round_trips() {
        let local = Configuration::local(4, 3, 2, 3, 9000).unwrap();
        let text = local.to_toml_string();
        assert!(text.starts_with(HEADER));
        assert!(
            !text.contains("[[partition]]"),
            "a placed map is not written:\n{text}"
        );
        assert_eq!(Configuration::from_toml_str(&text).unwrap(), local);

        let small = Configuration::from_toml_str(&file("")).unwrap();
        assert_eq!(small.member(0).unwrap().resp_port, None);
        assert_eq!(small.member(1).unwrap().resp_port, Some(6379));
        assert_eq!(
            Configuration::from_toml_str(&small.to_toml_string()).unwrap(),
            small
        );

        // A map that is not the placement's is written out, and read back as it is.
        let members = small.members().to_vec();
        let moved = PartitionMap::from_assignments(
            &members,
            2,
            (0..3)
                .map(|_| Replicas {
                    primary: 1,
                    backups: vec![0],
                })
                .collect(),
        )
        .unwrap();
        let moved = Configuration::with_partition_map(8, 2, members, moved).unwrap();
        let text = moved.to_toml_string();
        assert_eq!(text.matches("[[partition]]").count(), 3, "{text}");
        let read = Configuration::from_toml_str(&text).unwrap();
        assert_eq!(read, moved);
        assert_eq!(read.partitions().primary(PartitionId(0)), 1);
    }

    #[test]
    fn an_explicit_map_equal_to_the_placement_reads_the_same() {
        let placed = Configuration::from_toml_str(&file("")).unwrap();
        let mut explicit = String::new();
        for (partition, replicas) in placed.partitions().iter() {
            explicit += &format!(
                "[[partition]]\nid = {}\nprimary = {}\nbackups = {:?}\n",
                partition.0, replicas.primary, replicas.backups
            );
        }
        assert_eq!(
            Configuration::from_toml_str(&file(&explicit)).unwrap(),
            placed
        );
    }

    #[test]
    fn unknown_and_missing_fields_are_errors() {
        for (text, expected) in [
            (file("colour = \"blue\"\n"), "unknown field `colour`"),
            (
                file(
                    "[[member]]\nnode = 2\nfailure_domain = \"c\"\nhost = \"127.0.0.2\"\nrpc_port = 7000\n",
                ),
                "unknown field `rpc_port`",
            ),
            (
                file("[[partition]]\nid = 0\nprimary = 0\nbackups = [1]\nweight = 2\n"),
                "unknown field `weight`",
            ),
            (
                file("").replace("replicas = 2\n", ""),
                "missing field `replicas`",
            ),
            (
                file("").replace(
                    "host = \"127.0.0.1\"\nrpc_port_base = 7000",
                    "host = \"localhost\"\nrpc_port_base = 7000",
                ),
                "invalid IP address",
            ),
            (
                file("").replace("replicas = 2", "replicas = 300"),
                "replicas",
            ),
            (file("").replace("id = 7", "id = -1"), "id"),
            (file("").replace("id = 7", "id = \"seven\""), "id"),
            ("id = [".to_owned(), "line 1"),
        ] {
            let error = parse_error(&text);
            assert!(matches!(error, ConfigError::Parse(_)), "{error:?}");
            let message = error.to_string();
            assert!(message.contains(expected), "{expected:?} not in: {message}");
        }
    }

    #[test]
    fn checks_apply_to_files() {
        let no_members = "id = 1\nthreads_per_node = 1\nreplicas = 1\npartition_count = 1\n";
        assert!(matches!(parse_error(no_members), ConfigError::NoMembers));
        let edit = |from: &str, to: &str| parse_error(&file("").replacen(from, to, 1));
        assert!(matches!(
            edit("replicas = 2", "replicas = 0"),
            ConfigError::ZeroReplicas
        ));
        assert!(matches!(
            edit("replicas = 2", "replicas = 3"),
            ConfigError::TooManyReplicas {
                replicas: 3,
                nodes: 2
            }
        ));
        assert!(matches!(
            edit("threads_per_node = 2", "threads_per_node = 0"),
            ConfigError::ZeroThreads
        ));
        assert!(matches!(
            edit("partition_count = 3", "partition_count = 0"),
            ConfigError::ZeroPartitions
        ));
        assert!(matches!(
            edit("node = 1", "node = 0"),
            ConfigError::DuplicateNode { node: 0 }
        ));
        assert!(matches!(
            edit("failure_domain = \"b\"", "failure_domain = \"\""),
            ConfigError::EmptyFailureDomain { node: 1 }
        ));
        assert!(matches!(
            edit("rpc_port_base = 7002", "rpc_port_base = 65535"),
            ConfigError::PortOverflow {
                node: 1,
                rpc_port_base: 65_535,
                threads: 2
            }
        ));
        assert!(matches!(
            edit("rpc_port_base = 7002", "rpc_port_base = 7001"),
            ConfigError::PortClash {
                port: 7001,
                first: 0,
                second: 1,
                ..
            }
        ));
        assert!(matches!(
            edit("host = \"127.0.0.1\"", "host = \"0.0.0.0\""),
            ConfigError::UnspecifiedHost { node: 0, .. }
        ));
    }

    #[test]
    fn explicit_maps_in_files_are_checked() {
        let entry = |id: u32, primary: u16, backups: &str| {
            format!("[[partition]]\nid = {id}\nprimary = {primary}\nbackups = {backups}\n")
        };
        let map = |entries: &[String]| parse_error(&file(&entries.concat()));
        assert!(matches!(
            map(&[entry(0, 0, "[1]"), entry(1, 1, "[0]")]),
            ConfigError::PartitionCountMismatch {
                listed: 2,
                expected: 3
            }
        ));
        assert!(matches!(
            map(&[entry(0, 0, "[1]"), entry(2, 1, "[0]"), entry(1, 1, "[0]")]),
            ConfigError::PartitionOutOfOrder { position: 1, id: 2 }
        ));
        assert!(matches!(
            map(&[entry(0, 0, "[1]"), entry(1, 1, "[]"), entry(2, 1, "[0]")]),
            ConfigError::WrongReplicaCount {
                partition: 1,
                count: 1,
                expected: 2
            }
        ));
        assert!(matches!(
            map(&[entry(0, 0, "[1]"), entry(1, 1, "[0]"), entry(2, 5, "[0]")]),
            ConfigError::UnknownNode {
                partition: 2,
                node: 5
            }
        ));
        assert!(matches!(
            map(&[entry(0, 0, "[0]"), entry(1, 1, "[0]"), entry(2, 1, "[0]")]),
            ConfigError::RepeatedNode {
                partition: 0,
                node: 0
            }
        ));
    }

    #[test]
    fn messages_name_what_to_fix() {
        let message = |text: String| parse_error(&text).to_string();
        assert_eq!(
            message(file("").replace("replicas = 2", "replicas = 3")),
            "`replicas` is 3 but the cluster has only 2 members: each replica of a partition \
             needs its own node, so lower `replicas` or add members"
        );
        assert_eq!(
            message(file("").replace("node = 1", "node = 0")),
            "node 0 is listed twice: give every member its own `node` id"
        );
        assert_eq!(
            message(file("").replace("rpc_port_base = 7002", "rpc_port_base = 65535")),
            "node 1 needs 2 RPC ports (one per thread) from port 65535, which passes port \
             65535: lower its `rpc_port_base`"
        );
    }
}
