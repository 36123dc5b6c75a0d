//! Fuzz target for a whole Redis connection (parser, session, MULTI/WATCH, pipelines)
//! over an in-memory store: never panics, and answers whole RESP replies. The body is
//! `ferrotx_fuzz_support::redis_session::run`, which CI replays the corpus through.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrotx_fuzz_support::redis_session::run(data));
