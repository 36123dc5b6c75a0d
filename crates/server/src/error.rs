//! Why a Redis front end could not start.

use std::io;
use std::net::SocketAddr;

use ferrotx_redis_exec::KvTableError;

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
    /// The schema's `kv` table, where the Redis keyspace lives, is missing or unusable.
    #[error(transparent)]
    KvTable(#[from] KvTableError),
    /// The address could not be listened on.
    #[error("cannot listen for Redis clients on {addr}: {source} (is another server there?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// The event loop could not be given to the node's worker (it has stopped).
    #[error("cannot serve Redis clients on the node's worker: {0}")]
    Attach(#[source] ferrotx_node::AttachError),
    /// The event loop could not be set up (epoll, eventfd, or the thread).
    #[error("cannot start the Redis front end's event loop: {0}")]
    EventLoop(#[source] io::Error),
}
