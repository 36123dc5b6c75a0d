//! `resp-counter`: hot-key counters over Redis (issue 14). Every client (3 per worker,
//! on every node and thread) sends `INCR`, `INCRBY`, `GET` and `MULTI`/`INCR`/`INCRBY`/
//! `EXEC` on two keys, one command at a time (now and then two `INCR`s of different keys
//! pipelined), so every write is a plan whose keys share one primary: shipped there and
//! combined with the others queued at that primary.
//!
//! Each operation is recorded with its invocation and completion (ticks of the run's
//! event counter: real-time order without ties), its reply, and whether it is *ok*
//! (definite), *failed* (`-TRYAGAIN`, `-CLUSTERDOWN`, `EXECABORT`: nothing happened) or
//! *unknown* (another error, or no reply: a client dropped by a crash). Every delta is
//! positive (no `DECR`), so a key's values only grow, and an increment of `d` answered
//! `v` took the key from `v - d` to `v`: it owns the interval `(v - d, v]` of the key's
//! history. The checks, per key ([`check_key`]):
//!
//! - the acknowledged increments' intervals are disjoint and above 0, and the gaps
//!   between them (and from 0 to the first, and from the last to the final value at the
//!   primary) are filled by increments whose outcome is unknown: each gap by a subset of
//!   those invoked before the increment after the gap completed, every unknown one used
//!   at most once (exactly searched when that is small, otherwise each gap and the total
//!   alone); failed increments never count;
//! - real time: an ok operation completed before another ok one was invoked saw a value
//!   no larger than the later one's starting value (an increment's `v - d`, a `GET`'s
//!   value); and no ok operation saw more than the deltas of the increments (ok or
//!   unknown) invoked before it completed;
//! - a `GET` never sees the inside of an acknowledged increment (`INCRBY 3` answered 10
//!   makes 8 and 9 values no one may read, and a `MULTI`'s `INCR` + `INCRBY` is one
//!   increment: its first value is never read);
//! - the final value at the primary is at least every acknowledged value;
//! - contention alone fails nothing: when the run had no crash, no pause and no datagram
//!   cut by a partition (and no recovery attack struck a node), every `-TRYAGAIN` is a
//!   violation ([`disruptions`]);
//! - as in every scenario, backups equal their primaries and no backup log exceeded its
//!   reservation; that every client finished is the run's own liveness check.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ferrotx_cluster::default_tables;
use ferrotx_redis_exec::{RespClient, RespValue, encode_request, store_key};
use ferrotx_store::TableSpec;
use ferrotx_txn::participant::Role;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::list_append::CLIENTS_PER_WORKER;
use super::resp::{certainly_failed, kv_table, primary_value, replica_violation, session, show};
use super::{Ticks, client_id, clients, log_bound_violations};
use crate::cluster::SimCluster;
use crate::run::{Checked, Scenario, digest_of};

/// The hot keys: every client writes both.
pub const KEYS: usize = 2;

/// The largest delta of one `INCRBY`.
const DELTA_MAX: i64 = 5;

/// Violations of one kind a check lists before it only counts them.
const LISTED_MAX: usize = 8;

/// Unknown increments of one key beyond which the gaps are checked one by one (and in
/// total) rather than by an exact assignment of every unknown increment to a gap.
const EXACT_UNKNOWN_MAX: usize = 16;

/// The Redis key of counter `i`.
pub fn counter(i: usize) -> Vec<u8> {
    format!("ctr:{i}").into_bytes()
}

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Adds `delta` (> 0) and answers the new value: `INCR`, `INCRBY`, or a `MULTI`
    /// block of increments of one key (the sum of its deltas, answered by its last).
    Add(i64),
    /// `GET`: the value (an absent key is 0).
    Get,
}

/// What the client learned of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The value it answered.
    Value(i64),
    /// It certainly took no effect (`-TRYAGAIN`, `-CLUSTERDOWN`, `EXECABORT`).
    Failed(String),
    /// It may have taken effect (an "outcome unknown" error, or no reply).
    Unknown(String),
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The client that ran it.
    pub client: u64,
    /// The counter (`ctr:key`).
    pub key: usize,
    /// Tick of its invocation.
    pub start: u64,
    /// Tick of its completion; `u64::MAX` if no reply came.
    pub end: u64,
    /// What it does.
    pub kind: Kind,
    /// What its reply said.
    pub reply: Reply,
}

impl Op {
    fn ok(&self) -> Option<i64> {
        match self.reply {
            Reply::Value(v) => Some(v),
            _ => None,
        }
    }

    fn delta(&self) -> i64 {
        match self.kind {
            Kind::Add(d) => d,
            Kind::Get => 0,
        }
    }

    fn is_add(&self) -> bool {
        matches!(self.kind, Kind::Add(_))
    }

    fn is_unknown(&self) -> bool {
        matches!(self.reply, Reply::Unknown(_))
    }
}

/// What the clients recorded.
#[derive(Debug, Default)]
struct CounterLog {
    ops: Vec<Op>,
    /// Replies no correct front end sends.
    problems: Vec<String>,
    /// The most attempts one command of any client lost ([`Counters`]'s
    /// `transaction_aborts_max`).
    ///
    /// [`Counters`]: ferrotx_redis_exec::Counters
    aborts_max: u32,
    /// The longest a command took, in nanoseconds of its client's node's clock.
    latency_max_ns: u64,
}

/// Hot-key counters over Redis.
pub struct RespCounter {
    operations: usize,
    log: Rc<RefCell<CounterLog>>,
    /// `resp-counter-spread`: the two counters have different primaries, and most
    /// operations are a pipeline over both (increments of both, or a read of one and an
    /// increment of the other): a transaction over two primaries, optimistic (not
    /// shipped), from every node at once.
    spread: bool,
    /// The counters' Redis keys (`ctr:i`), chosen when the clients start.
    names: Vec<Vec<u8>>,
}

/// The longest one command may take in `resp-counter-spread` in a run without crash,
/// pause or partition. Every client waits its turn behind those that lost more attempts
/// (docs/transactions.md, "Fairness"): over 100 seeds under loss, duplication,
/// reordering and drift the longest was 76 ms, and 228 ms with reservations that never
/// refuse (with fault points too, in the first version, which aged from the first lost
/// conflict: 144 ms, and 473 ms without ages). This bound only catches starvation; the
/// seeds' test checks the typical tail.
pub const SPREAD_LATENCY_MAX_NS: u64 = 600_000_000;

impl RespCounter {
    /// Each client runs `operations` operations.
    pub fn new(operations: usize) -> Self {
        Self {
            operations,
            log: Rc::default(),
            spread: false,
            names: Vec::new(),
        }
    }

    /// `resp-counter-spread`: each client runs `operations` operations, most of them
    /// over both counters, which have different primaries.
    pub fn spread(operations: usize) -> Self {
        Self {
            spread: true,
            ..Self::new(operations)
        }
    }

    /// The most attempts one command lost in the last run.
    pub fn aborts_max(&self) -> u32 {
        self.log.borrow().aborts_max
    }

    /// The longest a command took in the last run, in nanoseconds.
    pub fn latency_max_ns(&self) -> u64 {
        self.log.borrow().latency_max_ns
    }
}

/// The node holding the primary of Redis key `name`, if any is up.
fn primary_node(cluster: &SimCluster, name: &[u8]) -> Option<u16> {
    let table = kv_table(cluster).id;
    cluster
        .copies_of(cluster.partition_of(table, &store_key(name)))
        .into_iter()
        .find(|(_, role, _)| *role == Role::Primary)
        .map(|(node, _, _)| node)
}

/// [`KEYS`] counters: `ctr:0` and `ctr:1`, or (`spread`) the first two `ctr:i` whose
/// primaries differ (`ctr:1` on a cluster with one primary, where nothing can spread).
fn counter_names(cluster: &SimCluster, spread: bool) -> Vec<Vec<u8>> {
    if !spread {
        return (0..KEYS).map(counter).collect();
    }
    let first = counter(0);
    let home = primary_node(cluster, &first);
    let other = (1..1000)
        .map(counter)
        .find(|name| primary_node(cluster, name) != home)
        .unwrap_or_else(|| counter(1));
    vec![first, other]
}

/// One request: the operations it carries (opened before it is sent) and the bytes.
struct Request {
    /// Indices of the operations in the log, with the reply each reads its outcome from.
    ops: Vec<usize>,
    bytes: Vec<u8>,
    form: Form,
}

/// How a request's replies map to its operations.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// One command, one reply, one operation.
    Single,
    /// `MULTI`, `INCR k`, `INCRBY k d`, `EXEC`: one operation of delta `1 + d`.
    Multi(i64),
    /// Two commands pipelined: one operation each.
    Pipelined,
}

/// An increment's or `GET`'s reply, as what it tells.
fn classify(kind: Kind, reply: &RespValue) -> Result<Reply, String> {
    match (kind, reply) {
        (Kind::Add(_), RespValue::Integer(v)) => Ok(Reply::Value(*v)),
        (Kind::Get, RespValue::Null) => Ok(Reply::Value(0)),
        (Kind::Get, RespValue::Bulk(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Reply::Value)
            .ok_or_else(|| format!("GET answered {:?}", show(b))),
        (_, RespValue::Error(e)) if certainly_failed(e) => Ok(Reply::Failed(show(e))),
        (_, RespValue::Error(e)) => Ok(Reply::Unknown(show(e))),
        (kind, other) => Err(format!("{kind:?} answered {other:?}")),
    }
}

/// A `MULTI` block's replies (`INCR`, `INCRBY d`), as what they tell.
fn classify_multi(d: i64, replies: &[RespValue]) -> Result<Reply, String> {
    let queued = replies.len() == 4
        && replies[0] == RespValue::ok()
        && replies[1..3] == [RespValue::simple("QUEUED"), RespValue::simple("QUEUED")];
    if !queued {
        return Err(format!("a MULTI block got the replies {replies:?}"));
    }
    match &replies[3] {
        RespValue::Array(results) => match results.as_slice() {
            // Atomic: the INCRBY saw the INCR's value.
            [RespValue::Integer(a), RespValue::Integer(b)] if *b == a + d => Ok(Reply::Value(*b)),
            other => Err(format!("EXEC of INCR, INCRBY {d} answered {other:?}")),
        },
        RespValue::Error(e) if e.starts_with(b"EXECABORT") || certainly_failed(e) => {
            Ok(Reply::Failed(show(e)))
        }
        RespValue::Error(e) => Ok(Reply::Unknown(show(e))),
        other => Err(format!("EXEC answered {other:?}")),
    }
}

impl Scenario for RespCounter {
    fn name(&self) -> &'static str {
        if self.spread {
            "resp-counter-spread"
        } else {
            "resp-counter"
        }
    }

    fn schema(&self) -> Vec<TableSpec> {
        default_tables()
    }

    fn load(&self, _cluster: &SimCluster) {
        // Every counter starts absent: 0.
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let ticks = Ticks::default();
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        let session = session();
        let all = clients(cluster, CLIENTS_PER_WORKER);
        self.names = counter_names(cluster, self.spread);
        let names: Rc<[Vec<u8>]> = self.names.clone().into();
        let spread = self.spread;
        let running = Rc::new(Cell::new(all.len()));
        for (node, thread, slot) in all {
            let id = client_id(node, thread, slot);
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ id.rotate_left(37) ^ 0xc0_47e2);
            let mut client = RespClient::for_config(cluster.config(), id, session.clone())
                .expect("the scenario's schema has the kv table");
            let log = self.log.clone();
            let ticks = ticks.clone();
            let operations = self.operations;
            let all_nodes = all_nodes.clone();
            let running = running.clone();
            let names = names.clone();
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                let mut done = 0;
                while done < operations {
                    if client.is_closed() {
                        log.borrow_mut()
                            .problems
                            .push(format!("client {id:#x}: the connection closed"));
                        break;
                    }
                    let key = rng.random_range(0..KEYS);
                    let name = names[key].clone();
                    let d = rng.random_range(2..=DELTA_MAX);
                    let ds = d.to_string();
                    let mut bytes = Vec::new();
                    // Spread: most operations are the two-primary pipelines below.
                    let pick = match rng.random_range(0..20) {
                        n if spread && n >= 8 && n % 3 == 0 => 20,
                        n if spread && n >= 8 => 19,
                        n => n,
                    };
                    // (key, kind) of each operation, in reply order.
                    let (form, ops): (Form, Vec<(usize, Kind)>) = match pick {
                        0..=8 => {
                            encode_request(&[&b"INCR"[..], &name], &mut bytes);
                            (Form::Single, vec![(key, Kind::Add(1))])
                        }
                        9..=13 => {
                            encode_request(&[&b"INCRBY"[..], &name, ds.as_bytes()], &mut bytes);
                            (Form::Single, vec![(key, Kind::Add(d))])
                        }
                        14..=16 => {
                            encode_request(&[&b"GET"[..], &name], &mut bytes);
                            (Form::Single, vec![(key, Kind::Get)])
                        }
                        17 | 18 => {
                            encode_request(&["MULTI"], &mut bytes);
                            encode_request(&[&b"INCR"[..], &name], &mut bytes);
                            encode_request(&[&b"INCRBY"[..], &name, ds.as_bytes()], &mut bytes);
                            encode_request(&["EXEC"], &mut bytes);
                            (Form::Multi(d), vec![(key, Kind::Add(1 + d))])
                        }
                        20 => {
                            // Spread only: one key read, the other written, in one plan
                            // (the read is validated at its primary: VALIDATE_AGED when
                            // retried).
                            let other = (key + 1) % KEYS;
                            encode_request(&[&b"GET"[..], &name], &mut bytes);
                            encode_request(
                                &[&b"INCRBY"[..], &names[other], ds.as_bytes()],
                                &mut bytes,
                            );
                            (
                                Form::Pipelined,
                                vec![(key, Kind::Get), (other, Kind::Add(d))],
                            )
                        }
                        _ => {
                            // Both keys in one send: one plan of two commands, shipped only
                            // if the keys share a primary. Each is its own operation.
                            let other = (key + 1) % KEYS;
                            encode_request(&[&b"INCR"[..], &name], &mut bytes);
                            encode_request(
                                &[&b"INCRBY"[..], &names[other], ds.as_bytes()],
                                &mut bytes,
                            );
                            (
                                Form::Pipelined,
                                vec![(key, Kind::Add(1)), (other, Kind::Add(d))],
                            )
                        }
                    };
                    let start = ticks.tick();
                    let request = {
                        let mut log = log.borrow_mut();
                        let first = log.ops.len();
                        for &(key, kind) in &ops {
                            log.ops.push(Op {
                                client: id,
                                key,
                                start,
                                end: u64::MAX,
                                kind,
                                reply: Reply::Unknown("no reply".to_owned()),
                            });
                        }
                        Request {
                            ops: (first..first + ops.len()).collect(),
                            bytes,
                            form,
                        }
                    };
                    let sent_ns = co.now_ns();
                    let replies = client.request(&co, &coordinator, &request.bytes).await;
                    let end = ticks.tick();
                    {
                        let mut log = log.borrow_mut();
                        log.latency_max_ns = log.latency_max_ns.max(co.now_ns() - sent_ns);
                    }
                    let outcomes: Vec<Result<Reply, String>> = match request.form {
                        Form::Multi(d) => vec![classify_multi(d, &replies)],
                        Form::Single | Form::Pipelined if replies.len() == ops.len() => ops
                            .iter()
                            .zip(&replies)
                            .map(|((_, kind), reply)| classify(*kind, reply))
                            .collect(),
                        Form::Single | Form::Pipelined => vec![Err(format!(
                            "{} replies to {} commands: {replies:?}",
                            replies.len(),
                            ops.len()
                        ))],
                    };
                    let mut log = log.borrow_mut();
                    for (index, outcome) in request.ops.iter().zip(outcomes) {
                        match outcome {
                            Ok(reply) => {
                                let op = &mut log.ops[*index];
                                if !matches!(reply, Reply::Unknown(_)) {
                                    op.end = end;
                                }
                                op.reply = reply;
                            }
                            Err(problem) => {
                                log.problems.push(format!("client {id:#x}: {problem}"));
                            }
                        }
                    }
                    done += ops.len();
                }
                {
                    let mut log = log.borrow_mut();
                    log.aborts_max = log.aborts_max.max(client.counters().transaction_aborts_max);
                }
                super::resp::finish_client(&co, &coordinator, &running, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let kv = kv_table(cluster);
        let log = self.log.borrow();
        let mut violations = log.problems.clone();
        violations.extend(log_bound_violations(
            cluster,
            cluster.options().log_records_max,
        ));
        for (key, name) in self.names.iter().enumerate() {
            let name = name.clone();
            violations.extend(replica_violation(cluster, kv, &name));
            let last = match primary_value(cluster, kv, &name) {
                Some(Ok(None)) => Some(0),
                Some(Ok(Some(value))) => match std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse::<i64>().ok())
                {
                    Some(v) => Some(v),
                    None => {
                        violations.push(format!(
                            "{}: the final value {:?}",
                            show(&name),
                            show(&value)
                        ));
                        None
                    }
                },
                Some(Err(error)) => {
                    violations.push(error);
                    None
                }
                // No primary up: nothing to check the final value against.
                None => None,
            };
            let ops: Vec<&Op> = log.ops.iter().filter(|op| op.key == key).collect();
            violations.extend(
                check_key(&ops, last)
                    .into_iter()
                    .map(|v| format!("{}: {v}", show(&name))),
            );
        }
        let disrupted = disruptions(cluster);
        violations.extend(contention_violations(&log.ops, &disrupted));
        if self.spread && disrupted.is_empty() && log.latency_max_ns > SPREAD_LATENCY_MAX_NS {
            violations.push(format!(
                "a command took {:.1} ms (at most {} ms without crash, pause or partition): a \
                 transaction that keeps losing must go ahead of the others",
                log.latency_max_ns as f64 / 1e6,
                SPREAD_LATENCY_MAX_NS / 1_000_000
            ));
        }
        let count = |f: fn(&Reply) -> bool| log.ops.iter().filter(|op| f(&op.reply)).count() as u64;
        Checked {
            committed: count(|r| matches!(r, Reply::Value(_))),
            aborted: count(|r| matches!(r, Reply::Failed(_))),
            indeterminate: count(|r| matches!(r, Reply::Unknown(_))),
            violations,
            history_digest: digest_of(&log.ops),
        }
    }
}

/// What happened in the run that may fail a command without contention: crashes,
/// pauses, datagrams cut by partitions, nodes a recovery attack struck. Empty: a
/// `-TRYAGAIN` can only be contention.
pub fn disruptions(cluster: &SimCluster) -> Vec<String> {
    let mut out = Vec::new();
    if cluster.crashes > 0 {
        out.push(format!("{} crashes", cluster.crashes));
    }
    if cluster.pauses > 0 {
        out.push(format!("{} pauses", cluster.pauses));
    }
    let cut = cluster.sim.network.borrow().counters.partitioned;
    if cut > 0 {
        out.push(format!("{cut} datagrams cut by partitions"));
    }
    if !cluster.attack_struck.is_empty() {
        out.push(format!("attack on nodes {:?}", cluster.attack_struck));
    }
    out
}

/// Every `-TRYAGAIN` of a run without `disruptions`: a client failed for contention
/// alone.
pub fn contention_violations(ops: &[Op], disruptions: &[String]) -> Vec<String> {
    tryagain_violations(
        ops,
        disruptions,
        |op| matches!(&op.reply, Reply::Failed(e) if e.starts_with("TRYAGAIN")),
        |op| {
            format!(
                "client {:#x}: {:?} of {}: {:?}",
                op.client,
                op.kind,
                show(&counter(op.key)),
                op.reply
            )
        },
    )
}

/// The operations of `ops` that `tryagain` says were answered `-TRYAGAIN`, described by
/// `describe`, as violations, if the run had no `disruptions` (a client failed for
/// contention alone); the first few listed, then their count.
pub(crate) fn tryagain_violations<T>(
    ops: &[T],
    disruptions: &[String],
    tryagain: impl Fn(&T) -> bool,
    describe: impl Fn(&T) -> String,
) -> Vec<String> {
    if !disruptions.is_empty() {
        return Vec::new();
    }
    let failed: Vec<&T> = ops.iter().filter(|op| tryagain(op)).collect();
    let mut out: Vec<String> = failed
        .iter()
        .take(LISTED_MAX)
        .map(|op| {
            format!(
                "{} failed for contention alone (no crash, pause or partition in the run)",
                describe(op)
            )
        })
        .collect();
    if failed.len() > LISTED_MAX {
        out.push(format!("... {} TRYAGAIN replies in all", failed.len()));
    }
    out
}

/// Pushes `what` unless `LISTED_MAX` of its kind are listed already (then counts it).
fn note(out: &mut Vec<String>, counted: &mut usize, what: impl FnOnce() -> String) {
    *counted += 1;
    if *counted <= LISTED_MAX {
        out.push(what());
    }
}

/// Checks one counter's history (`ops`: its operations, in any order; deltas positive;
/// the counter starts at 0) against its final value `last` at the primary (`None`: not
/// known). Returns what is wrong.
pub fn check_key(ops: &[&Op], last: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    let mut counted = 0;
    // Acknowledged increments, by their value: each owns (v - d, v].
    let mut acked: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| op.is_add() && op.ok().is_some())
        .collect();
    acked.sort_by_key(|op| (op.ok(), op.start));
    let post = |op: &Op| op.ok().expect("acknowledged");
    let pre = |op: &Op| post(op) - op.delta();
    if let Some(first) = acked.first()
        && pre(first) < 0
    {
        note(&mut out, &mut counted, || {
            format!("{first:?} answered a value below its delta: the counter went below 0")
        });
    }
    for w in acked.windows(2) {
        if post(w[0]) > pre(w[1]) {
            note(&mut out, &mut counted, || {
                format!(
                    "two acknowledged increments overlap: {:?} made ({}, {}], {:?} made ({}, {}]",
                    w[0],
                    pre(w[0]),
                    post(w[0]),
                    w[1],
                    pre(w[1]),
                    post(w[1])
                )
            });
        }
    }
    // The gaps between the acknowledged intervals, each with the completion tick before
    // which whatever fills it was invoked.
    let mut gaps: Vec<(i64, u64)> = Vec::new();
    let mut at = 0;
    for op in &acked {
        if pre(op) > at {
            gaps.push((pre(op) - at, op.end));
        }
        at = at.max(post(op));
    }
    if let Some(last) = last {
        if last < at {
            note(&mut out, &mut counted, || {
                format!(
                    "the final value {last} is below the acknowledged value {at}: a lost increment"
                )
            });
        } else if last > at {
            gaps.push((last - at, u64::MAX));
        }
    }
    let unknown: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| op.is_add() && op.is_unknown())
        .collect();
    if let Some(why) = unexplained(&gaps, &unknown) {
        note(&mut out, &mut counted, || why);
    }
    // Reads inside an acknowledged increment's interval.
    for op in ops.iter().filter(|op| !op.is_add()) {
        let Some(r) = op.ok() else { continue };
        let i = acked.partition_point(|w| post(w) <= r);
        if let Some(w) = acked.get(i)
            && pre(w) < r
        {
            note(&mut out, &mut counted, || {
                format!(
                    "{op:?} read {r}, inside the increment {w:?} (from {} to {})",
                    pre(w),
                    post(w)
                )
            });
        }
        if last.is_some_and(|last| r > last) {
            note(&mut out, &mut counted, || {
                format!("{op:?} read {r}, above the final value {last:?}")
            });
        }
    }
    // Real time. Lower bounds: the largest value seen by an ok operation completed before
    // each one's invocation.
    let mut done: Vec<(u64, i64)> = ops
        .iter()
        .filter_map(|op| op.ok().map(|v| (op.end, v)))
        .collect();
    done.sort_unstable();
    let mut highest = Vec::with_capacity(done.len());
    let mut high = i64::MIN;
    for &(_, v) in &done {
        high = high.max(v);
        highest.push(high);
    }
    // Upper bounds: the deltas of every increment (ok or unknown) invoked before it.
    let mut invoked: Vec<(u64, i64)> = ops
        .iter()
        .filter(|op| op.is_add() && !matches!(op.reply, Reply::Failed(_)))
        .map(|op| (op.start, op.delta()))
        .collect();
    invoked.sort_unstable();
    let mut sums = Vec::with_capacity(invoked.len());
    let mut sum = 0;
    for &(_, d) in &invoked {
        sum += d;
        sums.push(sum);
    }
    for op in ops {
        let Some(v) = op.ok() else { continue };
        let from = v - op.delta();
        let before = done.partition_point(|&(end, _)| end < op.start);
        if before > 0 && highest[before - 1] > from {
            let seen = highest[before - 1];
            note(&mut out, &mut counted, || {
                format!(
                    "real time: {op:?} started from {from}, but an operation completed before \
                     it was invoked saw {seen}"
                )
            });
        }
        let invoked_before = invoked.partition_point(|&(start, _)| start < op.end);
        let most = if invoked_before > 0 {
            sums[invoked_before - 1]
        } else {
            0
        };
        if v > most {
            note(&mut out, &mut counted, || {
                format!(
                    "{op:?} saw {v}, more than the {most} of every increment invoked before it \
                     completed"
                )
            });
        }
    }
    if counted > LISTED_MAX {
        out.push(format!("... {counted} violations of this counter in all"));
    }
    out
}

/// Whether the increments whose outcome is unknown fill `gaps` ((size, the completion
/// before which its fillers were invoked)): `None` if they may, or why not. Each gap must
/// be a sum of some of its candidates and the total a sum of some of all; with few unknown
/// increments, one assignment of whole increments to gaps must fill them all at once.
fn unexplained(gaps: &[(i64, u64)], unknown: &[&Op]) -> Option<String> {
    let candidates = |before: u64| -> Vec<i64> {
        unknown
            .iter()
            .filter(|op| op.start < before)
            .map(|op| op.delta())
            .collect()
    };
    for &(size, before) in gaps {
        if !subset_sum(&candidates(before), size) {
            return Some(format!(
                "a gap of {size} in the acknowledged values is no sum of the increments whose \
                 outcome is unknown and that were invoked before it closed ({:?})",
                candidates(before)
            ));
        }
    }
    let total: i64 = gaps.iter().map(|g| g.0).sum();
    let all: Vec<i64> = unknown.iter().map(|op| op.delta()).collect();
    if !subset_sum(&all, total) {
        return Some(format!(
            "the gaps {gaps:?} total {total}, no sum of the increments whose outcome is unknown ({all:?})"
        ));
    }
    if unknown.len() <= EXACT_UNKNOWN_MAX && !assign(gaps, unknown) {
        return Some(format!(
            "no assignment of the increments whose outcome is unknown ({all:?}) fills the gaps \
             {gaps:?}"
        ));
    }
    None
}

/// Whether some subset of `items` (positive) sums to `target`.
fn subset_sum(items: &[i64], target: i64) -> bool {
    if target == 0 {
        return true;
    }
    let total: i64 = items.iter().sum();
    if target < 0 || target > total {
        return false;
    }
    let target = target as usize;
    let mut reachable = vec![false; target + 1];
    reachable[0] = true;
    for &d in items {
        let d = d as usize;
        for s in (d..=target).rev() {
            reachable[s] |= reachable[s - d];
        }
    }
    reachable[target]
}

/// Whether every gap can be filled exactly by disjoint subsets of `unknown`, each
/// increment only in gaps that closed after it was invoked.
fn assign(gaps: &[(i64, u64)], unknown: &[&Op]) -> bool {
    fn search(left: &mut [i64], gaps: &[(i64, u64)], unknown: &[&Op]) -> bool {
        let Some((op, rest)) = unknown.split_first() else {
            return left.iter().all(|&l| l == 0);
        };
        // What the rest could still add must cover what is left.
        let rest_total: i64 = unknown.iter().map(|op| op.delta()).sum();
        if left.iter().sum::<i64>() > rest_total {
            return false;
        }
        for g in 0..left.len() {
            if op.start < gaps[g].1 && left[g] >= op.delta() {
                left[g] -= op.delta();
                let found = search(left, gaps, rest);
                left[g] += op.delta();
                if found {
                    return true;
                }
            }
        }
        search(left, gaps, rest)
    }
    let mut left: Vec<i64> = gaps.iter().map(|g| g.0).collect();
    search(&mut left, gaps, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(start: u64, end: u64, kind: Kind, reply: Reply) -> Op {
        Op {
            client: 1,
            key: 0,
            start,
            end,
            kind,
            reply,
        }
    }

    fn add(start: u64, end: u64, d: i64, v: i64) -> Op {
        op(start, end, Kind::Add(d), Reply::Value(v))
    }

    fn get(start: u64, end: u64, v: i64) -> Op {
        op(start, end, Kind::Get, Reply::Value(v))
    }

    fn unknown(start: u64, d: i64) -> Op {
        op(start, u64::MAX, Kind::Add(d), Reply::Unknown("x".into()))
    }

    fn failed(start: u64, end: u64, d: i64) -> Op {
        op(start, end, Kind::Add(d), Reply::Failed("TRYAGAIN".into()))
    }

    fn check(ops: &[Op], last: Option<i64>) -> Vec<String> {
        check_key(&ops.iter().collect::<Vec<_>>(), last)
    }

    #[test]
    fn correct_histories_pass() {
        // Concurrent increments in any order, a read between, an unknown one that took
        // effect and one that did not, a failed one.
        let ops = [
            add(1, 6, 1, 4),
            add(2, 5, 3, 3),
            get(3, 7, 3),
            unknown(8, 2),
            unknown(9, 5),
            failed(10, 11, 4),
            add(12, 13, 1, 7),
            get(14, 15, 7),
        ];
        assert_eq!(check(&ops, Some(7)), Vec::<String>::new());
        // The final value unknown (no primary up): no final check.
        assert_eq!(check(&ops, None), Vec::<String>::new());
        // The second unknown took effect too, later.
        assert_eq!(check(&ops, Some(12)), Vec::<String>::new());
    }

    #[test]
    fn broken_histories_fail() {
        // Two increments answered the same value.
        assert!(!check(&[add(1, 2, 1, 1), add(1, 2, 1, 1)], Some(2)).is_empty());
        // A value one too high: a gap no unknown increment fills.
        assert!(!check(&[add(1, 2, 1, 1), add(3, 4, 1, 3)], Some(3)).is_empty());
        // Lost: the final value below an acknowledged one.
        assert!(!check(&[add(1, 2, 1, 1), add(3, 4, 1, 2)], Some(1)).is_empty());
        // A failed increment that took effect.
        assert!(!check(&[failed(1, 2, 2), add(3, 4, 1, 3)], Some(3)).is_empty());
        // Stale: an increment invoked after another completed got a lower value.
        assert!(!check(&[add(1, 2, 1, 2), add(3, 4, 1, 1)], Some(2)).is_empty());
        // A stale read after an acknowledged increment.
        assert!(!check(&[add(1, 2, 1, 1), get(3, 4, 0)], Some(1)).is_empty());
        // A read of the inside of an INCRBY (or of a MULTI block's first INCR).
        assert!(!check(&[add(1, 4, 3, 3), get(2, 5, 1)], Some(3)).is_empty());
        // A read of the future: more than every increment invoked before it completed.
        assert!(!check(&[get(1, 2, 1), add(3, 4, 1, 1)], Some(1)).is_empty());
        // An unknown increment invoked after the gap closed cannot fill it.
        assert!(!check(&[add(1, 2, 1, 2), unknown(3, 1)], Some(2)).is_empty());
        // One unknown increment cannot fill two gaps.
        assert!(!check(&[unknown(1, 1), add(2, 3, 1, 2), add(4, 5, 1, 4)], Some(4)).is_empty());
    }

    #[test]
    fn tryagain_counts_only_without_disruptions() {
        let ops = [failed(1, 2, 1), add(3, 4, 1, 1)];
        assert_eq!(contention_violations(&ops, &[]).len(), 1);
        assert!(contention_violations(&ops, &["1 pauses".into()]).is_empty());
        let clusterdown = [op(1, 2, Kind::Add(1), Reply::Failed("CLUSTERDOWN".into()))];
        assert!(contention_violations(&clusterdown, &[]).is_empty());
    }
}
