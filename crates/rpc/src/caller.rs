//! Callers: the coroutine slots that issue batches of requests.

use ferrotx_wire::{EndpointId, Status};

use crate::error::RpcError;

/// One caller of an engine: a coroutine slot, `0..Config::callers`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CallerId(pub u16);

/// Where a call stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Outcome {
    /// Sent or waiting for a credit; no answer yet.
    Pending,
    /// Answered; `Status::Ok` means the response buffer holds the handler's response.
    Answered(Status),
    /// Failed before it was sent.
    Failed(RpcError),
}

/// One request of a batch. Its buffers keep their capacity from batch to batch, so a
/// caller that sends requests of similar sizes allocates only while warming up.
pub(crate) struct Call {
    pub(crate) target: EndpointId,
    pub(crate) request_type: u8,
    pub(crate) request: Vec<u8>,
    pub(crate) response: Vec<u8>,
    pub(crate) outcome: Outcome,
}

/// Life of a caller's batch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BatchState {
    /// Being built (or consumed after completion).
    Open,
    /// Submitted; some calls are still pending.
    InFlight,
    /// Every call has an outcome; waiting for the caller to read them.
    Done,
}

pub(crate) struct Caller {
    pub(crate) calls: Vec<Call>,
    /// Number of calls of the current batch (`calls` beyond it are spare buffers).
    pub(crate) used: usize,
    /// Calls of the current batch without an outcome.
    pub(crate) pending: usize,
    pub(crate) state: BatchState,
}

impl Caller {
    pub(crate) fn new() -> Self {
        Self {
            calls: Vec::new(),
            used: 0,
            pending: 0,
            state: BatchState::Open,
        }
    }

    /// Records the outcome of call `index`; returns true if that completed the batch.
    pub(crate) fn complete(&mut self, index: usize, outcome: Outcome) -> bool {
        debug_assert_eq!(self.state, BatchState::InFlight);
        let call = &mut self.calls[index];
        assert_eq!(call.outcome, Outcome::Pending, "a call completed twice");
        assert_ne!(outcome, Outcome::Pending);
        call.outcome = outcome;
        self.pending -= 1;
        if self.pending == 0 {
            self.state = BatchState::Done;
            true
        } else {
            false
        }
    }
}
