//! The participant's side of transaction-state recovery (docs/recovery.md): what a
//! primary gathers from its backups and votes, what a recovery coordinator collects, and
//! how a replica applies a decision. Only runs after a configuration change.

use std::collections::{BTreeMap, BTreeSet};

use ferrotx_rpc::HandlerError;
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use super::{Logged, MALFORMED, Participant, Role};
use crate::messages::{CoordinatorId, RecordView, TxId};
use crate::recovery::{
    NOT_READY, Vote, decode_need_recovery, decode_replicate, decode_request_votes,
    decode_tx_in_view, decode_votes,
};

/// Counters of recovery in one thread.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Recovery rounds started (views this thread recovered in).
    pub rounds: u64,
    /// Transactions this thread, as recovery coordinator, decided to commit.
    pub committed: u64,
    /// And to abort.
    pub aborted: u64,
    /// Votes it counted, by kind ([`crate::recovery::VOTES`] order).
    pub votes: [u64; 6],
    /// Transactions of a live coordinator here that waited for a decision.
    pub waited: u64,
}

/// One partition this thread is primary of in the view being recovered.
#[derive(Default)]
pub(crate) struct PartitionGather {
    pub(crate) partition: u32,
    /// Backups not heard from yet.
    pub(crate) waiting: Vec<u16>,
    /// What the backups reported: backup, kind, transaction, record (may be empty).
    pub(crate) reported: Vec<(u16, Vote, TxId, Vec<u8>)>,
    /// Once gathered and replicated: the partition's vote on each recovering
    /// transaction, with the partitions it writes.
    pub(crate) votes: Option<BTreeMap<TxId, (Vote, Vec<u32>)>>,
    /// Transactions not decided yet; the partition stays blocked (if it is) until none.
    pub(crate) pending: BTreeSet<TxId>,
    /// This thread still holds its share of the partition's block.
    pub(crate) blocked: bool,
}

/// This thread's gathering in one view.
#[derive(Default)]
pub(crate) struct Gather {
    pub(crate) view: u64,
    pub(crate) partitions: Vec<PartitionGather>,
}

/// A transaction this thread coordinates the recovery of.
pub(crate) struct Recovering {
    pub(crate) view: u64,
    /// Every partition it writes (empty until a vote or the local coordinator says).
    pub(crate) partitions: Vec<u32>,
    pub(crate) votes: BTreeMap<u32, Vote>,
    /// When the driver first saw it (0: not yet).
    pub(crate) since_ns: u64,
}

/// Recovery's state in one participant thread.
#[derive(Default)]
pub(crate) struct RecoveryState {
    /// Decisions seen here (committed?, partitions), kept until TRUNCATE-RECOVERY.
    pub(crate) decided: HashMap<TxId, (bool, Vec<u32>), FixedState>,
    pub(crate) gather: Option<Gather>,
    /// As recovery coordinator: the transactions of the current view.
    pub(crate) table: BTreeMap<TxId, Recovering>,
    pub(crate) stats: RecoveryStats,
}

impl Participant {
    /// The view this participant serves.
    pub fn configuration(&self) -> u64 {
        self.configuration
    }

    /// Recovery counters so far.
    pub fn recovery_stats(&self) -> RecoveryStats {
        self.recovery.stats
    }

    /// The vote of a replica with no record of `tx`: truncated if a mark seen here
    /// covers it, else unknown.
    pub(crate) fn vote_without_record(&self, tx: &TxId) -> Vote {
        let covered = self
            .logs
            .get(&(tx.node, tx.thread, tx.incarnation))
            .is_some_and(|log| log.truncated_up_to >= tx.counter);
        if covered {
            Vote::Truncated
        } else {
            Vote::Unknown
        }
    }

    /// Every transaction older than `view` this replica holds something of for
    /// `partition`: its kind, and the record's bytes (empty for a decision). A record
    /// counts only if it carries writes of `partition` (a LOCK record holds the writes
    /// of the partitions the node is primary of, a logged one those it backs up): a
    /// record of the same transaction for another partition says nothing of this one.
    pub(crate) fn held_for(&self, view: u64, partition: u32) -> Vec<(Vote, TxId, Vec<u8>)> {
        let mut out = Vec::new();
        let writes_partition = |bytes: &[u8]| {
            RecordView::parse(bytes).is_ok_and(|r| r.writes().any(|w| w.partition == partition))
        };
        for (tx, bytes) in &self.locked {
            if tx.configuration < view && writes_partition(bytes) {
                out.push((Vote::Lock, *tx, bytes.clone()));
            }
        }
        for (&(node, thread, incarnation), log) in &self.logs {
            for (&counter, logged) in &log.records {
                let Ok(record) = RecordView::parse(&logged.bytes) else {
                    continue;
                };
                let tx = TxId {
                    node,
                    thread,
                    incarnation,
                    counter,
                    configuration: record.tx.configuration,
                };
                if tx.configuration < view && record.writes().any(|w| w.partition == partition) {
                    let vote = if logged.replicated {
                        Vote::Lock
                    } else {
                        Vote::CommitBackup
                    };
                    out.push((vote, tx, logged.bytes.clone()));
                }
            }
        }
        for (tx, (committed, partitions)) in &self.recovery.decided {
            if partitions.contains(&partition) && !out.iter().any(|(_, t, _)| t == tx) {
                let vote = if *committed {
                    Vote::CommitPrimary
                } else {
                    Vote::Abort
                };
                out.push((vote, *tx, Vec::new()));
            }
        }
        out
    }

    /// NEED-RECOVERY at a primary: a backup's records. Answers 1, or [`NOT_READY`] if
    /// this thread has not started gathering for that view (the backup asks again).
    pub fn need_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (view, from, parts) = decode_need_recovery(payload).map_err(|_| MALFORMED)?;
        let Some(gather) = self.recovery.gather.as_mut().filter(|g| g.view >= view) else {
            response.push(NOT_READY);
            return Ok(());
        };
        if gather.view == view {
            for (partition, held) in parts {
                let Some(pg) = gather
                    .partitions
                    .iter_mut()
                    .find(|pg| pg.partition == partition)
                else {
                    continue;
                };
                let Some(i) = pg.waiting.iter().position(|&n| n == from) else {
                    continue;
                };
                pg.waiting.swap_remove(i);
                for h in held {
                    pg.reported.push((from, h.vote, h.tx, h.record.to_vec()));
                }
            }
        }
        response.push(1);
        Ok(())
    }

    /// REPLICATE-TX-STATE at a backup: logs the record (as a lock record) unless it holds
    /// the transaction already.
    pub fn replicate_tx_state(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, _partition, bytes) = decode_replicate(payload).map_err(|_| MALFORMED)?;
        let record = RecordView::parse(bytes).map_err(|_| MALFORMED)?;
        let tx = record.tx;
        // Logged unless decided or logged already (a LOCK record this node holds as a
        // primary of another partition does not carry these writes).
        if !self.recovery.decided.contains_key(&tx) {
            let log = self
                .logs
                .entry((tx.node, tx.thread, tx.incarnation))
                .or_default();
            if tx.counter > log.truncated_up_to && !log.records.contains_key(&tx.counter) {
                log.records.insert(
                    tx.counter,
                    Logged {
                        bytes: bytes.to_vec(),
                        replicated: true,
                    },
                );
            }
        }
        response.push(1);
        Ok(())
    }

    /// RECOVERY-VOTE at a recovery coordinator: partitions' votes, kept for the driver.
    pub fn recovery_vote(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let votes = decode_votes(payload).map_err(|_| MALFORMED)?;
        for m in votes {
            if m.view != self.configuration {
                continue;
            }
            let entry = self
                .recovery
                .table
                .entry(m.tx)
                .or_insert_with(|| Recovering {
                    view: m.view,
                    partitions: Vec::new(),
                    votes: BTreeMap::new(),
                    since_ns: 0,
                });
            if entry.view != m.view {
                entry.view = m.view;
                entry.votes.clear();
            }
            if entry.partitions.is_empty() {
                entry.partitions = m.partitions;
            }
            entry.votes.insert(m.partition, m.vote);
        }
        response.push(1);
        Ok(())
    }

    /// REQUEST-VOTE at a primary: one byte per (partition, transaction) asked, the vote or
    /// [`NOT_READY`] while the partition's records are not gathered.
    pub fn request_vote(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (view, asks) = decode_request_votes(payload).map_err(|_| MALFORMED)?;
        for (partition, tx) in asks {
            let vote = self.vote_of(view, partition, &tx);
            response.push(vote.map_or(NOT_READY, |v| v as u8));
        }
        Ok(())
    }

    /// This primary's vote for `partition` on `tx` in `view`, if it has gathered.
    pub(crate) fn vote_of(&self, view: u64, partition: u32, tx: &TxId) -> Option<Vote> {
        let gather = self.recovery.gather.as_ref().filter(|g| g.view == view)?;
        let pg = gather
            .partitions
            .iter()
            .find(|pg| pg.partition == partition)?;
        let votes = pg.votes.as_ref()?;
        if let Some((vote, _)) = votes.get(tx) {
            return Some(*vote);
        }
        // No replica of the partition held a record of it when gathered.
        Some(match self.decided_or_installed(tx) {
            Some(vote) => vote,
            None => self.vote_without_record(tx),
        })
    }

    /// Commit-primary if this primary installed `tx` (COMMIT-PRIMARY) and no mark covers
    /// it yet, or the decision on it seen here.
    pub(crate) fn decided_or_installed(&self, tx: &TxId) -> Option<Vote> {
        if let Some((committed, _)) = self.recovery.decided.get(tx) {
            return Some(if *committed {
                Vote::CommitPrimary
            } else {
                Vote::Abort
            });
        }
        self.logs
            .get(&(tx.node, tx.thread, tx.incarnation))
            .is_some_and(|log| log.installed.contains(&tx.counter))
            .then_some(Vote::CommitPrimary)
    }

    /// COMMIT-RECOVERY: install or apply the transaction's writes here, keep the decision.
    pub fn commit_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, _, tx) = decode_tx_in_view(payload).map_err(|_| MALFORMED)?;
        self.decide_here(&tx, true);
        response.push(1);
        Ok(())
    }

    /// ABORT-RECOVERY: release the transaction's locks and drop its records here, keep
    /// the decision.
    pub fn abort_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, _, tx) = decode_tx_in_view(payload).map_err(|_| MALFORMED)?;
        self.decide_here(&tx, false);
        response.push(1);
        Ok(())
    }

    /// TRUNCATE-RECOVERY: every replica has the decision; forget it.
    pub fn truncate_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, _, tx) = decode_tx_in_view(payload).map_err(|_| MALFORMED)?;
        self.recovery.decided.remove(&tx);
        response.push(1);
        Ok(())
    }

    /// Applies a decision on `tx` at this replica (idempotent).
    pub(crate) fn decide_here(&mut self, tx: &TxId, commit: bool) {
        if self.recovery.decided.contains_key(tx) {
            self.settle(tx);
            return;
        }
        let mut partitions: Vec<u32> = Vec::new();
        if let Some(bytes) = self.locked.get(tx)
            && let Ok(record) = RecordView::parse(bytes)
        {
            partitions = record.partitions().collect();
        }
        if commit {
            self.install_locked(tx);
        } else if let Some(bytes) = self.locked.remove(tx) {
            let record = RecordView::parse(&bytes).expect("checked when locked");
            for write in record.writes() {
                if let Some(partition) = self.store.get_any(write.partition) {
                    let _ = partition.unlock(write.table, &write.key);
                }
            }
            self.stats.aborts += 1;
            self.recycle(bytes);
        }
        let coordinator: CoordinatorId = (tx.node, tx.thread, tx.incarnation);
        let logged = self
            .logs
            .get_mut(&coordinator)
            .and_then(|log| log.records.remove(&tx.counter));
        if let Some(logged) = logged {
            if let Ok(record) = RecordView::parse(&logged.bytes) {
                if partitions.is_empty() {
                    partitions = record.partitions().collect();
                }
                if commit {
                    for write in record.writes() {
                        // Any copy here (a backup, or one promoted since it logged):
                        // brought to the record's version unless it moved past it.
                        if let Some(partition) = self.store.get_any(write.partition) {
                            let _ = partition.apply_unless_locked(
                                write.table,
                                &write.key,
                                write.version + 1,
                                write.value,
                            );
                        }
                    }
                    self.stats.records_applied += 1;
                }
            }
            self.recycle(logged.bytes);
        }
        self.recovery.decided.insert(*tx, (commit, partitions));
        self.settle(tx);
    }

    /// `tx` is decided here: partitions blocked for it may open.
    fn settle(&mut self, tx: &TxId) {
        let Some(gather) = self.recovery.gather.as_mut() else {
            return;
        };
        for pg in &mut gather.partitions {
            if pg.pending.remove(tx) && pg.pending.is_empty() && pg.votes.is_some() && pg.blocked {
                pg.blocked = false;
                self.store.recovered(pg.partition);
            }
        }
    }

    /// Starts gathering for `view`: the partitions this thread is primary of, each
    /// waiting for its backups (`backups_of`).
    pub(crate) fn start_gather(&mut self, view: u64, backups_of: impl Fn(u32) -> Vec<u16>) {
        let blocked: Vec<u32> = self.store.blocked().collect();
        let mut partitions = Vec::new();
        for (partition, role) in self.store.hosted() {
            if role != Role::Primary {
                continue;
            }
            partitions.push(PartitionGather {
                partition,
                waiting: backups_of(partition),
                blocked: blocked.contains(&partition),
                ..PartitionGather::default()
            });
        }
        partitions.sort_by_key(|pg| pg.partition);
        // Blocks this thread does not hold (the store's partitions it is not primary of)
        // do not exist: a store blocks only partitions it hosts as primary.
        self.recovery.stats.rounds += 1;
        self.recovery.table.retain(|_, r| r.view >= view);
        self.recovery.gather = Some(Gather { view, partitions });
    }
}
