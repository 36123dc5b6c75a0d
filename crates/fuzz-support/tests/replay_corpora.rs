//! Replays every committed fuzz input (`fuzz/corpus/<target>/*` and
//! `fuzz/regressions/<target>/*`) through the body its cargo-fuzz target runs, so that CI,
//! which cannot run cargo-fuzz, still checks every input the fuzzers kept and every crash
//! they found. A failure names the file: replay it under the fuzzer with
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>` (from `fuzz/`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use ferrotx_fuzz_support::{
    corpus, membership, participant, redis_session, resp_parser, wire_decode,
};

/// Runs every committed input of `target` through `body`; fails with the files that
/// panicked.
fn replay(target: &str, body: fn(&[u8])) {
    let inputs = corpus::inputs(target);
    assert!(
        !inputs.is_empty(),
        "no committed inputs for {target} under {}",
        corpus::fuzz_dir().display()
    );
    let mut failed = Vec::new();
    for path in &inputs {
        let data = std::fs::read(path).expect("a readable corpus file");
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: inputs that panic: {failed:#?}"
    );
}

#[test]
fn decode_corpus() {
    replay("decode", wire_decode::run);
}

#[test]
fn resp_parser_corpus() {
    replay("resp_parser", resp_parser::run);
}

#[test]
fn redis_session_corpus() {
    replay("redis_session", redis_session::run);
}

#[test]
fn membership_corpus() {
    replay("membership", membership::run);
}

#[test]
fn participant_corpus() {
    replay("participant", participant::run);
}
