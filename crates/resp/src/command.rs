//! Commands: the table ([`table`]), COMMAND's replies ([`introspection`]), and the
//! parsing of a request's arguments into a typed [`Command`].
//!
//! Redis checks a request in two stages, and so does ferrotx. [`lookup`] is the first:
//! an unknown command or subcommand, or a wrong number of arguments, is refused before
//! anything else, and inside MULTI such a refusal makes EXEC fail with EXECABORT.
//! [`parse`] is the second: the arguments' syntax and values (SET's options, integers,
//! MSET's pairs). Redis finds those errors only when the command runs, so inside MULTI
//! a command with such an error is queued like any other and its error becomes its
//! entry in EXEC's reply; ferrotx does the same with the error found here.

pub mod introspection;
pub mod table;

pub use table::{CommandFlags, CommandId, CommandSpec, lookup, lookup_by_name};

use crate::config::ConfigRequest;
use crate::glob;
use crate::info::InfoRequest;
use crate::number::{parse_i64, parse_scan_cursor};
use crate::protocol::Args;
use crate::reply::{ProtocolVersion, Reply};
use table::{c_string_prefix, wrong_arity};

/// Redis's reply to a malformed option list.
pub const SYNTAX_ERROR: &str = "ERR syntax error";

/// Redis's reply to an argument or stored value that is not an integer in range.
pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Reads or writes keys: runs as one transaction, alone or inside EXEC.
    Data(DataCommand),
    /// Answered by the session alone (PING, AUTH, CLIENT ..., COMMAND ...).
    Connection(ConnectionCommand),
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH.
    Transaction(TransactionCommand),
    /// About the whole key space (DBSIZE, SCAN, KEYS): the node answers it.
    Keyspace(KeyspaceRequest),
    /// INFO: the node gathers the numbers, the session formats them.
    Info(InfoRequest),
    /// A ferrotx administrative command (FERROTX ...): the node answers it.
    Admin(AdminRequest),
    /// CONFIG GET or SET: the node's parameters ([`crate::config`]).
    Config(ConfigRequest),
}

/// A ferrotx administrative command, which the node answers from its own state (not a
/// transaction; refused inside MULTI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminRequest {
    /// FERROTX COPIES: one entry per partition copy the node holds in its current view,
    /// with its role and, for each table, a digest of the objects present and their
    /// count (the node walks every table of every copy: an operator's or a test's
    /// command, for a quiet cluster, not the hot path).
    Copies,
}

/// A command that reads or writes keys. Keys and values are binary-safe byte strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataCommand {
    /// GET key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]`, and
    /// SETEX and PSETEX (a SET with EX or PX).
    Set {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
        /// When to set.
        condition: SetCondition,
        /// GET: reply with the old value (or null) instead of OK / null.
        get: bool,
        /// The key's expiry once set.
        expiry: SetExpiry,
    },
    /// `GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]`.
    GetEx {
        /// The key.
        key: Vec<u8>,
        /// What to do with its expiry (if the key exists).
        expiry: GetExExpiry,
    },
    /// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT: `key time [NX | XX | GT | LT]`.
    Expire {
        /// The key.
        key: Vec<u8>,
        /// The new deadline.
        time: ExpireTime,
        /// When to set it.
        condition: ExpireCondition,
    },
    /// TTL, PTTL, EXPIRETIME and PEXPIRETIME.
    Ttl {
        /// The key.
        key: Vec<u8>,
        /// In milliseconds (PTTL, PEXPIRETIME) rather than seconds.
        millis: bool,
        /// The deadline as Unix time (EXPIRETIME, PEXPIRETIME) rather than the time left.
        absolute: bool,
    },
    /// PERSIST key.
    Persist {
        /// The key.
        key: Vec<u8>,
    },
    /// SETNX key value.
    SetNx {
        /// The key.
        key: Vec<u8>,
        /// The value, set only if the key is absent.
        value: Vec<u8>,
    },
    /// GETSET key value.
    GetSet {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// GETDEL key.
    GetDel {
        /// The key.
        key: Vec<u8>,
    },
    /// `DEL key [key ...]`.
    Del {
        /// The keys, repeats included.
        keys: Vec<Vec<u8>>,
    },
    /// `EXISTS key [key ...]` (a key named twice counts twice).
    Exists {
        /// The keys, repeats included.
        keys: Vec<Vec<u8>>,
    },
    /// INCR, DECR, INCRBY and DECRBY: add `delta` to the integer stored at `key`.
    IncrBy {
        /// The key.
        key: Vec<u8>,
        /// What to add (DECR and DECRBY negated).
        delta: i64,
    },
    /// APPEND key value.
    Append {
        /// The key.
        key: Vec<u8>,
        /// The bytes to append.
        value: Vec<u8>,
    },
    /// STRLEN key.
    Strlen {
        /// The key.
        key: Vec<u8>,
    },
    /// TYPE key: `string`, or `none` if absent (ferrotx has no other types).
    Type {
        /// The key.
        key: Vec<u8>,
    },
    /// `MGET key [key ...]`.
    MGet {
        /// The keys, repeats included.
        keys: Vec<Vec<u8>>,
    },
    /// `MSET key value [key value ...]` (a repeated key takes its last value).
    MSet {
        /// The pairs in order.
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `MSETNX key value [key value ...]`: all set, or none if any key exists.
    MSetNx {
        /// The pairs in order.
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

/// When SET writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetCondition {
    /// Always.
    #[default]
    Always,
    /// NX: only if the key is absent.
    IfAbsent,
    /// XX: only if the key is present.
    IfPresent,
}

/// What SET does with the key's expiry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetExpiry {
    /// No option: the key has no expiry once set (a TTL it had is cleared).
    #[default]
    Clear,
    /// KEEPTTL: the key keeps the expiry it had.
    Keep,
    /// EX, PX, EXAT or PXAT: the key expires then.
    At(ExpireTime),
}

/// GETEX's option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GetExExpiry {
    /// No option: the expiry is left as it is.
    #[default]
    Unchanged,
    /// PERSIST: the expiry is cleared.
    Persist,
    /// EX, PX, EXAT or PXAT: the key expires then.
    At(ExpireTime),
    /// EX, PX, EXAT or PXAT with an argument that is not an integer: Redis replies
    /// "value is not an integer" only if the key exists (it looks the key up first).
    NotAnInteger,
}

/// EXPIRE's NX, XX, GT and LT (NX goes with none of the others, GT not with LT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCondition {
    /// NX: only if the key has no expiry.
    pub if_none: bool,
    /// XX: only if the key has an expiry.
    pub if_some: bool,
    /// GT: only if the new deadline is later (no expiry counts as infinitely late).
    pub later: bool,
    /// LT: only if the new deadline is earlier (no expiry counts as infinitely late).
    pub earlier: bool,
}

impl ExpireCondition {
    /// True if a key whose deadline is `current` (`None`: no expiry) may get the
    /// deadline `new`.
    pub fn allows(&self, current: Option<i64>, new: i64) -> bool {
        !(self.if_none && current.is_some()
            || self.if_some && current.is_none()
            || self.later && current.is_none_or(|current| new <= current)
            || self.earlier && current.is_some_and(|current| new >= current))
    }
}

/// An expiry time as a command gave it: checked, and made a deadline, when the command
/// runs (a relative one needs the time then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpireTime {
    /// The argument.
    pub amount: i64,
    /// In milliseconds (PX, PXAT, PSETEX, PEXPIRE, PEXPIREAT) rather than seconds.
    pub millis: bool,
    /// A Unix time (EXAT, PXAT, EXPIREAT, PEXPIREAT) rather than a time from now.
    pub absolute: bool,
    /// The command's name, for the error "invalid expire time in '...' command".
    pub command: &'static str,
}

impl ExpireTime {
    /// The deadline (Unix time in milliseconds, which may be in the past, even
    /// negative) as SET, SETEX, PSETEX and GETEX compute it at `now_ms`: the amount must
    /// be positive and the deadline fit in an i64; `None` if not (Redis's
    /// `getExpireMillisecondsOrReply`).
    pub fn string_deadline(&self, now_ms: u64) -> Option<i64> {
        if self.amount <= 0 {
            return None;
        }
        self.deadline(now_ms)
    }

    /// The deadline (Unix time in milliseconds, possibly in the past or negative) as
    /// EXPIRE and its kin compute it at `now_ms`; `None` if it does not fit in an i64.
    pub fn deadline(&self, now_ms: u64) -> Option<i64> {
        let ms = if self.millis {
            self.amount
        } else {
            // Redis's bounds: the seconds must fit as milliseconds.
            if self.amount > i64::MAX / 1000 || self.amount < i64::MIN / 1000 {
                return None;
            }
            self.amount * 1000
        };
        if self.absolute {
            return Some(ms);
        }
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        // Redis checks only the upper bound (a negative amount from a positive now
        // cannot overflow).
        if ms > i64::MAX - now {
            return None;
        }
        Some(ms + now)
    }

    /// Redis's error for a time that [`ExpireTime::deadline`] refuses.
    pub fn invalid(&self) -> Reply {
        Reply::error(format!(
            "ERR invalid expire time in '{}' command",
            self.command
        ))
    }
}

/// A command the session answers without reading keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionCommand {
    /// `PING [message]`.
    Ping(Option<Vec<u8>>),
    /// ECHO message.
    Echo(Vec<u8>),
    /// `HELLO [protover [AUTH username password] [SETNAME name]]`.
    Hello(HelloCommand),
    /// `AUTH [username] password`.
    Auth {
        /// The user (Redis's `default` when absent).
        username: Option<Vec<u8>>,
        /// The password.
        password: Vec<u8>,
    },
    /// SELECT 0 (ferrotx has one database; other indexes fail to parse).
    Select,
    /// QUIT.
    Quit,
    /// CLIENT ID.
    ClientId,
    /// CLIENT SETNAME name (checked: no spaces or special characters; empty clears).
    ClientSetName(Vec<u8>),
    /// CLIENT GETNAME.
    ClientGetName,
    /// COMMAND.
    CommandAll,
    /// COMMAND COUNT.
    CommandCount,
    /// `COMMAND INFO [name ...]`.
    CommandInfo(Vec<Vec<u8>>),
    /// `COMMAND DOCS [name ...]`.
    CommandDocs(Vec<Vec<u8>>),
}

/// HELLO's arguments. Its options run in order, as in Redis: an AUTH or SETNAME before
/// a bad option takes effect even though HELLO then fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloCommand {
    /// The protocol asked for, if any.
    pub version: Option<ProtocolVersion>,
    /// The options in order.
    pub options: Vec<HelloOption>,
}

/// One HELLO option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelloOption {
    /// AUTH username password.
    Auth {
        /// The user.
        username: Vec<u8>,
        /// The password.
        password: Vec<u8>,
    },
    /// SETNAME name.
    SetName(Vec<u8>),
    /// Anything else (or AUTH / SETNAME without enough arguments): HELLO fails here
    /// with "Syntax error in HELLO option".
    Invalid(Vec<u8>),
}

/// MULTI, EXEC, DISCARD, WATCH and UNWATCH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionCommand {
    /// MULTI.
    Multi,
    /// EXEC.
    Exec,
    /// DISCARD.
    Discard,
    /// `WATCH key [key ...]`.
    Watch(Vec<Vec<u8>>),
    /// UNWATCH.
    Unwatch,
}

/// A command about the whole key space, which the node answers by asking every
/// partition (none is one transaction: each sees the keys as they are when it reaches
/// them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyspaceRequest {
    /// DBSIZE: reply the number of keys as an integer.
    DbSize,
    /// SCAN: reply [`ScanRequest::reply`].
    Scan(ScanRequest),
    /// KEYS pattern: reply every key matching the pattern ([`keys_pattern_matches`])
    /// as an array of bulk strings ([`keys_reply`]).
    Keys {
        /// The pattern.
        pattern: Vec<u8>,
    },
    /// FLUSHALL and FLUSHDB (with ASYNC, SYNC or neither, all run synchronously): delete
    /// every key, partition by partition, then reply `+OK`.
    Flush,
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanRequest {
    /// Where to go on from (0 starts; the node defines what other values mean, having
    /// returned them).
    pub cursor: u64,
    /// Keys must match this pattern (`None` for no pattern, or for `*`).
    pub pattern: Option<Vec<u8>>,
    /// About how many keys to look at (at least 1; Redis's default is 10).
    pub count: u64,
    /// TYPE's argument, if given: ferrotx keys are all strings, so `string` (any case)
    /// keeps every key and anything else none.
    pub type_name: Option<Vec<u8>>,
}

/// SCAN's default COUNT.
pub const SCAN_COUNT_DEFAULT: u64 = 10;

impl ScanRequest {
    /// True if the key `key` belongs in the reply (its pattern and type match).
    pub fn matches(&self, key: &[u8]) -> bool {
        self.type_matches()
            && self
                .pattern
                .as_ref()
                .is_none_or(|pattern| glob::matches(pattern, key))
    }

    /// True unless TYPE names a type other than string (then no key matches).
    pub fn type_matches(&self) -> bool {
        self.type_name
            .as_ref()
            .is_none_or(|name| c_string_prefix(name, usize::MAX).eq_ignore_ascii_case(b"string"))
    }

    /// SCAN's reply: the next cursor (0 when the iteration is over) and the keys.
    pub fn reply(next_cursor: u64, keys: Vec<Vec<u8>>) -> Reply {
        let mut cursor = Vec::with_capacity(20);
        crate::number::write_u64(&mut cursor, next_cursor);
        Reply::Array(vec![Reply::bulk(cursor), keys_reply(keys)])
    }
}

/// True if KEYS `pattern` lists `key`: the pattern `*` lists every key (even the empty
/// one, which no glob matches in Redis), any other pattern those it matches.
pub fn keys_pattern_matches(pattern: &[u8], key: &[u8]) -> bool {
    pattern == b"*" || glob::matches(pattern, key)
}

/// KEYS's reply (and SCAN's list of keys): an array of bulk strings.
pub fn keys_reply(keys: Vec<Vec<u8>>) -> Reply {
    Reply::Array(keys.into_iter().map(Reply::bulk).collect())
}

/// Parses the arguments of the command `spec` ([`lookup`]'s result, so the arity is
/// right) into a [`Command`], or the error Redis would reply when running it.
pub fn parse(spec: &CommandSpec, args: Args<'_>) -> Result<Command, Reply> {
    debug_assert!(spec.arity_allows(args.len()));
    let arg = |index: usize| args[index].to_vec();
    let data = |command: DataCommand| Ok(Command::Data(command));
    let connection = |command: ConnectionCommand| Ok(Command::Connection(command));
    let transaction = |command: TransactionCommand| Ok(Command::Transaction(command));
    match spec.id {
        CommandId::Ping => match args.len() {
            1 => connection(ConnectionCommand::Ping(None)),
            2 => connection(ConnectionCommand::Ping(Some(arg(1)))),
            _ => Err(wrong_arity(spec.name)),
        },
        CommandId::Echo => connection(ConnectionCommand::Echo(arg(1))),
        CommandId::Hello => parse_hello(args).map(Command::Connection),
        CommandId::Auth => match args.len() {
            2 => connection(ConnectionCommand::Auth {
                username: None,
                password: arg(1),
            }),
            3 => connection(ConnectionCommand::Auth {
                username: Some(arg(1)),
                password: arg(2),
            }),
            _ => Err(Reply::error_static(SYNTAX_ERROR)),
        },
        // `getIntFromObjectOrReply`: an integer, then in the int range, then a database.
        CommandId::Select => match parse_i64(&args[1]) {
            None => Err(Reply::error_static(NOT_AN_INTEGER)),
            Some(index) if i32::try_from(index).is_err() => Err(Reply::error_static(
                "ERR value is out of range, value must between -2147483648 and 2147483647",
            )),
            Some(0) => connection(ConnectionCommand::Select),
            Some(_) => Err(Reply::error_static("ERR DB index is out of range")),
        },
        CommandId::Quit => connection(ConnectionCommand::Quit),
        CommandId::Get => data(DataCommand::Get { key: arg(1) }),
        CommandId::Set => parse_set(args).map(Command::Data),
        CommandId::SetEx | CommandId::PSetEx => {
            let amount = parse_i64(&args[2]).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
            data(DataCommand::Set {
                key: arg(1),
                value: arg(3),
                condition: SetCondition::Always,
                get: false,
                expiry: SetExpiry::At(ExpireTime {
                    amount,
                    millis: spec.id == CommandId::PSetEx,
                    absolute: false,
                    command: spec.name,
                }),
            })
        }
        CommandId::GetEx => parse_getex(args).map(Command::Data),
        CommandId::Expire | CommandId::PExpire | CommandId::ExpireAt | CommandId::PExpireAt => {
            parse_expire(spec, args).map(Command::Data)
        }
        CommandId::Ttl | CommandId::PTtl | CommandId::ExpireTime | CommandId::PExpireTime => {
            data(DataCommand::Ttl {
                key: arg(1),
                millis: matches!(spec.id, CommandId::PTtl | CommandId::PExpireTime),
                absolute: matches!(spec.id, CommandId::ExpireTime | CommandId::PExpireTime),
            })
        }
        CommandId::Persist => data(DataCommand::Persist { key: arg(1) }),
        CommandId::FlushAll | CommandId::FlushDb => match args.len() {
            1 => Ok(Command::Keyspace(KeyspaceRequest::Flush)),
            2 if option_is(&args[1], "async") || option_is(&args[1], "sync") => {
                Ok(Command::Keyspace(KeyspaceRequest::Flush))
            }
            _ => Err(Reply::error_static(SYNTAX_ERROR)),
        },
        CommandId::SetNx => data(DataCommand::SetNx {
            key: arg(1),
            value: arg(2),
        }),
        CommandId::GetSet => data(DataCommand::GetSet {
            key: arg(1),
            value: arg(2),
        }),
        CommandId::GetDel => data(DataCommand::GetDel { key: arg(1) }),
        CommandId::Del => data(DataCommand::Del {
            keys: args.to_vecs_from(1),
        }),
        CommandId::Exists => data(DataCommand::Exists {
            keys: args.to_vecs_from(1),
        }),
        CommandId::Incr => data(DataCommand::IncrBy {
            key: arg(1),
            delta: 1,
        }),
        CommandId::Decr => data(DataCommand::IncrBy {
            key: arg(1),
            delta: -1,
        }),
        CommandId::IncrBy => {
            let delta = parse_i64(&args[2]).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
            data(DataCommand::IncrBy { key: arg(1), delta })
        }
        CommandId::DecrBy => {
            let delta = parse_i64(&args[2]).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
            // Negating i64::MIN overflows.
            let delta = delta
                .checked_neg()
                .ok_or(Reply::error_static("ERR decrement would overflow"))?;
            data(DataCommand::IncrBy { key: arg(1), delta })
        }
        CommandId::Append => data(DataCommand::Append {
            key: arg(1),
            value: arg(2),
        }),
        CommandId::Strlen => data(DataCommand::Strlen { key: arg(1) }),
        CommandId::Type => data(DataCommand::Type { key: arg(1) }),
        CommandId::MGet => data(DataCommand::MGet {
            keys: args.to_vecs_from(1),
        }),
        CommandId::MSet | CommandId::MSetNx => {
            // MSET's arity only says "at least 3": the pairs are checked when it runs.
            if args.len().is_multiple_of(2) {
                return Err(wrong_arity(spec.name));
            }
            let pairs = (1..args.len())
                .step_by(2)
                .map(|index| (arg(index), arg(index + 1)))
                .collect();
            if spec.id == CommandId::MSet {
                data(DataCommand::MSet { pairs })
            } else {
                data(DataCommand::MSetNx { pairs })
            }
        }
        CommandId::Watch => transaction(TransactionCommand::Watch(args.to_vecs_from(1))),
        CommandId::Unwatch => transaction(TransactionCommand::Unwatch),
        CommandId::Multi => transaction(TransactionCommand::Multi),
        CommandId::Exec => transaction(TransactionCommand::Exec),
        CommandId::Discard => transaction(TransactionCommand::Discard),
        CommandId::DbSize => Ok(Command::Keyspace(KeyspaceRequest::DbSize)),
        CommandId::Scan => {
            parse_scan(args).map(|scan| Command::Keyspace(KeyspaceRequest::Scan(scan)))
        }
        CommandId::Keys => Ok(Command::Keyspace(KeyspaceRequest::Keys { pattern: arg(1) })),
        CommandId::Info => Ok(Command::Info(InfoRequest::parse(args))),
        // A container alone (its arity allows it only for COMMAND).
        CommandId::Command => connection(ConnectionCommand::CommandAll),
        CommandId::Client => unreachable!("CLIENT's arity needs a subcommand"),
        CommandId::ClientId => connection(ConnectionCommand::ClientId),
        CommandId::ClientSetName => {
            let name = arg(2);
            if !valid_client_name(&name) {
                return Err(Reply::error_static(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                ));
            }
            connection(ConnectionCommand::ClientSetName(name))
        }
        CommandId::ClientGetName => connection(ConnectionCommand::ClientGetName),
        CommandId::CommandCount => connection(ConnectionCommand::CommandCount),
        CommandId::CommandInfo => connection(ConnectionCommand::CommandInfo(args.to_vecs_from(2))),
        CommandId::CommandDocs => connection(ConnectionCommand::CommandDocs(args.to_vecs_from(2))),
        CommandId::Config => unreachable!("CONFIG's arity needs a subcommand"),
        CommandId::ConfigGet => Ok(Command::Config(ConfigRequest::get(args))),
        CommandId::ConfigSet => ConfigRequest::set(args).map(Command::Config),
        CommandId::Ferrotx => unreachable!("FERROTX's arity needs a subcommand"),
        CommandId::FerrotxCopies => Ok(Command::Admin(AdminRequest::Copies)),
    }
}

/// True for a name CLIENT SETNAME accepts: empty (which clears the name), or only the
/// printable ASCII characters from `!` to `~`.
pub fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&byte| (b'!'..=b'~').contains(&byte))
}

/// True if the option `arg`, read as a C string as Redis does, is `name` in any case.
fn option_is(arg: &[u8], name: &str) -> bool {
    c_string_prefix(arg, usize::MAX).eq_ignore_ascii_case(name.as_bytes())
}

/// An expiry option of SET or GETEX.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryOption {
    Ex,
    Px,
    ExAt,
    PxAt,
    /// SET's KEEPTTL, GETEX's PERSIST.
    Keep,
}

/// Reads the expiry option at `args[index]` if it is one (`keep_name`: KEEPTTL or
/// PERSIST) that may follow `seen` (an expiry option may follow no other expiry
/// option but itself): its kind and, for a timed one, its argument.
fn expiry_option<'a>(
    args: Args<'a>,
    index: usize,
    seen: Option<ExpiryOption>,
    keep_name: &str,
) -> Option<(ExpiryOption, Option<&'a [u8]>)> {
    let option = &args[index];
    let allows = |kind: ExpiryOption| seen.is_none_or(|seen| seen == kind);
    if option_is(option, keep_name) {
        return allows(ExpiryOption::Keep).then_some((ExpiryOption::Keep, None));
    }
    let next = args.get(index + 1)?;
    [
        (ExpiryOption::Ex, "ex"),
        (ExpiryOption::Px, "px"),
        (ExpiryOption::ExAt, "exat"),
        (ExpiryOption::PxAt, "pxat"),
    ]
    .into_iter()
    .find(|(_, name)| option_is(option, name))
    .map(|(kind, _)| kind)
    .filter(|&kind| allows(kind))
    .map(|kind| (kind, Some(next)))
}

/// The expire time of a timed option with its argument's value.
fn expire_time(kind: ExpiryOption, amount: i64, command: &'static str) -> ExpireTime {
    ExpireTime {
        amount,
        millis: matches!(kind, ExpiryOption::Px | ExpiryOption::PxAt),
        absolute: matches!(kind, ExpiryOption::ExAt | ExpiryOption::PxAt),
        command,
    }
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]`, checked as
/// Redis's `parseExtendedStringArgumentsOrReply` does (a later NX, XX or expiry option of
/// the same kind overrides an earlier one); the time's own checks come when it runs.
fn parse_set(args: Args<'_>) -> Result<DataCommand, Reply> {
    let mut condition = SetCondition::Always;
    let mut get = false;
    let mut expiry: Option<ExpiryOption> = None;
    let mut expire_argument: Option<&[u8]> = None;
    let mut index = 3;
    while index < args.len() {
        let option = &args[index];
        if option_is(option, "nx") && condition != SetCondition::IfPresent {
            condition = SetCondition::IfAbsent;
        } else if option_is(option, "xx") && condition != SetCondition::IfAbsent {
            condition = SetCondition::IfPresent;
        } else if option_is(option, "get") {
            get = true;
        } else if let Some((kind, argument)) = expiry_option(args, index, expiry, "keepttl") {
            expiry = Some(kind);
            if argument.is_some() {
                expire_argument = argument;
                index += 1;
            }
        } else {
            return Err(Reply::error_static(SYNTAX_ERROR));
        }
        index += 1;
    }
    let expiry = match (expiry, expire_argument) {
        (None, _) => SetExpiry::Clear,
        (Some(ExpiryOption::Keep), _) => SetExpiry::Keep,
        (Some(kind), Some(argument)) => {
            let amount = parse_i64(argument).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
            SetExpiry::At(expire_time(kind, amount, "set"))
        }
        (Some(_), None) => unreachable!("a timed option has its argument"),
    };
    Ok(DataCommand::Set {
        key: args[1].to_vec(),
        value: args[2].to_vec(),
        condition,
        get,
        expiry,
    })
}

/// `GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]`: the options' syntax is
/// checked now, the time when it runs (and only if the key exists, as Redis does).
fn parse_getex(args: Args<'_>) -> Result<DataCommand, Reply> {
    let mut expiry: Option<ExpiryOption> = None;
    let mut expire_argument: Option<&[u8]> = None;
    let mut index = 2;
    while index < args.len() {
        let Some((kind, argument)) = expiry_option(args, index, expiry, "persist") else {
            return Err(Reply::error_static(SYNTAX_ERROR));
        };
        expiry = Some(kind);
        if argument.is_some() {
            expire_argument = argument;
            index += 1;
        }
        index += 1;
    }
    let expiry = match (expiry, expire_argument) {
        (None, _) => GetExExpiry::Unchanged,
        (Some(ExpiryOption::Keep), _) => GetExExpiry::Persist,
        (Some(kind), Some(argument)) => match parse_i64(argument) {
            Some(amount) => GetExExpiry::At(expire_time(kind, amount, "getex")),
            None => GetExExpiry::NotAnInteger,
        },
        (Some(_), None) => unreachable!("a timed option has its argument"),
    };
    Ok(DataCommand::GetEx {
        key: args[1].to_vec(),
        expiry,
    })
}

/// `EXPIRE key seconds [NX | XX | GT | LT]` and PEXPIRE, EXPIREAT, PEXPIREAT, checked as
/// Redis's `expireGenericCommand` does: the options first, then the time is an integer;
/// its range is checked when it runs.
fn parse_expire(spec: &CommandSpec, args: Args<'_>) -> Result<DataCommand, Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in args.iter().skip(3) {
        if option_is(option, "nx") {
            nx = true;
        } else if option_is(option, "xx") {
            xx = true;
        } else if option_is(option, "gt") {
            gt = true;
        } else if option_is(option, "lt") {
            lt = true;
        } else {
            let mut message = b"ERR Unsupported option ".to_vec();
            message.extend_from_slice(c_string_prefix(option, usize::MAX));
            return Err(Reply::error(message));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error_static(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::error_static(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let amount = parse_i64(&args[2]).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
    let condition = ExpireCondition {
        if_none: nx,
        if_some: xx,
        later: gt,
        earlier: lt,
    };
    Ok(DataCommand::Expire {
        key: args[1].to_vec(),
        time: ExpireTime {
            amount,
            millis: matches!(spec.id, CommandId::PExpire | CommandId::PExpireAt),
            absolute: matches!(spec.id, CommandId::ExpireAt | CommandId::PExpireAt),
            command: spec.name,
        },
        condition,
    })
}

/// `HELLO [protover [AUTH username password] [SETNAME name] ...]`.
fn parse_hello(args: Args<'_>) -> Result<ConnectionCommand, Reply> {
    let mut version = None;
    if args.len() >= 2 {
        version = Some(match parse_i64(&args[1]) {
            None => {
                return Err(Reply::error_static(
                    "ERR Protocol version is not an integer or out of range",
                ));
            }
            Some(2) => ProtocolVersion::Resp2,
            Some(3) => ProtocolVersion::Resp3,
            Some(_) => return Err(Reply::error_static("NOPROTO unsupported protocol version")),
        });
    }
    let mut options = Vec::new();
    let mut index = 2;
    while index < args.len() {
        let more = args.len() - 1 - index;
        let option = &args[index];
        if option_is(option, "AUTH") && more >= 2 {
            options.push(HelloOption::Auth {
                username: args[index + 1].to_vec(),
                password: args[index + 2].to_vec(),
            });
            index += 3;
        } else if option_is(option, "SETNAME") && more >= 1 {
            options.push(HelloOption::SetName(args[index + 1].to_vec()));
            index += 2;
        } else {
            // Nothing after a bad option runs.
            options.push(HelloOption::Invalid(option.to_vec()));
            break;
        }
    }
    Ok(ConnectionCommand::Hello(HelloCommand { version, options }))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`, checked as Redis's
/// `scanGenericCommand` does (a later option overrides an earlier one).
fn parse_scan(args: Args<'_>) -> Result<ScanRequest, Reply> {
    let cursor = parse_scan_cursor(&args[1]).ok_or(Reply::error_static("ERR invalid cursor"))?;
    let mut scan = ScanRequest {
        cursor,
        pattern: None,
        count: SCAN_COUNT_DEFAULT,
        type_name: None,
    };
    let mut index = 2;
    while index < args.len() {
        let left = args.len() - index;
        let option = &args[index];
        if option_is(option, "count") && left >= 2 {
            let count = parse_i64(&args[index + 1]).ok_or(Reply::error_static(NOT_AN_INTEGER))?;
            if count < 1 {
                return Err(Reply::error_static(SYNTAX_ERROR));
            }
            scan.count = count.unsigned_abs();
        } else if option_is(option, "match") && left >= 2 {
            let pattern = &args[index + 1];
            // "*" matches everything: the same as no pattern.
            scan.pattern = (pattern != b"*").then(|| pattern.to_vec());
        } else if option_is(option, "type") && left >= 2 {
            scan.type_name = Some(args[index + 1].to_vec());
        } else {
            return Err(Reply::error_static(SYNTAX_ERROR));
        }
        index += 2;
    }
    Ok(scan)
}

#[cfg(test)]
mod tests;
