//! The per-thread coroutine executor (FaSST's worker coroutines and master loop).
//!
//! A worker thread runs a fixed number of coroutines, one per caller slot of its RPC
//! engine. A coroutine builds a batch of requests, sends it with [`Co::call`] and is
//! resumed only when the engine reports that every request of the batch has an answer.
//! Coroutines are `async` blocks polled with a no-op waker: the executor knows from the
//! engine which coroutine can progress, so there are no wake-ups across threads and no
//! allocation per RPC (each coroutine's future is boxed once, when it is spawned).
//!
//! A coroutine may also wait for something other than its batch: a deadline
//! ([`Co::sleep_until`]) or a [`Signal`] that the event loop or another coroutine notifies
//! ([`Co::wait`], [`Co::wait_until`]); it is not polled until then.
//!
//! The executor is deterministic and takes time from its caller, like the engine, so the
//! simulator runs it unchanged.

mod co;
mod executor;

pub use co::{Co, Shared, Signal};
pub use executor::Executor;
