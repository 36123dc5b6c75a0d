//! A whole Redis connection: [`RespConnection`] (the parser, the [`Session`] with AUTH,
//! HELLO, MULTI/EXEC, WATCH, and the joining of pipelined commands) driven as the server
//! drives it, with the work it hands out run against an in-memory store instead of a
//! cluster. Whatever a client sends, in whatever pieces, and however the work ends
//! (committed, failed, dropped, a watched key changed by another client), nothing may
//! panic, and the bytes sent back must be a sequence of whole RESP replies.
//!
//! The store stands in for the cluster the way `ferrotx_redis_exec::run_plan` uses it
//! (one attempt: read the plan's keys, check WATCH's versions, apply, write), so the
//! session's plans meet the same [`Overlay`] checks as on a node; what runs the
//! transactions themselves (the coordinator) is fuzzed by the `participant` target.
//! Each plan also goes through the encoding that ships it to a primary
//! ([`encode_plan`], [`decode_plan`]), which must give it back unchanged.
//!
//! [`Session`]: ferrotx_resp::Session

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use ferrotx_redis_exec::{
    PlanRun, RespConnection, Shared, Step, Work, WorkResult, decode_plan, encode_plan,
    encode_request, parse_reply,
};
use ferrotx_resp::keys::{self, Lookup, STORE_KEY_BYTES};
use ferrotx_resp::{
    InfoStats, KeyspaceRequest, Outcome, Overlay, ParserLimits, Plan, Reply, SessionConfig,
    WatchVersion,
};
use ferrotx_store::Memory;

/// Largest stored value, as the default `kv` table has it.
const STORED_BYTES_MAX: usize = 1 << 20;

/// The memory limit of the node, when the fuzzer puts it over.
const MEMORY_LIMIT_BYTES: u64 = 1 << 20;

/// Operations per input: enough for MULTI blocks and pipelines, few enough that one run
/// stays fast.
const OPS_MAX: usize = 64;

/// Command names (every command of the table; subcommands are arguments).
const NAMES: &[&str] = &[
    "PING",
    "ECHO",
    "HELLO",
    "AUTH",
    "SELECT",
    "QUIT",
    "GET",
    "SET",
    "SETNX",
    "GETSET",
    "GETDEL",
    "DEL",
    "EXISTS",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "APPEND",
    "STRLEN",
    "TYPE",
    "MGET",
    "MSET",
    "MSETNX",
    "SETEX",
    "PSETEX",
    "GETEX",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "PERSIST",
    "WATCH",
    "UNWATCH",
    "MULTI",
    "EXEC",
    "DISCARD",
    "DBSIZE",
    "SCAN",
    "KEYS",
    "INFO",
    "FLUSHALL",
    "FLUSHDB",
    "CLIENT",
    "COMMAND",
    "CONFIG",
    "FERROTX",
    "RESET",
    "set",
    "multi",
];

/// Arguments worth trying: options, numbers at the edges, subcommands, patterns.
const WORDS: &[&str] = &[
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "KEEPTTL",
    "NX",
    "XX",
    "GT",
    "LT",
    "GET",
    "PERSIST",
    "MATCH",
    "COUNT",
    "TYPE",
    "string",
    "*",
    "k*",
    "[a-c]?",
    "\\",
    "0",
    "1",
    "-1",
    "2",
    "3",
    "10",
    "1000",
    "1.5",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "SETNAME",
    "GETNAME",
    "ID",
    "INFO",
    "DOCS",
    "LIST",
    "maxmemory",
    "100mb",
    "all",
    "default",
    "secret",
    "wrong",
    "SETINFO",
    "LIB-NAME",
    "ASYNC",
    "SYNC",
    "COPIES",
    "",
    "a b",
    "server",
    "keyspace",
    "everything",
    "AUTH",
    "SETNAME",
    "RESP3",
];

/// Keys (few, so that commands meet each other's writes and watches).
const KEYS: &[&str] = &["k", "k2", "{k}3", "counter", ""];

/// The passwords of the session when it has one (`secret`, in [`WORDS`] too).
const PASSWORD: &[u8] = b"secret";

/// One argument of a structured command.
#[derive(Arbitrary, Debug)]
enum Arg {
    Key(u8),
    Word(u8),
    Integer(i64),
    Bytes(Vec<u8>),
}

/// A command as a client library writes it.
#[derive(Arbitrary, Debug)]
struct Command {
    name: u8,
    args: Vec<Arg>,
}

impl Command {
    fn args(&self) -> Vec<Vec<u8>> {
        let mut args = vec![
            NAMES[usize::from(self.name) % NAMES.len()]
                .as_bytes()
                .to_vec(),
        ];
        for arg in self.args.iter().take(8) {
            args.push(match arg {
                Arg::Key(k) => KEYS[usize::from(*k) % KEYS.len()].as_bytes().to_vec(),
                Arg::Word(w) => WORDS[usize::from(*w) % WORDS.len()].as_bytes().to_vec(),
                Arg::Integer(n) => n.to_string().into_bytes(),
                Arg::Bytes(bytes) => bytes.clone(),
            });
        }
        args
    }
}

/// How the work in flight ends.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Fate {
    /// It runs against the store (a plan commits, WATCH reads versions, ...).
    Runs,
    /// It fails with an error reply (the cluster is unavailable, it kept conflicting).
    Fails,
    /// The node stops: the work is dropped.
    Dropped,
}

/// What happens next on the connection.
#[derive(Arbitrary, Debug)]
enum Op {
    /// The client sends these bytes.
    Raw(Vec<u8>),
    /// The client sends one command, multibulk.
    Command(Command),
    /// The client sends one command as an inline line.
    Inline(Command),
    /// The client sends several commands at once.
    Pipeline(Vec<Command>),
    /// The work in flight ends.
    Complete(Fate),
    /// Another client writes a key (WATCH must notice).
    Touch(u8),
    /// The client reads this much of the output.
    Read(u16),
    /// Time passes (milliseconds): expiries.
    Sleep(u16),
    /// The node goes past its memory limit, or back under it.
    Memory(bool),
}

/// The connection's settings.
#[derive(Arbitrary, Debug)]
struct Settings {
    password: bool,
    queued_commands_max: u8,
    watched_keys_max: u8,
    pipeline_commands_max: u8,
    small_requests: bool,
}

/// One stored key: its Redis key, its stored bytes (value and deadline) and version.
#[derive(Debug, Default)]
struct Object {
    stored: Option<Vec<u8>>,
    version: u64,
}

/// The connection, its store and the work it waits for.
struct Harness {
    connection: RespConnection,
    shared: Shared,
    memory: Arc<Memory>,
    store: BTreeMap<[u8; STORE_KEY_BYTES], Object>,
    /// Redis keys by store key, for KEYS and SCAN.
    names: BTreeMap<[u8; STORE_KEY_BYTES], Vec<u8>>,
    now_ms: u64,
    in_flight: Option<Option<Work>>,
    /// What the client has read.
    received: Vec<u8>,
}

impl Harness {
    fn new(settings: &Settings) -> Self {
        let session = SessionConfig {
            password: settings.password.then(|| PASSWORD.to_vec()),
            queued_commands_max: usize::from(settings.queued_commands_max % 8) + 1,
            watched_keys_max: usize::from(settings.watched_keys_max % 8) + 1,
            pipeline_commands_max: usize::from(settings.pipeline_commands_max % 8) + 1,
            ..SessionConfig::default()
        };
        let limits = if settings.small_requests {
            ParserLimits {
                request_bytes_max: 64,
                args_max: 4,
            }
        } else {
            ParserLimits::default()
        };
        let memory = Arc::new(Memory::with_limit(MEMORY_LIMIT_BYTES));
        Self {
            connection: RespConnection::new(session, limits, 1),
            shared: Shared::with_memory(memory.clone()),
            memory,
            store: BTreeMap::new(),
            names: BTreeMap::new(),
            now_ms: 1_700_000_000_000,
            in_flight: None,
            received: Vec::new(),
        }
    }

    /// Handles what is buffered until the connection waits or stops.
    fn pump(&mut self) {
        while self.in_flight.is_none() {
            match self.connection.handle(&mut self.shared) {
                Step::Work { work, .. } => self.in_flight = Some(Some(work)),
                Step::Admin(_) => self.in_flight = Some(None),
                Step::Info(request) => {
                    self.connection
                        .info_reply(&request, &InfoStats::default(), &mut self.shared)
                }
                Step::Stopped(_) => return,
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        if self.connection.wants_input() {
            self.connection.feed(bytes);
        }
        self.pump();
    }

    fn read(&mut self, bytes: usize) {
        let bytes = bytes.min(self.connection.output().len());
        self.received
            .extend_from_slice(&self.connection.output()[..bytes]);
        self.connection.consume_output(bytes);
        self.connection.compact_output();
        self.pump();
    }

    fn complete(&mut self, fate: Fate) {
        let Some(work) = self.in_flight.take() else {
            return;
        };
        let result = match (work, fate) {
            (_, Fate::Dropped) => WorkResult::Dropped,
            (None, _) => WorkResult::Admin(Reply::error_static("ERR fuzz: no node to ask")),
            (Some(Work::Plan(plan)), fate) => {
                let mut shipped = Vec::new();
                encode_plan(&plan, &mut shipped);
                assert_eq!(decode_plan(&shipped).as_ref(), Ok(&plan), "a shipped plan");
                let outcome = match fate {
                    Fate::Runs => self.run_plan(&plan),
                    _ => Outcome::Failed(Reply::error_static("TRYAGAIN fuzz: conflicts")),
                };
                WorkResult::Plan(PlanRun { outcome, aborts: 0 })
            }
            (Some(Work::Versions(names)), Fate::Runs) => {
                WorkResult::Versions(Ok(names.iter().map(|key| self.version(key)).collect()))
            }
            (Some(Work::Versions(_)), _) => WorkResult::Versions(Err(Reply::error_static(
                "ERR fuzz: WATCH could not read its keys",
            ))),
            (Some(Work::Keyspace(request)), Fate::Runs) => {
                WorkResult::Keyspace(self.keyspace(&request))
            }
            (Some(Work::Keyspace(_)), _) => {
                WorkResult::Keyspace(Reply::error_static("CLUSTERDOWN fuzz"))
            }
        };
        self.connection.complete(result, &mut self.shared);
        self.pump();
    }

    fn version(&self, key: &[u8]) -> WatchVersion {
        let object = self.store.get(&keys::store_key(key));
        let stored = object.and_then(|o| o.stored.as_deref());
        WatchVersion {
            store_version: object.map_or(0, |o| o.version),
            expires_at_ms: match keys::lookup(key, stored, self.now_ms) {
                Ok(Lookup::Value { expires_at_ms, .. }) => expires_at_ms,
                _ => None,
            },
        }
    }

    /// One attempt of `run_plan`, as `ferrotx_redis_exec` makes it.
    fn run_plan(&mut self, plan: &Plan) -> Outcome {
        let watched_unchanged = plan.watched().iter().all(|watched| {
            let version = self
                .store
                .get(&keys::store_key(&watched.key))
                .map_or(0, |o| o.version);
            watched.version.unchanged(version, self.now_ms)
        });
        if !watched_unchanged {
            return Outcome::WatchedKeyChanged;
        }
        let (read, unread) = plan.keys();
        let mut overlay = Overlay::new(STORED_BYTES_MAX, self.now_ms);
        for key in read {
            let stored = self
                .store
                .get(&keys::store_key(key))
                .and_then(|o| o.stored.as_deref());
            if overlay.insert_stored(key.to_vec(), stored).is_err() {
                return Outcome::Failed(Reply::error_static("ERR fuzz: unreadable value"));
            }
        }
        for key in unread {
            overlay.insert_unread(key.to_vec());
        }
        let replies = plan.apply(&mut overlay);
        let names: Vec<(Vec<u8>, bool)> = overlay
            .writes()
            .map(|write| (write.key.to_vec(), write.value.is_some()))
            .collect();
        for (store_key, stored) in overlay.encoded_writes() {
            let object = self.store.entry(store_key).or_default();
            object.stored = stored;
            object.version += 1;
        }
        for (name, present) in names {
            if present {
                self.names.insert(keys::store_key(&name), name);
            } else {
                self.names.remove(&keys::store_key(&name));
            }
        }
        Outcome::Committed(replies)
    }

    /// The live keys, in store-key order.
    fn live_keys(&self) -> Vec<Vec<u8>> {
        self.names
            .iter()
            .filter(|(store_key, name)| {
                let stored = self.store.get(*store_key).and_then(|o| o.stored.as_deref());
                matches!(
                    keys::lookup(name, stored, self.now_ms),
                    Ok(Lookup::Value { .. })
                )
            })
            .map(|(_, name)| name.clone())
            .collect()
    }

    fn keyspace(&mut self, request: &KeyspaceRequest) -> Reply {
        let live = self.live_keys();
        match request {
            KeyspaceRequest::DbSize => Reply::Integer(live.len() as i64),
            KeyspaceRequest::Scan(scan) => {
                let keys = live.into_iter().filter(|key| scan.matches(key)).collect();
                ferrotx_resp::ScanRequest::reply(0, keys)
            }
            KeyspaceRequest::Keys { pattern } => ferrotx_resp::command::keys_reply(
                live.into_iter()
                    .filter(|key| ferrotx_resp::command::keys_pattern_matches(pattern, key))
                    .collect(),
            ),
            KeyspaceRequest::Flush => {
                for object in self.store.values_mut() {
                    if object.stored.take().is_some() {
                        object.version += 1;
                    }
                }
                self.names.clear();
                Reply::ok()
            }
        }
    }

    fn apply(&mut self, op: Op) {
        let mut bytes = Vec::new();
        match op {
            Op::Raw(raw) => self.send(&raw),
            Op::Command(command) => {
                encode_request(&command.args(), &mut bytes);
                self.send(&bytes);
            }
            Op::Inline(command) => {
                for (i, arg) in command.args().iter().enumerate() {
                    if i > 0 {
                        bytes.push(b' ');
                    }
                    bytes.extend_from_slice(arg);
                }
                bytes.extend_from_slice(b"\r\n");
                self.send(&bytes);
            }
            Op::Pipeline(commands) => {
                for command in commands.iter().take(16) {
                    encode_request(&command.args(), &mut bytes);
                }
                self.send(&bytes);
            }
            Op::Complete(fate) => self.complete(fate),
            Op::Touch(k) => {
                let key = KEYS[usize::from(k) % KEYS.len()].as_bytes();
                let object = self.store.entry(keys::store_key(key)).or_default();
                object.version += 1;
                let mut stored = Vec::new();
                keys::encode(key, b"touched", &mut stored);
                object.stored = Some(stored);
                self.names.insert(keys::store_key(key), key.to_vec());
            }
            Op::Read(bytes) => self.read(usize::from(bytes)),
            Op::Sleep(ms) => self.now_ms += u64::from(ms),
            Op::Memory(over) => {
                self.memory
                    .set_store(if over { MEMORY_LIMIT_BYTES + 1 } else { 0 })
            }
        }
    }

    /// Lets the client finish: every work in flight runs, the client reads everything
    /// and closes its side; then checks what it read.
    fn finish(mut self) -> Vec<u8> {
        self.connection.end_input();
        loop {
            self.pump();
            let output = self.connection.output().len();
            if output > 0 {
                self.read(output);
            } else if self.in_flight.is_some() {
                self.complete(Fate::Runs);
            } else {
                break;
            }
        }
        assert!(
            self.connection.is_over(),
            "the connection ends once drained"
        );
        let mut at = 0;
        while at < self.received.len() {
            match parse_reply(&self.received[at..]) {
                Ok(Some((_, consumed))) => at += consumed,
                other => panic!(
                    "the output is not whole replies at byte {at}: {other:?} in {:?}",
                    String::from_utf8_lossy(&self.received)
                ),
            }
        }
        self.received
    }
}

/// The operations `data` stands for, one per line (to read a crash's input).
#[doc(hidden)]
pub fn describe(data: &[u8]) -> String {
    let mut input = Unstructured::new(data);
    let Ok(settings) = Settings::arbitrary(&mut input) else {
        return String::new();
    };
    let mut lines = format!("{settings:?}\n");
    crate::describe_ops::<Op>(&mut input, OPS_MAX, &mut lines);
    lines
}

/// Runs the operations of `data` on a connection, then drains it and checks its output.
pub fn run(data: &[u8]) {
    transcript(data);
}

/// [`run`], returning what the client received (to see what an input does).
#[doc(hidden)]
pub fn transcript(data: &[u8]) -> Vec<u8> {
    let mut input = Unstructured::new(data);
    let Ok(settings) = Settings::arbitrary(&mut input) else {
        return Vec::new();
    };
    let mut harness = Harness::new(&settings);
    for _ in 0..OPS_MAX {
        if input.is_empty() {
            break;
        }
        match Op::arbitrary(&mut input) {
            Ok(op) => harness.apply(op),
            Err(_) => break,
        }
    }
    harness.finish()
}
