//! What a participant holds in doubt, for a checkpoint round ([`crate::checkpoint`]):
//! a round copies the copies only once everything its log held in doubt when the round
//! noted the log's position is settled.

use crate::messages::CoordinatorId;
use crate::participant::Participant;

/// What a participant held in doubt when a round noted its log's position: it must be
/// settled before the round's pages are copied.
#[derive(Debug, Default)]
pub(crate) struct Doubts {
    /// Transactions locked here (a primary's, not installed yet).
    locked: Vec<crate::messages::TxId>,
    /// Per coordinator, the highest counter of a record held here not applied yet.
    records: Vec<(CoordinatorId, u64)>,
}

impl Participant {
    /// The position of the last record appended to this participant's log (0: none, or
    /// no log).
    pub(crate) fn log_position(&self) -> u64 {
        self.durable.as_ref().map_or(0, |d| d.last_lsn)
    }

    /// What this participant holds in doubt now ([`Doubts`]).
    pub(crate) fn doubts(&self) -> Doubts {
        let locked = self.locked.keys().copied().collect();
        let records = self
            .logs
            .iter()
            .filter_map(|(c, log)| {
                let last = log.records.keys().next_back().copied();
                let replicated = log.replicated.keys().next_back().map(|k| k.0);
                last.max(replicated).map(|high| (*c, high))
            })
            .collect();
        Doubts { locked, records }
    }

    /// Whether everything of `doubts` is settled: applied, installed or aborted.
    pub(crate) fn settled(&self, doubts: &Doubts) -> bool {
        doubts.locked.iter().all(|tx| !self.locked.contains_key(tx))
            && doubts.records.iter().all(|(c, high)| {
                self.logs.get(c).is_none_or(|log| {
                    log.records.keys().next().is_none_or(|first| first > high)
                        && log.replicated.keys().next().is_none_or(|k| k.0 > *high)
                })
            })
    }

    /// Each coordinator's truncation mark known here.
    pub(crate) fn marks(&self) -> Vec<(CoordinatorId, u64)> {
        self.logs
            .iter()
            .filter(|(_, log)| log.truncated_up_to > 0)
            .map(|(c, log)| (*c, log.truncated_up_to))
            .collect()
    }

    /// Whether the store is quiet enough to checkpoint: no fill under way, no
    /// partition blocked by recovery.
    pub(crate) fn checkpointable(&self) -> bool {
        let store = self.store();
        store.fills().iter().all(|f| f.is_done()) && store.blocked_now() == 0
    }
}
