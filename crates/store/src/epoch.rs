//! The epoch a store's indexes reclaim memory through ([`Epoch`]).

use std::cell::RefCell;

use crossbeam_epoch::{Collector, Guard, LocalHandle};

/// Where an index's lookups pin and its reclaims wait: a record reclaimed for a deleted
/// key is made again for another key, and a grown index's previous table freed, only once
/// every lookup pinned before it is done (see `index`).
///
/// [`Epoch::process`] (the default) is the process's epoch, crossbeam-epoch's global
/// collector, which every thread of the process shares: what a node's worker threads use.
/// When a grace period ends there depends on every thread of the process that pins it,
/// so which record a new key gets (the order scans visit keys in) depends on what other
/// threads do and when. A simulation runs a whole cluster in one thread and must replay
/// exactly from its seed whatever else the process runs (other seeds on other threads),
/// so it gives each cluster an [`Epoch::private`]: a collector of its own, pinned only by
/// the threads that use that cluster's stores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epoch(Option<Collector>);

thread_local! {
    /// This thread's handle on the last private collector it pinned: a thread that runs
    /// one simulation at a time registers once per simulation. Pinning another private
    /// collector replaces it (a guard still held keeps the old registration alive until
    /// it drops).
    static PRIVATE: RefCell<Option<LocalHandle>> = const { RefCell::new(None) };
}

impl Epoch {
    /// The process's epoch, shared by every thread (the default).
    pub fn process() -> Self {
        Self(None)
    }

    /// An epoch of its own, which only the threads that use the stores made with it pin:
    /// for a simulation, so that reclamation in one run never waits for, nor runs, the
    /// deferred work of another.
    pub fn private() -> Self {
        Self(Some(Collector::new()))
    }

    /// Pins this epoch on the current thread.
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        match &self.0 {
            None => crossbeam_epoch::pin(),
            Some(collector) => pin_private(collector),
        }
    }

    /// Whether `guard` pins this epoch (a guard of another epoch would not hold back its
    /// reclamation).
    pub(crate) fn pinned_by(&self, guard: &Guard) -> bool {
        let collector = match &self.0 {
            None => crossbeam_epoch::default_collector(),
            Some(collector) => collector,
        };
        guard.collector() == Some(collector)
    }
}

#[cold]
fn pin_private(collector: &Collector) -> Guard {
    PRIVATE.with(|handle| {
        let mut handle = handle.borrow_mut();
        if handle.as_ref().is_none_or(|h| h.collector() != collector) {
            *handle = Some(collector.register());
        }
        handle.as_ref().expect("registered above").pin()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_pin_their_own_epoch() {
        let process = Epoch::process();
        let (a, b) = (Epoch::private(), Epoch::private());
        assert_ne!(a, b);
        assert_eq!(a, a.clone());
        for epoch in [&process, &a, &b, &a] {
            let guard = epoch.pin();
            assert!(epoch.pinned_by(&guard));
        }
        assert!(!a.pinned_by(&b.pin()));
        assert!(!process.pinned_by(&a.pin()));
        assert!(!a.pinned_by(&process.pin()));
        // A guard outlives the replacement of its thread's handle.
        let guard = a.pin();
        let other = b.pin();
        assert!(a.pinned_by(&guard) && b.pinned_by(&other));
    }
}
