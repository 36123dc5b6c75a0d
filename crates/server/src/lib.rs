//! ferrotx's Redis-protocol server: every node serves Redis clients over TCP and runs each
//! command as a strictly serializable transaction.
//!
//! [`RespServer::start`] gives a node (through its [`NodeHandle`](ferrotx_node::NodeHandle))
//! a mio event loop: a listener, and a slab of connections, each a socket around a
//! [`RespConnection`](ferrotx_redis_exec::RespConnection) (the I/O-free connection core
//! of `ferrotx-redis-exec`: read and write buffers, an incremental RESP parser and a
//! [`Session`](ferrotx_resp::Session) of `ferrotx-resp`). The loop runs on the node's
//! worker thread 0 as its [`Poller`](ferrotx_node::Poller)
//! ([`ServerOptions::on_worker`], the default; the worker's sleep watches the loop's
//! epoll descriptor), or on an I/O thread of its own where the worker cannot watch
//! descriptors (in-process transports). Either way the loop never runs a transaction
//! and never blocks on a worker:
//!
//! 1. it reads, parses the pipelined requests and hands each to the session;
//! 2. what the session answers alone (PING, AUTH, MULTI, queued commands, INFO, ...) is
//!    replied at once;
//! 3. a command that needs the data (a [`Plan`](ferrotx_resp::Plan): one command, or a
//!    whole MULTI/EXEC block), WATCH's version reads, and DBSIZE, SCAN and KEYS go to one
//!    of the node's worker threads (round robin) as a coroutine (`NodeHandle::spawn`,
//!    which rings the worker's doorbell); the connection's later requests wait in its
//!    input buffer meanwhile, so replies keep their order;
//! 4. the coroutine runs the work with that thread's coordinator (the I/O-free
//!    [`ferrotx_redis_exec::execute`]) and pushes the result onto a lock-free queue,
//!    waking the loop's `poll` through a mio `Waker` unless it runs on the loop's own
//!    thread; the loop completes the session, writes the reply and goes on with the
//!    buffered requests.
//!
//! Transactions: a plan reads every key it touches and every watched key in one batch of
//! reads (`Txn::read_many`), fails with a null reply if a watched key's version changed
//! since WATCH, applies the commands to an overlay of what it read, writes the overlay's
//! writes and commits; a conflict retries the whole plan after a randomized, growing
//! back-off, for up to 2 seconds. Keys live in the configuration's `kv` table under the
//! 128-bit hash of the Redis key, whose stored value carries the full key
//! ([`ferrotx_resp::keys`]).
//!
//! DBSIZE, SCAN and KEYS ask every partition's primary (a SCAN or COUNT request of the
//! transaction protocol) and are not transactions, as in Redis Cluster.
//!
//! `FERROTX COPIES`, ferrotx's own administrative command, lists the partition copies
//! the node holds with a digest of each table (`admin` describes the reply): it walks
//! whole tables, so the loop answers it from a short-lived thread of its own, beside the
//! workers, and the connection waits for it as for a worker's result.

mod admin;
mod connection;
mod dispatch;
mod error;
mod event_loop;
mod inbox;
mod loading;
mod options;
mod server;
mod stats;

pub use error::ServerError;
pub use ferrotx_redis_exec::KV_TABLE_NAME;
pub use loading::{LOADING_REPLY, LoadingResponder};
pub use options::ServerOptions;
pub use server::RespServer;
