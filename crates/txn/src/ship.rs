//! Shipping: an operation run at its keys' primary, in one RPC (docs/transactions.md,
//! "Shipped operations").
//!
//! A caller whose operation touches only keys of partitions with one primary (a Redis
//! INCR, APPEND, SETNX, or a MULTI block on one primary) sends it there as a SHIP request
//! naming a registered [`Procedure`] and its arguments, instead of reading the keys
//! remotely and locking them a round trip later. At the primary, one worker thread per
//! partition (`partition % threads`) queues the requests it receives and runs them in
//! batches: one transaction per batch, coordinated there, which reads every key in
//! memory, applies the operations in arrival order (each sees the writes of those before
//! it), writes the result and commits with FaRM's protocol (its LOCK is in memory, its
//! COMMIT-BACKUP goes to the backups). So:
//!
//! - **no starvation** among shipped operations: the queue is served in order, and a
//!   batch never conflicts with another batch of the same thread;
//! - **combining**: concurrent operations on one key become one commit and one log
//!   record, each caller getting its own result, in arrival order (consistent with real
//!   time: an operation that finished before another was sent is in an earlier batch);
//! - **recovery covers it**: a batch is an ordinary transaction of the primary's
//!   coordinator thread.
//!
//! Every request carries an [`Origin`] chosen by the caller. The primary remembers the
//! results of the origins it ran ([`ShipResults`], bounded), so a caller whose call was cut
//! by a configuration change asks the same primary again with the same origin and gets
//! the first run's result, or its "outcome unknown", never a second run. A new primary
//! learns the results from the batches' records. If the new configuration gave the
//! operation's keys several primaries, the one asked answers from what it remembers or
//! that it cannot run it ([`ShipStatus::Split`]), and the caller, if an earlier request
//! may have run, answers "outcome unknown".
//!
//! Procedures are synchronous: they see the values read through a [`BatchView`] and
//! write into it; the executor does the reading and the commit. The code takes its time
//! from the coroutine and draws no randomness but from the origins, so the simulator
//! replays it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_exec::{Co, Shared, Signal};
use ferrotx_rpc::{Deferred, Engine, HandlerError};
use ferrotx_store::{Key, TableId};
use ferrotx_wire::{RequestType, ViewId};
use foldhash::fast::FixedState;
use hashbrown::hash_map::Entry;
use hashbrown::{HashMap, HashSet};

use crate::coordinator::{Abort, Coordinator};

/// Most operations one batch runs; more wait for the next.
pub const BATCH_OPERATIONS_MAX: usize = 64;

/// Most keys one batch reads: far inside one commit's limits.
pub const BATCH_KEYS_MAX: usize = 1024;

/// How a worker thread runs its batches ([`Shipping::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Executors {
    /// Batches it may run at once ([`Shipping::run`] coroutines), over disjoint keys.
    pub count: usize,
    /// Requests that must be queued before another batch starts beside a running one.
    pub parallel_after: usize,
}

impl Default for Executors {
    /// One batch at a time. A batch of many costs less than many batches: with four
    /// executors starting a batch whenever one was free, a CPU-bound primary served `bench
    /// kv --zipf 0.99` in batches of 3.5 operations rather than 10, and 12% slower.
    fn default() -> Self {
        Self {
            count: 1,
            parallel_after: BATCH_OPERATIONS_MAX,
        }
    }
}

/// Results each worker thread remembers: at least half of this many, the last ones (about
/// 50 bytes each with a small result). A caller asks again within milliseconds of a
/// configuration change, while this covers a fraction of a second of the busiest thread's
/// operations.
pub const RESULTS_MAX: usize = 32 * 1024;

/// Largest result a note carries and a replica remembers: a larger one (the old value of
/// a GETSET, a MULTI's GETs) is remembered as "unknown", so that the results kept stay
/// within `RESULTS_MAX` times this many bytes per thread, and records stay small.
pub const REMEMBERED_RESULT_BYTES_MAX: usize = 1024;

/// The note's length field of a result not carried: remembered as "unknown".
const RESULT_NOT_CARRIED: u32 = u32::MAX;

/// How long a batch is retried on conflicts with other transactions (not shipped) before
/// its callers are told so (a Redis client gets `-TRYAGAIN`).
const RETRY_NS_MAX: u64 = 2_000_000_000;

/// How long an operation waits for its partition's recovery before its caller is told
/// to retry.
const RECOVERY_WAIT_NS: u64 = 2_000_000_000;

/// Who shipped an operation, unique over the cluster's lifetime: the caller's endpoint,
/// its process's life and a counter of that thread.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Origin {
    /// The caller's node.
    pub node: u16,
    /// Its worker thread.
    pub thread: u16,
    /// Its process's life.
    pub incarnation: u64,
    /// The thread's counter of shipped operations.
    pub seq: u64,
}

/// An operation that runs at its keys' primary. Registered under a one-byte id on every
/// node ([`Procedures`]); the caller ships the id and the arguments.
pub trait Procedure: Send + Sync {
    /// The keys `args` reads or writes (every one must be read before [`Procedure::apply`]),
    /// appended to `keys`; an error if `args` is malformed (the caller gets it).
    fn keys(&self, args: &[u8], keys: &mut Vec<(TableId, Key)>) -> Result<(), String>;

    /// Runs the operation on the values in `view` (each of its keys, as the batch's
    /// earlier operations left it), writing its writes there and its result to `result`.
    /// `now_ns` is the primary's time. Must not fail: an operation refused (a Redis error
    /// reply) writes nothing and says so in its result.
    fn apply(&self, args: &[u8], view: &mut BatchView, now_ns: u64, result: &mut Vec<u8>);
}

/// The procedures a node runs, by id.
#[derive(Clone, Default)]
pub struct Procedures {
    table: Vec<(u8, Arc<dyn Procedure>)>,
}

impl std::fmt::Debug for Procedures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.table.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Procedures").field("ids", &ids).finish()
    }
}

impl Procedures {
    /// These procedures and `procedure` under `id` (replacing one registered there).
    pub fn with(mut self, id: u8, procedure: Arc<dyn Procedure>) -> Self {
        self.table.retain(|(i, _)| *i != id);
        self.table.push((id, procedure));
        self
    }

    fn get(&self, id: u8) -> Option<&Arc<dyn Procedure>> {
        self.table.iter().find(|(i, _)| *i == id).map(|(_, p)| p)
    }
}

/// The values a batch read, and what its operations wrote so far.
#[derive(Default)]
pub struct BatchView {
    entries: Vec<ViewEntry>,
}

struct ViewEntry {
    table: TableId,
    key: Key,
    version: u64,
    value: Option<Vec<u8>>,
    written: bool,
}

impl BatchView {
    fn find(&self, table: TableId, key: &Key) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.table == table && e.key == *key)
    }

    /// The value of `key` now (`Some(None)`: absent); `None` if the batch did not read
    /// it (the procedure named it in [`Procedure::keys`], so this is a bug of its own).
    pub fn get(&self, table: TableId, key: &Key) -> Option<Option<&[u8]>> {
        self.find(table, key)
            .map(|i| self.entries[i].value.as_deref())
    }

    /// The version `key` had when read, if no earlier operation of the batch wrote it
    /// (WATCH compares it); `None` if one did, or the key was not read.
    pub fn version(&self, table: TableId, key: &Key) -> Option<u64> {
        self.find(table, key)
            .filter(|&i| !self.entries[i].written)
            .map(|i| self.entries[i].version)
    }

    /// Writes `value` (`None`: delete) to `key`, which the batch read. Returns false,
    /// writing nothing, if it did not.
    pub fn put(&mut self, table: TableId, key: &Key, value: Option<Vec<u8>>) -> bool {
        match self.find(table, key) {
            Some(i) => {
                let entry = &mut self.entries[i];
                entry.value = value;
                entry.written = true;
                true
            }
            None => false,
        }
    }
}

/// How a SHIP request ended, the first byte of its answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum ShipStatus {
    /// It ran and committed (or read): its result follows.
    Done = 0,
    /// It did not run here (this node is not the primary of its partition now, or a
    /// configuration change aborted it): nothing changed; retry at the primary.
    Retry = 1,
    /// A failure interrupted its commit and recovery did not decide it in time.
    Unknown = 2,
    /// It could not run: a malformed request or an unknown procedure; the text follows.
    Failed = 3,
    /// Conflicts with other transactions outlasted the retries: nothing changed.
    Conflict = 4,
    /// It does not fit one commit: nothing changed.
    TooLarge = 5,
    /// Its keys have several primaries in this configuration (the caller chose this
    /// primary in an earlier one, where they had one): it did not run here, this node
    /// knows no earlier run of it, and asked again it would not run in this
    /// configuration. Nothing changed by this request.
    Split = 6,
    /// A write would grow memory on this primary, past its memory limit: nothing
    /// changed.
    OutOfMemory = 7,
}

impl ShipStatus {
    /// Appends the answer to a SHIP request: this status, then `body` (the result of
    /// [`ShipStatus::Done`], the text of [`ShipStatus::Failed`]).
    fn encode_answer(self, body: &[u8], out: &mut Vec<u8>) {
        out.push(self as u8);
        out.extend_from_slice(body);
    }

    /// The caller's reading of an answer: `None` for [`ShipStatus::Retry`].
    pub(crate) fn outcome(answer: &[u8]) -> Option<ShipResult> {
        let (&status, body) = answer.split_first()?;
        Some(match ShipStatus::from_byte(status) {
            Some(ShipStatus::Done) => Ok(body.to_vec()),
            Some(ShipStatus::Retry) => return None,
            Some(ShipStatus::Unknown) => Err(Abort::OutcomeUnknown),
            Some(ShipStatus::Conflict) => Err(Abort::Conflict),
            Some(ShipStatus::TooLarge) => Err(Abort::TooLarge),
            Some(ShipStatus::OutOfMemory) => Err(Abort::OutOfMemory),
            // Nothing ran: the caller runs it another way (or, if an earlier request may
            // have run, reports its outcome unknown).
            Some(ShipStatus::Split | ShipStatus::Failed) | None => Err(Abort::Protocol),
        })
    }

    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            0 => Self::Done,
            1 => Self::Retry,
            2 => Self::Unknown,
            3 => Self::Failed,
            4 => Self::Conflict,
            5 => Self::TooLarge,
            6 => Self::Split,
            7 => Self::OutOfMemory,
            _ => return None,
        })
    }
}

const ORIGIN_BYTES: usize = 2 + 2 + 8 + 8;
const REQUEST_HEADER_BYTES: usize = ORIGIN_BYTES + 1 + 4;

/// Encodes a SHIP request.
pub fn encode_ship(origin: &Origin, procedure: u8, partition: u32, args: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&origin.node.to_le_bytes());
    out.extend_from_slice(&origin.thread.to_le_bytes());
    out.extend_from_slice(&origin.incarnation.to_le_bytes());
    out.extend_from_slice(&origin.seq.to_le_bytes());
    out.push(procedure);
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(args);
}

/// The parts of a SHIP request: origin, procedure, partition, arguments.
pub fn decode_ship(bytes: &[u8]) -> Option<(Origin, u8, u32, &[u8])> {
    if bytes.len() < REQUEST_HEADER_BYTES {
        return None;
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let origin = Origin {
        node: u16_at(0),
        thread: u16_at(2),
        incarnation: u64_at(4),
        seq: u64_at(12),
    };
    let procedure = bytes[20];
    let partition = u32::from_le_bytes(bytes[21..25].try_into().expect("4 bytes"));
    Some((origin, procedure, partition, &bytes[REQUEST_HEADER_BYTES..]))
}

/// The note a batch's records carry ([`crate::messages::append_record_note`]): each
/// operation's origin and result, so every replica that applies the records remembers
/// them ([`ShipResults`]), and a caller that asks a new primary after a failure gets the
/// result of the run recovery committed.
pub(crate) fn encode_note<'a>(
    entries: impl ExactSizeIterator<Item = (Origin, &'a [u8])>,
) -> Vec<u8> {
    let mut note = Vec::new();
    note.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (origin, result) in entries {
        note.extend_from_slice(&origin.node.to_le_bytes());
        note.extend_from_slice(&origin.thread.to_le_bytes());
        note.extend_from_slice(&origin.incarnation.to_le_bytes());
        note.extend_from_slice(&origin.seq.to_le_bytes());
        if result.len() > REMEMBERED_RESULT_BYTES_MAX {
            note.extend_from_slice(&RESULT_NOT_CARRIED.to_le_bytes());
        } else {
            note.extend_from_slice(&(result.len() as u32).to_le_bytes());
            note.extend_from_slice(result);
        }
    }
    note
}

/// The entries of a note; a malformed note (it came from the network) yields what it
/// holds up to the first malformed entry.
pub(crate) fn note_entries(note: &[u8]) -> impl Iterator<Item = (Origin, Option<&[u8]>)> + '_ {
    let count = note
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let mut rest = note.get(4..).unwrap_or(&[]);
    (0..count).map_while(move |_| {
        let header = rest.get(..ORIGIN_BYTES + 4)?;
        let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
        let u64_at =
            |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        let origin = Origin {
            node: u16_at(0),
            thread: u16_at(2),
            incarnation: u64_at(4),
            seq: u64_at(12),
        };
        let len = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
        if len == RESULT_NOT_CARRIED {
            rest = &rest[ORIGIN_BYTES + 4..];
            return Some((origin, None));
        }
        let len = len as usize;
        let result = rest.get(ORIGIN_BYTES + 4..ORIGIN_BYTES + 4 + len)?;
        rest = &rest[ORIGIN_BYTES + 4 + len..];
        Some((origin, Some(result)))
    })
}

/// What the primary remembers of one origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remembered<'a> {
    /// Its result.
    Done(&'a [u8]),
    /// Its commit's outcome is unknown.
    Unknown,
}

/// The results of the origins this thread ran, the oldest forgotten first. An origin
/// forgotten is told apart from one never run by the highest counter forgotten per
/// caller thread: asked again, it answers "outcome unknown" rather than running twice.
///
/// Kept as two generations of at most half the limit each: results go into the current
/// one, and when it is full the previous one is forgotten whole and the current one takes
/// its place. So nothing is ever removed from a map one entry at a time (the tombstones
/// that leaves make a hash map's probes long and its rehashes frequent), result bytes
/// live in one buffer per generation, and once warm the structure allocates nothing.
pub(crate) struct ShipResults {
    current: Generation,
    previous: Generation,
    forgotten: HashMap<(u16, u16, u64), u64, FixedState>,
    generation_max: usize,
}

/// One generation of [`ShipResults`].
struct Generation {
    /// Where each origin's result is in `bytes`: offset and length, or `UNKNOWN`.
    index: HashMap<Origin, (u32, u32), FixedState>,
    bytes: Vec<u8>,
    /// The highest counter per caller thread among `index`'s origins.
    highest: HashMap<(u16, u16, u64), u64, FixedState>,
}

/// [`Generation::index`]'s length of a result whose outcome is unknown.
const UNKNOWN: u32 = u32::MAX;

/// What a generation's `(offset, length)` in `bytes` remembers.
fn remembered_at(bytes: &[u8], (offset, len): (u32, u32)) -> Remembered<'_> {
    if len == UNKNOWN {
        Remembered::Unknown
    } else {
        let at = offset as usize;
        Remembered::Done(&bytes[at..at + len as usize])
    }
}

impl Generation {
    fn new() -> Self {
        Self {
            index: HashMap::with_hasher(FixedState::with_seed(0)),
            bytes: Vec::new(),
            highest: HashMap::with_hasher(FixedState::with_seed(0)),
        }
    }

    fn get(&self, origin: &Origin) -> Option<Remembered<'_>> {
        Some(remembered_at(&self.bytes, *self.index.get(origin)?))
    }

    fn insert(&mut self, origin: Origin, remembered: Remembered<'_>) {
        let entry = match self.index.entry(origin) {
            Entry::Occupied(entry) => {
                if remembered_at(&self.bytes, *entry.get()) == remembered {
                    // The primary remembers its batch's results when it installs them and
                    // again when it answers.
                    return;
                }
                Entry::Occupied(entry)
            }
            vacant => vacant,
        };
        let place = match remembered {
            Remembered::Unknown => (0, UNKNOWN),
            Remembered::Done(result) => {
                let offset = self.bytes.len() as u32;
                self.bytes.extend_from_slice(result);
                (offset, result.len() as u32)
            }
        };
        entry.insert(place);
        let highest = self
            .highest
            .entry((origin.node, origin.thread, origin.incarnation))
            .or_insert(0);
        *highest = (*highest).max(origin.seq);
    }

    fn clear(&mut self) {
        self.index.clear();
        self.bytes.clear();
        self.highest.clear();
    }
}

/// What [`ShipResults::lookup`] found.
pub(crate) enum Lookup<'a> {
    Remembered(Remembered<'a>),
    /// It may have run, and was forgotten.
    Forgotten,
    /// It never ran here.
    New,
}

impl ShipResults {
    /// Remembers at least the last `limit / 2` origins, at most the last `limit`.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            current: Generation::new(),
            previous: Generation::new(),
            forgotten: HashMap::with_hasher(FixedState::with_seed(0)),
            generation_max: (limit / 2).max(1),
        }
    }

    pub(crate) fn lookup(&self, origin: &Origin) -> Lookup<'_> {
        if let Some(remembered) = self.current.get(origin) {
            return Lookup::Remembered(remembered);
        }
        if let Some(remembered) = self.previous.get(origin) {
            return Lookup::Remembered(remembered);
        }
        let caller = (origin.node, origin.thread, origin.incarnation);
        match self.forgotten.get(&caller) {
            Some(&up_to) if origin.seq <= up_to => Lookup::Forgotten,
            _ => Lookup::New,
        }
    }

    /// Remembers the results a record's note holds (a replica applying a committed
    /// batch's record).
    pub(crate) fn remember(&mut self, note: &[u8]) {
        if note.is_empty() {
            return;
        }
        for (origin, result) in note_entries(note) {
            let remembered = match result {
                Some(result) => Remembered::Done(result),
                None => Remembered::Unknown,
            };
            self.insert(origin, remembered);
        }
    }

    pub(crate) fn insert(&mut self, origin: Origin, remembered: Remembered<'_>) {
        if self.current.index.len() >= self.generation_max
            && !self.current.index.contains_key(&origin)
        {
            for (&caller, &seq) in &self.previous.highest {
                let up_to = self.forgotten.entry(caller).or_insert(0);
                *up_to = (*up_to).max(seq);
            }
            self.previous.clear();
            std::mem::swap(&mut self.current, &mut self.previous);
        }
        self.current.insert(origin, remembered);
    }
}

/// Where an answer goes: back over the RPC it came in, or to a caller of this thread.
#[derive(Clone)]
enum AnswerTo {
    Remote(Deferred),
    Local(Rc<LocalAnswer>),
}

/// The answer to a caller on the primary's own thread (no RPC to itself).
pub(crate) struct LocalAnswer {
    pub(crate) answer: RefCell<Option<Vec<u8>>>,
    pub(crate) ready: Signal,
}

/// One request waiting in the queue.
struct Shipped {
    token: AnswerTo,
    request: Vec<u8>,
    /// When it arrived (its wait for a recovering partition is bounded from there).
    arrived_ns: u64,
}

/// One operation of a batch.
struct Operation {
    token: AnswerTo,
    origin: Origin,
    procedure: Arc<dyn Procedure>,
    request: Vec<u8>,
    /// Its keys: `keys[first..end]` of the batch.
    keys: std::ops::Range<usize>,
}

impl Operation {
    fn args(&self) -> &[u8] {
        &self.request[REQUEST_HEADER_BYTES..]
    }
}

/// Operations run as one transaction: taken from the queue by the partition's primary in
/// `view`, which found them new there.
struct Batch {
    operations: Vec<Operation>,
    /// The keys of every operation (`Operation::keys` ranges into it).
    keys: Vec<(TableId, Key)>,
    /// The view they were taken in. They commit in it or not at all: what made running
    /// them right (this node was the primary of their partitions, and knew no run of
    /// them) held in that view only. A later view may have another primary, which the
    /// callers, cut off, ask again, and which runs them unless a run of them reached it
    /// (a batch carried on here would read and lock through the placement at that
    /// primary, after or beside its own run: the operations ran twice).
    view: ViewId,
}

/// How one attempt at a batch ended.
enum Attempt {
    Done(Vec<Vec<u8>>),
    Abort(Abort),
}

/// The shipping state of one worker thread: its queue of requests, the executor that
/// runs them, and the results it remembers.
pub struct Shipping {
    procedures: Procedures,
    queue: RefCell<VecDeque<Shipped>>,
    /// Requests kept back until their partitions' recovery ends, oldest first.
    deferred: RefCell<VecDeque<Shipped>>,
    /// The keys and origins of the batches running now: a request touching one of them
    /// waits in the queue (so requests on one key run in arrival order, and a request
    /// asked again while its first run is under way is answered from that run).
    busy_keys: RefCell<HashSet<(TableId, Key), FixedState>>,
    busy_origins: RefCell<HashSet<Origin, FixedState>>,
    /// Batches running now.
    running: std::cell::Cell<usize>,
    executors: Executors,
    /// Rung when requests arrive and when a batch ends.
    arrived: Signal,
    /// The coordinator whose counters count what the executor does (set by `run`).
    counters: RefCell<std::rc::Weak<Coordinator>>,
}

impl Shipping {
    /// Shipping for a worker whose executor has `callers` coroutine slots, running
    /// `procedures` with `executors` (spawn `executors.count` [`Shipping::run`]s).
    pub fn new(procedures: Procedures, callers: usize, executors: Executors) -> Rc<Self> {
        Rc::new(Self {
            procedures,
            queue: RefCell::new(VecDeque::new()),
            deferred: RefCell::new(VecDeque::new()),
            busy_keys: RefCell::new(HashSet::with_hasher(FixedState::with_seed(0))),
            busy_origins: RefCell::new(HashSet::with_hasher(FixedState::with_seed(0))),
            running: std::cell::Cell::new(0),
            executors,
            arrived: Signal::new(callers),
            counters: RefCell::new(std::rc::Weak::new()),
        })
    }

    fn count(&self, update: impl FnOnce(&mut crate::coordinator::CoordinatorStats)) {
        if let Some(coordinator) = self.counters.borrow().upgrade() {
            coordinator.count(update);
        }
    }

    /// Registers the SHIP handler on `engine`: it queues each request and wakes the
    /// executor ([`Shipping::run`]) through `shared`.
    pub fn register(self: &Rc<Self>, engine: &mut Engine, shared: &Rc<Shared>) {
        let state = self.clone();
        let shared = Rc::downgrade(shared);
        engine.register_deferred(
            RequestType::Ship.into(),
            Box::new(move |request, token| {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                state.queue.borrow_mut().push_back(Shipped {
                    token: AnswerTo::Remote(token),
                    request: request.payload.to_vec(),
                    arrived_ns: shared.now_ns(),
                });
                shared.notify_all(&state.arrived);
            }),
        );
    }

    /// An executor: runs the queued requests in batches, forever (a background coroutine
    /// of the worker, beside recovery). A worker runs [`Executors::count`] of them, each
    /// batch over keys no other running batch touches.
    pub async fn run(self: Rc<Self>, co: Co, coordinator: Rc<Coordinator>) {
        // Weak: the coordinator holds this state too.
        *self.counters.borrow_mut() = Rc::downgrade(&coordinator);
        loop {
            if self.queue.borrow().is_empty() && self.deferred.borrow().is_empty() {
                co.wait(&self.arrived).await;
                continue;
            }
            if self.running.get() > 0 && self.queue.borrow().len() < self.executors.parallel_after {
                // A batch of many costs less than many batches (see `Executors`).
                co.wait(&self.arrived).await;
                continue;
            }
            let batch = self.take_batch(&co, &coordinator);
            if batch.operations.is_empty() {
                if !self.queue.borrow().is_empty() {
                    // Requests on keys of running batches: their end rings.
                    co.wait(&self.arrived).await;
                } else if !self.deferred.borrow().is_empty() {
                    // Only requests waiting for their partition's recovery.
                    co.sleep_until(co.now_ns() + 200_000).await;
                }
                continue;
            }
            if self.executors.count <= 1 {
                // Alone: nothing runs beside its batch, so nothing to keep apart.
                self.run_batch(&co, &coordinator, batch).await;
                co.notify_all(&self.arrived);
                continue;
            }
            {
                let mut busy_keys = self.busy_keys.borrow_mut();
                busy_keys.extend(batch.keys.iter().copied());
                let mut busy_origins = self.busy_origins.borrow_mut();
                busy_origins.extend(batch.operations.iter().map(|op| op.origin));
            }
            let (keys, origins): (Vec<(TableId, Key)>, Vec<Origin>) = (
                batch.keys.clone(),
                batch.operations.iter().map(|op| op.origin).collect(),
            );
            self.running.set(self.running.get() + 1);
            self.run_batch(&co, &coordinator, batch).await;
            self.running.set(self.running.get() - 1);
            {
                let mut busy_keys = self.busy_keys.borrow_mut();
                for key in &keys {
                    busy_keys.remove(key);
                }
                let mut busy_origins = self.busy_origins.borrow_mut();
                for origin in &origins {
                    busy_origins.remove(origin);
                }
            }
            co.notify_all(&self.arrived);
        }
    }

    /// Queues a request of a caller of this thread (the primary is this endpoint): its
    /// answer comes through the returned [`LocalAnswer`].
    pub(crate) fn submit_local(&self, co: &Co, request: Vec<u8>) -> Rc<LocalAnswer> {
        let answer = Rc::new(LocalAnswer {
            answer: RefCell::new(None),
            ready: Signal::new(1),
        });
        self.queue.borrow_mut().push_back(Shipped {
            token: AnswerTo::Local(answer.clone()),
            request,
            arrived_ns: co.now_ns(),
        });
        co.notify_all(&self.arrived);
        answer
    }

    /// Answers `token` with `status` and `body`.
    fn answer(co: &Co, token: &AnswerTo, status: ShipStatus, body: &[u8]) {
        // A result too large for one message: only a batch that wrote nothing can have
        // one (a writing batch's records carry its results, and the commit refused them
        // as too large), so nothing changed.
        let (status, body) = if body.len() >= ferrotx_wire::MAX_MESSAGE_BYTES as usize {
            (ShipStatus::TooLarge, &[][..])
        } else {
            (status, body)
        };
        let mut answer = Vec::with_capacity(1 + body.len());
        status.encode_answer(body, &mut answer);
        match token {
            AnswerTo::Remote(token) => {
                co.engine().respond(*token, Ok(&answer));
            }
            AnswerTo::Local(local) => {
                *local.answer.borrow_mut() = Some(answer);
                co.notify_all(&local.ready);
            }
        }
    }

    /// The next batch: requests in arrival order, answering at once those that need no
    /// run (malformed, not the primary here, asked again), keeping back those whose
    /// partition recovery still blocks, and leaving in the queue what does not fit.
    /// Everything it checks holds in the current view, which the batch keeps.
    fn take_batch(&self, co: &Co, coordinator: &Coordinator) -> Batch {
        let view = coordinator.view();
        let mut operations: Vec<Operation> = Vec::new();
        let mut keys: Vec<(TableId, Key)> = Vec::new();
        let store = coordinator.store();
        let local = co.local().node();
        let mut deferred = self.deferred.borrow_mut();
        // Those kept back go first, so order is kept among them.
        let mut pending: VecDeque<Shipped> = std::mem::take(&mut *deferred);
        pending.extend(self.queue.borrow_mut().drain(..));
        // Those on keys of running batches, in order: they stay queued.
        let mut waiting: VecDeque<Shipped> = VecDeque::new();
        // Their keys: later requests on them wait behind them.
        let mut claimed: HashSet<(TableId, Key), FixedState> =
            HashSet::with_hasher(FixedState::with_seed(0));
        let busy_keys = self.busy_keys.borrow();
        let busy_origins = self.busy_origins.borrow();
        while let Some(shipped) = pending.pop_front() {
            if operations.len() >= BATCH_OPERATIONS_MAX {
                pending.push_front(shipped);
                break;
            }
            let Some((origin, procedure_id, partition, args)) = decode_ship(&shipped.request)
            else {
                self.count(|s| s.ship_refused += 1);
                match &shipped.token {
                    AnswerTo::Remote(token) => {
                        co.engine()
                            .respond(*token, Err(HandlerError("malformed SHIP request")));
                    }
                    AnswerTo::Local(_) => {
                        Self::answer(co, &shipped.token, ShipStatus::Failed, b"malformed")
                    }
                }
                continue;
            };
            let Some(procedure) = self.procedures.get(procedure_id).cloned() else {
                self.count(|s| s.ship_refused += 1);
                Self::answer(co, &shipped.token, ShipStatus::Failed, b"unknown procedure");
                continue;
            };
            if !coordinator.has_partition(partition) {
                // The caller chose the number: a forged or broken request (issue 29).
                self.count(|s| s.ship_refused += 1);
                Self::answer(co, &shipped.token, ShipStatus::Failed, b"no such partition");
                continue;
            }
            if coordinator.ship_thread(partition) != co.local().thread() {
                // The callers and this node disagree on the thread count: what this
                // thread remembers is not where a caller would ask again.
                self.count(|s| s.ship_refused += 1);
                Self::answer(co, &shipped.token, ShipStatus::Failed, b"wrong thread");
                continue;
            }
            if coordinator.primary_of_partition(partition) != local {
                self.count(|s| s.ship_retries_asked += 1);
                Self::answer(co, &shipped.token, ShipStatus::Retry, &[]);
                continue;
            }
            let first = keys.len();
            if let Err(error) = procedure.keys(args, &mut keys) {
                keys.truncate(first);
                Self::answer(co, &shipped.token, ShipStatus::Failed, error.as_bytes());
                continue;
            }
            let partitions_of_keys = || {
                keys[first..]
                    .iter()
                    .map(|(table, key)| coordinator.partition_of(*table, key))
                    .chain(std::iter::once(partition))
            };
            // Some of its keys have another primary in this configuration (the caller,
            // in the same one, chose this primary in an earlier one: the request was cut
            // off by a configuration change and is asked again). It cannot run here, nor
            // anywhere as one operation while this configuration lasts, so asking again
            // would never end: once this node knows it did not run here, the answer says
            // so (below), and the caller runs it another way or, if an earlier request
            // may have run, reports its outcome unknown.
            let split = partitions_of_keys().any(|p| coordinator.primary_of_partition(p) != local);
            if partitions_of_keys().any(|p| store.is_recovering(p)) {
                // An earlier run of it may be among the transactions recovery decides:
                // its result is known only once they are.
                keys.truncate(first);
                if co.now_ns().saturating_sub(shipped.arrived_ns) >= RECOVERY_WAIT_NS {
                    self.count(|s| s.ship_retries_asked += 1);
                    Self::answer(co, &shipped.token, ShipStatus::Retry, &[]);
                } else {
                    deferred.push_back(shipped);
                }
                continue;
            }
            let participant = coordinator.participant().borrow();
            let known = match participant.shipped.lookup(&origin) {
                Lookup::Remembered(Remembered::Done(result)) => Some((ShipStatus::Done, result)),
                Lookup::Remembered(Remembered::Unknown) | Lookup::Forgotten => {
                    Some((ShipStatus::Unknown, &[][..]))
                }
                Lookup::New => None,
            };
            if let Some((status, result)) = known {
                keys.truncate(first);
                self.count(|s| s.ship_answered_again += 1);
                Self::answer(co, &shipped.token, status, result);
                continue;
            }
            drop(participant);
            if split {
                keys.truncate(first);
                if busy_origins.contains(&origin) {
                    // Its first request runs here, in a batch of an older configuration:
                    // answered from its result once it ends.
                    waiting.push_back(shipped);
                } else {
                    self.count(|s| s.ship_split += 1);
                    Self::answer(co, &shipped.token, ShipStatus::Split, &[]);
                }
                continue;
            }
            if busy_origins.contains(&origin)
                || keys[first..]
                    .iter()
                    .any(|key| busy_keys.contains(key) || claimed.contains(key))
            {
                // After the running batch that has its keys (or its first request), and
                // after the requests before it on them.
                claimed.extend(keys[first..].iter().copied());
                keys.truncate(first);
                waiting.push_back(shipped);
                continue;
            }
            if operations.iter().any(|op| op.origin == origin) {
                // Asked again while its first request waits here too: answered from the
                // first one's result, in a later batch.
                keys.truncate(first);
                deferred.push_back(shipped);
                continue;
            }
            if keys.len() > BATCH_KEYS_MAX && !operations.is_empty() {
                keys.truncate(first);
                pending.push_front(shipped);
                break;
            }
            let end = keys.len();
            operations.push(Operation {
                token: shipped.token,
                origin,
                procedure,
                request: shipped.request,
                keys: first..end,
            });
        }
        // What did not fit waits for the next batch, ahead of later arrivals, and what
        // waits for running batches ahead of it.
        let mut queue = self.queue.borrow_mut();
        for shipped in pending.into_iter().rev() {
            queue.push_front(shipped);
        }
        for shipped in waiting.into_iter().rev() {
            queue.push_front(shipped);
        }
        Batch {
            operations,
            keys,
            view,
        }
    }

    /// Runs a batch to its end: one transaction, retried on conflicts (within the
    /// batch's view: [`Batch::view`]); split into single operations if it is too large for
    /// one commit.
    async fn run_batch(&self, co: &Co, coordinator: &Coordinator, batch: Batch) {
        let Batch {
            operations,
            keys,
            view,
        } = batch;
        let started = co.now_ns();
        let mut rng = operations[0].origin.seq | 1;
        let mut delay = 10_000u64;
        // Retries carry the batch's age, so that transactions of other coordinators
        // cannot keep beating it to its keys (crate::reservation).
        let age = coordinator.age();
        let mut lost = 0;
        loop {
            let aged = (lost > 0).then(|| age.after(lost));
            match attempt(co, coordinator, &operations, &keys, view, aged).await {
                Attempt::Done(results) => {
                    let mut participant = coordinator.participant().borrow_mut();
                    let remembered = &mut participant.shipped;
                    for (op, result) in operations.iter().zip(&results) {
                        let kept = if result.len() > REMEMBERED_RESULT_BYTES_MAX {
                            Remembered::Unknown
                        } else {
                            Remembered::Done(result)
                        };
                        remembered.insert(op.origin, kept);
                        Self::answer(co, &op.token, ShipStatus::Done, result);
                    }
                    let n = operations.len() as u64;
                    self.count(|s| {
                        s.ship_operations += n;
                        s.ship_batches += 1;
                    });
                    return;
                }
                // Each alone: a later one may fit, and past the memory limit, operations
                // that do not grow memory (deletes) still run.
                Attempt::Abort(Abort::TooLarge | Abort::OutOfMemory) if operations.len() > 1 => {
                    for op in operations {
                        let keys = keys[op.keys.clone()].to_vec();
                        let n = keys.len();
                        let single = Operation { keys: 0..n, ..op };
                        let batch = Batch {
                            operations: vec![single],
                            keys,
                            view,
                        };
                        Box::pin(self.run_batch(co, coordinator, batch)).await;
                    }
                    return;
                }
                Attempt::Abort(abort @ (Abort::Conflict | Abort::Locked | Abort::LogFull)) => {
                    if co.now_ns().saturating_sub(started) >= RETRY_NS_MAX {
                        let text = abort.to_string();
                        for op in &operations {
                            Self::answer(co, &op.token, ShipStatus::Conflict, text.as_bytes());
                        }
                        return;
                    }
                    self.count(|s| s.ship_batch_retries += 1);
                    if abort != Abort::LogFull {
                        lost += 1;
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let wait = delay / 2 + rng % (delay / 2 + 1);
                    // Short: the keys are reserved for this batch while it waits.
                    delay = (delay * 2).min(100_000);
                    co.sleep_until(co.now_ns() + wait).await;
                }
                Attempt::Abort(Abort::OutcomeUnknown) => {
                    let mut participant = coordinator.participant().borrow_mut();
                    let remembered = &mut participant.shipped;
                    for op in &operations {
                        remembered.insert(op.origin, Remembered::Unknown);
                        Self::answer(co, &op.token, ShipStatus::Unknown, &[]);
                    }
                    return;
                }
                Attempt::Abort(Abort::Unavailable) => {
                    // Nothing changed (a configuration change before the commit point, the
                    // batch's view is over, or recovery aborted it): the callers ask the
                    // primary again, and the primary of the view then checks them anew.
                    for op in &operations {
                        self.count(|s| s.ship_retries_asked += 1);
                        Self::answer(co, &op.token, ShipStatus::Retry, &[]);
                    }
                    return;
                }
                Attempt::Abort(Abort::TooLarge) => {
                    Self::answer(co, &operations[0].token, ShipStatus::TooLarge, &[]);
                    return;
                }
                Attempt::Abort(Abort::OutOfMemory) => {
                    Self::answer(co, &operations[0].token, ShipStatus::OutOfMemory, &[]);
                    return;
                }
                Attempt::Abort(other) => {
                    let text = other.to_string();
                    for op in &operations {
                        Self::answer(co, &op.token, ShipStatus::Failed, text.as_bytes());
                    }
                    return;
                }
            }
        }
    }
}

/// One attempt at a batch taken in `view`: read every key, apply the operations in order,
/// write, commit, all in that view ([`Batch::view`]); [`Abort::Unavailable`] once it is
/// over, nothing changed.
async fn attempt(
    co: &Co,
    coordinator: &Coordinator,
    operations: &[Operation],
    keys: &[(TableId, Key)],
    view: ViewId,
    age: Option<crate::reservation::Age>,
) -> Attempt {
    if coordinator.view() != view {
        // A retry after the view changed (its life suspended and readmitted, say): this
        // node may not be the primary any more, and one that is may have run them.
        return Attempt::Abort(Abort::Unavailable);
    }
    let mut txn = coordinator.begin(co);
    txn.commit_only_in(view);
    txn.set_deadline(co.now_ns() + RECOVERY_WAIT_NS);
    if let Some(age) = age {
        txn.set_age(age);
    }
    let mut tables: Vec<TableId> = keys.iter().map(|(table, _)| *table).collect();
    tables.sort_unstable();
    tables.dedup();
    let mut view = BatchView::default();
    for table in tables {
        let mut of_table: Vec<Key> = keys
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, key)| *key)
            .collect();
        of_table.sort_unstable();
        of_table.dedup();
        let values = match txn.read_many(table, &of_table).await {
            Ok(values) => values,
            Err(abort) => return Attempt::Abort(abort),
        };
        for (key, value) in of_table.into_iter().zip(values) {
            let version = txn.read_version(table, &key).unwrap_or(0);
            view.entries.push(ViewEntry {
                table,
                key,
                version,
                value,
                written: false,
            });
        }
    }
    let now = co.now_ns();
    let mut results = Vec::with_capacity(operations.len());
    for op in operations {
        let mut result = Vec::new();
        op.procedure.apply(op.args(), &mut view, now, &mut result);
        results.push(result);
    }
    txn.set_note(encode_note(
        operations
            .iter()
            .zip(&results)
            .map(|(op, result)| (op.origin, result.as_slice())),
    ));
    for entry in view.entries {
        if entry.written
            && let Err(abort) = txn.put(entry.table, entry.key, entry.value)
        {
            return Attempt::Abort(abort);
        }
    }
    match txn.commit().await {
        Ok(()) => Attempt::Done(results),
        Err(abort) => Attempt::Abort(abort),
    }
}

/// How the caller's [`Coordinator::ship`] ended.
pub type ShipResult = Result<Vec<u8>, Abort>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn origin(seq: u64) -> Origin {
        Origin {
            node: 1,
            thread: 0,
            incarnation: 7,
            seq,
        }
    }

    #[test]
    fn requests_round_trip_and_short_ones_are_refused() {
        let mut bytes = Vec::new();
        encode_ship(&origin(9), 3, 42, b"args", &mut bytes);
        assert_eq!(decode_ship(&bytes), Some((origin(9), 3, 42, &b"args"[..])));
        for len in 0..REQUEST_HEADER_BYTES {
            assert_eq!(decode_ship(&bytes[..len]), None);
        }
    }

    #[test]
    fn answers_read_as_the_caller_takes_them() {
        assert_eq!(ShipStatus::outcome(&[0, 7]), Some(Ok(vec![7])));
        assert_eq!(ShipStatus::outcome(&[ShipStatus::Retry as u8]), None);
        assert_eq!(
            ShipStatus::outcome(&[ShipStatus::Unknown as u8]),
            Some(Err(Abort::OutcomeUnknown))
        );
        // Not run, and never at one primary in this configuration: the caller stops asking.
        assert_eq!(
            ShipStatus::outcome(&[ShipStatus::Split as u8]),
            Some(Err(Abort::Protocol))
        );
        assert_eq!(ShipStatus::outcome(&[99]), Some(Err(Abort::Protocol)));
        assert_eq!(ShipStatus::outcome(&[]), None);
    }

    #[test]
    fn notes_round_trip_and_malformed_ones_yield_their_whole_entries() {
        let big = vec![7u8; REMEMBERED_RESULT_BYTES_MAX + 1];
        let entries = [
            (origin(1), &b"one"[..]),
            (origin(2), &b""[..]),
            (origin(3), &big[..]),
            (origin(4), &b"x"[..]),
        ];
        let note = encode_note(entries.iter().copied());
        let expected: Vec<(Origin, Option<&[u8]>)> = vec![
            (origin(1), Some(&b"one"[..])),
            (origin(2), Some(&b""[..])),
            (origin(3), None),
            (origin(4), Some(&b"x"[..])),
        ];
        assert_eq!(note_entries(&note).collect::<Vec<_>>(), expected);
        assert!(note.len() < 200, "a large result is not carried");
        for len in 0..note.len() {
            let some: Vec<_> = note_entries(&note[..len]).collect();
            assert!(some.len() < entries.len());
            assert_eq!(some, expected[..some.len()]);
        }
        let mut results = ShipResults::new(8);
        results.remember(&note);
        assert!(matches!(
            results.lookup(&origin(1)),
            Lookup::Remembered(Remembered::Done(r)) if r == b"one"
        ));
        assert!(matches!(
            results.lookup(&origin(3)),
            Lookup::Remembered(Remembered::Unknown)
        ));
        // Garbage never panics.
        results.remember(&[0xff; 40]);
    }

    #[test]
    fn forgotten_results_answer_unknown_never_new() {
        let mut results = ShipResults::new(2);
        results.insert(origin(1), Remembered::Done(b"a"));
        results.insert(origin(2), Remembered::Unknown);
        results.insert(origin(3), Remembered::Done(b"c"));
        assert!(matches!(results.lookup(&origin(1)), Lookup::Forgotten));
        assert!(matches!(
            results.lookup(&origin(2)),
            Lookup::Remembered(Remembered::Unknown)
        ));
        assert!(matches!(
            results.lookup(&origin(3)),
            Lookup::Remembered(Remembered::Done(_))
        ));
        assert!(matches!(results.lookup(&origin(4)), Lookup::New));
        let other = Origin {
            incarnation: 8,
            ..origin(1)
        };
        assert!(matches!(results.lookup(&other), Lookup::New));
    }

    #[test]
    fn the_last_half_of_the_limit_is_always_remembered() {
        let mut results = ShipResults::new(64);
        for seq in 1..=1000u64 {
            let result = seq.to_le_bytes();
            results.insert(origin(seq), Remembered::Done(&result));
            // Remembered again (the primary installs, then answers): no rotation.
            results.insert(origin(seq), Remembered::Done(&result));
            for back in 0..32u64.min(seq) {
                let expected = (seq - back).to_le_bytes();
                assert!(
                    matches!(
                        results.lookup(&origin(seq - back)),
                        Lookup::Remembered(Remembered::Done(r)) if r == expected
                    ),
                    "{} after {seq}",
                    seq - back
                );
            }
            if seq > 64 {
                assert!(matches!(
                    results.lookup(&origin(seq - 64)),
                    Lookup::Forgotten
                ));
            }
            assert!(matches!(results.lookup(&origin(seq + 1)), Lookup::New));
        }
        // A result changes (a commit's outcome learned late).
        results.insert(origin(1000), Remembered::Unknown);
        assert!(matches!(
            results.lookup(&origin(1000)),
            Lookup::Remembered(Remembered::Unknown)
        ));
    }

    #[test]
    fn a_view_tells_versions_only_of_keys_no_earlier_operation_wrote() {
        let key = Key::from_bytes(&[1; 16]).unwrap();
        let mut view = BatchView {
            entries: vec![ViewEntry {
                table: TableId(1),
                key,
                version: 5,
                value: None,
                written: false,
            }],
        };
        assert_eq!(view.version(TableId(1), &key), Some(5));
        assert_eq!(view.get(TableId(1), &key), Some(None));
        assert!(view.put(TableId(1), &key, Some(b"x".to_vec())));
        assert_eq!(view.version(TableId(1), &key), None);
        assert_eq!(view.get(TableId(1), &key), Some(Some(&b"x"[..])));
        let other = Key::from_bytes(&[2; 16]).unwrap();
        assert!(!view.put(TableId(1), &other, None));
        assert_eq!(view.get(TableId(1), &other), None);
    }

    fn any_origin() -> impl Strategy<Value = Origin> {
        any::<(u16, u16, u64, u64)>().prop_map(|(node, thread, incarnation, seq)| Origin {
            node,
            thread,
            incarnation,
            seq,
        })
    }

    proptest! {
        #[test]
        fn any_request_round_trips(
            origin in any_origin(),
            procedure in any::<u8>(),
            partition in any::<u32>(),
            args in vec(any::<u8>(), 0..40),
        ) {
            let mut bytes = Vec::new();
            encode_ship(&origin, procedure, partition, &args, &mut bytes);
            prop_assert_eq!(decode_ship(&bytes), Some((origin, procedure, partition, &args[..])));
        }

        #[test]
        fn any_answer_round_trips(status in 0u8..8, body in vec(any::<u8>(), 0..40)) {
            let status = ShipStatus::from_byte(status).expect("0..8 are statuses");
            let mut answer = Vec::new();
            status.encode_answer(&body, &mut answer);
            let expected = match status {
                ShipStatus::Done => Some(Ok(body.clone())),
                ShipStatus::Retry => None,
                ShipStatus::Unknown => Some(Err(Abort::OutcomeUnknown)),
                ShipStatus::Conflict => Some(Err(Abort::Conflict)),
                ShipStatus::TooLarge => Some(Err(Abort::TooLarge)),
                ShipStatus::OutOfMemory => Some(Err(Abort::OutOfMemory)),
                ShipStatus::Split | ShipStatus::Failed => Some(Err(Abort::Protocol)),
            };
            prop_assert_eq!(ShipStatus::outcome(&answer), expected);
        }

        #[test]
        fn any_note_round_trips(entries in vec((any_origin(), vec(any::<u8>(), 0..40)), 0..6)) {
            let note = encode_note(entries.iter().map(|(o, r)| (*o, &r[..])));
            let decoded: Vec<_> = note_entries(&note).collect();
            prop_assert_eq!(decoded.len(), entries.len());
            for ((origin, result), (o, r)) in decoded.into_iter().zip(&entries) {
                prop_assert_eq!(origin, *o);
                prop_assert_eq!(result, Some(&r[..]));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..200)) {
            let _ = decode_ship(&bytes);
            let _ = ShipStatus::outcome(&bytes);
            let _ = note_entries(&bytes).count();
        }
    }
}
