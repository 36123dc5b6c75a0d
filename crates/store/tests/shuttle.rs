//! The header protocol under shuttle's randomized scheduler, which interleaves every
//! atomic access of the header and the value words (run with `--features shuttle`).
//! Shuttle explores interleavings under sequential consistency, so it finds protocol
//! errors (a missing check, a lock that is not exclusive), not missing fences.
#![cfg(feature = "shuttle")]

use std::sync::Arc;

use ferrotx_store::{Object, ReadError, ValueSize};

fn value(n: u64, words: usize) -> Vec<u8> {
    (0..words).flat_map(|_| n.to_le_bytes()).collect()
}

/// Two writers each install two values while a reader reads three times, in every
/// interleaving shuttle tries: the value of version v is `words(v)` words, each v, so a
/// read that mixes two writes (or two places of the value) shows as a wrong length or
/// unequal words, and must never be accepted.
fn a_reader_never_accepts_a_torn_value_of(size: ValueSize, words: fn(u64) -> usize) {
    shuttle::check_random(
        move || {
            let object = Arc::new(Object::new(1, &value(1, words(1)), size));
            let writers: Vec<_> = (0..2)
                .map(|_| {
                    let object = object.clone();
                    shuttle::thread::spawn(move || {
                        for _ in 0..2 {
                            let version = object.header().version();
                            if object.try_lock(version).is_ok() {
                                object.install(Some(&value(version + 1, words(version + 1))));
                            }
                        }
                    })
                })
                .collect();
            let mut out = Vec::new();
            for _ in 0..3 {
                match object.read(&mut out) {
                    Ok(outcome) => {
                        assert_eq!(out.len(), words(outcome.version) * 8, "torn length");
                        assert!(
                            out.chunks(8)
                                .all(|w| u64::from_le_bytes(w.try_into().unwrap())
                                    == outcome.version),
                            "torn: {out:?}"
                        );
                    }
                    Err(ReadError::Locked | ReadError::Contended) => {}
                }
            }
            for w in writers {
                w.join().unwrap();
            }
        },
        20_000,
    );
}

#[test]
fn a_reader_never_accepts_a_torn_value() {
    // 3 and 8 words: inside the record (fixed-size values up to 1 KiB are).
    a_reader_never_accepts_a_torn_value_of(ValueSize::Fixed(24), |_| 3);
    a_reader_never_accepts_a_torn_value_of(ValueSize::Fixed(64), |_| 8);
}

#[test]
fn a_reader_never_accepts_a_torn_value_that_moves_between_object_and_buffer() {
    // 2 words (in the object) at odd versions and 8 (in its own buffer, past the
    // object's 32 bytes) at even ones.
    a_reader_never_accepts_a_torn_value_of(ValueSize::Variable(256), |version| {
        if version % 2 == 1 { 2 } else { 8 }
    });
}

#[test]
fn a_lock_is_held_by_one_writer_at_a_time() {
    shuttle::check_random(
        || {
            let object = Arc::new(Object::new(1, &0u64.to_le_bytes(), ValueSize::Fixed(8)));
            let threads: Vec<_> = (0..3)
                .map(|_| {
                    let object = object.clone();
                    shuttle::thread::spawn(move || {
                        let mut out = Vec::new();
                        loop {
                            let Ok(outcome) = object.read(&mut out) else {
                                continue;
                            };
                            let n = u64::from_le_bytes(out[..8].try_into().unwrap());
                            if object.try_lock(outcome.version).is_ok() {
                                object.install(Some(&(n + 1).to_le_bytes()));
                                return;
                            }
                            shuttle::thread::yield_now();
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let mut out = Vec::new();
            let outcome = object.read(&mut out).unwrap();
            assert_eq!(
                u64::from_le_bytes(out[..8].try_into().unwrap()),
                3,
                "an increment was lost"
            );
            assert_eq!(outcome.version, 4);
        },
        20_000,
    );
}

/// A deleted key's object reclaimed while a writer inserts the key again and a reader
/// reads it, in every interleaving shuttle tries: the writer's insert lands either on
/// the old object (and the reclaim gives up) or on a new one at the floor, never on a
/// dead one; the reader sees the key's versions only go forward, and a present value only
/// as the writer wrote it.
#[test]
fn a_reclaim_races_an_insert_and_a_read_of_the_same_key() {
    use ferrotx_store::{Key, Partition, PartitionId, TableId, TableSpec};
    shuttle::check_random(
        || {
            let table = TableId(1);
            let key = Key::from(7);
            let partition = Arc::new(Partition::new(
                PartitionId(0),
                &[TableSpec::fixed(1, "t", 8)],
            ));
            partition.load(table, key, &1u64.to_le_bytes()).unwrap();
            partition.lock(table, &key, 1).unwrap().unwrap();
            assert_eq!(partition.install(table, &key, None), Ok(2));
            let reclaimer = {
                let partition = partition.clone();
                shuttle::thread::spawn(move || partition.reclaim(table, &key, 2).unwrap())
            };
            let writer = {
                let partition = partition.clone();
                shuttle::thread::spawn(move || {
                    let mut out = Vec::new();
                    for _ in 0..3 {
                        let Ok(read) = partition.read(table, &key, &mut out).unwrap() else {
                            continue;
                        };
                        if !read.present
                            && partition.lock(table, &key, read.version).unwrap().is_ok()
                        {
                            return Some(
                                partition
                                    .install(table, &key, Some(&99u64.to_le_bytes()))
                                    .unwrap(),
                            );
                        }
                    }
                    None
                })
            };
            let mut out = Vec::new();
            let mut last = 0;
            for _ in 0..3 {
                if let Ok(read) = partition.read(table, &key, &mut out).unwrap() {
                    assert!(
                        read.version >= last,
                        "went back from {last} to {}",
                        read.version
                    );
                    last = read.version;
                    if read.present {
                        assert_eq!(out, 99u64.to_le_bytes());
                    }
                }
            }
            let reclaimed = reclaimer.join().unwrap();
            let installed = writer.join().unwrap();
            let read = partition.read(table, &key, &mut out).unwrap().unwrap();
            match installed {
                // On the old object (at 2) or a new one at the floor (2): version 3.
                Some(version) => {
                    assert_eq!(version, 3);
                    assert!(read.present && read.version == 3);
                    assert_eq!(partition.objects(table).unwrap(), 1);
                }
                None => {
                    assert!(!read.present);
                    assert_eq!(
                        read.version, 2,
                        "absent, at its tombstone's version or the floor"
                    );
                }
            }
            if reclaimed {
                assert_eq!(partition.floor(table, &key).unwrap(), 2);
            }
        },
        20_000,
    );
}
