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
    /// Parked coroutines with a deadline (sleeping, or waiting on a signal with a
    /// deadline), by deadline: (deadline, coroutine, park token). Only live parks have an
    /// entry (one woken otherwise, or abandoned, is removed at once), so there is at most
    /// one per coroutine and the heap never outgrows the caller slots.
    pub(crate) timers: RefCell<BinaryHeap<Reverse<(u64, u16, u32)>>>,
    /// Per coroutine: its current park (see [`Park`]).
    pub(crate) parks: Box<[Park]>,
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
            parks: (0..callers).map(|_| Park::default()).collect(),
            next_deadline_ns: Cell::new(u64::MAX),
        }
    }

    /// Makes every coroutine waiting on `signal` runnable (in the next
    /// [`crate::Executor::run`]); returns how many. For the event loop, or a coroutine of
    /// the same thread. A coroutine whose wait already ended (its deadline fired) is not
    /// woken a second time.
    pub fn notify_all(&self, signal: &Signal) -> usize {
        let mut woken = 0;
        let mut timed = false;
        for (id, token) in signal.waiters.borrow_mut().drain(..) {
            if self.wake(id, token, Wake::Signal) {
                woken += 1;
                timed |= self.parks[usize::from(id)].timed.get();
            }
        }
        if timed {
            // Their deadlines must not wake them again.
            self.prune_timers();
        }
        woken
    }

    /// Starts a new park of coroutine `id`: wake-ups meant for an earlier one no longer
    /// match its token.
    fn park(&self, id: u16) -> u32 {
        let park = &self.parks[usize::from(id)];
        let token = park.token.get().wrapping_add(1);
        park.token.set(token);
        park.woken.set(Wake::No);
        park.timed.set(false);
        token
    }

    /// True if coroutine `id` is still in park `token`, not woken.
    fn is_parked(&self, id: u16, token: u32) -> bool {
        let park = &self.parks[usize::from(id)];
        park.token.get() == token && park.woken.get() == Wake::No
    }

    /// Ends park `token` of coroutine `id` and makes it runnable, unless it already ended.
    fn wake(&self, id: u16, token: u32, how: Wake) -> bool {
        if !self.is_parked(id, token) {
            return false;
        }
        self.parks[usize::from(id)].woken.set(how);
        self.runnable.borrow_mut().push(CallerId(id));
        true
    }

    /// Sets a deadline on park `token` of coroutine `id`.
    fn add_timer(&self, id: u16, token: u32, deadline_ns: u64) {
        let mut timers = self.timers.borrow_mut();
        if timers.len() == timers.capacity() {
            // Cannot happen while only live parks have entries; never allocate for it.
            timers.retain(|&Reverse((_, id, token))| self.is_parked(id, token));
        }
        timers.push(Reverse((deadline_ns, id, token)));
        self.parks[usize::from(id)].timed.set(true);
        let next = &self.next_deadline_ns;
        next.set(next.get().min(deadline_ns));
    }

    /// Wakes the coroutines whose deadline has come.
    pub(crate) fn fire_timers(&self) {
        let now = self.now_ns.get();
        let mut timers = self.timers.borrow_mut();
        while let Some(&Reverse((at, id, token))) = timers.peek() {
            if at > now {
                break;
            }
            timers.pop();
            self.wake(id, token, Wake::Timer);
        }
        let next = timers.peek().map_or(u64::MAX, |Reverse((at, _, _))| *at);
        self.next_deadline_ns.set(next);
    }

    /// Drops the deadlines of parks that ended otherwise.
    fn prune_timers(&self) {
        let mut timers = self.timers.borrow_mut();
        timers.retain(|&Reverse((_, id, token))| self.is_parked(id, token));
        let next = timers.peek().map_or(u64::MAX, |Reverse((at, _, _))| *at);
        self.next_deadline_ns.set(next);
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
        let token = self.shared.park(self.id.0);
        self.shared.add_timer(self.id.0, token, deadline_ns);
        self.parked(token, None).await;
    }

    /// Parks the coroutine until `signal` is notified ([`Shared::notify_all`]): it is not
    /// polled meanwhile. Only notifications after the wait began count, so check the
    /// condition first and wait in a loop, without awaiting in between.
    pub async fn wait(&self, signal: &Signal) {
        let token = self.shared.park(self.id.0);
        signal.waiters.borrow_mut().push((self.id.0, token));
        self.parked(token, Some(signal)).await;
    }

    /// Like [`Co::wait`], but gives up when the event loop's time reaches `deadline_ns`:
    /// true if notified, false at the deadline (at once if it has passed). Whichever comes
    /// first ends the wait; the other does not wake the coroutine later.
    pub async fn wait_until(&self, signal: &Signal, deadline_ns: u64) -> bool {
        if self.shared.now_ns() >= deadline_ns {
            return false;
        }
        let token = self.shared.park(self.id.0);
        signal.waiters.borrow_mut().push((self.id.0, token));
        self.shared.add_timer(self.id.0, token, deadline_ns);
        self.parked(token, Some(signal)).await == Wake::Signal
    }

    /// Notifies `signal` (see [`Shared::notify_all`]); returns the coroutines woken.
    pub fn notify_all(&self, signal: &Signal) -> usize {
        self.shared.notify_all(signal)
    }

    fn parked<'a>(&'a self, token: u32, signal: Option<&'a Signal>) -> Parked<'a> {
        Parked {
            shared: &self.shared,
            id: self.id.0,
            token,
            signal,
            done: false,
        }
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

/// What ended a park.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum Wake {
    /// Not ended: the coroutine is parked.
    #[default]
    No,
    /// Its deadline came.
    Timer,
    /// The signal it waited on was notified.
    Signal,
}

/// One coroutine's park: a sleep or a wait, which its deadline or a signal ends. The token
/// grows with each park, and every wake-up names the park it is for, so a wake-up of an
/// ended park (a deadline after the notification, a notification after the deadline)
/// does nothing: a coroutine is made runnable once per park.
#[derive(Default)]
pub(crate) struct Park {
    token: Cell<u32>,
    woken: Cell<Wake>,
    /// The park has a deadline in the timer heap.
    timed: Cell<bool>,
}

/// Ready once the coroutine's park ended, with what ended it. Dropped before that (a
/// coroutine that stopped waiting), it withdraws its deadline and its place on the signal.
struct Parked<'a> {
    shared: &'a Shared,
    id: u16,
    token: u32,
    signal: Option<&'a Signal>,
    done: bool,
}

impl Parked<'_> {
    /// Leaves no trace of the park: not on the signal, not in the timer heap.
    fn finish(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let park = &self.shared.parks[usize::from(self.id)];
        if park.token.get() != self.token {
            return;
        }
        let woken = park.woken.get();
        if woken != Wake::Signal
            && let Some(signal) = self.signal
        {
            // Ended by its deadline, or abandoned: the signal still lists it.
            let entry = (self.id, self.token);
            signal.waiters.borrow_mut().retain(|&w| w != entry);
        }
        if woken == Wake::No {
            // Abandoned: nothing may wake this park any more.
            park.token.set(self.token.wrapping_add(1));
            if park.timed.get() {
                self.shared.prune_timers();
            }
        }
    }
}

impl Future for Parked<'_> {
    type Output = Wake;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Wake> {
        let park = &self.shared.parks[usize::from(self.id)];
        debug_assert_eq!(park.token.get(), self.token, "a coroutine parked twice");
        match park.woken.get() {
            Wake::No => Poll::Pending,
            woken => {
                self.finish();
                Poll::Ready(woken)
            }
        }
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A condition coroutines of one worker wait on ([`Co::wait`], [`Co::wait_until`]) and
/// the event loop or another coroutine of the same thread notifies
/// ([`Shared::notify_all`], [`Co::notify_all`]). A waiting coroutine is not polled until
/// it is notified (or its deadline comes): no busy polling. Its list of waiters is
/// allocated once; each coroutine is on it at most once, so a capacity of the executor's
/// caller slots means no allocation per wait.
pub struct Signal {
    /// (coroutine, park token) of each waiter.
    pub(crate) waiters: RefCell<Vec<(u16, u32)>>,
}

impl Signal {
    /// A signal with room for `capacity` waiters (the caller slots of the executor that
    /// waits on it, to never allocate).
    pub fn new(capacity: usize) -> Self {
        Self {
            waiters: RefCell::new(Vec::with_capacity(capacity)),
        }
    }

    /// Coroutines waiting on it (including one whose deadline fired and that has not run
    /// since).
    pub fn waiters(&self) -> usize {
        self.waiters.borrow().len()
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
