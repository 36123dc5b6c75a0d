//! The coordinator side: transactions run by coroutines (FaRM 4; docs/transactions.md).

mod keyspace;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, ReadError, ReadOutcome, StoreError, TableId, TableSpec};
use ferrotx_wire::EndpointId;

use crate::messages::{
    LockRecord, ReadItem, ReadStatus, TxId, VERSION_ANY, Write, decode_read_response, encode_read,
    encode_record, encode_truncate, encode_tx, encode_validate, request_type,
};
use crate::participant::{LOG_RECORDS_MAX, NodeStore, Participant, ParticipantHandler, Role};

/// Where keys live: the partition of a key and the nodes of a partition.
pub trait Placement {
    /// The partition of `key` of `table`.
    fn partition_of(&self, table: TableId, key: &Key) -> u32;
    /// The node that is primary for `partition`.
    fn primary(&self, partition: u32) -> u16;
    /// The nodes that are its backups.
    fn backups(&self, partition: u32) -> &[u16];
}

/// Attempts at reading a locked object before the transaction aborts. The lock holder is
/// committing (its COMMIT-PRIMARY is one round trip away), so a few retries usually see
/// the new version; many mean contention, and aborting frees the coroutine.
const LOCKED_READ_ATTEMPTS_MAX: usize = 32;

/// Reads [`Txn::read_many`] sends in one batch (the RPC engine's default batch holds 64).
const READ_BATCH_MAX: usize = 32;

/// Attempts at reserving log space before a commit gives up with [`Abort::LogFull`].
/// Each attempt after the first sends the full backups an explicit TRUNCATE (a round trip
/// that frees what finished meanwhile) or, if they are all on this node, yields.
const LOG_SPACE_ATTEMPTS_MAX: usize = 64;

/// Why a transaction did not commit, or why an operation was refused.
///
/// The refusals of bad input ([`Abort::Refused`], [`Abort::ReadOnly`],
/// [`Abort::KeyExists`], [`Abort::TooLarge`]) change nothing: the store is untouched, and
/// a transaction refused an operation during execution stays usable (a refused commit
/// has ended it).
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Abort {
    /// An object read or written changed, or was locked, before the commit point.
    #[error("aborted: conflict with another transaction")]
    Conflict,
    /// An object stayed locked through every read attempt.
    #[error("aborted: an object stayed locked")]
    Locked,
    /// Bad input: unknown table, a key or value that does not fit; nothing was changed.
    #[error("refused: {0}")]
    Refused(StoreError),
    /// A write, insert or delete in a read-only transaction; nothing was changed.
    #[error("refused: a write in a read-only transaction")]
    ReadOnly,
    /// An insert of a key that exists; nothing was changed.
    #[error("refused: insert of a key that exists")]
    KeyExists,
    /// The transaction's writes do not fit one message of the commit protocol.
    #[error("refused: the transaction is larger than the commit log allows")]
    TooLarge,
    /// A backup's log of this coordinator thread stayed full: earlier transactions of the
    /// thread are still committing (a peer unreachable). Nothing was locked.
    #[error("aborted: no log space at a backup (earlier commits of this thread are stuck)")]
    LogFull,
    /// The transaction already ended; begin a new one.
    #[error("the transaction already ended")]
    Finished,
    /// A participant refused a message (a bug or a configuration mismatch).
    #[error("aborted: a participant refused the protocol")]
    Protocol,
}

/// Tracks which transactions of this coordinator thread have finished, to compute the
/// truncation mark (FaRM 4 step 5): every counter up to the mark is done.
#[derive(Default)]
struct Truncation {
    mark: u64,
    done_above_mark: BTreeSet<u64>,
}

impl Truncation {
    fn finish(&mut self, counter: u64) {
        self.done_above_mark.insert(counter);
        while self.done_above_mark.remove(&(self.mark + 1)) {
            self.mark += 1;
        }
    }
}

/// This coordinator thread's records in one backup's log, as far as it knows.
#[derive(Default)]
struct BackupLog {
    /// Highest truncation mark the backup acknowledged: it holds no record up to it.
    acked_mark: u64,
    /// Counters of the records reserved there and not covered by `acked_mark`, ascending
    /// (counters are taken in reservation order).
    records: Vec<u64>,
}

/// Log space reservation (FaRM 4, "reservations"): the backup's log of this coordinator
/// thread holds at most `limit` records, so the coordinator counts, per backup node, the
/// records it may have there, and starts a commit only when every backup of the
/// transaction has room. A record counts from its reservation (before LOCK) until the
/// backup acknowledges a message carrying a truncation mark that covers it (the backup
/// applies a message's mark before appending its record, and only ever raises its mark),
/// or until its transaction aborts before COMMIT-BACKUP was sent. The count is an upper
/// bound of what the log holds, so the backup never refuses a record for lack of space.
struct LogSpace {
    limit: usize,
    /// By node id.
    backups: Vec<BackupLog>,
}

impl LogSpace {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            backups: Vec::new(),
        }
    }

    fn backup(&mut self, node: u16) -> &mut BackupLog {
        let i = usize::from(node);
        if self.backups.len() <= i {
            self.backups.resize_with(i + 1, BackupLog::default);
        }
        &mut self.backups[i]
    }

    fn held(&self, node: u16) -> usize {
        self.backups
            .get(usize::from(node))
            .map_or(0, |b| b.records.len())
    }

    /// The nodes of `nodes` whose log has no room for one more record.
    fn full<'a>(&'a self, nodes: &'a [u16]) -> impl Iterator<Item = u16> + 'a {
        nodes
            .iter()
            .copied()
            .filter(|&n| self.held(n) >= self.limit)
    }

    /// Reserves a record of transaction `counter` at each of `nodes` if all have room.
    fn try_reserve(&mut self, nodes: &[u16], counter: u64) -> bool {
        if self.full(nodes).next().is_some() {
            return false;
        }
        for &node in nodes {
            let records = &mut self.backup(node).records;
            debug_assert!(records.last().is_none_or(|&c| c < counter));
            records.push(counter);
        }
        true
    }

    /// Returns the reservations of `counter` at `nodes`: its record was never sent.
    fn release(&mut self, nodes: &[u16], counter: u64) {
        for &node in nodes {
            let records = &mut self.backup(node).records;
            if let Ok(i) = records.binary_search(&counter) {
                records.remove(i);
            }
        }
    }

    /// `node` acknowledged a message carrying truncation mark `mark`.
    fn acknowledged(&mut self, node: u16, mark: u64) {
        let backup = self.backup(node);
        if mark > backup.acked_mark {
            backup.acked_mark = mark;
            let covered = backup.records.partition_point(|&c| c <= mark);
            backup.records.drain(..covered);
        }
    }
}

/// Counters of one coordinator thread.
#[derive(Clone, Copy, Default, Debug)]
pub struct CoordinatorStats {
    /// Transactions committed (read-write and read-only).
    pub committed: u64,
    /// Transactions that ended without committing (conflicts, refusals at commit,
    /// abandoned ones).
    pub aborted: u64,
    /// Single-key lock-free reads ([`Coordinator::read_one`]) that returned a value or
    /// absence.
    pub single_reads: u64,
    /// LOCK messages sent (one per written primary of a committing transaction).
    pub lock_messages: u64,
    /// COMMIT-BACKUP messages sent (one per backup node of a committing transaction).
    pub commit_backup_messages: u64,
    /// Explicit TRUNCATE messages sent (flushes and log-space waits).
    pub truncate_messages: u64,
    /// Commits that found a backup's log full and had to wait.
    pub log_space_waits: u64,
    /// Commits refused with [`Abort::LogFull`] after waiting.
    pub log_full_aborts: u64,
}

/// The coordinator of one worker thread, shared by its coroutines.
pub struct Coordinator {
    /// A message to this node's own participant, encoded here (never held across an
    /// await).
    scratch: RefCell<Vec<u8>>,
    /// That participant's response.
    response: RefCell<Vec<u8>>,
    local: EndpointId,
    configuration: u64,
    incarnation: u64,
    participant: Rc<RefCell<Participant>>,
    /// The node's partitions, for reads at a local primary without RPC.
    store: Arc<NodeStore>,
    placement: Arc<dyn Placement>,
    schema: Arc<[TableSpec]>,
    next_counter: Cell<u64>,
    truncation: RefCell<Truncation>,
    log_space: RefCell<LogSpace>,
    stats: Cell<CoordinatorStats>,
}

impl Coordinator {
    /// The coordinator of endpoint `local`, using the thread's `participant` for the
    /// partitions of its own node (accessed in memory, without RPC), `placement` to find
    /// the others, and `schema` to refuse bad input before anything is sent.
    pub fn new(
        local: EndpointId,
        configuration: u64,
        incarnation: u64,
        participant: Rc<RefCell<Participant>>,
        placement: Arc<dyn Placement>,
        schema: Arc<[TableSpec]>,
    ) -> Self {
        let store = participant.borrow().store().clone();
        Self {
            scratch: RefCell::new(Vec::new()),
            response: RefCell::new(Vec::new()),
            local,
            configuration,
            incarnation,
            participant,
            store,
            placement,
            schema,
            next_counter: Cell::new(1),
            truncation: RefCell::new(Truncation::default()),
            log_space: RefCell::new(LogSpace::new(LOG_RECORDS_MAX)),
            stats: Cell::new(CoordinatorStats::default()),
        }
    }

    /// The same coordinator keeping at most `records` records in each backup's log
    /// instead of [`LOG_RECORDS_MAX`] (tests use a small log to exercise waiting for
    /// space). Panics unless 1 <= `records` <= `LOG_RECORDS_MAX`.
    pub fn with_log_records_max(self, records: usize) -> Self {
        assert!(
            (1..=LOG_RECORDS_MAX).contains(&records),
            "a coordinator's log holds 1 to LOG_RECORDS_MAX records"
        );
        self.log_space.borrow_mut().limit = records;
        self
    }

    /// Counters so far.
    pub fn stats(&self) -> CoordinatorStats {
        self.stats.get()
    }

    fn count(&self, update: impl FnOnce(&mut CoordinatorStats)) {
        let mut stats = self.stats.get();
        update(&mut stats);
        self.stats.set(stats);
    }

    /// Begins a read-write transaction. It takes no transaction id and reserves nothing
    /// until it commits.
    pub fn begin<'a>(&'a self, co: &'a Co) -> Txn<'a> {
        self.begin_with(co, false)
    }

    /// Begins a read-only transaction: writes, inserts and deletes are refused with
    /// [`Abort::ReadOnly`] (changing nothing), and its commit only validates the reads.
    pub fn begin_read_only<'a>(&'a self, co: &'a Co) -> Txn<'a> {
        self.begin_with(co, true)
    }

    fn begin_with<'a>(&'a self, co: &'a Co, read_only: bool) -> Txn<'a> {
        Txn {
            coordinator: self,
            co,
            tx: None,
            read_only,
            reads: Vec::new(),
            values: Vec::new(),
            writes: Vec::new(),
            finished: false,
        }
    }

    /// Single-key lock-free read: the committed value of `key` of `table` (`None` if
    /// absent), read at its primary, with no transaction (no id, no validation, nothing
    /// to truncate). Linearizable: the primary installs a transaction's writes before the
    /// transaction is reported committed and keeps them locked until then, and a locked
    /// object is read again rather than returned, so the read returns the latest
    /// committed value at the moment it runs at the primary.
    pub async fn read_one(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
    ) -> Result<Option<Vec<u8>>, Abort> {
        let mut value = Vec::new();
        let present = self.read_one_into(co, table, key, &mut value).await?;
        Ok(present.then_some(value))
    }

    /// [`Coordinator::read_one`] into the caller's buffer (cleared first): returns true
    /// if the key is present. Allocates nothing once `out` has room for the value.
    pub async fn read_one_into(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
        out: &mut Vec<u8>,
    ) -> Result<bool, Abort> {
        Ok(self
            .read_one_with_version(co, table, key, out)
            .await?
            .present)
    }

    /// [`Coordinator::read_one_into`] that also returns the version read (for histories).
    pub async fn read_one_with_version(
        &self,
        co: &Co,
        table: TableId,
        key: Key,
        out: &mut Vec<u8>,
    ) -> Result<ReadOutcome, Abort> {
        self.check_key(table, &key)?;
        let partition = self.placement.partition_of(table, &key);
        let outcome = self
            .read_at_primary(co, partition, table, &key, out)
            .await?;
        self.count(|s| s.single_reads += 1);
        Ok(outcome)
    }

    /// Whether the primary of `key` of `table` is on this coordinator's node (so reading
    /// it takes no RPC).
    pub fn is_local(&self, table: TableId, key: &Key) -> bool {
        let partition = self.placement.partition_of(table, key);
        self.placement.primary(partition) == self.local.node()
    }

    /// The current truncation mark.
    pub fn truncation_mark(&self) -> u64 {
        self.truncation.borrow().mark
    }

    /// Sends this coordinator's truncation mark to `nodes`, so their backup copies apply
    /// every finished transaction (normally the mark rides on later commits).
    pub async fn flush_truncation(&self, co: &Co, nodes: &[u16]) {
        self.send_truncate(co, nodes, self.truncation_mark()).await;
    }

    /// Sends TRUNCATE with `mark` to `nodes` and records their acknowledgements.
    async fn send_truncate(&self, co: &Co, nodes: &[u16], mark: u64) {
        let id = (self.local.node(), self.local.thread(), self.incarnation);
        self.count(|s| s.truncate_messages += nodes.len() as u64);
        let answers = self
            .round(
                co,
                request_type::TRUNCATE,
                Participant::truncate_message,
                nodes,
                |_, buffer| encode_truncate(id, mark, buffer),
                yes,
            )
            .await;
        let mut space = self.log_space.borrow_mut();
        for (node, acknowledged) in answers {
            if acknowledged {
                space.acknowledged(node, mark);
            }
        }
    }

    /// Reserves a record at each of `backups` for a transaction about to commit, waiting
    /// while one of their logs is full; returns the transaction's counter, taken with the
    /// reservation (a waiting commit holds no counter, so it never holds the truncation
    /// mark back).
    async fn reserve_log_space(&self, co: &Co, backups: &[u16]) -> Result<u64, Abort> {
        for attempt in 0..LOG_SPACE_ATTEMPTS_MAX {
            let counter = self.next_counter.get();
            if self.log_space.borrow_mut().try_reserve(backups, counter) {
                self.next_counter.set(counter + 1);
                return Ok(counter);
            }
            if attempt == 0 {
                self.count(|s| s.log_space_waits += 1);
            }
            // Free what finished: an explicit TRUNCATE to the full backups (FaRM uses its
            // reservations of truncate records the same way). A remote one is also the
            // wait: a round trip during which this thread's earlier commits progress.
            let full: Vec<u16> = self.log_space.borrow().full(backups).collect();
            self.send_truncate(co, &full, self.truncation_mark()).await;
            if full.iter().all(|&n| n == self.local.node()) {
                co.yield_now().await;
            }
        }
        self.count(|s| s.log_full_aborts += 1);
        Err(Abort::LogFull)
    }

    fn spec(&self, table: TableId) -> Result<&TableSpec, Abort> {
        self.schema
            .iter()
            .find(|spec| spec.id == table)
            .ok_or(Abort::Refused(StoreError::UnknownTable(table)))
    }

    /// Checks that `table` exists and `key` may be one of its keys.
    fn check_key(&self, table: TableId, key: &Key) -> Result<&TableSpec, Abort> {
        let spec = self.spec(table)?;
        spec.check_key(key).map_err(Abort::Refused)?;
        Ok(spec)
    }

    fn endpoint(&self, node: u16) -> EndpointId {
        EndpointId::new(node, self.local.thread())
    }

    /// Reads `key` at the primary of `partition` into `out`: in memory if the primary is
    /// this node, else one READ RPC, written straight into the engine's batch (no
    /// allocation). A locked (or contended) object is read again after a yield, up to
    /// [`LOCKED_READ_ATTEMPTS_MAX`] times: its holder may already be reported committed,
    /// so the old value must not be returned.
    async fn read_at_primary(
        &self,
        co: &Co,
        partition: u32,
        table: TableId,
        key: &Key,
        out: &mut Vec<u8>,
    ) -> Result<ReadOutcome, Abort> {
        let primary = self.placement.primary(partition);
        for _ in 0..LOCKED_READ_ATTEMPTS_MAX {
            let read: Result<ReadOutcome, ReadError> = if primary == self.local.node() {
                let Some(copy) = self.store.get(partition, Role::Primary) else {
                    return Err(Abort::Protocol);
                };
                copy.read(table, key, out).map_err(|_| Abort::Protocol)?
            } else {
                co.push_with(self.endpoint(primary), request_type::READ, |buf| {
                    encode_read(partition, table, key, buf);
                });
                co.call().await;
                co.result(0, |response| {
                    let bytes = response.map_err(|_| Abort::Protocol)?;
                    let (status, version, value) =
                        decode_read_response(bytes).map_err(|_| Abort::Protocol)?;
                    out.clear();
                    Ok(match status {
                        ReadStatus::Present => {
                            out.extend_from_slice(value);
                            Ok(ReadOutcome {
                                version,
                                present: true,
                            })
                        }
                        ReadStatus::Absent => Ok(ReadOutcome {
                            version,
                            present: false,
                        }),
                        ReadStatus::Locked => Err(ReadError::Locked),
                        ReadStatus::Contended => Err(ReadError::Contended),
                        ReadStatus::Refused => return Err(Abort::Protocol),
                    })
                })?
            };
            match read {
                Ok(outcome) => return Ok(outcome),
                Err(ReadError::Locked | ReadError::Contended) => co.yield_now().await,
            }
        }
        Err(Abort::Locked)
    }

    /// Sends one message to each of `nodes`, written by `encode(node, buffer)`: straight
    /// into the RPC batch for the other nodes, sent as one batch; into a scratch buffer
    /// for this node, handled here and now by this thread's participant. Returns, for
    /// each node, whether `read` took its answer as a yes (most phases: [`yes`], an
    /// answer of exactly `1`: granted, valid, logged, done).
    async fn round(
        &self,
        co: &Co,
        request_type: u8,
        handler: ParticipantHandler,
        nodes: &[u16],
        encode: impl Fn(u16, &mut Vec<u8>),
        mut read: impl FnMut(u16, &[u8]) -> bool,
    ) -> Vec<(u16, bool)> {
        let mut answers = Vec::with_capacity(nodes.len());
        let local = self.local.node();
        let mut remote = 0;
        for &node in nodes {
            if node == local {
                let (mut request, mut response) =
                    (self.scratch.borrow_mut(), self.response.borrow_mut());
                request.clear();
                response.clear();
                encode(node, &mut request);
                let ok = handler(&mut self.participant.borrow_mut(), &request, &mut response)
                    .is_ok()
                    && read(node, &response);
                answers.push((node, ok));
            } else {
                co.push_with(self.endpoint(node), request_type, |buffer| {
                    encode(node, buffer)
                });
                remote += 1;
            }
        }
        if remote > 0 {
            co.call().await;
            let mut i = 0;
            for &node in nodes {
                if node != local {
                    let ok = co.result(i, |r| r.is_ok_and(|answer| read(node, answer)));
                    answers.push((node, ok));
                    i += 1;
                }
            }
        }
        answers
    }
}

/// The answer of most phases: exactly `1`.
fn yes(_: u16, answer: &[u8]) -> bool {
    answer == [1]
}

/// A transaction in a coroutine. Reads see the transaction's own writes; writes are
/// buffered until [`Txn::commit`]. Dropping it uncommitted abandons it (nothing is locked
/// before `commit`).
pub struct Txn<'a> {
    coordinator: &'a Coordinator,
    co: &'a Co,
    /// Its id, taken when the commit starts (with the log space reservation).
    tx: Option<TxId>,
    read_only: bool,
    /// Objects read from the store, with the version seen.
    reads: Vec<ReadItem>,
    /// Values read, parallel to `reads` (`None`: absent), so repeated reads agree.
    values: Vec<Option<Vec<u8>>>,
    writes: Vec<Write>,
    finished: bool,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // A transaction dropped during its commit must still count as finished, or this
        // thread's truncation mark would stop at it and the backups' logs would fill.
        self.finish(false);
    }
}

impl Txn<'_> {
    /// True for a transaction begun with [`Coordinator::begin_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Objects read from the store so far, with versions (for histories).
    pub fn reads(&self) -> &[ReadItem] {
        &self.reads
    }

    /// Writes buffered so far.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// The version at which this transaction read `key` of `table` from the store, if
    /// it did (not if it only wrote it blind, [`Txn::put`]). The commit validates or
    /// locks the key at this version, so a caller that compares it with a version seen
    /// earlier (Redis's WATCH) learns whether the key changed in between, up to the
    /// commit point.
    pub fn read_version(&self, table: TableId, key: &Key) -> Option<u64> {
        self.reads
            .iter()
            .find(|read| read.table == table && read.key == *key)
            .map(|read| read.version)
    }

    /// Reads `key` of `table`: the transaction's own write if any, else the value at its
    /// primary (`None` if absent). Bad input (an unknown table, a key shorter than the
    /// table's partition key) is refused and leaves the transaction usable.
    pub async fn read(&mut self, table: TableId, key: Key) -> Result<Option<Vec<u8>>, Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        if let Some(w) = self
            .writes
            .iter()
            .find(|w| w.table == table && w.key == key)
        {
            return Ok(w.value.clone());
        }
        if let Some(i) = self
            .reads
            .iter()
            .position(|r| r.table == table && r.key == key)
        {
            return Ok(self.values[i].clone());
        }
        let coordinator = self.coordinator;
        coordinator.check_key(table, &key)?;
        let partition = coordinator.placement.partition_of(table, &key);
        let mut value = Vec::new();
        let outcome = match coordinator
            .read_at_primary(self.co, partition, table, &key, &mut value)
            .await
        {
            Ok(outcome) => outcome,
            Err(abort) => return Err(self.abort_execution(abort)),
        };
        let value = outcome.present.then_some(value);
        self.reads.push(ReadItem {
            partition,
            table,
            key,
            version: outcome.version,
        });
        self.values.push(value.clone());
        Ok(value)
    }

    /// Reads several keys of `table` at once, in the order given (`None`: absent), as
    /// [`Txn::read`] would one by one, but with the remote reads sent together: one round
    /// trip for all of them (FaSST issues a transaction's reads as one batch), and the
    /// primaries on this node read in memory meanwhile. A key found locked is read again
    /// on its own. Bad input refuses the whole call before anything is read.
    pub async fn read_many(
        &mut self,
        table: TableId,
        keys: &[Key],
    ) -> Result<Vec<Option<Vec<u8>>>, Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let coordinator = self.coordinator;
        for key in keys {
            coordinator.check_key(table, key)?;
        }
        // Keys neither written nor read yet, once each, with their partitions.
        let mut fetch: Vec<(Key, u32)> = Vec::new();
        for &key in keys {
            if self.known(table, &key).is_none() && !fetch.iter().any(|(k, _)| *k == key) {
                fetch.push((key, coordinator.placement.partition_of(table, &key)));
            }
        }
        let local = coordinator.local.node();
        let mut retry = Vec::new();
        let batch = READ_BATCH_MAX.min(self.co.engine().config().max_batch);
        for chunk in fetch.chunks(batch) {
            let remote: Vec<(Key, u32)> = chunk
                .iter()
                .filter(|(_, p)| coordinator.placement.primary(*p) != local)
                .copied()
                .collect();
            for (key, partition) in &remote {
                let primary = coordinator.placement.primary(*partition);
                self.co
                    .push_with(coordinator.endpoint(primary), request_type::READ, |buf| {
                        encode_read(*partition, table, key, buf);
                    });
            }
            if !remote.is_empty() {
                self.co.call().await;
            }
            for (i, (key, partition)) in remote.into_iter().enumerate() {
                let answer = self.co.result(i, |response| {
                    let bytes = response.map_err(|_| Abort::Protocol)?;
                    let (status, version, value) =
                        decode_read_response(bytes).map_err(|_| Abort::Protocol)?;
                    Ok(match status {
                        ReadStatus::Present => Some((version, Some(value.to_vec()))),
                        ReadStatus::Absent => Some((version, None)),
                        ReadStatus::Locked | ReadStatus::Contended => None,
                        ReadStatus::Refused => return Err(Abort::Protocol),
                    })
                });
                match answer {
                    Ok(Some((version, value))) => {
                        self.record_read(partition, table, key, version, value)
                    }
                    Ok(None) => retry.push(key),
                    Err(abort) => return Err(self.abort_execution(abort)),
                }
            }
            // This node's primaries, in memory (a locked one is retried below).
            for &(key, partition) in chunk {
                if coordinator.placement.primary(partition) != local {
                    continue;
                }
                let Some(copy) = coordinator.store.get(partition, Role::Primary) else {
                    return Err(self.abort_execution(Abort::Protocol));
                };
                let mut value = Vec::new();
                match copy.read(table, &key, &mut value) {
                    Ok(Ok(outcome)) => {
                        let value = outcome.present.then_some(value);
                        self.record_read(partition, table, key, outcome.version, value);
                    }
                    Ok(Err(_)) => retry.push(key),
                    Err(_) => return Err(self.abort_execution(Abort::Protocol)),
                }
            }
        }
        for key in retry {
            self.read(table, key).await?;
        }
        Ok(keys
            .iter()
            .map(|key| self.known(table, key).expect("every key was read"))
            .collect())
    }

    /// The value of `key` as this transaction sees it, if it wrote or read it.
    fn known(&self, table: TableId, key: &Key) -> Option<Option<Vec<u8>>> {
        if let Some(w) = self
            .writes
            .iter()
            .find(|w| w.table == table && w.key == *key)
        {
            return Some(w.value.clone());
        }
        self.reads
            .iter()
            .position(|r| r.table == table && r.key == *key)
            .map(|i| self.values[i].clone())
    }

    fn record_read(
        &mut self,
        partition: u32,
        table: TableId,
        key: Key,
        version: u64,
        value: Option<Vec<u8>>,
    ) {
        self.reads.push(ReadItem {
            partition,
            table,
            key,
            version,
        });
        self.values.push(value);
    }

    /// Refuses a write that cannot be done, before anything happens (the transaction
    /// stays usable).
    fn check_write(&self, table: TableId, key: &Key, value: Option<&[u8]>) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        if self.read_only {
            return Err(Abort::ReadOnly);
        }
        let spec = self.coordinator.check_key(table, key)?;
        if let Some(value) = value {
            spec.check_value(value).map_err(Abort::Refused)?;
        }
        Ok(())
    }

    /// Writes `value` to `key` (inserting it if absent); `None` deletes it. The key is
    /// read first if this transaction has not read or written it, so that the commit
    /// locks it at the version read (FaRM's optimistic execution).
    pub async fn write(
        &mut self,
        table: TableId,
        key: Key,
        value: Option<Vec<u8>>,
    ) -> Result<(), Abort> {
        self.check_write(table, &key, value.as_deref())?;
        if !self.writes.iter().any(|w| w.table == table && w.key == key) {
            self.read(table, key).await?;
        }
        self.put(table, key, value)
    }

    /// Writes `value` to `key` without reading it (a blind write; `None` deletes): at
    /// commit the primary locks the object at whatever version it has then, and the new
    /// value replaces it. The transaction does not depend on the old value, so no read is
    /// needed to keep it serializable, and the write costs one round trip less than
    /// [`Txn::write`]. If the transaction read the key before, this is that read's
    /// ordinary write.
    pub fn put(&mut self, table: TableId, key: Key, value: Option<Vec<u8>>) -> Result<(), Abort> {
        self.check_write(table, &key, value.as_deref())?;
        if let Some(w) = self
            .writes
            .iter_mut()
            .find(|w| w.table == table && w.key == key)
        {
            w.value = value;
            return Ok(());
        }
        let version = self
            .reads
            .iter()
            .find(|r| r.table == table && r.key == key)
            .map_or(VERSION_ANY, |r| r.version);
        let partition = self.coordinator.placement.partition_of(table, &key);
        self.writes.push(Write {
            partition,
            table,
            key,
            version,
            value,
        });
        Ok(())
    }

    /// Inserts `value` under `key`, which must be absent: if it exists (in the store or
    /// by this transaction's own write), refuses with [`Abort::KeyExists`] and changes
    /// nothing (the transaction stays usable, and its read of the key is validated at
    /// commit like any other).
    pub async fn insert(&mut self, table: TableId, key: Key, value: Vec<u8>) -> Result<(), Abort> {
        self.check_write(table, &key, Some(&value))?;
        if self.read(table, key).await?.is_some() {
            return Err(Abort::KeyExists);
        }
        self.write(table, key, Some(value)).await
    }

    /// Deletes `key` (a write of `None`; deleting an absent key is allowed).
    pub async fn delete(&mut self, table: TableId, key: Key) -> Result<(), Abort> {
        self.write(table, key, None).await
    }

    /// Aborts during execution: nothing is locked yet, so nothing to release.
    fn abort_execution(&mut self, abort: Abort) -> Abort {
        self.finish(false);
        abort
    }

    /// Ends the transaction: counts it, and its id (if it took one) as done for
    /// truncation.
    fn finish(&mut self, committed: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        let coordinator = self.coordinator;
        if committed {
            coordinator.count(|s| s.committed += 1);
        } else {
            coordinator.count(|s| s.aborted += 1);
        }
        if let Some(tx) = self.tx {
            coordinator.truncation.borrow_mut().finish(tx.counter);
        }
    }

    /// Commits: FaRM's lock, validate, commit-backup, commit-primary (steps 1-4), after
    /// reserving log space at the backups. Truncation (step 5) rides on later
    /// commit-backup messages. A read-only transaction only validates its reads.
    pub async fn commit(mut self) -> Result<(), Abort> {
        self.commit_and_finish().await
    }

    async fn commit_and_finish(&mut self) -> Result<(), Abort> {
        if self.finished {
            return Err(Abort::Finished);
        }
        let result = self.commit_inner().await;
        self.finish(result.is_ok());
        result
    }

    /// [`Txn::commit`], returning the version each write installed (for histories: a
    /// blind write learns its version only at LOCK).
    pub async fn commit_installed(mut self) -> Result<Vec<(TableId, Key, u64)>, Abort> {
        self.commit_and_finish().await?;
        Ok(self
            .writes
            .iter()
            .map(|w| (w.table, w.key, w.version + 1))
            .collect())
    }

    async fn commit_inner(&mut self) -> Result<(), Abort> {
        let coordinator = self.coordinator;
        let placement = &*coordinator.placement;
        let read_only: Vec<ReadItem> = self
            .reads
            .iter()
            .filter(|r| {
                !self
                    .writes
                    .iter()
                    .any(|w| w.table == r.table && w.key == r.key)
            })
            .copied()
            .collect();
        if self.validation_too_large(&read_only) {
            return Err(Abort::TooLarge);
        }
        if self.writes.is_empty() {
            // Read-only: serializable at its last read if every read is still current.
            if read_only.len() <= 1 {
                return Ok(());
            }
            return if self.validate(&read_only).await {
                Ok(())
            } else {
                Err(Abort::Conflict)
            };
        }
        let mut partitions: Vec<u32> = self.writes.iter().map(|w| w.partition).collect();
        partitions.sort_unstable();
        partitions.dedup();
        let mut primaries: Vec<u16> = partitions.iter().map(|&p| placement.primary(p)).collect();
        primaries.sort_unstable();
        primaries.dedup();
        let mut backups: Vec<u16> = partitions
            .iter()
            .flat_map(|&p| placement.backups(p).iter().copied())
            .collect();
        backups.sort_unstable();
        backups.dedup();
        let at_primary = |node: u16| move |w: &&Write| placement.primary(w.partition) == node;
        let at_backup =
            |node: u16| move |w: &&Write| placement.backups(w.partition).contains(&node);

        // Every message of the commit is checked against the limits before anything is
        // reserved or locked: a refusal after LOCK would leave locks behind.
        let too_large = |len: usize| len > ferrotx_wire::MAX_MESSAGE_BYTES as usize;
        if self.writes.len() > crate::messages::ITEMS_MAX
            || partitions.len() > crate::messages::ITEMS_MAX
            || primaries.iter().any(|&n| {
                too_large(LockRecord::encoded_len(
                    partitions.len(),
                    self.writes.iter().filter(at_primary(n)),
                ))
            })
            || backups.iter().any(|&n| {
                too_large(LockRecord::encoded_len(
                    partitions.len(),
                    self.writes.iter().filter(at_backup(n)),
                ))
            })
        {
            return Err(Abort::TooLarge);
        }

        // Log space at every backup, and with it the transaction's id.
        let counter = coordinator.reserve_log_space(self.co, &backups).await?;
        let tx = TxId {
            configuration: coordinator.configuration,
            node: coordinator.local.node(),
            thread: coordinator.local.thread(),
            incarnation: coordinator.incarnation,
            counter,
        };
        self.tx = Some(tx);
        let mark = coordinator.truncation_mark();
        let abort = |abort: Abort| {
            // No record was sent: the reservations are free again.
            coordinator
                .log_space
                .borrow_mut()
                .release(&backups, counter);
            abort
        };

        // 1. LOCK at every written primary. Each answers with the versions it locked at,
        // which blind writes (`Txn::put`) learn here for their commit-backup records.
        coordinator.count(|s| s.lock_messages += primaries.len() as u64);
        let blind = self.writes.iter().any(|w| w.version == VERSION_ANY);
        let mut versions: Vec<(u16, Vec<u64>)> = Vec::new();
        let answers = {
            let writes = &self.writes;
            coordinator
                .round(
                    self.co,
                    request_type::LOCK,
                    Participant::lock,
                    &primaries,
                    |node, buffer| {
                        encode_record(
                            &tx,
                            mark,
                            &partitions,
                            writes.iter().filter(at_primary(node)),
                            buffer,
                        )
                    },
                    |node, answer| {
                        if answer.first() != Some(&1) {
                            return false;
                        }
                        if blind {
                            let locked_at = answer[1..]
                                .chunks_exact(8)
                                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                                .collect();
                            versions.push((node, locked_at));
                        }
                        true
                    },
                )
                .await
        };
        let locked: Vec<u16> = answers
            .iter()
            .filter(|(_, granted)| *granted)
            .map(|(n, _)| *n)
            .collect();
        if locked.len() < primaries.len() {
            self.release(&locked).await;
            return Err(abort(Abort::Conflict));
        }
        for (node, locked_at) in versions {
            let here = self
                .writes
                .iter_mut()
                .filter(|w| placement.primary(w.partition) == node);
            for (write, version) in here.zip(locked_at) {
                write.version = version;
            }
        }
        let writes = &self.writes;
        let record = |writes_here: &dyn Fn(&&Write) -> bool, buffer: &mut Vec<u8>| {
            encode_record(
                &tx,
                mark,
                &partitions,
                writes.iter().filter(writes_here),
                buffer,
            );
        };
        // 2. VALIDATE what was read but not written.
        if !read_only.is_empty() && !self.validate(&read_only).await {
            self.release(&locked).await;
            return Err(abort(Abort::Conflict));
        }
        // 3. COMMIT-BACKUP at every backup of a written partition.
        coordinator.count(|s| s.commit_backup_messages += backups.len() as u64);
        let answers = coordinator
            .round(
                self.co,
                request_type::COMMIT_BACKUP,
                Participant::commit_backup,
                &backups,
                |node, buffer| record(&at_backup(node), buffer),
                yes,
            )
            .await;
        assert!(
            answers.iter().all(|(_, logged)| *logged),
            "a backup refused a commit record: the configuration is inconsistent"
        );
        {
            let mut space = coordinator.log_space.borrow_mut();
            for &(node, _) in &answers {
                space.acknowledged(node, mark);
            }
        }
        // 4. COMMIT-PRIMARY. Reported once the primaries acknowledged (FaRM reports at the
        // first; with batches the coroutine resumes when all have).
        coordinator
            .round(
                self.co,
                request_type::COMMIT_PRIMARY,
                Participant::commit_primary,
                &locked,
                |_, buffer| encode_tx(&tx, buffer),
                yes,
            )
            .await;
        Ok(())
    }

    /// Whether a VALIDATE message would carry more items than a message may.
    fn validation_too_large(&self, items: &[ReadItem]) -> bool {
        if items.len() <= crate::messages::ITEMS_MAX {
            return false;
        }
        let placement = &*self.coordinator.placement;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes
            .chunk_by(|a, b| a == b)
            .any(|same| same.len() > crate::messages::ITEMS_MAX)
    }

    async fn validate(&self, items: &[ReadItem]) -> bool {
        let placement = &*self.coordinator.placement;
        let mut nodes: Vec<u16> = items
            .iter()
            .map(|r| placement.primary(r.partition))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let answers = self
            .coordinator
            .round(
                self.co,
                request_type::VALIDATE,
                Participant::validate,
                &nodes,
                |node, buffer| {
                    encode_validate(
                        items
                            .iter()
                            .filter(|r| placement.primary(r.partition) == node),
                        buffer,
                    )
                },
                yes,
            )
            .await;
        answers.iter().all(|(_, valid)| *valid)
    }

    /// Releases the locks taken at `nodes` (ABORT).
    async fn release(&self, nodes: &[u16]) {
        let Some(tx) = self.tx else { return };
        self.coordinator
            .round(
                self.co,
                request_type::ABORT,
                Participant::abort,
                nodes,
                |_, buffer| encode_tx(&tx, buffer),
                yes,
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ferrotx_exec::Executor;
    use ferrotx_rpc::{Config, Engine};
    use ferrotx_store::{Partition, PartitionId};

    const KV: TableId = TableId(1);

    /// Two partitions, both with their primary on node 0 and no backup: every read and
    /// commit of a coordinator on node 0 stays in memory, so its coroutines finish
    /// within one `Executor::run`.
    struct OneNode;

    impl Placement for OneNode {
        fn partition_of(&self, _: TableId, key: &Key) -> u32 {
            u32::from(key.as_bytes()[0] % 2)
        }
        fn primary(&self, _: u32) -> u16 {
            0
        }
        fn backups(&self, _: u32) -> &[u16] {
            &[]
        }
    }

    /// A coordinator of node 0 over two partitions, with its executor.
    fn one_node() -> (Executor, Rc<Coordinator>, [Arc<Partition>; 2]) {
        let local = EndpointId::new(0, 0);
        let schema: Arc<[TableSpec]> = Arc::from(vec![TableSpec::variable(1, "kv", 1 << 20)]);
        let partitions = [0, 1].map(|id| Arc::new(Partition::new(PartitionId(id), &schema)));
        let mut store = NodeStore::new();
        for partition in &partitions {
            store.host(Role::Primary, partition.clone());
        }
        let participant = Rc::new(RefCell::new(Participant::new(Arc::new(store))));
        let coordinator = Coordinator::new(local, 1, 1, participant, Arc::new(OneNode), schema);
        let executor = Executor::new(Engine::new(local, Config::default()));
        (executor, Rc::new(coordinator), partitions)
    }

    /// Runs `body` as a coroutine to its end and returns its result.
    fn run<R: 'static>(
        executor: &mut Executor,
        coordinator: &Rc<Coordinator>,
        body: impl AsyncFnOnce(&Co, &Coordinator) -> R + 'static,
    ) -> R {
        let result = Rc::new(RefCell::new(None));
        let (slot, coordinator) = (result.clone(), coordinator.clone());
        executor.spawn(move |co| async move {
            *slot.borrow_mut() = Some(body(&co, &coordinator).await);
        });
        for _ in 0..100 {
            executor.run();
            if executor.live() == 0 {
                break;
            }
        }
        result.take().expect("the coroutine finished")
    }

    fn key(first: u8, rest: u8) -> Key {
        Key::from_bytes(&[first, rest]).unwrap()
    }

    #[test]
    fn a_transaction_reports_the_versions_it_read() {
        let (mut executor, coordinator, partitions) = one_node();
        partitions[0].load(KV, key(0, 1), b"one").unwrap();
        let versions = run(&mut executor, &coordinator, async |co, coordinator| {
            // Version 1 after loading; commit a new value.
            let mut txn = coordinator.begin(co);
            txn.read(KV, key(0, 1)).await.unwrap();
            txn.put(KV, key(0, 1), Some(b"two".to_vec())).unwrap();
            txn.commit().await.unwrap();
            // A new transaction reads it at version 2; an absent key at 0; a blind
            // write reads nothing.
            let mut txn = coordinator.begin(co);
            txn.read_many(KV, &[key(0, 1), key(1, 9)]).await.unwrap();
            txn.put(KV, key(1, 7), Some(b"blind".to_vec())).unwrap();
            [
                txn.read_version(KV, &key(0, 1)),
                txn.read_version(KV, &key(1, 9)),
                txn.read_version(KV, &key(1, 7)),
                txn.read_version(TableId(9), &key(0, 1)),
            ]
        });
        assert_eq!(versions, [Some(2), Some(0), None, None]);
    }

    #[test]
    fn scans_and_counts_visit_every_present_object_of_a_partition() {
        let (mut executor, coordinator, partitions) = one_node();
        for i in 0..50u8 {
            let partition = &partitions[usize::from(i % 2)];
            partition.load(KV, key(i % 2, i), &[i; 3]).unwrap();
        }
        // A deleted key is not present: lock at its version, install nothing.
        partitions[1].lock(KV, &key(1, 1), 1).unwrap().unwrap();
        partitions[1].install(KV, &key(1, 1), None).unwrap();
        let (pages, counts, refused) = run(&mut executor, &coordinator, async |co, coordinator| {
            let mut pages = Vec::new();
            for partition in [0, 1] {
                let (mut cursor, mut seen) = (0, Vec::new());
                loop {
                    let page = coordinator
                        .scan_partition(co, partition, KV, cursor, 7)
                        .await
                        .unwrap();
                    assert!(page.visited <= 7);
                    seen.extend(page.objects);
                    cursor = page.next_cursor;
                    if cursor == 0 {
                        break;
                    }
                }
                pages.push(seen);
            }
            let counts = [
                coordinator.count_present(co, KV, &[0]).await.unwrap(),
                coordinator.count_present(co, KV, &[0, 1]).await.unwrap(),
            ];
            let refused = coordinator
                .scan_partition(co, 0, TableId(9), 0, 7)
                .await
                .unwrap_err();
            (pages, counts, refused)
        });
        // In insertion order, each once, with its value; the deleted key left out.
        let expected = |first: u8| -> Vec<(Key, Vec<u8>)> {
            (0..50u8)
                .filter(|i| i % 2 == first && (first, *i) != (1, 1))
                .map(|i| (key(first, i), vec![i; 3]))
                .collect()
        };
        assert_eq!(pages[0], expected(0));
        assert_eq!(pages[1], expected(1));
        assert_eq!(counts, [25, 49]);
        assert_eq!(
            refused,
            Abort::Refused(StoreError::UnknownTable(TableId(9)))
        );
    }

    #[test]
    fn the_truncation_mark_covers_only_finished_prefixes() {
        let mut t = Truncation::default();
        t.finish(2);
        assert_eq!(t.mark, 0);
        t.finish(1);
        assert_eq!(t.mark, 2);
        t.finish(4);
        t.finish(3);
        assert_eq!(t.mark, 4);
        assert!(t.done_above_mark.is_empty());
    }

    #[test]
    fn log_space_is_reserved_per_backup_and_freed_by_acknowledged_marks() {
        let mut space = LogSpace::new(2);
        // Transaction 1 logs at nodes 1 and 2, transaction 2 at node 1 only.
        assert!(space.try_reserve(&[1, 2], 1));
        assert!(space.try_reserve(&[1], 2));
        // Node 1 is full: a third transaction there waits, nothing is reserved for it.
        assert_eq!(space.full(&[1, 2]).collect::<Vec<_>>(), vec![1]);
        assert!(!space.try_reserve(&[2, 1], 3));
        assert_eq!((space.held(1), space.held(2)), (2, 1));
        // A mark that covers nothing there frees nothing; acknowledgements are per node.
        space.acknowledged(1, 0);
        space.acknowledged(2, 1);
        assert_eq!((space.held(1), space.held(2)), (2, 0));
        // Node 1 acknowledges mark 1: transaction 1's record there is gone.
        space.acknowledged(1, 1);
        assert!(space.try_reserve(&[1, 2], 3));
        assert_eq!((space.held(1), space.held(2)), (2, 1));
        // An older mark arriving late changes nothing.
        space.acknowledged(1, 0);
        assert_eq!(space.held(1), 2);
        // Transaction 3 aborts before COMMIT-BACKUP: its reservations are returned.
        space.release(&[1, 2], 3);
        assert_eq!((space.held(1), space.held(2)), (1, 0));
        // A mark covering everything empties the node.
        space.acknowledged(1, 10);
        assert_eq!(space.held(1), 0);
        // No backups (a single replica): always room.
        assert!(space.try_reserve(&[], 4));
    }

    #[test]
    fn a_full_log_never_admits_more_than_its_limit() {
        // Random reservations, releases and acknowledgements: the count per node never
        // exceeds the limit and always covers every record not yet acknowledged.
        let mut space = LogSpace::new(3);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut logged: Vec<(u16, u64)> = Vec::new();
        let mut marks = [0u64; 4];
        for counter in 1..2000u64 {
            let nodes: Vec<u16> = (0..4u16).filter(|_| next() % 2 == 0).collect();
            if space.try_reserve(&nodes, counter) {
                if next() % 4 == 0 {
                    space.release(&nodes, counter);
                } else {
                    logged.extend(nodes.iter().map(|&n| (n, counter)));
                }
            }
            let node = (next() % 4) as u16;
            let mark = counter.saturating_sub(next() % 8);
            space.acknowledged(node, mark);
            marks[usize::from(node)] = marks[usize::from(node)].max(mark);
            for n in 0..4u16 {
                let outstanding = logged
                    .iter()
                    .filter(|&&(m, c)| m == n && c > marks[usize::from(n)])
                    .count();
                assert!(space.held(n) <= 3);
                assert_eq!(space.held(n), outstanding);
            }
        }
    }
}
