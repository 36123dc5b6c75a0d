//! The atomics and mutex the store uses: std's, or shuttle's under the `shuttle` feature
//! so its scheduler can interleave every access in tests (an index's slots stay std's:
//! the tests interleave objects, and an index's mutex must be shuttle's, or a thread
//! blocked on it would block them all).

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::Mutex;
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::Mutex;
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
