//! Why the Redis keyspace's table cannot be used.

/// Why [`crate::KvTable::find`] rejected a configuration's schema. Each message says
/// what to change in the configuration file.
#[derive(Debug, thiserror::Error)]
pub enum KvTableError {
    /// The schema has no table named `kv`, where the Redis keyspace lives.
    #[error(
        "the schema has no table named \"kv\" (it has {tables}), where Redis keys live: add \
         `[[table]]` with `name = \"kv\"` and `max_value_bytes = 1048576`, or list no table \
         to get the default schema"
    )]
    NoKvTable {
        /// The tables it has, by name.
        tables: String,
    },
    /// The `kv` table holds values of one fixed size, which Redis values are not.
    #[error(
        "table \"kv\" has fixed-size values ({bytes} bytes), but Redis values vary in size: \
         give it `max_value_bytes` instead of `value_bytes`"
    )]
    FixedSizeKvTable {
        /// Its value size.
        bytes: usize,
    },
    /// The `kv` table has a locality hint, which store keys (hashes of Redis keys) cannot
    /// use.
    #[error(
        "table \"kv\" has `partition_key_bytes`, but Redis keys are stored under hashes that \
         share no prefix: remove it"
    )]
    KvTableWithPartitionKey,
}
