//! The participant's handlers, called directly with encoded messages.

use std::sync::Arc;

use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
use ferrotx_txn::answer::Answer;
use ferrotx_txn::messages::{
    LockRecord, ReadItem, ReadStatus, ScanPage, TxId, Write, decode_count_response,
    decode_read_response, decode_scan_response, encode_count, encode_read, encode_scan, encode_tx,
    encode_validate,
};
use ferrotx_txn::participant::{
    NodeStore, Participant, ParticipantHandler, Role, SCAN_RESPONSE_BYTES_MAX,
};
use ferrotx_txn::reservation::Age;
use ferrotx_wire::ViewId;

const TABLE: TableId = TableId(1);
const PRIMARY: u32 = 0;
const BACKUP: u32 = 1;

fn node() -> (Participant, Arc<Partition>, Arc<Partition>) {
    let schema = [TableSpec::fixed(1, "accounts", 8)];
    let primary = Arc::new(Partition::new(PartitionId(PRIMARY), &schema));
    let backup = Arc::new(Partition::new(PartitionId(BACKUP), &schema));
    let mut store = NodeStore::new();
    store.host(Role::Primary, primary.clone());
    store.host(Role::Backup, backup.clone());
    (Participant::new(Arc::new(store)), primary, backup)
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

fn write(partition: u32, key: u64, version: u64, value: u64) -> Write {
    Write {
        partition,
        table: TABLE,
        key: Key::from(key),
        version,
        value: Some(value.to_le_bytes().to_vec()),
    }
}

fn record(counter: u64, writes: Vec<Write>, truncate_up_to: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    LockRecord {
        tx: tx(counter),
        partitions: vec![PRIMARY],
        writes,
        truncate_up_to,
    }
    .encode(&mut buf);
    buf
}

fn call(handler: ParticipantHandler, participant: &mut Participant, payload: &[u8]) -> Vec<u8> {
    let mut response = Vec::new();
    handler(participant, payload, &mut response).expect("handled");
    response
}

fn read(participant: &mut Participant, partition: u32, key: u64) -> (ReadStatus, u64, Vec<u8>) {
    let mut request = Vec::new();
    encode_read(partition, TABLE, &Key::from(key), &mut request);
    let response = call(Participant::read, participant, &request);
    let (status, version, value) = decode_read_response(&response).unwrap();
    (status, version, value.to_vec())
}

/// A LOCK's answer when granted: 1, then the version each write was locked at.
/// The one-byte answers, as a participant writes them.
const GRANTED: [u8; 1] = [Answer::Granted as u8];
const REFUSED: [u8; 1] = [Answer::Refused as u8];

fn granted(versions: &[u64]) -> Vec<u8> {
    let mut answer = vec![Answer::Granted as u8];
    for v in versions {
        answer.extend_from_slice(&v.to_le_bytes());
    }
    answer
}

fn tx_message(counter: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_tx(&tx(counter), &mut buf);
    buf
}

#[test]
fn lock_then_commit_installs_and_unlocks() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    // Insert key 2 (version 0) and update key 1 (version 1) in one transaction.
    let lock = record(
        1,
        vec![write(PRIMARY, 1, 1, 11), write(PRIMARY, 2, 0, 20)],
        0,
    );
    assert_eq!(call(Participant::lock, &mut p, &lock), granted(&[1, 0]));
    assert_eq!(read(&mut p, PRIMARY, 1).0, ReadStatus::Locked);
    assert_eq!(p.locked_transactions(), 1);
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(1)),
        [1]
    );
    assert_eq!(
        read(&mut p, PRIMARY, 1),
        (ReadStatus::Present, 2, 11u64.to_le_bytes().to_vec())
    );
    assert_eq!(
        read(&mut p, PRIMARY, 2),
        (ReadStatus::Present, 1, 20u64.to_le_bytes().to_vec())
    );
    assert_eq!(p.locked_transactions(), 0);
    assert_eq!(p.stats().commits, 1);
}

#[test]
fn a_failed_lock_takes_no_lock_and_abort_releases() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    assert!(
        primary
            .load(TABLE, Key::from(2), &20u64.to_le_bytes())
            .unwrap()
    );
    // Key 2 was read at a stale version: nothing stays locked, key 1 included.
    let stale = record(
        1,
        vec![write(PRIMARY, 1, 1, 11), write(PRIMARY, 2, 7, 21)],
        0,
    );
    assert_eq!(call(Participant::lock, &mut p, &stale), REFUSED);
    assert_eq!(read(&mut p, PRIMARY, 1).0, ReadStatus::Present);
    // A value of the wrong size fails the lock too.
    let mut bad = write(PRIMARY, 1, 1, 0);
    bad.value = Some(vec![1, 2, 3]);
    assert_eq!(
        call(Participant::lock, &mut p, &record(2, vec![bad], 0)),
        [0]
    );
    // A granted lock, then ABORT: the object is unlocked and unchanged.
    assert_eq!(
        call(
            Participant::lock,
            &mut p,
            &record(3, vec![write(PRIMARY, 1, 1, 11)], 0)
        ),
        granted(&[1])
    );
    assert_eq!(call(Participant::abort, &mut p, &tx_message(3)), GRANTED);
    assert_eq!(
        read(&mut p, PRIMARY, 1),
        (ReadStatus::Present, 1, 10u64.to_le_bytes().to_vec())
    );
    assert_eq!(p.stats().locks_refused, 2);
    assert_eq!(p.stats().aborts, 1);
}

#[test]
fn past_its_memory_limit_a_primary_refuses_only_writes_that_grow_it() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    let memory = Arc::new(ferrotx_store::Memory::with_limit(1 << 20));
    p.set_memory(memory.clone());
    memory.set_store(primary.used_bytes() as u64);
    // Under the limit: an insert is granted.
    let insert = |counter, key| record(counter, vec![write(PRIMARY, key, 0, 20)], 0);
    assert_eq!(
        call(Participant::lock, &mut p, &insert(1, 2)),
        granted(&[0])
    );
    assert_eq!(call(Participant::abort, &mut p, &tx_message(1)), GRANTED);
    // At the limit, an insert still goes (Redis refuses past it, not at it).
    memory.set_store(1 << 20);
    assert_eq!(
        call(Participant::lock, &mut p, &insert(10, 6)),
        granted(&[0])
    );
    assert_eq!(call(Participant::abort, &mut p, &tx_message(10)), GRANTED);
    // Past the limit: an insert (with an update beside it) takes nothing and answers
    // Answer::OutOfMemory.
    memory.set_store((1 << 20) + 1);
    let both = record(
        2,
        vec![write(PRIMARY, 1, 1, 11), write(PRIMARY, 3, 0, 30)],
        0,
    );
    assert_eq!(
        call(Participant::lock, &mut p, &both),
        [Answer::OutOfMemory as u8]
    );
    assert_eq!(read(&mut p, PRIMARY, 1).0, ReadStatus::Present);
    assert_eq!(p.locked_transactions(), 0);
    // An update in place and a delete do not grow the store: granted.
    let update = record(3, vec![write(PRIMARY, 1, 1, 11)], 0);
    assert_eq!(call(Participant::lock, &mut p, &update), granted(&[1]));
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(3)),
        [1]
    );
    let mut delete = write(PRIMARY, 1, 2, 0);
    delete.value = None;
    assert_eq!(
        call(Participant::lock, &mut p, &record(4, vec![delete], 0)),
        granted(&[2])
    );
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(4)),
        [1]
    );
    // A key that was deleted needs its object again: refused.
    assert_eq!(
        call(
            Participant::lock,
            &mut p,
            &record(5, vec![write(PRIMARY, 1, 3, 12)], 0)
        ),
        [Answer::OutOfMemory as u8]
    );
    assert_eq!(p.stats().locks_refused_memory, 2);
    // Back under the limit (deletes reclaimed): granted again.
    memory.set_store(0);
    assert_eq!(
        call(Participant::lock, &mut p, &insert(6, 3)),
        granted(&[0])
    );
    assert_eq!(call(Participant::abort, &mut p, &tx_message(6)), GRANTED);
    // Under its own limit, but the partition has a copy on a node past its limit (the
    // CM's figures): an insert is refused, an update in place is not.
    memory.set_crowded([PRIMARY]);
    assert_eq!(
        call(Participant::lock, &mut p, &insert(7, 4)),
        [Answer::OutOfMemory as u8]
    );
    assert!(
        primary
            .load(TABLE, Key::from(5), &50u64.to_le_bytes())
            .unwrap()
    );
    let update = record(8, vec![write(PRIMARY, 5, 1, 51)], 0);
    assert_eq!(call(Participant::lock, &mut p, &update), granted(&[1]));
    memory.set_crowded([]);
    assert_eq!(
        call(Participant::lock, &mut p, &insert(9, 4)),
        granted(&[0])
    );
}

#[test]
fn validation_fails_on_a_changed_or_locked_object() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    let validate = |version| {
        let mut buf = Vec::new();
        encode_validate(
            &[ReadItem {
                partition: PRIMARY,
                table: TABLE,
                key: Key::from(1),
                version,
            }],
            &mut buf,
        );
        buf
    };
    assert_eq!(call(Participant::validate, &mut p, &validate(1)), GRANTED);
    assert_eq!(call(Participant::validate, &mut p, &validate(0)), REFUSED);
    assert_eq!(
        call(
            Participant::lock,
            &mut p,
            &record(1, vec![write(PRIMARY, 1, 1, 11)], 0)
        ),
        granted(&[1])
    );
    assert_eq!(
        call(Participant::validate, &mut p, &validate(1)),
        [0],
        "locked object validated"
    );
}

#[test]
fn backups_apply_logged_writes_when_truncated() {
    let (mut p, _, backup) = node();
    let mut out = Vec::new();
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(1, vec![write(BACKUP, 5, 0, 50)], 0)
        ),
        [1]
    );
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(2, vec![write(BACKUP, 5, 1, 51)], 0)
        ),
        [1]
    );
    // Logged, not applied yet.
    assert!(
        !backup
            .read(TABLE, &Key::from(5), &mut out)
            .unwrap()
            .unwrap()
            .present
    );
    // The next record carries the mark 2: both earlier records are applied, in order.
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(3, vec![write(BACKUP, 6, 0, 60)], 2)
        ),
        [1]
    );
    let outcome = backup
        .read(TABLE, &Key::from(5), &mut out)
        .unwrap()
        .unwrap();
    assert_eq!(
        (outcome.version, out.clone()),
        (2, 51u64.to_le_bytes().to_vec())
    );
    assert!(
        !backup
            .read(TABLE, &Key::from(6), &mut out)
            .unwrap()
            .unwrap()
            .present
    );
    assert_eq!(p.stats().records_applied, 2);
    // A record of a truncated transaction (a late duplicate) is not logged again.
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(1, vec![write(BACKUP, 5, 0, 50)], 2)
        ),
        [1]
    );
    assert_eq!(p.stats().records_logged, 3);
}

#[test]
fn messages_for_partitions_not_hosted_in_that_role_are_refused() {
    let (mut p, _, _) = node();
    // Locking at a backup partition: refused, not an error.
    assert_eq!(
        call(
            Participant::lock,
            &mut p,
            &record(1, vec![write(BACKUP, 1, 0, 1)], 0)
        ),
        [0]
    );
    assert_eq!(read(&mut p, BACKUP, 1).0, ReadStatus::Refused);
    let mut response = Vec::new();
    assert!(
        Participant::commit_backup(
            &mut p,
            &record(2, vec![write(PRIMARY, 1, 0, 1)], 0),
            &mut response
        )
        .is_err()
    );
    assert!(Participant::lock(&mut p, b"garbage", &mut response).is_err());
}

/// A restarted coordinator's counters start again at 1; its records go to a log of its
/// own and are not mistaken for its earlier life's already truncated ones.
#[test]
fn a_restarted_coordinator_logs_afresh() {
    let (mut p, _, backup) = node();
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(1, vec![write(BACKUP, 5, 0, 50)], 0)
        ),
        [1]
    );
    assert_eq!(
        call(
            Participant::commit_backup,
            &mut p,
            &record(2, vec![write(BACKUP, 6, 0, 60)], 1)
        ),
        [1]
    );
    // The new life's transaction 1, then its mark 1.
    let mut buf = Vec::new();
    LockRecord {
        tx: TxId {
            incarnation: 2,
            ..tx(1)
        },
        partitions: vec![PRIMARY],
        writes: vec![write(BACKUP, 7, 0, 70)],
        truncate_up_to: 0,
    }
    .encode(&mut buf);
    assert_eq!(call(Participant::commit_backup, &mut p, &buf), GRANTED);
    assert_eq!(
        p.stats().records_logged,
        3,
        "the new life's record was dropped"
    );
    let mut flush = Vec::new();
    ferrotx_txn::messages::encode_truncate((2, 0, 2), 1, &mut flush);
    assert_eq!(call(Participant::truncate_message, &mut p, &flush), GRANTED);
    let mut out = Vec::new();
    assert!(
        backup
            .read(TABLE, &Key::from(7), &mut out)
            .unwrap()
            .unwrap()
            .present
    );
}

/// A COMMIT-BACKUP record that truncation could not apply (a table the backup does not
/// have, a value that does not fit it) is refused when it arrives, not logged to panic
/// the backup later.
#[test]
fn records_a_backup_could_not_apply_are_refused() {
    let (mut p, _, backup) = node();
    backup
        .load(TABLE, Key::from(1), &5u64.to_le_bytes())
        .unwrap();
    let mut unknown = write(BACKUP, 1, 1, 6);
    unknown.table = TableId(9);
    let mut too_long = write(BACKUP, 1, 1, 6);
    too_long.value = Some(vec![0; 9]);
    for (counter, bad) in [(1, unknown), (2, too_long)] {
        let mut response = Vec::new();
        assert!(
            Participant::commit_backup(&mut p, &record(counter, vec![bad], 0), &mut response)
                .is_err()
        );
    }
    // Nothing was logged: a truncation applies nothing, and the copy is unchanged.
    let mut truncate = Vec::new();
    ferrotx_txn::messages::encode_truncate((2, 0, 1), 2, &mut truncate);
    call(Participant::truncate_message, &mut p, &truncate);
    assert_eq!(p.stats().records_logged, 0);
    assert_eq!(p.stats().records_applied, 0);
    assert_eq!(read(&mut p, BACKUP, 1).0, ReadStatus::Refused);
    let mut out = Vec::new();
    let outcome = backup
        .read(TABLE, &Key::from(1), &mut out)
        .unwrap()
        .unwrap();
    assert_eq!((outcome.version, out), (1, 5u64.to_le_bytes().to_vec()));
}

/// Issue 29: a COMMIT-BACKUP whose write carries a version at or past the largest an
/// object holds (truncation applies it at the version after) was logged, and panicked
/// the backup at truncation. It is refused when it arrives.
#[test]
fn records_with_versions_past_the_largest_are_refused() {
    let (mut p, _, _) = node();
    for (counter, version) in [
        (1, ferrotx_store::VERSION_MAX),
        (2, ferrotx_store::VERSION_MAX + 1),
        (3, u64::MAX - 1),
    ] {
        let mut response = Vec::new();
        let bad = record(counter, vec![write(BACKUP, 1, version, 6)], 0);
        assert!(
            p.handle(Participant::commit_backup, &bad, &mut response)
                .is_err(),
            "version {version:#x} was logged"
        );
    }
    // A truncation that covers them applies nothing (before the fix: a panic here).
    let mut truncate = Vec::new();
    ferrotx_txn::messages::encode_truncate((2, 0, 1), 3, &mut truncate);
    call(Participant::truncate_message, &mut p, &truncate);
    assert_eq!(p.stats().records_applied, 0);
    // The largest version that can still be applied is logged and applied.
    let fine = record(
        4,
        vec![write(BACKUP, 1, ferrotx_store::VERSION_MAX - 1, 6)],
        0,
    );
    assert_eq!(call(Participant::commit_backup, &mut p, &fine), GRANTED);
    truncate.clear();
    ferrotx_txn::messages::encode_truncate((2, 0, 1), 4, &mut truncate);
    call(Participant::truncate_message, &mut p, &truncate);
    assert_eq!(p.stats().records_applied, 1);
    assert_eq!(p.stats().requests_refused, 3);
}

/// Issue 29: a LOCK with no writes was granted and kept until a COMMIT-PRIMARY or ABORT
/// that a forged or broken sender never sends, so such LOCKs, each naming another
/// transaction, grew the participant without bound. A coordinator sends LOCK only to
/// primaries it writes at, so one with no writes is refused.
#[test]
fn a_lock_with_no_writes_is_refused() {
    let (mut p, _, _) = node();
    for counter in 1..=100 {
        let mut response = Vec::new();
        assert!(
            p.handle(
                Participant::lock,
                &record(counter, vec![], 0),
                &mut response
            )
            .is_err()
        );
    }
    assert_eq!(p.locked_transactions(), 0);
    assert_eq!(p.stats().requests_refused, 100);
}

/// Issue 29: an object at the largest version (a FETCH from a broken primary can install
/// one) was locked, and its commit published the version after it, which panicked the
/// primary. A LOCK of it is refused, and leaves it unlocked.
#[test]
fn an_object_at_the_largest_version_is_not_locked() {
    let (mut p, primary, _) = node();
    let max = ferrotx_store::VERSION_MAX;
    primary
        .apply(TABLE, &Key::from(1), max, Some(&5u64.to_le_bytes()))
        .unwrap();
    primary
        .load(TABLE, Key::from(2), &5u64.to_le_bytes())
        .unwrap();
    for (counter, version) in [(1, max), (2, ferrotx_txn::messages::VERSION_ANY)] {
        let lock = record(
            counter,
            vec![write(PRIMARY, 2, 1, 7), write(PRIMARY, 1, version, 6)],
            0,
        );
        assert_eq!(
            call(Participant::lock, &mut p, &lock),
            [0],
            "version {version:#x}"
        );
    }
    assert_eq!(
        read(&mut p, PRIMARY, 1),
        (ReadStatus::Present, max, 5u64.to_le_bytes().to_vec())
    );
    assert_eq!(
        read(&mut p, PRIMARY, 2).0,
        ReadStatus::Present,
        "the other lock let go"
    );
    assert_eq!(p.stats().locks_refused, 2);
}

/// A second LOCK of a transaction that holds locks here is refused, and the locks of the
/// first stay held until its COMMIT-PRIMARY.
#[test]
fn a_second_lock_of_one_transaction_is_refused() {
    let (mut p, primary, _) = node();
    primary
        .load(TABLE, Key::from(1), &5u64.to_le_bytes())
        .unwrap();
    primary
        .load(TABLE, Key::from(2), &5u64.to_le_bytes())
        .unwrap();
    assert_eq!(
        call(
            Participant::lock,
            &mut p,
            &record(1, vec![write(PRIMARY, 1, 1, 6)], 0)
        ),
        granted(&[1])
    );
    let mut response = Vec::new();
    let again = record(1, vec![write(PRIMARY, 2, 1, 7)], 0);
    assert!(Participant::lock(&mut p, &again, &mut response).is_err());
    assert_eq!(read(&mut p, PRIMARY, 1).0, ReadStatus::Locked);
    assert_eq!(read(&mut p, PRIMARY, 2).0, ReadStatus::Present);
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(1)),
        [1]
    );
    assert_eq!(
        read(&mut p, PRIMARY, 1),
        (ReadStatus::Present, 2, 6u64.to_le_bytes().to_vec())
    );
}

/// A blind write (version `VERSION_ANY`) is locked at whatever version the object has,
/// which the answer reports; an absent key at version 0; a locked object refuses it.
#[test]
fn blind_writes_lock_at_the_current_version() {
    let (mut p, primary, _) = node();
    primary
        .load(TABLE, Key::from(1), &5u64.to_le_bytes())
        .unwrap();
    let any = ferrotx_txn::messages::VERSION_ANY;
    let lock = record(
        1,
        vec![write(PRIMARY, 1, any, 6), write(PRIMARY, 2, any, 7)],
        0,
    );
    assert_eq!(call(Participant::lock, &mut p, &lock), granted(&[1, 0]));
    // Another blind write of key 1 meets the lock.
    let again = record(2, vec![write(PRIMARY, 1, any, 8)], 0);
    assert_eq!(call(Participant::lock, &mut p, &again), REFUSED);
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(1)),
        [1]
    );
    assert_eq!(
        read(&mut p, PRIMARY, 1),
        (ReadStatus::Present, 2, 6u64.to_le_bytes().to_vec())
    );
    assert_eq!(
        read(&mut p, PRIMARY, 2),
        (ReadStatus::Present, 1, 7u64.to_le_bytes().to_vec())
    );
}

/// SCAN's answer at `partition` from `cursor`, at most `count` objects.
fn scan(
    participant: &mut Participant,
    partition: u32,
    table: TableId,
    cursor: u64,
    count: u32,
) -> Option<ScanPage> {
    let mut request = Vec::new();
    encode_scan(partition, table, cursor, count, &mut request);
    let response = call(Participant::scan, participant, &request);
    decode_scan_response(&response).unwrap()
}

#[test]
fn scans_answer_from_primaries_in_pages_bounded_in_objects_and_bytes() {
    let schema = [TableSpec::variable(1, "kv", 1 << 20)];
    let primary = Arc::new(Partition::new(PartitionId(PRIMARY), &schema));
    let backup = Arc::new(Partition::new(PartitionId(BACKUP), &schema));
    let mut store = NodeStore::new();
    store.host(Role::Primary, primary.clone());
    store.host(Role::Backup, backup.clone());
    let mut p = Participant::new(Arc::new(store));
    for key in 0..10u64 {
        primary
            .load(TABLE, Key::from(key), &[key as u8; 100])
            .unwrap();
    }
    // Pages of at most 4 objects, in insertion order, until the cursor comes back 0.
    let (mut cursor, mut keys) = (0, Vec::new());
    loop {
        let page = scan(&mut p, PRIMARY, TABLE, cursor, 4).unwrap();
        assert!(page.visited <= 4 && page.objects.len() <= 4, "{page:?}");
        for (key, value) in page.objects {
            assert_eq!(value.len(), 100);
            keys.push(key);
        }
        cursor = page.next_cursor;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(keys, (0..10).map(Key::from).collect::<Vec<_>>());

    // A locked object ends the page before it; the next one goes on from there.
    primary.lock(TABLE, &Key::from(2), 1).unwrap().unwrap();
    let page = scan(&mut p, PRIMARY, TABLE, 0, 10).unwrap();
    assert_eq!(page.objects.len(), 2, "{page:?}");
    let again = scan(&mut p, PRIMARY, TABLE, page.next_cursor, 10).unwrap();
    assert_eq!(
        (again.objects.len(), again.next_cursor),
        (0, page.next_cursor)
    );
    primary.unlock(TABLE, &Key::from(2)).unwrap();
    let rest = scan(&mut p, PRIMARY, TABLE, page.next_cursor, 10).unwrap();
    assert_eq!(rest.objects.len(), 8);
    assert_eq!(rest.objects[0].0, Key::from(2));

    // Large values: the page stops before the object that would take it past the byte
    // bound, and a page always carries its first object.
    for key in 100..104u64 {
        primary
            .load(TABLE, Key::from(key), &vec![7; 200 << 10])
            .unwrap();
    }
    assert_eq!(rest.next_cursor, 0);
    let page = scan(&mut p, PRIMARY, TABLE, 0, 100).unwrap();
    let bytes: usize = page.objects.iter().map(|(_, v)| v.len()).sum();
    assert_eq!(
        page.objects.len(),
        11,
        "the 10 small objects and 1 large one"
    );
    assert!(bytes > 200 << 10 && bytes <= SCAN_RESPONSE_BYTES_MAX);
    let mut cursor = page.next_cursor;
    for left in (0..3).rev() {
        let page = scan(&mut p, PRIMARY, TABLE, cursor, 100).unwrap();
        assert_eq!(page.objects.len(), 1, "two large ones pass the bound");
        assert_eq!(page.next_cursor == 0, left == 0);
        cursor = page.next_cursor;
    }

    // Only a primary answers, and only for a table it has.
    assert_eq!(scan(&mut p, BACKUP, TABLE, 0, 10), None);
    assert_eq!(scan(&mut p, 7, TABLE, 0, 10), None);
    assert_eq!(scan(&mut p, PRIMARY, TableId(9), 0, 10), None);
    let mut request = Vec::new();
    encode_count(PRIMARY, TABLE, &mut request);
    let response = call(Participant::count, &mut p, &request);
    assert_eq!(decode_count_response(&response), Ok(Some(14)));
    request.clear();
    encode_count(BACKUP, TABLE, &mut request);
    let response = call(Participant::count, &mut p, &request);
    assert_eq!(decode_count_response(&response), Ok(None));
    let mut response = Vec::new();
    assert!(Participant::scan(&mut p, &[1, 2, 3], &mut response).is_err());
}

#[test]
fn abort_drops_a_logged_record_so_truncation_never_applies_it() {
    let (mut p, _, backup) = node();
    let mut out = Vec::new();
    for counter in [1, 2] {
        let logged = record(counter, vec![write(BACKUP, 5, counter - 1, counter)], 0);
        assert_eq!(call(Participant::commit_backup, &mut p, &logged), GRANTED);
    }
    // Transaction 2 failed at another backup: its coordinator aborts it everywhere.
    assert_eq!(call(Participant::abort, &mut p, &tx_message(2)), GRANTED);
    let mark = record(3, vec![write(BACKUP, 6, 0, 60)], 2);
    assert_eq!(call(Participant::commit_backup, &mut p, &mark), GRANTED);
    let outcome = backup
        .read(TABLE, &Key::from(5), &mut out)
        .unwrap()
        .unwrap();
    assert_eq!((outcome.version, out), (1, 1u64.to_le_bytes().to_vec()));
    assert_eq!(p.stats().records_applied, 1);
}

/// An aged LOCK's payload: the age, then the record.
fn aged(age: Age, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    age.encode(&mut buf);
    buf.extend_from_slice(payload);
    buf
}

#[test]
fn a_transaction_that_lost_reserves_its_objects_until_it_commits() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    let loser = Age { lost: 0, who: 7 }.after(1);
    // The aged transaction read key 1 at a stale version: its LOCK fails, but reserves
    // the key for it.
    let stale = aged(loser, &record(1, vec![write(PRIMARY, 1, 9, 11)], 0));
    assert_eq!(call(Participant::lock_aged, &mut p, &stale), REFUSED);
    assert_eq!(p.store().reservations().len(), 1);
    // A first attempt, or one that lost as often with a larger number, is refused...
    let first = record(2, vec![write(PRIMARY, 1, 1, 12)], 0);
    assert_eq!(call(Participant::lock, &mut p, &first), REFUSED);
    let later = aged(
        Age { lost: 1, who: 8 },
        &record(3, vec![write(PRIMARY, 1, 1, 13)], 0),
    );
    assert_eq!(call(Participant::lock_aged, &mut p, &later), REFUSED);
    // Reads are not refused.
    assert_eq!(read(&mut p, PRIMARY, 1).0, ReadStatus::Present);
    // The owner's next attempt locks it; ABORT keeps the reservation.
    let again = aged(
        loser.after(2),
        &record(4, vec![write(PRIMARY, 1, 1, 14)], 0),
    );
    assert_eq!(call(Participant::lock_aged, &mut p, &again), granted(&[1]));
    assert_eq!(call(Participant::abort, &mut p, &tx_message(4)), GRANTED);
    assert_eq!(call(Participant::lock, &mut p, &first), REFUSED);
    // Its COMMIT-PRIMARY installs the key and releases the reservation.
    let last = aged(
        loser.after(3),
        &record(5, vec![write(PRIMARY, 1, 1, 15)], 0),
    );
    assert_eq!(call(Participant::lock_aged, &mut p, &last), granted(&[1]));
    assert_eq!(
        call(Participant::commit_primary, &mut p, &tx_message(5)),
        [1]
    );
    assert!(p.store().reservations().is_empty());
    let next = record(6, vec![write(PRIMARY, 1, 2, 16)], 0);
    assert_eq!(call(Participant::lock, &mut p, &next), granted(&[2]));
    // A malformed age is refused, not a panic.
    let mut short = Vec::new();
    assert!(Participant::lock_aged(&mut p, &[1, 2, 3], &mut short).is_err());
    assert!(Participant::validate_aged(&mut p, &[1, 2, 3], &mut short).is_err());
}

#[test]
fn an_aged_validation_that_fails_reserves_what_it_read() {
    let (mut p, primary, _) = node();
    assert!(
        primary
            .load(TABLE, Key::from(1), &10u64.to_le_bytes())
            .unwrap()
    );
    let request = |version| {
        let mut request = Vec::new();
        Age { lost: 2, who: 1 }.encode(&mut request);
        encode_validate(
            &[ReadItem {
                partition: PRIMARY,
                table: TABLE,
                key: Key::from(1),
                version,
            }],
            &mut request,
        );
        request
    };
    // A validation that passes reserves nothing: nothing would release it.
    assert_eq!(
        call(Participant::validate_aged, &mut p, &request(1)),
        GRANTED
    );
    assert!(p.store().reservations().is_empty());
    // One that fails reserves what it read against later writers.
    assert_eq!(
        call(Participant::validate_aged, &mut p, &request(0)),
        REFUSED
    );
    assert_eq!(p.store().reservations().len(), 1);
    let writer = record(1, vec![write(PRIMARY, 1, 1, 11)], 0);
    assert_eq!(call(Participant::lock, &mut p, &writer), REFUSED);
    // Objects of partitions this node is not primary of are never reserved.
    let mut backup_item = Vec::new();
    Age { lost: 2, who: 1 }.encode(&mut backup_item);
    encode_validate(
        &[ReadItem {
            partition: BACKUP,
            table: TABLE,
            key: Key::from(5),
            version: 3,
        }],
        &mut backup_item,
    );
    assert_eq!(
        call(Participant::validate_aged, &mut p, &backup_item),
        REFUSED
    );
    assert_eq!(p.store().reservations().len(), 1);
}

#[test]
fn a_copy_being_filled_refuses_reclaim_checks_until_its_fill_is_done() {
    use ferrotx_txn::reclaim::{ReclaimRequest, decode_check_response, encode_reclaim};
    use ferrotx_txn::refill::Fill;
    let schema = [TableSpec::fixed(1, "accounts", 8)];
    let filling = Arc::new(Partition::new(PartitionId(BACKUP), &schema));
    // The tombstone of key 3 at version 2, applied here.
    filling.apply(TABLE, &Key::from(3), 2, None).unwrap();
    let fill = Arc::new(Fill::new(BACKUP));
    let mut store = NodeStore::new();
    store.host_filling(filling, fill.clone());
    let mut p = Participant::new(Arc::new(store));
    let mut request = Vec::new();
    encode_reclaim(
        &ReclaimRequest {
            partition: BACKUP,
            table: TABLE,
            keys: vec![(Key::from(3), 2)],
        },
        &mut request,
    );
    // A FETCH answer read before the delete may still be on its way: refused.
    let answer = call(Participant::reclaim_check, &mut p, &request);
    assert_eq!(decode_check_response(&answer, 1), None);
    fill.set_done();
    let answer = call(Participant::reclaim_check, &mut p, &request);
    assert_eq!(decode_check_response(&answer, 1), Some(vec![true]));
}
