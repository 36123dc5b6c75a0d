//! Fuzz target for a transaction participant with a store, fed sequences of LOCK,
//! VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY, ABORT, TRUNCATE, RECLAIM, FETCH, ... and raw
//! bytes: it never panics. The body is `ferrotx_fuzz_support::participant::run`, which CI
//! replays the corpus through.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrotx_fuzz_support::participant::run(data));
