//! Recovery at one replica, through the participant's handlers: the cases an adversarial
//! review found wrong in the first cut (each test failed on 238cdcb).

use std::sync::Arc;

use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
use ferrotx_txn::messages::{LockRecord, TxId, VERSION_ANY, Write, encode_truncate};
use ferrotx_txn::participant::{NodeStore, Participant, ParticipantHandler, Role};
use ferrotx_txn::recovery::{encode_decision, encode_replicate};
use ferrotx_wire::ViewId;

const TABLE: TableId = TableId(1);
const P: u32 = 0;

/// A node hosting partition `P` in `role`, whose key 7 holds 1 at version 1.
fn node(role: Role) -> (Participant, Arc<Partition>) {
    let schema = [TableSpec::fixed(1, "accounts", 8)];
    let part = Arc::new(Partition::new(PartitionId(P), &schema));
    part.load(TABLE, Key::from(7u64), &1u64.to_le_bytes())
        .unwrap();
    let mut store = NodeStore::new();
    store.host(role, part.clone());
    (Participant::new(Arc::new(store)), part)
}

fn tx(counter: u64) -> TxId {
    TxId {
        view: ViewId(1),
        node: 2,
        thread: 0,
        incarnation: 1,
        counter,
    }
}

/// A record of `tx(counter)` writing `value` to key 7 at `version`.
fn record(counter: u64, version: u64, value: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    LockRecord {
        tx: tx(counter),
        partitions: vec![P],
        writes: vec![Write {
            partition: P,
            table: TABLE,
            key: Key::from(7u64),
            version,
            value: Some(value.to_le_bytes().to_vec()),
        }],
        truncate_up_to: 0,
    }
    .encode(&mut buf);
    buf
}

fn call(h: ParticipantHandler, p: &mut Participant, payload: &[u8]) -> Result<Vec<u8>, ()> {
    let mut r = Vec::new();
    h(p, payload, &mut r).map_err(|_| ())?;
    Ok(r)
}

/// Key 7's (version, value).
fn value(part: &Partition) -> (u64, u64) {
    let mut out = Vec::new();
    let o = part
        .read(TABLE, &Key::from(7u64), &mut out)
        .unwrap()
        .unwrap();
    (o.version, u64::from_le_bytes(out[..8].try_into().unwrap()))
}

fn replicate(p: &mut Participant, record: &[u8]) -> Result<Vec<u8>, ()> {
    let mut m = Vec::new();
    encode_replicate(ViewId(2), P, record, &mut m);
    call(Participant::replicate_tx_state, p, &m)
}

fn decide(p: &mut Participant, counter: u64, commit: bool) {
    let mut m = Vec::new();
    encode_decision(ViewId(2), &tx(counter), &[P], &mut m);
    let handler: ParticipantHandler = if commit {
        Participant::commit_recovery
    } else {
        Participant::abort_recovery
    };
    assert_eq!(call(handler, p, &m), Ok(vec![1]));
}

/// A record replicated by recovery is a lock record: a truncation mark covering it (its
/// coordinator ended it: it did not commit in the normal case) drops it, never applies it.
#[test]
fn a_truncation_mark_drops_a_replicated_record() {
    let (mut b, part) = node(Role::Backup);
    assert_eq!(replicate(&mut b, &record(5, 1, 99)), Ok(vec![1]));
    let mut t = Vec::new();
    encode_truncate((2, 0, 1), 5, &mut t);
    call(Participant::truncate_message, &mut b, &t).unwrap();
    assert_eq!(value(&part), (1, 1));
    // Nor does a later commit decision find it.
    decide(&mut b, 5, true);
    assert_eq!(value(&part), (1, 1));
}

/// A record whose write has no known version (a blind write's LOCK record as sent) is
/// refused: applying it would need a version it does not say.
#[test]
fn a_record_of_unknown_version_is_not_replicated() {
    let (mut b, part) = node(Role::Backup);
    assert_eq!(replicate(&mut b, &record(5, VERSION_ANY, 99)), Err(()));
    decide(&mut b, 5, true);
    assert_eq!(value(&part), (1, 1));
}

/// A replica that lacked the record (a promoted primary, when only another backup logged
/// it) applies the committed write once the record was replicated to it.
#[test]
fn a_replicated_record_is_applied_by_a_commit_decision() {
    let (mut p, part) = node(Role::Primary);
    assert_eq!(replicate(&mut p, &record(5, 1, 99)), Ok(vec![1]));
    decide(&mut p, 5, true);
    assert_eq!(value(&part), (2, 99));
    // A decision is applied once.
    decide(&mut p, 5, true);
    assert_eq!(value(&part), (2, 99));
}

/// An abort decision drops a replicated record.
#[test]
fn an_abort_decision_drops_the_records() {
    let (mut b, part) = node(Role::Backup);
    assert_eq!(replicate(&mut b, &record(5, 1, 99)), Ok(vec![1]));
    decide(&mut b, 5, false);
    assert_eq!(value(&part), (1, 1));
}

/// A record replicated for one partition is another replica's, and may carry its writes
/// of other partitions this node also hosts: a commit decision applies only the writes of
/// the partition it was replicated for. That other partition's primary did not hold back
/// reclamation for this record (only this partition's did, until it replicated it), so
/// the key of such a write may have been deleted and reclaimed here since, and applying
/// the old write would bring it back.
#[test]
fn a_replicated_record_brings_only_its_partitions_writes() {
    const OTHER: u32 = 3;
    let schema = [TableSpec::fixed(1, "accounts", 8)];
    let mine = Arc::new(Partition::new(PartitionId(P), &schema));
    mine.load(TABLE, Key::from(7u64), &1u64.to_le_bytes())
        .unwrap();
    let other = Arc::new(Partition::new(PartitionId(OTHER), &schema));
    let mut store = NodeStore::new();
    store.host(Role::Backup, mine.clone());
    store.host(Role::Backup, other.clone());
    let mut b = Participant::new(Arc::new(store));
    let mut bytes = Vec::new();
    LockRecord {
        tx: tx(5),
        partitions: vec![P, OTHER],
        writes: vec![
            Write {
                partition: P,
                table: TABLE,
                key: Key::from(7u64),
                version: 1,
                value: Some(99u64.to_le_bytes().to_vec()),
            },
            Write {
                partition: OTHER,
                table: TABLE,
                key: Key::from(8u64),
                version: 4,
                value: Some(98u64.to_le_bytes().to_vec()),
            },
        ],
        truncate_up_to: 0,
    }
    .encode(&mut bytes);
    assert_eq!(replicate(&mut b, &bytes), Ok(vec![1]));
    let mut m = Vec::new();
    encode_decision(ViewId(2), &tx(5), &[P, OTHER], &mut m);
    assert_eq!(call(Participant::commit_recovery, &mut b, &m), Ok(vec![1]));
    assert_eq!(value(&mine), (2, 99));
    // Key 8 of the other partition had no object here (reclaimed, say): it still has none.
    assert_eq!(other.objects(TABLE), Ok(0));
}
