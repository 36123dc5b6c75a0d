//! One iteration of a worker's event loop (FaSST's master coroutine).

use ferrotx_exec::Executor;
use ferrotx_rpc::{Engine, Event};
use ferrotx_transport::{RxBatch, Transport, TxBatch};

/// Datagrams taken from the transport per receive call, and per send call. 64 matches the
/// batch size at which `recvmmsg`/`sendmmsg` stop getting cheaper per datagram.
pub const BATCH_DATAGRAMS: usize = 64;

/// Events a worker holds for its caller; beyond this they stay in the engine's bounded
/// queue. Each peer is reported at most once until heard from again, so this many covers
/// a cluster of hundreds of endpoints going silent at once.
const EVENTS_MAX: usize = 1024;

/// A worker: transport, RPC engine (inside the executor's shared state) and coroutines.
pub struct Worker<T: Transport> {
    transport: T,
    executor: Executor,
    rx: RxBatch,
    tx: TxBatch,
    events: Vec<Event>,
    /// Until when (this node's clock) the node may serve: its lease (FaRM 5.1). Past it
    /// the worker takes no datagram and runs no coroutine: a node whose lease ran out
    /// serves no read and no commit, and one paused past its lease does not answer when
    /// it resumes. `u64::MAX` without membership.
    serving_until_ns: u64,
    /// Datagrams dropped because the node was not serving.
    dropped_not_serving: u64,
}

impl<T: Transport> Worker<T> {
    /// A worker for `engine` over `transport`; datagram buffers are sized for the
    /// engine's `datagram_bytes`.
    pub fn new(transport: T, engine: Engine) -> Self {
        assert_eq!(transport.local(), engine.local());
        let bytes = engine.config().datagram_bytes;
        Self {
            transport,
            executor: Executor::new(engine),
            rx: RxBatch::new(
                BATCH_DATAGRAMS,
                bytes.max(ferrotx_transport::UDP_MAX_PAYLOAD_BYTES),
            ),
            tx: TxBatch::new(BATCH_DATAGRAMS, bytes),
            events: Vec::new(),
            serving_until_ns: u64::MAX,
            dropped_not_serving: 0,
        }
    }

    /// Sets until when the node may serve (see the field); the membership layer moves it
    /// with every lease renewal.
    pub fn set_serving_until(&mut self, serving_until_ns: u64) {
        self.serving_until_ns = serving_until_ns;
    }

    /// Until when the node may serve.
    pub fn serving_until(&self) -> u64 {
        self.serving_until_ns
    }

    /// Datagrams dropped while the node did not serve.
    pub fn dropped_not_serving(&self) -> u64 {
        self.dropped_not_serving
    }

    /// The state its coroutines share (engine, time, signals).
    pub fn shared(&self) -> &std::rc::Rc<ferrotx_exec::Shared> {
        self.executor.shared()
    }

    /// The executor, to spawn coroutines and reach the engine.
    pub fn executor(&mut self) -> &mut Executor {
        &mut self.executor
    }

    /// Coroutines that have not finished.
    pub fn coroutines_live(&self) -> usize {
        self.executor.live()
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably (to wait on it).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Events the engine reported (suspect peers), oldest first; the caller drains them.
    pub fn events(&mut self) -> &mut Vec<Event> {
        &mut self.events
    }

    /// When the engine or a sleeping coroutine next needs `step` to run even if nothing
    /// arrives.
    pub fn next_timeout_ns(&self) -> Option<u64> {
        let engine = self.executor.shared().engine().next_timeout_ns();
        match (engine, self.executor.next_timer_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// One loop iteration at time `now_ns`: receive a batch, let the engine run handlers
    /// and match responses, resume the coroutines whose batch completed, and send
    /// everything produced in as few `send_batch` calls as the batch size allows.
    /// Returns true if anything happened.
    pub fn step(&mut self, now_ns: u64) -> bool {
        self.executor.shared().set_now_ns(now_ns);
        let received = self.transport.recv_batch(&mut self.rx);
        if now_ns >= self.serving_until_ns {
            // Outside its lease the node neither serves nor coordinates: what arrives is
            // dropped (senders retransmit, or fail over once a new configuration is
            // committed without this node).
            self.dropped_not_serving += received as u64;
            return received > 0;
        }
        if received == 0 && !self.executor.has_work() {
            // The common case of a polling loop: nothing arrived. Unless a timer is due or
            // something waits to be sent, there is nothing to do.
            let engine = self.executor.shared().engine();
            let timer_due = engine.next_timeout_ns().is_some_and(|t| now_ns >= t);
            if !timer_due && !engine.wants_transmit() {
                return false;
            }
        }
        let shared = self.executor.shared().clone();
        {
            let mut engine = shared.engine();
            for i in 0..received {
                let (source, bytes) = self.rx.get_mut(i);
                engine.handle_datagram(now_ns, source, bytes);
            }
            if engine.next_timeout_ns().is_some_and(|t| now_ns >= t) {
                engine.handle_timeout(now_ns);
            }
            // Events wait in the engine (which bounds them) while the worker's list is
            // full: a caller that never drains them costs bounded memory.
            while self.events.len() < EVENTS_MAX {
                let Some(event) = engine.poll_event() else {
                    break;
                };
                self.events.push(event);
            }
        }
        let polls = self.executor.run();
        let mut sent = false;
        loop {
            shared.engine().poll_transmit(&mut self.tx);
            if self.tx.is_empty() {
                break;
            }
            self.transport.send_batch(&self.tx);
            self.tx.clear();
            sent = true;
        }
        received > 0 || polls > 0 || sent
    }
}
