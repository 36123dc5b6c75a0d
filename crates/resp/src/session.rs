//! One client connection's state machine, without I/O: authentication, RESP version,
//! name, the MULTI queue and the watched keys.
//!
//! The node feeds each parsed request to [`Session::handle`] and does what the returned
//! [`Action`] says. Two actions need the node to call back before the next request is
//! handled (pipelined requests wait in the input buffer meanwhile):
//!
//! - [`Action::Run`]: first offer the requests pipelined behind it to [`Session::join`],
//!   which adds the data commands among them to the plan; then run the [`Plan`] as one
//!   strictly serializable transaction (read [`Plan::keys_to_read`] into an [`Overlay`],
//!   record [`Plan::keys_written_unread`], check the watched keys' versions, apply
//!   [`Plan::apply`], write [`Overlay::writes`], commit; retry from the start on a
//!   conflict), then call [`Session::complete`] with the [`Outcome`];
//! - [`Action::ReadVersions`]: read each key's current version, then call
//!   [`Session::watched`].
//!
//! Those give the replies to send. Replies are encoded with
//! [`Session::protocol`] as it is after the call (HELLO 3's own reply is RESP3).
//!
//! MULTI/EXEC follows Redis 7 (`multi.c`): commands inside MULTI are answered `+QUEUED`;
//! one refused while queuing (unknown, wrong arity, NOAUTH, not allowed in a
//! transaction) makes EXEC fail with EXECABORT; one with a syntax or value error is
//! queued and its error becomes its entry in EXEC's reply; EXEC and DISCARD unwatch
//! every key. WATCH is optimistic: it records each key's version, and EXEC's transaction
//! fails with a null array if any of them changed, even by this client.

use std::sync::Arc;

use crate::command::{
    self, AdminRequest, Command, CommandFlags, CommandId, ConnectionCommand, DataCommand,
    HelloCommand, HelloOption, KeyspaceRequest, TransactionCommand, introspection,
    table::c_string_prefix, valid_client_name,
};
use crate::config::ConfigRequest;
use crate::info::{InfoRequest, InfoStats};
use crate::protocol::Args;
use crate::reply::{ProtocolVersion, Reply};
use crate::semantics::{
    Overlay, PLAN_REPLY_BYTES_MAX, REPLY_TOO_LARGE_ERROR, apply, reply_bytes_max,
};

/// Default for [`SessionConfig::queued_commands_max`]: a MULTI block is one ferrotx
/// transaction, whose reads and writes must all fit in one commit (its log records and
/// RPCs), so blocks are kept to a size real clients use (redis-py's pipelines default
/// to a few hundred commands).
pub const QUEUED_COMMANDS_MAX_DEFAULT: usize = 1024;

/// Default for [`SessionConfig::watched_keys_max`]: each watched key is one more read
/// validated by EXEC's transaction, so as many as a block may touch.
pub const WATCHED_KEYS_MAX_DEFAULT: usize = 1024;

/// Default for [`SessionConfig::pipeline_commands_max`]: enough for the pipelines
/// clients send (redis-benchmark's `-P 16`, a few dozen from redis-py), small enough that
/// one conflict retries little work.
pub const PIPELINE_COMMANDS_MAX_DEFAULT: usize = 64;

/// Most keys, and most request bytes, one pipelined plan gathers ([`Session::join`]):
/// far inside what one commit may carry, so a plan of many commands fits in one
/// transaction as its commands would one by one.
pub const PIPELINE_KEYS_MAX: usize = 1024;
/// See [`PIPELINE_KEYS_MAX`].
pub const PIPELINE_BYTES_MAX: usize = 256 << 10;

/// Most keys of writing commands one pipelined plan gathers ([`Session::join`]). A plan
/// holds its written keys locked while it commits, and fails if another holds one of
/// them: with many clients pipelining multi-key writes (redis-benchmark's MSET of 10
/// keys, 16 deep, from 50 clients), plans of 160 written keys each aborted 4 times per
/// commit. Reads conflict far less, so they have only [`PIPELINE_KEYS_MAX`].
pub const PIPELINE_WRITTEN_KEYS_MAX: usize = 32;

/// The server identity HELLO reports by default: Redis's name and the Redis version
/// whose behaviour ferrotx follows, because client libraries decide from them which
/// commands and reply forms they may use.
pub const SERVER_NAME_DEFAULT: &str = "redis";

/// See [`SERVER_NAME_DEFAULT`].
pub const SERVER_VERSION_DEFAULT: &str = "7.0.15";

/// What every session of a node shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// The password of Redis's `default` user (`requirepass`): while set, a client must
    /// authenticate before anything but AUTH, HELLO and QUIT. `None`: no password.
    pub password: Option<Vec<u8>>,
    /// HELLO's `server` field.
    pub server_name: String,
    /// HELLO's `version` field and INFO's `redis_version`.
    pub server_version: String,
    /// Most commands one MULTI block may queue.
    pub queued_commands_max: usize,
    /// Most keys one connection may watch at once.
    pub watched_keys_max: usize,
    /// Most pipelined data commands [`Session::join`] gathers into one plan; 1 runs each
    /// command as its own transaction.
    pub pipeline_commands_max: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            password: None,
            server_name: SERVER_NAME_DEFAULT.to_owned(),
            server_version: SERVER_VERSION_DEFAULT.to_owned(),
            queued_commands_max: QUEUED_COMMANDS_MAX_DEFAULT,
            watched_keys_max: WATCHED_KEYS_MAX_DEFAULT,
            pipeline_commands_max: PIPELINE_COMMANDS_MAX_DEFAULT,
        }
    }
}

/// What the node must do with a request.
#[derive(Debug)]
pub enum Action {
    /// Send this reply.
    Reply(Reply),
    /// Send this reply, if any, then close the connection (QUIT; or, with no reply,
    /// a request that looks like HTTP, which Redis drops as an attack).
    Close(Option<Reply>),
    /// Run this plan as one transaction, then call [`Session::complete`].
    Run(Plan),
    /// Read the current version of each of these keys (in order), then call
    /// [`Session::watched`] (WATCH).
    ReadVersions(Vec<Vec<u8>>),
    /// Answer this whole-keyspace request (DBSIZE, SCAN, KEYS, FLUSHALL, FLUSHDB) by
    /// asking every partition: reply an integer for DBSIZE,
    /// [`command::ScanRequest::reply`] for SCAN, [`command::keys_reply`] for KEYS, `+OK`
    /// once every key is deleted for FLUSHALL and FLUSHDB.
    Keyspace(KeyspaceRequest),
    /// Gather the node's numbers and reply [`Session::info_reply`] (INFO).
    Info(InfoRequest),
    /// Answer this administrative command from the node's state (FERROTX COPIES); the
    /// session is not told. Like a whole-keyspace request, its reply comes before the
    /// replies of the requests after it.
    Admin(AdminRequest),
    /// CONFIG GET or SET: reply [`ConfigRequest::reply`] over the node's values, and
    /// apply what SET changed.
    Config(ConfigRequest),
}

/// A key watched by WATCH, with the version it had then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedKey {
    /// The Redis key.
    pub key: Vec<u8>,
    /// What WATCH read of it.
    pub version: WatchVersion,
}

/// What WATCH records of a key: EXEC fails if the version changed, or if the key was
/// live with a deadline and the deadline has passed by EXEC (Redis 7: a watched key that
/// expires fails the EXEC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchVersion {
    /// Its version in the store (the node's to define: the store's object version of the
    /// key's store key, compared for equality).
    pub store_version: u64,
    /// The key's deadline (Unix time in milliseconds) if it was live and expiring when
    /// WATCH read it; `None` if it had no expiry, was absent, or had expired already.
    pub expires_at_ms: Option<u64>,
}

impl WatchVersion {
    /// True if the key, now at store version `store_version` at `now_ms` (Unix time in
    /// milliseconds), counts as unchanged for EXEC: the same version, and not expired
    /// since WATCH.
    pub fn unchanged(&self, store_version: u64, now_ms: u64) -> bool {
        store_version == self.store_version
            && self.expires_at_ms.is_none_or(|deadline| deadline > now_ms)
    }
}

/// One transaction for the node to run: data commands in order and the watched keys to
/// check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    commands: Vec<DataCommand>,
    watched: Vec<WatchedKey>,
    /// EXEC's: the commands must take effect together.
    exec: bool,
}

impl Plan {
    /// A plan of `commands` checking `watched`, EXEC's if `exec` (the node rebuilds a
    /// plan shipped to a primary with it).
    pub fn new(commands: Vec<DataCommand>, watched: Vec<WatchedKey>, exec: bool) -> Self {
        Self {
            commands,
            watched,
            exec,
        }
    }

    /// True for EXEC's plan (its commands take effect together, or none).
    pub fn is_exec(&self) -> bool {
        self.exec
    }

    /// The data commands, in order (one outside MULTI; any number, even none, for EXEC).
    pub fn commands(&self) -> &[DataCommand] {
        &self.commands
    }

    /// Keys whose version must still be the one recorded: if any changed, the
    /// transaction must not commit and the outcome is [`Outcome::WatchedKeyChanged`].
    /// The node reads their versions inside the transaction, so that its validation
    /// covers them.
    pub fn watched(&self) -> &[WatchedKey] {
        &self.watched
    }

    /// Every key the commands touch, once each (sorted), except those
    /// [`Plan::keys_written_unread`]: read them all into the overlay before
    /// [`Plan::apply`].
    pub fn keys_to_read(&self) -> Vec<&[u8]> {
        self.keys().0
    }

    /// The keys every command that touches them writes blindly
    /// ([`DataCommand::writes_blindly`]), once each (sorted): the node need not read
    /// them, and records them with [`Overlay::insert_unread`] (SET and MSET then cost
    /// the transaction no read).
    pub fn keys_written_unread(&self) -> Vec<&[u8]> {
        self.keys().1
    }

    /// [`Plan::keys_to_read`] and [`Plan::keys_written_unread`], from one sort of the
    /// commands' keys.
    pub fn keys(&self) -> (Vec<&[u8]>, Vec<&[u8]>) {
        let mut keys: Vec<(&[u8], bool)> = self
            .commands
            .iter()
            .flat_map(|command| {
                let blindly = command.writes_blindly();
                command.keys().map(move |key| (key, blindly))
            })
            .collect();
        // A key's accesses that look come first (false < true): the first of each key
        // says whether any access looks.
        keys.sort_unstable();
        keys.dedup_by_key(|(key, _)| *key);
        let (mut read, mut unread) = (Vec::new(), Vec::new());
        for (key, blindly) in keys {
            if blindly {
                unread.push(key)
            } else {
                read.push(key)
            }
        }
        (read, unread)
    }

    /// True for pipelined commands outside MULTI ([`Session::join`]), which the node may
    /// also run one by one ([`Plan::one_by_one`]) when together they are too large for
    /// one transaction; false for EXEC's, whose commands must take effect together.
    pub fn may_split(&self) -> bool {
        !self.exec && self.commands.len() > 1
    }

    /// Each command as a plan of its own, in order (see [`Plan::may_split`]).
    pub fn one_by_one(&self) -> impl Iterator<Item = Plan> + '_ {
        self.commands.iter().map(|command| Plan {
            commands: vec![command.clone()],
            watched: Vec::new(),
            exec: false,
        })
    }

    /// True if no command writes (the node may run a read-only transaction).
    pub fn is_read_only(&self) -> bool {
        self.commands.iter().all(DataCommand::is_read_only)
    }

    /// Applies the commands in order to `overlay` (filled with [`Plan::keys_to_read`]
    /// and [`Plan::keys_written_unread`]): one reply per command, for [`Outcome::Committed`] once
    /// the overlay's writes are committed.
    ///
    /// A plan that may write removes the expired keys it touches: it sets
    /// [`Overlay::set_remove_expired`] unless [`Plan::is_read_only`].
    pub fn apply(&self, overlay: &mut Overlay) -> Vec<Reply> {
        overlay.set_remove_expired(!self.is_read_only());
        // The replies are built whole before the first is sent: a command whose values
        // would take them past the bound does not run, and answers an error.
        let mut reply_bytes_left = PLAN_REPLY_BYTES_MAX;
        self.commands
            .iter()
            .map(|command| {
                let reply_bytes = reply_bytes_max(command, overlay);
                if reply_bytes > reply_bytes_left {
                    return Reply::error_static(REPLY_TOO_LARGE_ERROR);
                }
                reply_bytes_left -= reply_bytes;
                apply(command, overlay)
            })
            .collect()
    }
}

/// How the node's run of a [`Plan`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The transaction committed (or, read-only, ran): [`Plan::apply`]'s replies.
    Committed(Vec<Reply>),
    /// A watched key's version changed: nothing was written; EXEC answers a null array.
    WatchedKeyChanged,
    /// The transaction could not run (the cluster is unavailable, it kept
    /// conflicting): this error is the reply, and nothing was written.
    Failed(Reply),
}

/// A command queued inside MULTI.
#[derive(Clone, Debug)]
enum Queued {
    /// Runs in EXEC's transaction.
    Data(DataCommand),
    /// Runs in the session when EXEC's transaction is over, in its place.
    Connection(ConnectionCommand),
    /// UNWATCH (EXEC unwatches anyway): `+OK` in its place.
    Unwatch,
    /// A command whose arguments are wrong: this error in its place.
    Error(Reply),
}

/// Where one reply of EXEC's comes from.
#[derive(Clone, Debug)]
enum Slot {
    /// The next reply of the plan's run.
    Planned,
    /// This command, run in the session.
    Connection(ConnectionCommand),
    /// UNWATCH: `+OK`.
    Unwatch,
    /// This error.
    Error(Reply),
}

/// The MULTI block being queued.
#[derive(Debug, Default)]
struct Multi {
    queued: Vec<Queued>,
    /// A command was refused while queuing: EXEC fails with EXECABORT.
    dirty: bool,
    /// A command that may grow memory (DENYOOM) was queued: EXEC is refused while the
    /// node is out of memory, as Redis refuses it.
    denyoom: bool,
}

/// What the session waits for from the node.
#[derive(Debug, Default)]
enum Pending {
    #[default]
    Nothing,
    /// The versions of these keys (WATCH).
    Versions(Vec<Vec<u8>>),
    /// The outcome of data commands outside MULTI: one, and those pipelined behind it
    /// that [`Session::join`] added (their keys, the keys of those that write, and their
    /// request bytes, which bound the plan).
    Commands {
        count: usize,
        keys: usize,
        written_keys: usize,
        bytes: usize,
    },
    /// The outcome of EXEC's transaction; the slots say where each reply goes.
    Exec(Vec<Slot>),
}

/// One client connection's state (see the [module docs](self) for the call order).
#[derive(Debug)]
pub struct Session {
    config: Arc<SessionConfig>,
    client_id: u64,
    authenticated: bool,
    protocol: ProtocolVersion,
    name: Option<Vec<u8>>,
    multi: Option<Multi>,
    watched: Vec<WatchedKey>,
    pending: Pending,
    /// The node is past its memory limit: commands that may grow memory (DENYOOM) are
    /// refused ([`Session::set_out_of_memory`]).
    out_of_memory: bool,
}

/// Redis's reply to a command that may grow memory on a node past its `maxmemory`.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// EXEC's reply when its block is discarded because of `error`, as Redis words it.
fn exec_abort(error: &Reply) -> Reply {
    let message = error.error_message().expect("an error");
    // Redis's message carries a code only when it is not ERR.
    let message = message.strip_prefix(b"ERR ").unwrap_or(message);
    let mut abort = b"EXECABORT Transaction discarded because of: ".to_vec();
    abort.extend_from_slice(message);
    Reply::error(abort)
}

/// Redis's reply to a bad password.
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

impl Session {
    /// The session of a new connection whose CLIENT ID is `client_id` (unique on the
    /// node, never reused, as Redis's are).
    pub fn new(config: impl Into<Arc<SessionConfig>>, client_id: u64) -> Self {
        let config = config.into();
        Self {
            authenticated: config.password.is_none(),
            config,
            client_id,
            protocol: ProtocolVersion::Resp2,
            name: None,
            multi: None,
            watched: Vec::new(),
            pending: Pending::Nothing,
            out_of_memory: false,
        }
    }

    /// Says whether the node is past its memory limit, before requests are handled:
    /// while it does, commands that may grow memory (DENYOOM: SET, INCR, APPEND, ...,
    /// and an EXEC that queued one) are refused with `-OOM`; reads, deletes and
    /// everything else still run.
    pub fn set_out_of_memory(&mut self, out_of_memory: bool) {
        self.out_of_memory = out_of_memory;
    }

    /// The protocol to encode replies in.
    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    /// True until the client authenticates, when a password is configured (the parser
    /// then refuses large requests).
    pub fn auth_required(&self) -> bool {
        !self.authenticated
    }

    /// The connection's CLIENT ID.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The name set with CLIENT SETNAME or HELLO SETNAME.
    pub fn name(&self) -> Option<&[u8]> {
        self.name.as_deref()
    }

    /// True inside MULTI.
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// The keys watched now.
    pub fn watched_keys(&self) -> &[WatchedKey] {
        &self.watched
    }

    /// True while the session waits for [`Session::complete`] or [`Session::watched`]:
    /// the next request must wait.
    pub fn is_waiting(&self) -> bool {
        !matches!(self.pending, Pending::Nothing)
    }

    /// Handles one request. Panics if the session waits for the node
    /// ([`Session::is_waiting`]) or `args` is empty.
    pub fn handle(&mut self, args: Args<'_>) -> Action {
        assert!(
            !self.is_waiting(),
            "a request handled while the session waits for the node"
        );
        let name = args.get(0).expect("a request has at least one argument");
        let name_text = c_string_prefix(name, usize::MAX);
        // Redis drops connections whose requests look like HTTP (cross-protocol
        // scripting), without a reply.
        if name_text.eq_ignore_ascii_case(b"host:") || name_text.eq_ignore_ascii_case(b"post") {
            return Action::Close(None);
        }
        let is_exec = name.eq_ignore_ascii_case(b"exec");
        let spec = match command::lookup(args) {
            Ok(spec) => spec,
            Err(error) => return Action::Reply(self.reject(is_exec, error)),
        };
        if self.auth_required() && !spec.allowed_without_auth() {
            let error = Reply::error_static("NOAUTH Authentication required.");
            return Action::Reply(self.reject(is_exec, error));
        }
        let denyoom = spec.flags.contains(CommandFlags::DENYOOM);
        // As Redis: inside MULTI every command but EXEC, DISCARD and QUIT is refused too
        // (queuing takes memory), and EXEC if its block queued a DENYOOM one.
        if self.out_of_memory
            && (denyoom
                || self.multi.as_ref().is_some_and(|multi| {
                    !matches!(
                        spec.id,
                        CommandId::Exec | CommandId::Discard | CommandId::Quit
                    ) || is_exec && multi.denyoom
                }))
        {
            return Action::Reply(self.reject(is_exec, Reply::error_static(OOM)));
        }
        if let Some(multi) = &mut self.multi {
            multi.denyoom |= denyoom;
        }
        if self.multi.is_some() && !runs_inside_multi(spec.id) {
            return Action::Reply(self.queue(spec, args));
        }
        match command::parse(spec, args) {
            Err(error) => Action::Reply(error),
            Ok(Command::Data(command)) => {
                let keys = command.keys().count();
                self.pending = Pending::Commands {
                    count: 1,
                    keys,
                    written_keys: if command.is_read_only() { 0 } else { keys },
                    bytes: request_bytes(args),
                };
                Action::Run(Plan {
                    commands: vec![command],
                    watched: Vec::new(),
                    exec: false,
                })
            }
            Ok(Command::Connection(ConnectionCommand::Quit)) => Action::Close(Some(Reply::ok())),
            Ok(Command::Connection(command)) => Action::Reply(self.run_connection(command)),
            Ok(Command::Transaction(command)) => self.run_transaction(command),
            Ok(Command::Keyspace(request)) => Action::Keyspace(request),
            Ok(Command::Info(request)) => Action::Info(request),
            Ok(Command::Admin(request)) => Action::Admin(request),
            Ok(Command::Config(request)) => Action::Config(request),
        }
    }

    /// The versions of the keys of [`Action::ReadVersions`], in the same order: WATCH's
    /// reply.
    pub fn watched(&mut self, versions: &[WatchVersion]) -> Reply {
        let Pending::Versions(keys) = std::mem::take(&mut self.pending) else {
            panic!("versions given when the session did not ask for them");
        };
        assert_eq!(keys.len(), versions.len(), "one version per watched key");
        self.watched.extend(
            keys.into_iter()
                .zip(versions)
                .map(|(key, &version)| WatchedKey { key, version }),
        );
        Reply::ok()
    }

    /// Adds the pipelined request `args` to `plan`, the [`Action::Run`] plan of a data
    /// command outside MULTI that [`Session::handle`] just returned, if it is a data
    /// command too and the plan stays within its bounds
    /// ([`SessionConfig::pipeline_commands_max`], [`PIPELINE_KEYS_MAX`],
    /// [`PIPELINE_WRITTEN_KEYS_MAX`], [`PIPELINE_BYTES_MAX`]): then its reply comes from [`Session::complete`], after
    /// those of the commands before it. Otherwise nothing changes and the request waits
    /// for [`Session::handle`] once the plan completes (it is not consumed).
    ///
    /// Running the commands as one transaction keeps their order and each one's
    /// atomicity: a client that pipelines them has sent them all before any reply, so
    /// taking effect together, in order, is one of the outcomes it must expect.
    pub fn join(&mut self, plan: &mut Plan, args: Args<'_>) -> bool {
        let Pending::Commands {
            count,
            keys,
            written_keys,
            bytes,
        } = &mut self.pending
        else {
            return false;
        };
        if *count >= self.config.pipeline_commands_max {
            return false;
        }
        let Ok(spec) = command::lookup(args) else {
            return false;
        };
        if !self.authenticated || self.out_of_memory && spec.flags.contains(CommandFlags::DENYOOM) {
            // Handled on its own (and refused).
            return false;
        }
        let Ok(Command::Data(command)) = command::parse(spec, args) else {
            return false;
        };
        let (more_keys, more_bytes) = (command.keys().count(), request_bytes(args));
        let more_written = if command.is_read_only() { 0 } else { more_keys };
        if *keys + more_keys > PIPELINE_KEYS_MAX
            || *written_keys + more_written > PIPELINE_WRITTEN_KEYS_MAX
            || *bytes + more_bytes > PIPELINE_BYTES_MAX
        {
            return false;
        }
        *count += 1;
        *keys += more_keys;
        *written_keys += more_written;
        *bytes += more_bytes;
        plan.commands.push(command);
        true
    }

    /// The outcome of the [`Action::Run`] plan: appends the replies to send to
    /// `replies`, in order (one per data command outside MULTI, EXEC's one otherwise).
    /// Encode them in [`Session::protocol`] as it is after this call.
    pub fn complete(&mut self, outcome: Outcome, replies: &mut Vec<Reply>) {
        match std::mem::take(&mut self.pending) {
            Pending::Commands { count, .. } => match outcome {
                Outcome::Committed(planned) => {
                    assert_eq!(planned.len(), count, "one reply per command");
                    replies.extend(planned);
                }
                Outcome::Failed(error) => {
                    replies.extend(std::iter::repeat_n(error, count));
                }
                Outcome::WatchedKeyChanged => {
                    panic!("commands outside MULTI watch no key")
                }
            },
            Pending::Exec(slots) => replies.push(match outcome {
                Outcome::Committed(planned) => self.exec_reply(slots, planned),
                Outcome::WatchedKeyChanged => Reply::NullArray,
                // A primary past its memory limit refused the block's write: as Redis
                // answers an EXEC it refuses for memory, the block is discarded.
                Outcome::Failed(error) if error.error_message() == Some(OOM.as_bytes()) => {
                    exec_abort(&error)
                }
                Outcome::Failed(error) => error,
            }),
            Pending::Nothing | Pending::Versions(_) => {
                panic!("an outcome given when the session ran no plan")
            }
        }
    }

    /// INFO's reply for `request`, from the node's `stats`.
    pub fn info_reply(&self, request: &InfoRequest, stats: &InfoStats) -> Reply {
        request.reply(&self.config.server_version, stats)
    }

    /// Queues a command inside MULTI: `+QUEUED`, or an error that makes EXEC fail.
    fn queue(&mut self, spec: &command::CommandSpec, args: Args<'_>) -> Reply {
        if matches!(
            spec.id,
            CommandId::DbSize
                | CommandId::Scan
                | CommandId::Keys
                | CommandId::Info
                | CommandId::FlushAll
                | CommandId::FlushDb
                | CommandId::FerrotxCopies
                | CommandId::ConfigGet
                | CommandId::ConfigSet
        ) {
            // The node answers these outside any transaction (by asking every partition,
            // or from its own state): they cannot be part of EXEC's.
            let error = Reply::error_static("ERR Command not allowed inside a transaction");
            return self.reject(false, error);
        }
        let multi = self.multi.as_mut().expect("inside MULTI");
        if multi.queued.len() >= self.config.queued_commands_max {
            let error = Reply::error(format!(
                "ERR ferrotx transactions hold at most {} commands",
                self.config.queued_commands_max
            ));
            return self.reject(false, error);
        }
        // Once EXEC is bound to fail, Redis stops keeping the commands.
        if !multi.dirty {
            multi.queued.push(match command::parse(spec, args) {
                Ok(Command::Data(command)) => Queued::Data(command),
                Ok(Command::Connection(command)) => Queued::Connection(command),
                Ok(Command::Transaction(TransactionCommand::Unwatch)) => Queued::Unwatch,
                Ok(other) => unreachable!("{other:?} is not queued"),
                Err(error) => Queued::Error(error),
            });
        }
        Reply::queued()
    }

    /// A command refused before it runs: inside MULTI, EXEC will fail; a refused EXEC
    /// discards the transaction with an EXECABORT error, as Redis's
    /// `execCommandAbort` does.
    fn reject(&mut self, is_exec: bool, error: Reply) -> Reply {
        if let Some(multi) = &mut self.multi {
            multi.dirty = true;
        }
        if !is_exec {
            return error;
        }
        self.multi = None;
        self.watched.clear();
        exec_abort(&error)
    }

    /// MULTI, EXEC, DISCARD, WATCH and UNWATCH (outside MULTI, or MULTI, EXEC, DISCARD
    /// and WATCH inside).
    fn run_transaction(&mut self, command: TransactionCommand) -> Action {
        match command {
            TransactionCommand::Multi => {
                if self.multi.is_some() {
                    return Action::Reply(Reply::error_static("ERR MULTI calls can not be nested"));
                }
                self.multi = Some(Multi::default());
                Action::Reply(Reply::ok())
            }
            TransactionCommand::Discard => {
                if self.multi.take().is_none() {
                    return Action::Reply(Reply::error_static("ERR DISCARD without MULTI"));
                }
                self.watched.clear();
                Action::Reply(Reply::ok())
            }
            TransactionCommand::Exec => {
                let Some(multi) = self.multi.take() else {
                    return Action::Reply(Reply::error_static("ERR EXEC without MULTI"));
                };
                // EXEC unwatches every key, whatever happens.
                let watched = std::mem::take(&mut self.watched);
                if multi.dirty {
                    return Action::Reply(Reply::error_static(
                        "EXECABORT Transaction discarded because of previous errors.",
                    ));
                }
                let mut commands = Vec::new();
                let slots: Vec<Slot> = multi
                    .queued
                    .into_iter()
                    .map(|queued| match queued {
                        Queued::Data(command) => {
                            commands.push(command);
                            Slot::Planned
                        }
                        Queued::Connection(command) => Slot::Connection(command),
                        Queued::Unwatch => Slot::Unwatch,
                        Queued::Error(error) => Slot::Error(error),
                    })
                    .collect();
                if commands.is_empty() && watched.is_empty() {
                    // Nothing for the node to read or check.
                    return Action::Reply(self.exec_reply(slots, Vec::new()));
                }
                self.pending = Pending::Exec(slots);
                Action::Run(Plan {
                    commands,
                    watched,
                    exec: true,
                })
            }
            TransactionCommand::Watch(keys) => {
                if self.multi.is_some() {
                    return Action::Reply(Reply::error_static(
                        "ERR WATCH inside MULTI is not allowed",
                    ));
                }
                let mut new: Vec<Vec<u8>> = Vec::new();
                for key in keys {
                    // A key watched already stays watched at its first version.
                    if !self.watched.iter().any(|watched| watched.key == key) && !new.contains(&key)
                    {
                        new.push(key);
                    }
                    // Refused as soon as it is over the limit: the searches above cost
                    // at most the limit's square, however many keys the client sent.
                    if self.watched.len() + new.len() > self.config.watched_keys_max {
                        return Action::Reply(Reply::error(format!(
                            "ERR ferrotx watches at most {} keys per connection",
                            self.config.watched_keys_max
                        )));
                    }
                }
                if new.is_empty() {
                    return Action::Reply(Reply::ok());
                }
                self.pending = Pending::Versions(new.clone());
                Action::ReadVersions(new)
            }
            TransactionCommand::Unwatch => {
                self.watched.clear();
                Action::Reply(Reply::ok())
            }
        }
    }

    /// EXEC's reply: the queued commands' replies in order, the data commands' from
    /// the plan's run, the others' made now.
    fn exec_reply(&mut self, slots: Vec<Slot>, replies: Vec<Reply>) -> Reply {
        let planned = slots
            .iter()
            .filter(|slot| matches!(slot, Slot::Planned))
            .count();
        assert_eq!(replies.len(), planned, "one reply per command of the plan");
        let mut replies = replies.into_iter();
        // Each entry in the protocol spoken when it is made, as Redis writes them: a
        // HELLO inside the block changes the protocol of the entries after it only.
        let mut entries: Vec<(Reply, ProtocolVersion)> = Vec::with_capacity(slots.len());
        for slot in slots {
            let reply = match slot {
                Slot::Planned => replies.next().expect("counted above"),
                Slot::Connection(command) => self.run_connection(command),
                Slot::Unwatch => Reply::ok(),
                Slot::Error(error) => error,
            };
            entries.push((reply, self.protocol));
        }
        let last = self.protocol;
        Reply::Array(
            entries
                .into_iter()
                .map(|(reply, protocol)| {
                    if protocol == last {
                        reply
                    } else {
                        Reply::InProtocol(protocol, Box::new(reply))
                    }
                })
                .collect(),
        )
    }

    /// A command answered by the session alone (QUIT excepted).
    fn run_connection(&mut self, command: ConnectionCommand) -> Reply {
        match command {
            ConnectionCommand::Ping(None) => Reply::simple_static("PONG"),
            ConnectionCommand::Ping(Some(message)) | ConnectionCommand::Echo(message) => {
                Reply::bulk(message)
            }
            ConnectionCommand::Hello(hello) => self.hello(hello),
            ConnectionCommand::Auth { username, password } => {
                if username.is_none() && self.config.password.is_none() {
                    return Reply::error_static(
                        "ERR AUTH <password> called without any password configured for \
                         the default user. Are you sure your configuration is correct?",
                    );
                }
                let username = username.as_deref().unwrap_or(b"default");
                if self.authenticate(username, &password) {
                    Reply::ok()
                } else {
                    Reply::error_static(WRONGPASS)
                }
            }
            ConnectionCommand::Select => Reply::ok(),
            ConnectionCommand::Quit => Reply::ok(),
            ConnectionCommand::ClientId => {
                Reply::Integer(i64::try_from(self.client_id).unwrap_or(i64::MAX))
            }
            ConnectionCommand::ClientSetName(name) => {
                self.name = (!name.is_empty()).then_some(name);
                Reply::ok()
            }
            ConnectionCommand::ClientGetName => match &self.name {
                Some(name) => Reply::bulk(name.clone()),
                None => Reply::Null,
            },
            ConnectionCommand::CommandAll => introspection::all_commands(),
            ConnectionCommand::CommandCount => introspection::count(),
            ConnectionCommand::CommandInfo(names) => introspection::info_of(&names),
            ConnectionCommand::CommandDocs(names) => introspection::docs_of(&names),
        }
    }

    /// HELLO: its options in order, then the switch of protocol and the server's
    /// description.
    fn hello(&mut self, hello: HelloCommand) -> Reply {
        for option in hello.options {
            match option {
                HelloOption::Auth { username, password } => {
                    if !self.authenticate(&username, &password) {
                        return Reply::error_static(WRONGPASS);
                    }
                }
                HelloOption::SetName(name) => {
                    if !valid_client_name(&name) {
                        return Reply::error_static(
                            "ERR Client names cannot contain spaces, newlines or special \
                             characters.",
                        );
                    }
                    self.name = (!name.is_empty()).then_some(name);
                }
                HelloOption::Invalid(option) => {
                    let mut message = b"ERR Syntax error in HELLO option '".to_vec();
                    message.extend_from_slice(c_string_prefix(&option, usize::MAX));
                    message.push(b'\'');
                    return Reply::error(message);
                }
            }
        }
        if !self.authenticated {
            return Reply::error_static(
                "NOAUTH HELLO must be called with the client already authenticated, \
                 otherwise the HELLO AUTH <user> <pass> option can be used to \
                 authenticate the client and select the RESP protocol version at the \
                 same time",
            );
        }
        if let Some(version) = hello.version {
            self.protocol = version;
        }
        let field = |name: &'static str, value: Reply| (Reply::bulk_static(name), value);
        Reply::Map(vec![
            field("server", Reply::bulk(self.config.server_name.as_bytes())),
            field(
                "version",
                Reply::bulk(self.config.server_version.as_bytes()),
            ),
            field("proto", Reply::Integer(self.protocol.number())),
            field(
                "id",
                Reply::Integer(i64::try_from(self.client_id).unwrap_or(i64::MAX)),
            ),
            field("mode", Reply::bulk_static("standalone")),
            field("role", Reply::bulk_static("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    /// Checks `username` and `password` as Redis's default user (the only user):
    /// authenticates the connection on success; a failure leaves it as it was.
    fn authenticate(&mut self, username: &[u8], password: &[u8]) -> bool {
        let ok = username == b"default"
            && self
                .config
                .password
                .as_deref()
                .is_none_or(|expected| same_secret(expected, password));
        if ok {
            self.authenticated = true;
        }
        ok
    }
}

/// True for the commands that run inside MULTI rather than being queued.
/// A request's size for the pipeline bound: its arguments' bytes.
fn request_bytes(args: Args<'_>) -> usize {
    args.iter().map(<[u8]>::len).sum()
}

fn runs_inside_multi(id: CommandId) -> bool {
    matches!(
        id,
        CommandId::Exec
            | CommandId::Discard
            | CommandId::Multi
            | CommandId::Watch
            | CommandId::Quit
    )
}

/// Compares a password without stopping at the first difference, so that the time taken
/// tells nothing of where it differs.
fn same_secret(expected: &[u8], given: &[u8]) -> bool {
    if expected.len() != given.len() {
        return false;
    }
    expected
        .iter()
        .zip(given)
        .fold(0u8, |difference, (a, b)| difference | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests;
