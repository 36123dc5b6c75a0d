//! Why a Redis front end could not start.

use std::io;
use std::net::SocketAddr;

/// Why [`crate::RespServer::start`] failed. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The member has no Redis address in the configuration.
    #[error(
        "node {node} has no Redis address: give its `[[member]]` `resp = \"127.0.0.1:6379\"` \
         (or `resp_port`)"
    )]
    NoAddress {
        /// The node.
        node: u16,
    },
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
    /// The address could not be listened on.
    #[error("cannot listen for Redis clients on {addr}: {source} (is another server there?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// The event loop could not be set up (epoll, eventfd, or the thread).
    #[error("cannot start the Redis front end's event loop: {0}")]
    EventLoop(#[source] io::Error),
}
