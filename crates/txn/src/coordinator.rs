//! The coordinator side: transactions run by coroutines (FaRM 4; docs/transactions.md).
//!
//! One file per concern: `execution` (a transaction's reads and buffered writes),
//! `key_index` (where a transaction's keys are among its reads and writes), `read` (one
//! key at its primary, and single-key reads), `commit` (FaRM 4 steps 1-5),
//! `round` (one message of a phase to each of its nodes), `log_space` (reservations at
//! backups), `truncation` (the truncation mark), `keyspace` (scans and counts outside
//! transactions), `placement`, `abort` and `stats`. This file holds the coordinator
//! itself and the checks of input against the schema.

mod abort;
mod commit;
mod execution;
mod key_index;
mod keyspace;
mod log_space;
mod placement;
mod read;
mod reclaim;
mod recovery;
mod refill;
mod round;
mod ship;
mod stats;
mod truncation;

#[cfg(test)]
mod tests;

pub use refill::{REFILL_SLOTS, RefillThread};

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use ferrotx_exec::{Co, Signal};
use ferrotx_store::{Key, StoreError, TableId, TableSpec};
use ferrotx_wire::{EndpointId, ViewId};

use crate::messages::TxId;
use crate::participant::{LOG_RECORDS_MAX, NodeStore, Participant};

pub use abort::{Abort, NO_PRIMARY};

/// Longest a transaction waits for a configuration being switched to to be committed
/// before it gives up with [`Abort::Unavailable`] (and a Redis client's command retries).
pub const ACCEPT_WAIT_NS: u64 = 500_000_000;
pub use execution::Txn;
pub use placement::Placement;
pub use stats::CoordinatorStats;

use execution::FetchSpare;
use log_space::LogSpace;
use truncation::Truncation;

/// Longest wait of a fault point that delays the coordinator ([`buggify_delay`]): 2 ms,
/// ten times the simulator's largest network delay and beyond the RPC layer's shortest
/// retransmission timeout, so a delayed phase lets other coroutines' commits, reads and
/// retransmissions run in between, yet well below a suspicion timeout (a coordinator
/// that pauses is slow, not dead).
const BUGGIFY_DELAY_MAX_NS: u64 = 2_000_000;

/// The wait of a fault point that fired (`if ferrotx_buggify::fires(point) {
/// buggify_delay(co).await }`, so production pays only the load in `fires`): the coroutine
/// sleeps a seeded time below [`BUGGIFY_DELAY_MAX_NS`], as a coordinator descheduled or
/// slowed by its other coroutines would. Waiting is always legal: the protocol assumes
/// nothing about how fast a coordinator moves from one step to the next.
async fn buggify_delay(co: &Co) {
    let deadline = co.now_ns() + ferrotx_buggify::below(BUGGIFY_DELAY_MAX_NS);
    co.sleep_until(deadline).await;
}

/// The coordinator of one worker thread, shared by its coroutines.
pub struct Coordinator {
    /// A message to this node's own participant, encoded here (never held across an
    /// await).
    scratch: RefCell<Vec<u8>>,
    /// That participant's response.
    response: RefCell<Vec<u8>>,
    local: EndpointId,
    view: Cell<ViewId>,
    incarnation: u64,
    participant: Rc<RefCell<Participant>>,
    /// The node's partitions, for reads at a local primary without RPC.
    store: RefCell<Arc<NodeStore>>,
    placement: RefCell<Arc<dyn Placement>>,
    /// False from NEW-CONFIG to NEW-CONFIG-COMMIT: new transactions wait (FaRM 5.2 step 6).
    accepting: Cell<bool>,
    /// Notified when `accepting` turns true: the coroutines waiting for it resume.
    opened: Signal,
    schema: Arc<[TableSpec]>,
    next_counter: Cell<u64>,
    truncation: RefCell<Truncation>,
    log_space: RefCell<LogSpace>,
    stats: Cell<CoordinatorStats>,
    /// The members of the current view (node, incarnation): recovery coordinators are
    /// chosen among them.
    members: RefCell<Arc<[(u16, u64)]>>,
    /// This thread's transactions whose outcome recovery decides: the partitions they
    /// write, and whether a coroutine still waits (else the transaction ends, joining
    /// the truncation mark, only when decided).
    awaiting: RefCell<BTreeMap<TxId, (Vec<u32>, bool)>>,
    /// Decisions for the coroutines waiting, or still to come to wait (a commit decided
    /// before its coroutine resumed from the view change).
    outcomes: RefCell<BTreeMap<TxId, bool>>,
    /// Notified when a decision comes in.
    decided: Signal,
    /// The newest view this thread switched to from one older than the view before it:
    /// views in between went by without it (its life suspended and readmitted). Their
    /// recovery may have decided this thread's transactions of older views and every
    /// replica forgotten the decision; recovering one again then finds no record and
    /// aborts it, committed or not (see `Txn::await_recovery`).
    skipped_to: Cell<ViewId>,
    /// Worker threads per node: a shipped operation goes to thread `partition % threads`
    /// of its primary ([`crate::ship`]).
    ship_threads: Cell<u16>,
    /// The counter of this thread's shipped operations (their [`crate::ship::Origin`]).
    next_ship_seq: Cell<u64>,
    /// This thread's executor of shipped operations, for those whose primary is this
    /// very endpoint (reached in memory).
    shipping: RefCell<Option<Rc<crate::ship::Shipping>>>,
    /// The counter that makes this thread's ages unique.
    next_age: Cell<u32>,
    /// The view this thread was built in: recovery runs for every later one.
    started_in: ViewId,
    /// The map of a large transaction's keys, kept for the next one.
    spare_keys: key_index::SpareKeyMap,
    /// [`Txn::read_many`]'s list of keys to read, kept for the next call.
    fetch_spare: FetchSpare,
}

impl Coordinator {
    /// The coordinator of endpoint `local`, using the thread's `participant` for the
    /// partitions of its own node (accessed in memory, without RPC), `placement` to find
    /// the others, and `schema` to refuse bad input before anything is sent.
    pub fn new(
        local: EndpointId,
        view: ViewId,
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
            view: Cell::new(view),
            incarnation,
            participant,
            store: RefCell::new(store),
            placement: RefCell::new(placement),
            accepting: Cell::new(true),
            opened: Signal::new(64),
            schema,
            next_counter: Cell::new(1),
            truncation: RefCell::new(Truncation::default()),
            log_space: RefCell::new(LogSpace::new(LOG_RECORDS_MAX)),
            stats: Cell::new(CoordinatorStats::default()),
            members: RefCell::new(Arc::from(Vec::new())),
            awaiting: RefCell::new(BTreeMap::new()),
            outcomes: RefCell::new(BTreeMap::new()),
            decided: Signal::new(64),
            skipped_to: Cell::new(ViewId::NONE),
            ship_threads: Cell::new(1),
            next_ship_seq: Cell::new(1),
            shipping: RefCell::new(None),
            next_age: Cell::new(0),
            started_in: view,
            spare_keys: key_index::SpareKeyMap::default(),
            fetch_spare: FetchSpare::default(),
        }
    }

    /// A new transaction's age ([`crate::reservation::Age`]): no attempt lost yet, and a
    /// number unique to this thread's transaction. A caller that retries a transaction
    /// after it lost gives each later attempt the age with the attempts lost so far
    /// ([`crate::reservation::Age::after`], [`Txn::set_age`]), so that it eventually goes
    /// ahead of the others.
    pub fn age(&self) -> crate::reservation::Age {
        let n = self.next_age.get();
        self.next_age.set(n.wrapping_add(1));
        crate::reservation::Age {
            lost: 0,
            who: (u64::from(self.local.0) << 32) | u64::from(n),
        }
    }

    /// The worker thread of a node that runs the operations shipped to `partition`.
    pub fn ship_thread(&self, partition: u32) -> u16 {
        u16::try_from(partition % u32::from(self.ship_threads.get())).expect("below a u16")
    }

    /// Sets this thread's executor of shipped operations ([`crate::ship::Shipping`]).
    pub fn set_shipping(&self, shipping: Rc<crate::ship::Shipping>) {
        *self.shipping.borrow_mut() = Some(shipping);
    }

    /// The same coordinator shipping operations to thread `partition % threads` of each
    /// primary (every node runs `threads` worker threads). Panics if `threads` is 0.
    pub fn with_ship_threads(self, threads: u16) -> Self {
        assert!(threads > 0, "a node has worker threads");
        self.ship_threads.set(threads);
        self
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

    /// The placement of the current configuration, for code that holds it across an await
    /// (a commit keeps the placement it started with; a switch may replace the field
    /// meanwhile). Lookups within one statement borrow the field instead, without
    /// touching the reference count.
    pub fn placement(&self) -> Arc<dyn Placement> {
        self.placement.borrow().clone()
    }

    /// The node's partitions in the current configuration.
    pub(crate) fn store(&self) -> Arc<NodeStore> {
        self.store.borrow().clone()
    }

    /// Switches to view `view`: its placement, and the node's
    /// partitions with their roles in it (FaRM 5.2 step 6). The engine switches at the
    /// same time, failing every call outstanding under the old configuration, so a
    /// transaction that began before fails rather than mixing the two.
    pub fn switch_configuration(
        &self,
        view: ViewId,
        members: Arc<[(u16, u64)]>,
        placement: Arc<dyn Placement>,
        store: Arc<NodeStore>,
    ) {
        if view.0 > self.view.get().0.saturating_add(1) {
            self.skipped_to.set(self.skipped_to.get().max(view));
        }
        self.view.set(view);
        *self.members.borrow_mut() = members;
        *self.placement.borrow_mut() = placement;
        *self.store.borrow_mut() = store.clone();
        let mut participant = self.participant.borrow_mut();
        participant.set_store(view, store);
        if view > self.started_in {
            // `run_recovery` runs a round in it.
            participant.owe_recovery(view);
        }
    }

    /// Whether new transactions may start: false from NEW-CONFIG until NEW-CONFIG-COMMIT.
    /// Whoever turns it true then notifies [`Coordinator::opened`] on this thread's
    /// executor, so the transactions waiting resume.
    pub fn set_accepting(&self, accepting: bool) {
        self.accepting.set(accepting);
    }

    /// The signal notified when transactions may start again.
    pub fn opened(&self) -> &Signal {
        &self.opened
    }

    /// Waits, at most [`ACCEPT_WAIT_NS`] and not past `deadline_ns`, until transactions may start (a configuration
    /// being switched to is committed); false if they still may not.
    pub(crate) async fn wait_accepting(&self, co: &Co, deadline_ns: u64) -> bool {
        if self.accepting.get() {
            return true;
        }
        let deadline = (co.now_ns() + ACCEPT_WAIT_NS).min(deadline_ns);
        while !self.accepting.get() {
            if !co.wait_until(&self.opened, deadline).await {
                return self.accepting.get();
            }
        }
        true
    }

    /// See [`Coordinator::set_accepting`].
    pub fn accepting(&self) -> bool {
        self.accepting.get()
    }

    /// The current view.
    pub fn view(&self) -> ViewId {
        self.view.get()
    }

    /// Counters so far.
    pub fn stats(&self) -> CoordinatorStats {
        self.stats.get()
    }

    pub(crate) fn count(&self, update: impl FnOnce(&mut CoordinatorStats)) {
        let mut stats = self.stats.get();
        update(&mut stats);
        self.stats.set(stats);
    }

    /// Whether the primary of `key` of `table` is on this coordinator's node (so reading
    /// it takes no RPC).
    pub fn is_local(&self, table: TableId, key: &Key) -> bool {
        let partition = self.placement.borrow().partition_of(table, key);
        self.placement.borrow().primary(partition) == self.local.node()
    }
    /// This thread's participant.
    pub(crate) fn participant(&self) -> &Rc<RefCell<Participant>> {
        &self.participant
    }

    /// The partition of `key` of `table`.
    pub fn partition_of(&self, table: TableId, key: &Key) -> u32 {
        self.placement.borrow().partition_of(table, key)
    }

    /// Whether `partition` exists in the current configuration.
    pub fn has_partition(&self, partition: u32) -> bool {
        self.placement.borrow().contains(partition)
    }

    /// The primary of `partition` in the current configuration ([`NO_PRIMARY`] if it
    /// has no copy left).
    pub fn primary_of_partition(&self, partition: u32) -> u16 {
        self.placement.borrow().primary(partition)
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
}
