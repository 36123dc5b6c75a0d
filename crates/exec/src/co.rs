//! What a coroutine holds: its caller slot and the state shared with the event loop.

use std::cell::{Cell, RefCell, RefMut};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use ferrotx_rpc::{CallerId, Engine, RpcError};
use ferrotx_wire::EndpointId;

/// State one worker's coroutines share with its event loop. Single-threaded: coroutines
/// borrow the engine only between awaits.
pub struct Shared {
    engine: RefCell<Engine>,
    now_ns: Cell<u64>,
    /// Coroutines that yielded (or were just spawned) and should run in the next round.
    pub(crate) runnable: RefCell<Vec<CallerId>>,
    /// Sleeping coroutines by deadline: at most one entry per coroutine, so bounded by
    /// the caller slots.
    pub(crate) timers: RefCell<BinaryHeap<Reverse<(u64, u16)>>>,
    /// The earliest deadline in `timers` (`u64::MAX` if none), so that the event loop's
    /// check for a due timer, made every iteration, is two loads and no borrow.
    pub(crate) next_deadline_ns: Cell<u64>,
}

impl Shared {
    pub(crate) fn new(engine: Engine) -> Self {
        let callers = engine.config().callers;
        Self {
            engine: RefCell::new(engine),
            now_ns: Cell::new(0),
            runnable: RefCell::new(Vec::with_capacity(callers)),
            timers: RefCell::new(BinaryHeap::with_capacity(callers)),
            next_deadline_ns: Cell::new(u64::MAX),
        }
    }

    /// The earliest deadline of a sleeping coroutine.
    pub fn next_timer_ns(&self) -> Option<u64> {
        let next = self.next_deadline_ns.get();
        (next != u64::MAX).then_some(next)
    }

    /// Whether a sleeping coroutine's deadline has come.
    pub(crate) fn timer_due(&self) -> bool {
        self.next_deadline_ns.get() <= self.now_ns.get()
    }

    /// The engine. Panics if a coroutine holds it across an await.
    pub fn engine(&self) -> RefMut<'_, Engine> {
        self.engine.borrow_mut()
    }

    /// The time of the current event-loop iteration.
    pub fn now_ns(&self) -> u64 {
        self.now_ns.get()
    }

    /// Sets the time of the current event-loop iteration.
    pub fn set_now_ns(&self, now_ns: u64) {
        debug_assert!(now_ns >= self.now_ns.get(), "time went backwards");
        self.now_ns.set(now_ns);
    }
}

/// A coroutine's handle: its caller slot in the engine and the shared state.
#[derive(Clone)]
pub struct Co {
    shared: Rc<Shared>,
    id: CallerId,
}

impl Co {
    pub(crate) fn new(shared: Rc<Shared>, id: CallerId) -> Self {
        Self { shared, id }
    }

    /// This coroutine's caller slot.
    pub fn id(&self) -> CallerId {
        self.id
    }

    /// The endpoint of the worker it runs on.
    pub fn local(&self) -> EndpointId {
        self.shared.engine().local()
    }

    /// The time of the current event-loop iteration.
    pub fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// The engine, for anything the helpers here do not cover. Drop it before awaiting.
    pub fn engine(&self) -> RefMut<'_, Engine> {
        self.shared.engine()
    }

    /// Adds a request to this coroutine's next batch.
    pub fn push(&self, target: EndpointId, request_type: u8, payload: &[u8]) {
        self.shared
            .engine()
            .batch_push(self.id, target, request_type)
            .extend_from_slice(payload);
    }

    /// Adds a request whose payload `write` appends to the buffer it is given.
    pub fn push_with(
        &self,
        target: EndpointId,
        request_type: u8,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        write(
            self.shared
                .engine()
                .batch_push(self.id, target, request_type),
        );
    }

    /// Sends the batch and returns once every request of it has an outcome.
    pub async fn call(&self) {
        let done = {
            let now = self.shared.now_ns();
            self.shared.engine().submit(self.id, now)
        };
        if !done {
            BatchDone {
                shared: &self.shared,
                id: self.id,
            }
            .await;
        }
    }

    /// Number of requests in the last batch.
    pub fn batch_len(&self) -> usize {
        self.shared.engine().batch_len(self.id)
    }

    /// Gives `read` the outcome of request `index` of the completed batch.
    pub fn result<R>(&self, index: usize, read: impl FnOnce(Result<&[u8], RpcError>) -> R) -> R {
        read(self.shared.engine().result(self.id, index))
    }

    /// Sleeps until the event loop's time reaches `deadline_ns` (at once if it has): the
    /// worker's timer wakes the coroutine, so a sleeping worker wakes for it too.
    pub async fn sleep_until(&self, deadline_ns: u64) {
        if self.shared.now_ns() >= deadline_ns {
            return;
        }
        self.shared
            .timers
            .borrow_mut()
            .push(Reverse((deadline_ns, self.id.0)));
        let next = &self.shared.next_deadline_ns;
        next.set(next.get().min(deadline_ns));
        Sleep {
            shared: &self.shared,
            deadline_ns,
        }
        .await;
    }

    /// Lets the other coroutines and the event loop run; this one resumes in the next
    /// round.
    pub async fn yield_now(&self) {
        self.shared.runnable.borrow_mut().push(self.id);
        YieldOnce { yielded: false }.await;
    }
}

/// Ready once the engine reports the caller's batch done.
struct BatchDone<'a> {
    shared: &'a Shared,
    id: CallerId,
}

impl Future for BatchDone<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.shared.engine().is_done(self.id) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Ready once the loop's time reaches the deadline.
struct Sleep<'a> {
    shared: &'a Shared,
    deadline_ns: u64,
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.shared.now_ns() >= self.deadline_ns {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Pending once, then ready.
struct YieldOnce {
    yielded: bool,
}

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            Poll::Pending
        }
    }
}
