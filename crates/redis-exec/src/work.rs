//! The work a connection hands to a worker, and running it.
//!
//! [`RespConnection`](crate::RespConnection) answers what it can alone; a request that
//! needs the data becomes one [`Work`] with a seed, which the caller runs with
//! [`execute`] in a coroutine of a worker (the server spawns one per work item on a
//! node's worker thread; a simulated client awaits it in its own coroutine) and gives
//! back as a [`WorkResult`].

use ferrotx_exec::Co;
use ferrotx_resp::{KeyspaceRequest, Plan, Reply, WatchVersion};
use ferrotx_txn::coordinator::Coordinator;

use crate::execute::{PlanRun, read_versions, run_plan};
use crate::keyspace::run_keyspace;
use crate::kv_table::KvTable;

/// Work for a worker: what a request needs from the data.
#[derive(Debug, PartialEq, Eq)]
pub enum Work {
    /// Run this plan (an ordinary command with the data commands pipelined behind it, or
    /// EXEC's block) as one transaction: [`run_plan`].
    Plan(Plan),
    /// WATCH: read the versions of these keys, in order: [`read_versions`].
    Versions(Vec<Vec<u8>>),
    /// DBSIZE, SCAN, KEYS, FLUSHALL or FLUSHDB: [`run_keyspace`].
    Keyspace(KeyspaceRequest),
}

/// The result of a [`Work`], for [`RespConnection::complete`](crate::RespConnection::complete).
#[derive(Debug)]
pub enum WorkResult {
    /// A plan ran (an ordinary command, or EXEC's block).
    Plan(PlanRun),
    /// The versions of WATCH's keys, in order, or the error to reply.
    Versions(Result<Vec<WatchVersion>, Reply>),
    /// DBSIZE, SCAN, KEYS, FLUSHALL or FLUSHDB: the reply (an error reply if it failed).
    Keyspace(Reply),
    /// The reply to an administrative command ([`Step::Admin`](crate::Step::Admin)),
    /// which the caller made ([`execute`] never returns it).
    Admin(Reply),
    /// The work was dropped unfinished: the node is stopping. The connection answers
    /// an error (and a WATCH leaves its keys watched at a version no key has).
    Dropped,
}

/// Runs `work` with `coordinator` on the `kv` table, whose configuration has
/// `partitions` partitions; `seed` draws its back-offs (give each request its own:
/// [`Step::Work`](crate::Step::Work) carries one).
pub async fn execute(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    partitions: u32,
    work: Work,
    seed: u64,
) -> WorkResult {
    match work {
        Work::Plan(plan) => WorkResult::Plan(run_plan(co, coordinator, kv, &plan, seed).await),
        Work::Versions(keys) => {
            WorkResult::Versions(read_versions(co, coordinator, kv, &keys, seed).await)
        }
        Work::Keyspace(request) => WorkResult::Keyspace(
            run_keyspace(co, coordinator, kv, partitions, &request, seed).await,
        ),
    }
}
