//! The Redis front end's execution, sans I/O: what runs a Redis client's commands as
//! transactions, once [`ferrotx_resp::Session`] has turned them into work.
//!
//! `ferrotx-resp` parses RESP and keeps each connection's state (MULTI, WATCH, AUTH, ...)
//! without touching the data; this crate runs the work a session asks for, as coroutine
//! code over a worker thread's transaction [`Coordinator`](ferrotx_txn::coordinator::Coordinator).
//! It opens no socket, reads no clock (time is [`Co::now_ns`](ferrotx_exec::Co::now_ns),
//! the executor's) and draws no randomness of its own (back-offs come from a caller's
//! seed), so the same code serves the real server (`ferrotx-server`, a mio event loop
//! that hands work to a node's worker threads) and simulated Redis clients in
//! `ferrotx-sim`, which replay a run from its seed.
//!
//! # Order of calls
//!
//! 1. Once, when the front end starts: [`KvTable::find`] finds the configuration's `kv`
//!    table ([`KV_TABLE_NAME`]), where Redis keys live; a [`KvTableError`] says what to
//!    fix in the configuration.
//! 2. Per client: a [`RespConnection`] is the connection without its transport. It is
//!    fed the bytes the client sends, parses them, hands each request to its
//!    [`Session`](ferrotx_resp::Session) (which keeps MULTI, WATCH, AUTH, ...), writes
//!    what the session answers alone to its output, and joins the data commands
//!    pipelined behind one into the same plan. A request that needs the data stops it
//!    with a [`Step::Work`]: the caller runs that [`Work`] with [`execute`] in one
//!    coroutine on a worker (one at a time per client, so replies keep their order),
//!    with the step's seed (it differs per request: the back-off's draws), and gives the
//!    [`WorkResult`] back to [`RespConnection::complete`]. INFO stops it with a
//!    [`Step::Info`], for the caller's numbers, and an administrative command (FERROTX
//!    COPIES) with a [`Step::Admin`], which the caller answers from its node's state
//!    and completes with [`WorkResult::Admin`] (a simulated [`RespClient`] answers it an
//!    error: it has no node of its own to ask). The caller sends
//!    [`RespConnection::output`].
//!
//! [`execute`] runs the three kinds of work:
//! - a plan (`Action::Run`): [`run_plan`], whose [`PlanRun::outcome`] completes the
//!   session (`Session::complete`);
//! - WATCH's versions (`Action::ReadVersions`): [`read_versions`], given to
//!   `Session::watched`; on an error reply, the keys are watched at
//!   [`VERSION_UNREADABLE`] (so a later EXEC fails safely), and the error is the reply;
//! - DBSIZE, SCAN, KEYS, FLUSHALL, FLUSHDB (`Action::Keyspace`): [`run_keyspace`] over
//!   the configuration's partition count; its result is the reply, and the session is
//!   not told.
//!
//! 3. A simulated client: a [`RespClient`] drives a [`RespConnection`] from one
//!    coroutine, awaiting each work item's [`execute`] itself, and parses its output
//!    into [`RespValue`]s ([`parse_reply`]); [`encode_request`] writes the bytes of a
//!    command as clients send them.
//!
//! A plan is one transaction (retried on conflicts after a randomized, growing back-off,
//! for up to 2 seconds); pipelined commands too large together for one transaction run
//! one by one. DBSIZE, SCAN, KEYS and FLUSHALL ask every partition's primary and are not
//! transactions, as in Redis Cluster (FLUSHALL deletes the keys it finds in transactions
//! of at most [`FLUSH_KEYS_PER_TRANSACTION`] keys).
//!
//! Key expiry uses the wall clock `co.now_ns() + kv.wall_offset_ns`
//! ([`KvTable::now_ms`]): the server sets the offset from the system clock at start, and
//! simulations keep a fixed one. Expired keys are deleted by the writing commands that
//! touch them and, in the background, by [`run_sweeper`]: one coroutine per worker
//! thread, started by the caller (the server starts one on each of its node's workers),
//! that every [`SWEEP_INTERVAL_NS`] of `co`'s clock scans a bounded part of the
//! partitions its node is primary for and deletes the keys still expired. Keys live
//! under the 128-bit hash of the Redis key ([`store_key`], [`ferrotx_resp::keys`]).

mod backoff;
mod client;
mod connection;
mod error;
mod execute;
mod flush;
mod keyspace;
mod kv_table;
mod resp_value;
mod ship;
mod sweep;
mod work;

pub use client::RespClient;
pub use connection::{
    Counters, IDLE_BUFFER_BYTES_MAX, OUTPUT_PAUSE_BYTES, READ_AHEAD_BYTES_MAX, RespConnection,
    Shared, Step, Stop,
};
pub use error::KvTableError;
pub use execute::{PlanRun, VERSION_UNREADABLE, read_versions, run_plan};
pub use flush::FLUSH_KEYS_PER_TRANSACTION;
pub use keyspace::{PARTITION_BITS, run_keyspace};
pub use kv_table::{
    DEFAULT_COMMAND_TIMEOUT_NS, KV_TABLE_NAME, KvTable, SIMULATED_WALL_OFFSET_NS, store_key,
};
pub use resp_value::{ReplyError, RespValue, encode_request, parse_reply};
pub use ship::{REDIS_PLAN, decode_plan, encode_plan, procedures, ship_plan, ship_target};
pub use sweep::{
    SWEEP_INTERVAL_NS, SWEEP_OBJECTS_PER_PARTITION, SweepStats, run_sweeper, sweep_pass,
};
pub use work::{Work, WorkResult, execute};
