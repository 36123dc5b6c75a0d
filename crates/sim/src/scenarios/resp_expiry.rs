//! `resp-expiry`: Redis key expiry under clock drift (issue 14). Every client (3 per
//! worker, on every node and thread) writes and reads four keys with deadlines of a few
//! to tens of milliseconds (now and then up to 1.5 s), so keys expire while the run goes
//! on: `SET k v PXAT D` (`D` from the client's node's clock), `SET k v PX d`, `SET k v`,
//! `MULTI SET k v PX d PEXPIRETIME k EXEC`, `GET`, `MULTI GET k PTTL k EXEC`, `PTTL`,
//! `MULTI GET k GET k2 EXEC`, `MULTI GET k PEXPIRE k d PEXPIRETIME k EXEC`, `PEXPIRE`,
//! `EXPIRE k 1`, `MULTI GET k PERSIST k EXEC`, `PERSIST`, `GETEX` (`PX`, `PXAT`,
//! `PERSIST`), `DEL`, two keys' `SET PX` in one `MULTI` (with `PEXPIRETIME`), two `SET
//! PXAT` pipelined, and `WATCH k`, `GET k`, (a pause), `MULTI SET k v PXAT D EXEC`. Two of
//! the keys share a primary, the others do not (chosen from the configuration). Every
//! `SET` writes a value no other writes. A background sweeper runs on every worker, as
//! the server starts one ([`sweep_pass`], the production pass, every 1 to 10 ms of its
//! node's clock while the clients run, then every 100 ms).
//!
//! Each operation is recorded with its invocation and completion ticks (real-time order
//! without ties), its node's clock at both, and what its reply said: *ok*, *failed*
//! (`-TRYAGAIN`, `-CLUSTERDOWN`, `EXECABORT`, or a null `EXEC` after `WATCH`: nothing
//! happened) or *unknown*. "Now" for a command is the wall clock of the node that runs it
//! ([`KvTable::now_ms`]): the client's node for reads and for writes of keys of several
//! primaries; the keys' primary for writes shipped there, or the client's node if the
//! primary sent it back. So every operation has an interval of wall time, `at`, that
//! holds the "now" it ran at whichever node ran it: the smallest of those nodes' clocks
//! at its invocation to the largest at its completion (another node's clock is read
//! through the simulator's clocks at the same simulated instant, ±1 ms for rounding). The
//! key's primary's clock over the same span (`primary`) bounds what the sweeper saw. If
//! the client's coordinator changed configurations during the operation (membership),
//! every node may have run it and been the primary.
//!
//! A value's *deadlines* are the deadlines it may have had: its `SET`'s (`PXAT D`: `D`;
//! `PX d`: the `PEXPIRETIME` the same block answered, or `now + d` for `now` in `at`;
//! none), and those of the operations that may have changed it: a `PEXPIRE`, `PERSIST`
//! or `GETEX` in a block whose `GET` read the value (exact), and a plain one (or one whose
//! outcome is unknown) that may have found it: every value of the key written before it
//! completed. A read only counts the changes invoked before it completed. The checks, per
//! key ([`check_key`]):
//!
//! 1. **No read of an expired value**: a read (`GET`, a block's `GET`, `GETEX`) that
//!    returned `v` is a violation if every deadline `v` may have had by then is at or
//!    before the reading node's clock at the read's invocation (the command reads "now"
//!    after it was invoked); the same for an `EXEC` after `WATCH` that committed although
//!    the value the watcher read had certainly expired by then.
//! 2. **PTTL**: a block's `PTTL` answered `p > 0` with its `GET`'s value `v`: some
//!    deadline `D` of `v` has `D - p` in `at` (±1 ms); `-1`: `v` may have no deadline;
//!    `-2` only with a nil `GET`. A plain `PTTL` the same against any value of the key.
//!    A `PEXPIRETIME` after `PX d` (in `SET` or `PEXPIRE`) minus `d` lies in `at`.
//! 3. **Values and real time**: a read returns nil or a value a `SET` of that key wrote,
//!    not one that certainly failed nor one invoked after the read completed; not a value
//!    overwritten or deleted by an acknowledged `SET` or `DEL` invoked after the value's
//!    `SET` completed and completed before the read was invoked (stale); and when the last
//!    acknowledged `SET` or `DEL` completed before the read was invoked and no other
//!    operation that may write the key overlaps the span from its invocation to the
//!    read's completion, the read returns its value (nil after `DEL`) unless the value
//!    may have expired by then: a deadline at or before the largest of the reading node's
//!    clock, the primary's (the sweeper's) and the writing node's at their completions.
//!    So neither an early expiry nor a lost write goes unseen.
//! 4. **Background removal**: the simulator starts no sweeper, so the scenario starts one
//!    per worker as the server does. Once every client finished (a client dropped by a
//!    crash counts; so, after 6 s of its clock without a client starting or finishing an
//!    operation, do those a crash left behind), each sweeper goes on until a pass that
//!    started after the latest deadline the clients set (as far as it can tell) visited
//!    all its partitions with no failure; then the final value at each primary must not
//!    have a deadline at or before that pass's start by the primary's clock (not with
//!    membership, where a partition being recovered answers a scan with an empty page,
//!    which looks whole), and is checked as a read at the end (3), its stored deadline
//!    one of its deadlines.
//! 5. As in every scenario: backups equal their primaries, no backup log exceeded its
//!    reservation, every client finishes (the run's liveness check), and contention alone
//!    fails nothing: in a run without crash, pause, partition or attack, every
//!    `-TRYAGAIN` is a violation ([`disruptions`]).
//!
//! The rules count only what certainly happened, so a correct cluster never fails them
//! under any fault, drift included; they lose precision (never soundness) where clocks
//! differ a lot and a write may have run on either of two nodes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use ferrotx_cluster::default_tables;
use ferrotx_exec::Co;
use ferrotx_redis_exec::{
    KvTable, RespClient, RespValue, SWEEP_INTERVAL_NS, SweepStats, encode_request, store_key,
    sweep_pass,
};
use ferrotx_resp::keys;
use ferrotx_store::{PartitionId, TableSpec};
use ferrotx_txn::coordinator::Coordinator;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::list_append::CLIENTS_PER_WORKER;
use super::resp::{certainly_failed, kv_table, replica_violation, session, show};
use super::resp_counter::disruptions;
use super::{Ticks, client_id, clients, copies, log_bound_violations};
use crate::NodeClock;
use crate::cluster::SimCluster;
use crate::run::{Checked, Scenario, digest_of};

/// Keys the clients use.
pub const KEYS: usize = 4;

/// Violations of one kind a check lists before it only counts them.
const LISTED_MAX: usize = 8;

/// Shortest and longest sweeper interval while the clients run (ns of the node's clock).
const BUSY_SWEEP_NS: std::ops::RangeInclusive<u64> = 1_000_000..=10_000_000;

/// Passes a sweeper makes after the clients finished, at most, looking for a clean one.
const SWEEPS_AFTER_MAX: u32 = 60;

/// How long no client may have started or finished an operation (ns of a sweeper's
/// clock) before the sweeper takes the clients still counted as running for gone (a crash
/// that never dropped them): longer than a command may take to answer.
const CLIENTS_STALLED_NS: u64 = 6_000_000_000;

/// A deadline in the check's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// No deadline: the value does not expire.
    Never,
    /// A deadline (Unix ms) known to lie in `[lo, hi]` (`hi` may be `u64::MAX`).
    Within(u64, u64),
}

/// The expiry a command gives a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// None (`SET k v`, `PERSIST`, `GETEX PERSIST`).
    Never,
    /// At this Unix time in ms (`PXAT`).
    At(u64),
    /// This many ms after the running node's "now" (`PX`, `PEXPIRE`, `EXPIRE`).
    In(u64),
}

/// What an operation does, with what its reply said (when it is ok).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Writes `value` (every `SET` form): `reported` is the `PEXPIRETIME` the same block
    /// answered; `watched`, for an `EXEC` after `WATCH`, what the watcher's `GET` read.
    Set {
        /// The value, unique in the run.
        value: u64,
        /// Its expiry.
        expiry: Expiry,
        /// `PEXPIRETIME` right after, in the same block.
        reported: Option<i64>,
        /// What the `GET` after `WATCH` read (`Some(None)`: nil).
        watched: Option<Option<u64>>,
    },
    /// `DEL`.
    Del,
    /// `GET` (plain or in a block): the value, and the `PTTL` of the same block.
    Get {
        /// The value read (`None`: nil).
        value: Option<u64>,
        /// `PTTL` in the same block.
        ttl: Option<i64>,
    },
    /// A plain `PTTL`.
    Pttl(i64),
    /// Changes the deadline of the key's value: `PEXPIRE`, `EXPIRE`, `PERSIST`, `GETEX`
    /// with an option.
    Expire {
        /// The deadline it gives.
        expiry: Expiry,
        /// The value the same command or block read (`GETEX`, or a `GET` before it):
        /// `Some(None)` is nil; `None`: not read.
        read: Option<Option<u64>>,
        /// Whether it changed the key (`1`), if the reply says.
        changed: Option<bool>,
        /// `PEXPIRETIME` right after, in the same block.
        reported: Option<i64>,
    },
}

/// What the client learned of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It took effect, with the replies recorded in its [`Kind`].
    Ok,
    /// It certainly took no effect.
    Failed(String),
    /// It may have taken effect (an "outcome unknown" error, or no reply).
    Unknown(String),
}

/// Wall clock readings (Unix ms): at invocation and completion (`u64::MAX`: no reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walls {
    /// At (or below) the invocation.
    pub inv: u64,
    /// At (or above) the completion.
    pub comp: u64,
}

/// One operation of the history, as the checker takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The client that ran it.
    pub client: u64,
    /// The key (index).
    pub key: usize,
    /// Tick of its invocation.
    pub start: u64,
    /// Tick of its completion; `u64::MAX` if no reply came.
    pub end: u64,
    /// The clock of the node that ran it (whichever of the possible ones).
    pub at: Walls,
    /// The clock of the key's primary (the sweeper's).
    pub primary: Walls,
    /// What it does and read.
    pub kind: Kind,
    /// Its outcome.
    pub outcome: Outcome,
}

impl Op {
    fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }

    /// A `SET` or `DEL` that replaces the value.
    fn supersedes(&self) -> bool {
        matches!(self.kind, Kind::Set { .. } | Kind::Del)
    }

    /// Whether it may have written the key (changed its value or deadline).
    fn may_write(&self) -> bool {
        match &self.kind {
            _ if self.failed() => false,
            Kind::Set { .. } | Kind::Del => true,
            Kind::Expire { changed, .. } => !(self.ok() && *changed == Some(false)),
            Kind::Get { .. } | Kind::Pttl(_) => false,
        }
    }

    /// What it read, if it is an ok read: `Some(None)` for nil.
    fn read(&self) -> Option<Option<u64>> {
        if !self.ok() {
            return None;
        }
        match &self.kind {
            Kind::Get { value, .. } => Some(*value),
            Kind::Expire { read, .. } => *read,
            _ => None,
        }
    }

    /// The deadline a command with `expiry` gave (`reported`: its `PEXPIRETIME`).
    fn deadline(&self, expiry: Expiry, reported: Option<i64>) -> Deadline {
        match (expiry, reported) {
            (Expiry::Never, _) => Deadline::Never,
            (Expiry::At(d), _) => Deadline::Within(d, d),
            (Expiry::In(_), Some(r)) if r > 0 && self.ok() => Deadline::Within(r as u64, r as u64),
            (Expiry::In(d), _) => Deadline::Within(
                self.at.inv.saturating_add(d),
                self.at.comp.saturating_add(d),
            ),
        }
    }
}

/// What the primary of a key holds at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    /// The value and its stored deadline, or `None`: absent.
    pub value: Option<(u64, Option<u64>)>,
    /// The primary's clock at the end (Unix ms).
    pub wall: u64,
    /// The start of the sweeper's last clean pass over the key's partition, by the
    /// primary's clock (`None`: none was clean).
    pub swept: Option<u64>,
}

/// Counts that say the run exercised expiry (for the seed tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpiryStats {
    /// Operations recorded.
    pub ops: u64,
    /// Reads (ok) that returned a value.
    pub values_read: u64,
    /// Reads (ok) that returned nil where the last write set a deadline that had passed
    /// by the reading node's clock: an expiry seen.
    pub expired_seen: u64,
    /// `EXEC`s after `WATCH` that failed (null).
    pub watch_failed: u64,
    /// Keys the sweepers deleted.
    pub swept: u64,
    /// Sweepers that made a clean pass after the clients finished.
    pub clean_sweepers: u64,
}

/// One operation as the client recorded it: the checker's [`Op`] without its walls, and
/// what gives them.
#[derive(Clone, Debug)]
struct Record {
    op: Op,
    /// The client's node.
    node: u16,
    /// The nodes that may have run it.
    runs_on: Vec<u16>,
    /// The nodes that may have been the key's primary meanwhile: the one the client's
    /// coordinator saw, or every node if its configuration changed during the operation.
    primaries: Vec<u16>,
    /// The client's node's clock at invocation and completion (ns).
    inv_ns: u64,
    comp_ns: Option<u64>,
}

/// What a sweeper did.
#[derive(Clone, Copy, Debug)]
struct SweeperRecord {
    node: u16,
    thread: u16,
    /// Start (its node's Unix ms) of its last clean pass after the clients finished.
    clean_ms: Option<u64>,
    deleted: u64,
}

/// What the clients and sweepers recorded.
#[derive(Debug, Default)]
struct ExpiryLog {
    records: Vec<Record>,
    sweepers: Vec<SweeperRecord>,
    /// Replies no correct front end sends.
    problems: Vec<String>,
}

/// Redis key expiry under clock drift.
pub struct RespExpiry {
    requests: usize,
    log: Rc<RefCell<ExpiryLog>>,
    /// The keys' names, chosen from the configuration when the clients start.
    keys: Vec<Vec<u8>>,
    stats: Cell<ExpiryStats>,
}

impl RespExpiry {
    /// Each client sends `requests` requests.
    pub fn new(requests: usize) -> Self {
        Self {
            requests,
            log: Rc::default(),
            keys: Vec::new(),
            stats: Cell::default(),
        }
    }

    /// What the run exercised (after [`Scenario::check`]).
    pub fn stats(&self) -> ExpiryStats {
        self.stats.get()
    }
}

/// The primary of `key` by the configuration.
fn primary_of(cluster: &SimCluster, kv: KvTable, key: &[u8]) -> (PartitionId, u16) {
    let partition = cluster.partition_of(kv.id, &store_key(key));
    let primary = cluster
        .config()
        .partitions()
        .replicas(partition)
        .nodes()
        .next()
        .expect("a partition has a primary");
    (partition, primary)
}

/// Four keys: two of one primary, the others of other primaries where there are any.
fn choose_keys(cluster: &SimCluster, kv: KvTable) -> Vec<Vec<u8>> {
    let name = |i: usize| format!("exp:{i}").into_bytes();
    let primary = |i: usize| primary_of(cluster, kv, &name(i)).1;
    let mut chosen = vec![0];
    let pick = |chosen: &[usize], want: &dyn Fn(usize) -> bool| {
        (1..1_000)
            .find(|i| !chosen.contains(i) && want(*i))
            .or_else(|| (1..).find(|i| !chosen.contains(i)))
            .expect("a name")
    };
    let first = primary(0);
    let second = pick(&chosen, &|i| primary(i) == first);
    chosen.push(second);
    let third = pick(&chosen, &|i| primary(i) != first);
    chosen.push(third);
    let taken = [first, primary(third)];
    let fourth = pick(&chosen, &|i| !taken.contains(&primary(i)));
    chosen.push(fourth);
    chosen.into_iter().map(name).collect()
}

/// Node `to`'s wall clock (Unix ms) when node `from`'s clock read `local_ns`: exact for
/// the node itself, otherwise `(lo, hi)` around the converted reading (±1 ms).
fn wall_of(clocks: &[NodeClock], kv: KvTable, from: u16, local_ns: u64, to: u16) -> (u64, u64) {
    if from == to {
        let ms = kv.unix_ms(local_ns);
        return (ms, ms);
    }
    let clock = |n: u16| clocks.get(usize::from(n)).copied().unwrap_or_default();
    let global = clock(from).global_ns(local_ns);
    let ms = kv.unix_ms(clock(to).local_ns(global));
    (ms.saturating_sub(1), ms + 1)
}

/// The walls of `nodes` over an operation the client's node `from` timed.
fn walls(
    clocks: &[NodeClock],
    kv: KvTable,
    from: u16,
    inv_ns: u64,
    comp_ns: Option<u64>,
    nodes: &[u16],
) -> Walls {
    let inv = nodes
        .iter()
        .map(|&n| wall_of(clocks, kv, from, inv_ns, n).0)
        .min()
        .unwrap_or(0);
    let comp = comp_ns.map_or(u64::MAX, |c| {
        nodes
            .iter()
            .map(|&n| wall_of(clocks, kv, from, c, n).1)
            .max()
            .unwrap_or(u64::MAX)
    });
    Walls { inv, comp }
}

/// A value's bytes (hex of its id).
fn value_bytes(value: u64) -> Vec<u8> {
    format!("{value:x}").into_bytes()
}

/// A value read, as its id: `Ok(None)` for nil.
fn parse_value(reply: &RespValue) -> Result<Option<u64>, String> {
    match reply {
        RespValue::Null => Ok(None),
        RespValue::Bulk(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .map(Some)
            .ok_or_else(|| format!("read the value {:?}", show(b))),
        other => Err(format!("a read answered {other:?}")),
    }
}

fn integer(reply: &RespValue) -> Result<i64, String> {
    match reply {
        RespValue::Integer(i) => Ok(*i),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

/// The outcome an error reply gives.
fn error_outcome(error: &[u8]) -> Outcome {
    if certainly_failed(error) || error.starts_with(b"EXECABORT") {
        Outcome::Failed(show(error))
    } else {
        Outcome::Unknown(show(error))
    }
}

/// A `MULTI` block of `commands` commands: its results, or the outcome that ended it
/// (`watched`: a null `EXEC` is a failure, not a problem).
fn block_results(
    replies: &[RespValue],
    commands: usize,
    watched: bool,
) -> Result<Result<Vec<RespValue>, Outcome>, String> {
    let queued = replies.len() == commands + 2
        && replies[0] == RespValue::ok()
        && replies[1..=commands]
            .iter()
            .all(|r| *r == RespValue::simple("QUEUED"));
    if !queued {
        return Err(format!("a MULTI block got the replies {replies:?}"));
    }
    match &replies[commands + 1] {
        RespValue::Array(results) if results.len() == commands => Ok(Ok(results.clone())),
        RespValue::Error(e) => Ok(Err(error_outcome(e))),
        RespValue::NullArray | RespValue::Null if watched => Ok(Err(Outcome::Failed(
            "null EXEC: a watched key changed".into(),
        ))),
        other => Err(format!("EXEC answered {other:?}")),
    }
}

/// One request a client sends.
#[derive(Clone, Copy, Debug)]
enum Request {
    SetAt(usize, u64),
    SetIn(usize, u64),
    SetInTimed(usize, u64),
    SetPlain(usize),
    Get(usize),
    GetTtl(usize),
    Pttl(usize),
    GetTwo(usize, usize),
    ExpireTimed(usize, u64),
    Expire(usize, u64, bool),
    PersistRead(usize),
    Persist(usize),
    GetEx(usize, Expiry),
    Del(usize),
    SetTwo(usize, u64, usize, u64),
    SetPipelined(usize, u64, usize, u64),
}

/// Takes a client off the count of those running when dropped armed (by a crash, before
/// it reached [`super::resp::finish_client`], which counts it itself).
struct Leaving(Rc<Cell<usize>>, bool);

impl Drop for Leaving {
    fn drop(&mut self) {
        if self.1 {
            self.0.set(self.0.get().saturating_sub(1));
        }
    }
}

/// What one client coroutine needs.
struct Client {
    id: u64,
    node: u16,
    co: Co,
    coordinator: Rc<Coordinator>,
    client: RespClient,
    kv: KvTable,
    keys: Rc<[Vec<u8>]>,
    clocks: Rc<[NodeClock]>,
    log: Rc<RefCell<ExpiryLog>>,
    ticks: Ticks,
    /// The latest deadline any client set (Unix ms, as far as it can tell).
    horizon: Rc<Cell<u64>>,
    next_value: u64,
}

impl Client {
    fn problem(&self, what: String) {
        self.log
            .borrow_mut()
            .problems
            .push(format!("client {:#x}: {what}", self.id));
    }

    fn fresh_value(&mut self) -> u64 {
        self.next_value += 1;
        (self.id << 16) | self.next_value
    }

    fn primary(&self, key: usize) -> u16 {
        let partition = self
            .coordinator
            .partition_of(self.kv.id, &store_key(&self.keys[key]));
        self.coordinator.primary_of_partition(partition)
    }

    /// The nodes that may run a plan: the client's for reads; for writes, the keys'
    /// primary if they share one (it runs shipped plans) and the client's node (where a
    /// plan the primary sent back runs).
    fn runs_on(&self, writes: bool, keys: &[usize]) -> Vec<u16> {
        let mut nodes = vec![self.node];
        if writes {
            let first = self.primary(keys[0]);
            if keys.iter().all(|&k| self.primary(k) == first) && first != self.node {
                nodes.push(first);
            }
        }
        nodes
    }

    /// The wall clock (Unix ms) now.
    fn now_ms(&self) -> u64 {
        self.kv.now_ms(&self.co)
    }

    /// Sends `bytes` as one request of operations `ops` ((key, kind) in reply order, run on
    /// `runs_on`); returns the replies and the indices of the records, opened before
    /// sending and completed (times) after.
    async fn send(
        &mut self,
        bytes: &[u8],
        ops: Vec<(usize, Kind)>,
        runs_on: Vec<u16>,
    ) -> (Vec<RespValue>, Vec<usize>) {
        let start = self.ticks.tick();
        let inv_ns = self.co.now_ns();
        let view = self.coordinator.view();
        let indices = {
            let mut log = self.log.borrow_mut();
            let first = log.records.len();
            for (key, kind) in ops {
                let primary = self.primary(key);
                log.records.push(Record {
                    op: Op {
                        client: self.id,
                        key,
                        start,
                        end: u64::MAX,
                        at: Walls { inv: 0, comp: 0 },
                        primary: Walls { inv: 0, comp: 0 },
                        kind,
                        outcome: Outcome::Unknown("no reply".into()),
                    },
                    node: self.node,
                    runs_on: runs_on.clone(),
                    primaries: vec![primary],
                    inv_ns,
                    comp_ns: None,
                });
            }
            (first..log.records.len()).collect::<Vec<_>>()
        };
        let replies = self
            .client
            .request(&self.co, &self.coordinator, bytes)
            .await;
        let end = self.ticks.tick();
        let comp_ns = self.co.now_ns();
        // A reconfiguration meanwhile may have moved the primary anywhere (membership).
        let moved = self.coordinator.view() != view;
        let every: Vec<u16> = (0..self.clocks.len() as u16).collect();
        let mut log = self.log.borrow_mut();
        for &i in &indices {
            let record = &mut log.records[i];
            record.op.end = end;
            record.comp_ns = Some(comp_ns);
            if moved {
                record.runs_on.clone_from(&every);
                record.primaries.clone_from(&every);
            }
        }
        (replies, indices)
    }

    /// Sets the outcome of record `i` (and its kind's replies); an unknown outcome has no
    /// completion.
    fn finish(&self, i: usize, outcome: Outcome, kind: Option<Kind>) {
        let mut log = self.log.borrow_mut();
        let record = &mut log.records[i];
        if let Some(kind) = kind {
            record.op.kind = kind;
        }
        if matches!(outcome, Outcome::Unknown(_)) {
            record.op.end = u64::MAX;
            record.comp_ns = None;
        }
        record.op.outcome = outcome;
    }

    /// Notes the latest deadline a write of record `i` may have set, for the sweepers.
    fn extend_horizon(&self, i: usize) {
        let log = self.log.borrow();
        let record = &log.records[i];
        let (expiry, reported) = match &record.op.kind {
            Kind::Set {
                expiry, reported, ..
            }
            | Kind::Expire {
                expiry, reported, ..
            } => (*expiry, *reported),
            _ => return,
        };
        let latest = match (expiry, reported) {
            (Expiry::Never, _) => return,
            (Expiry::At(d), _) => d,
            (Expiry::In(_), Some(r)) if r > 0 => r as u64,
            (Expiry::In(d), _) => {
                let comp = record.comp_ns.unwrap_or(record.inv_ns);
                let walls = walls(
                    &self.clocks,
                    self.kv,
                    record.node,
                    record.inv_ns,
                    Some(comp),
                    &record.runs_on,
                );
                walls.comp.saturating_add(d)
            }
        };
        self.horizon.set(self.horizon.get().max(latest));
    }

    /// `SET key value` with the options `options` (giving it `expiry`), a fresh value,
    /// recorded and checked like any plain command.
    async fn set(&mut self, k: usize, options: &[&[u8]], expiry: Expiry) {
        let v = self.fresh_value();
        let (name, value) = (self.keys[k].clone(), value_bytes(v));
        let mut args: Vec<&[u8]> = vec![b"SET", &name, &value];
        args.extend_from_slice(options);
        let mut bytes = Vec::new();
        encode_request(&args, &mut bytes);
        let kind = Kind::Set {
            value: v,
            expiry,
            reported: None,
            watched: None,
        };
        let (replies, ix) = self
            .send(&bytes, vec![(k, kind.clone())], self.runs_on(true, &[k]))
            .await;
        self.plain(ix[0], replies.first(), |r| ok_reply(r, kind));
    }

    /// Sets the outcome of a plain command's record from its reply: `parse` turns an
    /// answer into the kind with its replies.
    fn plain(
        &self,
        i: usize,
        reply: Option<&RespValue>,
        parse: impl FnOnce(&RespValue) -> Result<Kind, String>,
    ) {
        match reply {
            Some(RespValue::Error(e)) => self.finish(i, error_outcome(e), None),
            Some(reply) => match parse(reply) {
                Ok(kind) => {
                    self.finish(i, Outcome::Ok, Some(kind));
                    self.extend_horizon(i);
                }
                Err(problem) => {
                    self.problem(problem);
                    self.finish(i, Outcome::Unknown("bad reply".into()), None);
                }
            },
            None => {
                self.problem("a command got no reply".into());
                self.finish(i, Outcome::Unknown("no reply".into()), None);
            }
        }
    }

    /// Sets the outcome of a block's records: `parse` turns the results into the kinds.
    fn block(
        &self,
        indices: &[usize],
        replies: &[RespValue],
        commands: usize,
        watched: bool,
        parse: impl FnOnce(&[RespValue]) -> Result<Vec<Kind>, String>,
    ) {
        let outcome = match block_results(replies, commands, watched) {
            Ok(Ok(results)) => match parse(&results) {
                Ok(kinds) => {
                    for (&i, kind) in indices.iter().zip(kinds) {
                        self.finish(i, Outcome::Ok, Some(kind));
                        self.extend_horizon(i);
                    }
                    return;
                }
                Err(problem) => {
                    self.problem(format!("{problem} (results {results:?})"));
                    Outcome::Unknown("bad reply".into())
                }
            },
            Ok(Err(outcome)) => outcome,
            Err(problem) => {
                self.problem(problem);
                Outcome::Unknown("bad reply".into())
            }
        };
        for &i in indices {
            self.finish(i, outcome.clone(), None);
        }
    }

    async fn run(&mut self, request: Request) {
        let keys = self.keys.clone();
        let name = |k: usize| keys[k].clone();
        let mut bytes = Vec::new();
        match request {
            Request::SetAt(k, at) => {
                let at_text = at.to_string();
                self.set(k, &[b"PXAT", at_text.as_bytes()], Expiry::At(at))
                    .await;
            }
            Request::SetIn(k, d) => {
                let d_text = d.to_string();
                self.set(k, &[b"PX", d_text.as_bytes()], Expiry::In(d))
                    .await;
            }
            Request::SetPlain(k) => self.set(k, &[], Expiry::Never).await,
            Request::SetInTimed(k, d) => {
                let v = self.fresh_value();
                let ds = d.to_string();
                encode_request(&["MULTI"], &mut bytes);
                encode_request(
                    &[&b"SET"[..], &name(k), &value_bytes(v), b"PX", ds.as_bytes()],
                    &mut bytes,
                );
                encode_request(&[&b"PEXPIRETIME"[..], &name(k)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let kind = Kind::Set {
                    value: v,
                    expiry: Expiry::In(d),
                    reported: None,
                    watched: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind)], self.runs_on(true, &[k]))
                    .await;
                self.block(&ix, &replies, 2, false, |results| {
                    expect_ok(&results[0])?;
                    Ok(vec![Kind::Set {
                        value: v,
                        expiry: Expiry::In(d),
                        reported: Some(integer(&results[1])?),
                        watched: None,
                    }])
                });
            }
            Request::SetTwo(k, d, k2, d2) => {
                let (v, v2) = (self.fresh_value(), self.fresh_value());
                let (ds, ds2) = (d.to_string(), d2.to_string());
                encode_request(&["MULTI"], &mut bytes);
                encode_request(
                    &[&b"SET"[..], &name(k), &value_bytes(v), b"PX", ds.as_bytes()],
                    &mut bytes,
                );
                encode_request(
                    &[
                        &b"SET"[..],
                        &name(k2),
                        &value_bytes(v2),
                        b"PX",
                        ds2.as_bytes(),
                    ],
                    &mut bytes,
                );
                encode_request(&[&b"PEXPIRETIME"[..], &name(k)], &mut bytes);
                encode_request(&[&b"PEXPIRETIME"[..], &name(k2)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let set = |value, d, reported| Kind::Set {
                    value,
                    expiry: Expiry::In(d),
                    reported,
                    watched: None,
                };
                let (replies, ix) = self
                    .send(
                        &bytes,
                        vec![(k, set(v, d, None)), (k2, set(v2, d2, None))],
                        self.runs_on(true, &[k, k2]),
                    )
                    .await;
                self.block(&ix, &replies, 4, false, |results| {
                    expect_ok(&results[0])?;
                    expect_ok(&results[1])?;
                    Ok(vec![
                        set(v, d, Some(integer(&results[2])?)),
                        set(v2, d2, Some(integer(&results[3])?)),
                    ])
                });
            }
            Request::SetPipelined(k, at, k2, at2) => {
                let (v, v2) = (self.fresh_value(), self.fresh_value());
                let (ats, ats2) = (at.to_string(), at2.to_string());
                encode_request(
                    &[
                        &b"SET"[..],
                        &name(k),
                        &value_bytes(v),
                        b"PXAT",
                        ats.as_bytes(),
                    ],
                    &mut bytes,
                );
                encode_request(
                    &[
                        &b"SET"[..],
                        &name(k2),
                        &value_bytes(v2),
                        b"PXAT",
                        ats2.as_bytes(),
                    ],
                    &mut bytes,
                );
                let set = |value, at| Kind::Set {
                    value,
                    expiry: Expiry::At(at),
                    reported: None,
                    watched: None,
                };
                let kinds = [set(v, at), set(v2, at2)];
                // One send: the session runs them as one plan.
                let (replies, ix) = self
                    .send(
                        &bytes,
                        vec![(k, kinds[0].clone()), (k2, kinds[1].clone())],
                        self.runs_on(true, &[k, k2]),
                    )
                    .await;
                if replies.len() != 2 {
                    self.problem(format!("2 pipelined SETs got the replies {replies:?}"));
                }
                for ((i, kind), reply) in ix.into_iter().zip(kinds).zip(&replies) {
                    self.plain(i, Some(reply), |r| ok_reply(r, kind));
                }
            }
            Request::Get(k) => {
                encode_request(&[&b"GET"[..], &name(k)], &mut bytes);
                let kind = Kind::Get {
                    value: None,
                    ttl: None,
                };
                let (replies, ix) = self.send(&bytes, vec![(k, kind)], vec![self.node]).await;
                self.plain(ix[0], replies.first(), |r| {
                    Ok(Kind::Get {
                        value: parse_value(r)?,
                        ttl: None,
                    })
                });
            }
            Request::GetTtl(k) => {
                encode_request(&["MULTI"], &mut bytes);
                encode_request(&[&b"GET"[..], &name(k)], &mut bytes);
                encode_request(&[&b"PTTL"[..], &name(k)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let kind = Kind::Get {
                    value: None,
                    ttl: None,
                };
                let (replies, ix) = self.send(&bytes, vec![(k, kind)], vec![self.node]).await;
                self.block(&ix, &replies, 2, false, |results| {
                    Ok(vec![Kind::Get {
                        value: parse_value(&results[0])?,
                        ttl: Some(integer(&results[1])?),
                    }])
                });
            }
            Request::Pttl(k) => {
                encode_request(&[&b"PTTL"[..], &name(k)], &mut bytes);
                let (replies, ix) = self
                    .send(&bytes, vec![(k, Kind::Pttl(0))], vec![self.node])
                    .await;
                self.plain(ix[0], replies.first(), |r| Ok(Kind::Pttl(integer(r)?)));
            }
            Request::GetTwo(k, k2) => {
                encode_request(&["MULTI"], &mut bytes);
                encode_request(&[&b"GET"[..], &name(k)], &mut bytes);
                encode_request(&[&b"GET"[..], &name(k2)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let get = Kind::Get {
                    value: None,
                    ttl: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, get.clone()), (k2, get)], vec![self.node])
                    .await;
                self.block(&ix, &replies, 2, false, |results| {
                    results
                        .iter()
                        .map(|r| {
                            Ok(Kind::Get {
                                value: parse_value(r)?,
                                ttl: None,
                            })
                        })
                        .collect()
                });
            }
            Request::ExpireTimed(k, d) => {
                let ds = d.to_string();
                encode_request(&["MULTI"], &mut bytes);
                encode_request(&[&b"GET"[..], &name(k)], &mut bytes);
                encode_request(&[&b"PEXPIRE"[..], &name(k), ds.as_bytes()], &mut bytes);
                encode_request(&[&b"PEXPIRETIME"[..], &name(k)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let kind = Kind::Expire {
                    expiry: Expiry::In(d),
                    read: None,
                    changed: None,
                    reported: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind)], self.runs_on(true, &[k]))
                    .await;
                self.block(&ix, &replies, 3, false, |results| {
                    Ok(vec![Kind::Expire {
                        expiry: Expiry::In(d),
                        read: Some(parse_value(&results[0])?),
                        changed: Some(flag(&results[1])?),
                        reported: Some(integer(&results[2])?),
                    }])
                });
            }
            Request::Expire(k, d, seconds) => {
                let (command, amount) = if seconds {
                    (&b"EXPIRE"[..], (d / 1000).to_string())
                } else {
                    (&b"PEXPIRE"[..], d.to_string())
                };
                encode_request(&[command, &name(k), amount.as_bytes()], &mut bytes);
                let kind = |changed| Kind::Expire {
                    expiry: Expiry::In(d),
                    read: None,
                    changed,
                    reported: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind(None))], self.runs_on(true, &[k]))
                    .await;
                self.plain(ix[0], replies.first(), |r| Ok(kind(Some(flag(r)?))));
            }
            Request::PersistRead(k) => {
                encode_request(&["MULTI"], &mut bytes);
                encode_request(&[&b"GET"[..], &name(k)], &mut bytes);
                encode_request(&[&b"PERSIST"[..], &name(k)], &mut bytes);
                encode_request(&["EXEC"], &mut bytes);
                let kind = Kind::Expire {
                    expiry: Expiry::Never,
                    read: None,
                    changed: None,
                    reported: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind)], self.runs_on(true, &[k]))
                    .await;
                self.block(&ix, &replies, 2, false, |results| {
                    Ok(vec![Kind::Expire {
                        expiry: Expiry::Never,
                        read: Some(parse_value(&results[0])?),
                        changed: Some(flag(&results[1])?),
                        reported: None,
                    }])
                });
            }
            Request::Persist(k) => {
                encode_request(&[&b"PERSIST"[..], &name(k)], &mut bytes);
                let kind = |changed| Kind::Expire {
                    expiry: Expiry::Never,
                    read: None,
                    changed,
                    reported: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind(None))], self.runs_on(true, &[k]))
                    .await;
                self.plain(ix[0], replies.first(), |r| Ok(kind(Some(flag(r)?))));
            }
            Request::GetEx(k, expiry) => {
                let option: Vec<Vec<u8>> = match expiry {
                    Expiry::Never => vec![b"PERSIST".to_vec()],
                    Expiry::At(at) => vec![b"PXAT".to_vec(), at.to_string().into_bytes()],
                    Expiry::In(d) => vec![b"PX".to_vec(), d.to_string().into_bytes()],
                };
                let mut args = vec![b"GETEX".to_vec(), name(k)];
                args.extend(option);
                encode_request(&args, &mut bytes);
                let kind = |read: Option<Option<u64>>| Kind::Expire {
                    expiry,
                    read,
                    changed: read.map(|r| r.is_some()),
                    reported: None,
                };
                let (replies, ix) = self
                    .send(&bytes, vec![(k, kind(None))], self.runs_on(true, &[k]))
                    .await;
                self.plain(ix[0], replies.first(), |r| Ok(kind(Some(parse_value(r)?))));
            }
            Request::Del(k) => {
                encode_request(&[&b"DEL"[..], &name(k)], &mut bytes);
                let (replies, ix) = self
                    .send(&bytes, vec![(k, Kind::Del)], self.runs_on(true, &[k]))
                    .await;
                self.plain(ix[0], replies.first(), |r| match r {
                    RespValue::Integer(0 | 1) => Ok(Kind::Del),
                    other => Err(format!("DEL answered {other:?}")),
                });
            }
        }
    }

    /// `WATCH k`, `GET k`, maybe a pause, then `MULTI SET k v PXAT at EXEC`.
    async fn watched_set(&mut self, k: usize, at: u64, pause_ns: u64) {
        let name = self.keys[k].clone();
        let watch = self
            .client
            .command(&self.co, &self.coordinator, &[&b"WATCH"[..], &name])
            .await;
        if watch != RespValue::ok() && !watch.is_error() {
            self.problem(format!("WATCH answered {watch:?}"));
        }
        let mut bytes = Vec::new();
        encode_request(&[&b"GET"[..], &name], &mut bytes);
        let get = Kind::Get {
            value: None,
            ttl: None,
        };
        let (replies, ix) = self.send(&bytes, vec![(k, get)], vec![self.node]).await;
        let mut watched = None;
        self.plain(ix[0], replies.first(), |r| {
            let value = parse_value(r)?;
            watched = Some(value);
            Ok(Kind::Get { value, ttl: None })
        });
        if watch != RespValue::ok() {
            watched = None;
        }
        if pause_ns > 0 {
            self.co.sleep_until(self.co.now_ns() + pause_ns).await;
        }
        let v = self.fresh_value();
        let ats = at.to_string();
        let mut bytes = Vec::new();
        encode_request(&["MULTI"], &mut bytes);
        encode_request(
            &[&b"SET"[..], &name, &value_bytes(v), b"PXAT", ats.as_bytes()],
            &mut bytes,
        );
        encode_request(&["EXEC"], &mut bytes);
        let kind = Kind::Set {
            value: v,
            expiry: Expiry::At(at),
            reported: None,
            watched,
        };
        let (replies, ix) = self
            .send(&bytes, vec![(k, kind.clone())], self.runs_on(true, &[k]))
            .await;
        self.block(&ix, &replies, 1, true, |results| {
            expect_ok(&results[0])?;
            Ok(vec![kind])
        });
    }
}

fn ok_reply(reply: &RespValue, kind: Kind) -> Result<Kind, String> {
    expect_ok(reply).map(|()| kind)
}

fn expect_ok(reply: &RespValue) -> Result<(), String> {
    if *reply == RespValue::ok() {
        Ok(())
    } else {
        Err(format!("SET answered {reply:?}"))
    }
}

/// A 0/1 integer reply.
fn flag(reply: &RespValue) -> Result<bool, String> {
    match reply {
        RespValue::Integer(0) => Ok(false),
        RespValue::Integer(1) => Ok(true),
        other => Err(format!("expected 0 or 1, got {other:?}")),
    }
}

impl Scenario for RespExpiry {
    fn name(&self) -> &'static str {
        "resp-expiry"
    }

    fn schema(&self) -> Vec<TableSpec> {
        default_tables()
    }

    fn load(&self, _cluster: &SimCluster) {
        // Every key starts absent.
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let kv = kv_table(cluster);
        self.keys = choose_keys(cluster, kv);
        let keys: Rc<[Vec<u8>]> = self.keys.clone().into();
        let clocks: Rc<[NodeClock]> = (0..cluster.node_count())
            .map(|n| cluster.sim.clock(n))
            .collect();
        let ticks = Ticks::default();
        let horizon = Rc::new(Cell::new(0));
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        let session = session();
        let all = clients(cluster, CLIENTS_PER_WORKER);
        let running = Rc::new(Cell::new(all.len()));
        for (node, thread, slot) in all {
            let id = client_id(node, thread, slot);
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ id.rotate_left(29) ^ 0xe8_b1e5);
            let client = RespClient::for_config(cluster.config(), id, session.clone())
                .expect("the scenario's schema has the kv table");
            let (log, ticks, keys, clocks) = (
                self.log.clone(),
                ticks.clone(),
                keys.clone(),
                clocks.clone(),
            );
            let (horizon, running, all_nodes) =
                (horizon.clone(), running.clone(), all_nodes.clone());
            let requests = self.requests;
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                // A client dropped by a crash counts as finished for the others.
                let mut leaving = Leaving(running.clone(), true);
                let mut c = Client {
                    id,
                    node,
                    co,
                    coordinator,
                    client,
                    kv,
                    keys,
                    clocks,
                    log,
                    ticks,
                    horizon,
                    next_value: 0,
                };
                for _ in 0..requests {
                    if c.client.is_closed() {
                        c.problem("the connection closed".into());
                        break;
                    }
                    let k = rng.random_range(0..KEYS);
                    let k2 = (k + rng.random_range(1..KEYS)) % KEYS;
                    let mut short = || rng.random_range(1..=40u64);
                    let (d, d2) = (short(), short());
                    let now = c.now_ms();
                    let mut deadline = || {
                        now + if rng.random_bool(0.8) {
                            rng.random_range(1..=40)
                        } else {
                            rng.random_range(0..=1_500)
                        }
                    };
                    let (at, at2) = (deadline(), deadline());
                    let request = match rng.random_range(0..100) {
                        0..20 => Request::SetAt(k, at),
                        20..28 => Request::SetIn(k, d),
                        28..36 => Request::SetInTimed(k, d),
                        36..41 => Request::SetPlain(k),
                        41..57 => Request::Get(k),
                        57..63 => Request::GetTtl(k),
                        63..65 => Request::Pttl(k),
                        65..70 => Request::GetTwo(k, k2),
                        70..74 => Request::ExpireTimed(k, d),
                        74..76 => Request::Expire(k, d, false),
                        76 => Request::Expire(k, 1_000, true),
                        77..80 => Request::PersistRead(k),
                        80 => Request::Persist(k),
                        81..85 => Request::GetEx(
                            k,
                            match rng.random_range(0..4) {
                                0 => Expiry::Never,
                                1 => Expiry::At(at),
                                _ => Expiry::In(d),
                            },
                        ),
                        85..88 => Request::Del(k),
                        88..91 => Request::SetTwo(k, d, k2, d2),
                        91..94 => Request::SetPipelined(k, at, k2, at2),
                        _ => {
                            let pause = if rng.random_bool(0.4) {
                                rng.random_range(1..=8) * 1_000_000
                            } else {
                                0
                            };
                            c.watched_set(k, at, pause).await;
                            continue;
                        }
                    };
                    c.run(request).await;
                }
                leaving.1 = false;
                super::resp::finish_client(&c.co, &c.coordinator, &running, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
        // A sweeper on every worker, as the server runs one: often while the clients run,
        // then until a clean pass after every deadline the clients set.
        let partitions = cluster.config().partitions().partition_count();
        let threads = cluster.config().threads_per_node();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5_7ee9);
        let busy_ns = rng.random_range(BUSY_SWEEP_NS);
        for node in 0..cluster.node_count() {
            for thread in 0..threads {
                let (log, running, horizon, all_nodes, ticks) = (
                    self.log.clone(),
                    running.clone(),
                    horizon.clone(),
                    all_nodes.clone(),
                    ticks.clone(),
                );
                let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                    let stats = SweepStats::default();
                    let mut cursors = vec![0u64; partitions as usize];
                    let mut after = 0;
                    let (mut seen, mut seen_ns) = (ticks.0.get(), co.now_ns());
                    let clean_ms = loop {
                        if ticks.0.get() != seen {
                            (seen, seen_ns) = (ticks.0.get(), co.now_ns());
                        }
                        let stalled = co.now_ns().saturating_sub(seen_ns) > CLIENTS_STALLED_NS;
                        let done = running.get() == 0 || stalled;
                        let start_ms = kv.now_ms(&co);
                        let failed = stats.failed.get();
                        let from_start = cursors.iter().all(|&c| c == 0);
                        sweep_pass(&co, &coordinator, kv, threads, &mut cursors, &stats).await;
                        let clean = from_start
                            && cursors.iter().all(|&c| c == 0)
                            && stats.failed.get() == failed;
                        if done {
                            after += 1;
                            if clean && start_ms >= horizon.get() {
                                break Some(start_ms);
                            }
                            if after >= SWEEPS_AFTER_MAX {
                                break None;
                            }
                        }
                        let interval = if done { SWEEP_INTERVAL_NS } else { busy_ns };
                        co.sleep_until(co.now_ns() + interval).await;
                    };
                    log.borrow_mut().sweepers.push(SweeperRecord {
                        node,
                        thread,
                        clean_ms,
                        deleted: stats.deleted.get(),
                    });
                    // Its deletes' truncation mark, so that the backups apply them.
                    coordinator.flush_truncation(&co, &all_nodes).await;
                });
                assert!(spawned, "a coroutine slot for every sweeper");
            }
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let kv = kv_table(cluster);
        let log = self.log.borrow();
        let clocks: Vec<NodeClock> = (0..cluster.node_count())
            .map(|n| cluster.sim.clock(n))
            .collect();
        let ops: Vec<Op> = log
            .records
            .iter()
            .map(|r| Op {
                at: walls(&clocks, kv, r.node, r.inv_ns, r.comp_ns, &r.runs_on),
                primary: walls(&clocks, kv, r.node, r.inv_ns, r.comp_ns, &r.primaries),
                ..r.op.clone()
            })
            .collect();
        let mut violations = log.problems.clone();
        violations.extend(log_bound_violations(
            cluster,
            cluster.options().log_records_max,
        ));
        let threads = cluster.config().threads_per_node();
        let all_finished = cluster.coroutines_live() == 0;
        let mut stats = ExpiryStats {
            ops: ops.len() as u64,
            swept: log.sweepers.iter().map(|s| s.deleted).sum(),
            clean_sweepers: log.sweepers.iter().filter(|s| s.clean_ms.is_some()).count() as u64,
            ..ExpiryStats::default()
        };
        // With membership a sweeper may keep finding a partition being recovered.
        if all_finished && cluster.membership.is_none() {
            for s in log.sweepers.iter().filter(|s| s.clean_ms.is_none()) {
                violations.push(format!(
                    "the sweeper of worker {}.{} made no clean pass after the clients finished",
                    s.node, s.thread
                ));
            }
        }
        let now = cluster.sim.now_ns();
        for (key, name) in self.keys.iter().enumerate() {
            violations.extend(replica_violation(cluster, kv, name));
            let copies = copies(cluster, kv.id, &store_key(name));
            let final_state = match copies.iter().find(|c| c.primary) {
                None => None,
                Some(primary) => {
                    let node = primary.node;
                    let wall = kv.unix_ms(cluster.sim.clock(node).local_ns(now));
                    let (partition, _) = primary_of(cluster, kv, name);
                    let sweeper =
                        u16::try_from(partition.0 % u32::from(threads.max(1))).expect("a thread");
                    // With membership a partition being recovered answers a sweeper's
                    // scan with an empty page, which looks like a whole one: no claim.
                    let swept = log
                        .sweepers
                        .iter()
                        .find(|s| s.node == node && s.thread == sweeper)
                        .and_then(|s| s.clean_ms)
                        .filter(|_| cluster.membership.is_none());
                    let value = match &primary.value {
                        None => Some(None),
                        Some(stored) => match keys::decode(stored) {
                            Ok(entry) if entry.key == name.as_slice() => {
                                match parse_value(&RespValue::Bulk(entry.value.to_vec())) {
                                    Ok(Some(v)) => Some(Some((v, entry.expires_at_ms))),
                                    _ => {
                                        violations.push(format!(
                                            "{}: the final value {:?}",
                                            show(name),
                                            show(entry.value)
                                        ));
                                        None
                                    }
                                }
                            }
                            Ok(entry) => {
                                violations.push(format!(
                                    "{}: the stored value carries the key {}",
                                    show(name),
                                    show(entry.key)
                                ));
                                None
                            }
                            Err(error) => {
                                violations.push(format!("{}: {error}", show(name)));
                                None
                            }
                        },
                    };
                    value.map(|value| Final { value, wall, swept })
                }
            };
            let key_ops: Vec<&Op> = ops.iter().filter(|op| op.key == key).collect();
            let (found, key_stats) = check_key(&key_ops, final_state.as_ref());
            violations.extend(found.into_iter().map(|v| format!("{}: {v}", show(name))));
            stats.values_read += key_stats.values_read;
            stats.expired_seen += key_stats.expired_seen;
        }
        stats.watch_failed = ops
            .iter()
            .filter(|op| matches!(&op.outcome, Outcome::Failed(e) if e.starts_with("null EXEC")))
            .count() as u64;
        violations.extend(contention_violations(&ops, &disruptions(cluster)));
        self.stats.set(stats);
        let count = |f: fn(&Outcome) -> bool| ops.iter().filter(|op| f(&op.outcome)).count() as u64;
        Checked {
            committed: count(|o| *o == Outcome::Ok),
            aborted: count(|o| matches!(o, Outcome::Failed(_))),
            indeterminate: count(|o| matches!(o, Outcome::Unknown(_))),
            violations,
            history_digest: digest_of(&(&log.records, &log.sweepers)),
        }
    }
}

/// Every `-TRYAGAIN` of a run without `disruptions`: a client failed for contention
/// alone.
pub fn contention_violations(ops: &[Op], disruptions: &[String]) -> Vec<String> {
    super::resp_counter::tryagain_violations(
        ops,
        disruptions,
        |op| matches!(&op.outcome, Outcome::Failed(e) if e.starts_with("TRYAGAIN")),
        |op| {
            format!(
                "client {:#x}: {:?} of key {}: {:?}",
                op.client, op.kind, op.key, op.outcome
            )
        },
    )
}

/// Counts of one key's check.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyStats {
    /// Reads that returned a value.
    pub values_read: u64,
    /// Nil reads after a deadline passed.
    pub expired_seen: u64,
}

/// Pushes `what` unless `LISTED_MAX` violations are listed already (then counts it).
fn note(out: &mut Vec<String>, counted: &mut usize, what: impl FnOnce() -> String) {
    *counted += 1;
    if *counted <= LISTED_MAX {
        out.push(what());
    }
}

/// Whether every deadline of `deadlines` is at or before `now` (Unix ms): the value had
/// certainly expired at `now`.
fn expired_by(deadlines: &[Deadline], now: u64) -> bool {
    deadlines
        .iter()
        .all(|d| matches!(d, Deadline::Within(_, hi) if *hi <= now))
}

/// One key's history, indexed for the checks.
struct KeyHistory<'a> {
    ops: &'a [&'a Op],
    /// The `SET` of each value, by value.
    writes: BTreeMap<u64, usize>,
}

impl<'a> KeyHistory<'a> {
    fn new(ops: &'a [&'a Op]) -> Self {
        let writes = ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match op.kind {
                Kind::Set { value, .. } => Some((value, i)),
                _ => None,
            })
            .collect();
        Self { ops, writes }
    }

    /// The deadlines value `v` (written by op `w`) may have had for an operation that
    /// completed at tick `before`: its `SET`'s, and those of the changes invoked before
    /// then that may have applied to it (not `exclude`'s).
    fn deadlines(&self, w: usize, before: u64, exclude: Option<usize>) -> Vec<Deadline> {
        let write = self.ops[w];
        let Kind::Set {
            value,
            expiry,
            reported,
            ..
        } = write.kind
        else {
            return Vec::new();
        };
        let mut out = vec![write.deadline(expiry, reported)];
        for (i, m) in self.ops.iter().enumerate() {
            let Kind::Expire {
                expiry,
                read,
                changed,
                reported,
            } = m.kind
            else {
                continue;
            };
            if Some(i) == exclude || m.failed() || m.start >= before {
                continue;
            }
            let applies = match (&m.outcome, read, changed) {
                // It read the value in the same transaction: exactly known.
                (Outcome::Ok, Some(read), Some(true)) => read == Some(value),
                (Outcome::Ok, Some(_), _) | (Outcome::Ok, None, Some(false) | None) => false,
                // A plain change: whatever value the key held when it ran.
                (Outcome::Ok, None, Some(true)) => write.start < m.end,
                // Unknown: it may have run at any time after its invocation.
                _ => true,
            };
            if applies {
                out.push(m.deadline(expiry, reported));
            }
        }
        out
    }

    /// What a read `r` (index, or `None` for the final state, read with `end`) must
    /// return when real time says: `Some(None)` nil, `Some(Some(v))` the value `v`; `None`
    /// if nothing is certain. `clock`: the largest clock (Unix ms) that may have judged
    /// the value expired before the read (the reader's and the primary's at its
    /// completion).
    fn expected(&self, r: Option<usize>, start: u64, end: u64, clock: u64) -> Option<Option<u64>> {
        let others = || {
            self.ops
                .iter()
                .enumerate()
                .filter(move |(i, op)| Some(*i) != r && op.may_write())
        };
        // The acknowledged SET or DEL that completed last before the read was invoked.
        let last = self
            .ops
            .iter()
            .enumerate()
            .filter(|(i, op)| Some(*i) != r && op.supersedes() && op.ok() && op.end < start)
            .max_by_key(|(_, op)| op.end);
        let Some((w, write)) = last else {
            // Nothing written before: absent, unless something may have written it since.
            return others().all(|(_, op)| op.start >= end).then_some(None);
        };
        let disturbed = others().any(|(i, op)| i != w && op.start < end && op.end > write.start);
        if disturbed {
            return None;
        }
        match write.kind {
            Kind::Set {
                value,
                expiry,
                reported,
                ..
            } => {
                let clock = clock.max(write.at.comp);
                match write.deadline(expiry, reported) {
                    Deadline::Within(lo, _) if lo <= clock => None,
                    _ => Some(Some(value)),
                }
            }
            _ => Some(None),
        }
    }

    /// The checks of one read of `read` by op `r` (`None`: the final state, read at
    /// `end` with `clock`), common to reads and the final value: value origin, stale
    /// reads and what real time says must be read.
    fn check_value(
        &self,
        r: Option<usize>,
        (start, end, clock): (u64, u64, u64),
        read: Option<u64>,
        what: &dyn Fn() -> String,
        out: &mut Vec<String>,
        counted: &mut usize,
    ) {
        if let Some(v) = read {
            match self.writes.get(&v) {
                None => note(out, counted, || {
                    format!("{} read {v:x}, a value no SET of this key wrote", what())
                }),
                Some(&w) => {
                    let write = self.ops[w];
                    if write.failed() {
                        note(out, counted, || {
                            format!(
                                "{} read {v:x}, written by {write:?}, which certainly failed",
                                what()
                            )
                        });
                    }
                    if write.start > end {
                        note(out, counted, || {
                            format!("{} read {v:x} before {write:?} wrote it", what())
                        });
                    }
                    if let Some(x) = self
                        .ops
                        .iter()
                        .find(|x| x.supersedes() && x.ok() && x.start > write.end && x.end < start)
                    {
                        note(out, counted, || {
                            format!(
                                "stale: {} read {v:x} of {write:?}, but {x:?} replaced it \
                                 before the read was invoked",
                                what()
                            )
                        });
                    }
                }
            }
        }
        if let Some(expected) = self.expected(r, start, end, clock)
            && expected != read
        {
            note(out, counted, || {
                format!(
                    "{} read {:?}, but the last write before it, with nothing else on the \
                     key since and no deadline passed, left {:?}",
                    what(),
                    read.map(|v| format!("{v:x}")),
                    expected.map(|v| format!("{v:x}"))
                )
            });
        }
    }
}

/// Checks one key's history (`ops`: its operations, in any order, walls resolved)
/// against the final state at its primary (`None`: not known). Returns what is wrong
/// and what it saw.
pub fn check_key(ops: &[&Op], last: Option<&Final>) -> (Vec<String>, KeyStats) {
    let mut out = Vec::new();
    let mut counted = 0;
    let mut stats = KeyStats::default();
    let h = KeyHistory::new(ops);
    for (i, op) in ops.iter().enumerate() {
        // PEXPIRETIME after PX d: now + d, "now" by the node that ran it.
        let consistent = |d: u64, r: i64| {
            r > 0 && (op.at.inv..=op.at.comp).contains(&(r as u64).saturating_sub(d))
        };
        match &op.kind {
            Kind::Set {
                expiry: Expiry::In(d),
                reported: Some(r),
                ..
            } if op.ok() && !consistent(*d, *r) => note(&mut out, &mut counted, || {
                format!("{op:?}: PEXPIRETIME answered {r}, not now + {d} at the running node")
            }),
            Kind::Expire {
                expiry: Expiry::In(d),
                read: Some(read),
                changed: Some(changed),
                reported: Some(r),
            } if op.ok() => {
                let fine = match read {
                    Some(_) => *changed && consistent(*d, *r),
                    None => !*changed && *r == -2,
                };
                if !fine {
                    note(&mut out, &mut counted, || {
                        format!("{op:?}: inconsistent replies to GET, PEXPIRE {d}, PEXPIRETIME")
                    });
                }
            }
            _ => {}
        }
        // The WATCH rule: an EXEC that committed saw its watched value live.
        if let Kind::Set {
            watched: Some(Some(v)),
            ..
        } = op.kind
            && op.ok()
            && let Some(&w) = h.writes.get(&v)
            && expired_by(&h.deadlines(w, op.end, None), op.at.inv)
        {
            note(&mut out, &mut counted, || {
                format!(
                    "{op:?}: EXEC committed although the watched value {v:x} had expired by \
                     its invocation (deadlines {:?})",
                    h.deadlines(w, op.end, None)
                )
            });
        }
        if let Kind::Pttl(p) = op.kind
            && op.ok()
        {
            check_ttl(&h, op, None, p, &mut out, &mut counted);
        }
        let Some(read) = op.read() else { continue };
        let what = || format!("{op:?}");
        let clock = op.at.comp.max(op.primary.comp);
        h.check_value(
            Some(i),
            (op.start, op.end, clock),
            read,
            &what,
            &mut out,
            &mut counted,
        );
        match read {
            Some(v) => {
                stats.values_read += 1;
                if let Some(&w) = h.writes.get(&v) {
                    let deadlines = h.deadlines(w, op.end, Some(i));
                    if expired_by(&deadlines, op.at.inv) {
                        note(&mut out, &mut counted, || {
                            format!(
                                "{op:?} read {v:x}, expired: every deadline it may have had \
                                 ({deadlines:?}) is at or before the reading node's clock at \
                                 the read's invocation ({} ms)",
                                op.at.inv
                            )
                        });
                    }
                }
            }
            None => {
                if h.expired_seen(i, op) {
                    stats.expired_seen += 1;
                }
            }
        }
        if let Kind::Get { ttl: Some(p), .. } = op.kind {
            check_ttl(&h, op, Some(read), p, &mut out, &mut counted);
        }
    }
    if let Some(last) = last {
        let value = last.value.map(|(v, _)| v);
        let what = || "the final state".to_owned();
        let end = u64::MAX - 1;
        h.check_value(
            None,
            (end, end, last.wall),
            value,
            &what,
            &mut out,
            &mut counted,
        );
        if let Some((v, stored)) = last.value
            && let Some(&w) = h.writes.get(&v)
        {
            let deadlines = h.deadlines(w, u64::MAX, None);
            let possible = deadlines.iter().any(|d| match (d, stored) {
                (Deadline::Never, None) => true,
                (Deadline::Within(lo, hi), Some(s)) => (*lo..=*hi).contains(&s),
                _ => false,
            });
            if !possible {
                note(&mut out, &mut counted, || {
                    format!(
                        "the final value {v:x} has the deadline {stored:?}, none of those it \
                         may have had ({deadlines:?})"
                    )
                });
            }
            if let (Some(deadline), Some(swept)) = (stored, last.swept)
                && deadline <= swept
            {
                note(&mut out, &mut counted, || {
                    format!(
                        "the final value {v:x} expired at {deadline}, before the sweeper's \
                         last clean pass started ({swept} by the primary's clock), and is \
                         still stored"
                    )
                });
            }
        }
    }
    if counted > LISTED_MAX {
        out.push(format!("... {counted} violations of this key in all"));
    }
    (out, stats)
}

impl KeyHistory<'_> {
    /// Whether a nil read `op` (index `i`) found the key expired: the last write that
    /// completed before it was a SET whose every deadline had passed by the reader's
    /// clock (counted, not checked).
    fn expired_seen(&self, i: usize, op: &Op) -> bool {
        let last = self
            .ops
            .iter()
            .enumerate()
            .filter(|(j, w)| *j != i && w.supersedes() && w.ok() && w.end < op.start)
            .max_by_key(|(_, w)| w.end);
        match last {
            Some((w, write)) if matches!(write.kind, Kind::Set { .. }) => {
                expired_by(&self.deadlines(w, op.end, Some(i)), op.at.inv)
            }
            _ => false,
        }
    }
}

/// A `PTTL` answer `p` of `op`, with the value its block read (`read`) or without
/// (`None`: any value of the key written before it completed).
fn check_ttl(
    h: &KeyHistory<'_>,
    op: &Op,
    read: Option<Option<u64>>,
    p: i64,
    out: &mut Vec<String>,
    counted: &mut usize,
) {
    let values: Vec<usize> = match read {
        Some(None) => {
            if p != -2 {
                note(out, counted, || {
                    format!("{op:?}: PTTL answered {p} for a key GET found absent")
                });
            }
            return;
        }
        Some(Some(v)) => h.writes.get(&v).copied().into_iter().collect(),
        None => h
            .ops
            .iter()
            .enumerate()
            .filter(|(_, w)| matches!(w.kind, Kind::Set { .. }) && !w.failed() && w.start < op.end)
            .map(|(w, _)| w)
            .collect(),
    };
    if read.is_some() && values.is_empty() {
        return; // A value of no SET: reported by the value checks.
    }
    let deadlines: Vec<Deadline> = values
        .iter()
        .flat_map(|&w| h.deadlines(w, op.end, None))
        .collect();
    let fine = match p {
        -2 => read.is_none(),
        -1 => deadlines.contains(&Deadline::Never),
        p if p > 0 => {
            let p = p as u64;
            deadlines.iter().any(|d| match d {
                Deadline::Within(lo, hi) => {
                    *lo <= op.at.comp.saturating_add(p + 1) && hi.saturating_add(1) >= op.at.inv + p
                }
                Deadline::Never => false,
            })
        }
        _ => false,
    };
    if !fine {
        note(out, counted, || {
            format!(
                "{op:?}: PTTL answered {p}, which no deadline the value may have had \
                 ({deadlines:?}) gives at the reading node's clock ({} to {} ms)",
                op.at.inv, op.at.comp
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_700_000_000_000;

    fn op(start: u64, end: u64, at: (u64, u64), kind: Kind) -> Op {
        Op {
            client: 1,
            key: 0,
            start,
            end,
            at: Walls {
                inv: at.0,
                comp: at.1,
            },
            primary: Walls {
                inv: at.0,
                comp: at.1,
            },
            kind,
            outcome: Outcome::Ok,
        }
    }

    fn set(start: u64, end: u64, at: (u64, u64), value: u64, expiry: Expiry) -> Op {
        op(
            start,
            end,
            at,
            Kind::Set {
                value,
                expiry,
                reported: None,
                watched: None,
            },
        )
    }

    fn get(start: u64, end: u64, at: (u64, u64), value: Option<u64>) -> Op {
        op(start, end, at, Kind::Get { value, ttl: None })
    }

    fn get_ttl(start: u64, end: u64, at: (u64, u64), value: Option<u64>, ttl: i64) -> Op {
        op(
            start,
            end,
            at,
            Kind::Get {
                value,
                ttl: Some(ttl),
            },
        )
    }

    fn check(ops: &[Op], last: Option<Final>) -> Vec<String> {
        check_key(&ops.iter().collect::<Vec<_>>(), last.as_ref()).0
    }

    #[test]
    fn correct_histories_pass() {
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            get(3, 4, (T + 2, T + 3), Some(1)),
            get_ttl(5, 6, (T + 4, T + 4), Some(1), 6),
            // Expired by the reader's clock at its completion: nil or the value.
            get(7, 8, (T + 9, T + 11), None),
            // Another node's clock, behind: it still sees the value.
            get(9, 10, (T + 5, T + 6), Some(1)),
            set(11, 12, (T + 12, T + 12), 2, Expiry::In(20)),
            get_ttl(13, 14, (T + 13, T + 14), Some(2), 18),
            set(15, 16, (T + 15, T + 15), 3, Expiry::Never),
            get_ttl(17, 18, (T + 16, T + 16), Some(3), -1),
            op(19, 20, (T + 20, T + 20), Kind::Del),
            get_ttl(21, 22, (T + 21, T + 21), None, -2),
        ];
        assert_eq!(check(&ops, None), Vec::<String>::new());
        let last = Final {
            value: None,
            wall: T + 50,
            swept: Some(T + 40),
        };
        assert_eq!(check(&ops, Some(last)), Vec::<String>::new());
    }

    #[test]
    fn a_read_after_the_deadline_fails() {
        // Deadline T + 10; read invoked when the reader's clock said T + 10.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            get(3, 4, (T + 10, T + 10), Some(1)),
        ];
        let found = check(&ops, None);
        assert!(found.iter().any(|v| v.contains("expired")), "{found:?}");
        // One ms earlier it may still be live.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            get(3, 4, (T + 9, T + 10), Some(1)),
        ];
        assert_eq!(check(&ops, None), Vec::<String>::new());
        // PX 10 run with the node's clock between T and T + 2: deadline at most T + 12.
        let ops = [
            set(1, 2, (T, T + 2), 1, Expiry::In(10)),
            get(3, 4, (T + 11, T + 12), Some(1)),
        ];
        assert_eq!(check(&ops, None), Vec::<String>::new());
        let ops = [
            set(1, 2, (T, T + 2), 1, Expiry::In(10)),
            get(3, 4, (T + 12, T + 13), Some(1)),
        ];
        assert!(!check(&ops, None).is_empty());
    }

    #[test]
    fn a_later_deadline_counts_only_when_it_may_apply() {
        let persist = |start, end, read| {
            op(
                start,
                end,
                (T + 3, T + 4),
                Kind::Expire {
                    expiry: Expiry::Never,
                    read,
                    changed: Some(true),
                    reported: None,
                },
            )
        };
        // PERSIST of the value (read in its block) before the read: no deadline left.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            persist(3, 4, Some(Some(1))),
            get(5, 6, (T + 20, T + 20), Some(1)),
        ];
        assert_eq!(check(&ops, None), Vec::<String>::new());
        // A plain PERSIST (value not read) may have applied too.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            persist(3, 4, None),
            get(5, 6, (T + 20, T + 20), Some(1)),
        ];
        assert_eq!(check(&ops, None), Vec::<String>::new());
        // A PERSIST invoked after the read completed cannot explain it.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            get(3, 4, (T + 20, T + 20), Some(1)),
            persist(5, 6, Some(Some(1))),
        ];
        assert!(!check(&ops, None).is_empty());
        // Nor one that read another value.
        let ops = [
            set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
            persist(3, 4, Some(Some(7))),
            get(5, 6, (T + 20, T + 20), Some(1)),
        ];
        assert!(check(&ops, None).iter().any(|v| v.contains("expired")));
    }

    #[test]
    fn a_wrong_pttl_fails() {
        let ops = |ttl| {
            [
                set(1, 2, (T, T + 1), 1, Expiry::At(T + 10)),
                get_ttl(3, 4, (T + 4, T + 5), Some(1), ttl),
            ]
        };
        assert_eq!(check(&ops(5), None), Vec::<String>::new());
        assert_eq!(check(&ops(6), None), Vec::<String>::new());
        // 10 - 2 = 8: "now" would be T + 2, before the read was invoked (beyond ±1 ms).
        assert!(!check(&ops(8), None).is_empty());
        assert!(!check(&ops(3), None).is_empty());
        assert!(!check(&ops(-1), None).is_empty());
        assert!(!check(&ops(-2), None).is_empty());
        // A PEXPIRETIME after PX 10 that is not now + 10.
        let timed = |r| {
            [op(
                1,
                2,
                (T, T + 1),
                Kind::Set {
                    value: 1,
                    expiry: Expiry::In(10),
                    reported: Some(r),
                    watched: None,
                },
            )]
        };
        assert_eq!(check(&timed(T as i64 + 11), None), Vec::<String>::new());
        assert!(!check(&timed(T as i64 + 13), None).is_empty());
    }

    #[test]
    fn stale_and_lost_values_fail() {
        let v1 = set(1, 2, (T, T), 1, Expiry::Never);
        let v2 = set(3, 4, (T, T), 2, Expiry::Never);
        // Stale: 1 was replaced before the read started.
        assert!(!check(&[v1.clone(), v2.clone(), get(5, 6, (T, T), Some(1))], None).is_empty());
        // Lost: nothing touched the key since 2 was written, and it does not expire.
        assert!(!check(&[v1.clone(), v2.clone(), get(5, 6, (T, T), None)], None).is_empty());
        // A value no SET wrote, and one read before its SET was invoked.
        assert!(!check(&[v1.clone(), get(3, 4, (T, T), Some(9))], None).is_empty());
        let later = set(3, 4, (T, T), 1, Expiry::Never);
        assert!(!check(&[get(1, 2, (T, T), Some(1)), later], None).is_empty());
        // An early expiry: deadline T + 10, read nil by clocks at T + 5.
        let early = [
            set(1, 2, (T, T), 1, Expiry::At(T + 10)),
            get(3, 4, (T + 5, T + 5), None),
        ];
        assert!(!check(&early, None).is_empty());
        // Concurrent writes: either value.
        let w2 = set(1, 4, (T, T), 2, Expiry::Never);
        assert_eq!(
            check(&[v1.clone(), w2.clone(), get(5, 6, (T, T), Some(1))], None),
            Vec::<String>::new()
        );
        // The final state: a lost value, an expired value left behind, a wrong deadline.
        let last = |value, swept| Final {
            value,
            wall: T + 100,
            swept,
        };
        assert!(!check(std::slice::from_ref(&v1), Some(last(None, None))).is_empty());
        let expiring = [set(1, 2, (T, T), 1, Expiry::At(T + 10))];
        assert_eq!(
            check(&expiring, Some(last(Some((1, Some(T + 10))), Some(T + 9)))),
            Vec::<String>::new()
        );
        assert!(!check(&expiring, Some(last(Some((1, Some(T + 10))), Some(T + 10)))).is_empty());
        assert!(!check(&expiring, Some(last(Some((1, Some(T + 11))), None))).is_empty());
        assert!(!check(&expiring, Some(last(Some((1, None)), None))).is_empty());
    }

    #[test]
    fn a_watched_exec_after_the_deadline_fails() {
        let exec = |at| {
            op(
                5,
                6,
                (at, at),
                Kind::Set {
                    value: 2,
                    expiry: Expiry::Never,
                    reported: None,
                    watched: Some(Some(1)),
                },
            )
        };
        let ops = |at| {
            [
                set(1, 2, (T, T), 1, Expiry::At(T + 10)),
                get(3, 4, (T + 1, T + 1), Some(1)),
                exec(at),
            ]
        };
        assert_eq!(check(&ops(T + 9), None), Vec::<String>::new());
        assert!(!check(&ops(T + 10), None).is_empty());
    }

    #[test]
    fn tryagain_counts_only_without_disruptions() {
        let mut failed = get(1, 2, (T, T), None);
        failed.outcome = Outcome::Failed("TRYAGAIN x".into());
        let ops = [failed];
        assert_eq!(contention_violations(&ops, &[]).len(), 1);
        assert!(contention_violations(&ops, &["1 pauses".into()]).is_empty());
    }
}
