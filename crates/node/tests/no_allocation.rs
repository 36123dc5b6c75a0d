//! The hot path allocates nothing: once a client and a server have warmed up (buffers at
//! their working sizes, sessions created), whole rounds of batched RPCs run without a
//! single heap allocation, counted by a global allocator that wraps the system one. Every
//! datagram is sealed and opened (`Config::auth`), as in production.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrotx_node::Worker;
use ferrotx_rpc::{Config, Engine};
use ferrotx_transport::mem::MemNetwork;
use ferrotx_wire::EndpointId;
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is the
// only addition.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_rounds_allocate_nothing() {
    const COROUTINES: usize = 20;
    const BATCH: usize = 8;
    let network = MemNetwork::new();
    let auth = Auth::new(
        Keys::one(Key::from_material(&[5; KEY_BYTES])),
        ClusterId([6; 16]),
        [7; 16],
    );
    let client_id = EndpointId::new(1, 0);
    let server_id = EndpointId::new(0, 0);
    let mut server_engine = Engine::new(
        server_id,
        Config {
            callers: 1,
            auth: Some(auth.clone()),
            ..Config::default()
        },
    );
    server_engine.register(
        1,
        Box::new(|request, response| {
            response.extend_from_slice(request.payload);
            Ok(())
        }),
    );
    let mut server = Worker::new(network.endpoint(server_id), server_engine);
    let config = Config {
        callers: COROUTINES,
        max_batch: BATCH,
        credits: 160,
        auth: Some(auth),
        ..Config::default()
    };
    // The client learns the server's incarnation by connecting, as in production.
    let mut client = Worker::new(network.endpoint(client_id), Engine::new(client_id, config));
    let rounds = Rc::new(Cell::new(0u64));
    for _ in 0..COROUTINES {
        let rounds = rounds.clone();
        client.executor().spawn(move |co| async move {
            let payload = [7u8; 32];
            loop {
                for _ in 0..BATCH {
                    co.push(server_id, 1, &payload);
                }
                co.call().await;
                for i in 0..BATCH {
                    co.result(i, |r| assert_eq!(r.unwrap(), &payload));
                }
                rounds.set(rounds.get() + 1);
            }
        });
    }
    let mut now = 0;
    let mut step = |client: &mut Worker<_>, server: &mut Worker<_>| {
        now += 10_000;
        client.step(now);
        server.step(now + 5_000);
    };
    for _ in 0..50 {
        step(&mut client, &mut server);
    }
    let warm = rounds.get();
    assert!(warm > 0, "no round completed while warming up");
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..200 {
        step(&mut client, &mut server);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let rounds_measured = rounds.get() - warm;
    assert!(rounds_measured >= 200 * COROUTINES as u64 - COROUTINES as u64);
    let engine = server.shared().engine();
    let stats = engine.stats();
    let (received, refused) = (
        stats.datagrams_received,
        stats.auth_refused.iter().sum::<u64>(),
    );
    assert!(
        received > 0 && refused == 0,
        "{received} received, {refused} refused"
    );
    assert_eq!(
        allocations, 0,
        "{allocations} allocations in {rounds_measured} batches of {BATCH} RPCs"
    );
}
