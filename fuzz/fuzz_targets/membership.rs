//! Fuzz target for membership messages and state machines: decoding never panics and
//! round-trips, and a cluster of `Membership`s whose datagrams the fuzzer schedules,
//! corrupts and forges never panics. The body is `ferrotx_fuzz_support::membership::run`,
//! which CI replays the corpus through.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrotx_fuzz_support::membership::run(data));
