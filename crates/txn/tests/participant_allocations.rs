//! The participant's commit path allocates nothing once warm: LOCK, COMMIT-PRIMARY and
//! COMMIT-BACKUP (with the truncation it carries) keep records in reused buffers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
use ferrotx_txn::messages::{LockRecord, TxId, Write, encode_tx};
use ferrotx_txn::participant::{NodeStore, Participant, Role};
use ferrotx_wire::ViewId;

/// Counts this thread's allocations (other test threads do not disturb the count).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local `Cell` that
// never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const TABLE: TableId = TableId(1);

fn tx(counter: u64) -> TxId {
    TxId {
        view: ViewId(1),
        node: 2,
        thread: 0,
        incarnation: 1,
        counter,
    }
}

fn record(counter: u64, partition: u32, version: u64, mark: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    LockRecord {
        tx: tx(counter),
        partitions: vec![partition],
        writes: vec![Write {
            partition,
            table: TABLE,
            key: Key::from(counter % 16),
            version,
            value: Some(counter.to_le_bytes().to_vec()),
        }],
        truncate_up_to: mark,
    }
    .encode(&mut buf);
    buf
}

#[test]
fn the_commit_path_of_a_participant_allocates_nothing_once_warm() {
    let schema = [TableSpec::fixed(1, "counters", 8)];
    let primary = Arc::new(Partition::new(PartitionId(0), &schema));
    let backup = Arc::new(Partition::new(PartitionId(1), &schema));
    for key in 0..16 {
        primary
            .load(TABLE, Key::from(key), &0u64.to_le_bytes())
            .unwrap();
        backup
            .load(TABLE, Key::from(key), &0u64.to_le_bytes())
            .unwrap();
    }
    let mut store = NodeStore::new();
    store.host(Role::Primary, primary);
    store.host(Role::Backup, backup);
    let mut participant = Participant::new(Arc::new(store));

    // Every message of 4,000 one-key transactions, encoded before counting: transaction
    // i writes key i % 16, which is then at version i / 16 + 1.
    const TRANSACTIONS: u64 = 4_000;
    const WARM_UP: u64 = 500;
    let messages: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = (1..=TRANSACTIONS)
        .map(|i| {
            let version = (i - 1) / 16 + 1;
            let mut commit = Vec::new();
            encode_tx(&tx(i), &mut commit);
            (
                record(i, 0, version, i - 1),
                commit,
                record(i, 1, version, i - 1),
            )
        })
        .collect();
    let mut response = Vec::with_capacity(64);
    let mut counted = 0;
    for (i, (lock, commit, log)) in messages.iter().enumerate() {
        let before = allocations();
        for (handler, payload) in [
            (Participant::lock as fn(&mut _, &_, &mut _) -> _, lock),
            (Participant::commit_backup, log),
            (Participant::commit_primary, commit),
        ] {
            response.clear();
            handler(&mut participant, payload, &mut response).unwrap();
            assert_eq!(response[0], 1, "transaction {i}");
        }
        if i as u64 >= WARM_UP {
            counted += allocations() - before;
        }
    }
    assert_eq!(participant.stats().commits, TRANSACTIONS);
    assert_eq!(counted, 0, "allocations after warm-up");
}
