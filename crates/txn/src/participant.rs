//! The participant side of the protocol: what a node does as primary and as backup when
//! coordinators' messages arrive. One `Participant` per worker thread (coordinator thread
//! t talks to participant thread t of every node); the partitions are shared by the
//! node's threads.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ferrotx_rpc::{Engine, HandlerError};
use ferrotx_store::{Memory, Partition, VERSION_MAX};
use ferrotx_wire::{RequestType, ViewId};
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use ferrotx_store::Key;

use crate::answer::Answer;
use crate::messages::{
    CoordinatorId, ITEMS_MAX, ReadStatus, RecordView, ScanStatus, TxId, VERSION_ANY, decode_count,
    decode_read, decode_scan, decode_truncate, decode_tx, decode_validate, encode_count_response,
    encode_read_response, finish_scan_response, record_without_writes_of, set_record_versions,
    start_scan_response,
};
use crate::reservation::{Age, Reservations};
use crate::store_scan::scan_page;

pub(crate) mod doubts;
mod recovery;
pub mod restore;

pub(crate) use recovery::HeldRecord;
pub use recovery::RecoveryStats;

/// A recovery coordinator's entry for a transaction first heard of in `view`.
pub(crate) fn recovery_entry(view: ViewId) -> recovery::Recovering {
    recovery::Recovering {
        view,
        partitions: Vec::new(),
        votes: BTreeMap::new(),
        since_ns: 0,
    }
}

/// Records a backup keeps per coordinator thread before they are truncated. The
/// coordinator reserves a record at each backup of a transaction before it starts
/// committing, and counts it until that backup acknowledged a truncation mark covering
/// it, so no log ever holds more (docs/transactions.md, "Log space"). 1,024 covers 20
/// coroutines with many transactions each between two truncations.
pub const LOG_RECORDS_MAX: usize = 1024;

/// Record buffers a participant keeps for reuse; more are freed.
const SPARE_BUFFERS_MAX: usize = 256;

/// Largest buffer kept for reuse: records of small transactions fit, and a small record
/// never holds on to a large transaction's buffer.
const SPARE_BUFFER_BYTES_MAX: usize = 16 << 10;

/// Most objects one SCAN request visits: its answer lists at most [`ITEMS_MAX`].
pub const SCAN_OBJECTS_MAX: u32 = ITEMS_MAX as u32;

/// Bytes of a SCAN answer past which it takes no more objects. A few hundred KiB keeps one
/// scan round trip short and far below the RPC layer's message limit (1 MiB and 64 KiB).
/// A page stops before the object that would pass it, unless that object is its first:
/// one object always fits a message, as a value is at most 1 MiB
/// ([`crate::store_scan`]).
pub const SCAN_RESPONSE_BYTES_MAX: usize = 256 << 10;

/// What a node is for a partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Its primary: reads, locks, validation and installs go here.
    Primary,
    /// One of its backups: commit-backup records are logged here and applied on truncation.
    Backup,
}

/// The partitions a node hosts, shared by its worker threads.
pub struct NodeStore {
    partitions: HashMap<u32, (Role, Arc<Partition>), FixedState>,
    /// Partitions this node became primary of in this view (a promoted backup), blocked
    /// until transaction-state recovery is done: how many worker threads still recover
    /// transactions that wrote them (docs/recovery.md, step 1).
    recovering: HashMap<u32, Arc<AtomicU32>, FixedState>,
    /// Objects reserved for transactions that lost attempts ([`crate::reservation`]).
    reservations: Reservations,
    /// Backups this node is filling in this view (data recovery, [`crate::refill`]),
    /// hosted as backups.
    fills: Vec<Arc<crate::refill::Fill>>,
}

impl Default for NodeStore {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeStore {
    /// A node hosting nothing yet.
    pub fn new() -> Self {
        Self {
            partitions: HashMap::with_hasher(FixedState::with_seed(0)),
            recovering: HashMap::with_hasher(FixedState::with_seed(0)),
            reservations: Reservations::default(),
            fills: Vec::new(),
        }
    }

    /// Hosts `partition` as a backup being filled, with its shared progress.
    pub fn host_filling(&mut self, partition: Arc<Partition>, fill: Arc<crate::refill::Fill>) {
        debug_assert_eq!(partition.id().0, fill.partition());
        self.host(Role::Backup, partition);
        self.fills.push(fill);
    }

    /// The backups this node is filling in this view.
    pub fn fills(&self) -> &[Arc<crate::refill::Fill>] {
        &self.fills
    }

    /// Blocks partition `id` (hosted as primary) until `threads` worker threads each
    /// called [`NodeStore::recovered`] for it.
    pub fn block(&mut self, id: u32, threads: u32) {
        if threads > 0 {
            self.recovering
                .insert(id, Arc::new(AtomicU32::new(threads)));
        }
    }

    /// Whether partition `id` is blocked by recovery: it answers no READ, LOCK or VALIDATE.
    #[inline]
    pub fn is_recovering(&self, id: u32) -> bool {
        !self.recovering.is_empty()
            && self
                .recovering
                .get(&id)
                .is_some_and(|n| n.load(Ordering::Acquire) > 0)
    }

    /// One worker thread finished recovering partition `id`: the last one unblocks it.
    pub fn recovered(&self, id: u32) {
        if let Some(n) = self.recovering.get(&id) {
            let _ = n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
        }
    }

    /// How many of the partitions blocked by recovery when this store was built are
    /// blocked still (some worker thread has not finished recovering it).
    pub fn blocked_now(&self) -> usize {
        self.recovering
            .values()
            .filter(|n| n.load(Ordering::Acquire) > 0)
            .count()
    }

    /// The partitions blocked by recovery when this store was built.
    pub fn blocked(&self) -> impl Iterator<Item = u32> + '_ {
        self.recovering.keys().copied()
    }

    /// Every partition hosted, with its role.
    pub fn hosted(&self) -> impl Iterator<Item = (u32, Role)> + '_ {
        self.partitions.iter().map(|(id, (role, _))| (*id, *role))
    }

    /// Hosts `partition` in `role`.
    pub fn host(&mut self, role: Role, partition: Arc<Partition>) {
        self.partitions.insert(partition.id().0, (role, partition));
    }

    /// The partition `id` if hosted in `role`.
    pub fn get(&self, id: u32, role: Role) -> Option<&Partition> {
        match self.partitions.get(&id) {
            Some((r, partition)) if *r == role => Some(partition),
            _ => None,
        }
    }

    /// The reservations of this node's primaries ([`crate::reservation`]).
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// The node's copy of partition `id`, whatever its role (a backup promoted to primary
    /// by a reconfiguration still applies the records it logged as a backup).
    pub fn get_any(&self, id: u32) -> Option<&Partition> {
        self.partitions.get(&id).map(|(_, partition)| &**partition)
    }

    /// The partitions whose copy here `next` no longer hosts, or hosts as another copy
    /// (one the node dropped and was given again, empty, to fill).
    pub fn replaced_in(&self, next: &NodeStore) -> Vec<u32> {
        self.partitions
            .iter()
            .filter(|(id, (_, copy))| {
                next.partitions
                    .get(*id)
                    .is_none_or(|(_, other)| !Arc::ptr_eq(copy, other))
            })
            .map(|(id, _)| *id)
            .collect()
    }
}

/// Counters of one participant.
#[derive(Clone, Copy, Default, Debug)]
pub struct ParticipantStats {
    /// LOCK requests that took every lock.
    pub locks_granted: u64,
    /// LOCK requests refused (a version changed, an object locked, a bad write).
    pub locks_refused: u64,
    /// LOCK requests refused for memory: this node past its limit, or a copy of the
    /// partition on a node past its ([`Answer::OutOfMemory`]; not the simulator's fault point).
    pub locks_refused_memory: u64,
    /// Transactions installed by COMMIT-PRIMARY.
    pub commits: u64,
    /// Transactions whose locks were released by ABORT.
    pub aborts: u64,
    /// Records appended to backup logs.
    pub records_logged: u64,
    /// Records applied to backup copies at truncation.
    pub records_applied: u64,
    /// Most records any one coordinator thread's log held here at once.
    pub log_records_high_water: u64,
    /// Requests refused with a handler error (malformed, not hosted, a version or a
    /// count out of range, a full log), through [`Participant::handle`].
    pub requests_refused: u64,
}

/// What this participant thread knows of one coordinator thread: its log here (as a
/// backup), its truncation mark, and the transactions it installed here (as a primary)
/// that no mark seen here covers yet (their votes are commit-primary).
#[derive(Default)]
struct BackupLog {
    /// COMMIT-BACKUP records by counter, as the bytes they arrived in (checked by
    /// `RecordView::parse`).
    records: BTreeMap<u64, Vec<u8>>,
    /// Records recovery replicated here (REPLICATE-TX-STATE: a primary's LOCK record, or
    /// another backup's record), by counter and the partition they were sent for: lock
    /// records, applied only by a commit decision and dropped by a truncation mark (a
    /// transaction that ended with only these here did not commit in the normal case).
    replicated: BTreeMap<(u64, u32), Vec<u8>>,
    /// The highest truncation mark seen: every transaction up to it ended.
    truncated_up_to: u64,
    /// Counters installed here by COMMIT-PRIMARY above the mark (a few: a mark follows
    /// within the coordinator's next commits).
    installed: VecDeque<u64>,
}

/// The participant state of one worker thread.
pub struct Participant {
    store: Arc<NodeStore>,
    /// LOCK records of transactions locked at this primary, as the bytes they arrived in,
    /// until COMMIT-PRIMARY or ABORT.
    locked: HashMap<TxId, Vec<u8>, FixedState>,
    /// Buffers of records freed, reused for the next ones: a commit stores its records
    /// without allocating once the participant is warm.
    spare: Vec<Vec<u8>>,
    /// Backup logs, by coordinator (node, thread, incarnation).
    logs: HashMap<CoordinatorId, BackupLog, FixedState>,
    scratch: Vec<u8>,
    /// Objects one step of a scan found, before they are copied into the answer.
    scan_scratch: Vec<(Key, Vec<u8>)>,
    /// Locked keys a FETCH found, before they are copied into the answer.
    fetch_locked: Vec<Key>,
    stats: ParticipantStats,
    /// The view this participant serves (LOCK and COMMIT-* of older views are
    /// recovery's).
    view: ViewId,
    /// Recovery's state in this thread (docs/recovery.md).
    pub(crate) recovery: recovery::RecoveryState,
    /// Results of shipped operations whose records this replica applied (or whose batch
    /// this primary ran), by origin ([`crate::ship`]).
    pub(crate) shipped: crate::ship::ShipResults,
    /// The age of each transaction locked here by an aged LOCK: its COMMIT-PRIMARY
    /// releases its reservations ([`crate::reservation`]). Empty without contention.
    aged_locks: HashMap<TxId, Age, FixedState>,
    /// The worker's clock (reservations expire by it); none: time stands at 0.
    clock: Option<std::rc::Weak<ferrotx_exec::Shared>>,
    /// The node's memory budget: past its limit, LOCK refuses writes that would grow
    /// the store ([`Answer::OutOfMemory`]).
    memory: Arc<Memory>,
    /// The disk this participant logs to, and the answers waiting for it (issue 32:
    /// [`crate::durable`]); none in `memory` mode.
    pub(crate) durable: Option<crate::durable::Durable>,
    pub(crate) log_stats: crate::durable::LogStats,
    /// `sync` mode: the position of each LOCK record logged here, until its transaction
    /// installs or aborts ([`crate::durable::RECORD_LOCK`]).
    pub(crate) lock_lsn: HashMap<TxId, u64, FixedState>,
    /// Transactions in doubt that a restart from disk gave back ([`restore`]): in
    /// `locked`, but their objects are not locked in the store (the partitions are
    /// blocked until recovery decides them, and a write recovery applies meanwhile must
    /// not be skipped for a lock of an older version). A commit applies their writes at
    /// their versions; an abort drops them.
    pub(crate) restored_locks: hashbrown::HashSet<TxId, FixedState>,
}

/// A participant's handler of one request type, as `register` installs them.
pub type ParticipantHandler = fn(&mut Participant, &[u8], &mut Vec<u8>) -> Result<(), HandlerError>;

const MALFORMED: HandlerError = HandlerError("malformed message");
const VERSION_TOO_LARGE: HandlerError =
    HandlerError("a write's version is past the largest an object holds");
const NOT_HOSTED: HandlerError = HandlerError("partition not hosted in that role here");

impl Participant {
    /// A participant over the partitions of `store`.
    pub fn new(store: Arc<NodeStore>) -> Self {
        Self {
            store,
            locked: HashMap::with_hasher(FixedState::with_seed(0)),
            logs: HashMap::with_hasher(FixedState::with_seed(0)),
            spare: Vec::new(),
            scratch: Vec::new(),
            scan_scratch: Vec::new(),
            fetch_locked: Vec::new(),
            stats: ParticipantStats::default(),
            view: ViewId::NONE,
            recovery: recovery::RecoveryState::default(),
            shipped: crate::ship::ShipResults::new(crate::ship::RESULTS_MAX),
            aged_locks: HashMap::with_hasher(FixedState::with_seed(0)),
            clock: None,
            memory: Arc::new(Memory::unlimited()),
            durable: None,
            log_stats: crate::durable::LogStats::default(),
            lock_lsn: HashMap::with_hasher(FixedState::with_seed(0)),
            restored_locks: hashbrown::HashSet::with_hasher(FixedState::with_seed(0)),
        }
    }

    /// Refuses writes that would grow the store while `memory` is past its limit.
    pub fn set_memory(&mut self, memory: Arc<Memory>) {
        self.memory = memory;
    }

    /// Times reservations by `worker`'s clock ([`ferrotx_exec::Shared::now_ns`]).
    pub fn set_clock(&mut self, worker: &Rc<ferrotx_exec::Shared>) {
        self.clock = Some(Rc::downgrade(worker));
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.clock
            .as_ref()
            .and_then(std::rc::Weak::upgrade)
            .map_or(0, |shared| shared.now_ns())
    }

    /// Counters so far.
    pub fn stats(&self) -> ParticipantStats {
        self.stats
    }

    /// Replaces the partitions served in view `configuration` (a reconfiguration changed
    /// roles). A backup promoted to primary applies nothing here: its partition is
    /// blocked until transaction-state recovery decided every transaction its replicas
    /// hold records of, and applied the committed ones (docs/recovery.md).
    ///
    /// What this thread holds for a copy the new store no longer has (or has as another
    /// copy) is forgotten: the locks of its LOCK records were in that copy, and its logged
    /// and replicated records were for it. A node keeps its life when it is suspended and
    /// readmitted, so it may come back to views that dropped the copy while others
    /// decided those transactions without it (and may give it the partition again, as an
    /// empty copy to fill): applying, installing or unlocking them there would change
    /// objects their transactions never locked, and voting them would decide again what
    /// was decided without this node.
    pub fn set_store(&mut self, view: ViewId, store: Arc<NodeStore>) {
        self.view = self.view.max(view);
        let gone = self.store.replaced_in(&store);
        self.store = store;
        // The new store holds no reservations: the owners' next attempts reserve again.
        self.aged_locks.clear();
        if !gone.is_empty() {
            self.forget_copies(&gone);
        }
    }

    /// Drops the writes of partitions `gone` from every record this thread holds, and the
    /// records left with none (see [`Participant::set_store`]).
    fn forget_copies(&mut self, gone: &[u32]) {
        let dropped = |p: u32| gone.contains(&p);
        let touches = |bytes: &[u8]| {
            RecordView::parse(bytes).is_ok_and(|r| r.writes().any(|w| dropped(w.partition)))
        };
        let txs: Vec<TxId> = self
            .locked
            .iter()
            .filter(|(_, bytes)| touches(bytes))
            .map(|(tx, _)| *tx)
            .collect();
        for tx in txs {
            let bytes = self.locked.remove(&tx).expect("listed above");
            if let Some(kept) = record_without_writes_of(&bytes, dropped) {
                self.locked.insert(tx, kept);
            }
        }
        for log in self.logs.values_mut() {
            let counters: Vec<u64> = log
                .records
                .iter()
                .filter(|(_, bytes)| touches(bytes))
                .map(|(c, _)| *c)
                .collect();
            for c in counters {
                let bytes = log.records.remove(&c).expect("listed above");
                if let Some(kept) = record_without_writes_of(&bytes, dropped) {
                    log.records.insert(c, kept);
                }
            }
            log.replicated.retain(|&(_, p), _| !dropped(p));
            let keys: Vec<(u64, u32)> = log
                .replicated
                .iter()
                .filter(|(_, bytes)| touches(bytes))
                .map(|(k, _)| *k)
                .collect();
            for k in keys {
                let bytes = log.replicated.remove(&k).expect("listed above");
                if let Some(kept) = record_without_writes_of(&bytes, dropped) {
                    log.replicated.insert(k, kept);
                }
            }
        }
    }

    /// The node's partitions served.
    pub fn store(&self) -> &Arc<NodeStore> {
        &self.store
    }

    /// Transactions locked here and not yet committed or aborted.
    pub fn locked_transactions(&self) -> usize {
        self.locked.len()
    }

    /// The handler of `request_type`, if participants handle it: the one table of which
    /// request of the registry ([`RequestType`]) runs what here, for the engine
    /// ([`Participant::register`]) and for a coordinator's requests to its own node.
    pub fn handler(request_type: RequestType) -> Option<ParticipantHandler> {
        let handler: ParticipantHandler = match request_type {
            RequestType::Read => Self::read,
            RequestType::Lock => Self::lock,
            RequestType::LockAged => Self::lock_aged,
            RequestType::Validate => Self::validate,
            RequestType::ValidateAged => Self::validate_aged,
            RequestType::CommitBackup => Self::commit_backup,
            RequestType::CommitPrimary => Self::commit_primary,
            RequestType::Abort => Self::abort,
            RequestType::Truncate => Self::truncate_message,
            RequestType::Scan => Self::scan,
            RequestType::Count => Self::count,
            RequestType::Fetch => Self::fetch,
            RequestType::ReclaimCheck => Self::reclaim_check,
            RequestType::Reclaim => Self::reclaim,
            RequestType::NeedRecovery => Self::need_recovery,
            RequestType::ReplicateTxState => Self::replicate_tx_state,
            RequestType::RecoveryVote => Self::recovery_vote,
            RequestType::RequestVote => Self::request_vote,
            RequestType::CommitRecovery => Self::commit_recovery,
            RequestType::AbortRecovery => Self::abort_recovery,
            RequestType::TruncateRecovery => Self::truncate_recovery,
            // The engine's own, and SHIP's queue (`crate::ship::Shipping::register`).
            RequestType::Connect | RequestType::Ship => return None,
        };
        Some(handler)
    }

    /// Registers this participant's handlers ([`Participant::handler`]) on `engine`.
    pub fn register(participant: &Rc<RefCell<Self>>, engine: &mut Engine) {
        for &request_type in RequestType::ALL {
            let Some(handler) = Self::handler(request_type) else {
                continue;
            };
            let participant = participant.clone();
            engine.register(
                request_type.into(),
                Box::new(move |request, response| {
                    participant
                        .borrow_mut()
                        .handle(handler, request.payload, response)
                }),
            );
        }
    }

    /// Runs `handler` on a request's `payload`, counting its refusal if it refuses
    /// ([`ParticipantStats::requests_refused`]): what [`Participant::register`] installs.
    pub fn handle(
        &mut self,
        handler: ParticipantHandler,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let result = handler(self, payload, response);
        if result.is_err() {
            self.stats.requests_refused += 1;
        }
        result
    }

    /// FETCH (data recovery, [`crate::refill`]): a page of a partition's objects from this
    /// primary, for a backup being filled.
    pub fn fetch(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let request = crate::refill::decode_fetch(payload).map_err(|_| MALFORMED)?;
        let recovering = self.store.is_recovering(request.partition);
        let partition = self.store.get(request.partition, Role::Primary);
        crate::refill::answer_fetch(
            &request,
            partition,
            recovering,
            &mut self.fetch_locked,
            response,
        );
        Ok(())
    }

    /// RECLAIM-CHECK ([`crate::reclaim`]): for each tombstone named, whether this node's
    /// copy applied it and no record of this thread's logs (waiting to be applied, or
    /// replicated by recovery) writes its key. Refused while the copy is being filled,
    /// and at a primary whose recovery round has not replicated the partition's records.
    pub fn reclaim_check(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let request = crate::reclaim::decode_reclaim(payload).map_err(|_| MALFORMED)?;
        // A copy still being filled refuses (nothing is reclaimed until its fill ends): a
        // FETCH answer read before a delete may still be on its way, and applied after
        // the copy freed the key's tombstone, it would bring the key back here.
        let filling = self
            .store
            .fills()
            .iter()
            .any(|fill| fill.partition() == request.partition && !fill.is_done());
        // Nor while this thread's recovery round may still bring an older write of one of
        // its keys to a replica that never logged it (`Participant::recovery_replicated`).
        let copy = self
            .store
            .get_any(request.partition)
            .filter(|_| !filling && self.recovery_replicated(request.partition));
        let mut waiting = std::collections::BTreeSet::new();
        if copy.is_some() {
            for log in self.logs.values() {
                for bytes in log.records.values().chain(log.replicated.values()) {
                    let Ok(record) = RecordView::parse(bytes) else {
                        continue;
                    };
                    for write in record.writes() {
                        if write.partition == request.partition && write.table == request.table {
                            waiting.insert(write.key);
                        }
                    }
                }
            }
        }
        crate::reclaim::answer_check(&request, copy, |key| waiting.contains(key), response);
        Ok(())
    }

    /// RECLAIM ([`crate::reclaim`]): raise the keys' floors, then free the tombstones
    /// named that are still at their versions. Answers [`Answer::Refused`] if this node
    /// has no copy or could not raise a floor (the primary then keeps its tombstones).
    pub fn reclaim(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let request = crate::reclaim::decode_reclaim(payload).map_err(|_| MALFORMED)?;
        let done = self
            .store
            .get_any(request.partition)
            .and_then(|copy| crate::reclaim::apply_reclaim(&request, copy));
        Answer::granted_if(done.is_some()).encode(response);
        Ok(())
    }

    /// READ: the object's value and version from this primary.
    pub fn read(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let (partition, table, key) = decode_read(payload).map_err(|_| MALFORMED)?;
        if self.store.is_recovering(partition) {
            encode_read_response(ReadStatus::Recovering, 0, &[], response);
            return Ok(());
        }
        let Some(partition) = self.store.get(partition, Role::Primary) else {
            encode_read_response(ReadStatus::Refused, 0, &[], response);
            return Ok(());
        };
        let (status, version) = match partition.read(table, &key, &mut self.scratch) {
            Err(_) => (ReadStatus::Refused, 0),
            Ok(Ok(outcome)) if outcome.present => (ReadStatus::Present, outcome.version),
            Ok(Ok(outcome)) => (ReadStatus::Absent, outcome.version),
            Ok(Err(ferrotx_store::ReadError::Locked)) => (ReadStatus::Locked, 0),
            Ok(Err(ferrotx_store::ReadError::Contended)) => (ReadStatus::Contended, 0),
        };
        let value = if status == ReadStatus::Present {
            &self.scratch[..]
        } else {
            &[]
        };
        encode_read_response(status, version, value, response);
        Ok(())
    }

    /// LOCK (FaRM 4 step 1): lock every written object at the version read (or, for a
    /// blind write, at whatever version it has), or none. Answers [`Answer::Refused`] if
    /// not all were locked ([`Answer::OutOfMemory`] if refused for memory,
    /// [`Answer::Undecided`] for an older view's); else [`Answer::Granted`], then the
    /// version each write was locked at (8 bytes each, in the record's order), which a
    /// blind write's coordinator sends on to the backups.
    pub fn lock(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        self.lock_as(None, payload, response)
    }

    /// LOCK_AGED: LOCK for a transaction retried after it lost (its [`Age`], then the
    /// LOCK record). It also reserves every written object for that age, granted or not
    /// ([`crate::reservation`]), unless refused for memory (which no retry cures).
    pub fn lock_aged(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (age, record) = Age::decode(payload).ok_or(MALFORMED)?;
        self.lock_as(Some(age), record, response)
    }

    fn lock_as(
        &mut self,
        age: Option<Age>,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let record = RecordView::parse(payload).map_err(|_| MALFORMED)?;
        if record.write_count() == 0 {
            // A coordinator locks only where it writes. Granted, a LOCK with no writes
            // would be kept until a COMMIT-PRIMARY or ABORT its sender need never send,
            // and each naming another transaction, they would grow `locked` without
            // bound (issue 29).
            return Err(HandlerError("a LOCK with no writes"));
        }
        if record.tx.view < self.view {
            // A commit of an older view: its outcome is recovery's.
            Answer::Undecided.encode(response);
            return Ok(());
        }
        self.note_mark(&record);
        if self.locked.contains_key(&record.tx) {
            // The RPC layer runs a request at most once, so this is not a retry: refuse it
            // rather than lose track of the locks the first one holds.
            return Err(HandlerError("transaction already holds locks here"));
        }
        // Fault point: the primary refuses the LOCK as if an object were locked or
        // changed (it takes nothing), so the coordinator releases the other primaries'
        // locks and aborts with a conflict, as it must for a real one.
        if ferrotx_buggify::fires("txn.participant.lock.refuse") {
            self.stats.locks_refused += 1;
            Answer::Refused.encode(response);
            return Ok(());
        }
        // Past the memory limit, a write that would grow the store (a new key, a larger
        // value) refuses the whole LOCK, which takes nothing; deletes and writes that fit
        // where their objects are go on. Fault point: a LOCK that would grow the store
        // refused as if out of memory.
        let out_of_memory = self.out_of_memory(&record);
        if out_of_memory
            || ferrotx_buggify::fires("txn.participant.lock.out_of_memory")
                && self.grows_memory(&record)
        {
            // Only real refusals are counted.
            self.stats.locks_refused_memory += u64::from(out_of_memory);
            Answer::OutOfMemory.encode(response);
            return Ok(());
        }
        Answer::Granted.encode(response);
        let mut taken = 0;
        // The clock is read only where reservations are (contention).
        let reservations = self.store.reservations();
        let now_ns = if age.is_some() || !reservations.is_empty() {
            self.now_ns()
        } else {
            0
        };
        if let Some(age) = age {
            // Only objects this node serves as primary (a stale placement's LOCK reserves
            // nothing here).
            for write in record.writes() {
                if self.store.get(write.partition, Role::Primary).is_some() {
                    reservations.reserve((write.partition, write.table, write.key), age, now_ns);
                }
            }
        }
        let granted = record.writes().all(|write| {
            if self.store.is_recovering(write.partition) {
                return false;
            }
            // An object reserved for a transaction that goes before this one (it lost
            // more attempts) is not locked for it (wait-die's "die": this one aborts and
            // retries).
            if !reservations.admits((write.partition, write.table, write.key), age, now_ns) {
                return false;
            }
            let Some(partition) = self.store.get(write.partition, Role::Primary) else {
                return false;
            };
            // A value the table cannot hold fails the lock, so nothing is installed.
            if write
                .value
                .is_some_and(|v| partition.check_value(write.table, v).is_err())
            {
                return false;
            }
            let locked = if write.version == VERSION_ANY {
                partition.lock_any(write.table, &write.key)
            } else {
                partition
                    .lock(write.table, &write.key, write.version)
                    .map(|r| r.map(|()| write.version))
            };
            match locked {
                // A key at the largest version a header holds takes no more writes: its
                // commit would publish a version past it. No workload gets there, but a
                // FETCH from a broken primary may bring one (issue 29).
                Ok(Ok(version)) if version >= VERSION_MAX => {
                    let _ = partition.unlock(write.table, &write.key);
                    false
                }
                Ok(Ok(version)) => {
                    response.extend_from_slice(&version.to_le_bytes());
                    taken += 1;
                    true
                }
                _ => false,
            }
        });
        if !granted {
            for write in record.writes().take(taken) {
                self.primary_of(write.partition)
                    .unlock(write.table, &write.key)
                    .expect("locked above");
            }
            self.stats.locks_refused += 1;
            response.clear();
            Answer::Refused.encode(response);
            return Ok(());
        }
        self.stats.locks_granted += 1;
        if let Some(age) = age {
            self.aged_locks.insert(record.tx, age);
        }
        let mut bytes = self.keep(payload);
        // Kept with the versions locked (a blind write's record says "any"): recovery
        // may replicate it to backups, which apply it at those versions.
        set_record_versions(&mut bytes, &response[1..]).expect("checked when parsed");
        if self.waits_for_disk() {
            // On this primary's disk before it installs (`crate::durable`).
            match self.log_append(crate::durable::RECORD_LOCK, &bytes) {
                Ok(lsn) => {
                    self.lock_lsn.insert(record.tx, lsn);
                }
                Err(crate::durable::LogFailed(why)) => {
                    for write in record.writes() {
                        self.primary_of(write.partition)
                            .unlock(write.table, &write.key)
                            .expect("locked above");
                    }
                    self.aged_locks.remove(&record.tx);
                    self.recycle(bytes);
                    self.stats.locks_granted -= 1;
                    self.stats.locks_refused += 1;
                    return Err(HandlerError(why));
                }
            }
        }
        self.locked.insert(record.tx, bytes);
        Ok(())
    }

    /// True if a write of `record` to a partition this node is primary of would grow the
    /// store ([`Partition::grows`]).
    fn grows_memory(&self, record: &RecordView<'_>) -> bool {
        record.writes().any(|write| self.grows(&write))
    }

    fn grows(&self, write: &crate::messages::WriteRef<'_>) -> bool {
        self.store
            .get(write.partition, Role::Primary)
            .is_some_and(|p| p.grows(write.table, &write.key, write.value) == Ok(true))
    }

    /// True if `record` must be refused for memory: a write would grow the store of a
    /// partition whose primary (this node) is past its limit, or which has a copy on a
    /// node past its limit by the cluster manager's figures (its backups must not pass
    /// their limits either).
    /// A few loads when neither holds.
    fn out_of_memory(&self, record: &RecordView<'_>) -> bool {
        let over = self.memory.over();
        if !over && !self.memory.any_crowded() {
            return false;
        }
        record
            .writes()
            .any(|write| (over || self.memory.crowded(write.partition)) && self.grows(&write))
    }

    /// VALIDATE (step 2): [`Answer::Granted`] if every object is unlocked at the version
    /// read, else [`Answer::Refused`].
    pub fn validate(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        self.validate_as(None, payload, response)
    }

    /// VALIDATE_AGED: VALIDATE for a transaction retried after it lost (its [`Age`], then
    /// the request). If an object changed, it also reserves them all for that age, so
    /// that nothing later changes them before its next attempt ([`crate::reservation`]).
    pub fn validate_aged(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (age, request) = Age::decode(payload).ok_or(MALFORMED)?;
        self.validate_as(Some(age), request, response)
    }

    fn validate_as(
        &mut self,
        age: Option<Age>,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let items = decode_validate(payload).map_err(|_| MALFORMED)?;
        // Fault point: the primary finds a read stale although it is current, as if a
        // commit had changed it; the transaction aborts (read-write: before anything was
        // logged) with a conflict. Failing validation is always safe; passing it is not.
        if ferrotx_buggify::fires("txn.participant.validate.refuse") {
            Answer::Refused.encode(response);
            return Ok(());
        }
        let valid = items.iter().all(|item| {
            !self.store.is_recovering(item.partition)
                && self
                    .store
                    .get(item.partition, Role::Primary)
                    .is_some_and(|p| p.validate(item.table, &item.key, item.version) == Ok(true))
        });
        if !valid && let Some(age) = age {
            // What it read changed: reserve it against later writers for the next attempt.
            // Only on failure, since nothing releases what a validation reserved (no
            // COMMIT-PRIMARY comes here for objects only read): a reservation made when
            // validation passes would only hold others back for its 10 ms.
            let now_ns = self.now_ns();
            for item in &items {
                if self.store.get(item.partition, Role::Primary).is_some() {
                    self.store.reservations().reserve(
                        (item.partition, item.table, item.key),
                        age,
                        now_ns,
                    );
                }
            }
        }
        Answer::granted_if(valid).encode(response);
        Ok(())
    }

    /// COMMIT-BACKUP (step 3): append the record to its coordinator's log here, then
    /// apply and free the records its truncation mark covers (step 5).
    pub fn commit_backup(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let record = RecordView::parse(payload).map_err(|_| MALFORMED)?;
        if record.tx.view < self.view {
            Answer::Undecided.encode(response);
            return Ok(());
        }
        for write in record.writes() {
            let Some(partition) = self.store.get(write.partition, Role::Backup) else {
                return Err(NOT_HOSTED);
            };
            // What truncation will apply must be applicable: a version it can raise
            // (it applies the next one, which must fit an object's header), a table
            // this node has, a value that fits it (the primary checked the same at LOCK).
            // Refused here, or truncation would panic on it later (issue 29).
            if write.version >= VERSION_MAX {
                return Err(VERSION_TOO_LARGE);
            }
            if !partition.has_table(write.table)
                || write
                    .value
                    .is_some_and(|v| partition.check_value(write.table, v).is_err())
            {
                return Err(MALFORMED);
            }
        }
        let coordinator = (record.tx.node, record.tx.thread, record.tx.incarnation);
        // The record's own mark may free the space it needs.
        self.truncate(coordinator, record.truncate_up_to);
        let truncated_up_to = self.logs.get(&coordinator).map_or(0, |l| l.truncated_up_to);
        if record.tx.counter > truncated_up_to {
            let full = self
                .logs
                .get(&coordinator)
                .is_some_and(|l| l.records.len() >= LOG_RECORDS_MAX);
            if full {
                return Err(HandlerError(
                    "backup log full: the coordinator did not reserve space",
                ));
            }
            // On this node's disk before it is kept (and, in `sync` mode, before the
            // answer: `crate::durable`); refused if it cannot be.
            let lsn = self
                .log_append(crate::durable::RECORD_COMMIT_BACKUP, payload)
                .map_err(|crate::durable::LogFailed(why)| HandlerError(why))?;
            if let Some(durable) = &mut self.durable {
                durable.wait_for = lsn;
            }
            let bytes = self.keep(payload);
            let log = self.logs.entry(coordinator).or_default();
            let replaced = log.records.insert(record.tx.counter, bytes);
            let len = log.records.len() as u64;
            if let Some(old) = replaced {
                self.recycle(old);
            }
            self.stats.records_logged += 1;
            self.stats.log_records_high_water = self.stats.log_records_high_water.max(len);
        }
        Answer::Granted.encode(response);
        Ok(())
    }

    /// TRUNCATE: a coordinator's mark on its own.
    pub fn truncate_message(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (coordinator, mark) = decode_truncate(payload).map_err(|_| MALFORMED)?;
        self.truncate(coordinator, mark);
        Answer::Granted.encode(response);
        Ok(())
    }

    /// Applies and frees the records of `coordinator` up to counter `mark`.
    fn truncate(&mut self, coordinator: CoordinatorId, mark: u64) {
        let Some(log) = self.logs.get_mut(&coordinator) else {
            return;
        };
        if mark <= log.truncated_up_to {
            return;
        }
        log.truncated_up_to = mark;
        if log.installed.front().is_some_and(|&c| c <= mark) {
            // A transaction whose install still waits for the disk keeps its
            // commit-primary vote (its marker is logged): the coordinator may have been
            // answered and ended it, and a view change that drops the install leaves it to
            // recovery, which must commit it (review of session 12: a mark erasing the vote
            // let backups' "truncated" and this lock abort an acknowledged commit).
            let locked = &self.locked;
            log.installed.retain(|&c| {
                c > mark
                    || locked
                        .keys()
                        .any(|t| t.counter == c && (t.node, t.thread, t.incarnation) == coordinator)
            });
        }
        if !log.replicated.is_empty() {
            log.replicated.retain(|&(counter, _), _| counter > mark);
        }
        while let Some(entry) = log.records.first_entry() {
            if *entry.key() > mark {
                break;
            }
            let bytes = entry.remove();
            let record = RecordView::parse(&bytes).expect("checked when logged");
            self.shipped.remember(record.note());
            for write in record.writes() {
                // Logged as a backup; since then a reconfiguration may have promoted this
                // copy (it applies the committed write all the same) or, later, moved it.
                if let Some(partition) = self.store.get(write.partition, Role::Backup) {
                    partition
                        .apply(write.table, &write.key, write.version + 1, write.value)
                        .expect("checked by the primary's lock");
                } else if let Some(partition) = self.store.get_any(write.partition) {
                    // Promoted since: applied when it was (`set_store`), and a
                    // transaction may hold the object locked now.
                    let _ = partition.apply_unless_locked(
                        write.table,
                        &write.key,
                        write.version + 1,
                        write.value,
                    );
                }
            }
            self.stats.records_applied += 1;
            if self.spare.len() < SPARE_BUFFERS_MAX && bytes.capacity() <= SPARE_BUFFER_BYTES_MAX {
                self.spare.push(bytes);
            }
        }
    }

    /// COMMIT-PRIMARY (step 4): install the locked transaction's writes and unlock.
    pub fn commit_primary(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let tx = decode_tx(payload).map_err(|_| MALFORMED)?;
        if tx.view < self.view {
            Answer::Undecided.encode(response);
            return Ok(());
        }
        self.install_locked(&tx, false);
        Answer::Granted.encode(response);
        Ok(())
    }

    /// Installs the writes of `tx` locked here and unlocks them; remembers that it did
    /// (a commit-primary vote) until a truncation mark covers it. False if `tx` holds no
    /// locks here.
    ///
    /// In `sync` mode, once its LOCK record and its INSTALLED marker are durable here:
    /// until then the transaction keeps its locks (no reader sees its writes) and the
    /// install waits ([`crate::durable`]), as does the answer of the handler that asked.
    ///
    /// `decided`: recovery decided the commit, so a later view change does not drop the
    /// install that waits (nothing would install it then, and its locks would stay).
    pub(crate) fn install_locked(&mut self, tx: &TxId, decided: bool) -> bool {
        if !self.locked.contains_key(tx) {
            return false;
        }
        if let Some(&lock_lsn) = self.lock_lsn.get(tx) {
            // `sync` mode: the commit is on this disk (INSTALLED after the LOCK record)
            // before the answer goes, though the install may come first: a truncation
            // mark covering the transaction (the coordinator sends one only after this
            // answer) then never reaches a backup's disk while a restart would find the
            // transaction in doubt here, locked (recovery would abort a commit whose
            // other copies applied it: `power` seeds).
            self.scratch.clear();
            crate::messages::encode_tx(tx, &mut self.scratch);
            let scratch = std::mem::take(&mut self.scratch);
            let lsn = self
                .log_append(crate::durable::RECORD_INSTALLED, &scratch)
                .unwrap_or(lock_lsn);
            self.scratch = scratch;
            // From the marker on, this primary votes commit-primary for the transaction,
            // as a replay of its log would: a view change before the install leaves it to
            // recovery, which must then commit it (`power` seed 431 of list-append: an
            // install dropped at a view change, aborted by recovery on lock votes, came
            // back at a restart from its marker).
            self.note_installed(tx);
            // The install (what readers see) waits for the INSTALLED marker too, not only
            // for the LOCK record: a restart that found the LOCK record alone would leave
            // the transaction to recovery, whose decision then rests on the backups'
            // records alone, and a backup lost before that recovery ends leaves a lock
            // vote, an abort of a write readers saw (`power` seed 525 of resp-counter).
            let wait = lsn.max(lock_lsn);
            let now = self.now_ns();
            let durable = self.durable.as_mut().expect("a LOCK record was logged");
            durable.wait_for = wait;
            if durable.log.durable(now) < wait {
                durable.installs.push_back((wait, *tx, decided));
                durable.ring();
                return true;
            }
            return self.install_now(tx, false);
        }
        self.install_now(tx, true)
    }

    /// Installs the writes of `tx` locked here and unlocks them, logging it first (see
    /// [`Participant::install_locked`]). False if `tx` holds no locks here.
    ///
    /// `log`: append the record it installs ([`crate::durable::RECORD_COMMIT_PRIMARY`]:
    /// `flush` mode, and a lock a restart gave back); false where its LOCK record and the
    /// INSTALLED marker are logged already (`sync` mode).
    pub(crate) fn install_now(&mut self, tx: &TxId, log: bool) -> bool {
        let Some(bytes) = self.locked.remove(tx) else {
            return false;
        };
        self.lock_lsn.remove(tx);
        let restored = !self.restored_locks.is_empty() && self.restored_locks.remove(tx);
        if log && let Some(durable) = &mut self.durable {
            // The primary's copy logs what it installs without waiting (its backups hold
            // it too). A failure here leaves the other copies to recovery.
            let _ = crate::durable::append(
                durable,
                &mut self.log_stats,
                crate::durable::RECORD_COMMIT_PRIMARY,
                &bytes,
            );
        }
        let record = RecordView::parse(&bytes).expect("checked when locked");
        self.shipped.remember(record.note());
        for write in record.writes() {
            if let Some(partition) = self.store.get_any(write.partition) {
                if restored {
                    // Not locked in the store: applied at its version (a copy keeps the
                    // highest).
                    if let Some(version) = write.version.checked_add(1) {
                        let _ = partition.apply(write.table, &write.key, version, write.value);
                    }
                    continue;
                }
                partition
                    .install(write.table, &write.key, write.value)
                    .expect("checked when locked");
            }
        }
        // Its owner installed what it had reserved here.
        if !self.aged_locks.is_empty()
            && let Some(age) = self.aged_locks.remove(tx)
        {
            for write in record.writes() {
                self.store
                    .reservations()
                    .release((write.partition, write.table, write.key), age);
            }
        }
        self.note_installed(tx);
        self.stats.commits += 1;
        self.recycle(bytes);
        true
    }

    /// Remembers that this primary installed `tx` (COMMIT-PRIMARY, or its marker logged in
    /// `sync` mode): a commit-primary vote until a truncation mark covers it. Once.
    fn note_installed(&mut self, tx: &TxId) {
        let log = self
            .logs
            .entry((tx.node, tx.thread, tx.incarnation))
            .or_default();
        if tx.counter > log.truncated_up_to && !log.installed.contains(&tx.counter) {
            log.installed.push_back(tx.counter);
        }
    }

    /// Takes the truncation mark a LOCK record carries (a primary learns marks too: its
    /// truncated and commit-primary votes depend on them).
    fn note_mark(&mut self, record: &RecordView<'_>) {
        let coordinator = (record.tx.node, record.tx.thread, record.tx.incarnation);
        self.truncate(coordinator, record.truncate_up_to);
    }

    /// ABORT: release the transaction's locks here, and drop its record from its
    /// coordinator's log here (a commit that failed at COMMIT-BACKUP, where some backups
    /// had logged it): truncation must never apply an aborted transaction's writes.
    pub fn abort(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let tx = decode_tx(payload).map_err(|_| MALFORMED)?;
        let coordinator = (tx.node, tx.thread, tx.incarnation);
        let removed = self.logs.get_mut(&coordinator).and_then(|log| {
            if !log.replicated.is_empty() {
                log.replicated
                    .retain(|&(counter, _), _| counter != tx.counter);
            }
            log.records.remove(&tx.counter)
        });
        let mut abort_lsn = removed.map(|bytes| {
            self.recycle(bytes);
            // Logged here: a replay must never apply it.
            self.log_append(crate::durable::RECORD_ABORT, payload)
                .unwrap_or(0)
        });
        if let Some(bytes) = self.locked.remove(&tx) {
            if self.lock_lsn.remove(&tx).is_some() && abort_lsn.is_none() {
                // Its LOCK record is on this disk: a replay must never apply it.
                abort_lsn = Some(
                    self.log_append(crate::durable::RECORD_ABORT, payload)
                        .unwrap_or(0),
                );
            }
            let restored = !self.restored_locks.is_empty() && self.restored_locks.remove(&tx);
            // A lock a restart gave back holds nothing in the store; one whose LOCK
            // record is on disk is released once the abort is too.
            let unlock_now = match abort_lsn {
                _ if restored => None,
                Some(lsn) => self.release_after(lsn, bytes),
                None => Some(bytes),
            };
            if let Some(bytes) = unlock_now {
                let record = RecordView::parse(&bytes).expect("checked when locked");
                for write in record.writes() {
                    if let Some(partition) = self.store.get_any(write.partition) {
                        partition.unlock(write.table, &write.key).expect("locked");
                    }
                }
                self.recycle(bytes);
            }
            // Its reservations stay, for its next attempt.
            if !self.aged_locks.is_empty() {
                self.aged_locks.remove(&tx);
            }
            self.stats.aborts += 1;
        }
        Answer::Granted.encode(response);
        Ok(())
    }

    /// SCAN: visits objects of a table at this primary from a cursor, outside any
    /// transaction: up to the request's count (at most [`SCAN_OBJECTS_MAX`]), stopping
    /// before an object that would take the answer past [`SCAN_RESPONSE_BYTES_MAX`]
    /// (unless it is the first). Answers the present objects visited with their values,
    /// and the cursor to go on from.
    pub fn scan(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let request = decode_scan(payload).map_err(|_| MALFORMED)?;
        let refuse = |response: &mut Vec<u8>| {
            response.clear();
            response.push(ScanStatus::Refused as u8);
            Ok(())
        };
        if self.store.is_recovering(request.partition) {
            // Blocked by recovery: an empty page that goes on from the same cursor, as
            // for a locked object (the caller asks again a little later).
            start_scan_response(response);
            finish_scan_response(request.cursor, 0, 0, response);
            return Ok(());
        }
        let Some(partition) = self.store.get(request.partition, Role::Primary) else {
            return refuse(response);
        };
        let count = request.count.min(SCAN_OBJECTS_MAX);
        let page = scan_page(
            partition,
            request.table,
            request.cursor,
            count,
            SCAN_RESPONSE_BYTES_MAX,
            &mut self.scan_scratch,
            response,
        );
        if page.is_err() {
            return refuse(response);
        }
        Ok(())
    }

    /// COUNT: the number of present objects of a table at this primary, outside any
    /// transaction (walks the table).
    pub fn count(&mut self, payload: &[u8], response: &mut Vec<u8>) -> Result<(), HandlerError> {
        let (partition, table) = decode_count(payload).map_err(|_| MALFORMED)?;
        // Not counted while recovery blocks the partition (the caller retries later).
        let count = (!self.store.is_recovering(partition))
            .then(|| self.store.get(partition, Role::Primary))
            .flatten()
            .and_then(|p| p.count_present(table).ok())
            .map(|count| count as u64);
        encode_count_response(count, response);
        Ok(())
    }

    /// This node's copy of `partition`, whatever its role.
    pub(crate) fn store_any(&self, partition: u32) -> Option<&Partition> {
        self.store.get_any(partition)
    }

    fn primary_of(&self, partition: u32) -> &Partition {
        self.store
            .get(partition, Role::Primary)
            .expect("checked when the record arrived")
    }

    /// A copy of `bytes` in a spare buffer if there is one.
    fn keep(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(bytes);
        buffer
    }

    /// Keeps `buffer` for a later record, unless enough are kept already or it is large
    /// (a small record must not pin a large transaction's buffer in a log).
    fn recycle(&mut self, buffer: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS_MAX && buffer.capacity() <= SPARE_BUFFER_BYTES_MAX {
            self.spare.push(buffer);
        }
    }
}
