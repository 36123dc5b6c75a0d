//! Transaction-state recovery (FaRM 5.3; docs/recovery.md): the votes and the messages
//! that primaries, backups and recovery coordinators exchange after a configuration
//! change. The participant side is in `participant::recovery`, the driver that runs the
//! steps in `coordinator::recovery`.

use crate::answer::Answer;
use crate::messages::{DecodeError, ITEMS_MAX, Reader, TxId, Writer};
use ferrotx_wire::ViewId;

/// What a replica holds of a transaction, or a partition's vote on it (FaRM 5.3 step 6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum Vote {
    /// No record, and no truncation mark covers it.
    Unknown = 0,
    /// No record, and a truncation mark covers it: it committed, or aborted.
    Truncated = 1,
    /// ABORT-RECOVERY seen (the decision, kept until TRUNCATE-RECOVERY).
    Abort = 2,
    /// A LOCK record (at a primary), or a record replicated by recovery.
    Lock = 3,
    /// A COMMIT-BACKUP record.
    CommitBackup = 4,
    /// Installed by COMMIT-PRIMARY, or COMMIT-RECOVERY seen.
    CommitPrimary = 5,
}

/// Every vote kind, for counters.
pub const VOTES: [Vote; 6] = [
    Vote::Unknown,
    Vote::Truncated,
    Vote::Abort,
    Vote::Lock,
    Vote::CommitBackup,
    Vote::CommitPrimary,
];

impl Vote {
    /// The vote of a byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        VOTES.get(usize::from(b)).copied()
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Vote::Unknown => "unknown",
            Vote::Truncated => "truncated",
            Vote::Abort => "abort",
            Vote::Lock => "lock",
            Vote::CommitBackup => "commit_backup",
            Vote::CommitPrimary => "commit_primary",
        }
    }

    /// The vote of a partition from what its replicas hold: commit-primary if any saw
    /// the commit; else abort if any saw ABORT-RECOVERY; else commit-backup, else lock;
    /// with no record anywhere, truncated if a mark covers it, else unknown.
    pub fn merge(self, other: Vote) -> Vote {
        use Vote::*;
        match (self, other) {
            (CommitPrimary, _) | (_, CommitPrimary) => CommitPrimary,
            (Abort, _) | (_, Abort) => Abort,
            (a, b) => a.max(b),
        }
    }
}

/// The decision on a transaction's votes (FaRM 5.3 step 7), once every partition voted:
/// commit on a commit-primary vote; else commit if one is commit-backup and every one is
/// commit-backup, lock or truncated; else abort. `None` while votes are missing, unless
/// one is commit-primary.
pub fn decide(votes: impl IntoIterator<Item = Option<Vote>>) -> Option<bool> {
    let (mut missing, mut commit_backup, mut other) = (false, false, false);
    for vote in votes {
        match vote {
            None => missing = true,
            Some(Vote::CommitPrimary) => return Some(true),
            Some(Vote::CommitBackup) => commit_backup = true,
            Some(Vote::Lock | Vote::Truncated) => {}
            Some(Vote::Abort | Vote::Unknown) => other = true,
        }
    }
    if missing {
        None
    } else {
        Some(commit_backup && !other)
    }
}

/// The recovery coordinator of `tx` in a view whose members are `members` (node,
/// incarnation), in order: `tx`'s own coordinator thread if that life is a member, else
/// the same thread of a member chosen by hashing `tx` (so every primary picks the same
/// one, and a dead coordinator's transactions spread over the survivors).
pub fn recovery_coordinator(tx: &TxId, members: &[(u16, u64)]) -> u16 {
    if members
        .iter()
        .any(|&(n, i)| n == tx.node && i == tx.incarnation)
    {
        return tx.node;
    }
    if members.is_empty() {
        return tx.node;
    }
    // A fixed mix of the id (FNV-1a over its fields): the same on every node.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in [
        tx.view.0,
        u64::from(tx.node),
        u64::from(tx.thread),
        tx.incarnation,
        tx.counter,
    ] {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    members[(h % members.len() as u64) as usize].0
}

/// A record in a NEED-RECOVERY message: what the backup holds of the transaction, the
/// record's bytes (empty for a decision whose record is gone), and every partition the
/// transaction writes.
#[derive(Clone, Debug)]
pub struct Held<'a> {
    /// Its kind.
    pub vote: Vote,
    /// The transaction.
    pub tx: TxId,
    /// The record as logged (a LOCK / COMMIT-BACKUP record), if the backup still has it.
    pub record: &'a [u8],
    /// Every partition the transaction writes.
    pub partitions: Vec<u32>,
}

/// Encodes NEED-RECOVERY from backup node `from` in `view`: for each partition it backs
/// up whose primary is the destination, records it holds. A backup's records may take
/// several messages; `last` marks its final one.
pub fn encode_need_recovery(
    view: ViewId,
    from: u16,
    last: bool,
    parts: &[(u32, Vec<Held<'_>>)],
    out: &mut Vec<u8>,
) {
    let mut w = Writer(out);
    w.view(view)
        .u16(from)
        .u8(u8::from(last))
        .u16(parts.len() as u16);
    for (partition, held) in parts {
        w.u32(*partition).u16(held.len() as u16);
        for h in held {
            w.u8(h.vote as u8)
                .tx(&h.tx)
                .bytes(h.record)
                .u16(h.partitions.len() as u16);
            for &p in &h.partitions {
                w.u32(p);
            }
        }
    }
}

/// The bytes [`encode_need_recovery`] takes for `held` beyond its partition header.
pub fn held_encoded_len(held: &Held<'_>) -> usize {
    1 + 28 + 4 + held.record.len() + 2 + 4 * held.partitions.len()
}

/// What a NEED-RECOVERY message carries: view, sender, whether it is the sender's last,
/// and records per partition.
pub type NeedRecovery<'a> = (ViewId, u16, bool, Vec<(u32, Vec<Held<'a>>)>);

/// Decodes NEED-RECOVERY.
pub fn decode_need_recovery(bytes: &[u8]) -> Result<NeedRecovery<'_>, DecodeError> {
    let mut r = Reader(bytes);
    let view = r.view()?;
    let from = r.u16()?;
    let last = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::Invalid),
    };
    let parts = usize::from(r.u16()?);
    if parts > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    let mut out = Vec::with_capacity(parts);
    for _ in 0..parts {
        let partition = r.u32()?;
        let n = usize::from(r.u16()?);
        if n > ITEMS_MAX {
            return Err(DecodeError::Invalid);
        }
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            let vote = Vote::from_u8(r.u8()?).ok_or(DecodeError::Invalid)?;
            let tx = r.tx()?;
            let record = r.bytes()?;
            let k = usize::from(r.u16()?);
            if k > ITEMS_MAX {
                return Err(DecodeError::Invalid);
            }
            let partitions = (0..k).map(|_| r.u32()).collect::<Result<_, _>>()?;
            held.push(Held {
                vote,
                tx,
                record,
                partitions,
            });
        }
        out.push((partition, held));
    }
    r.finish()?;
    Ok((view, from, last, out))
}

/// Encodes REPLICATE-TX-STATE: view, partition, and the record.
pub fn encode_replicate(view: ViewId, partition: u32, record: &[u8], out: &mut Vec<u8>) {
    Writer(out).view(view).u32(partition).bytes(record);
}

/// Decodes REPLICATE-TX-STATE.
pub fn decode_replicate(bytes: &[u8]) -> Result<(ViewId, u32, &[u8]), DecodeError> {
    let mut r = Reader(bytes);
    let view = r.view()?;
    let partition = r.u32()?;
    let record = r.bytes()?;
    r.finish()?;
    Ok((view, partition, record))
}

/// A partition's vote on a transaction (RECOVERY-VOTE, or the answer to REQUEST-VOTE).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VoteMessage {
    /// The view the vote is for.
    pub view: ViewId,
    /// The partition voting.
    pub partition: u32,
    /// The transaction.
    pub tx: TxId,
    /// Every partition it writes (empty when the voter has no record of it).
    pub partitions: Vec<u32>,
    /// The vote.
    pub vote: Vote,
}

/// Encodes RECOVERY-VOTE: a list of votes.
pub fn encode_votes(votes: &[VoteMessage], out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u16(votes.len() as u16);
    for m in votes {
        w.view(m.view)
            .u32(m.partition)
            .tx(&m.tx)
            .u8(m.vote as u8)
            .u16(m.partitions.len() as u16);
        for &p in &m.partitions {
            w.u32(p);
        }
    }
}

/// Decodes RECOVERY-VOTE.
pub fn decode_votes(bytes: &[u8]) -> Result<Vec<VoteMessage>, DecodeError> {
    let mut r = Reader(bytes);
    let n = usize::from(r.u16()?);
    if n > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    let mut votes = Vec::with_capacity(n);
    for _ in 0..n {
        let view = r.view()?;
        let partition = r.u32()?;
        let tx = r.tx()?;
        let vote = Vote::from_u8(r.u8()?).ok_or(DecodeError::Invalid)?;
        let k = usize::from(r.u16()?);
        if k > ITEMS_MAX {
            return Err(DecodeError::Invalid);
        }
        let partitions = (0..k).map(|_| r.u32()).collect::<Result<_, _>>()?;
        votes.push(VoteMessage {
            view,
            partition,
            tx,
            partitions,
            vote,
        });
    }
    r.finish()?;
    Ok(votes)
}

/// Encodes REQUEST-VOTE: a view and (partition, transaction) pairs; the answer is one
/// byte per pair ([`encode_vote_answer`]).
pub fn encode_request_votes(view: ViewId, asks: &[(u32, TxId)], out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.view(view).u16(asks.len() as u16);
    for (p, tx) in asks {
        w.u32(*p).tx(tx);
    }
}

/// Appends one pair's byte of REQUEST-VOTE's answer: the vote, or [`Answer::NotReady`]
/// (`None`) while the primary has not gathered the partition's records.
pub fn encode_vote_answer(vote: Option<Vote>, out: &mut Vec<u8>) {
    match vote {
        Some(vote) => out.push(vote as u8),
        None => Answer::NotReady.encode(out),
    }
}

/// Decodes one pair's byte of REQUEST-VOTE's answer: `None` for not ready.
pub fn decode_vote_answer(byte: u8) -> Result<Option<Vote>, DecodeError> {
    if byte == Answer::NotReady as u8 {
        return Ok(None);
    }
    Vote::from_u8(byte).map(Some).ok_or(DecodeError::Invalid)
}

/// Decodes REQUEST-VOTE.
pub fn decode_request_votes(bytes: &[u8]) -> Result<(ViewId, Vec<(u32, TxId)>), DecodeError> {
    let mut r = Reader(bytes);
    let view = r.view()?;
    let n = usize::from(r.u16()?);
    if n > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    let asks = (0..n)
        .map(|_| Ok((r.u32()?, r.tx()?)))
        .collect::<Result<_, DecodeError>>()?;
    r.finish()?;
    Ok((view, asks))
}

/// Encodes COMMIT-RECOVERY or ABORT-RECOVERY: the view, the transaction, and every
/// partition it writes (kept with the decision, so that a replica that had no record of
/// it still reports it for the right partitions).
pub fn encode_decision(view: ViewId, tx: &TxId, partitions: &[u32], out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.view(view).tx(tx).u16(partitions.len() as u16);
    for &p in partitions {
        w.u32(p);
    }
}

/// Decodes what [`encode_decision`] wrote.
pub fn decode_decision(bytes: &[u8]) -> Result<(ViewId, TxId, Vec<u32>), DecodeError> {
    let mut r = Reader(bytes);
    let view = r.view()?;
    let tx = r.tx()?;
    let n = usize::from(r.u16()?);
    if n > ITEMS_MAX {
        return Err(DecodeError::Invalid);
    }
    let partitions = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
    r.finish()?;
    Ok((view, tx, partitions))
}

/// Encodes REQUEST-VOTE, COMMIT-RECOVERY, ABORT-RECOVERY and TRUNCATE-RECOVERY: a view,
/// a partition (`u32::MAX` where none applies) and a transaction.
pub fn encode_tx_in_view(view: ViewId, partition: u32, tx: &TxId, out: &mut Vec<u8>) {
    Writer(out).view(view).u32(partition).tx(tx);
}

/// Decodes what [`encode_tx_in_view`] wrote.
pub fn decode_tx_in_view(bytes: &[u8]) -> Result<(ViewId, u32, TxId), DecodeError> {
    let mut r = Reader(bytes);
    let view = r.view()?;
    let partition = r.u32()?;
    let tx = r.tx()?;
    r.finish()?;
    Ok((view, partition, tx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::strategies;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn tx(counter: u64) -> TxId {
        TxId {
            view: ViewId(3),
            node: 1,
            thread: 0,
            incarnation: 7,
            counter,
        }
    }

    #[test]
    fn the_decision_follows_farm() {
        use Vote::*;
        assert_eq!(decide([Some(CommitPrimary), None]), Some(true));
        assert_eq!(decide([Some(CommitBackup), None]), None);
        assert_eq!(decide([Some(CommitBackup), Some(Lock)]), Some(true));
        assert_eq!(decide([Some(CommitBackup), Some(Truncated)]), Some(true));
        assert_eq!(decide([Some(Lock), Some(Lock)]), Some(false));
        assert_eq!(decide([Some(Truncated), Some(Truncated)]), Some(false));
        assert_eq!(decide([Some(CommitBackup), Some(Unknown)]), Some(false));
        assert_eq!(decide([Some(CommitBackup), Some(Abort)]), Some(false));
    }

    #[test]
    fn a_partition_votes_the_strongest_record_and_abort_beats_records() {
        use Vote::*;
        assert_eq!(Lock.merge(CommitBackup), CommitBackup);
        assert_eq!(Unknown.merge(Truncated), Truncated);
        assert_eq!(CommitBackup.merge(Abort), Abort);
        assert_eq!(Abort.merge(CommitPrimary), CommitPrimary);
    }

    #[test]
    fn messages_round_trip_and_refuse_garbage() {
        let mut out = Vec::new();
        let record = [1u8, 2, 3];
        let held = vec![Held {
            vote: Vote::CommitBackup,
            tx: tx(5),
            record: &record,
            partitions: vec![9, 11],
        }];
        encode_need_recovery(ViewId(4), 2, true, &[(9, held)], &mut out);
        let (view, from, last, parts) = decode_need_recovery(&out).unwrap();
        assert_eq!((view, from, last, parts.len()), (ViewId(4), 2, true, 1));
        assert_eq!(parts[0].1[0].partitions, [9, 11]);
        assert_eq!(parts[0].0, 9);
        assert_eq!(parts[0].1[0].tx, tx(5));
        assert_eq!(parts[0].1[0].record, &record);
        assert!(decode_need_recovery(&out[..out.len() - 1]).is_err());

        let m = VoteMessage {
            view: ViewId(4),
            partition: 2,
            tx: tx(8),
            partitions: vec![2, 5],
            vote: Vote::Lock,
        };
        out.clear();
        encode_votes(std::slice::from_ref(&m), &mut out);
        assert_eq!(decode_votes(&out).unwrap(), vec![m]);
        out.push(0);
        assert!(decode_votes(&out).is_err());

        out.clear();
        encode_decision(ViewId(4), &tx(2), &[1, 3], &mut out);
        assert_eq!(
            decode_decision(&out).unwrap(),
            (ViewId(4), tx(2), vec![1, 3])
        );
        out.clear();
        encode_request_votes(ViewId(4), &[(3, tx(1))], &mut out);
        assert_eq!(
            decode_request_votes(&out).unwrap(),
            (ViewId(4), vec![(3, tx(1))])
        );
    }

    #[test]
    fn a_live_coordinator_recovers_its_own_and_a_dead_ones_spread() {
        let members = [(0, 1), (2, 1)];
        let own = TxId {
            node: 2,
            incarnation: 1,
            ..tx(1)
        };
        assert_eq!(recovery_coordinator(&own, &members), 2);
        let mut seen = std::collections::BTreeSet::new();
        for counter in 0..64 {
            let dead = TxId {
                node: 1,
                incarnation: 1,
                ..tx(counter)
            };
            let r = recovery_coordinator(&dead, &members);
            assert!(r == 0 || r == 2);
            seen.insert(r);
        }
        assert_eq!(seen.len(), 2);
    }

    fn vote() -> impl Strategy<Value = Vote> {
        (0..VOTES.len()).prop_map(|i| VOTES[i])
    }

    proptest! {
        #[test]
        fn every_message_round_trips(
            (view, from, last, partition) in (any::<u64>(), any::<u16>(), any::<bool>(), any::<u32>()),
            held in vec((vote(), strategies::tx(), strategies::bytes(), vec(any::<u32>(), 0..4)), 0..4),
            votes in vec((any::<u64>(), any::<u32>(), strategies::tx(), vec(any::<u32>(), 0..4), vote()), 0..4),
            asks in vec((any::<u32>(), strategies::tx()), 0..4),
            tx in strategies::tx(),
            partitions in vec(any::<u32>(), 0..4),
            answer in proptest::option::of(vote()),
        ) {
            let view = ViewId(view);
            let mut out = Vec::new();
            let sent: Vec<Held<'_>> = held
                .iter()
                .map(|(vote, tx, record, partitions)| Held {
                    vote: *vote,
                    tx: *tx,
                    record,
                    partitions: partitions.clone(),
                })
                .collect();
            let expected_len: usize = sent.iter().map(held_encoded_len).sum();
            encode_need_recovery(view, from, last, &[(partition, sent.clone())], &mut out);
            prop_assert_eq!(out.len(), 8 + 2 + 1 + 2 + 4 + 2 + expected_len);
            let (v, f, l, parts) = decode_need_recovery(&out).unwrap();
            prop_assert_eq!((v, f, l, parts.len()), (view, from, last, 1));
            prop_assert_eq!(parts[0].0, partition);
            prop_assert_eq!(parts[0].1.len(), sent.len());
            for (got, want) in parts[0].1.iter().zip(&sent) {
                prop_assert_eq!(
                    (got.vote, got.tx, got.record, &got.partitions),
                    (want.vote, want.tx, want.record, &want.partitions)
                );
            }

            out.clear();
            encode_replicate(view, partition, &partitions_bytes(&partitions), &mut out);
            prop_assert_eq!(
                decode_replicate(&out),
                Ok((view, partition, &partitions_bytes(&partitions)[..]))
            );

            let messages: Vec<VoteMessage> = votes
                .into_iter()
                .map(|(view, partition, tx, partitions, vote)| VoteMessage {
                    view: ViewId(view),
                    partition,
                    tx,
                    partitions,
                    vote,
                })
                .collect();
            out.clear();
            encode_votes(&messages, &mut out);
            prop_assert_eq!(decode_votes(&out), Ok(messages));

            out.clear();
            encode_request_votes(view, &asks, &mut out);
            prop_assert_eq!(decode_request_votes(&out), Ok((view, asks)));

            out.clear();
            encode_decision(view, &tx, &partitions, &mut out);
            prop_assert_eq!(decode_decision(&out), Ok((view, tx, partitions)));

            out.clear();
            encode_tx_in_view(view, partition, &tx, &mut out);
            prop_assert_eq!(decode_tx_in_view(&out), Ok((view, partition, tx)));

            out.clear();
            encode_vote_answer(answer, &mut out);
            prop_assert_eq!(out.len(), 1);
            prop_assert_eq!(decode_vote_answer(out[0]), Ok(answer));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..200)) {
            let _ = decode_need_recovery(&bytes);
            let _ = decode_replicate(&bytes);
            let _ = decode_votes(&bytes);
            let _ = decode_request_votes(&bytes);
            let _ = decode_decision(&bytes);
            let _ = decode_tx_in_view(&bytes);
            for &b in &bytes {
                let _ = decode_vote_answer(b);
            }
        }
    }

    /// Some record bytes.
    fn partitions_bytes(partitions: &[u32]) -> Vec<u8> {
        partitions.iter().flat_map(|p| p.to_le_bytes()).collect()
    }
}
