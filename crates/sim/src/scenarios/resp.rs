//! Redis clients in the simulator: each client a coroutine with its own [`RespClient`],
//! which sends RESP bytes through the connection core, session and plan execution the
//! mio server runs (MULTI/EXEC, WATCH, pipelined plans, blind writes), and records what
//! the replies say happened, for the checkers.
//!
//! - `resp-list-append`: list-append over `APPEND`/`GET` (the workload crate's Redis
//!   form), checked by the Elle-style list-append checker with the primaries' final
//!   lists.
//! - `resp-bank`: transfers between a few accounts under `WATCH` (with `DECRBY`/`INCRBY`,
//!   or with blind `SET`s of balances computed from what the client read), unconditional
//!   transfers in `MULTI`, and audits; checked by conservation, per account and in total.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_cluster::default_tables;
use ferrotx_redis_exec::{KvTable, RespClient, RespValue, encode_request, store_key};
use ferrotx_resp::{SessionConfig, keys};
use ferrotx_store::TableSpec;
use ferrotx_workload::check::list_append::{MicroOp, Outcome, Transaction};
use ferrotx_workload::list_append::{
    parse_redis_list, parse_redis_reply, redis_key, redis_request,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::list_append::{
    CLIENTS_PER_WORKER, Recorded, check_history, final_lists, generator, open,
};
use super::{Ticks, client_id, clients, copies, log_bound_violations};
use crate::cluster::SimCluster;
use crate::run::{Checked, Scenario, digest_of};

/// Everything wrong a client saw while running (a reply no correct front end sends).
type Problems = Rc<RefCell<Vec<String>>>;

/// The `kv` table of the run's configuration.
/// Longest a client that finished waits for the others before it flushes its thread's
/// truncation mark (ns of its node's clock), and how often it looks.
const FLUSH_WAIT_NS: u64 = 20_000_000;
const FLUSH_POLL_NS: u64 = 200_000;

/// The end of a Redis client: its commands that wrote keys of one primary ran in batches
/// at that primary, on the coordinator of the primary's shipping thread, whose truncation
/// mark rides on later commits (or the recovery loop's idle pass, after the run ended).
/// So the client waits for every client (`running` of them still run; a while at most:
/// a crash drops some), then flushes its own thread's mark to `nodes`: every thread's
/// goes out after the last batch, and the backups equal their primaries at the check.
pub(super) async fn finish_client(
    co: &ferrotx_exec::Co,
    coordinator: &ferrotx_txn::coordinator::Coordinator,
    running: &Cell<usize>,
    nodes: &[u16],
) {
    running.set(running.get().saturating_sub(1));
    let give_up = co.now_ns() + FLUSH_WAIT_NS;
    while running.get() > 0 && co.now_ns() < give_up {
        co.sleep_until(co.now_ns() + FLUSH_POLL_NS).await;
    }
    coordinator.flush_truncation(co, nodes).await;
}

pub(super) fn kv_table(cluster: &SimCluster) -> KvTable {
    KvTable::find(cluster.config()).expect("the scenario's schema has the kv table")
}

/// The Redis value of `key` as its primary holds it at the end (`Ok(None)`: absent), or
/// what is wrong with the stored value; `None` if no primary of the key is up.
pub(super) fn primary_value(
    cluster: &SimCluster,
    kv: KvTable,
    key: &[u8],
) -> Option<Result<Option<Vec<u8>>, String>> {
    let copies = copies(cluster, kv.id, &store_key(key));
    let primary = copies.iter().find(|c| c.primary)?;
    let Some(stored) = &primary.value else {
        return Some(Ok(None));
    };
    Some(match keys::decode(stored) {
        Err(error) => Err(format!("{}: {error}", show(key))),
        Ok(entry) if entry.key != key => Err(format!(
            "{}: the stored value carries the key {}",
            show(key),
            show(entry.key)
        )),
        Ok(entry) => Ok(Some(entry.value.to_vec())),
    })
}

/// A backup of `key` that differs from its primary, if any.
pub(super) fn replica_violation(cluster: &SimCluster, kv: KvTable, key: &[u8]) -> Option<String> {
    let copies = copies(cluster, kv.id, &store_key(key));
    let primary = copies.iter().find(|c| c.primary)?;
    let differs = copies
        .iter()
        // Absent on both sides: a tombstone, or a reclaimed key read at its copy's floor;
        // their versions differ while reclamation goes round the copies.
        .find(|c| {
            !(c.value.is_none() && primary.value.is_none())
                && (c.version != primary.version || c.value != primary.value)
        })?;
    Some(format!(
        "{}: the copy on node {} (version {}) differs from the primary on node {} (version {})",
        show(key),
        differs.node,
        differs.version,
        primary.node,
        primary.version
    ))
}

pub(super) fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every client's session settings: the server's defaults.
pub(super) fn session() -> Arc<SessionConfig> {
    Arc::new(SessionConfig::default())
}

/// List-append over Redis: transactions as `MULTI`, `APPEND`/`GET`..., `EXEC`.
pub struct RespListAppend {
    transactions: usize,
    history: Recorded,
    problems: Problems,
}

impl RespListAppend {
    /// Each client runs about `transactions` transactions.
    pub fn new(transactions: usize) -> Self {
        Self {
            transactions,
            history: Rc::default(),
            problems: Rc::default(),
        }
    }
}

/// The RESP bytes of one micro-operation as a plain command (outside MULTI).
fn plain_command(op: &MicroOp, out: &mut Vec<u8>) {
    match op {
        MicroOp::Append { key, element } => encode_request(
            &[
                b"APPEND".to_vec(),
                redis_key(*key),
                format!("{element},").into_bytes(),
            ],
            out,
        ),
        MicroOp::Read { key, .. } => encode_request(&[b"GET".to_vec(), redis_key(*key)], out),
    }
}

/// Whether an error reply says the command certainly took no effect (`-TRYAGAIN`,
/// `-CLUSTERDOWN`, `-OOM`: docs/redis.md), as opposed to "outcome unknown" and other
/// errors.
pub(super) fn certainly_failed(error: &[u8]) -> bool {
    error.starts_with(b"TRYAGAIN") || error.starts_with(b"CLUSTERDOWN") || error.starts_with(b"OOM")
}

/// A plain command's reply, as the transaction of that one operation: its outcome and
/// what it recorded; `None` if no correct front end replies so.
fn plain_outcome(op: &MicroOp, reply: &RespValue) -> Option<(Outcome, Vec<MicroOp>)> {
    match (op, reply) {
        // -TRYAGAIN and -CLUSTERDOWN say it certainly took no effect: a definite abort,
        // which the checkers hold the front end to (its append must never be read).
        (MicroOp::Append { .. }, RespValue::Error(e)) if certainly_failed(e) => {
            Some((Outcome::Aborted, Vec::new()))
        }
        // The plan failed otherwise (outcome unknown, a node refused): it may have
        // committed.
        (MicroOp::Append { .. }, RespValue::Error(_)) => {
            Some((Outcome::Indeterminate, vec![op.clone()]))
        }
        (MicroOp::Read { .. }, RespValue::Error(_)) => Some((Outcome::Indeterminate, Vec::new())),
        (MicroOp::Append { .. }, RespValue::Integer(_)) => {
            Some((Outcome::Committed, vec![op.clone()]))
        }
        (MicroOp::Read { key, .. }, RespValue::Bulk(value)) => Some((
            Outcome::Committed,
            vec![MicroOp::Read {
                key: *key,
                list: Some(parse_redis_list(value)),
            }],
        )),
        (MicroOp::Read { key, .. }, RespValue::Null) => Some((
            Outcome::Committed,
            vec![MicroOp::Read {
                key: *key,
                list: Some(Vec::new()),
            }],
        )),
        _ => None,
    }
}

/// How a list-append client sends its next transactions.
#[derive(Clone, Copy, Debug)]
enum Send {
    /// One `MULTI` ... `EXEC` block.
    Block,
    /// Two blocks in one send: the connection runs them in order, and the client learns
    /// both outcomes together, so they are recorded as concurrent.
    TwoBlocks,
    /// The operations as plain commands, pipelined in one send: the session joins them
    /// into one plan, but Redis promises no atomicity, so each is recorded as a
    /// transaction of its own (all concurrent).
    Pipelined,
}

impl Scenario for RespListAppend {
    fn name(&self) -> &'static str {
        "resp-list-append"
    }

    fn schema(&self) -> Vec<TableSpec> {
        default_tables()
    }

    fn load(&self, _cluster: &SimCluster) {
        // Every list starts absent: empty.
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let ticks = Ticks::default();
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        let session = session();
        let all_clients = clients(cluster, CLIENTS_PER_WORKER);
        let running = Rc::new(Cell::new(all_clients.len()));
        for (node, thread, slot) in all_clients {
            let running = running.clone();
            let id = client_id(node, thread, slot);
            let (mut generator, mut rng) = generator(seed, id);
            let mut client = RespClient::for_config(cluster.config(), id, session.clone())
                .expect("the scenario's schema has the kv table");
            let history = self.history.clone();
            let problems = self.problems.clone();
            let ticks = ticks.clone();
            let transactions = self.transactions;
            let all_nodes = all_nodes.clone();
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                let mut next_id = 0u64;
                let mut fresh_id = || {
                    next_id += 1;
                    (id << 16) | next_id
                };
                let mut done = 0;
                while done < transactions && !client.is_closed() {
                    let send = match rng.random_range(0..6) {
                        0..=2 => Send::Block,
                        3 | 4 => Send::TwoBlocks,
                        _ => Send::Pipelined,
                    };
                    match send {
                        Send::Block | Send::TwoBlocks => {
                            let blocks = if matches!(send, Send::Block) { 1 } else { 2 };
                            let mut bytes = Vec::new();
                            let mut opened = Vec::new();
                            let start = ticks.tick();
                            for _ in 0..blocks {
                                let ops = generator.next_ops(&mut rng);
                                bytes.extend_from_slice(&redis_request(&ops));
                                let index = open(&history, fresh_id(), start, &ops);
                                opened.push((index, ops));
                            }
                            client.send(&bytes);
                            client.run(&co, &coordinator).await;
                            let end = ticks.tick();
                            let mut at = 0;
                            for (index, ops) in &opened {
                                match parse_redis_reply(ops, &client.received()[at..]) {
                                    Ok((outcome, ops, used)) => {
                                        at += used;
                                        let mut history = history.borrow_mut();
                                        let txn = &mut history[*index];
                                        if outcome != Outcome::Indeterminate {
                                            txn.end = end;
                                            txn.outcome = outcome;
                                            txn.ops = ops;
                                        }
                                    }
                                    Err(error) => {
                                        problems.borrow_mut().push(format!(
                                            "client {id:#x}: the replies to {ops:?}: {error}"
                                        ));
                                        break;
                                    }
                                }
                            }
                            client.replies();
                            done += blocks;
                        }
                        Send::Pipelined => {
                            let ops = generator.next_ops(&mut rng);
                            let mut bytes = Vec::new();
                            let start = ticks.tick();
                            let mut opened = Vec::new();
                            for op in &ops {
                                plain_command(op, &mut bytes);
                                opened.push(open(
                                    &history,
                                    fresh_id(),
                                    start,
                                    std::slice::from_ref(op),
                                ));
                            }
                            let replies = client.request(&co, &coordinator, &bytes).await;
                            let end = ticks.tick();
                            if replies.len() != ops.len() {
                                problems.borrow_mut().push(format!(
                                    "client {id:#x}: {} replies to {} pipelined commands",
                                    replies.len(),
                                    ops.len()
                                ));
                            }
                            for ((op, index), reply) in ops.iter().zip(&opened).zip(&replies) {
                                match plain_outcome(op, reply) {
                                    Some((outcome, recorded)) => {
                                        let mut history = history.borrow_mut();
                                        let txn = &mut history[*index];
                                        txn.outcome = outcome;
                                        txn.ops = recorded;
                                        if outcome != Outcome::Indeterminate {
                                            txn.end = end;
                                        }
                                    }
                                    None => problems.borrow_mut().push(format!(
                                        "client {id:#x}: {reply:?} in reply to {op:?}"
                                    )),
                                }
                            }
                            done += 1;
                        }
                    }
                }
                finish_client(&co, &coordinator, &running, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let kv = kv_table(cluster);
        let unreadable = RefCell::new(Vec::new());
        let finals = final_lists(cluster, |cluster, key| {
            match primary_value(cluster, kv, &redis_key(key))? {
                Ok(value) => Some(value.as_deref().map(parse_redis_list).unwrap_or_default()),
                Err(error) => {
                    unreadable.borrow_mut().push(error);
                    None
                }
            }
        });
        let history: Vec<Transaction> = self.history.borrow().clone();
        let mut checked = check_history(&history, &finals);
        checked.violations.extend(unreadable.into_inner());
        checked
            .violations
            .extend(self.problems.borrow().iter().cloned());
        checked.violations.extend(log_bound_violations(
            cluster,
            cluster.options().log_records_max,
        ));
        for key in finals.keys() {
            checked
                .violations
                .extend(replica_violation(cluster, kv, &redis_key(*key)));
        }
        checked
    }
}

/// Bank accounts, `acct:0` ...: few, so that transfers conflict.
const ACCOUNTS: usize = 6;

/// Every account's balance at the start.
const INITIAL_BALANCE: i64 = 100;

/// The largest amount of one transfer.
const AMOUNT_MAX: i64 = 30;

/// Times a WATCH transfer runs before the client gives up on it, while its EXEC finds a
/// watched key changed.
const WATCH_ATTEMPTS: u32 = 3;

/// The Redis key of account `i`.
fn account(i: usize) -> Vec<u8> {
    format!("acct:{i}").into_bytes()
}

/// How a transfer is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TransferKind {
    /// `WATCH from to`, `GET`s, then `MULTI`, `DECRBY from x`, `INCRBY to x`, `EXEC`:
    /// the replies must be the balances read, moved.
    WatchIncr,
    /// `WATCH from to`, `GET`s, then `MULTI`, `SET from (read - x)`, `SET to (read + x)`,
    /// `EXEC`: blind writes, correct only if WATCH is.
    WatchSet,
    /// `MULTI`, `DECRBY from x`, `INCRBY to x`, `EXEC` in one send, unwatched (balances
    /// may go negative).
    Unconditional,
}

/// One transfer's attempt that reached EXEC.
#[derive(Clone, Debug)]
struct TransferRecord {
    from: usize,
    to: usize,
    amount: i64,
    outcome: Outcome,
}

/// What the bank's clients recorded.
#[derive(Default, Debug)]
struct BankLog {
    transfers: Vec<TransferRecord>,
    /// Audits committed (each saw the exact total; the client checked).
    audits: u64,
    /// EXECs that answered null: a watched key changed.
    null_execs: u64,
    /// Everything wrong a client saw.
    problems: Vec<String>,
}

/// Transfers, audits and blind writes over Redis.
pub struct RespBank {
    operations: usize,
    log: Rc<RefCell<BankLog>>,
}

impl RespBank {
    /// Each client runs `operations` transfers and audits.
    pub fn new(operations: usize) -> Self {
        Self {
            operations,
            log: Rc::default(),
        }
    }
}

/// One bank client's connection and what it records into.
struct BankClient {
    id: u64,
    client: RespClient,
    co: ferrotx_exec::Co,
    coordinator: Rc<ferrotx_txn::coordinator::Coordinator>,
    log: Rc<RefCell<BankLog>>,
}

impl BankClient {
    fn problem(&self, what: String) {
        self.log
            .borrow_mut()
            .problems
            .push(format!("client {:#x}: {what}", self.id));
    }

    async fn command(&mut self, args: &[&[u8]]) -> RespValue {
        self.client.command(&self.co, &self.coordinator, args).await
    }

    async fn request(&mut self, bytes: &[u8]) -> Vec<RespValue> {
        self.client
            .request(&self.co, &self.coordinator, bytes)
            .await
    }

    /// A balance from a reply, if it is one.
    fn balance(value: &RespValue) -> Option<i64> {
        std::str::from_utf8(value.as_bytes()?).ok()?.parse().ok()
    }

    /// `MULTI`, `GET` of every account, `EXEC`: a committed audit must see the total.
    async fn audit(&mut self) {
        let mut bytes = Vec::new();
        encode_request(&["MULTI"], &mut bytes);
        for i in 0..ACCOUNTS {
            encode_request(&[&b"GET"[..], &account(i)], &mut bytes);
        }
        encode_request(&["EXEC"], &mut bytes);
        let replies = self.request(&bytes).await;
        match replies.last() {
            Some(RespValue::Array(values)) if replies.len() == ACCOUNTS + 2 => {
                let balances: Option<Vec<i64>> = values.iter().map(Self::balance).collect();
                match balances {
                    Some(balances) if balances.len() == ACCOUNTS => {
                        let total: i64 = balances.iter().sum();
                        if total != INITIAL_BALANCE * ACCOUNTS as i64 {
                            self.problem(format!(
                                "a committed audit saw the balances {balances:?}, total {total}"
                            ));
                        }
                        self.log.borrow_mut().audits += 1;
                    }
                    _ => self.problem(format!("an audit's EXEC answered {values:?}")),
                }
            }
            // The audit's plan failed: it read nothing the client may trust.
            Some(RespValue::Error(_)) if replies.len() == ACCOUNTS + 2 => {}
            _ => self.problem(format!("an audit got the replies {replies:?}")),
        }
    }

    /// A transfer of `amount` from `from` to `to`, sent as `kind`.
    async fn transfer(&mut self, kind: TransferKind, from: usize, to: usize, amount: i64) {
        let (from_key, to_key) = (account(from), account(to));
        for _ in 0..WATCH_ATTEMPTS {
            let mut read = None;
            if kind != TransferKind::Unconditional {
                let watch = self.command(&[b"WATCH", &from_key, &to_key]).await;
                let from_value = self.command(&[b"GET", &from_key]).await;
                let to_value = self.command(&[b"GET", &to_key]).await;
                let balances = (Self::balance(&from_value), Self::balance(&to_value));
                match (watch, balances) {
                    (RespValue::Simple(_), (Some(a), Some(b))) if a >= amount => {
                        read = Some((a, b))
                    }
                    (watch, _) => {
                        // Not enough money, or an error (a node unreachable too long:
                        // no bug under faults); the client gives up. A missing account,
                        // or a WATCH answering anything but OK or an error, is a bug.
                        if from_value.is_null() || to_value.is_null() {
                            self.problem(format!(
                                "an account is missing: {from_value:?}, {to_value:?}"
                            ));
                        }
                        if watch != RespValue::ok() && !watch.is_error() {
                            self.problem(format!("WATCH answered {watch:?}"));
                        }
                        let unwatch = self.command(&[b"UNWATCH"]).await;
                        if unwatch != RespValue::ok() {
                            self.problem(format!("UNWATCH answered {unwatch:?}"));
                        }
                        return;
                    }
                }
            }
            let mut bytes = Vec::new();
            encode_request(&["MULTI"], &mut bytes);
            match (kind, read) {
                (TransferKind::WatchSet, Some((a, b))) => {
                    let (a, b) = ((a - amount).to_string(), (b + amount).to_string());
                    encode_request(&[&b"SET"[..], &from_key, a.as_bytes()], &mut bytes);
                    encode_request(&[&b"SET"[..], &to_key, b.as_bytes()], &mut bytes);
                }
                _ => {
                    let x = amount.to_string();
                    encode_request(&[&b"DECRBY"[..], &from_key, x.as_bytes()], &mut bytes);
                    encode_request(&[&b"INCRBY"[..], &to_key, x.as_bytes()], &mut bytes);
                }
            }
            encode_request(&["EXEC"], &mut bytes);
            let index = {
                let mut log = self.log.borrow_mut();
                log.transfers.push(TransferRecord {
                    from,
                    to,
                    amount,
                    outcome: Outcome::Indeterminate,
                });
                log.transfers.len() - 1
            };
            let replies = self.request(&bytes).await;
            let queued = replies.len() == 4
                && replies[0] == RespValue::ok()
                && replies[1..3] == [RespValue::simple("QUEUED"), RespValue::simple("QUEUED")];
            if !queued {
                self.problem(format!("a transfer got the replies {replies:?}"));
                return;
            }
            let outcome = match &replies[3] {
                RespValue::NullArray | RespValue::Null if read.is_some() => Outcome::Aborted,
                RespValue::Error(e) if e.starts_with(b"EXECABORT") || certainly_failed(e) => {
                    Outcome::Aborted
                }
                RespValue::Error(_) => Outcome::Indeterminate,
                RespValue::Array(results) => {
                    let expected = match (kind, read) {
                        (TransferKind::WatchSet, _) => Some(vec![RespValue::ok(), RespValue::ok()]),
                        // Nothing watched changed since the GETs: the results are the
                        // balances read, moved.
                        (TransferKind::WatchIncr, Some((a, b))) => Some(vec![
                            RespValue::Integer(a - amount),
                            RespValue::Integer(b + amount),
                        ]),
                        _ => None,
                    };
                    let integers = results.iter().all(|r| matches!(r, RespValue::Integer(_)));
                    if expected.as_ref().is_some_and(|e| e != results)
                        || (results.len() != 2 || (expected.is_none() && !integers))
                    {
                        self.problem(format!(
                            "a {kind:?} transfer of {amount} from {} to {} (read {read:?}) \
                             committed with the results {results:?}",
                            show(&from_key),
                            show(&to_key)
                        ));
                    }
                    Outcome::Committed
                }
                other => {
                    self.problem(format!("a {kind:?} transfer's EXEC answered {other:?}"));
                    Outcome::Indeterminate
                }
            };
            self.log.borrow_mut().transfers[index].outcome = outcome;
            if outcome != Outcome::Aborted {
                return;
            }
            if read.is_some() {
                self.log.borrow_mut().null_execs += 1;
            } else {
                return;
            }
        }
    }
}

/// Whether some subset of `optional` (deltas per account) adds up to `residual`: the
/// transfers whose outcome is unknown that explain what the committed ones do not.
fn explained(residual: &[i64], optional: &[Vec<i64>]) -> bool {
    fn search(residual: &mut [i64], optional: &[Vec<i64>]) -> bool {
        if residual.iter().all(|&r| r == 0) {
            return true;
        }
        let Some((first, rest)) = optional.split_first() else {
            return false;
        };
        for (r, d) in residual.iter_mut().zip(first) {
            *r -= d;
        }
        let with = search(residual, rest);
        for (r, d) in residual.iter_mut().zip(first) {
            *r += d;
        }
        with || search(residual, rest)
    }
    search(&mut residual.to_vec(), optional)
}

/// Indeterminate transfers the per-account check searches through (2^n subsets).
const INDETERMINATE_SEARCHED_MAX: usize = 16;

impl Scenario for RespBank {
    fn name(&self) -> &'static str {
        "resp-bank"
    }

    fn schema(&self) -> Vec<TableSpec> {
        default_tables()
    }

    fn load(&self, cluster: &SimCluster) {
        let kv = kv_table(cluster);
        for i in 0..ACCOUNTS {
            let key = account(i);
            let mut stored = Vec::new();
            keys::encode(&key, INITIAL_BALANCE.to_string().as_bytes(), &mut stored);
            cluster.load(kv.id, store_key(&key), &stored);
        }
    }

    fn start_clients(&mut self, cluster: &mut SimCluster, seed: u64) {
        let all_nodes: Rc<[u16]> = (0..cluster.node_count()).collect();
        let session = session();
        let all_clients = clients(cluster, CLIENTS_PER_WORKER);
        let running = Rc::new(Cell::new(all_clients.len()));
        for (node, thread, slot) in all_clients {
            let running = running.clone();
            let id = client_id(node, thread, slot);
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ id.rotate_left(41) ^ 0xba4c);
            let client = RespClient::for_config(cluster.config(), id, session.clone())
                .expect("the scenario's schema has the kv table");
            let log = self.log.clone();
            let operations = self.operations;
            let all_nodes = all_nodes.clone();
            let spawned = cluster.spawn(node, thread, move |co, coordinator| async move {
                let mut bank = BankClient {
                    id,
                    client,
                    co,
                    coordinator,
                    log,
                };
                for _ in 0..operations {
                    if bank.client.is_closed() {
                        bank.problem("the connection closed".to_owned());
                        break;
                    }
                    let op = rng.random_range(0..10);
                    if op < 3 {
                        bank.audit().await;
                        continue;
                    }
                    let from = rng.random_range(0..ACCOUNTS);
                    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let amount = rng.random_range(1..=AMOUNT_MAX);
                    let kind = match op {
                        3..=5 => TransferKind::WatchIncr,
                        6..=8 => TransferKind::WatchSet,
                        _ => TransferKind::Unconditional,
                    };
                    bank.transfer(kind, from, to, amount).await;
                }
                finish_client(&bank.co, &bank.coordinator, &running, &all_nodes).await;
            });
            assert!(spawned, "a coroutine slot for every client");
        }
    }

    fn check(&self, cluster: &SimCluster) -> Checked {
        let kv = kv_table(cluster);
        let log = self.log.borrow();
        let count = |outcome| {
            log.transfers
                .iter()
                .filter(|t| t.outcome == outcome)
                .count() as u64
        };
        let mut violations = log.problems.clone();
        violations.extend(log_bound_violations(
            cluster,
            cluster.options().log_records_max,
        ));
        let mut finals = Vec::new();
        for i in 0..ACCOUNTS {
            let key = account(i);
            violations.extend(replica_violation(cluster, kv, &key));
            match primary_value(cluster, kv, &key) {
                Some(Ok(Some(value))) => match std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse::<i64>().ok())
                {
                    Some(balance) => finals.push(balance),
                    None => {
                        violations.push(format!("{}: the balance {:?}", show(&key), show(&value)))
                    }
                },
                Some(Ok(None)) => violations.push(format!("{} is missing at the end", show(&key))),
                Some(Err(error)) => violations.push(error),
                // No primary up: nothing to check against.
                None => {}
            }
        }
        if finals.len() == ACCOUNTS {
            let total: i64 = finals.iter().sum();
            if total != INITIAL_BALANCE * ACCOUNTS as i64 {
                violations.push(format!(
                    "the final balances {finals:?} total {total}, not {}",
                    INITIAL_BALANCE * ACCOUNTS as i64
                ));
            }
            // Per account: the final balance is the initial one moved by every committed
            // transfer and by some of those whose outcome is unknown, never by an
            // aborted one, and never partly.
            let deltas = |t: &TransferRecord| {
                let mut d = vec![0; ACCOUNTS];
                d[t.from] -= t.amount;
                d[t.to] += t.amount;
                d
            };
            let mut residual: Vec<i64> = finals.iter().map(|f| f - INITIAL_BALANCE).collect();
            for t in log
                .transfers
                .iter()
                .filter(|t| t.outcome == Outcome::Committed)
            {
                for (r, d) in residual.iter_mut().zip(deltas(t)) {
                    *r -= d;
                }
            }
            let unknown: Vec<Vec<i64>> = log
                .transfers
                .iter()
                .filter(|t| t.outcome == Outcome::Indeterminate)
                .map(deltas)
                .collect();
            if unknown.len() <= INDETERMINATE_SEARCHED_MAX && !explained(&residual, &unknown) {
                violations.push(format!(
                    "the final balances {finals:?} are not the initial ones moved by the \
                     committed transfers and any of the {} whose outcome is unknown \
                     (unexplained: {residual:?})",
                    unknown.len()
                ));
            }
        }
        Checked {
            committed: count(Outcome::Committed) + log.audits,
            aborted: log.null_execs,
            indeterminate: count(Outcome::Indeterminate),
            violations,
            history_digest: digest_of(&log.transfers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::explained;

    #[test]
    fn balances_are_explained_only_by_a_subset_of_whole_transfers() {
        // Two unknown transfers: 0 -> 1 of 5, 1 -> 2 of 3.
        let unknown = [vec![-5, 5, 0], vec![0, -3, 3]];
        assert!(explained(&[0, 0, 0], &unknown));
        assert!(explained(&[-5, 5, 0], &unknown));
        assert!(explained(&[0, -3, 3], &unknown));
        assert!(explained(&[-5, 2, 3], &unknown));
        // Half a transfer, or money made, is no subset's doing.
        assert!(!explained(&[-5, 0, 0], &unknown));
        assert!(!explained(&[0, 0, 1], &unknown));
        assert!(!explained(&[1, -1, 0], &[]));
    }
}
