//! The list-append workload (Elle's): transactions append unique elements to lists and
//! read whole lists, over a few keys so that they conflict; the history they record is
//! checked by [`crate::check::list_append`].
//!
//! Three layers, so that each front end reuses what it can:
//!
//! - [`Generator`]: from a seeded [`ChaCha8Rng`] (no other randomness, no clock), the
//!   operations of the next transaction, 1 to [`OPS_PER_TXN_MAX`] of them. One
//!   transaction may append to a key twice, which lets the checker see intermediate reads
//!   (G1b).
//! - [`run_one`]: runs one transaction over ferrotx's Rust API, a list stored as the
//!   little-endian `u64`s of its elements in the workload's table ([`table_spec`]), each
//!   append a read-modify-write.
//! - [`redis_request`] and [`parse_redis_reply`]: the same transaction as the Redis
//!   commands `MULTI`, `APPEND`, `GET`, `EXEC` in RESP, and its replies back into the
//!   recorded operations, without any I/O (the simulator carries the bytes). Over Redis
//!   a list is a string of decimal elements each followed by a comma, so `APPEND key
//!   "e,"` appends an element.
//!
//! Lists are bounded: the generator appends at most `appends_per_key_max` elements to a
//! key per client (reads instead after that), and [`run_one`] skips, and does not
//! record, an append to a list already [`LIST_ELEMENTS_MAX`] long.

use std::collections::BTreeMap;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId, TableSpec};
use ferrotx_txn::coordinator::{Abort, Coordinator};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub use crate::check::list_append::{Element, ListKey, MicroOp, Outcome, Transaction};

/// The most operations of one transaction: enough to read and append to a few keys,
/// few enough that most transactions commit under contention.
pub const OPS_PER_TXN_MAX: u64 = 4;

/// The longest list the Rust executor builds. A list is rewritten whole on every append,
/// so its length bounds each write (2 KiB) and the check's work per read.
pub const LIST_ELEMENTS_MAX: usize = 256;

/// Bytes of one element in the store's encoding (a little-endian `u64`).
pub const ELEMENT_BYTES: usize = 8;

/// The element a malformed stored value or Redis reply is read as: no client appends it
/// ([`Generator`] refuses the client id that could), so the checker reports it as
/// garbage.
pub const MALFORMED_ELEMENT: Element = Element::MAX;

/// The workload's table: variable-size values, each a list of at most
/// [`LIST_ELEMENTS_MAX`] elements.
pub fn table_spec(id: u16) -> TableSpec {
    TableSpec::variable(id, "lists", LIST_ELEMENTS_MAX * ELEMENT_BYTES)
}

/// Generates the transactions of one client.
#[derive(Clone, Debug)]
pub struct Generator {
    client: u32,
    keys: u64,
    appends_per_key_max: u32,
    /// Elements this client appended so far, the low half of the next element.
    appended: u32,
    /// Appends of this client to each key so far.
    appended_per_key: Vec<u32>,
}

impl Generator {
    /// A generator for client `client` (unique among the clients of a history: its
    /// elements are `client << 32 | counter`, unique across keys and clients) over keys
    /// `0..keys`, appending at most `appends_per_key_max` elements to each key.
    pub fn new(client: u32, keys: u64, appends_per_key_max: u32) -> Self {
        assert!(
            client < u32::MAX,
            "the last client id would append MALFORMED_ELEMENT"
        );
        assert!(keys > 0, "a workload needs a key");
        let slots = usize::try_from(keys).expect("the key count fits memory");
        Self {
            client,
            keys,
            appends_per_key_max,
            appended: 0,
            appended_per_key: vec![0; slots],
        }
    }

    /// The operations of the next transaction: reads (their lists `None` until run) and
    /// appends of fresh elements, over uniformly chosen keys.
    pub fn next_ops(&mut self, rng: &mut ChaCha8Rng) -> Vec<MicroOp> {
        let count = rng.random_range(1..=OPS_PER_TXN_MAX);
        let mut ops = Vec::new();
        for _ in 0..count {
            let key = rng.random_range(0..self.keys);
            let slot = usize::try_from(key).expect("a key below the key count");
            let full = self.appended_per_key[slot] >= self.appends_per_key_max;
            if rng.random_bool(0.5) && !full {
                self.appended = self
                    .appended
                    .checked_add(1)
                    .expect("a client appends fewer than 2^32 elements");
                self.appended_per_key[slot] += 1;
                let element = (u64::from(self.client) << 32) | u64::from(self.appended);
                ops.push(MicroOp::Append { key, element });
            } else {
                ops.push(MicroOp::Read { key, list: None });
            }
        }
        ops
    }
}

/// A list in the store's encoding.
pub fn encode_list(list: &[Element]) -> Vec<u8> {
    list.iter().flat_map(|e| e.to_le_bytes()).collect()
}

/// A list from the store's encoding; a trailing partial element is read as
/// [`MALFORMED_ELEMENT`].
pub fn decode_list(bytes: &[u8]) -> Vec<Element> {
    let chunks = bytes.chunks_exact(ELEMENT_BYTES);
    let malformed = !chunks.remainder().is_empty();
    let mut list: Vec<Element> = chunks
        .map(|c| Element::from_le_bytes(c.try_into().expect("an exact chunk")))
        .collect();
    if malformed {
        list.push(MALFORMED_ELEMENT);
    }
    list
}

/// Runs the transaction `ops` (from [`Generator::next_ops`]) as transaction `id`
/// through `coordinator`, over the workload's table `table`, and records it. `clock`
/// gives the history's event counter (shared by every client, each call a later value),
/// read before the transaction begins and after its outcome is known.
///
/// Every read and every append reads the key (appends by read-modify-write); an append
/// to a list already [`LIST_ELEMENTS_MAX`] long is skipped and not recorded. A commit
/// that fails with [`Abort::Protocol`] is recorded as indeterminate (a participant
/// refused a message mid-commit, so the client cannot be sure), and so is one whose
/// outcome recovery did not tell ([`Abort::OutcomeUnknown`]); every other failure
/// happens before the commit point and is an abort.
pub async fn run_one(
    co: &Co,
    coordinator: &Coordinator,
    table: TableId,
    id: u64,
    ops: &[MicroOp],
    clock: &dyn Fn() -> u64,
) -> Transaction {
    let start = clock();
    let mut tx = coordinator.begin(co);
    let mut recorded = Vec::with_capacity(ops.len());
    let executed = async {
        for op in ops {
            match *op {
                MicroOp::Read { key, .. } => {
                    let value = tx.read(table, Key::from(key)).await?;
                    let list = value.as_deref().map_or_else(Vec::new, decode_list);
                    recorded.push(MicroOp::Read {
                        key,
                        list: Some(list),
                    });
                }
                MicroOp::Append { key, element } => {
                    let value = tx.read(table, Key::from(key)).await?;
                    let mut list = value.as_deref().map_or_else(Vec::new, decode_list);
                    if list.len() >= LIST_ELEMENTS_MAX {
                        continue;
                    }
                    list.push(element);
                    tx.write(table, Key::from(key), Some(encode_list(&list)))
                        .await?;
                    recorded.push(MicroOp::Append { key, element });
                }
            }
        }
        Ok::<(), Abort>(())
    }
    .await;
    let outcome = match executed {
        Err(_) => Outcome::Aborted,
        Ok(()) => match tx.commit().await {
            Ok(()) => Outcome::Committed,
            Err(Abort::Protocol | Abort::OutcomeUnknown) => Outcome::Indeterminate,
            Err(_) => Outcome::Aborted,
        },
    };
    let end = clock();
    Transaction {
        id,
        start,
        end,
        outcome,
        ops: recorded,
    }
}

/// Reads lists `0..keys` in one read-only transaction: the final reads to pass the
/// checker once every client has finished. An abort (a commit still finishing holds a
/// lock) is returned for the caller to retry.
pub async fn read_lists(
    co: &Co,
    coordinator: &Coordinator,
    table: TableId,
    keys: u64,
) -> Result<BTreeMap<ListKey, Vec<Element>>, Abort> {
    let mut tx = coordinator.begin_read_only(co);
    let mut lists = BTreeMap::new();
    for key in 0..keys {
        let value = tx.read(table, Key::from(key)).await?;
        lists.insert(key, value.as_deref().map_or_else(Vec::new, decode_list));
    }
    tx.commit().await?;
    Ok(lists)
}

/// The Redis key of list `key`.
pub fn redis_key(key: ListKey) -> Vec<u8> {
    format!("list:{key}").into_bytes()
}

/// The transaction `ops` as Redis commands in RESP: `MULTI`, then `APPEND key "e,"` for
/// each append and `GET key` for each read, then `EXEC`.
pub fn redis_request(ops: &[MicroOp]) -> Vec<u8> {
    let mut out = Vec::new();
    command(&mut out, &[b"MULTI"]);
    for op in ops {
        match op {
            MicroOp::Append { key, element } => command(
                &mut out,
                &[
                    b"APPEND",
                    &redis_key(*key),
                    format!("{element},").as_bytes(),
                ],
            ),
            MicroOp::Read { key, .. } => command(&mut out, &[b"GET", &redis_key(*key)]),
        }
    }
    command(&mut out, &[b"EXEC"]);
    out
}

/// Appends one command, an array of bulk strings.
fn command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
}

/// Why the replies to a [`redis_request`] could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The replies stop before EXEC's ends; call again with more bytes.
    #[error("the replies are incomplete; wait for more bytes")]
    Incomplete,
    /// The bytes are not RESP, or not the replies such a request gets.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

/// Reads the replies to `redis_request(ops)` (the `+OK` of MULTI, one `+QUEUED` or
/// error per command, then EXEC's reply) into the outcome and the recorded operations:
///
/// - an array: committed; each read records its list (a missing key is the empty list)
///   and each append is recorded, except a command whose own reply is an error (its read
///   is recorded as unknown, its append as not done);
/// - a null array or an `EXECABORT` error: aborted (nothing was applied);
/// - any other error: indeterminate (the server may have failed after applying).
///
/// The reads of a transaction that did not commit are recorded as unknown. Returns the
/// operations and how many bytes the replies took.
pub fn parse_redis_reply(
    ops: &[MicroOp],
    bytes: &[u8],
) -> Result<(Outcome, Vec<MicroOp>, usize), ReplyError> {
    let mut at = 0;
    match parse_value(bytes, &mut at, 0)? {
        Value::Simple(ok) if ok == b"OK" => {}
        other => return Err(unexpected("MULTI", &other)),
    }
    for _ in ops {
        match parse_value(bytes, &mut at, 0)? {
            Value::Simple(queued) if queued == b"QUEUED" => {}
            Value::Error(_) => {}
            other => return Err(unexpected("a queued command", &other)),
        }
    }
    let unknown = || {
        ops.iter()
            .map(|op| match op {
                MicroOp::Read { key, .. } => MicroOp::Read {
                    key: *key,
                    list: None,
                },
                append => append.clone(),
            })
            .collect()
    };
    let results = match parse_value(bytes, &mut at, 0)? {
        Value::Array(Some(results)) if results.len() == ops.len() => results,
        Value::Array(None) | Value::Null => return Ok((Outcome::Aborted, unknown(), at)),
        // EXECABORT, and -TRYAGAIN / -CLUSTERDOWN (ferrotx: it certainly took no
        // effect), are definite aborts, which the checker holds the front end to.
        Value::Error(error)
            if error.starts_with(b"EXECABORT")
                || error.starts_with(b"TRYAGAIN")
                || error.starts_with(b"CLUSTERDOWN") =>
        {
            return Ok((Outcome::Aborted, unknown(), at));
        }
        Value::Error(_) => return Ok((Outcome::Indeterminate, unknown(), at)),
        other => return Err(unexpected("EXEC", &other)),
    };
    let mut recorded = Vec::with_capacity(ops.len());
    for (op, result) in ops.iter().zip(results) {
        match (op, result) {
            (MicroOp::Append { .. }, Value::Error(_)) => {}
            (MicroOp::Append { .. }, Value::Integer) => recorded.push(op.clone()),
            (MicroOp::Read { key, .. }, Value::Error(_)) => recorded.push(MicroOp::Read {
                key: *key,
                list: None,
            }),
            (MicroOp::Read { key, .. }, Value::Bulk(value)) => recorded.push(MicroOp::Read {
                key: *key,
                list: Some(value.as_deref().map_or_else(Vec::new, parse_redis_list)),
            }),
            (MicroOp::Read { key, .. }, Value::Null) => recorded.push(MicroOp::Read {
                key: *key,
                list: Some(Vec::new()),
            }),
            (_, other) => return Err(unexpected("a command inside EXEC", &other)),
        }
    }
    Ok((Outcome::Committed, recorded, at))
}

/// A list from its Redis string, `e1,e2,...,en,`; a piece that is not a decimal element
/// is read as [`MALFORMED_ELEMENT`].
pub fn parse_redis_list(value: &[u8]) -> Vec<Element> {
    let mut pieces: Vec<&[u8]> = value.split(|&b| b == b',').collect();
    // A well-formed list ends with a comma, leaving one empty piece last.
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    } else if !pieces.is_empty() {
        // A missing last comma is malformed: the last piece is kept and flagged below.
        pieces.push(b"");
    }
    pieces
        .into_iter()
        .map(|piece| {
            std::str::from_utf8(piece)
                .ok()
                .and_then(|s| s.parse::<Element>().ok())
                .filter(|&e| e != MALFORMED_ELEMENT)
                .unwrap_or(MALFORMED_ELEMENT)
        })
        .collect()
}

/// A RESP reply, as far as this workload needs.
#[derive(Debug)]
enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    /// An integer (its value is not needed: APPEND's length).
    Integer,
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
    /// RESP3's null.
    Null,
}

/// How deep replies nest here: EXEC's array of plain replies.
const REPLY_DEPTH_MAX: usize = 1;

/// The most elements of an array reply accepted: far above a transaction's
/// [`OPS_PER_TXN_MAX`] commands, and small enough that a corrupt length cannot make the
/// parser reserve much memory.
const REPLY_ARRAY_MAX: usize = 1024;

fn unexpected(what: &str, value: &Value) -> ReplyError {
    ReplyError::Unexpected(format!("{what} got {value:?}"))
}

/// Parses one reply at `*at`, moving `*at` past it.
fn parse_value(bytes: &[u8], at: &mut usize, depth: usize) -> Result<Value, ReplyError> {
    let line = read_line(bytes, at)?;
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| ReplyError::Unexpected("an empty line".to_owned()))?;
    let number = || -> Result<i64, ReplyError> {
        std::str::from_utf8(rest)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ReplyError::Unexpected(format!("a bad number {rest:?}")))
    };
    match kind {
        b'+' => Ok(Value::Simple(rest.to_vec())),
        b'-' => Ok(Value::Error(rest.to_vec())),
        b':' => number().map(|_| Value::Integer),
        b'_' => Ok(Value::Null),
        b'$' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Value::Bulk(None));
            };
            let end = at
                .checked_add(len)
                .ok_or_else(|| ReplyError::Unexpected("a bulk string too long".to_owned()))?;
            if bytes.len() < end.saturating_add(2) {
                return Err(ReplyError::Incomplete);
            }
            if &bytes[end..end + 2] != b"\r\n" {
                return Err(ReplyError::Unexpected(
                    "a bulk string without its CRLF".to_owned(),
                ));
            }
            let value = bytes[*at..end].to_vec();
            *at = end + 2;
            Ok(Value::Bulk(Some(value)))
        }
        b'*' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Value::Array(None));
            };
            if depth >= REPLY_DEPTH_MAX || len > REPLY_ARRAY_MAX {
                return Err(ReplyError::Unexpected(format!(
                    "an array of {len} at depth {depth}"
                )));
            }
            let mut values = Vec::with_capacity(len);
            for _ in 0..len {
                values.push(parse_value(bytes, at, depth + 1)?);
            }
            Ok(Value::Array(Some(values)))
        }
        other => Err(ReplyError::Unexpected(format!(
            "an unknown reply type {:?}",
            char::from(other)
        ))),
    }
}

/// The line at `*at` without its CRLF, moving `*at` past it.
fn read_line<'a>(bytes: &'a [u8], at: &mut usize) -> Result<&'a [u8], ReplyError> {
    let rest = bytes.get(*at..).unwrap_or_default();
    let len = rest
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or(ReplyError::Incomplete)?;
    *at += len + 2;
    Ok(&rest[..len])
}

#[cfg(test)]
mod tests;
