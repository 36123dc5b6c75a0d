//! The header protocol under real threads: readers never accept a torn or unpublished
//! value, and locks are exclusive. Counts are checked, not timed.
#![cfg(not(feature = "shuttle"))]
// The sans-IO lint (lints/sans-io.clippy.toml) bans threads and clocks in this crate; these
// tests exist to run the store's lock-free structures under real threads, and time only
// how long to keep them racing.
#![allow(
    clippy::disallowed_methods,
    reason = "concurrency tests of the store run real threads and bound their run by time"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferrotx_store::{
    Key, Object, Partition, PartitionId, ReadError, TableId, TableSpec, ValueSize,
};

/// A value whose every 8-byte word is `n`: a torn copy shows as unequal words.
fn value(n: u64, words: usize) -> Vec<u8> {
    (0..words).flat_map(|_| n.to_le_bytes()).collect()
}

#[test]
fn readers_see_only_whole_published_values() {
    const WORDS: usize = 64;
    let object = Arc::new(Object::new(
        1,
        &value(1, WORDS),
        ValueSize::Fixed(WORDS * 8),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let writer = {
        let (object, stop, published) = (object.clone(), stop.clone(), published.clone());
        std::thread::spawn(move || {
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let version = object.header().version();
                if object.try_lock(version).is_ok() {
                    // The value written at version v + 1 is v + 1 in every word.
                    assert_eq!(
                        object.install(Some(&value(version + 1, WORDS))),
                        version + 1
                    );
                    writes += 1;
                    published.store(writes, Ordering::Relaxed);
                }
            }
            writes
        })
    };
    let mut out = Vec::new();
    let (mut consistent, mut locked) = (0u64, 0u64);
    // At least 200,000 reads, and on a loaded machine (the writer thread not yet
    // scheduled) on until the writer has published and a read was consistent.
    let start = std::time::Instant::now();
    let mut reads = 0;
    while reads < 200_000
        || ((published.load(Ordering::Relaxed) == 0 || consistent == 0)
            && start.elapsed() < std::time::Duration::from_secs(20))
    {
        reads += 1;
        match object.read(&mut out) {
            Ok(outcome) => {
                assert_eq!(out.len(), WORDS * 8);
                let first = u64::from_le_bytes(out[..8].try_into().unwrap());
                assert!(
                    out.chunks(8)
                        .all(|w| u64::from_le_bytes(w.try_into().unwrap()) == first),
                    "torn read"
                );
                assert_eq!(
                    first, outcome.version,
                    "value and version from different writes"
                );
                consistent += 1;
            }
            Err(ReadError::Locked | ReadError::Contended) => locked += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(
        writes > 0 && consistent > 0,
        "writes {writes}, consistent reads {consistent}, locked {locked}"
    );
}

#[test]
fn concurrent_increments_through_locks_lose_nothing() {
    const THREADS: u64 = 4;
    const INCREMENTS: u64 = 20_000;
    let partition = Arc::new(Partition::new(
        PartitionId(0),
        &[TableSpec::fixed(1, "counters", 8)],
    ));
    let table = TableId(1);
    let key = Key::from(1);
    assert!(partition.load(table, key, &0u64.to_le_bytes()).unwrap());
    let conflicts = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (partition, conflicts) = (partition.clone(), conflicts.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut done = 0;
                while done < INCREMENTS {
                    // Optimistic read-modify-write, as a transaction does it.
                    let Ok(outcome) = partition.read(table, &key, &mut out).unwrap() else {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let n = u64::from_le_bytes(out[..8].try_into().unwrap());
                    if partition
                        .lock(table, &key, outcome.version)
                        .unwrap()
                        .is_err()
                    {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    partition
                        .install(table, &key, Some(&(n + 1).to_le_bytes()))
                        .unwrap();
                    done += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut out = Vec::new();
    let outcome = partition.read(table, &key, &mut out).unwrap().unwrap();
    assert_eq!(
        u64::from_le_bytes(out[..8].try_into().unwrap()),
        THREADS * INCREMENTS
    );
    assert_eq!(outcome.version, 1 + THREADS * INCREMENTS);
}

/// Keys set and deleted nonstop, their objects reclaimed and their records made again for
/// newer keys, while readers read keys old and new: a reader must only ever see a key's
/// own value (never that of the key its record was made again for), and each key's
/// versions must never go back (a key with no object reads at the floor, which covers
/// every reclaimed version).
#[test]
fn readers_never_see_a_reclaimed_record_as_another_key_nor_a_version_go_back() {
    const KEYS: u64 = 60_000;
    const WINDOW: u64 = 500;
    let partition = Arc::new(Partition::new(
        PartitionId(0),
        &[TableSpec::variable(1, "kv", 64)],
    ));
    let table = TableId(1);
    // The value of key k: its number, then (for some keys) more bytes, so values move
    // between the record and a buffer of their own.
    let value = |k: u64| -> Vec<u8> {
        let mut v = k.to_le_bytes().to_vec();
        v.resize(if k.is_multiple_of(3) { 48 } else { 8 }, (k % 251) as u8);
        v
    };
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let (partition, written, done) = (partition.clone(), written.clone(), done.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut last_seen = std::collections::BTreeMap::new();
                let (mut x, mut present) = (t + 7, 0u64);
                while !done.load(Ordering::Relaxed) {
                    let n = written.load(Ordering::Acquire);
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Keys live, just deleted, long gone, and not yet written.
                    let k = (n + WINDOW).saturating_sub(x % (3 * WINDOW));
                    let key = Key::from(k);
                    let Ok(read) = partition.read(table, &key, &mut out).unwrap() else {
                        continue;
                    };
                    if read.present {
                        assert_eq!(out, value(k), "key {k} read another key's value");
                        present += 1;
                    }
                    let last = last_seen.entry(k).or_insert(0);
                    assert!(
                        read.version >= *last,
                        "key {k} went back from {last} to {}",
                        read.version
                    );
                    *last = read.version;
                }
                present
            })
        })
        .collect();
    let mut reclaimed = 0;
    for k in 0..KEYS {
        let key = Key::from(k);
        // A new object starts at no lower a version than the key read at without one.
        let mut check = Vec::new();
        let absent = partition.read(table, &key, &mut check).unwrap().unwrap();
        let version = partition.lock_any(table, &key).unwrap().unwrap();
        assert!(!absent.present && version >= absent.version);
        partition.install(table, &key, Some(&value(k))).unwrap();
        written.store(k, Ordering::Release);
        if k >= WINDOW {
            let old = Key::from(k - WINDOW);
            partition.lock_any(table, &old).unwrap().unwrap();
            let tombstone = partition.install(table, &old, None).unwrap();
            reclaimed += usize::from(partition.reclaim(table, &old, tombstone).unwrap());
        }
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0, "the readers saw keys present");
    }
    assert_eq!(reclaimed as u64, KEYS - WINDOW);
    assert_eq!(partition.objects(table).unwrap() as u64, WINDOW);
    assert!(partition.floor_max(table).unwrap() > 0);
}
