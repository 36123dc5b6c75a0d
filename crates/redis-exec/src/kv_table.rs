//! Where the Redis keyspace lives: the configuration's table named `kv`.

use ferrotx_cluster::Configuration;
use ferrotx_exec::Co;
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
    /// The wall clock: Unix time in nanoseconds at the executor's time 0
    /// ([`Co::now_ns`] counts from the node's start), so that the Unix time now is
    /// `co.now_ns() + wall_offset_ns` ([`KvTable::now_ms`]), which key expiry uses.
    /// [`SIMULATED_WALL_OFFSET_NS`] unless the caller sets another: the real server sets
    /// the system clock's ([`KvTable::with_wall_offset_ns`]); simulations keep the fixed
    /// one, so runs replay.
    pub wall_offset_ns: u64,
}

/// Default of [`KvTable::command_timeout_ns`]: 5 s, a few leases and recoveries.
pub const DEFAULT_COMMAND_TIMEOUT_NS: u64 = 5_000_000_000;

/// Default of [`KvTable::wall_offset_ns`]: a fixed, plausible Unix time (2023-11-14,
/// 1,700,000,000,000 ms) for the executor's time 0, for simulations and tests.
pub const SIMULATED_WALL_OFFSET_NS: u64 = 1_700_000_000_000 * 1_000_000;

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
                wall_offset_ns: SIMULATED_WALL_OFFSET_NS,
            }),
            ValueSize::Fixed(bytes) => Err(KvTableError::FixedSizeKvTable { bytes }),
        }
    }
}

impl KvTable {
    /// This table with the wall clock `wall_offset_ns` (see [`KvTable::wall_offset_ns`]).
    pub fn with_wall_offset_ns(self, wall_offset_ns: u64) -> Self {
        Self {
            wall_offset_ns,
            ..self
        }
    }

    /// Unix time in milliseconds at executor time `now_ns`.
    pub fn unix_ms(&self, now_ns: u64) -> u64 {
        now_ns.saturating_add(self.wall_offset_ns) / 1_000_000
    }

    /// Unix time in milliseconds now, by `co`'s clock: the time commands run at (key
    /// expiry).
    pub fn now_ms(&self, co: &Co) -> u64 {
        self.unix_ms(co.now_ns())
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
                wall_offset_ns: SIMULATED_WALL_OFFSET_NS,
            }
        );
        let other = |tables| config.clone().with_tables(tables).unwrap();
        let error = KvTable::find(&other(vec![TableSpec::fixed(2, "accounts", 8)])).unwrap_err();
        let kv = KvTable::find(&config)
            .unwrap()
            .with_wall_offset_ns(5_000_000);
        assert_eq!(kv.unix_ms(1_999_999), 6);
        assert_eq!(
            KvTable::find(&config).unwrap().unix_ms(0),
            1_700_000_000_000
        );
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
                wall_offset_ns: SIMULATED_WALL_OFFSET_NS,
            }
        );
    }
}
