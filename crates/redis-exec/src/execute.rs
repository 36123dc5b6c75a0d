//! Running a session's work as transactions, in a coroutine of a worker thread.
//!
//! A [`Plan`] (one command, or a MULTI/EXEC block) is one transaction: read every key it
//! touches and every watched key in one batch of reads, check the watched keys' versions,
//! apply the commands to an [`Overlay`] of what was read, write the overlay's writes, and
//! commit. A conflict retries the whole plan from the start after a randomized back-off.
//! This is coroutine code over the coordinator's API, without I/O, so the simulator can
//! run it as it is.

use ferrotx_exec::Co;
use ferrotx_resp::keys::{Lookup, lookup};
use ferrotx_resp::session::OOM;
use ferrotx_resp::{Outcome, Overlay, Plan, Reply, WatchVersion};
use ferrotx_txn::coordinator::{Abort, Coordinator, Txn};
use ferrotx_txn::reservation::Age;

use crate::backoff::{AGE_AFTER_LOST, Backoff};
use crate::kv_table::{KvTable, store_key};
use crate::ship::{ship_plan, ship_target};

/// How a plan's run ended.
#[derive(Debug)]
pub struct PlanRun {
    /// What the session completes the command with.
    pub outcome: Outcome,
    /// Attempts that aborted (conflicts) before the last one.
    pub aborts: u32,
}

/// Why one attempt did not give an outcome.
enum Attempt {
    /// A conflict: run the plan again.
    Retry(Abort),
    /// The plan cannot run whole (too large for one transaction, or a primary past its
    /// memory limit refused a write that would grow it): this error is the reply,
    /// unless its commands may run one by one ([`Plan::may_split`]), when those that do
    /// not grow memory still run.
    TooLarge(Reply),
    /// Something retrying does not cure: this error is the reply.
    Fail(Reply),
}

/// Sorts an abort into what to do with it.
fn classify(abort: Abort) -> Attempt {
    match abort {
        Abort::Conflict | Abort::Locked | Abort::LogFull | Abort::Unavailable => {
            Attempt::Retry(abort)
        }
        Abort::TooLarge => Attempt::TooLarge(too_large()),
        Abort::OutOfMemory => Attempt::TooLarge(Reply::error_static(OOM)),
        Abort::Refused(_)
        | Abort::ReadOnly
        | Abort::KeyExists
        | Abort::Finished
        | Abort::Protocol
        | Abort::OutcomeUnknown => Attempt::Fail(Reply::error(format!("ERR ferrotx: {abort}"))),
    }
}

/// The reply to a plan too large for one commit.
fn too_large() -> Reply {
    Reply::error_static(
        "ERR ferrotx: the transaction is too large for one commit (too many keys or bytes); \
         split it",
    )
}

/// Runs `plan` as one transaction on the `kv` table, retrying conflicts after a
/// randomized back-off until retries have lasted 2 seconds (of `co`'s time) or 65,536
/// attempts, each retry after a lost conflict carrying the plan's age (docs/
/// transactions.md, "Fairness"); `seed` draws the back-off. Pipelined commands too large together for
/// one transaction run one by one.
pub async fn run_plan(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    plan: &Plan,
    seed: u64,
) -> PlanRun {
    let deadline = co.now_ns().saturating_add(kv.command_timeout_ns);
    let mut aborts = match run_whole(co, coordinator, kv, plan, seed, deadline).await {
        Ok(run) => return run,
        Err(too_large) if !plan.may_split() => return too_large.failed(),
        Err(too_large) => too_large.aborts,
    };
    let mut replies = Vec::with_capacity(plan.commands().len());
    for (i, single) in plan.one_by_one().enumerate() {
        let seed = seed ^ (i as u64 + 1);
        let run = run_whole(co, coordinator, kv, &single, seed, deadline)
            .await
            .unwrap_or_else(TooLarge::failed);
        aborts += run.aborts;
        match run.outcome {
            Outcome::Committed(mut reply) => replies.append(&mut reply),
            Outcome::Failed(error) => replies.push(error),
            Outcome::WatchedKeyChanged => unreachable!("a command outside MULTI watches nothing"),
        }
    }
    PlanRun {
        outcome: Outcome::Committed(replies),
        aborts,
    }
}

/// A plan too large for one transaction: the error to reply, and the attempts that
/// aborted before one found it so.
struct TooLarge {
    reply: Reply,
    aborts: u32,
}

impl TooLarge {
    /// The run that answers the error.
    fn failed(self) -> PlanRun {
        PlanRun {
            outcome: Outcome::Failed(self.reply),
            aborts: self.aborts,
        }
    }
}

/// [`run_plan`] without splitting: `Err` if the plan is too large for one transaction.
async fn run_whole(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    plan: &Plan,
    seed: u64,
    deadline_ns: u64,
) -> Result<PlanRun, TooLarge> {
    if let Some(partition) = ship_target(coordinator, kv, plan) {
        // Every key has one primary: the plan runs there, in its queue.
        let failed = |reply| {
            Ok(PlanRun {
                outcome: Outcome::Failed(reply),
                aborts: 0,
            })
        };
        match ship_plan(co, coordinator, plan, partition, deadline_ns).await {
            Ok(outcome) => return Ok(PlanRun { outcome, aborts: 0 }),
            // The primary could not run it (a node without the procedure, a request or
            // an answer over the message limit): nothing changed, run it here (the
            // transaction finds out whether it fits one commit).
            Err(Abort::Protocol | Abort::TooLarge) => {}
            Err(Abort::Unavailable) => return failed(clusterdown()),
            Err(Abort::OutOfMemory) => {
                return Err(TooLarge {
                    reply: Reply::error_static(OOM),
                    aborts: 0,
                });
            }
            Err(abort @ (Abort::Conflict | Abort::Locked | Abort::LogFull)) => {
                return failed(Reply::error(format!(
                    "TRYAGAIN ferrotx: transaction aborted after retries at the key's \
                     primary ({abort})"
                )));
            }
            Err(abort) => return failed(Reply::error(format!("ERR ferrotx: {abort}"))),
        }
    }
    let mut backoff = Backoff::new(seed, co.now_ns());
    // Its age from the first attempt: every retry carries it, so that it eventually goes
    // ahead of younger transactions (docs/transactions.md, "Fairness").
    let age = coordinator.age();
    // Attempts lost to contention: they make the age (other aborts, a reconfiguration or
    // a full log, say nothing of how long it waited its turn).
    let mut lost = 0;
    let mut aborts = 0;
    loop {
        let aged = (lost >= AGE_AFTER_LOST).then(|| age.after(lost));
        let outcome = match attempt(co, coordinator, kv, plan, deadline_ns, aged).await {
            Ok(outcome) => outcome,
            Err(Attempt::TooLarge(reply)) => return Err(TooLarge { reply, aborts }),
            Err(Attempt::Fail(reply)) => Outcome::Failed(reply),
            Err(Attempt::Retry(abort)) => {
                aborts += 1;
                if !backoff.exhausted(co) && co.now_ns() < deadline_ns {
                    if matches!(abort, Abort::Conflict | Abort::Locked) {
                        lost += 1;
                    }
                    backoff.wait_after(co, lost).await;
                    continue;
                }
                if abort == Abort::Unavailable {
                    // Nothing was changed, and Redis clients retry this error.
                    Outcome::Failed(clusterdown())
                } else {
                    // Nothing was changed: Redis clients may retry TRYAGAIN.
                    Outcome::Failed(Reply::error(format!(
                        "TRYAGAIN ferrotx: transaction aborted after {} retries ({abort})",
                        aborts - 1
                    )))
                }
            }
        };
        return Ok(PlanRun { outcome, aborts });
    }
}

/// The reply to a command the cluster could not run (nothing changed; Redis clients
/// retry it).
fn clusterdown() -> Reply {
    Reply::error_static(
        "CLUSTERDOWN ferrotx: the cluster is reconfiguring, or the key's partition has no \
         copy left",
    )
}

/// One attempt at `plan`.
async fn attempt(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    plan: &Plan,
    deadline_ns: u64,
    age: Option<Age>,
) -> Result<Outcome, Attempt> {
    // The plan's keys (sorted, once each), then the watched keys it does not touch: read
    // in the transaction, so that its validation covers them.
    let (plan_keys, unread) = plan.keys();
    let mut keys = plan_keys.clone();
    for watched in plan.watched() {
        if plan_keys.binary_search(&watched.key.as_slice()).is_err() {
            keys.push(&watched.key);
        }
    }
    let store_keys: Vec<_> = keys.iter().map(|key| store_key(key)).collect();
    let mut txn = if plan.is_read_only() {
        coordinator.begin_read_only(co)
    } else {
        coordinator.begin(co)
    };
    txn.set_deadline(deadline_ns);
    if let Some(age) = age {
        txn.set_age(age);
    }
    let values = txn.read_many(kv.id, &store_keys).await.map_err(classify)?;
    let now_ms = kv.now_ms(co);
    if !watched_unchanged(&txn, kv, plan, now_ms) {
        // Dropping the transaction abandons it: nothing was locked or written.
        return Ok(Outcome::WatchedKeyChanged);
    }
    let mut overlay = Overlay::new(kv.stored_bytes_max, now_ms);
    for (key, stored) in plan_keys.iter().zip(&values) {
        overlay
            .insert_stored(key.to_vec(), stored.as_deref())
            .map_err(|error| {
                Attempt::Fail(Reply::error(format!(
                    "ERR ferrotx: the stored value of a key is unreadable: {error}"
                )))
            })?;
    }
    for key in unread {
        overlay.insert_unread(key.to_vec());
    }
    let replies = plan.apply(&mut overlay);
    for (key, value) in overlay.encoded_writes() {
        let key = ferrotx_store::Key::from_bytes(&key).expect("16 bytes");
        // A key read above gets an ordinary write at the version read; one written
        // unread, a blind write (locked at whatever version it has at commit).
        txn.put(kv.id, key, value).map_err(classify)?;
    }
    txn.commit().await.map_err(classify)?;
    Ok(Outcome::Committed(replies))
}

/// True if every key the plan watches has the version WATCH saw, and none that was live
/// with a deadline then has expired by `now_ms` (Unix time in milliseconds).
fn watched_unchanged(txn: &Txn<'_>, kv: KvTable, plan: &Plan, now_ms: u64) -> bool {
    plan.watched().iter().all(|watched| {
        let version = txn
            .read_version(kv.id, &store_key(&watched.key))
            .expect("every watched key was read");
        watched.version.unchanged(version, now_ms)
    })
}

/// The version WATCH records for a key it could not read: versions have 62 bits, so no
/// key ever has it, and an EXEC watching the key fails (answers nil).
pub const VERSION_UNREADABLE: WatchVersion = WatchVersion {
    store_version: u64::MAX,
    expires_at_ms: None,
};

/// WATCH: the current version of each of `keys` (absent keys have versions too), and
/// its deadline if it is live and expiring, read together at their primaries as a
/// read-only transaction, retried on conflicts.
pub async fn read_versions(
    co: &Co,
    coordinator: &Coordinator,
    kv: KvTable,
    keys: &[Vec<u8>],
    seed: u64,
) -> Result<Vec<WatchVersion>, Reply> {
    let store_keys: Vec<_> = keys.iter().map(|key| store_key(key)).collect();
    let mut backoff = Backoff::new(seed, co.now_ns());
    // No age: an aged validation would reserve the keys against the EXEC that follows
    // (a new transaction, which goes after it) as well as against others.
    loop {
        let mut txn = coordinator.begin_read_only(co);
        let read = match txn.read_many(kv.id, &store_keys).await {
            Ok(values) => {
                let now_ms = kv.now_ms(co);
                let versions: Vec<WatchVersion> = store_keys
                    .iter()
                    .zip(keys)
                    .zip(&values)
                    .map(|((store_key, key), stored)| WatchVersion {
                        store_version: txn.read_version(kv.id, store_key).expect("read above"),
                        expires_at_ms: match lookup(key, stored.as_deref(), now_ms) {
                            Ok(Lookup::Value { expires_at_ms, .. }) => expires_at_ms,
                            _ => None,
                        },
                    })
                    .collect();
                // Validation makes the versions one snapshot; one key needs none.
                txn.commit().await.map(|()| versions)
            }
            Err(abort) => Err(abort),
        };
        match read.map_err(classify) {
            Ok(versions) => return Ok(versions),
            Err(Attempt::Fail(reply) | Attempt::TooLarge(reply)) => return Err(reply),
            Err(Attempt::Retry(abort)) => {
                if backoff.exhausted(co) {
                    return Err(Reply::error(format!(
                        "ERR ferrotx: WATCH could not read its keys ({abort}); try again"
                    )));
                }
                backoff.wait(co).await;
            }
        }
    }
}
