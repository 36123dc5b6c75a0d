//! Every workload of ferrotx written once: its schema, its initial data, one transaction
//! in a coroutine over a [`Coordinator`](ferrotx_txn::coordinator::Coordinator), the
//! history it records, and the checks of that history and of the final state. Used by
//! the benchmarks (real processes), the simulator, the examples and the tests.
//!
//! Sans-IO and deterministic: no clock, no OS randomness, no threads. The caller passes a
//! seeded `ChaCha8Rng`, and a [`Recorder`](record::Recorder) that owns the event clock
//! of a history (or records nothing, at no cost).

pub mod bank;
pub mod check;
pub mod history;
pub mod record;
pub mod smallbank;
pub mod state;
pub mod tatp;
pub mod workload;
