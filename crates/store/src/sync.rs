//! The atomics the store uses: std's, or shuttle's under the `shuttle` feature so its
//! scheduler can interleave every access in tests.

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
