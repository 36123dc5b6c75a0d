//! In-process transport: a whole cluster inside one process, each endpoint a bounded
//! lock-free inbox.
//!
//! It behaves like the UDP transport without the kernel: datagrams are copied, may be
//! dropped when an inbox is full (as a full socket buffer drops them), and arrive from a
//! known endpoint. Sending takes no lock and, once buffers circulate, allocates nothing:
//! datagram buffers come from a pool shared by the network and return to it when received.
//!
//! Use: make one [`MemNetwork`], register each endpoint with [`MemNetwork::endpoint`]
//! (from any thread, in any order: endpoints registered later are found by those
//! registered earlier), move each [`MemTransport`] to the thread that drives it, and call
//! [`Transport::wait`] only from that thread. Dropping a transport unregisters its
//! endpoint, which may then be registered again (a restarted node).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, Thread};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use ferrotx_wire::EndpointId;
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use crate::{Doorbell, RxBatch, Transport, TransportStats, TxBatch, UDP_MAX_PAYLOAD_BYTES};

/// Datagrams an endpoint's inbox holds before further ones are dropped. A worker drains
/// its inbox every loop iteration; 4,096 datagrams is several full receive batches from
/// each of dozens of peers, about what an 8 MiB socket buffer holds of 2 KiB datagrams,
/// so drops happen under the same overload as on UDP and not sooner.
pub const INBOX_CAPACITY: usize = 4096;

/// Datagram buffers the network keeps for reuse. In-flight datagrams are bounded by the
/// senders' coroutine slots (about 20 per worker, a few datagrams each), so 1,024 covers a
/// cluster of a few dozen workers without allocating; it also bounds the memory the pool
/// holds to 64 MiB at the largest datagram. Buffers beyond it are freed when received.
pub const POOL_CAPACITY: usize = 1024;

/// A datagram in an inbox.
struct Packet {
    source: EndpointId,
    bytes: Vec<u8>,
}

/// The receiving side of one endpoint, shared with every sender.
struct Inbox {
    queue: ArrayQueue<Packet>,
    /// Set by the receiver just before it parks; a sender that sees it unparks the
    /// receiver.
    sleeping: AtomicBool,
    /// Set when the transport is dropped; senders then look the endpoint up again.
    closed: AtomicBool,
    /// The thread that calls `wait`, recorded at its first call.
    receiver: OnceLock<Thread>,
}

impl Inbox {
    fn new() -> Self {
        Self {
            queue: ArrayQueue::new(INBOX_CAPACITY),
            sleeping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            receiver: OnceLock::new(),
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Copies `bytes` into a pooled buffer and queues it; false if the inbox is full.
    fn deliver(&self, pool: &ArrayQueue<Vec<u8>>, source: EndpointId, bytes: &[u8]) -> bool {
        let mut buffer = pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(bytes.len()));
        buffer.clear();
        buffer.extend_from_slice(bytes);
        if let Err(packet) = self.queue.push(Packet {
            source,
            bytes: buffer,
        }) {
            // A full pool frees the buffer instead.
            let _ = pool.push(packet.bytes);
            return false;
        }
        // Pairs with the fence in `MemTransport::wait`: either this load sees the
        // receiver's `sleeping`, or the receiver's check of the queue sees this packet, so
        // a receiver never sleeps past a datagram.
        fence(Ordering::SeqCst);
        // Only the sender that clears the flag unparks, so a burst costs one wake-up.
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::SeqCst) {
            let receiver = self
                .receiver
                .get()
                .expect("a sleeping receiver recorded its thread");
            receiver.unpark();
        }
        true
    }
}

/// What every endpoint of a network shares.
struct Shared {
    /// Every live endpoint's inbox. Locked to register, unregister, and to refresh a
    /// transport's cache of it: never per datagram.
    registry: Mutex<HashMap<EndpointId, Arc<Inbox>, FixedState>>,
    /// Grows at every change of `registry` (and only under its lock), so that a transport
    /// looking for an unknown endpoint refreshes its cache only if something changed.
    generation: AtomicU64,
    /// Datagram buffers for reuse.
    pool: ArrayQueue<Vec<u8>>,
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, HashMap<EndpointId, Arc<Inbox>, FixedState>> {
        // The map is consistent after every statement that changes it, so a panic in
        // another thread holding the lock leaves nothing to repair.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A network of in-process endpoints. Clones share the same network.
#[derive(Clone)]
pub struct MemNetwork {
    shared: Arc<Shared>,
}

impl Default for MemNetwork {
    fn default() -> Self {
        Self::new()
    }
}

impl MemNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                registry: Mutex::new(HashMap::with_hasher(FixedState::default())),
                generation: AtomicU64::new(0),
                pool: ArrayQueue::new(POOL_CAPACITY),
            }),
        }
    }

    /// Registers endpoint `id` and returns its transport.
    ///
    /// # Panics
    ///
    /// If `id` is already registered (and its transport not dropped): two transports of
    /// one endpoint would split its datagrams between them.
    pub fn endpoint(&self, id: EndpointId) -> MemTransport {
        let inbox = Arc::new(Inbox::new());
        let mut registry = self.shared.registry();
        assert!(
            !registry.contains_key(&id),
            "endpoint {id} is registered twice"
        );
        registry.insert(id, Arc::clone(&inbox));
        let generation = self.shared.generation.load(Ordering::Relaxed) + 1;
        self.shared.generation.store(generation, Ordering::Release);
        let peers = registry
            .iter()
            .map(|(&peer, inbox)| (peer, Arc::clone(inbox)))
            .collect();
        drop(registry);
        MemTransport {
            local: id,
            inbox,
            shared: Arc::clone(&self.shared),
            peers,
            peers_generation: generation,
            doorbell: Arc::new(Doorbell::thread()),
            stats: TransportStats::default(),
        }
    }
}

/// A [`Transport`] for one endpoint of a [`MemNetwork`].
pub struct MemTransport {
    local: EndpointId,
    inbox: Arc<Inbox>,
    shared: Arc<Shared>,
    /// This transport's copy of the registry, so that sending takes no lock.
    peers: HashMap<EndpointId, Arc<Inbox>, FixedState>,
    /// The registry generation `peers` was copied at.
    peers_generation: u64,
    stats: TransportStats,
    /// Unparks the thread that waits (which `wait` parks).
    doorbell: Arc<Doorbell>,
}

impl MemTransport {
    /// Delivers one datagram; false if it was dropped.
    fn deliver(&mut self, target: EndpointId, bytes: &[u8]) -> bool {
        if bytes.len() > UDP_MAX_PAYLOAD_BYTES {
            // What the kernel refuses, this transport refuses too.
            return false;
        }
        if let Some(inbox) = self.peers.get(&target).filter(|inbox| !inbox.is_closed()) {
            return inbox.deliver(&self.shared.pool, self.local, bytes);
        }
        // Not known, or gone: look again only if the registry changed since the copy.
        if !self.refresh_peers() {
            return false;
        }
        match self.peers.get(&target) {
            Some(inbox) if !inbox.is_closed() => {
                inbox.deliver(&self.shared.pool, self.local, bytes)
            }
            _ => false,
        }
    }

    /// Copies the registry again if it changed; true if it did.
    fn refresh_peers(&mut self) -> bool {
        if self.shared.generation.load(Ordering::Acquire) == self.peers_generation {
            return false;
        }
        let registry = self.shared.registry();
        self.peers.clear();
        self.peers.extend(
            registry
                .iter()
                .map(|(&peer, inbox)| (peer, Arc::clone(inbox))),
        );
        self.peers_generation = self.shared.generation.load(Ordering::Relaxed);
        true
    }
}

impl Transport for MemTransport {
    fn local(&self) -> EndpointId {
        self.local
    }

    fn send_batch(&mut self, batch: &TxBatch) -> usize {
        if batch.is_empty() {
            return 0;
        }
        self.stats.send_calls += 1;
        let mut sent = 0;
        for (target, bytes) in batch.iter() {
            if self.deliver(target, bytes) {
                sent += 1;
            }
        }
        self.stats.datagrams_sent += sent as u64;
        self.stats.send_dropped += (batch.len() - sent) as u64;
        sent
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> usize {
        batch.clear();
        while batch.len() < batch.capacity() {
            let Some(packet) = self.inbox.queue.pop() else {
                break;
            };
            let pushed = batch.push(Some(packet.source), &packet.bytes);
            debug_assert!(pushed, "the loop condition leaves room");
            // A full pool frees the buffer instead.
            let _ = self.shared.pool.push(packet.bytes);
        }
        self.stats.datagrams_received += batch.len() as u64;
        batch.len()
    }

    fn wait(&mut self, timeout: Option<Duration>) {
        let receiver = self.inbox.receiver.get_or_init(thread::current);
        assert_eq!(
            receiver.id(),
            thread::current().id(),
            "MemTransport::wait called from two threads: senders would wake the first"
        );
        if !self.inbox.queue.is_empty() {
            return;
        }
        self.inbox.sleeping.store(true, Ordering::SeqCst);
        // Pairs with the fence in `Inbox::deliver` (see there).
        fence(Ordering::SeqCst);
        if self.inbox.queue.is_empty() {
            match timeout {
                Some(timeout) => thread::park_timeout(timeout),
                None => thread::park(),
            }
        }
        // A sender may have cleared it already; a wake-up token it left makes the next
        // park return at once, a spurious return callers allow.
        self.inbox.sleeping.store(false, Ordering::SeqCst);
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }

    fn doorbell(&self) -> Option<Arc<Doorbell>> {
        Some(self.doorbell.clone())
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        self.inbox.closed.store(true, Ordering::Release);
        let mut registry = self.shared.registry();
        let registered = registry
            .get(&self.local)
            .is_some_and(|inbox| Arc::ptr_eq(inbox, &self.inbox));
        if registered {
            registry.remove(&self.local);
            let generation = self.shared.generation.load(Ordering::Relaxed) + 1;
            self.shared.generation.store(generation, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    const A: EndpointId = EndpointId::new(0, 0);
    const B: EndpointId = EndpointId::new(1, 0);
    const C: EndpointId = EndpointId::new(2, 0);

    fn batch_of(datagrams: &[(EndpointId, &[u8])]) -> TxBatch {
        let mut batch = TxBatch::new(datagrams.len().max(1), 256);
        for &(target, bytes) in datagrams {
            assert!(batch.push(target, bytes));
        }
        batch
    }

    fn received(batch: &RxBatch) -> Vec<(Option<EndpointId>, Vec<u8>)> {
        (0..batch.len())
            .map(|i| (batch.get(i).0, batch.get(i).1.to_vec()))
            .collect()
    }

    #[test]
    fn several_destinations_in_one_call() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let mut b = network.endpoint(B);
        let mut c = network.endpoint(C); // registered after A: A finds it anyway
        let batch = batch_of(&[(B, b"b1"), (C, b"c1"), (B, b"b2"), (A, b"self")]);
        assert_eq!(a.send_batch(&batch), 4);
        assert_eq!(a.stats().send_calls, 1);
        let mut rx = RxBatch::new(8, 64);
        assert_eq!(b.recv_batch(&mut rx), 2);
        assert_eq!(
            received(&rx),
            vec![(Some(A), b"b1".to_vec()), (Some(A), b"b2".to_vec())]
        );
        assert_eq!(c.recv_batch(&mut rx), 1);
        assert_eq!(received(&rx), vec![(Some(A), b"c1".to_vec())]);
        assert_eq!(a.recv_batch(&mut rx), 1);
        assert_eq!(b.recv_batch(&mut rx), 0);
        assert_eq!(b.stats().datagrams_received, 2);
    }

    #[test]
    fn unknown_and_departed_targets_are_dropped() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        assert_eq!(a.send_batch(&batch_of(&[(B, b"nobody")])), 0);
        assert_eq!(a.stats().send_dropped, 1);

        let b = network.endpoint(B);
        assert_eq!(a.send_batch(&batch_of(&[(B, b"hello")])), 1);
        drop(b);
        assert_eq!(a.send_batch(&batch_of(&[(B, b"gone")])), 0);
        assert_eq!(a.stats().send_dropped, 2);

        // A restarted B gets a new inbox, which A finds.
        let mut b = network.endpoint(B);
        assert_eq!(a.send_batch(&batch_of(&[(B, b"again")])), 1);
        let mut rx = RxBatch::new(4, 64);
        assert_eq!(b.recv_batch(&mut rx), 1);
        assert_eq!(received(&rx), vec![(Some(A), b"again".to_vec())]);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn double_registration_panics() {
        let network = MemNetwork::new();
        let _a = network.endpoint(A);
        let _again = network.endpoint(A);
    }

    #[test]
    fn full_inbox_drops_and_counts() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let mut b = network.endpoint(B);
        let extra = 10;
        let mut batch = TxBatch::new(64, 16);
        let mut sent = 0;
        for i in 0..INBOX_CAPACITY + extra {
            assert!(batch.push(B, &(i as u32).to_le_bytes()));
            if batch.is_full() {
                sent += a.send_batch(&batch);
                batch.clear();
            }
        }
        sent += a.send_batch(&batch);
        assert_eq!(sent, INBOX_CAPACITY);
        assert_eq!(a.stats().send_dropped, extra as u64);
        assert_eq!(a.stats().datagrams_sent, INBOX_CAPACITY as u64);

        // The oldest datagrams are the ones kept, in order.
        let mut rx = RxBatch::new(64, 16);
        let mut next = 0u32;
        while b.recv_batch(&mut rx) > 0 {
            for i in 0..rx.len() {
                assert_eq!(rx.get(i).1, next.to_le_bytes());
                next += 1;
            }
        }
        assert_eq!(next as usize, INBOX_CAPACITY);
    }

    #[test]
    fn long_datagrams_are_truncated_on_receive() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let mut b = network.endpoint(B);
        assert_eq!(a.send_batch(&batch_of(&[(B, &[5; 100])])), 1);
        let mut rx = RxBatch::new(2, 10);
        assert_eq!(b.recv_batch(&mut rx), 1);
        assert_eq!(rx.get(0), (Some(A), &[5; 10][..]));
    }

    #[test]
    fn wait_times_out() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let start = Instant::now();
        a.wait(Some(Duration::from_millis(30)));
        // park_timeout may return early (spuriously); it must not return much later.
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn wait_returns_at_once_when_data_is_queued() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        assert_eq!(a.send_batch(&batch_of(&[(A, b"x")])), 1);
        let start = Instant::now();
        a.wait(None);
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn sender_wakes_a_sleeping_receiver() {
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let b = network.endpoint(B);
        let receiver = thread::spawn(move || {
            let mut b = b;
            let mut rx = RxBatch::new(4, 64);
            let start = Instant::now();
            // Spurious returns are allowed, so wait until something arrives.
            while b.recv_batch(&mut rx) == 0 {
                b.wait(Some(Duration::from_secs(60)));
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "receiver never woke"
                );
            }
            (start.elapsed(), received(&rx))
        });
        thread::sleep(Duration::from_millis(50));
        assert_eq!(a.send_batch(&batch_of(&[(B, b"wake up")])), 1);
        let (elapsed, got) = receiver.join().unwrap();
        assert_eq!(got, vec![(Some(A), b"wake up".to_vec())]);
        assert!(elapsed < Duration::from_secs(30));
    }

    #[test]
    fn ping_pong_between_threads() {
        const ROUNDS: u32 = 2000;
        let network = MemNetwork::new();
        let mut a = network.endpoint(A);
        let b = network.endpoint(B);
        let echo = thread::spawn(move || {
            let mut b = b;
            let mut rx = RxBatch::new(8, 64);
            let mut tx = TxBatch::new(8, 64);
            let mut echoed = 0;
            while echoed < ROUNDS {
                if b.recv_batch(&mut rx) == 0 {
                    b.wait(Some(Duration::from_millis(100)));
                    continue;
                }
                tx.clear();
                for i in 0..rx.len() {
                    let (source, bytes) = rx.get(i);
                    assert!(tx.push(source.unwrap(), bytes));
                }
                echoed += u32::try_from(b.send_batch(&tx)).unwrap();
            }
        });
        let mut rx = RxBatch::new(8, 64);
        let mut tx = TxBatch::new(1, 64);
        for round in 0..ROUNDS {
            tx.clear();
            assert!(tx.push(B, &round.to_le_bytes()));
            assert_eq!(a.send_batch(&tx), 1);
            while a.recv_batch(&mut rx) == 0 {
                a.wait(Some(Duration::from_millis(100)));
            }
            assert_eq!(received(&rx), vec![(Some(B), round.to_le_bytes().to_vec())]);
        }
        echo.join().unwrap();
        assert_eq!(a.stats().send_dropped, 0);
    }
}
