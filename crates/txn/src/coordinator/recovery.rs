//! The driver of transaction-state recovery in one worker thread (docs/recovery.md): a
//! background coroutine that runs a round per committed view (gather, replicate, vote),
//! and decides the transactions this thread is recovery coordinator of.

use std::collections::{BTreeMap, BTreeSet};

use ferrotx_exec::Co;

use super::{Coordinator, NO_PRIMARY};
use crate::messages::TxId;
use crate::participant::Participant;
use crate::recovery::{
    Held, NOT_READY, VOTES, Vote, VoteMessage, decide, encode_need_recovery, encode_replicate,
    encode_request_votes, encode_tx_in_view, encode_votes, recovery_coordinator, request_type,
};

/// What a replica holds of a transaction: kind, id, record.
type HeldOwned = (Vote, TxId, Vec<u8>);

/// A partition's merged view of a transaction: its vote, the partitions it writes, a
/// record of it, and the replicas that hold one.
type Merged = (Vote, Vec<u32>, Vec<u8>, BTreeSet<u16>);

/// How long a recovery coordinator waits for a partition's vote before asking for it.
const REQUEST_VOTE_AFTER_NS: u64 = 1_000_000;

/// The driver's pause between two checks while recovery has work.
const BUSY_POLL_NS: u64 = 200_000;

/// The driver's pause while it has none: also how long a coordinator stays quiet before
/// its backups are sent its truncation mark (they apply the records it covers).
const IDLE_POLL_NS: u64 = 5_000_000;

impl Coordinator {
    /// Runs recovery in this thread for as long as the thread runs: a round in each view
    /// committed after the first, and the decisions of the transactions this thread
    /// coordinates the recovery of. Spawn it once per worker, in the background.
    pub async fn run_recovery(&self, co: Co) {
        let mut recovered = self.configuration();
        let mut last_mark = 0;
        loop {
            let view = self.configuration();
            if self.accepting.get() && view > recovered {
                recovered = view;
                self.recovery_round(&co, view).await;
            }
            let busy = self.coordinate_recoveries(&co).await;
            // Backups catch up when quiet: a mark that did not move since the last pass
            // (no commit of this thread ended meanwhile) goes to the backups that hold
            // records it covers, which apply them. Under load it rides on commits.
            let mark = self.truncation_mark();
            if mark == last_mark && self.accepting.get() {
                let members = self.members.borrow().clone();
                let behind: Vec<u16> = self
                    .log_space
                    .borrow()
                    .behind(mark)
                    .into_iter()
                    .filter(|n| members.is_empty() || members.iter().any(|m| m.0 == *n))
                    .collect();
                if !behind.is_empty() {
                    self.send_truncate(&co, &behind, mark).await;
                }
            }
            last_mark = mark;
            let pause = if busy || !self.awaiting.borrow().is_empty() {
                BUSY_POLL_NS
            } else {
                IDLE_POLL_NS
            };
            // A view committed wakes it at once (the worker notifies `opened`).
            co.wait_until(&self.opened, co.now_ns() + pause).await;
        }
    }

    fn view_changed(&self, view: u64) -> bool {
        self.configuration() != view
    }

    /// One view's round in this thread: backups send their records to the primaries;
    /// primaries gather them, replicate what a backup lacks, and vote.
    async fn recovery_round(&self, co: &Co, view: u64) {
        let placement = self.placement();
        let me = self.local.node();
        self.participant
            .borrow_mut()
            .start_gather(view, |p| placement.backups(p).to_vec());
        // Backups: their records, per primary.
        let store = self.store();
        let mut by_primary: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
        for (p, role) in store.hosted() {
            if role == crate::participant::Role::Backup {
                let primary = placement.primary(p);
                if primary != NO_PRIMARY && primary != me {
                    by_primary.entry(primary).or_default().push(p);
                }
            }
        }
        let mut owed: Vec<u16> = by_primary.keys().copied().collect();
        while !owed.is_empty() {
            if self.view_changed(view) {
                return;
            }
            let messages: BTreeMap<u16, Vec<u8>> = {
                let participant = self.participant.borrow();
                owed.iter()
                    .map(|node| {
                        let parts: Vec<(u32, Vec<HeldOwned>)> = by_primary[node]
                            .iter()
                            .map(|&p| (p, participant.held_for(view, p)))
                            .collect();
                        let parts: Vec<(u32, Vec<Held<'_>>)> = parts
                            .iter()
                            .map(|(p, held)| {
                                (
                                    *p,
                                    held.iter()
                                        .map(|(vote, tx, record)| Held {
                                            vote: *vote,
                                            tx: *tx,
                                            record,
                                        })
                                        .collect(),
                                )
                            })
                            .collect();
                        let mut out = Vec::new();
                        encode_need_recovery(view, me, &parts, &mut out);
                        (*node, out)
                    })
                    .collect()
            };
            let answers = self
                .round(
                    co,
                    request_type::NEED_RECOVERY,
                    Participant::need_recovery,
                    &owed,
                    |node, buffer| buffer.extend_from_slice(&messages[&node]),
                    |_, answer| answer == [1],
                )
                .await;
            owed = answers
                .iter()
                .filter(|(_, ok)| !ok)
                .map(|(n, _)| *n)
                .collect();
            if !owed.is_empty() {
                co.sleep_until(co.now_ns() + BUSY_POLL_NS).await;
            }
        }
        // Primaries: wait for every backup, then merge, replicate and vote.
        loop {
            if self.view_changed(view) {
                return;
            }
            let heard_all = self
                .participant
                .borrow()
                .recovery
                .gather
                .as_ref()
                .is_some_and(|g| {
                    g.view == view && g.partitions.iter().all(|pg| pg.waiting.is_empty())
                });
            if heard_all {
                break;
            }
            co.sleep_until(co.now_ns() + BUSY_POLL_NS).await;
        }
        let partitions: Vec<u32> = self
            .participant
            .borrow()
            .recovery
            .gather
            .as_ref()
            .map(|g| g.partitions.iter().map(|pg| pg.partition).collect())
            .unwrap_or_default();
        let members: Vec<(u16, u64)> = self.members.borrow().to_vec();
        let mut votes_to: BTreeMap<u16, Vec<VoteMessage>> = BTreeMap::new();
        for p in partitions {
            // Merge what every replica of `p` holds.
            let mut merged: BTreeMap<TxId, Merged> = BTreeMap::new();
            {
                let participant = self.participant.borrow();
                for (vote, tx, record) in participant.held_for(view, p) {
                    let e =
                        merged
                            .entry(tx)
                            .or_insert((vote, Vec::new(), Vec::new(), BTreeSet::new()));
                    e.0 = e.0.merge(vote);
                    e.3.insert(me);
                    if e.2.is_empty() && !record.is_empty() {
                        e.2 = record;
                    }
                }
                let gather = participant.recovery.gather.as_ref().expect("gathering");
                let pg = gather
                    .partitions
                    .iter()
                    .find(|pg| pg.partition == p)
                    .expect("gathering p");
                for (from, vote, tx, record) in &pg.reported {
                    let e = merged.entry(*tx).or_insert((
                        *vote,
                        Vec::new(),
                        Vec::new(),
                        BTreeSet::new(),
                    ));
                    e.0 = e.0.merge(*vote);
                    e.3.insert(*from);
                    if e.2.is_empty() && !record.is_empty() {
                        e.2 = record.clone();
                    }
                }
                for (tx, e) in merged.iter_mut() {
                    // Installed here (commit-primary), which `held_for` does not list.
                    if let Some(vote) = participant.decided_or_installed(tx) {
                        e.0 = e.0.merge(vote);
                    }
                    if let Ok(record) = crate::messages::RecordView::parse(&e.2) {
                        e.1 = record.partitions().collect();
                    }
                }
            }
            // Replicate each record to the backups of `p` that lack it.
            for (tx, (_, _, record, holders)) in &merged {
                if record.is_empty() {
                    continue;
                }
                let lacking: Vec<u16> = placement
                    .backups(p)
                    .iter()
                    .copied()
                    .filter(|b| !holders.contains(b))
                    .collect();
                if lacking.is_empty() {
                    continue;
                }
                let answers = self
                    .round(
                        co,
                        request_type::REPLICATE_TX_STATE,
                        Participant::replicate_tx_state,
                        &lacking,
                        |_, buffer| encode_replicate(view, p, record, buffer),
                        |_, answer| answer == [1],
                    )
                    .await;
                if self.view_changed(view) || answers.iter().any(|(_, ok)| !ok) {
                    return;
                }
                let _ = tx;
            }
            // The partition's votes, kept for REQUEST-VOTE, and sent to each recovery
            // coordinator.
            {
                let mut participant = self.participant.borrow_mut();
                let decided: BTreeSet<TxId> = merged
                    .keys()
                    .filter(|tx| participant.recovery.decided.contains_key(*tx))
                    .copied()
                    .collect();
                let store = participant.store().clone();
                let gather = participant.recovery.gather.as_mut().expect("gathering");
                let pg = gather
                    .partitions
                    .iter_mut()
                    .find(|pg| pg.partition == p)
                    .expect("gathering p");
                pg.votes = Some(
                    merged
                        .iter()
                        .map(|(tx, (vote, parts, _, _))| (*tx, (*vote, parts.clone())))
                        .collect(),
                );
                pg.pending = merged
                    .keys()
                    .filter(|tx| !decided.contains(*tx))
                    .copied()
                    .collect();
                if pg.pending.is_empty() && pg.blocked {
                    pg.blocked = false;
                    store.recovered(p);
                }
            }
            for (tx, (vote, parts, _, _)) in merged {
                let r = recovery_coordinator(&tx, &members);
                votes_to.entry(r).or_default().push(VoteMessage {
                    view,
                    partition: p,
                    tx,
                    partitions: parts,
                    vote,
                });
            }
        }
        let mut owed: Vec<u16> = votes_to.keys().copied().collect();
        while !owed.is_empty() {
            if self.view_changed(view) {
                return;
            }
            let answers = self
                .round(
                    co,
                    request_type::RECOVERY_VOTE,
                    Participant::recovery_vote,
                    &owed,
                    |node, buffer| encode_votes(&votes_to[&node], buffer),
                    |_, answer| answer == [1],
                )
                .await;
            owed = answers
                .iter()
                .filter(|(_, ok)| !ok)
                .map(|(n, _)| *n)
                .collect();
            if !owed.is_empty() {
                co.sleep_until(co.now_ns() + BUSY_POLL_NS).await;
            }
        }
    }

    /// One pass over the transactions this thread coordinates the recovery of: asks for
    /// missing votes, decides, and applies decisions. True if any is left.
    async fn coordinate_recoveries(&self, co: &Co) -> bool {
        let view = self.configuration();
        if !self.accepting.get() {
            return true;
        }
        let now = co.now_ns();
        // A local commit waiting for its outcome is recovered here whatever voted.
        for (tx, (partitions, _)) in self.awaiting.borrow().iter() {
            let mut participant = self.participant.borrow_mut();
            let e = participant
                .recovery
                .table
                .entry(*tx)
                .or_insert_with(|| crate::participant::recovery_entry(view));
            if e.view != view {
                e.view = view;
                e.votes.clear();
                e.since_ns = 0;
            }
            if e.partitions.is_empty() {
                e.partitions = partitions.clone();
            }
        }
        let mut ask: BTreeMap<u16, Vec<(u32, TxId)>> = BTreeMap::new();
        let mut ready: Vec<(TxId, bool, Vec<u32>, Vec<Vote>)> = Vec::new();
        {
            let placement = self.placement.borrow();
            let mut participant = self.participant.borrow_mut();
            for (tx, r) in participant.recovery.table.iter_mut() {
                if r.view != view || r.partitions.is_empty() {
                    continue;
                }
                if r.since_ns == 0 {
                    r.since_ns = now;
                }
                let votes: Vec<Option<Vote>> = r
                    .partitions
                    .iter()
                    .map(|p| r.votes.get(p).copied())
                    .collect();
                if votes.iter().all(Option::is_some) {
                    let decision = decide(votes.iter().copied()).expect("every vote");
                    ready.push((
                        *tx,
                        decision,
                        r.partitions.clone(),
                        votes.into_iter().flatten().collect(),
                    ));
                } else if now >= r.since_ns + REQUEST_VOTE_AFTER_NS {
                    for (p, v) in r.partitions.iter().zip(&votes) {
                        let primary = placement.primary(*p);
                        if v.is_none() && primary != NO_PRIMARY {
                            ask.entry(primary).or_default().push((*p, *tx));
                        }
                    }
                }
            }
        }
        let busy = !self.participant.borrow().recovery.table.is_empty();
        // REQUEST-VOTE to the primaries that did not vote.
        if !ask.is_empty() {
            let nodes: Vec<u16> = ask.keys().copied().collect();
            let mut answers: Vec<(u16, Vec<u8>)> = Vec::new();
            self.round(
                co,
                request_type::REQUEST_VOTE,
                Participant::request_vote,
                &nodes,
                |node, buffer| encode_request_votes(view, &ask[&node], buffer),
                |node, answer| {
                    answers.push((node, answer.to_vec()));
                    true
                },
            )
            .await;
            if self.view_changed(view) {
                return true;
            }
            let mut participant = self.participant.borrow_mut();
            for (node, answer) in answers {
                for ((p, tx), b) in ask[&node].iter().zip(answer) {
                    if b == NOT_READY {
                        continue;
                    }
                    if let (Some(vote), Some(r)) =
                        (Vote::from_u8(b), participant.recovery.table.get_mut(tx))
                    {
                        r.votes.insert(*p, vote);
                    }
                }
            }
        }
        for (tx, commit, partitions, votes) in ready {
            if !self
                .finish_recovery(co, view, tx, commit, &partitions)
                .await
            {
                return true;
            }
            let mut participant = self.participant.borrow_mut();
            participant.recovery.table.remove(&tx);
            let stats = &mut participant.recovery.stats;
            if commit {
                stats.committed += 1;
            } else {
                stats.aborted += 1;
            }
            for v in votes {
                let i = VOTES.iter().position(|k| *k == v).expect("a vote kind");
                stats.votes[i] += 1;
            }
            drop(participant);
            match self.awaiting.borrow_mut().remove(&tx) {
                Some((_, true)) => {
                    self.outcomes.borrow_mut().insert(tx, commit);
                    co.notify_all(&self.decided);
                }
                // Its client heard "outcome unknown": it may end only now.
                Some((_, false)) => self.truncation.borrow_mut().finish(tx.counter),
                None => {}
            }
        }
        busy
    }

    /// Sends the decision on `tx` to every replica of its partitions, then, once all
    /// acknowledged, TRUNCATE-RECOVERY. False if the view changed on the way.
    async fn finish_recovery(
        &self,
        co: &Co,
        view: u64,
        tx: TxId,
        commit: bool,
        partitions: &[u32],
    ) -> bool {
        let mut replicas: Vec<u16> = {
            let placement = self.placement.borrow();
            partitions
                .iter()
                .flat_map(|&p| {
                    let primary = placement.primary(p);
                    std::iter::once(primary).chain(placement.backups(p).iter().copied())
                })
                .filter(|&n| n != NO_PRIMARY)
                .collect()
        };
        replicas.sort_unstable();
        replicas.dedup();
        let (kind, handler): (u8, crate::participant::ParticipantHandler) = if commit {
            (request_type::COMMIT_RECOVERY, Participant::commit_recovery)
        } else {
            (request_type::ABORT_RECOVERY, Participant::abort_recovery)
        };
        for (kind, handler) in [
            (kind, handler),
            (
                request_type::TRUNCATE_RECOVERY,
                Participant::truncate_recovery as crate::participant::ParticipantHandler,
            ),
        ] {
            let answers = self
                .round(
                    co,
                    kind,
                    handler,
                    &replicas,
                    |_, buffer| encode_tx_in_view(view, u32::MAX, &tx, buffer),
                    |_, answer| answer == [1],
                )
                .await;
            if self.view_changed(view) || answers.iter().any(|(_, ok)| !ok) {
                return false;
            }
        }
        true
    }

    /// Waits, until `deadline_ns`, for recovery's decision on this thread's own `tx`
    /// (writing `partitions`), whose commit a configuration change interrupted after
    /// COMMIT-BACKUP went out. `None`: no decision in time.
    pub(crate) async fn await_recovery(
        &self,
        co: &Co,
        tx: TxId,
        partitions: &[u32],
        deadline_ns: u64,
    ) -> Option<bool> {
        self.awaiting
            .borrow_mut()
            .insert(tx, (partitions.to_vec(), true));
        {
            let mut participant = self.participant.borrow_mut();
            let mut stats = participant.recovery.stats;
            stats.waited += 1;
            participant.recovery.stats = stats;
        }
        loop {
            if let Some(commit) = self.outcomes.borrow_mut().remove(&tx) {
                return Some(commit);
            }
            let now = co.now_ns();
            if now >= deadline_ns {
                // Recovered all the same; the transaction ends (joins the truncation
                // mark) when it is decided.
                if let Some(a) = self.awaiting.borrow_mut().get_mut(&tx) {
                    a.1 = false;
                }
                return None;
            }
            co.wait_until(&self.decided, deadline_ns.min(now + 10 * BUSY_POLL_NS))
                .await;
        }
    }
}
