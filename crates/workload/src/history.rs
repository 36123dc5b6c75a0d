//! What a run did, transaction by transaction: the records the checkers read.
//!
//! A record is opened when its transaction starts and closed when the client learns the
//! outcome. A record never closed is *indeterminate*: its commit answer never came (the
//! coroutine was dropped mid-commit because its node crashed, or the call returned an
//! error meaning "unknown"). The checkers treat it as maybe committed: its writes may or
//! may not exist, and a read of a version it wrote proves that it committed.

use ferrotx_store::{Key, TableId};

/// A key of a history: table and key.
pub type Row = (TableId, Key);

/// `end_ns` of a record whose outcome the client never learned. In real time such a
/// transaction precedes nothing, which is what an end at the end of time says.
pub const END_UNKNOWN: u64 = u64::MAX;

/// A written version not known: a blind write ([`Txn::put`](ferrotx_txn::coordinator::Txn::put))
/// learns the version it installs only when its commit returns.
pub const VERSION_UNKNOWN: u64 = u64::MAX;

/// How a transaction ended, as far as the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Reported committed.
    Committed,
    /// Reported aborted: none of its writes exist.
    Aborted,
    /// No answer: it may have committed or not.
    Indeterminate,
}

/// One transaction of a history.
#[derive(Clone, Debug)]
pub struct TxnRecord<K> {
    /// Unique id, for reports.
    pub id: u64,
    /// When the client started it.
    pub start_ns: u64,
    /// When the client learned its outcome ([`END_UNKNOWN`] if it never did). Real-time
    /// order is strict: T1 precedes T2 only if `T1.end_ns < T2.start_ns`, and equal times
    /// count as concurrent, so a recorder whose clock can stand still between two events
    /// (simulated time within one loop iteration) must use a counter of events instead,
    /// or real-time anomalies go unseen.
    pub end_ns: u64,
    /// True if it was reported committed (false while its outcome is unknown).
    pub committed: bool,
    /// Versions read from the store (not the transaction's own writes).
    pub reads: Vec<(K, u64)>,
    /// Versions installed by its writes (for an indeterminate record, those it would
    /// install; [`VERSION_UNKNOWN`] for a blind write).
    pub writes: Vec<(K, u64)>,
    /// The reads of `reads` that found no value (a key absent or deleted). A key with no
    /// object reads at its floor (one per bucket of key hashes), a version that may be no write of this key (see
    /// `Partition::reclaim`): the checker takes it as the key's last version up to it.
    pub absent: Vec<(K, u64)>,
    /// The writes of `writes` that deleted their key.
    pub deletes: Vec<(K, u64)>,
}

impl<K> TxnRecord<K> {
    /// A record opened at `start_ns`, indeterminate until closed.
    pub fn open(id: u64, start_ns: u64) -> Self {
        Self {
            id,
            start_ns,
            end_ns: END_UNKNOWN,
            committed: false,
            reads: Vec::new(),
            writes: Vec::new(),
            absent: Vec::new(),
            deletes: Vec::new(),
        }
    }

    /// How it ended.
    pub fn outcome(&self) -> Outcome {
        match (self.end_ns == END_UNKNOWN, self.committed) {
            (true, _) => Outcome::Indeterminate,
            (false, true) => Outcome::Committed,
            (false, false) => Outcome::Aborted,
        }
    }
}

/// What a transaction saw or did beyond its reads and writes, for the checkers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// An audit's total of every balance (read-only, so it counts once committed).
    Total(i128),
    /// Money the transaction creates (positive) or destroys (negative) if it commits.
    Money(i64),
    /// Two values written together were seen different in one transaction.
    TagsDiffer,
}

/// A whole history: records in the order their transactions started, and notes on them.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// One record per transaction; its index is its id.
    pub records: Vec<TxnRecord<Row>>,
    /// Notes, each with the index of its record.
    pub notes: Vec<(usize, Note)>,
    /// The event clock: every start and end takes the next tick, so that ticks order
    /// events as they happened (no ties).
    clock: u64,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next tick of the event clock.
    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Opens a record starting now; returns its index.
    pub fn open(&mut self) -> usize {
        let index = self.records.len();
        let start = self.tick();
        self.records.push(TxnRecord::open(index as u64, start));
        index
    }

    /// Closes record `index` now with `outcome` (an indeterminate one stays open).
    pub fn close(&mut self, index: usize, outcome: Outcome) {
        let end = self.tick();
        let record = &mut self.records[index];
        assert_eq!(record.end_ns, END_UNKNOWN, "a record is closed once");
        match outcome {
            Outcome::Committed | Outcome::Aborted => {
                record.end_ns = end;
                record.committed = outcome == Outcome::Committed;
            }
            Outcome::Indeterminate => {}
        }
    }

    /// The notes of records with `outcome`.
    pub fn notes_of(&self, outcome: Outcome) -> impl Iterator<Item = (usize, Note)> + '_ {
        self.notes
            .iter()
            .copied()
            .filter(move |&(index, _)| self.records[index].outcome() == outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_never_closed_is_indeterminate_and_ticks_never_tie() {
        let mut history = History::new();
        let (a, b) = (history.open(), history.open());
        history.close(a, Outcome::Committed);
        history.close(b, Outcome::Indeterminate);
        let c = history.open();
        history.close(c, Outcome::Aborted);
        let outcomes: Vec<Outcome> = history.records.iter().map(TxnRecord::outcome).collect();
        assert_eq!(
            outcomes,
            [Outcome::Committed, Outcome::Indeterminate, Outcome::Aborted]
        );
        let [a, b, c] = [0, 1, 2].map(|i| &history.records[i]);
        assert!(a.start_ns < b.start_ns && b.start_ns < a.end_ns && a.end_ns < c.start_ns);
        assert_eq!(b.end_ns, END_UNKNOWN);
    }
}
