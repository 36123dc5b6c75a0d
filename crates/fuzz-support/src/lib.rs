//! The bodies of ferrotx's fuzz targets, one module per target.
//!
//! Each module's `run` takes the fuzzer's bytes and panics only on a bug: a decoder or
//! state machine that panics on what the network or a client may send, or a broken
//! property the module's documentation states. The cargo-fuzz targets in `fuzz/` are
//! one line each around these functions, and this crate's tests
//! (`tests/replay_corpora.rs`) run every committed input of `fuzz/corpus/<target>` and
//! `fuzz/regressions/<target>` through the same functions, so CI checks the corpora
//! without cargo-fuzz or a nightly compiler.
//!
//! | target | what it drives |
//! | --- | --- |
//! | [`wire_decode`] | `ferrotx_wire::decode`, the RPC datagram decoder |
//! | [`resp_parser`] | `ferrotx_resp::RequestParser`, fed whole and in pieces |
//! | [`redis_session`] | a `ferrotx_redis_exec::RespConnection` (parser, session, MULTI/WATCH, pipelines) over an in-memory store |
//! | [`membership`] | `ferrotx_membership::Message::decode`, and a cluster of `Membership` state machines whose messages the fuzzer delivers, drops, repeats and forges |
//! | [`participant`] | a `ferrotx_txn::participant::Participant` with a store, fed sequences of LOCK, VALIDATE, COMMIT-*, ABORT, TRUNCATE, RECLAIM, FETCH, ... |

pub mod corpus;
pub mod membership;
pub mod participant;
pub mod redis_session;
pub mod resp_parser;
#[doc(hidden)]
pub mod seeds;
pub mod wire_decode;

/// A target's body: runs one input, panics on a bug.
pub type Body = fn(&[u8]);

/// Appends the operations left in `input`, up to `max`, one `Debug` line each: what a
/// target's `describe` prints of a crash's input.
fn describe_ops<'a, Op: arbitrary::Arbitrary<'a> + std::fmt::Debug>(
    input: &mut arbitrary::Unstructured<'a>,
    max: usize,
    lines: &mut String,
) {
    for _ in 0..max {
        if input.is_empty() {
            break;
        }
        match Op::arbitrary(input) {
            Ok(op) => lines.push_str(&format!("{op:?}\n")),
            Err(_) => break,
        }
    }
}

/// Every target: its name (the cargo-fuzz target's and its corpus directory's) and body.
pub const TARGETS: [(&str, Body); 5] = [
    ("decode", wire_decode::run),
    ("resp_parser", resp_parser::run),
    ("redis_session", redis_session::run),
    ("membership", membership::run),
    ("participant", participant::run),
];
