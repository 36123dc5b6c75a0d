//! The driver of transaction-state recovery in one worker thread (docs/recovery.md): a
//! background coroutine that runs a round per committed view (gather, replicate, vote),
//! and decides the transactions this thread is recovery coordinator of.

use std::collections::{BTreeMap, BTreeSet};

use ferrotx_exec::Co;
use ferrotx_wire::{RequestType, ViewId};

use super::round::yes;
use super::{Coordinator, NO_PRIMARY};
use crate::messages::TxId;
use crate::participant::HeldRecord;
use crate::recovery::{
    Held, VOTES, Vote, VoteMessage, decide, decode_vote_answer, encode_decision,
    encode_need_recovery, encode_replicate, encode_request_votes, encode_tx_in_view, encode_votes,
    held_encoded_len, recovery_coordinator,
};

/// A partition's merged view of a transaction.
struct Merged {
    vote: Vote,
    /// Every partition it writes.
    partitions: Vec<u32>,
    /// A record carrying the partition's writes (empty: decisions only).
    record: Vec<u8>,
    /// The replicas that hold a record of it.
    holders: BTreeSet<u16>,
}

/// Votes per RECOVERY-VOTE message (far below the decoders' item limit).
const VOTES_PER_MESSAGE: usize = 512;

/// Bytes of records per NEED-RECOVERY message, beyond which another message follows: a
/// quarter of the RPC layer's message limit (a record alone always fits one message).
const NEED_RECOVERY_BYTES_MAX: usize = 256 << 10;

/// A backup's NEED-RECOVERY messages to one primary for the records `held` of each
/// partition: as few as fit [`NEED_RECOVERY_BYTES_MAX`] and [`VOTES_PER_MESSAGE`]
/// records each, the last one marked (one message, marked, when there are none).
fn need_recovery_messages(view: ViewId, me: u16, held: &[(u32, Vec<HeldRecord>)]) -> Vec<Vec<u8>> {
    let mut chunks: Vec<Vec<(u32, Vec<Held<'_>>)>> = vec![Vec::new()];
    let (mut bytes, mut count) = (0, 0);
    for (p, records) in held {
        chunks.last_mut().expect("a chunk").push((*p, Vec::new()));
        for h in records {
            let h = Held {
                vote: h.vote,
                tx: h.tx,
                record: &h.record,
                partitions: h.partitions.clone(),
            };
            let len = held_encoded_len(&h);
            if count > 0 && (bytes + len > NEED_RECOVERY_BYTES_MAX || count == VOTES_PER_MESSAGE) {
                chunks.push(vec![(*p, Vec::new())]);
                bytes = 0;
                count = 0;
            }
            bytes += len;
            count += 1;
            chunks
                .last_mut()
                .expect("a chunk")
                .last_mut()
                .expect("a partition")
                .1
                .push(h);
        }
    }
    let n = chunks.len();
    chunks
        .iter()
        .enumerate()
        .map(|(i, parts)| {
            let mut out = Vec::new();
            encode_need_recovery(view, me, i + 1 == n, parts, &mut out);
            out
        })
        .collect()
}

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
        // From the configuration this thread was built in, not the one it may have
        // switched to before this coroutine first ran: a process admitted into a running
        // cluster holds backups being filled from its first view, whose primaries wait
        // for its NEED-RECOVERY (recovery-crash-during-recovery seed 92 hung without it).
        let mut recovered = self.started_in;
        let mut last_mark = 0;
        loop {
            let view = self.view();
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

    fn view_changed(&self, view: ViewId) -> bool {
        self.view() != view
    }

    /// One view's round in this thread: backups send their records to the primaries;
    /// primaries gather them, replicate what a replica (themselves included) lacks, and
    /// vote. Whatever fails short of a view change is tried again.
    async fn recovery_round(&self, co: &Co, view: ViewId) {
        let placement = self.placement();
        let me = self.local.node();
        self.participant
            .borrow_mut()
            .start_gather(view, |p| placement.backups(p).to_vec());
        // Backups: their records, per primary, in messages of bounded size.
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
        let mut messages: Vec<(u16, Vec<u8>)> = Vec::new();
        {
            let participant = self.participant.borrow();
            for (&node, partitions) in &by_primary {
                let held: Vec<(u32, Vec<HeldRecord>)> = partitions
                    .iter()
                    .map(|&p| (p, participant.held_for(view, p)))
                    .collect();
                messages.extend(
                    need_recovery_messages(view, me, &held)
                        .into_iter()
                        .map(|m| (node, m)),
                );
            }
        }
        // One message per primary at a time, in order (its last one says it is the last).
        let mut next: BTreeMap<u16, usize> = by_primary.keys().map(|&n| (n, 0)).collect();
        loop {
            if self.view_changed(view) {
                return;
            }
            let mut batch: Vec<(u16, usize)> = Vec::new();
            for (&node, i) in &next {
                if let Some(k) = messages
                    .iter()
                    .enumerate()
                    .filter(|(_, (n, _))| *n == node)
                    .map(|(k, _)| k)
                    .nth(*i)
                {
                    batch.push((node, k));
                }
            }
            if batch.is_empty() {
                break;
            }
            let nodes: Vec<u16> = batch.iter().map(|(n, _)| *n).collect();
            let answers = self
                .round(
                    co,
                    RequestType::NeedRecovery,
                    &nodes,
                    |node, buffer| {
                        let k = batch.iter().find(|(n, _)| *n == node).expect("batched").1;
                        buffer.extend_from_slice(&messages[k].1);
                    },
                    yes,
                )
                .await;
            let mut accepted = false;
            for (node, ok) in answers {
                if ok {
                    *next.get_mut(&node).expect("a primary") += 1;
                    accepted = true;
                }
            }
            if !accepted {
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
            let merged = self.merge(view, p);
            // Replicate each record to the replicas of `p` that lack it, this primary
            // included (a promoted backup may lack one another backup logged): once every
            // replica holds it, no later failure loses what the votes are based on.
            let mut replicas: Vec<u16> = placement.backups(p).to_vec();
            replicas.push(me);
            for m in merged.values() {
                if m.record.is_empty() {
                    continue;
                }
                let lacking: Vec<u16> = replicas
                    .iter()
                    .copied()
                    .filter(|n| !m.holders.contains(n))
                    .collect();
                loop {
                    if lacking.is_empty() || self.view_changed(view) {
                        break;
                    }
                    let answers = self
                        .round(
                            co,
                            RequestType::ReplicateTxState,
                            &lacking,
                            |_, buffer| encode_replicate(view, p, &m.record, buffer),
                            yes,
                        )
                        .await;
                    if answers.iter().all(|(_, ok)| *ok) {
                        break;
                    }
                    co.sleep_until(co.now_ns() + BUSY_POLL_NS).await;
                }
            }
            if self.view_changed(view) {
                return;
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
                        .map(|(tx, m)| (*tx, (m.vote, m.partitions.clone())))
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
            for (tx, m) in merged {
                let r = recovery_coordinator(&tx, &members);
                votes_to.entry(r).or_default().push(VoteMessage {
                    view,
                    partition: p,
                    tx,
                    partitions: m.partitions,
                    vote: m.vote,
                });
            }
        }
        // The votes, at most VOTES_PER_MESSAGE per message.
        let mut queue: Vec<(u16, Vec<VoteMessage>)> = Vec::new();
        for (node, votes) in votes_to {
            for chunk in votes.chunks(VOTES_PER_MESSAGE) {
                queue.push((node, chunk.to_vec()));
            }
        }
        while !queue.is_empty() {
            if self.view_changed(view) {
                return;
            }
            // One message per node per round.
            let mut nodes: Vec<u16> = queue.iter().map(|(n, _)| *n).collect();
            nodes.sort_unstable();
            nodes.dedup();
            let answers = self
                .round(
                    co,
                    RequestType::RecoveryVote,
                    &nodes,
                    |node, buffer| {
                        let votes = &queue.iter().find(|(n, _)| *n == node).expect("queued").1;
                        encode_votes(votes, buffer)
                    },
                    yes,
                )
                .await;
            let mut sent = false;
            for (node, ok) in answers {
                if ok {
                    let i = queue.iter().position(|(n, _)| *n == node).expect("queued");
                    queue.remove(i);
                    sent = true;
                }
            }
            if !sent {
                co.sleep_until(co.now_ns() + BUSY_POLL_NS).await;
            }
        }
    }

    /// What the replicas of partition `p` (this primary and the backups that reported)
    /// hold of each transaction older than `view`: the partition's vote, a record with
    /// its writes, and who holds one.
    fn merge(&self, view: ViewId, p: u32) -> BTreeMap<TxId, Merged> {
        let me = self.local.node();
        let participant = self.participant.borrow();
        let mut merged: BTreeMap<TxId, Merged> = BTreeMap::new();
        let gather = participant.recovery.gather.as_ref().expect("gathering");
        let pg = gather
            .partitions
            .iter()
            .find(|pg| pg.partition == p)
            .expect("gathering p");
        let own = participant.held_for(view, p);
        let reported = pg
            .reporters
            .iter()
            .copied()
            .zip(pg.reported.iter().cloned());
        for (from, h) in own.into_iter().map(|h| (me, h)).chain(reported) {
            let m = merged.entry(h.tx).or_insert_with(|| Merged {
                vote: h.vote,
                partitions: Vec::new(),
                record: Vec::new(),
                holders: BTreeSet::new(),
            });
            m.vote = m.vote.merge(h.vote);
            if !h.record.is_empty() {
                m.holders.insert(from);
                // A commit-backup record over a lock record: both carry the versions
                // locked, but a backup's is the one every backup logs.
                if m.record.is_empty() || h.vote == Vote::CommitBackup {
                    m.record = h.record;
                }
            }
            if m.partitions.is_empty() {
                m.partitions = h.partitions;
            }
        }
        for (tx, m) in merged.iter_mut() {
            // Installed here (commit-primary), which `held_for` does not list.
            if let Some(vote) = participant.decided_or_installed(tx) {
                m.vote = m.vote.merge(vote);
            }
        }
        merged
    }

    /// One pass over the transactions this thread coordinates the recovery of: asks for
    /// missing votes, decides, and applies decisions. True if any is left.
    async fn coordinate_recoveries(&self, co: &Co) -> bool {
        let view = self.view();
        if !self.accepting.get() {
            // Nothing to do before the view is committed; the commit wakes the driver
            // (`opened`), so it need not poll fast meanwhile.
            return false;
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
                RequestType::RequestVote,
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
                    // Not ready yet, or a byte no vote has: asked again next round.
                    let Ok(Some(vote)) = decode_vote_answer(b) else {
                        continue;
                    };
                    if let Some(r) = participant.recovery.table.get_mut(tx) {
                        r.votes.insert(*p, vote);
                    }
                }
            }
        }
        for (tx, commit, partitions, votes) in ready {
            let replicas = self.replicas_of(&partitions);
            // The decision, to every replica; final once all acknowledged (each keeps it
            // and votes it until TRUNCATE-RECOVERY).
            let decision = if commit {
                RequestType::CommitRecovery
            } else {
                RequestType::AbortRecovery
            };
            let answers = self
                .round(
                    co,
                    decision,
                    &replicas,
                    |_, buffer| encode_decision(view, &tx, &partitions, buffer),
                    yes,
                )
                .await;
            if self.view_changed(view) || answers.iter().any(|(_, ok)| !ok) {
                return true;
            }
            {
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
            }
            // The client hears it now, before TRUNCATE-RECOVERY: were the view to change
            // during that, the replicas that forgot it could not tell a later round.
            match self.awaiting.borrow_mut().remove(&tx) {
                Some((_, true)) => {
                    self.outcomes.borrow_mut().insert(tx, commit);
                    co.notify_all(&self.decided);
                }
                // Its client heard "outcome unknown": it may end only now.
                Some((_, false)) => self.truncation.borrow_mut().finish(tx.counter),
                // This thread's own commit, cut off by the view change, whose coroutine
                // has not resumed from its failed call yet: a round with no remote step
                // (a view of one member) decides it within the instant of the change.
                // The decision waits for it: the replicas forget it at
                // TRUNCATE-RECOVERY below, and recovering it again once the coroutine
                // waits would find no record anywhere and abort what committed.
                None if self.is_own_and_committing(&tx) => {
                    self.outcomes.borrow_mut().insert(tx, commit);
                    co.notify_all(&self.decided);
                }
                None => {}
            }
            // A replica that misses this keeps the decision and reports it in the next
            // view, whose round decides the same and truncates it then.
            let _ = self
                .round(
                    co,
                    RequestType::TruncateRecovery,
                    &replicas,
                    |_, buffer| encode_tx_in_view(view, u32::MAX, &tx, buffer),
                    yes,
                )
                .await;
            if self.view_changed(view) {
                return true;
            }
        }
        busy
    }

    /// Whether `tx` is a transaction of this coordinator thread (this life) that has not
    /// ended: its coroutine is still in its commit.
    fn is_own_and_committing(&self, tx: &TxId) -> bool {
        tx.node == self.local.node()
            && tx.thread == self.local.thread()
            && tx.incarnation == self.incarnation
            && !self.truncation.borrow().ended(tx.counter)
    }

    /// Every replica of `partitions` in the current view, ascending.
    fn replicas_of(&self, partitions: &[u32]) -> Vec<u16> {
        let placement = self.placement.borrow();
        let mut replicas: Vec<u16> = partitions
            .iter()
            .flat_map(|&p| {
                let primary = placement.primary(p);
                std::iter::once(primary).chain(placement.backups(p).iter().copied())
            })
            .filter(|&n| n != NO_PRIMARY)
            .collect();
        replicas.sort_unstable();
        replicas.dedup();
        replicas
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
        {
            let mut participant = self.participant.borrow_mut();
            let mut stats = participant.recovery.stats;
            stats.waited += 1;
            participant.recovery.stats = stats;
        }
        // Decided already, before this coroutine came to wait (see
        // `coordinate_recoveries`): nothing left to recover.
        if let Some(commit) = self.outcomes.borrow_mut().remove(&tx) {
            return Some(commit);
        }
        self.awaiting
            .borrow_mut()
            .insert(tx, (partitions.to_vec(), true));
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
