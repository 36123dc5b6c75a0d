//! The participant's side of transaction-state recovery (docs/recovery.md): what a
//! primary gathers from its backups and votes, what a recovery coordinator collects, and
//! how a replica applies a decision. Only runs after a configuration change.

use std::collections::{BTreeMap, BTreeSet};

use ferrotx_rpc::HandlerError;
use ferrotx_wire::ViewId;
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use super::{MALFORMED, Participant, Role};
use crate::answer::Answer;
use crate::messages::{CoordinatorId, RecordView, TxId, VERSION_ANY, record_without_writes_of};
use crate::recovery::{
    Vote, decode_decision, decode_need_recovery, decode_replicate, decode_request_votes,
    decode_tx_in_view, decode_votes, encode_vote_answer,
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

/// What a replica holds of a transaction for one partition.
#[derive(Clone, Debug)]
pub(crate) struct HeldRecord {
    /// Its kind.
    pub(crate) vote: Vote,
    pub(crate) tx: TxId,
    /// A record carrying the partition's writes (empty: a decision alone).
    pub(crate) record: Vec<u8>,
    /// Every partition the transaction writes.
    pub(crate) partitions: Vec<u32>,
}

/// One partition this thread is primary of in the view being recovered.
#[derive(Default)]
pub(crate) struct PartitionGather {
    pub(crate) partition: u32,
    /// Backups not heard from yet.
    pub(crate) waiting: Vec<u16>,
    /// What the backups reported, and (same order) which backup reported each.
    pub(crate) reported: Vec<HeldRecord>,
    pub(crate) reporters: Vec<u16>,
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
    pub(crate) view: ViewId,
    pub(crate) partitions: Vec<PartitionGather>,
}

/// A transaction this thread coordinates the recovery of.
pub(crate) struct Recovering {
    pub(crate) view: ViewId,
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
    /// The newest view this thread owes a recovery round (one it switched to after the
    /// view it was built in; `NONE`: none yet), whether or not the round has started.
    pub(crate) due: ViewId,
    pub(crate) gather: Option<Gather>,
    /// As recovery coordinator: the transactions of the current view.
    pub(crate) table: BTreeMap<TxId, Recovering>,
    pub(crate) stats: RecoveryStats,
}

impl Participant {
    /// The view this participant serves.
    pub fn view(&self) -> ViewId {
        self.view
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

    /// A recovery round is due in `view`, which this thread switched to after the view
    /// it was built in (the coordinator's driver runs one in every such view).
    pub(crate) fn owe_recovery(&mut self, view: ViewId) {
        self.recovery.due = self.recovery.due.max(view);
    }

    /// Whether this thread has nothing of older views' transactions still to bring to
    /// the copies of `partition`: true unless this node is its primary and this thread's
    /// round of the view it owes one in has not yet replicated the partition's records
    /// (not started, still waiting for backups' NEED-RECOVERY, or replicating).
    ///
    /// Until then a record of an older write may reach a replica that never logged it,
    /// from NEED-RECOVERY bytes a backup took at its round's start or from this gather,
    /// though the backup has truncated it since and its key may have been deleted after
    /// it: a copy where that key's tombstone was freed would take the old write back at
    /// its old version once the decision applied it. So RECLAIM-CHECK is refused meanwhile
    /// ([`Participant::reclaim_check`]); once replicated, every replica keeps the record
    /// in a log until the decision, where RECLAIM-CHECK sees it.
    pub(crate) fn recovery_replicated(&self, partition: u32) -> bool {
        if self.recovery.due == ViewId::NONE || self.store.get(partition, Role::Primary).is_none() {
            return true;
        }
        self.recovery
            .gather
            .as_ref()
            .filter(|g| g.view >= self.recovery.due)
            .is_some_and(|g| {
                g.partitions
                    .iter()
                    .find(|pg| pg.partition == partition)
                    .is_none_or(|pg| pg.votes.is_some())
            })
    }

    /// Every transaction older than `view` this replica holds something of for
    /// `partition`: its kind, the record's bytes (empty for a decision alone) and the
    /// partitions it writes. A record counts only if it carries writes of `partition` (a
    /// LOCK record holds the writes of the partitions the node is primary of, a logged
    /// one those it backs up): a record of the same transaction for another partition
    /// says nothing of this one. Commit-backup records come before lock records.
    pub(crate) fn held_for(&self, view: ViewId, partition: u32) -> Vec<HeldRecord> {
        let mut out: Vec<HeldRecord> = Vec::new();
        let writes_partition = |r: &RecordView<'_>| r.writes().any(|w| w.partition == partition);
        let push = |out: &mut Vec<HeldRecord>, vote: Vote, bytes: &[u8]| {
            let Ok(record) = RecordView::parse(bytes) else {
                return;
            };
            if record.tx.view < view
                && writes_partition(&record)
                && !out.iter().any(|h| h.tx == record.tx)
            {
                out.push(HeldRecord {
                    vote,
                    tx: record.tx,
                    record: bytes.to_vec(),
                    partitions: record.partitions().collect(),
                });
            }
        };
        // A lock whose install waits for the disk after COMMIT-PRIMARY (its INSTALLED
        // marker appended) is a commit-primary vote, as its replay would be; first, as
        // the strongest.
        let marked = |tx: &TxId| {
            self.logs
                .get(&(tx.node, tx.thread, tx.incarnation))
                .is_some_and(|log| log.installed.contains(&tx.counter))
        };
        for (tx, bytes) in &self.locked {
            if marked(tx) {
                push(&mut out, Vote::CommitPrimary, bytes);
            }
        }
        for log in self.logs.values() {
            for bytes in log.records.values() {
                push(&mut out, Vote::CommitBackup, bytes);
            }
        }
        for (tx, bytes) in &self.locked {
            if !marked(tx) {
                push(&mut out, Vote::Lock, bytes);
            }
        }
        for log in self.logs.values() {
            for ((_, p), bytes) in &log.replicated {
                if *p == partition {
                    push(&mut out, Vote::Lock, bytes);
                }
            }
        }
        for (tx, (committed, partitions)) in &self.recovery.decided {
            if tx.view < view && partitions.contains(&partition) && !out.iter().any(|h| h.tx == *tx)
            {
                let vote = if *committed {
                    Vote::CommitPrimary
                } else {
                    Vote::Abort
                };
                out.push(HeldRecord {
                    vote,
                    tx: *tx,
                    record: Vec::new(),
                    partitions: partitions.clone(),
                });
            }
        }
        out
    }

    /// NEED-RECOVERY at a primary: a backup's records. Answers [`Answer::Granted`], or [`Answer::NotReady`] if
    /// this thread has not started gathering for that view (the backup asks again).
    pub fn need_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (view, from, last, parts) = decode_need_recovery(payload).map_err(|_| MALFORMED)?;
        let Some(gather) = self.recovery.gather.as_mut().filter(|g| g.view >= view) else {
            Answer::NotReady.encode(response);
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
                if last {
                    pg.waiting.swap_remove(i);
                }
                for h in held {
                    pg.reported.push(HeldRecord {
                        vote: h.vote,
                        tx: h.tx,
                        record: h.record.to_vec(),
                        partitions: h.partitions,
                    });
                    pg.reporters.push(from);
                }
            }
        }
        Answer::Granted.encode(response);
        Ok(())
    }

    /// REPLICATE-TX-STATE at a replica of a partition: keeps the record's writes of that
    /// partition (a lock record for it) unless the transaction is decided here or a
    /// commit-backup record of it is logged here (which carries this node's writes of
    /// every partition it backs up). A record with a write of unknown version is refused.
    ///
    /// Only that partition's writes: the record is another replica's, whose writes of
    /// other partitions this node may also host, and only that partition's primary held
    /// back reclamation until its records were replicated
    /// ([`Participant::recovery_replicated`]); another partition's key may have been
    /// reclaimed here since, and applying its old write would bring it back.
    pub fn replicate_tx_state(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, partition, bytes) = decode_replicate(payload).map_err(|_| MALFORMED)?;
        let record = RecordView::parse(bytes).map_err(|_| MALFORMED)?;
        if record.writes().any(|w| w.version == VERSION_ANY) {
            return Err(MALFORMED);
        }
        let tx = record.tx;
        if !self.recovery.decided.contains_key(&tx) {
            let log = self
                .logs
                .entry((tx.node, tx.thread, tx.incarnation))
                .or_default();
            if tx.counter > log.truncated_up_to
                && !log.records.contains_key(&tx.counter)
                && !log.replicated.contains_key(&(tx.counter, partition))
                && let Some(kept) = record_without_writes_of(bytes, |p| p != partition)
            {
                log.replicated.insert((tx.counter, partition), kept);
            }
        }
        Answer::Granted.encode(response);
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
            if m.view != self.view {
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
        Answer::Granted.encode(response);
        Ok(())
    }

    /// REQUEST-VOTE at a primary: one byte per (partition, transaction) asked, the vote or
    /// [`Answer::NotReady`] while the partition's records are not gathered.
    pub fn request_vote(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (view, asks) = decode_request_votes(payload).map_err(|_| MALFORMED)?;
        for (partition, tx) in asks {
            let vote = self.vote_of(view, partition, &tx);
            encode_vote_answer(vote, response);
        }
        Ok(())
    }

    /// This primary's vote for `partition` on `tx` in `view`, if it has gathered.
    pub(crate) fn vote_of(&self, view: ViewId, partition: u32, tx: &TxId) -> Option<Vote> {
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
        let (_view, tx, partitions) = decode_decision(payload).map_err(|_| MALFORMED)?;
        self.decide_here(&tx, true, &partitions);
        Answer::Granted.encode(response);
        Ok(())
    }

    /// ABORT-RECOVERY: release the transaction's locks and drop its records here, keep
    /// the decision.
    pub fn abort_recovery(
        &mut self,
        payload: &[u8],
        response: &mut Vec<u8>,
    ) -> Result<(), HandlerError> {
        let (_view, tx, partitions) = decode_decision(payload).map_err(|_| MALFORMED)?;
        self.decide_here(&tx, false, &partitions);
        Answer::Granted.encode(response);
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
        Answer::Granted.encode(response);
        Ok(())
    }

    /// Applies a decision on `tx` (writing `partitions`) at this replica, once: a commit
    /// installs what it holds locked and brings every copy here to the versions of the
    /// records it logged or was replicated; an abort unlocks and drops them. The
    /// decision is kept (and voted) until TRUNCATE-RECOVERY.
    pub(crate) fn decide_here(&mut self, tx: &TxId, commit: bool, partitions: &[u32]) {
        if self.recovery.decided.contains_key(tx) {
            // Decided here already: the answer waits as the first did.
            if let Some(durable) = self.durable.as_mut() {
                durable.wait_for = durable.wait_for.max(durable.last_lsn);
            }
            self.settle(tx);
            return;
        }
        let mut held = self.locked.contains_key(tx);
        // `sync` mode: a lock whose LOCK record is on disk is released once the decision
        // to abort is too (`Participant::release_after`).
        let mut unlock_after_decision = None;
        if commit {
            self.install_locked(tx, true);
        } else if let Some(bytes) = self.locked.remove(tx) {
            if !self.restored_locks.is_empty() && self.restored_locks.remove(tx) {
                // Given back by a restart, its objects not locked in the store.
                self.recycle(bytes);
            } else if self.lock_lsn.remove(tx).is_some() && self.waits_for_disk() {
                unlock_after_decision = Some(bytes);
            } else {
                let record = RecordView::parse(&bytes).expect("checked when locked");
                for write in record.writes() {
                    if let Some(partition) = self.store.get_any(write.partition) {
                        let _ = partition.unlock(write.table, &write.key);
                    }
                }
                self.recycle(bytes);
            }
            self.stats.aborts += 1;
        }
        let coordinator: CoordinatorId = (tx.node, tx.thread, tx.incarnation);
        let mut records: Vec<Vec<u8>> = Vec::new();
        let mut unlogged: Vec<usize> = Vec::new();
        if let Some(log) = self.logs.get_mut(&coordinator) {
            records.extend(log.records.remove(&tx.counter));
            let replicated: Vec<(u64, u32)> = log
                .replicated
                .range((tx.counter, 0)..=(tx.counter, u32::MAX))
                .map(|(k, _)| *k)
                .collect();
            for k in replicated {
                if let Some(bytes) = log.replicated.remove(&k) {
                    if commit && self.durable.is_some() {
                        // Not logged here yet: a restart must find it applied.
                        unlogged.push(records.len());
                    }
                    records.push(bytes);
                }
            }
        }
        held |= !records.is_empty();
        for &i in &unlogged {
            let _ = self.log_append(crate::durable::RECORD_APPLIED, &records[i]);
        }
        for bytes in records {
            if commit && let Ok(record) = RecordView::parse(&bytes) {
                self.shipped.remember(record.note());
                for write in record.writes() {
                    // Any copy here (a backup, or one promoted since it logged): brought
                    // to the record's version unless it moved past it.
                    let Some(version) = write.version.checked_add(1) else {
                        continue;
                    };
                    if let Some(partition) = self.store.get_any(write.partition) {
                        let _ = partition.apply_unless_locked(
                            write.table,
                            &write.key,
                            version,
                            write.value,
                        );
                    }
                }
                self.stats.records_applied += 1;
            }
            self.recycle(bytes);
        }
        if held && self.durable.is_some() {
            // On this disk, so that a restart finds it decided (`crate::restore`).
            self.scratch.clear();
            self.scratch.push(u8::from(commit));
            crate::recovery::encode_decision(tx.view, tx, partitions, &mut self.scratch);
            let scratch = std::mem::take(&mut self.scratch);
            let lsn = self
                .log_append(crate::durable::RECORD_DECIDED, &scratch)
                .unwrap_or(0);
            self.scratch = scratch;
            if let Some(bytes) = unlock_after_decision.take() {
                unlock_after_decision = self.release_after(lsn, bytes);
            }
        }
        if let Some(bytes) = unlock_after_decision {
            let record = RecordView::parse(&bytes).expect("checked when locked");
            for write in record.writes() {
                if let Some(partition) = self.store.get_any(write.partition) {
                    let _ = partition.unlock(write.table, &write.key);
                }
            }
            self.recycle(bytes);
        }
        self.recovery
            .decided
            .insert(*tx, (commit, partitions.to_vec()));
        // `sync` mode: the answer waits for what this logged (`crate::durable`).
        if let Some(durable) = self.durable.as_mut() {
            durable.wait_for = durable.wait_for.max(durable.last_lsn);
        }
        self.settle(tx);
    }

    /// `tx` is decided here: partitions blocked for it may open.
    fn settle(&mut self, tx: &TxId) {
        // Only the gather of the view whose store this thread holds unblocks it: a
        // decision of an older view's recovery, arriving after the switch to a newer
        // store, must not count toward that store's unblocking, which waits for the newer
        // view's own gather (session 12: `power` seed 431 of kv, where recovery's
        // answers waited for the disk: a view-2 decision on one thread unblocked the
        // view-3 store while the other thread's transaction in doubt was undecided, and
        // a LOCK in view 3 took its object at the old version).
        let view = self.view;
        let Some(gather) = self.recovery.gather.as_mut().filter(|g| g.view == view) else {
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
    pub(crate) fn start_gather(&mut self, view: ViewId, backups_of: impl Fn(u32) -> Vec<u16>) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
    use ferrotx_wire::ViewId;

    use super::super::{NodeStore, Participant, Role};
    use crate::reclaim::{ReclaimRequest, decode_check_response, encode_reclaim};

    const TABLE: TableId = TableId(1);

    /// Whether RECLAIM-CHECK of key 7's tombstone (version 2) is answered, and clear.
    fn check(p: &mut Participant) -> Option<Vec<bool>> {
        let mut request = Vec::new();
        encode_reclaim(
            &ReclaimRequest {
                partition: 0,
                table: TABLE,
                keys: vec![(Key::from(7u64), 2)],
            },
            &mut request,
        );
        let mut response = Vec::new();
        p.reclaim_check(&request, &mut response).unwrap();
        decode_check_response(&response, 1)
    }

    /// A primary's thread refuses RECLAIM-CHECK from the switch to a view it owes a
    /// recovery round in until that round replicated the partition's records: a record
    /// of an older write of the key may be on its way from a backup (which truncated it
    /// since), or held in the gather, and would reach a replica that never logged it after
    /// the key's tombstone was freed there (resp-expiry seed 943, 3 nodes).
    #[test]
    fn a_primary_reclaims_nothing_until_its_recovery_round_replicated_the_partition() {
        let part = Arc::new(Partition::new(
            PartitionId(0),
            &[TableSpec::fixed(1, "t", 8)],
        ));
        part.load(TABLE, Key::from(7u64), &[1; 8]).unwrap();
        part.lock(TABLE, &Key::from(7u64), 1).unwrap().unwrap();
        assert_eq!(part.install(TABLE, &Key::from(7u64), None), Ok(2));
        let mut store = NodeStore::new();
        store.host(Role::Primary, part);
        let store = Arc::new(store);
        let mut p = Participant::new(store.clone());
        // The view it was built in: no round is owed.
        p.set_store(ViewId(1), store.clone());
        assert_eq!(check(&mut p), Some(vec![true]));
        // A later view: owed, not started.
        p.set_store(ViewId(2), store.clone());
        p.owe_recovery(ViewId(2));
        assert_eq!(check(&mut p), None);
        // Started: still waiting for its backup's NEED-RECOVERY.
        p.start_gather(ViewId(2), |_| vec![1]);
        assert_eq!(check(&mut p), None);
        // Replicated (its votes are kept): clear again.
        let gather = p.recovery.gather.as_mut().unwrap();
        gather.partitions[0].waiting.clear();
        gather.partitions[0].votes = Some(Default::default());
        assert_eq!(check(&mut p), Some(vec![true]));
        // The next view: owed again, the last round's gather does not count.
        p.set_store(ViewId(3), store);
        p.owe_recovery(ViewId(3));
        assert_eq!(check(&mut p), None);
    }
}
