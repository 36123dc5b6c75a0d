//! The coordination service: where the current [`View`] lives, changed only by
//! compare-and-swap on its id (FaRM keeps its configuration in ZooKeeper the same way).
//!
//! Backends: [`MemoryCoordination`] here (the simulator's, and tests'), a file replaced
//! atomically under a lock for clusters on one host (`ferrotx-coord`), and later etcd for
//! several hosts (a transaction comparing the key's value, or its mod revision, then
//! putting the new one). Calls may block on I/O, so nodes make them off their worker
//! threads; protocol code asks for them as actions and is told the result.

use std::cell::RefCell;
use std::rc::Rc;

use crate::view::View;

/// Why a coordination-service call failed.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum CoordinationError {
    /// The view's id was not the expected one: someone else changed it first. Carries the
    /// view found instead (`None` if there was none).
    #[error("the configuration changed first (now {})", .0.as_ref().map_or("none".to_string(), |v| format!("id {}", v.id)))]
    Conflict(Option<Box<View>>),
    /// The service could not be reached or read (the call may be retried).
    #[error("coordination service unavailable: {0}")]
    Unavailable(String),
    /// A compare-and-swap whose outcome is unknown (it timed out, or its answer was
    /// lost): the view may or may not have been stored. Only reading the service tells.
    #[error("coordination service: outcome unknown: {0}")]
    Unknown(String),
}

/// A store of one view, changed only by compare-and-swap.
pub trait CoordinationService {
    /// The current view, or `None` if no cluster has run on this service yet.
    fn read(&mut self) -> Result<Option<View>, CoordinationError>;

    /// The cluster's id: 128 random bits made when the cluster first formed, which every
    /// datagram's authentication binds (`ferrotx_wire::auth::ClusterId`). Returns the id
    /// stored, or stores `proposed` and returns it if none is (the first node to ask
    /// makes it; every later one, and every later life, reads it).
    fn cluster_id(&mut self, proposed: [u8; 16]) -> Result<[u8; 16], CoordinationError>;

    /// Replaces the view of id `expected` (`None`: no view yet) with `next`, whose id must
    /// be higher. Fails with [`CoordinationError::Conflict`] and the current view if the
    /// current view's id is not `expected`.
    fn compare_and_swap(
        &mut self,
        expected: Option<u64>,
        next: &View,
    ) -> Result<(), CoordinationError>;
}

/// A coordination service in memory, shared by clones (the simulator gives one to every
/// node it runs). Counts its successful swaps.
#[derive(Clone, Default, Debug)]
pub struct MemoryCoordination {
    inner: Rc<RefCell<MemoryState>>,
}

#[derive(Default, Debug)]
struct MemoryState {
    view: Option<View>,
    /// Every view ever stored, in order (for checkers: at most one per id).
    history: Vec<View>,
    /// The cluster id, once asked for.
    cluster_id: Option<[u8; 16]>,
}

impl MemoryCoordination {
    /// An empty service.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every view stored so far, in order.
    pub fn history(&self) -> Vec<View> {
        self.inner.borrow().history.clone()
    }

    /// The current view.
    pub fn current(&self) -> Option<View> {
        self.inner.borrow().view.clone()
    }

    /// Puts `view` back as the current view, as an operator restoring an old copy of the
    /// store would: the store goes back. Not a swap, so not in the history.
    pub fn restore(&self, view: Option<View>) {
        self.inner.borrow_mut().view = view;
    }
}

impl CoordinationService for MemoryCoordination {
    fn cluster_id(&mut self, proposed: [u8; 16]) -> Result<[u8; 16], CoordinationError> {
        Ok(*self.inner.borrow_mut().cluster_id.get_or_insert(proposed))
    }

    fn read(&mut self) -> Result<Option<View>, CoordinationError> {
        Ok(self.inner.borrow().view.clone())
    }

    fn compare_and_swap(
        &mut self,
        expected: Option<u64>,
        next: &View,
    ) -> Result<(), CoordinationError> {
        let mut state = self.inner.borrow_mut();
        let current = state.view.as_ref().map(|v| v.id);
        if current != expected || expected.is_some_and(|id| next.id <= id) {
            return Err(CoordinationError::Conflict(
                state.view.clone().map(Box::new),
            ));
        }
        state.view = Some(next.clone());
        state.history.push(next.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_expected_id_is_replaced() {
        let mut a = MemoryCoordination::new();
        let mut b = a.clone();
        let v1 = View::ended(1, 4);
        let v2 = View::ended(2, 4);
        a.compare_and_swap(None, &v1).unwrap();
        // b raced with a and loses, learning the winner's view.
        match b.compare_and_swap(None, &v1) {
            Err(CoordinationError::Conflict(Some(v))) => assert_eq!(v.id, 1),
            other => panic!("{other:?}"),
        }
        b.compare_and_swap(Some(1), &v2).unwrap();
        assert!(a.compare_and_swap(Some(1), &v2).is_err());
        // An id that does not grow is refused.
        assert!(a.compare_and_swap(Some(2), &View::ended(2, 4)).is_err());
        assert_eq!(a.read().unwrap().unwrap().id, 2);
        assert_eq!(a.history().len(), 2);
    }
}
