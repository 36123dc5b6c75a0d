//! Recording transactions as they run. Workloads are generic over a [`Recorder`]: the
//! benchmarks pass [`NoRecorder`], whose methods do nothing and whose
//! [`Recorder::enabled`] is false, so that a transaction collects nothing and allocates
//! nothing for the history; the simulator and the tests pass a [`HistoryRecorder`].
//!
//! A record is opened before the transaction's first operation and closed when its
//! outcome is known; its reads and intended writes are written into it before the
//! commit is sent, so a coroutine dropped mid-commit leaves an indeterminate record with
//! everything the checkers need.

use std::sync::{Arc, Mutex, PoisonError};

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_txn::coordinator::{Abort, Coordinator, Txn};

use crate::history::{History, Note, Outcome, Row, TxnRecord, VERSION_UNKNOWN};

/// Where a coroutine's transactions are recorded. Methods take the index [`open`]
/// returned; a recorder that is not [`enabled`] may return anything from `open` and
/// ignore the rest.
///
/// [`open`]: Recorder::open
/// [`enabled`]: Recorder::enabled
pub trait Recorder {
    /// Whether anything is recorded. Workloads skip collecting reads and writes when not.
    fn enabled(&self) -> bool;
    /// A transaction starts now: opens its record (indeterminate until closed).
    fn open(&mut self) -> usize;
    /// Changes open record `index` (its reads and writes).
    fn update(&mut self, index: usize, change: impl FnOnce(&mut TxnRecord<Row>));
    /// The transaction of record `index` ended now with `outcome`.
    fn close(&mut self, index: usize, outcome: Outcome);
    /// Attaches `note` to record `index`.
    fn note(&mut self, index: usize, note: Note);
}

/// Records nothing (the benchmarks' recorder): every method is empty.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRecorder;

impl Recorder for NoRecorder {
    #[inline]
    fn enabled(&self) -> bool {
        false
    }

    #[inline]
    fn open(&mut self) -> usize {
        0
    }

    #[inline]
    fn update(&mut self, _: usize, _: impl FnOnce(&mut TxnRecord<Row>)) {}

    #[inline]
    fn close(&mut self, _: usize, _: Outcome) {}

    #[inline]
    fn note(&mut self, _: usize, _: Note) {}
}

/// Records into one [`History`] shared by every coroutine of a run (clone it for each).
/// The history's event clock is read under its lock, so ticks follow real time across
/// threads too: a transaction whose end tick is below another's start tick really ended
/// before the other started.
#[derive(Clone, Debug, Default)]
pub struct HistoryRecorder {
    history: Arc<Mutex<History>>,
}

impl HistoryRecorder {
    /// A recorder into a new, empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the history so far.
    pub fn history(&self) -> History {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, History> {
        // A coroutine that panicked while recording leaves a history still worth checking.
        self.history.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Recorder for HistoryRecorder {
    fn enabled(&self) -> bool {
        true
    }

    fn open(&mut self) -> usize {
        self.lock().open()
    }

    fn update(&mut self, index: usize, change: impl FnOnce(&mut TxnRecord<Row>)) {
        change(&mut self.lock().records[index]);
    }

    fn close(&mut self, index: usize, outcome: Outcome) {
        self.lock().close(index, outcome);
    }

    fn note(&mut self, index: usize, note: Note) {
        self.lock().notes.push((index, note));
    }
}

/// What an error of the coordinator says about a transaction's outcome: definite, except
/// [`Abort::OutcomeUnknown`] (recovery did not decide an interrupted commit in time: it
/// may have committed), which is [`Outcome::Indeterminate`].
pub fn outcome_of_abort(abort: &Abort) -> Outcome {
    match abort {
        Abort::OutcomeUnknown => Outcome::Indeterminate,
        _ => Outcome::Aborted,
    }
}

/// Ends the transaction `txn` of open record `index` after its execution returned
/// `executed`: on success commits it (recording its reads and intended writes first, then
/// the versions its writes installed), on failure drops it as aborted.
pub async fn finish<T, R: Recorder>(
    txn: Txn<'_>,
    executed: Result<T, Abort>,
    recorder: &mut R,
    index: usize,
) -> Result<T, Abort> {
    if !recorder.enabled() {
        return match executed {
            Ok(value) => txn.commit().await.map(|()| value),
            Err(abort) => Err(abort),
        };
    }
    recorder.update(index, |record| {
        record.reads = txn
            .reads()
            .iter()
            .map(|r| ((r.table, r.key), r.version))
            .collect();
        record.absent = txn
            .reads()
            .iter()
            .zip(txn.read_values())
            .filter(|(_, value)| value.is_none())
            .map(|(r, _)| ((r.table, r.key), r.version))
            .collect();
        record.deletes = txn
            .writes()
            .iter()
            .filter(|w| w.value.is_none() && w.version != VERSION_UNKNOWN)
            .map(|w| ((w.table, w.key), w.version + 1))
            .collect();
        record.writes = txn
            .writes()
            .iter()
            .map(|w| {
                let version = if w.version == VERSION_UNKNOWN {
                    VERSION_UNKNOWN
                } else {
                    w.version + 1
                };
                ((w.table, w.key), version)
            })
            .collect();
    });
    let value = match executed {
        Ok(value) => value,
        Err(abort) => {
            recorder.close(index, outcome_of_abort(&abort));
            return Err(abort);
        }
    };
    match txn.commit_installed().await {
        Ok(installed) => {
            recorder.update(index, |record| {
                record.writes = installed
                    .into_iter()
                    .map(|(table, key, version)| ((table, key), version))
                    .collect();
            });
            recorder.close(index, Outcome::Committed);
            Ok(value)
        }
        Err(abort) => {
            recorder.close(index, outcome_of_abort(&abort));
            Err(abort)
        }
    }
}

/// A single-key lock-free read of `key` of `table` into `out`, recorded as a one-read
/// transaction: returns whether the key is present.
pub async fn read_one<R: Recorder>(
    co: &Co,
    coordinator: &Coordinator,
    recorder: &mut R,
    table: TableId,
    key: Key,
    out: &mut Vec<u8>,
) -> Result<bool, Abort> {
    let index = recorder.open();
    let read = coordinator.read_one_with_version(co, table, key, out).await;
    if recorder.enabled() {
        match &read {
            Ok(seen) => {
                recorder.update(index, |r| {
                    r.reads = vec![((table, key), seen.version)];
                    if !seen.present {
                        r.absent = r.reads.clone();
                    }
                });
                recorder.close(index, Outcome::Committed);
            }
            Err(abort) => recorder.close(index, outcome_of_abort(abort)),
        }
    }
    read.map(|seen| seen.present)
}
