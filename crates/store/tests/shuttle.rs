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
