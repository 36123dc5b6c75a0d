//! Fuzz target for the RESP request parser: never panics, and finds the same requests
//! whether the bytes arrive whole or in pieces. The body is
//! `ferrotx_fuzz_support::resp_parser::run`, which CI replays the corpus through.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrotx_fuzz_support::resp_parser::run(data));
