//! What worker threads hand back to the I/O thread: finished work, queued without a lock,
//! and a wake-up of its `poll` (an eventfd write) only when it may be asleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_queue::SegQueue;
use ferrotx_redis_exec::WorkResult;
use mio::Waker;

/// Numbers for threads, from 1.
static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's number (a thread-local read, where `std::thread::current()` counts
    /// references).
    static THREAD_NUMBER: u64 = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// Finished work for connection `token` (a slab key), whose client id was `client_id`
/// when it was sent (a closed connection's slot may hold another connection by then).
#[derive(Debug)]
pub(crate) struct Completion {
    pub token: usize,
    pub client_id: u64,
    pub result: WorkResult,
}

/// The I/O thread's inbox, shared with the workers.
pub(crate) struct Inbox {
    queue: SegQueue<Completion>,
    /// Set when a wake-up is on its way and the I/O thread has not drained since: later
    /// completions need not ring again (one eventfd write per batch, not per command).
    wake_pending: AtomicBool,
    /// Set by [`crate::RespServer::stop`].
    stop: AtomicBool,
    waker: Waker,
    /// The number of the worker thread that runs the event loop, if one does
    /// ([`crate::event_loop::OnWorker`]); 0 otherwise.
    loop_thread: AtomicU64,
}

impl Inbox {
    pub fn new(waker: Waker) -> Self {
        Self {
            queue: SegQueue::new(),
            wake_pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            waker,
            loop_thread: AtomicU64::new(0),
        }
    }

    /// The event loop runs on this thread (a worker's): completions pushed from it need no
    /// wake-up, since the loop looks at the inbox before its worker sleeps.
    pub fn loop_runs_here(&self) {
        self.loop_thread.store(thread_number(), Ordering::Relaxed);
    }

    /// Queues `completion` and wakes the I/O thread unless a wake-up is pending.
    pub fn push(&self, completion: Completion) {
        self.queue.push(completion);
        if self.loop_thread.load(Ordering::Relaxed) == thread_number() {
            return;
        }
        // SeqCst pairs with `drain`: either this swap sees the I/O thread's clear and
        // rings, or the I/O thread's drain, which comes after its clear, sees the push.
        if !self.wake_pending.swap(true, Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Whether finished work waits (cheap: no system call).
    pub fn has_work(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Takes every queued completion (I/O thread).
    pub fn drain(&self, mut handle: impl FnMut(Completion)) {
        self.wake_pending.store(false, Ordering::SeqCst);
        while let Some(completion) = self.queue.pop() {
            handle(completion);
        }
    }

    /// Asks the I/O thread to stop, and wakes it.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn wake(&self) {
        // Fails only if the eventfd cannot be written, which a live loop never sees; the
        // loop also drains after every poll, so a lost wake-up delays, never loses, work.
        let _ = self.waker.wake();
    }
}

/// Sends one connection's work result back to the I/O thread, exactly once: if the work is
/// dropped unfinished (the node stopped with it queued or running), dropping this sends
/// [`WorkResult::Dropped`], so the connection never waits for ever.
pub(crate) struct Responder {
    inbox: Arc<Inbox>,
    token: usize,
    client_id: u64,
    sent: bool,
}

impl Responder {
    pub fn new(inbox: Arc<Inbox>, token: usize, client_id: u64) -> Self {
        Self {
            inbox,
            token,
            client_id,
            sent: false,
        }
    }

    pub fn send(mut self, result: WorkResult) {
        self.push(result);
    }

    fn push(&mut self, result: WorkResult) {
        debug_assert!(!self.sent, "a result is sent once");
        self.sent = true;
        self.inbox.push(Completion {
            token: self.token,
            client_id: self.client_id,
            result,
        });
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.sent {
            self.push(WorkResult::Dropped);
        }
    }
}
