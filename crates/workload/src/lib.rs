//! Every workload of ferrotx written once: its schema, its initial data, one transaction
//! in a coroutine over a [`Coordinator`](ferrotx_txn::coordinator::Coordinator), the
//! history it records, and the checks of that history and of the final state. Used by
//! the benchmarks (real processes), the simulator, the examples and the tests.
//!
//! Sans-IO and deterministic: no clock, no OS randomness, no threads. The caller passes a
//! seeded `ChaCha8Rng`, and a [`Recorder`](record::Recorder) that owns the event clock
//! of a history (or records nothing, at no cost).
//!
//! # Driving a workload
//!
//! 1. [`Workload::schema`](workload::Workload::schema): the tables to create.
//! 2. [`Workload::load`](workload::Workload::load): every initial row, given to a loader
//!    callback (table, key, value) that stores it on every copy.
//! 3. In each coroutine, a [`Runner`](workload::Runner) (`Runner::new(workload, rng)`)
//!    and a recorder ([`HistoryRecorder`](record::HistoryRecorder), cloned per
//!    coroutine, or [`NoRecorder`](record::NoRecorder)); then
//!    `runner.run_one(&co, &coordinator, &mut recorder).await` per transaction. A
//!    coroutine dropped mid-transaction leaves its record open: indeterminate.
//! 4. Once quiet and truncation flushed:
//!    [`Workload::end_checks`](workload::Workload::end_checks)`(&history, &state)`, where
//!    `state` implements [`StateReader`](state::StateReader) (a closure from a key to its
//!    copies will do), returns every [`check::Violation`].
//!
//! # Layout
//!
//! - `workload.rs`: the [`Workload`](workload::Workload) enum, the KV and latency
//!   workloads, the [`Runner`](workload::Runner); `bank.rs`, `tatp.rs`, `smallbank.rs`.
//! - `history.rs`: records, outcomes, notes; `record.rs`: recorders and the helpers that
//!   record a transaction's commit; `state.rs`: reading every copy of a key.
//! - `check/`: one checker per file (serializability, money, lost writes, replicas).

pub mod bank;
pub mod check;
pub mod history;
pub mod record;
pub mod smallbank;
pub mod state;
pub mod tatp;
pub mod workload;
