//! The command table: every command ferrotx serves, with Redis 7.0's metadata for it.
//!
//! The arity, flags, ACL categories, tips and key specifications are Redis's own (from
//! its command JSON files, as `COMMAND INFO` reports them), so that `COMMAND INFO GET`
//! matches a real server byte for byte and client libraries that read the table
//! (cluster clients, redis-cli's hints) see what they expect. Only the commands ferrotx
//! implements are listed, and containers (CLIENT, COMMAND) list only the subcommands
//! implemented. One container is ferrotx's own: FERROTX, for administrative commands
//! (a name no Redis command has, so it cannot clash with one).

use crate::protocol::Args;
use crate::reply::Reply;

/// Which command a table entry is: what the parser dispatches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the command of the same name.
pub enum CommandId {
    Ping,
    Echo,
    Hello,
    Auth,
    Select,
    Quit,
    Get,
    Set,
    SetNx,
    GetSet,
    GetDel,
    Del,
    Exists,
    Incr,
    IncrBy,
    Decr,
    DecrBy,
    Append,
    Strlen,
    Type,
    MGet,
    MSet,
    MSetNx,
    SetEx,
    PSetEx,
    GetEx,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
    Ttl,
    PTtl,
    ExpireTime,
    PExpireTime,
    Persist,
    Watch,
    Unwatch,
    Multi,
    Exec,
    Discard,
    DbSize,
    Scan,
    Keys,
    Info,
    FlushAll,
    FlushDb,
    /// The CLIENT container (only its subcommands run).
    Client,
    ClientId,
    ClientSetName,
    ClientGetName,
    /// COMMAND alone: every command's details.
    Command,
    CommandCount,
    CommandInfo,
    CommandDocs,
    /// The CONFIG container (only its subcommands run).
    Config,
    ConfigGet,
    ConfigSet,
    /// The FERROTX container of ferrotx's own administrative commands (no Redis command
    /// has this name; only its subcommands run).
    Ferrotx,
    /// FERROTX COPIES: the partition copies the node holds, with a digest of each table.
    FerrotxCopies,
}

/// A command's flags (Redis's `CMD_*`), as COMMAND INFO lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CommandFlags(u32);

impl CommandFlags {
    /// Writes keys.
    pub const WRITE: Self = Self(1 << 0);
    /// Only reads keys.
    pub const READONLY: Self = Self(1 << 1);
    /// May grow memory use (refused when out of memory in Redis).
    pub const DENYOOM: Self = Self(1 << 2);
    /// An administrative command.
    pub const ADMIN: Self = Self(1 << 3);
    /// Not allowed in scripts.
    pub const NOSCRIPT: Self = Self(1 << 4);
    /// Allowed while the server loads its data.
    pub const LOADING: Self = Self(1 << 5);
    /// Allowed on a replica with stale data.
    pub const STALE: Self = Self(1 << 6);
    /// Not shown in the slow log.
    pub const SKIP_SLOWLOG: Self = Self(1 << 7);
    /// Runs in constant or logarithmic time.
    pub const FAST: Self = Self(1 << 8);
    /// Allowed before authentication.
    pub const NO_AUTH: Self = Self(1 << 9);
    /// Allowed while a script or module command is busy.
    pub const ALLOW_BUSY: Self = Self(1 << 10);

    /// The flags' names in the order Redis lists them (`addReplyFlagsForCommand`).
    const NAMES: [(Self, &'static str); 11] = [
        (Self::WRITE, "write"),
        (Self::READONLY, "readonly"),
        (Self::DENYOOM, "denyoom"),
        (Self::ADMIN, "admin"),
        (Self::NOSCRIPT, "noscript"),
        (Self::LOADING, "loading"),
        (Self::STALE, "stale"),
        (Self::SKIP_SLOWLOG, "skip_slowlog"),
        (Self::FAST, "fast"),
        (Self::NO_AUTH, "no_auth"),
        (Self::ALLOW_BUSY, "allow_busy"),
    ];

    /// No flags.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// These flags and `other`'s.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// True if every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the flags set, in Redis's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(flag, _)| self.contains(*flag))
            .map(|(_, name)| name)
    }
}

/// Where a command's keys are (a Redis key specification of the begin-search "index"
/// and find-keys "range" kinds, the only kinds ferrotx's commands use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Redis's note on the specification, if any.
    pub notes: Option<&'static str>,
    /// Its flags (`RO`, `RW`, `OW`, `RM`, `access`, `update`, `insert`, `delete`,
    /// `variable_flags`), in Redis's order.
    pub flags: &'static [&'static str],
    /// The first key's argument index.
    pub begin_index: i64,
    /// The last key's index relative to the first (negative: from the end, -1 is the
    /// last argument).
    pub last_key: i64,
    /// Arguments from one key to the next.
    pub key_step: i64,
    /// Redis's limit field (0: none).
    pub limit: i64,
}

/// A command's documentation, as COMMAND DOCS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Docs {
    /// One line on what it does.
    pub summary: &'static str,
    /// The Redis version that introduced it.
    pub since: &'static str,
    /// Its group (`string`, `generic`, `connection`, ...).
    pub group: &'static str,
    /// Its time complexity.
    pub complexity: &'static str,
}

/// One command of the table.
#[derive(Clone, Copy, Debug)]
pub struct CommandSpec {
    /// Its full name in lower case (`get`, `client|setname`).
    pub name: &'static str,
    /// Which command it is.
    pub id: CommandId,
    /// Redis's arity: the number of arguments, the name (and subcommand) included, if
    /// positive; at least minus that many if negative.
    pub arity: i32,
    /// Its flags.
    pub flags: CommandFlags,
    /// Its ACL categories, in Redis's order (`@read`, `@string`, ...).
    pub acl_categories: &'static [&'static str],
    /// Redis's tips for clients (`request_policy:...`, `nondeterministic_output`).
    pub tips: &'static [&'static str],
    /// Where its keys are.
    pub key_specs: &'static [KeySpec],
    /// Its subcommands, for a container.
    pub subcommands: &'static [CommandSpec],
    /// Its documentation.
    pub docs: Docs,
}

impl CommandSpec {
    /// True if `argc` arguments (the name included) satisfy the arity.
    pub fn arity_allows(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// True for a command that writes keys.
    pub fn is_write(&self) -> bool {
        self.flags.contains(CommandFlags::WRITE)
    }

    /// True for a command that only reads keys.
    pub fn is_readonly(&self) -> bool {
        self.flags.contains(CommandFlags::READONLY)
    }

    /// True for a command Redis calls fast (constant or logarithmic time).
    pub fn is_fast(&self) -> bool {
        self.flags.contains(CommandFlags::FAST)
    }

    /// True for a command allowed before authentication (AUTH, HELLO, QUIT).
    pub fn allowed_without_auth(&self) -> bool {
        self.flags.contains(CommandFlags::NO_AUTH)
    }

    /// Redis's legacy key positions (first key, last key, step), from the first key
    /// specification as COMMAND INFO computes them: (0, 0, 0) for a command without
    /// keys.
    pub fn key_positions(&self) -> (i64, i64, i64) {
        match self.key_specs.first() {
            None => (0, 0, 0),
            Some(spec) => {
                let last = if spec.last_key >= 0 {
                    spec.begin_index + spec.last_key
                } else {
                    spec.last_key
                };
                (spec.begin_index, last, spec.key_step)
            }
        }
    }
}

/// Every command, in the order COMMAND lists them.
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ping",
        id: CommandId::Ping,
        arity: -1,
        flags: CommandFlags::FAST,
        acl_categories: FAST_CONNECTION,
        tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
        docs: Docs {
            summary: "Ping the server",
            since: "1.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "echo",
        id: CommandId::Echo,
        arity: 2,
        flags: LOADING_STALE.union(CommandFlags::FAST),
        acl_categories: FAST_CONNECTION,
        docs: Docs {
            summary: "Echo the given string",
            since: "1.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "hello",
        id: CommandId::Hello,
        arity: -1,
        flags: HANDSHAKE,
        acl_categories: FAST_CONNECTION,
        docs: Docs {
            summary: "Handshake with Redis",
            since: "6.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "auth",
        id: CommandId::Auth,
        arity: -2,
        flags: HANDSHAKE,
        acl_categories: FAST_CONNECTION,
        docs: Docs {
            summary: "Authenticate to the server",
            since: "1.0.0",
            group: "connection",
            complexity: "O(N) where N is the number of passwords defined for the user",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "select",
        id: CommandId::Select,
        arity: 2,
        flags: LOADING_STALE.union(CommandFlags::FAST),
        acl_categories: FAST_CONNECTION,
        docs: Docs {
            summary: "Change the selected database for the current connection",
            since: "1.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "quit",
        id: CommandId::Quit,
        arity: -1,
        flags: HANDSHAKE,
        acl_categories: FAST_CONNECTION,
        docs: Docs {
            summary: "Close the connection",
            since: "1.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "get",
        id: CommandId::Get,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: &["@read", "@string", "@fast"],
        key_specs: &[one_key(&["RO", "access"])],
        docs: Docs {
            summary: "Get the value of a key",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "set",
        id: CommandId::Set,
        arity: -3,
        flags: WRITE_DENYOOM,
        acl_categories: &["@write", "@string", "@slow"],
        key_specs: &[KeySpec {
            notes: Some("RW and ACCESS due to the optional `GET` argument"),
            ..one_key(&["RW", "access", "update", "variable_flags"])
        }],
        docs: Docs {
            summary: "Set the string value of a key",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "setnx",
        id: CommandId::SetNx,
        arity: 3,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["OW", "insert"])],
        docs: Docs {
            summary: "Set the value of a key, only if the key does not exist",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "getset",
        id: CommandId::GetSet,
        arity: 3,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "update"])],
        docs: Docs {
            summary: "Set the string value of a key and return its old value",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "getdel",
        id: CommandId::GetDel,
        arity: 2,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "delete"])],
        docs: Docs {
            summary: "Get the value of a key and delete the key",
            since: "6.2.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "del",
        id: CommandId::Del,
        arity: -2,
        flags: CommandFlags::WRITE,
        acl_categories: &["@keyspace", "@write", "@slow"],
        tips: &["request_policy:multi_shard", "response_policy:agg_sum"],
        key_specs: &[all_keys(&["RM", "delete"], 1)],
        docs: Docs {
            summary: "Delete a key",
            since: "1.0.0",
            group: "generic",
            complexity: "O(N) where N is the number of keys that will be removed. When a key \
                         to remove holds a value other than a string, the individual \
                         complexity for this key is O(M) where M is the number of elements \
                         in the list, set, sorted set or hash. Removing a single key that \
                         holds a string value is O(1).",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "exists",
        id: CommandId::Exists,
        arity: -2,
        flags: READONLY_FAST,
        acl_categories: &["@keyspace", "@read", "@fast"],
        tips: &["request_policy:multi_shard", "response_policy:agg_sum"],
        key_specs: &[all_keys(&["RO"], 1)],
        docs: Docs {
            summary: "Determine if a key exists",
            since: "1.0.0",
            group: "generic",
            complexity: "O(N) where N is the number of keys to check.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "incr",
        id: CommandId::Incr,
        arity: 2,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "update"])],
        docs: Docs {
            summary: "Increment the integer value of a key by one",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "incrby",
        id: CommandId::IncrBy,
        arity: 3,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "update"])],
        docs: Docs {
            summary: "Increment the integer value of a key by the given amount",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "decr",
        id: CommandId::Decr,
        arity: 2,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "update"])],
        docs: Docs {
            summary: "Decrement the integer value of a key by one",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "decrby",
        id: CommandId::DecrBy,
        arity: 3,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "access", "update"])],
        docs: Docs {
            summary: "Decrement the integer value of a key by the given number",
            since: "1.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "append",
        id: CommandId::Append,
        arity: 3,
        flags: WRITE_DENYOOM_FAST,
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[one_key(&["RW", "insert"])],
        docs: Docs {
            summary: "Append a value to a key",
            since: "2.0.0",
            group: "string",
            complexity: "O(1). The amortized time complexity is O(1) assuming the appended \
                         value is small and the already present value is of any size, since \
                         the dynamic string library used by Redis will double the free space \
                         available on every reallocation.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "strlen",
        id: CommandId::Strlen,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: &["@read", "@string", "@fast"],
        key_specs: &[one_key(&["RO"])],
        docs: Docs {
            summary: "Get the length of the value stored in a key",
            since: "2.2.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "type",
        id: CommandId::Type,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: &["@keyspace", "@read", "@fast"],
        key_specs: &[one_key(&["RO"])],
        docs: Docs {
            summary: "Determine the type stored at key",
            since: "1.0.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "mget",
        id: CommandId::MGet,
        arity: -2,
        flags: READONLY_FAST,
        acl_categories: &["@read", "@string", "@fast"],
        tips: &["request_policy:multi_shard"],
        key_specs: &[all_keys(&["RO", "access"], 1)],
        docs: Docs {
            summary: "Get the values of all the given keys",
            since: "1.0.0",
            group: "string",
            complexity: "O(N) where N is the number of keys to retrieve.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "mset",
        id: CommandId::MSet,
        arity: -3,
        flags: WRITE_DENYOOM,
        acl_categories: &["@write", "@string", "@slow"],
        tips: &[
            "request_policy:multi_shard",
            "response_policy:all_succeeded",
        ],
        key_specs: &[all_keys(&["OW", "update"], 2)],
        docs: Docs {
            summary: "Set multiple keys to multiple values",
            since: "1.0.1",
            group: "string",
            complexity: "O(N) where N is the number of keys to set.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "msetnx",
        id: CommandId::MSetNx,
        arity: -3,
        flags: WRITE_DENYOOM,
        acl_categories: &["@write", "@string", "@slow"],
        tips: &["request_policy:multi_shard", "response_policy:agg_min"],
        key_specs: &[all_keys(&["OW", "insert"], 2)],
        docs: Docs {
            summary: "Set multiple keys to multiple values, only if none of the keys exist",
            since: "1.0.1",
            group: "string",
            complexity: "O(N) where N is the number of keys to set.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "setex",
        id: CommandId::SetEx,
        arity: 4,
        flags: WRITE_DENYOOM,
        acl_categories: &["@write", "@string", "@slow"],
        key_specs: &[one_key(&["OW", "update"])],
        docs: Docs {
            summary: "Set the value and expiration of a key",
            since: "2.0.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "psetex",
        id: CommandId::PSetEx,
        arity: 4,
        flags: WRITE_DENYOOM,
        acl_categories: &["@write", "@string", "@slow"],
        key_specs: &[one_key(&["OW", "update"])],
        docs: Docs {
            summary: "Set the value and expiration in milliseconds of a key",
            since: "2.6.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "getex",
        id: CommandId::GetEx,
        arity: -2,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: WRITE_STRING_FAST,
        key_specs: &[KeySpec {
            notes: Some("RW and UPDATE because it changes the TTL"),
            ..one_key(&["RW", "access", "update"])
        }],
        docs: Docs {
            summary: "Get the value of a key and optionally set its expiration",
            since: "6.2.0",
            group: "string",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "expire",
        id: CommandId::Expire,
        arity: -3,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: KEYSPACE_WRITE_FAST,
        key_specs: &[one_key(&["RW", "update"])],
        docs: Docs {
            summary: "Set a key's time to live in seconds",
            since: "1.0.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "pexpire",
        id: CommandId::PExpire,
        arity: -3,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: KEYSPACE_WRITE_FAST,
        key_specs: &[one_key(&["RW", "update"])],
        docs: Docs {
            summary: "Set a key's time to live in milliseconds",
            since: "2.6.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "expireat",
        id: CommandId::ExpireAt,
        arity: -3,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: KEYSPACE_WRITE_FAST,
        key_specs: &[one_key(&["RW", "update"])],
        docs: Docs {
            summary: "Set the expiration for a key as a UNIX timestamp",
            since: "1.2.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "pexpireat",
        id: CommandId::PExpireAt,
        arity: -3,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: KEYSPACE_WRITE_FAST,
        key_specs: &[one_key(&["RW", "update"])],
        docs: Docs {
            summary: "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
            since: "2.6.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "ttl",
        id: CommandId::Ttl,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: KEYSPACE_READ_FAST,
        tips: &["nondeterministic_output"],
        key_specs: &[one_key(&["RO", "access"])],
        docs: Docs {
            summary: "Get the time to live for a key in seconds",
            since: "1.0.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "pttl",
        id: CommandId::PTtl,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: KEYSPACE_READ_FAST,
        tips: &["nondeterministic_output"],
        key_specs: &[one_key(&["RO", "access"])],
        docs: Docs {
            summary: "Get the time to live for a key in milliseconds",
            since: "2.6.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "expiretime",
        id: CommandId::ExpireTime,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: KEYSPACE_READ_FAST,
        key_specs: &[one_key(&["RO", "access"])],
        docs: Docs {
            summary: "Get the expiration Unix timestamp for a key",
            since: "7.0.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "pexpiretime",
        id: CommandId::PExpireTime,
        arity: 2,
        flags: READONLY_FAST,
        acl_categories: KEYSPACE_READ_FAST,
        key_specs: &[one_key(&["RO", "access"])],
        docs: Docs {
            summary: "Get the expiration Unix timestamp for a key in milliseconds",
            since: "7.0.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "persist",
        id: CommandId::Persist,
        arity: 2,
        flags: CommandFlags::WRITE.union(CommandFlags::FAST),
        acl_categories: KEYSPACE_WRITE_FAST,
        key_specs: &[one_key(&["RW", "update"])],
        docs: Docs {
            summary: "Remove the expiration from a key",
            since: "2.2.0",
            group: "generic",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "watch",
        id: CommandId::Watch,
        arity: -2,
        flags: TRANSACTION_CONTROL,
        acl_categories: FAST_TRANSACTION,
        key_specs: &[all_keys(&["RO"], 1)],
        docs: Docs {
            summary: "Watch the given keys to determine execution of the MULTI/EXEC block",
            since: "2.2.0",
            group: "transactions",
            complexity: "O(1) for every key.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "unwatch",
        id: CommandId::Unwatch,
        arity: 1,
        flags: TRANSACTION_CONTROL,
        acl_categories: FAST_TRANSACTION,
        docs: Docs {
            summary: "Forget about all watched keys",
            since: "2.2.0",
            group: "transactions",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "multi",
        id: CommandId::Multi,
        arity: 1,
        flags: TRANSACTION_CONTROL,
        acl_categories: FAST_TRANSACTION,
        docs: Docs {
            summary: "Mark the start of a transaction block",
            since: "1.2.0",
            group: "transactions",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "exec",
        id: CommandId::Exec,
        arity: 1,
        flags: CommandFlags::NOSCRIPT
            .union(LOADING_STALE)
            .union(CommandFlags::SKIP_SLOWLOG),
        acl_categories: &["@slow", "@transaction"],
        docs: Docs {
            summary: "Execute all commands issued after MULTI",
            since: "1.2.0",
            group: "transactions",
            complexity: "Depends on commands in the transaction",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "discard",
        id: CommandId::Discard,
        arity: 1,
        flags: TRANSACTION_CONTROL,
        acl_categories: FAST_TRANSACTION,
        docs: Docs {
            summary: "Discard all commands issued after MULTI",
            since: "2.0.0",
            group: "transactions",
            complexity: "O(N), when N is the number of queued commands",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "dbsize",
        id: CommandId::DbSize,
        arity: 1,
        flags: READONLY_FAST,
        acl_categories: &["@keyspace", "@read", "@fast"],
        tips: &["request_policy:all_shards", "response_policy:agg_sum"],
        docs: Docs {
            summary: "Return the number of keys in the selected database",
            since: "1.0.0",
            group: "server",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "scan",
        id: CommandId::Scan,
        arity: -2,
        flags: CommandFlags::READONLY,
        acl_categories: &["@keyspace", "@read", "@slow"],
        tips: &["nondeterministic_output", "request_policy:special"],
        docs: Docs {
            summary: "Incrementally iterate the keys space",
            since: "2.8.0",
            group: "generic",
            complexity: "O(1) for every call. O(N) for a complete iteration, including enough \
                         command calls for the cursor to return back to 0. N is the number of \
                         elements inside the collection.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "keys",
        id: CommandId::Keys,
        arity: 2,
        flags: CommandFlags::READONLY,
        acl_categories: &["@keyspace", "@read", "@slow", "@dangerous"],
        tips: &["request_policy:all_shards", "nondeterministic_output_order"],
        docs: Docs {
            summary: "Find all keys matching the given pattern",
            since: "1.0.0",
            group: "generic",
            complexity: "O(N) with N being the number of keys in the database, under the \
                         assumption that the key names in the database and the given pattern \
                         have limited length.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "info",
        id: CommandId::Info,
        arity: -1,
        flags: LOADING_STALE,
        acl_categories: &["@slow", "@dangerous"],
        tips: &[
            "nondeterministic_output",
            "request_policy:all_shards",
            "response_policy:special",
        ],
        docs: Docs {
            summary: "Get information and statistics about the server",
            since: "1.0.0",
            group: "server",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "flushall",
        id: CommandId::FlushAll,
        arity: -1,
        flags: CommandFlags::WRITE,
        acl_categories: &["@keyspace", "@write", "@slow", "@dangerous"],
        tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
        docs: Docs {
            summary: "Remove all keys from all databases",
            since: "1.0.0",
            group: "server",
            complexity: "O(N) where N is the total number of keys in all databases",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "flushdb",
        id: CommandId::FlushDb,
        arity: -1,
        flags: CommandFlags::WRITE,
        acl_categories: &["@keyspace", "@write", "@slow", "@dangerous"],
        tips: &["request_policy:all_shards", "response_policy:all_succeeded"],
        docs: Docs {
            summary: "Remove all keys from the current database",
            since: "1.0.0",
            group: "server",
            complexity: "O(N) where N is the number of keys in the selected database",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "client",
        id: CommandId::Client,
        arity: -2,
        flags: CommandFlags::empty(),
        acl_categories: &["@slow"],
        subcommands: CLIENT_SUBCOMMANDS,
        docs: Docs {
            summary: "A container for client connection commands",
            since: "2.4.0",
            group: "connection",
            complexity: "Depends on subcommand.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "command",
        id: CommandId::Command,
        arity: -1,
        flags: LOADING_STALE,
        acl_categories: SLOW_CONNECTION,
        tips: &["nondeterministic_output_order"],
        subcommands: COMMAND_SUBCOMMANDS,
        docs: Docs {
            summary: "Get array of Redis command details",
            since: "2.8.13",
            group: "server",
            complexity: "O(N) where N is the total number of Redis commands",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "config",
        id: CommandId::Config,
        arity: -2,
        flags: CommandFlags::empty(),
        acl_categories: &["@slow"],
        subcommands: CONFIG_SUBCOMMANDS,
        docs: Docs {
            summary: "A container for server configuration commands",
            since: "2.0.0",
            group: "server",
            complexity: "Depends on subcommand.",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "ferrotx",
        id: CommandId::Ferrotx,
        arity: -2,
        flags: CommandFlags::empty(),
        acl_categories: &["@slow"],
        subcommands: FERROTX_SUBCOMMANDS,
        docs: Docs {
            summary: "A container for ferrotx's administrative commands",
            since: FERROTX_SINCE,
            group: "server",
            complexity: "Depends on subcommand.",
        },
        ..NO_KEYS
    },
];

/// The ferrotx version that introduced ferrotx's own commands (COMMAND DOCS' `since`).
const FERROTX_SINCE: &str = "0.1.0";

/// FERROTX's subcommands.
static FERROTX_SUBCOMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "ferrotx|copies",
    id: CommandId::FerrotxCopies,
    arity: 2,
    flags: CommandFlags::ADMIN
        .union(CommandFlags::NOSCRIPT)
        .union(LOADING_STALE),
    acl_categories: &["@admin", "@slow", "@dangerous"],
    tips: &["nondeterministic_output"],
    docs: Docs {
        summary: "List the partition copies this node holds, with each table's digest and \
                  object count",
        since: FERROTX_SINCE,
        group: "server",
        complexity: "O(N) where N is the number of objects in the node's copies",
    },
    ..NO_KEYS
}];

/// CONFIG's subcommands that ferrotx implements (over the parameters of
/// [`crate::config`]).
static CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "config|get",
        id: CommandId::ConfigGet,
        arity: -3,
        flags: CommandFlags::ADMIN
            .union(CommandFlags::NOSCRIPT)
            .union(LOADING_STALE),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        docs: Docs {
            summary: "Get the values of configuration parameters",
            since: "2.0.0",
            group: "server",
            complexity: "O(N) when N is the number of configuration parameters provided",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "config|set",
        id: CommandId::ConfigSet,
        arity: -4,
        flags: CommandFlags::ADMIN
            .union(CommandFlags::NOSCRIPT)
            .union(LOADING_STALE),
        acl_categories: &["@admin", "@slow", "@dangerous"],
        tips: &["request_policy:all_nodes", "response_policy:all_succeeded"],
        docs: Docs {
            summary: "Set configuration parameters to the given values",
            since: "2.0.0",
            group: "server",
            complexity: "O(N) when N is the number of configuration parameters provided",
        },
        ..NO_KEYS
    },
];

/// CLIENT's subcommands that ferrotx implements.
static CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "client|id",
        id: CommandId::ClientId,
        arity: 2,
        flags: CLIENT_SUBCOMMAND,
        acl_categories: SLOW_CONNECTION,
        docs: Docs {
            summary: "Returns the client ID for the current connection",
            since: "5.0.0",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "client|setname",
        id: CommandId::ClientSetName,
        arity: 3,
        flags: CLIENT_SUBCOMMAND,
        acl_categories: SLOW_CONNECTION,
        docs: Docs {
            summary: "Set the current connection name",
            since: "2.6.9",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "client|getname",
        id: CommandId::ClientGetName,
        arity: 2,
        flags: CLIENT_SUBCOMMAND,
        acl_categories: SLOW_CONNECTION,
        docs: Docs {
            summary: "Get the current connection name",
            since: "2.6.9",
            group: "connection",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
];

/// COMMAND's subcommands that ferrotx implements.
static COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "command|count",
        id: CommandId::CommandCount,
        arity: 2,
        flags: LOADING_STALE,
        acl_categories: SLOW_CONNECTION,
        docs: Docs {
            summary: "Get total number of Redis commands",
            since: "2.8.13",
            group: "server",
            complexity: "O(1)",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "command|info",
        id: CommandId::CommandInfo,
        arity: -2,
        flags: LOADING_STALE,
        acl_categories: SLOW_CONNECTION,
        tips: &["nondeterministic_output_order"],
        docs: Docs {
            summary: "Get array of specific Redis command details, or all when no argument \
                      is given.",
            since: "2.8.13",
            group: "server",
            complexity: "O(N) where N is the number of commands to look up",
        },
        ..NO_KEYS
    },
    CommandSpec {
        name: "command|docs",
        id: CommandId::CommandDocs,
        arity: -2,
        flags: LOADING_STALE,
        acl_categories: SLOW_CONNECTION,
        tips: &["nondeterministic_output_order"],
        docs: Docs {
            summary: "Get array of specific Redis command documentation",
            since: "7.0.0",
            group: "server",
            complexity: "O(N) where N is the number of commands to look up",
        },
        ..NO_KEYS
    },
];

/// The fields most entries share: no keys, no tips, no subcommands (the rest is
/// overwritten by every entry).
const NO_KEYS: CommandSpec = CommandSpec {
    name: "",
    id: CommandId::Ping,
    arity: 0,
    flags: CommandFlags::empty(),
    acl_categories: &[],
    tips: &[],
    key_specs: &[],
    subcommands: &[],
    docs: Docs {
        summary: "",
        since: "",
        group: "",
        complexity: "",
    },
};

const LOADING_STALE: CommandFlags = CommandFlags::LOADING.union(CommandFlags::STALE);
const READONLY_FAST: CommandFlags = CommandFlags::READONLY.union(CommandFlags::FAST);
const WRITE_DENYOOM: CommandFlags = CommandFlags::WRITE.union(CommandFlags::DENYOOM);
const WRITE_DENYOOM_FAST: CommandFlags = WRITE_DENYOOM.union(CommandFlags::FAST);
/// AUTH, HELLO and QUIT.
const HANDSHAKE: CommandFlags = CommandFlags::NOSCRIPT
    .union(LOADING_STALE)
    .union(CommandFlags::FAST)
    .union(CommandFlags::NO_AUTH)
    .union(CommandFlags::ALLOW_BUSY);
/// WATCH, UNWATCH, MULTI and DISCARD.
const TRANSACTION_CONTROL: CommandFlags = CommandFlags::NOSCRIPT
    .union(LOADING_STALE)
    .union(CommandFlags::FAST)
    .union(CommandFlags::ALLOW_BUSY);
const CLIENT_SUBCOMMAND: CommandFlags = CommandFlags::NOSCRIPT.union(LOADING_STALE);

const FAST_CONNECTION: &[&str] = &["@fast", "@connection"];
const SLOW_CONNECTION: &[&str] = &["@slow", "@connection"];
const FAST_TRANSACTION: &[&str] = &["@fast", "@transaction"];
const WRITE_STRING_FAST: &[&str] = &["@write", "@string", "@fast"];
const KEYSPACE_WRITE_FAST: &[&str] = &["@keyspace", "@write", "@fast"];
const KEYSPACE_READ_FAST: &[&str] = &["@keyspace", "@read", "@fast"];

/// The key specification of a command whose only key is its first argument.
const fn one_key(flags: &'static [&'static str]) -> KeySpec {
    KeySpec {
        notes: None,
        flags,
        begin_index: 1,
        last_key: 0,
        key_step: 1,
        limit: 0,
    }
}

/// The key specification of a command whose arguments from the first on are keys,
/// every `step`-th.
const fn all_keys(flags: &'static [&'static str], step: i64) -> KeySpec {
    KeySpec {
        notes: None,
        flags,
        begin_index: 1,
        last_key: -1,
        key_step: step,
        limit: 0,
    }
}

/// The top-level command named `name` (any case).
fn find(table: &'static [CommandSpec], name: &[u8]) -> Option<&'static CommandSpec> {
    table.iter().find(|spec| {
        let short = match spec.name.split_once('|') {
            Some((_, sub)) => sub,
            None => spec.name,
        };
        short.as_bytes().eq_ignore_ascii_case(name)
    })
}

/// The command `args` asks for, checked as Redis checks it before anything else
/// (`commandCheckExistence`, `commandCheckArity`): an unknown command or subcommand, or
/// the wrong number of arguments, is an error reply (and flags a MULTI block for
/// EXECABORT).
pub fn lookup(args: Args<'_>) -> Result<&'static CommandSpec, Reply> {
    let name = args.get(0).expect("a request has at least one argument");
    let Some(base) = find(COMMANDS, name) else {
        return Err(unknown_command(args));
    };
    let spec = if base.subcommands.is_empty() || args.len() == 1 {
        base
    } else {
        match find(base.subcommands, &args[1]) {
            Some(sub) => sub,
            None => {
                let mut message = b"ERR unknown subcommand '".to_vec();
                message.extend_from_slice(c_string_prefix(&args[1], 128));
                message.extend_from_slice(b"'. Try ");
                message.extend(name.iter().map(u8::to_ascii_uppercase));
                message.extend_from_slice(b" HELP.");
                return Err(Reply::error(message));
            }
        }
    };
    if !spec.arity_allows(args.len()) {
        return Err(wrong_arity(spec.name));
    }
    Ok(spec)
}

/// The command named `name` in COMMAND INFO / DOCS form: a top-level name, or
/// `container|subcommand` (any case).
pub fn lookup_by_name(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut parts = name.split(|&byte| byte == b'|');
    let base = find(COMMANDS, parts.next()?)?;
    match (parts.next(), parts.next()) {
        (None, _) => Some(base),
        (Some(sub), None) if !base.subcommands.is_empty() => find(base.subcommands, sub),
        _ => None,
    }
}

/// Redis's error for a command called with the wrong number of arguments.
pub fn wrong_arity(full_name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{full_name}' command"
    ))
}

/// Redis's error for an unknown command: its name and the start of its arguments, each
/// cut at 128 bytes (and, as C strings, at a NUL), the arguments listed only while the
/// list is shorter than 128 bytes.
fn unknown_command(args: Args<'_>) -> Reply {
    /// How much of the name and of the arguments Redis quotes.
    const QUOTED_BYTES_MAX: usize = 128;
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(c_string_prefix(&args[0], QUOTED_BYTES_MAX));
    message.extend_from_slice(b"', with args beginning with: ");
    let mut quoted = Vec::new();
    for arg in args.iter().skip(1) {
        if quoted.len() >= QUOTED_BYTES_MAX {
            break;
        }
        let precision = QUOTED_BYTES_MAX - quoted.len();
        quoted.push(b'\'');
        quoted.extend_from_slice(c_string_prefix(arg, precision));
        quoted.extend_from_slice(b"' ");
    }
    message.extend_from_slice(&quoted);
    Reply::error(message)
}

/// What printf's `%.<max>s` prints of `bytes`: up to the first NUL, at most `max`.
pub(crate) fn c_string_prefix(bytes: &[u8], max: usize) -> &[u8] {
    let end = memchr::memchr(0, bytes).unwrap_or(bytes.len()).min(max);
    &bytes[..end]
}
