//! Redis plans shipped to their keys' primary ([`ferrotx_txn::ship`]): a plan whose keys
//! (and watched keys) all have one primary, and that writes, runs there in one RPC, in
//! the primary's queue of shipped operations, combined with the others waiting there.
//!
//! The plan travels as its commands' arguments (re-parsed at the primary, so both ends
//! agree on a command's meaning by construction) with the watched keys' versions; its
//! outcome comes back as the replies, encoded here.

use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_resp::command::{
    self, Command, DataCommand, ExpireTime, GetExExpiry, SetCondition, SetExpiry,
};
use ferrotx_resp::session::{WatchVersion, WatchedKey};
use ferrotx_resp::{ArgsBuf, Outcome, Overlay, Plan, Reply};
use ferrotx_store::{Key, TableId};
use ferrotx_txn::coordinator::{Abort, Coordinator, NO_PRIMARY};
use ferrotx_txn::ship::{BatchView, Procedure, Procedures};

use crate::kv_table::{KvTable, store_key};

/// The id of the Redis plan procedure, inside a SHIP request
/// (`ferrotx_wire::RequestType::Ship`). Procedure ids are not request types: each front end
/// chooses its own (the benchmarks' KV increment is 2, `ferrotx_workload::kv_ship`).
pub const REDIS_PLAN: u8 = 1;

/// The procedures of the Redis front end, for the nodes that serve `kv`.
pub fn procedures(kv: KvTable) -> Procedures {
    Procedures::default().with(REDIS_PLAN, Arc::new(PlanProcedure { kv }))
}

/// The partition to ship `plan` to: the partition of its first key, if it writes and
/// every key it touches or watches has that partition's primary. `None`: run it here.
pub fn ship_target(coordinator: &Coordinator, kv: KvTable, plan: &Plan) -> Option<u32> {
    if plan.is_read_only() {
        return None;
    }
    let mut keys = plan
        .commands()
        .iter()
        .flat_map(DataCommand::keys)
        .chain(plan.watched().iter().map(|w| w.key.as_slice()));
    let first = coordinator.partition_of(kv.id, &store_key(keys.next()?));
    let primary = coordinator.primary_of_partition(first);
    if primary == NO_PRIMARY {
        return None;
    }
    keys.all(|key| {
        coordinator.primary_of_partition(coordinator.partition_of(kv.id, &store_key(key)))
            == primary
    })
    .then_some(first)
}

/// Runs `plan` at the primary of `partition`: its outcome, or the abort that ended the
/// shipping (nothing changed, except [`Abort::OutcomeUnknown`]); [`Abort::Protocol`]
/// means the primary could not run it at all (nothing changed: run it here instead).
pub async fn ship_plan(
    co: &Co,
    coordinator: &Coordinator,
    plan: &Plan,
    partition: u32,
    deadline_ns: u64,
) -> Result<Outcome, Abort> {
    let mut args = Vec::new();
    encode_plan(plan, &mut args);
    let result = coordinator
        .ship(co, REDIS_PLAN, partition, &args, deadline_ns)
        .await?;
    decode_outcome(&result).ok_or(Abort::Protocol)
}

/// The procedure: a plan applied to the batch's values.
struct PlanProcedure {
    kv: KvTable,
}

impl Procedure for PlanProcedure {
    fn keys(&self, args: &[u8], keys: &mut Vec<(TableId, Key)>) -> Result<(), String> {
        let plan = decode_plan(args).map_err(|e| e.to_owned())?;
        let (read, unread) = plan.keys();
        for key in read.into_iter().chain(unread) {
            keys.push((self.kv.id, store_key(key)));
        }
        for watched in plan.watched() {
            keys.push((self.kv.id, store_key(&watched.key)));
        }
        Ok(())
    }

    fn apply(&self, args: &[u8], view: &mut BatchView, now_ns: u64, result: &mut Vec<u8>) {
        // Expiry is judged by the primary's clock, the same for every caller of the key.
        let now_ms = self.kv.unix_ms(now_ns);
        let outcome = match decode_plan(args) {
            Ok(plan) => self.run(&plan, view, now_ms),
            Err(error) => Outcome::Failed(Reply::error(format!("ERR ferrotx: {error}"))),
        };
        encode_outcome(&outcome, result);
    }
}

impl PlanProcedure {
    fn run(&self, plan: &Plan, view: &mut BatchView, now_ms: u64) -> Outcome {
        let table = self.kv.id;
        // A watched key written by an earlier operation of the batch has changed too, and
        // one that expired since WATCH has.
        let unchanged = plan.watched().iter().all(|w| {
            view.version(table, &store_key(&w.key))
                .is_some_and(|version| w.version.unchanged(version, now_ms))
        });
        if !unchanged {
            return Outcome::WatchedKeyChanged;
        }
        let (read, unread) = plan.keys();
        let mut overlay = Overlay::new(self.kv.stored_bytes_max, now_ms);
        for key in read {
            let Some(stored) = view.get(table, &store_key(key)) else {
                return Outcome::Failed(Reply::error_static("ERR ferrotx: a key was not read"));
            };
            if let Err(error) = overlay.insert_stored(key.to_vec(), stored) {
                return Outcome::Failed(Reply::error(format!(
                    "ERR ferrotx: the stored value of a key is unreadable: {error}"
                )));
            }
        }
        for key in unread {
            overlay.insert_unread(key.to_vec());
        }
        let replies = plan.apply(&mut overlay);
        for (key, value) in overlay.encoded_writes() {
            let key = Key::from_bytes(&key).expect("16 bytes");
            view.put(table, &key, value);
        }
        Outcome::Committed(replies)
    }
}

/// SET's and GETEX's option for `time`: EX, PX, EXAT or PXAT.
fn time_option(time: &ExpireTime) -> &'static str {
    match (time.millis, time.absolute) {
        (false, false) => "EX",
        (true, false) => "PX",
        (false, true) => "EXAT",
        (true, true) => "PXAT",
    }
}

/// A command as the arguments a client sends (the primary parses them again).
fn command_args(command: &DataCommand) -> Vec<Vec<u8>> {
    let word = |w: &str| w.as_bytes().to_vec();
    let number = |n: i64| n.to_string().into_bytes();
    match command {
        DataCommand::Get { key } => vec![word("GET"), key.clone()],
        DataCommand::Set {
            key,
            value,
            condition,
            get,
            expiry,
        } => {
            if let SetExpiry::At(time) = expiry
                && (time.command == "setex" || time.command == "psetex")
            {
                // SETEX and PSETEX (parsed as a SET that always writes).
                let name = if time.millis { "PSETEX" } else { "SETEX" };
                return vec![word(name), key.clone(), number(time.amount), value.clone()];
            }
            let mut args = vec![word("SET"), key.clone(), value.clone()];
            match condition {
                SetCondition::Always => {}
                SetCondition::IfAbsent => args.push(word("NX")),
                SetCondition::IfPresent => args.push(word("XX")),
            }
            if *get {
                args.push(word("GET"));
            }
            match expiry {
                SetExpiry::Clear => {}
                SetExpiry::Keep => args.push(word("KEEPTTL")),
                SetExpiry::At(time) => {
                    args.push(word(time_option(time)));
                    args.push(number(time.amount));
                }
            }
            args
        }
        DataCommand::GetEx { key, expiry } => {
            let mut args = vec![word("GETEX"), key.clone()];
            match expiry {
                GetExExpiry::Unchanged => {}
                GetExExpiry::Persist => args.push(word("PERSIST")),
                GetExExpiry::At(time) => {
                    args.push(word(time_option(time)));
                    args.push(number(time.amount));
                }
                GetExExpiry::NotAnInteger => {
                    args.push(word("EX"));
                    args.push(word("not-an-integer"));
                }
            }
            args
        }
        DataCommand::Expire {
            key,
            time,
            condition,
        } => {
            let name = match (time.millis, time.absolute) {
                (false, false) => "EXPIRE",
                (true, false) => "PEXPIRE",
                (false, true) => "EXPIREAT",
                (true, true) => "PEXPIREAT",
            };
            let mut args = vec![word(name), key.clone(), number(time.amount)];
            for (set, option) in [
                (condition.if_none, "NX"),
                (condition.if_some, "XX"),
                (condition.later, "GT"),
                (condition.earlier, "LT"),
            ] {
                if set {
                    args.push(word(option));
                }
            }
            args
        }
        DataCommand::Ttl {
            key,
            millis,
            absolute,
        } => {
            let name = match (millis, absolute) {
                (false, false) => "TTL",
                (true, false) => "PTTL",
                (false, true) => "EXPIRETIME",
                (true, true) => "PEXPIRETIME",
            };
            vec![word(name), key.clone()]
        }
        DataCommand::Persist { key } => vec![word("PERSIST"), key.clone()],
        DataCommand::SetNx { key, value } => vec![word("SETNX"), key.clone(), value.clone()],
        DataCommand::GetSet { key, value } => vec![word("GETSET"), key.clone(), value.clone()],
        DataCommand::GetDel { key } => vec![word("GETDEL"), key.clone()],
        DataCommand::Del { keys } => std::iter::once(word("DEL")).chain(keys.clone()).collect(),
        DataCommand::Exists { keys } => std::iter::once(word("EXISTS"))
            .chain(keys.clone())
            .collect(),
        DataCommand::IncrBy { key, delta } => vec![word("INCRBY"), key.clone(), number(*delta)],
        DataCommand::Append { key, value } => vec![word("APPEND"), key.clone(), value.clone()],
        DataCommand::Strlen { key } => vec![word("STRLEN"), key.clone()],
        DataCommand::Type { key } => vec![word("TYPE"), key.clone()],
        DataCommand::MGet { keys } => std::iter::once(word("MGET")).chain(keys.clone()).collect(),
        DataCommand::MSet { pairs } => std::iter::once(word("MSET"))
            .chain(pairs.iter().flat_map(|(k, v)| [k.clone(), v.clone()]))
            .collect(),
        DataCommand::MSetNx { pairs } => std::iter::once(word("MSETNX"))
            .chain(pairs.iter().flat_map(|(k, v)| [k.clone(), v.clone()]))
            .collect(),
    }
}

/// Writes `bytes` with a 4-byte length.
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(
        &u32::try_from(bytes.len())
            .expect("under 4 GiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(bytes);
}

/// Encodes `plan`: EXEC's or not, the watched keys with their versions, each command's
/// arguments.
pub fn encode_plan(plan: &Plan, out: &mut Vec<u8>) {
    out.push(u8::from(plan.is_exec()));
    out.extend_from_slice(&(plan.watched().len() as u32).to_le_bytes());
    for watched in plan.watched() {
        put_bytes(out, &watched.key);
        out.extend_from_slice(&watched.version.store_version.to_le_bytes());
        match watched.version.expires_at_ms {
            Some(deadline) => {
                out.push(1);
                out.extend_from_slice(&deadline.to_le_bytes());
            }
            None => out.push(0),
        }
    }
    out.extend_from_slice(&(plan.commands().len() as u32).to_le_bytes());
    for command in plan.commands() {
        let args = command_args(command);
        out.extend_from_slice(&(args.len() as u32).to_le_bytes());
        for arg in &args {
            put_bytes(out, arg);
        }
    }
}

/// Reads encoded fields, refusing what is short.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("a shipped plan ends early");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A count of items of at least `min_bytes` each, checked against what is left.
    fn count(&mut self, min_bytes: usize) -> Result<usize, &'static str> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.0.len() {
            return Err("a shipped plan's count is larger than its bytes");
        }
        Ok(n)
    }
}

/// Decodes a plan [`encode_plan`] wrote, parsing its commands again.
pub fn decode_plan(bytes: &[u8]) -> Result<Plan, &'static str> {
    let mut r = Reader(bytes);
    let exec = r.u8()? != 0;
    let mut watched = Vec::new();
    for _ in 0..r.count(13)? {
        let key = r.bytes()?.to_vec();
        let store_version = r.u64()?;
        let expires_at_ms = match r.u8()? {
            0 => None,
            1 => Some(r.u64()?),
            _ => return Err("a shipped plan's watched key is malformed"),
        };
        watched.push(WatchedKey {
            key,
            version: WatchVersion {
                store_version,
                expires_at_ms,
            },
        });
    }
    let mut commands = Vec::new();
    for _ in 0..r.count(4)? {
        let argc = r.count(4)?;
        if argc == 0 {
            return Err("a shipped command has no arguments");
        }
        let mut args = Vec::with_capacity(argc);
        for _ in 0..argc {
            args.push(r.bytes()?);
        }
        let buf = ArgsBuf::new(args);
        let spec = command::lookup(buf.args()).map_err(|_| "a shipped command is unknown")?;
        match command::parse(spec, buf.args()) {
            Ok(Command::Data(command)) => commands.push(command),
            _ => return Err("a shipped command is not a data command"),
        }
    }
    if !r.0.is_empty() {
        return Err("bytes after a shipped plan");
    }
    Ok(Plan::new(commands, watched, exec))
}

/// Encodes a reply (data commands' replies: no protocol switch inside).
fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::Simple(text) => {
            out.push(0);
            put_bytes(out, text);
        }
        Reply::Error(text) => {
            out.push(1);
            put_bytes(out, text);
        }
        Reply::Integer(n) => {
            out.push(2);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Reply::Bulk(bytes) => {
            out.push(3);
            put_bytes(out, bytes);
        }
        Reply::Null => out.push(4),
        Reply::NullArray => out.push(5),
        Reply::Array(items) | Reply::Set(items) => {
            out.push(if matches!(reply, Reply::Array(_)) {
                6
            } else {
                7
            });
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for item in items {
                encode_reply(item, out);
            }
        }
        Reply::Map(pairs) => {
            out.push(8);
            out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
            for (key, value) in pairs {
                encode_reply(key, out);
                encode_reply(value, out);
            }
        }
        Reply::Boolean(b) => {
            out.push(9);
            out.push(u8::from(*b));
        }
        Reply::Verbatim { format, text } => {
            out.push(10);
            out.extend_from_slice(format);
            put_bytes(out, text);
        }
        Reply::InProtocol(_, inner) => encode_reply(inner, out),
    }
}

/// Decodes a reply [`encode_reply`] wrote; nesting is bounded.
fn decode_reply(r: &mut Reader<'_>, depth: u32) -> Result<Reply, &'static str> {
    if depth > 8 {
        return Err("a shipped reply nests too deep");
    }
    Ok(match r.u8()? {
        0 => Reply::Simple(r.bytes()?.to_vec().into()),
        1 => Reply::Error(r.bytes()?.to_vec().into()),
        2 => Reply::Integer(i64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"))),
        3 => Reply::Bulk(r.bytes()?.to_vec().into()),
        4 => Reply::Null,
        5 => Reply::NullArray,
        tag @ (6 | 7) => {
            let n = r.count(1)?;
            let items = (0..n)
                .map(|_| decode_reply(r, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            if tag == 6 {
                Reply::Array(items)
            } else {
                Reply::Set(items)
            }
        }
        8 => {
            let n = r.count(2)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((decode_reply(r, depth + 1)?, decode_reply(r, depth + 1)?));
            }
            Reply::Map(pairs)
        }
        9 => Reply::Boolean(r.u8()? != 0),
        10 => {
            let format: [u8; 3] = r.take(3)?.try_into().expect("3 bytes");
            Reply::Verbatim {
                format,
                text: r.bytes()?.to_vec().into(),
            }
        }
        _ => return Err("a shipped reply of an unknown kind"),
    })
}

/// Encodes a plan's outcome.
fn encode_outcome(outcome: &Outcome, out: &mut Vec<u8>) {
    match outcome {
        Outcome::Committed(replies) => {
            out.push(0);
            out.extend_from_slice(&(replies.len() as u32).to_le_bytes());
            for reply in replies {
                encode_reply(reply, out);
            }
        }
        Outcome::WatchedKeyChanged => out.push(1),
        Outcome::Failed(reply) => {
            out.push(2);
            encode_reply(reply, out);
        }
    }
}

/// Decodes what [`encode_outcome`] wrote; `None` if malformed.
fn decode_outcome(bytes: &[u8]) -> Option<Outcome> {
    let mut r = Reader(bytes);
    let outcome = match r.u8().ok()? {
        0 => {
            let n = r.count(1).ok()?;
            let replies = (0..n)
                .map(|_| decode_reply(&mut r, 0))
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            Outcome::Committed(replies)
        }
        1 => Outcome::WatchedKeyChanged,
        2 => Outcome::Failed(decode_reply(&mut r, 0).ok()?),
        _ => return None,
    };
    r.0.is_empty().then_some(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> DataCommand {
        let buf = ArgsBuf::new(words.iter().map(|w| w.as_bytes()));
        let spec = command::lookup(buf.args()).unwrap();
        match command::parse(spec, buf.args()).unwrap() {
            Command::Data(command) => command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plans_round_trip_through_their_arguments() {
        let commands: Vec<DataCommand> = [
            &["GET", "a"][..],
            &["SET", "a", "1"],
            &["SET", "a", "1", "NX", "GET"],
            &["SET", "a", "1", "XX"],
            &["SETNX", "a", "v"],
            &["GETSET", "a", "v"],
            &["GETDEL", "a"],
            &["DEL", "a", "b", "a"],
            &["EXISTS", "a", "b"],
            &["INCR", "a"],
            &["DECRBY", "a", "7"],
            &["INCRBY", "a", "-9223372036854775808"],
            &["APPEND", "a", "xyz"],
            &["STRLEN", "a"],
            &["TYPE", "a"],
            &["MGET", "a", "b"],
            &["MSET", "a", "1", "b", "2"],
            &["MSETNX", "a", "1", "b", "2"],
            &["SET", "a", "1", "EX", "10"],
            &["SET", "a", "1", "PX", "10", "NX", "GET"],
            &["SET", "a", "1", "EXAT", "1700000000"],
            &["SET", "a", "1", "PXAT", "1700000000000", "XX"],
            &["SET", "a", "1", "KEEPTTL"],
            &["SET", "a", "1", "EX", "0"],
            &["SETEX", "a", "10", "v"],
            &["PSETEX", "a", "10", "v"],
            &["GETEX", "a"],
            &["GETEX", "a", "PERSIST"],
            &["GETEX", "a", "PX", "5"],
            &["GETEX", "a", "EXAT", "x"],
            &["EXPIRE", "a", "10"],
            &["PEXPIRE", "a", "10", "NX"],
            &["EXPIREAT", "a", "10", "XX", "GT"],
            &["PEXPIREAT", "a", "10", "LT"],
            &["TTL", "a"],
            &["PTTL", "a"],
            &["EXPIRETIME", "a"],
            &["PEXPIRETIME", "a"],
            &["PERSIST", "a"],
        ]
        .iter()
        .map(|words| parse(words))
        .collect();
        let watched = vec![
            WatchedKey {
                key: b"w".to_vec(),
                version: WatchVersion {
                    store_version: 42,
                    expires_at_ms: None,
                },
            },
            WatchedKey {
                key: b"v".to_vec(),
                version: WatchVersion {
                    store_version: 7,
                    expires_at_ms: Some(1_700_000_000_123),
                },
            },
        ];
        let plan = Plan::new(commands, watched, true);
        let mut bytes = Vec::new();
        encode_plan(&plan, &mut bytes);
        assert_eq!(decode_plan(&bytes), Ok(plan));
        for len in 0..bytes.len() {
            assert!(decode_plan(&bytes[..len]).is_err(), "{len}");
        }
    }

    #[test]
    fn outcomes_round_trip_and_truncations_are_refused() {
        let outcomes = [
            Outcome::Committed(vec![
                Reply::ok(),
                Reply::Integer(-3),
                Reply::bulk(b"x".to_vec()),
                Reply::Null,
                Reply::Array(vec![Reply::Null, Reply::bulk(b"y".to_vec())]),
                Reply::error_static("ERR no"),
            ]),
            Outcome::WatchedKeyChanged,
            Outcome::Failed(Reply::error_static("TRYAGAIN x")),
        ];
        for outcome in outcomes {
            let mut bytes = Vec::new();
            encode_outcome(&outcome, &mut bytes);
            assert_eq!(decode_outcome(&bytes), Some(outcome));
            for len in 0..bytes.len() {
                assert_eq!(decode_outcome(&bytes[..len]), None);
            }
        }
    }
}
