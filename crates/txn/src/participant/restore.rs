//! Restart from disk (issue 32): a worker's log, replayed into the copies of a node's new
//! life and into its participant, so that the new life holds what the ended one held.
//!
//! Sans-IO: the node reads the records from its data directory (the ended life's logs,
//! each worker's in order) and hands them here. Replay runs in two steps over every
//! worker's records:
//!
//! 1. [`replay`]: each record is classified by what the log itself says of its
//!    transaction. A COMMIT-BACKUP record is committed once a truncation mark of its
//!    coordinator covers it (a mark says every transaction up to it ended, and one that
//!    aborted after logging here logged an ABORT) or recovery's decision here says so
//!    ([`crate::durable::RECORD_DECIDED`]); a primary's LOCK record once its marker
//!    ([`crate::durable::RECORD_INSTALLED`], durable before the primary installs or
//!    answers) is logged or a decision commits it, and aborted if a mark covers it
//!    without either (its coordinator ended it without this primary installing: an
//!    ABORT that never arrived); a primary's COMMIT-PRIMARY record (`flush` mode)
//!    always. Committed writes are
//!    applied to the copies at their versions (a copy keeps the highest version it is
//!    given, so the order of records and of workers does not matter). Records that are
//!    neither committed nor aborted are in doubt, kept as [`Replay`].
//! 2. Once every worker's committed writes are applied: [`settle_locks`] commits the
//!    locks in doubt a later lock shows installed, [`Replay::keep_primaries`] keeps those
//!    of partitions this life is primary of (not locked in the store: the partitions are
//!    blocked until recovery decides them), then [`Participant::restore`] gives the
//!    participant its records in doubt, truncation marks, installs and decisions, as it
//!    held them. The first view's transaction-state
//!    recovery decides every transaction in doubt, as after any failure (FaRM 5.3).

use foldhash::fast::FixedState;
use hashbrown::{HashMap, HashSet};

use ferrotx_store::TableId;
use ferrotx_wire::ViewId;

use crate::checkpoint::decode_checkpoint_end;
use crate::durable::{
    RECORD_ABORT, RECORD_APPLIED, RECORD_CHECKPOINT, RECORD_CHECKPOINT_PAGE, RECORD_COMMIT_BACKUP,
    RECORD_COMMIT_PRIMARY, RECORD_DECIDED, RECORD_FILL, RECORD_FILL_BEGIN, RECORD_INSTALLED,
    RECORD_LOAD, RECORD_LOCK,
};
use crate::messages::{CoordinatorId, RecordView, TxId, decode_tx, record_without_writes_of};
use crate::participant::{NodeStore, Participant, Role};
use crate::recovery::decode_decision;
use crate::refill::decode_fetch_response;

/// Why a log could not be replayed: a record whose checksum held but whose bytes are
/// not what its kind says (another version's log, or a bug), or a lock in doubt that its
/// object cannot take again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record {index} of the log (kind {kind}): {what}")]
pub struct ReplayError {
    /// The record's position among those replayed (0 first).
    pub index: usize,
    /// Its kind.
    pub kind: u8,
    /// What is wrong.
    pub what: String,
}

/// What replay did, for the node's log and status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records read.
    pub records: u64,
    /// Committed transactions applied to copies, and their writes applied.
    pub committed: u64,
    pub writes: u64,
    /// Transactions found aborted (their records skipped).
    pub aborted: u64,
    /// Records in doubt given to recovery: primaries' locks and backups' records.
    pub locks_in_doubt: u64,
    pub records_in_doubt: u64,
    /// Writes of committed records to partitions this life does not hold (skipped).
    pub writes_elsewhere: u64,
    /// Writes to a copy that a later fill replaced (skipped), and objects fills copied.
    pub writes_superseded: u64,
    pub fill_objects: u64,
    /// Objects a checkpoint's pages gave.
    pub checkpoint_objects: u64,
    /// Locks in doubt that a later lock of their objects showed installed.
    pub locks_settled: u64,
}

impl ReplayStats {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &ReplayStats) {
        self.records += other.records;
        self.committed += other.committed;
        self.writes += other.writes;
        self.aborted += other.aborted;
        self.locks_in_doubt += other.locks_in_doubt;
        self.records_in_doubt += other.records_in_doubt;
        self.writes_elsewhere += other.writes_elsewhere;
        self.writes_superseded += other.writes_superseded;
        self.fill_objects += other.fill_objects;
        self.checkpoint_objects += other.checkpoint_objects;
        self.locks_settled += other.locks_settled;
    }
}

/// One worker's log, replayed: what its participant held in doubt when the life ended.
#[derive(Default, Debug)]
pub struct Replay {
    /// Primaries' LOCK records in doubt, by transaction.
    locked: Vec<(TxId, Vec<u8>)>,
    /// Backups' COMMIT-BACKUP records in doubt, by coordinator and counter.
    records: Vec<(CoordinatorId, u64, Vec<u8>)>,
    /// The highest truncation mark of each coordinator.
    marks: HashMap<CoordinatorId, u64, FixedState>,
    /// Transactions installed here above their coordinator's mark (commit-primary votes).
    installed: Vec<(CoordinatorId, u64)>,
    /// Recovery's decisions logged here.
    decided: Vec<(TxId, bool, Vec<u32>)>,
    /// What replay did.
    pub stats: ReplayStats,
}

fn coordinator_of(tx: &TxId) -> CoordinatorId {
    (tx.node, tx.thread, tx.incarnation)
}

/// The view each partition's last fill began in, over every worker's log of a node
/// ([`fill_views`]): writes to the partition from transactions of older views are the
/// copy's before that fill, which the fill's pages supersede.
pub type FillViews = HashMap<u32, ViewId, FixedState>;

/// Adds the fills begun in `records` (one worker's log) to `views`. Every worker's log
/// goes through this before any is replayed.
pub fn fill_views<'a>(records: impl Iterator<Item = (u8, &'a [u8])>, views: &mut FillViews) {
    for (kind, payload) in records {
        if kind == RECORD_FILL_BEGIN
            && let Some((partition, view)) = fill_header(payload)
        {
            let at = views.entry(partition).or_insert(view);
            *at = (*at).max(view);
        }
    }
}

/// The partition and view a fill record starts with.
fn fill_header(payload: &[u8]) -> Option<(u32, ViewId)> {
    let partition = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let view = u64::from_le_bytes(payload.get(4..12)?.try_into().ok()?);
    Some((partition, ViewId(view)))
}

/// Applies a loaded object ([`RECORD_LOAD`]) to the copy of its partition in `store`,
/// unless a fill replaced that copy since.
fn apply_load(store: &NodeStore, payload: &[u8], fills: &FillViews) -> Result<u64, String> {
    let short = || "a loaded object too short".to_string();
    let partition = u32::from_le_bytes(payload.get(..4).ok_or_else(short)?.try_into().expect("4"));
    let table = TableId(u16::from_le_bytes(
        payload.get(4..6).ok_or_else(short)?.try_into().expect("2"),
    ));
    let len = usize::from(u16::from_le_bytes(
        payload.get(6..8).ok_or_else(short)?.try_into().expect("2"),
    ));
    let key = payload.get(8..8 + len).ok_or_else(short)?;
    let value = &payload[8 + len..];
    let key = ferrotx_store::Key::from_bytes(key).map_err(|e| e.to_string())?;
    if fills.contains_key(&partition) {
        return Ok(0);
    }
    let Some(copy) = store.get_any(partition) else {
        return Ok(0);
    };
    copy.load(table, key, value)
        .map(u64::from)
        .map_err(|e| e.to_string())
}

/// Applies a fill page ([`RECORD_FILL`]) to the copy of its partition in `store`.
fn apply_fill(store: &NodeStore, payload: &[u8], fills: &FillViews) -> Result<u64, String> {
    let (partition, view) = fill_header(payload).ok_or("a fill page too short")?;
    if fills.get(&partition).is_some_and(|&last| view < last) {
        // A page of an earlier fill, superseded.
        return Ok(0);
    }
    apply_page(store, partition, &payload[12..])
}

/// Applies a checkpoint's page ([`RECORD_CHECKPOINT_PAGE`]: the round, then as a fill's
/// page) to the copy of its partition in `store`, unless a later fill began the copy
/// again (a round is abandoned if a fill began while it ran, so a fill in the records
/// replayed began after it).
fn apply_checkpoint_page(
    store: &NodeStore,
    payload: &[u8],
    fills: &FillViews,
) -> Result<u64, String> {
    let partition = payload
        .get(8..12)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
        .ok_or("a checkpoint page too short")?;
    if fills.contains_key(&partition) {
        return Ok(0);
    }
    apply_page(store, partition, &payload[12..])
}

/// Applies a page ([u16 table][u8 floors?][FETCH answer]) to `partition`'s copy.
fn apply_page(store: &NodeStore, partition: u32, payload: &[u8]) -> Result<u64, String> {
    let (table, floors) = match payload.get(..3) {
        Some(&[a, b, what @ (0 | 1)]) => (TableId(u16::from_le_bytes([a, b])), what == 1),
        _ => return Err("a page too short, or of no kind".into()),
    };
    let Some(copy) = store.get_any(partition) else {
        return Ok(0);
    };
    let (_, page) = decode_fetch_response(&payload[3..]).map_err(|e| e.to_string())?;
    let page = page.ok_or("a page that is not a page")?;
    if floors {
        let floors = page.floors().map_err(|e| e.to_string())?;
        copy.raise_floors_each(table, &floors)
            .map_err(|e| e.to_string())?;
        return Ok(0);
    }
    let mut applied = 0;
    page.visit(
        |o| {
            if o.version > 0 && copy.apply(table, &o.key, o.version, o.value).is_ok() {
                applied += 1;
            }
        },
        |_| {},
    )
    .map_err(|e| e.to_string())?;
    Ok(applied)
}

/// Replays one worker's `records` (kind and payload, in log order) into `store`'s copies
/// (step 1 of the module): applies the committed writes, returns what is in doubt.
pub fn replay<'a>(
    store: &NodeStore,
    records: impl Iterator<Item = (u8, &'a [u8])> + Clone,
    fills: &FillViews,
) -> Result<Replay, ReplayError> {
    let bad = |index: usize, kind: u8, what: &str| ReplayError {
        index,
        kind,
        what: what.to_owned(),
    };
    // First pass: what the log says of each transaction's end.
    let mut replay = Replay::default();
    let mut aborted: HashSet<TxId, FixedState> = HashSet::with_hasher(FixedState::with_seed(0));
    let mut installed: HashSet<TxId, FixedState> = HashSet::with_hasher(FixedState::with_seed(0));
    let mut decided: HashMap<TxId, bool, FixedState> =
        HashMap::with_hasher(FixedState::with_seed(0));
    for (index, (kind, payload)) in records.clone().enumerate() {
        replay.stats.records += 1;
        match kind {
            RECORD_LOAD => {}
            RECORD_FILL_BEGIN | RECORD_FILL => {
                if fill_header(payload).is_none() || (kind == RECORD_FILL && payload.len() < 15) {
                    return Err(bad(index, kind, "a fill record too short"));
                }
            }
            RECORD_CHECKPOINT_PAGE => {
                if payload.len() < 15 {
                    return Err(bad(index, kind, "a checkpoint page too short"));
                }
            }
            RECORD_CHECKPOINT => {
                let (_, _, marks) = decode_checkpoint_end(payload)
                    .ok_or_else(|| bad(index, kind, "not a checkpoint's record"))?;
                for (coordinator, mark) in marks {
                    let at = replay.marks.entry(coordinator).or_default();
                    *at = (*at).max(mark);
                }
            }
            RECORD_COMMIT_BACKUP | RECORD_LOCK | RECORD_COMMIT_PRIMARY | RECORD_APPLIED => {
                let record = RecordView::parse(payload)
                    .map_err(|e| bad(index, kind, &format!("not a record: {e}")))?;
                let mark = replay.marks.entry(coordinator_of(&record.tx)).or_default();
                *mark = (*mark).max(record.truncate_up_to);
            }
            RECORD_ABORT => {
                let tx = decode_tx(payload)
                    .map_err(|e| bad(index, kind, &format!("not a transaction id: {e}")))?;
                aborted.insert(tx);
            }
            RECORD_INSTALLED => {
                let tx = decode_tx(payload)
                    .map_err(|e| bad(index, kind, &format!("not a transaction id: {e}")))?;
                installed.insert(tx);
            }
            RECORD_DECIDED => {
                let (&commit, rest) = payload
                    .split_first()
                    .ok_or_else(|| bad(index, kind, "empty"))?;
                let (_, tx, partitions) = decode_decision(rest)
                    .map_err(|e| bad(index, kind, &format!("not a decision: {e}")))?;
                decided.insert(tx, commit == 1);
                replay.decided.push((tx, commit == 1, partitions));
            }
            _ => return Err(bad(index, kind, "unknown record kind")),
        }
    }
    // Second pass: apply what committed, keep what is in doubt.
    let mut applied: HashSet<TxId, FixedState> = HashSet::with_hasher(FixedState::with_seed(0));
    for (index, (kind, payload)) in records.enumerate() {
        if kind == RECORD_LOAD {
            replay.stats.writes +=
                apply_load(store, payload, fills).map_err(|what| bad(index, kind, &what))?;
            continue;
        }
        if kind == RECORD_FILL {
            replay.stats.fill_objects +=
                apply_fill(store, payload, fills).map_err(|what| bad(index, kind, &what))?;
            continue;
        }
        if kind == RECORD_CHECKPOINT_PAGE {
            replay.stats.checkpoint_objects += apply_checkpoint_page(store, payload, fills)
                .map_err(|what| bad(index, kind, &what))?;
            continue;
        }
        if !matches!(
            kind,
            RECORD_COMMIT_BACKUP | RECORD_LOCK | RECORD_COMMIT_PRIMARY | RECORD_APPLIED
        ) {
            continue;
        }
        let record = RecordView::parse(payload).expect("parsed in the first pass");
        let tx = record.tx;
        let coordinator = coordinator_of(&tx);
        let marked = replay.marks.get(&coordinator).copied().unwrap_or(0) >= tx.counter;
        let decision = decided.get(&tx).copied();
        if aborted.contains(&tx) || decision == Some(false) {
            replay.stats.aborted += 1;
            continue;
        }
        let committed = match kind {
            // A primary installs only once its INSTALLED marker is durable, and answers
            // COMMIT-PRIMARY after that: its lock committed here only with the marker (or
            // recovery's decision). Its coordinator's mark alone says the transaction
            // ended, not how: a coordinator that aborted and whose ABORT never reached
            // this primary (a view changed) ends it all the same, leaving recovery to
            // release the lock (`power` seed 431 of list-append: such a lock, replayed as
            // committed, brought back an aborted append).
            RECORD_LOCK => {
                let committed = installed.contains(&tx) || decision == Some(true);
                if !committed && marked {
                    replay.stats.aborted += 1;
                    continue;
                }
                committed
            }
            _ => {
                kind == RECORD_COMMIT_PRIMARY
                    || kind == RECORD_APPLIED
                    || marked
                    || decision == Some(true)
            }
        };
        if committed {
            for write in record.writes() {
                let Some(version) = write.version.checked_add(1) else {
                    continue;
                };
                if fills
                    .get(&write.partition)
                    .is_some_and(|&fill| tx.view < fill)
                {
                    // Written to the copy a later fill replaced.
                    replay.stats.writes_superseded += 1;
                    continue;
                }
                match store.get_any(write.partition) {
                    Some(partition) => {
                        let _ = partition.apply(write.table, &write.key, version, write.value);
                        replay.stats.writes += 1;
                    }
                    None => replay.stats.writes_elsewhere += 1,
                }
            }
            if applied.insert(tx) {
                replay.stats.committed += 1;
            }
            if matches!(kind, RECORD_LOCK | RECORD_COMMIT_PRIMARY) && !marked {
                // A commit-primary vote until a mark covers it.
                replay.installed.push((coordinator, tx.counter));
            }
        } else {
            // In doubt, but only for the copies this node holds still: writes to a copy
            // a later fill replaced are the old copy's (its lock and record went with
            // it, `Participant::set_store`).
            let superseded = |p: u32| fills.get(&p).is_some_and(|&fill| tx.view < fill);
            let bytes = if record.writes().any(|w| superseded(w.partition)) {
                match record_without_writes_of(payload, superseded) {
                    Some(kept) => kept,
                    None => continue,
                }
            } else {
                payload.to_vec()
            };
            if kind == RECORD_LOCK {
                replay.locked.push((tx, bytes));
                replay.stats.locks_in_doubt += 1;
            } else {
                replay.records.push((coordinator, tx.counter, bytes));
                replay.stats.records_in_doubt += 1;
            }
        }
    }
    Ok(replay)
}

/// Settles, over every worker's replay of one node (before [`Replay::keep_primaries`]), the
/// primaries' locks in doubt that a later lock shows committed: a LOCK record in doubt
/// at version `v` of an object, and another (in doubt or not) at a higher version of
/// it, mean that the first installed (only an install moves a primary's object past the
/// version it was locked at, and an abort releases its objects only once its record is
/// durable, so no other lock at `v` is in doubt): its INSTALLED record was not yet on
/// disk when the power went. Its writes are applied and it votes commit-primary.
pub fn settle_locks(store: &NodeStore, replays: &mut [Replay]) {
    type Object = (u32, TableId, ferrotx_store::Key);
    let mut highest: HashMap<Object, u64, FixedState> =
        HashMap::with_hasher(FixedState::with_seed(0));
    for replay in replays.iter() {
        for (_, bytes) in &replay.locked {
            let record = RecordView::parse(bytes).expect("parsed by replay");
            for w in record.writes() {
                let at = highest
                    .entry((w.partition, w.table, w.key))
                    .or_insert(w.version);
                *at = (*at).max(w.version);
            }
        }
    }
    for replay in replays.iter_mut() {
        let mut kept = Vec::with_capacity(replay.locked.len());
        for (tx, bytes) in std::mem::take(&mut replay.locked) {
            let record = RecordView::parse(&bytes).expect("parsed by replay");
            let installed = record.writes().any(|w| {
                highest
                    .get(&(w.partition, w.table, w.key))
                    .is_some_and(|&h| h > w.version)
            });
            if !installed {
                kept.push((tx, bytes));
                continue;
            }
            for w in record.writes() {
                if let (Some(version), Some(copy)) =
                    (w.version.checked_add(1), store.get_any(w.partition))
                {
                    let _ = copy.apply(w.table, &w.key, version, w.value);
                    replay.stats.writes += 1;
                }
            }
            replay.installed.push((coordinator_of(&tx), tx.counter));
            replay.stats.locks_in_doubt -= 1;
            replay.stats.committed += 1;
            replay.stats.locks_settled += 1;
        }
        replay.locked = kept;
    }
}

impl Replay {
    /// Keeps, of this worker's LOCK records in doubt, the writes to partitions `store`
    /// holds as primary (step 2 of the module; a record left with none is dropped: the
    /// lock went with the copy). Their objects are not locked in the store: every
    /// primary of a restarted life is blocked until the first view's recovery decided
    /// what was in doubt, and a write recovery applies meanwhile (a later transaction of
    /// the same object, committed at the backups) must not be skipped for an older lock.
    /// A commit then applies the record's writes at their versions
    /// ([`Participant::restore`]).
    pub fn keep_primaries(&mut self, store: &NodeStore) {
        let primary_here = |p: u32| store.get(p, Role::Primary).is_some();
        let mut kept = Vec::with_capacity(self.locked.len());
        for (tx, bytes) in std::mem::take(&mut self.locked) {
            let record = RecordView::parse(&bytes).expect("parsed by replay");
            if record.writes().all(|w| primary_here(w.partition)) {
                kept.push((tx, bytes));
            } else if let Some(bytes) = record_without_writes_of(&bytes, |p| !primary_here(p)) {
                kept.push((tx, bytes));
            } else {
                self.stats.locks_in_doubt -= 1;
            }
        }
        self.locked = kept;
    }
}

impl Participant {
    /// Gives this participant what its worker's log held in doubt (step 2 of the
    /// module), before the worker serves anything.
    pub fn restore(&mut self, replay: Replay) {
        for (coordinator, mark) in &replay.marks {
            let log = self.logs.entry(*coordinator).or_default();
            log.truncated_up_to = log.truncated_up_to.max(*mark);
        }
        for (coordinator, counter, bytes) in replay.records {
            let log = self.logs.entry(coordinator).or_default();
            if counter > log.truncated_up_to {
                log.records.insert(counter, bytes);
            }
        }
        for (coordinator, counter) in replay.installed {
            let log = self.logs.entry(coordinator).or_default();
            if counter > log.truncated_up_to && !log.installed.contains(&counter) {
                log.installed.push_back(counter);
            }
        }
        for (tx, bytes) in replay.locked {
            self.restored_locks.insert(tx);
            self.locked.insert(tx, bytes);
        }
        for (tx, commit, partitions) in replay.decided {
            self.recovery.decided.insert(tx, (commit, partitions));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrotx_store::{Key, Partition, PartitionId, ReadError, TableId, TableSpec};
    use ferrotx_wire::ViewId;

    use super::*;
    use crate::durable::RECORD_DECIDED;
    use crate::messages::{LockRecord, Write, encode_tx};
    use crate::recovery::encode_decision;

    const T: TableId = TableId(1);

    fn tx(counter: u64) -> TxId {
        TxId {
            view: ViewId(3),
            node: 1,
            thread: 0,
            incarnation: 9,
            counter,
        }
    }

    /// A record of `tx(counter)` writing `value` to key `key` of partition 0 at `version`
    /// (read), carrying truncation mark `mark`.
    fn record(counter: u64, key: u64, version: u64, value: u8, mark: u64) -> Vec<u8> {
        let mut out = Vec::new();
        LockRecord {
            tx: tx(counter),
            partitions: vec![0],
            writes: vec![Write {
                partition: 0,
                table: T,
                key: Key::from(key),
                version,
                value: Some(vec![value; 8]),
            }],
            truncate_up_to: mark,
        }
        .encode(&mut out);
        out
    }

    fn tx_bytes(counter: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_tx(&tx(counter), &mut out);
        out
    }

    fn store(role: Role) -> (NodeStore, Arc<Partition>) {
        let part = Arc::new(Partition::new(
            PartitionId(0),
            &[TableSpec::fixed(1, "t", 8)],
        ));
        let mut store = NodeStore::new();
        store.host(role, part.clone());
        (store, part)
    }

    fn read(part: &Partition, key: u64) -> Result<(u64, Option<u8>), ReadError> {
        let mut out = Vec::new();
        part.read(T, &Key::from(key), &mut out)
            .unwrap()
            .map(|o| (o.version, o.present.then(|| out[0])))
    }

    fn run(store: &NodeStore, records: &[(u8, Vec<u8>)]) -> Replay {
        replay(
            store,
            records.iter().map(|(k, p)| (*k, &p[..])),
            &FillViews::default(),
        )
        .unwrap()
    }

    /// A backup's records: those a mark covers or a decision commits are applied at their
    /// versions, whatever the order; an aborted one never; the rest wait for recovery.
    #[test]
    fn a_backup_applies_what_committed_and_keeps_what_is_in_doubt() {
        let (store, part) = store(Role::Backup);
        let mut decided = vec![1u8];
        encode_decision(ViewId(4), &tx(5), &[0], &mut decided);
        let records = vec![
            // Key 2's second write logged before its first: the higher version stays.
            (RECORD_COMMIT_BACKUP, record(2, 2, 1, 22, 0)),
            (RECORD_COMMIT_BACKUP, record(1, 2, 0, 11, 0)),
            (RECORD_COMMIT_BACKUP, record(3, 3, 0, 33, 0)),
            (RECORD_ABORT, tx_bytes(3)),
            (RECORD_COMMIT_BACKUP, record(4, 4, 0, 44, 2)),
            (RECORD_COMMIT_BACKUP, record(5, 5, 0, 55, 2)),
            (RECORD_DECIDED, decided),
        ];
        let r = run(&store, &records);
        assert_eq!(read(&part, 2), Ok((2, Some(22))));
        assert_eq!(read(&part, 3), Ok((0, None)), "aborted: never applied");
        assert_eq!(read(&part, 4), Ok((0, None)), "in doubt: recovery's");
        assert_eq!(read(&part, 5), Ok((1, Some(55))), "decided: applied");
        assert_eq!(
            (r.stats.committed, r.stats.aborted, r.stats.records_in_doubt),
            (3, 1, 1)
        );
        let mut p = Participant::new(Arc::new(store));
        p.restore(r);
        let log = &p.logs[&(1, 0, 9)];
        assert_eq!(log.truncated_up_to, 2);
        assert_eq!(log.records.keys().copied().collect::<Vec<_>>(), vec![4]);
        assert!(p.recovery.decided.contains_key(&tx(5)));
    }

    /// A primary's LOCK records (`sync` mode): installed ones are applied, one in doubt
    /// goes back to the participant for recovery to decide (its object is not locked in
    /// the store: the partition is blocked until recovery is done), and its commit then
    /// applies its write; an installed one above the mark is a commit-primary vote.
    #[test]
    fn a_primary_gets_back_what_is_in_doubt() {
        let (store, part) = store(Role::Primary);
        let records = vec![
            (RECORD_LOCK, record(1, 7, 0, 1, 0)),
            (RECORD_INSTALLED, tx_bytes(1)),
            (RECORD_LOCK, record(2, 7, 1, 2, 0)),
        ];
        let mut r = run(&store, &records);
        assert_eq!(read(&part, 7), Ok((1, Some(1))));
        r.keep_primaries(&store);
        assert_eq!(r.stats.locks_in_doubt, 1);
        let mut p = Participant::new(Arc::new(store));
        p.restore(r);
        assert!(p.locked.contains_key(&tx(2)) && p.restored_locks.contains(&tx(2)));
        assert_eq!(p.logs[&(1, 0, 9)].installed, [1]);
        // A later write recovery applies first is kept; the commit applies under it.
        part.apply(T, &Key::from(7u64), 3, Some(&[3; 8])).unwrap();
        assert!(p.install_now(&tx(2), false));
        assert_eq!(read(&part, 7), Ok((3, Some(3))));
    }

    /// A primary's LOCK record its coordinator's mark covers, with no INSTALLED marker
    /// and no decision, aborted (its coordinator ended it without this primary
    /// installing: an ABORT lost to a view change), never applied nor kept in doubt; with
    /// its marker, applied (`power` seed 431 of list-append).
    #[test]
    fn a_lock_a_mark_covers_without_its_marker_aborted() {
        let (store, part) = store(Role::Primary);
        let records = vec![
            (RECORD_LOCK, record(1, 7, 0, 1, 0)),
            (RECORD_LOCK, record(2, 8, 0, 2, 0)),
            (RECORD_INSTALLED, tx_bytes(2)),
            // A later lock carries its coordinator's mark past both.
            (RECORD_LOCK, record(3, 9, 0, 3, 2)),
        ];
        let mut r = run(&store, &records);
        assert_eq!(read(&part, 7), Ok((0, None)), "aborted: never applied");
        assert_eq!(read(&part, 8), Ok((1, Some(2))), "its marker: committed");
        r.keep_primaries(&store);
        assert_eq!((r.stats.aborted, r.stats.locks_in_doubt), (1, 1));
        assert_eq!(r.locked.len(), 1);
        assert_eq!(r.locked[0].0, tx(3));
    }

    /// A log that takes records and never makes them durable.
    struct NeverDurable(u64);

    impl crate::durable::CommitLog for NeverDurable {
        fn append(&mut self, _: u8, _: &[u8]) -> Result<u64, crate::durable::LogFailed> {
            self.0 += 1;
            Ok(self.0)
        }
        fn durable(&mut self, _: u64) -> u64 {
            0
        }
        fn failed(&self) -> Option<crate::durable::LogFailed> {
            None
        }
    }

    /// `sync` mode: a primary whose install waits for its marker votes commit-primary,
    /// and keeps that vote when its coordinator's truncation mark passes the transaction
    /// (the coordinator was answered and ended it; a view change that drops the install
    /// leaves it to recovery, which must commit it). A mark past a transaction no longer
    /// locked here drops the vote as before.
    #[test]
    fn a_waiting_install_keeps_its_commit_primary_vote_under_a_mark() {
        use crate::recovery::Vote;
        let (store, part) = store(Role::Primary);
        let mut p = Participant::new(Arc::new(store));
        p.set_log(
            Box::new(NeverDurable(0)),
            crate::durable::LogMode { wait: true },
            1,
        );
        part.lock(T, &Key::from(7u64), 0).unwrap().unwrap();
        p.locked.insert(tx(1), record(1, 7, 0, 1, 0));
        p.lock_lsn.insert(tx(1), 1);
        assert!(p.install_locked(&tx(1), false));
        assert!(
            p.locked.contains_key(&tx(1)),
            "the install waits for the disk"
        );
        assert_eq!(read(&part, 7), Err(ReadError::Locked));
        assert_eq!(p.decided_or_installed(&tx(1)), Some(Vote::CommitPrimary));
        p.truncate((1, 0, 9), 1);
        assert_eq!(p.decided_or_installed(&tx(1)), Some(Vote::CommitPrimary));
        // Installed (or released) since: the next mark drops the vote.
        p.locked.remove(&tx(1));
        p.truncate((1, 0, 9), 2);
        assert_eq!(p.decided_or_installed(&tx(1)), None);
    }

    /// A lock in doubt whose object another lock of the node holds at a higher version
    /// was installed: settled as committed.
    #[test]
    fn a_lock_in_doubt_below_a_later_lock_was_installed() {
        let (store, part) = store(Role::Primary);
        let mut replays = vec![
            run(&store, &[(RECORD_LOCK, record(1, 7, 0, 1, 0))]),
            run(&store, &[(RECORD_LOCK, record(2, 7, 1, 2, 0))]),
        ];
        settle_locks(&store, &mut replays);
        assert_eq!(read(&part, 7), Ok((1, Some(1))));
        assert_eq!(replays[0].stats.locks_settled, 1);
        assert_eq!(replays[0].installed, vec![((1, 0, 9), 1)]);
        assert_eq!(replays[1].stats.locks_in_doubt, 1);
    }

    /// Writes logged to a copy before its last fill began (in an older view) are the
    /// replaced copy's: skipped, whichever worker logged them.
    #[test]
    fn writes_before_a_fill_are_the_replaced_copys() {
        let (store, part) = store(Role::Backup);
        let mut begin = 0u32.to_le_bytes().to_vec();
        begin.extend_from_slice(&5u64.to_le_bytes());
        let worker_0 = vec![(RECORD_COMMIT_BACKUP, record(1, 2, 0, 11, 1))];
        let worker_1 = vec![(crate::durable::RECORD_FILL_BEGIN, begin)];
        let mut fills = FillViews::default();
        for log in [&worker_0, &worker_1] {
            fill_views(log.iter().map(|(k, p)| (*k, &p[..])), &mut fills);
        }
        assert_eq!(fills.get(&0), Some(&ViewId(5)));
        let r = replay(&store, worker_0.iter().map(|(k, p)| (*k, &p[..])), &fills).unwrap();
        assert_eq!(read(&part, 2), Ok((0, None)));
        assert_eq!(r.stats.writes_superseded, 1);
    }

    /// Bytes whose checksum held but that are not what their kind says are refused,
    /// naming the record, never replayed.
    #[test]
    fn a_record_that_is_not_its_kind_is_refused() {
        let (store, _) = store(Role::Backup);
        for records in [
            vec![(RECORD_COMMIT_BACKUP, vec![1, 2, 3])],
            vec![(RECORD_ABORT, vec![])],
            vec![(RECORD_INSTALLED, record(1, 1, 0, 1, 0)), (99, vec![])],
        ] {
            let e = replay(
                &store,
                records.iter().map(|(k, p)| (*k, &p[..])),
                &FillViews::default(),
            )
            .unwrap_err();
            assert_eq!(e.index, 0, "{e}");
        }
        let e = replay(
            &store,
            [
                (RECORD_COMMIT_BACKUP, &record(1, 1, 0, 1, 0)[..]),
                (99, &[][..]),
            ]
            .into_iter(),
            &FillViews::default(),
        )
        .unwrap_err();
        assert_eq!((e.index, e.kind), (1, 99), "{e}");
    }
}
