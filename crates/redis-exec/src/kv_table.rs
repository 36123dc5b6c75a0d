//! Where the Redis keyspace lives: the configuration's table named `kv`.

use ferrotx_cluster::Configuration;
use ferrotx_resp::keys;
use ferrotx_store::{Key, TableId, ValueSize};

use crate::error::KvTableError;

/// The name of the table that holds the Redis keyspace (the default schema has it).
pub const KV_TABLE_NAME: &str = "kv";

/// The table of the Redis keyspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvTable {
    /// Its id.
    pub id: TableId,
    /// Its largest value: the largest stored value (Redis key and value encoded) a write
    /// may make.
    pub stored_bytes_max: usize,
    /// Longest a command runs before it answers: its result, `-TRYAGAIN` or
    /// `-CLUSTERDOWN` (nothing changed), or "outcome unknown" (a failure interrupted its
    /// commit and recovery did not decide it in time). [`DEFAULT_COMMAND_TIMEOUT_NS`]
    /// unless the server sets another.
    pub command_timeout_ns: u64,
}

/// Default of [`KvTable::command_timeout_ns`]: 5 s, a few leases and recoveries.
pub const DEFAULT_COMMAND_TIMEOUT_NS: u64 = 5_000_000_000;

impl KvTable {
    /// The `kv` table of `config`'s schema: it must exist and hold values of any size.
    /// Commands answer within the configuration's `[resp] command_timeout_ms`.
    pub fn find(config: &Configuration) -> Result<Self, KvTableError> {
        let Some(spec) = config.tables().iter().find(|t| t.name == KV_TABLE_NAME) else {
            let names: Vec<&str> = config.tables().iter().map(|t| t.name.as_str()).collect();
            return Err(KvTableError::NoKvTable {
                tables: names.join(", "),
            });
        };
        if spec.partition_key_bytes.is_some() {
            return Err(KvTableError::KvTableWithPartitionKey);
        }
        match spec.value_size {
            ValueSize::Variable(bytes) => Ok(Self {
                id: spec.id,
                stored_bytes_max: bytes,
                command_timeout_ns: config.resp().command_timeout_ms.saturating_mul(1_000_000),
            }),
            ValueSize::Fixed(bytes) => Err(KvTableError::FixedSizeKvTable { bytes }),
        }
    }
}

/// The store key of the Redis key `key` ([`keys::store_key`]).
pub fn store_key(key: &[u8]) -> Key {
    Key::from_bytes(&keys::store_key(key)).expect("a store key has 16 bytes, the most a key may")
}

#[cfg(test)]
mod tests {
    use ferrotx_store::TableSpec;

    use super::*;

    #[test]
    fn the_kv_table_must_exist_and_hold_values_of_any_size() {
        let config = Configuration::local(1, 1, 1, 1, 7000).unwrap();
        assert_eq!(
            KvTable::find(&config).unwrap(),
            KvTable {
                id: TableId(1),
                stored_bytes_max: 1 << 20,
                command_timeout_ns: DEFAULT_COMMAND_TIMEOUT_NS,
            }
        );
        let other = |tables| config.clone().with_tables(tables).unwrap();
        let error = KvTable::find(&other(vec![TableSpec::fixed(2, "accounts", 8)])).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("no table named \"kv\" (it has accounts)"),
            "{error}"
        );
        assert!(matches!(
            KvTable::find(&other(vec![TableSpec::fixed(2, "kv", 8)])),
            Err(KvTableError::FixedSizeKvTable { bytes: 8 })
        ));
        let hinted = TableSpec::variable(3, "kv", 100).with_partition_key(8);
        assert!(matches!(
            KvTable::find(&other(vec![hinted])),
            Err(KvTableError::KvTableWithPartitionKey)
        ));
        let found = KvTable::find(&other(vec![
            TableSpec::fixed(2, "accounts", 8),
            TableSpec::variable(5, "kv", 4096),
        ]));
        assert_eq!(
            found.unwrap(),
            KvTable {
                id: TableId(5),
                stored_bytes_max: 4096,
                command_timeout_ns: DEFAULT_COMMAND_TIMEOUT_NS,
            }
        );
    }
}
