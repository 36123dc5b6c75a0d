//! The lease thread allocates nothing once its node is a member (FaRM 5.1 preallocates
//! all the memory its lease manager uses): three member nodes in this process, over UDP
//! with every datagram sealed as in production, renew their leases, and a global
//! allocator counts what each lease thread (known by its kernel thread id) allocates.
//! The non-CM members' threads send requests and take grants; the CM's takes requests,
//! grants and acks; every one publishes its status and memory figures meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrotx_cluster::{Configuration, CoordinationError, CoordinationService, View};
use ferrotx_membership::{Options, Phase};
use ferrotx_node::{ClusterKeys, LeaseThread, LeaseTuning, Node, NodeOptions};
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys};

const NODES: usize = 3;

/// Slots for two clusters (the two tests may run at once).
const SLOTS: usize = 2 * NODES;

/// The lease threads' kernel ids (0: none yet) and what each allocated.
static LEASE_THREADS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
static ALLOCATIONS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

thread_local! {
    /// This thread's kernel id, asked once (const-initialised, no destructor: it never
    /// allocates).
    static TID: Cell<i32> = const { Cell::new(0) };
}

fn count_allocation() {
    let tid = TID
        .try_with(|tid| {
            if tid.get() == 0 {
                // SAFETY: gettid takes no argument and cannot fail.
                tid.set(unsafe { libc::gettid() });
            }
            tid.get()
        })
        .unwrap_or(0);
    for (thread, count) in LEASE_THREADS.iter().zip(&ALLOCATIONS) {
        if thread.load(Ordering::Relaxed) == tid {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the counters (a
// const-initialised thread-local and static atomics, none of which allocates) are the only
// addition.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded with the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The view and the cluster id stored.
type Stored = (Option<View>, Option<[u8; 16]>);

/// A coordination service the nodes' lease threads share (the real ones are files).
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Stored>>);

impl CoordinationService for Shared {
    fn read(&mut self) -> Result<Option<View>, CoordinationError> {
        Ok(self.0.lock().unwrap().0.clone())
    }

    fn cluster_id(&mut self, proposed: [u8; 16]) -> Result<[u8; 16], CoordinationError> {
        Ok(*self.0.lock().unwrap().1.get_or_insert(proposed))
    }

    fn compare_and_swap(
        &mut self,
        expected: Option<u64>,
        next: &View,
    ) -> Result<(), CoordinationError> {
        let mut state = self.0.lock().unwrap();
        let current = state.0.as_ref().map(|v| v.id);
        if current != expected || expected.is_some_and(|id| next.id <= id) {
            return Err(CoordinationError::Conflict(state.0.clone().map(Box::new)));
        }
        state.0 = Some(next.clone());
        Ok(())
    }
}

/// What one window of renewals did at every node: allocations on its lease thread, and
/// its renewals over the window; disturbed if a lease expired, a member was suspected or a
/// view committed in it (a false positive on a loaded machine: reconfiguring allocates).
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    allocations: [u64; NODES],
    renewals: [u64; NODES],
    disturbed: bool,
}

/// Runs a cluster of [`NODES`] member nodes with their lease threads counted in slots
/// `slots` (of [`LEASE_THREADS`]) and UDP ports from `port_base`; returns its CM and six
/// windows of a second of renewals, after a warm-up.
fn measure(slots: std::ops::Range<usize>, port_base: u16) -> (u16, Vec<Window>) {
    // Long enough that a debug build on a loaded machine renews in time, short enough for
    // dozens of renewals per window.
    const LEASE_MS: u64 = 250;
    const WINDOW: Duration = Duration::from_millis(1_000);
    let config = Arc::new(Configuration::local(NODES as u16, 3, 1, 2, port_base).unwrap());
    let auth = Auth::new(
        Keys::one(Key::from_material(&[5; KEY_BYTES])),
        ClusterId([6; 16]),
        [7; 16],
    );
    let coordination = Shared::default();
    let epoch = Instant::now();
    let starts: Vec<_> = (0..NODES as u16)
        .map(|id| {
            let config = config.clone();
            let coordination = coordination.clone();
            let keys = ClusterKeys::fixed(Some(auth.clone()));
            std::thread::spawn(move || {
                let options = NodeOptions {
                    keys: Some(keys.clone()),
                    ..NodeOptions::default()
                };
                let lease = LeaseThread::start(
                    config.clone(),
                    id,
                    u64::from(id) + 1,
                    Options::with_lease_ms(LEASE_MS),
                    Box::new(coordination),
                    epoch,
                    Some(keys),
                    // Neither step: what is counted here does not depend on them, and a
                    // test must not lock its process's memory.
                    LeaseTuning::NONE,
                )
                .unwrap();
                let transports = Node::udp_transports(&config, id, &options).unwrap();
                Node::start_member(transports, &options, lease, Duration::from_secs(60)).unwrap()
            })
        })
        .collect();
    let nodes: Vec<Node> = starts.into_iter().map(|s| s.join().unwrap()).collect();
    let links: Vec<_> = nodes
        .iter()
        .map(|n| n.membership().unwrap().clone())
        .collect();
    // Every node a member of the committed first view.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !links
        .iter()
        .all(|l| l.status().phase == Some(Phase::Member))
    {
        assert!(Instant::now() < deadline, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (threads, counters) = (&LEASE_THREADS[slots.clone()], &ALLOCATIONS[slots]);
    for (slot, link) in threads.iter().zip(&links) {
        let tid = link.thread_id();
        assert!(tid > 0, "the lease thread runs");
        slot.store(tid, Ordering::Relaxed);
    }
    // Warm-up: the first renewals, grants and status fill their buffers and maps.
    std::thread::sleep(4 * WINDOW);
    let counts =
        || -> [u64; NODES] { std::array::from_fn(|i| counters[i].load(Ordering::Relaxed)) };
    let stats =
        || -> Vec<ferrotx_membership::Stats> { links.iter().map(|l| l.status().stats).collect() };
    let mut windows = Vec::new();
    for _ in 0..6 {
        let (before, stats_before) = (counts(), stats());
        std::thread::sleep(WINDOW);
        let (after, stats_after) = (counts(), stats());
        let mut window = Window::default();
        for i in 0..NODES {
            let (a, b) = (&stats_after[i], &stats_before[i]);
            window.allocations[i] = after[i] - before[i];
            window.renewals[i] = a.renewals - b.renewals;
            window.disturbed |= a.lease_expirations != b.lease_expirations
                || a.suspicions != b.suspicions
                || a.views_committed != b.views_committed;
        }
        windows.push(window);
    }
    let cm = links[0].status().view.unwrap().cm;
    for slot in threads {
        slot.store(0, Ordering::Relaxed);
    }
    drop(nodes);
    let quiet: Vec<Window> = windows.iter().copied().filter(|w| !w.disturbed).collect();
    assert!(
        quiet.len() >= 3,
        "too few windows without a false positive to judge: {windows:?}"
    );
    for w in &quiet {
        for (i, &renewals) in w.renewals.iter().enumerate() {
            // A member renews every fifth of a lease (the CM grants theirs).
            assert!(
                i as u16 == cm || renewals >= 10,
                "node {i} renewed too little: {windows:?}"
            );
        }
    }
    (cm, quiet)
}

/// A member's lease thread (every one but the CM's): a request every fifth of a lease,
/// its grant taken and acknowledged, the status published, the memory figures read.
#[test]
fn members_renew_without_allocating_on_the_lease_thread() {
    let (cm, quiet) = measure(0..NODES, 53_000);
    for w in &quiet {
        for (node, &allocations) in w.allocations.iter().enumerate() {
            if node as u16 != cm {
                assert_eq!(
                    allocations, 0,
                    "node {node}'s lease thread allocated while renewing: {quiet:?} (CM: {cm})"
                );
            }
        }
    }
}

/// The CM's lease thread: it grants and takes acks without allocating, and the
/// membership state machine's check, once a lease, of whether the members' memory
/// figures would let a new view place copies the current one could not
/// (`Membership::room_due`) works in a scratch view kept from one lease to the next.
#[test]
fn the_cm_grants_without_allocating_on_the_lease_thread() {
    let (cm, quiet) = measure(NODES..2 * NODES, 53_100);
    for w in &quiet {
        assert_eq!(
            w.allocations[usize::from(cm)],
            0,
            "the CM's lease thread allocated while granting: {quiet:?} (CM: {cm})"
        );
    }
}
