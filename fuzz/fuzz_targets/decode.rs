//! Fuzz target for the total wire decoder (ARCHITECTURE.md, "Wire format"): any byte
//! string must either decode or be rejected with a reason, never panic, and whatever is
//! accepted must iterate exactly as its headers announce. The body is
//! `ferrotx_fuzz_support::wire_decode::run`, which CI replays the corpus through.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrotx_fuzz_support::wire_decode::run(data));
