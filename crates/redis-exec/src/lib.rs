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
//! 2. Per client: a [`Session`](ferrotx_resp::Session) takes each parsed request
//!    (`Session::handle`) and answers an [`Action`](ferrotx_resp::Action). Replies it
//!    gives alone need nothing from here. For the three that need the data, the caller
//!    runs one coroutine on a worker (one at a time per client, so replies keep their
//!    order) with a seed that differs per request (the back-off's draws):
//!    - `Action::Run(plan)`: [`run_plan`], then `Session::complete` with the
//!      [`PlanRun::outcome`];
//!    - `Action::ReadVersions(keys)` (WATCH): [`read_versions`], then `Session::watched`
//!      with the versions; on an error reply, `Session::watched` with
//!      [`VERSION_UNREADABLE`] for every key (so a later EXEC fails safely), and the
//!      error is the reply;
//!    - `Action::Keyspace(request)` (DBSIZE, SCAN, KEYS): [`run_keyspace`] over the
//!      configuration's partition count; its result is the reply, and the session is not
//!      told.
//!
//! A plan is one transaction (retried on conflicts after a randomized, growing back-off,
//! for up to 2 seconds); pipelined commands too large together for one transaction run
//! one by one. DBSIZE, SCAN and KEYS ask every partition's primary and are not
//! transactions, as in Redis Cluster. Keys live under the 128-bit hash of the Redis key
//! ([`store_key`], [`ferrotx_resp::keys`]).

mod backoff;
mod error;
mod execute;
mod keyspace;
mod kv_table;

pub use error::KvTableError;
pub use execute::{PlanRun, VERSION_UNREADABLE, read_versions, run_plan};
pub use keyspace::{PARTITION_BITS, run_keyspace};
pub use kv_table::{KV_TABLE_NAME, KvTable, store_key};
