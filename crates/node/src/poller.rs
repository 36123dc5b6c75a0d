//! Work a worker thread polls beside its coroutines and datagrams: a Redis front end's
//! sockets, served on the worker itself, so that a request and its reply cross no thread
//! (FaSST's and eRPC's run-to-completion: one thread per core does everything).

use std::os::fd::RawFd;

/// What a [`Poller`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// Nothing more to do now: the worker may sleep (its sleep watches [`Poller::fd`]).
    Idle,
    /// It has more to do at once: the worker must not sleep.
    Busy,
    /// It is over: the worker drops it.
    Done,
}

/// Work attached to a worker thread ([`crate::NodeHandle::attach`]). The worker asks it
/// once per loop iteration and once more before sleeping, so `poll` must be cheap when
/// nothing is due (no system call), and must never block. It is dropped on the worker
/// thread, when it says [`Polled::Done`] or when the node stops.
pub trait Poller: Send {
    /// A descriptor the worker's sleep watches: readable means `poll` has work (an epoll
    /// descriptor). It must stay open while the poller lives.
    fn fd(&self) -> RawFd;

    /// Does what can be done now. `now_ns`: the worker's clock; `woke`: the worker's
    /// sleep ended with [`Poller::fd`] readable since the last call.
    fn poll(&mut self, now_ns: u64, woke: bool) -> Polled;
}
