//! One Redis client connection without its socket: the bytes it was sent, its RESP
//! parser and [`Session`], the replies to send, and the work it waits for
//! ([`RespConnection`] says how to drive it).

use std::sync::Arc;

use ferrotx_resp::{
    Action, AdminRequest, ConfigValues, InfoRequest, InfoStats, Outcome, Parsed, ParserLimits,
    Plan, Reply, RequestParser, Session, SessionConfig,
};
use ferrotx_store::Memory;

use crate::execute::VERSION_UNREADABLE;
use crate::work::{Work, WorkResult};

/// Buffered output past which no further request is handled until the client reads:
/// replies to a pipeline are bounded by what the client takes.
pub const OUTPUT_PAUSE_BYTES: usize = 4 << 20;

/// Unhandled input read ahead while a request waits for a worker (pipelined requests):
/// past this [`RespConnection::wants_input`] says to stop reading until it catches up.
pub const READ_AHEAD_BYTES_MAX: usize = 1 << 20;

/// An empty buffer keeps at most this much memory, so that idle connections cost little
/// after a large request or reply.
pub const IDLE_BUFFER_BYTES_MAX: usize = 16 << 10;

/// The counters INFO reports that connections keep, added up over every connection of a
/// front end (the transport counts connections and bytes itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests handled (each pipelined command counts).
    pub commands_processed: u64,
    /// Commands that joined the transaction of the pipelined command before them.
    pub commands_pipelined: u64,
    /// Error replies written.
    pub error_replies: u64,
    /// Plans whose transaction committed.
    pub transactions_committed: u64,
    /// Attempts of plans that aborted (conflicts) and were retried or given up.
    pub transactions_aborted: u64,
    /// The most attempts one plan lost before it ended (committed or gave up): how
    /// unfair contention was to the unluckiest command.
    pub transaction_aborts_max: u32,
}

/// What every connection of one front end shares: the [`Counters`], and a scratch
/// buffer that completions reuse (so that it is not one per connection).
#[derive(Debug, Default)]
pub struct Shared {
    /// The counters, for INFO.
    pub counters: Counters,
    /// The node's memory budget: commands that may grow memory are refused while it is
    /// past its limit, and CONFIG GET and SET read and set the limit. None: no limit
    /// (a simulated client's front end).
    pub memory: Option<Arc<Memory>>,
    /// Replies of finished work on their way to a connection's output.
    replies: Vec<Reply>,
}

impl Shared {
    /// A front end's shared state, refusing commands that may grow memory while `memory`
    /// is past its limit.
    pub fn with_memory(memory: Arc<Memory>) -> Self {
        Self {
            memory: Some(memory),
            ..Self::default()
        }
    }
}

/// Why [`RespConnection::handle`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The next request is not complete (or there is none): feed more input.
    Incomplete,
    /// A request waits for its work's result ([`RespConnection::complete`]).
    Waiting,
    /// The client has not taken enough replies ([`RespConnection::output_full`]).
    OutputFull,
    /// The connection is closing (QUIT, a protocol error, a request that looks like
    /// HTTP): send the output, then close.
    Closing,
}

/// What [`RespConnection::handle`] asks of its caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Run `work` with `seed` ([`crate::execute`]) and give its result to
    /// [`RespConnection::complete`].
    Work {
        /// What to run.
        work: Work,
        /// The seed of its back-offs: differs per request of a client.
        seed: u64,
    },
    /// INFO: gather the node's numbers and call [`RespConnection::info_reply`].
    Info(InfoRequest),
    /// An administrative command (FERROTX COPIES): answer it from the node's state (off
    /// the event loop if it takes long) and give the reply to
    /// [`RespConnection::complete`] as [`WorkResult::Admin`]; later requests wait
    /// meanwhile, as for [`Step::Work`].
    Admin(AdminRequest),
    /// Nothing more to do now, for this reason.
    Stopped(Stop),
}

/// What a connection waits for from a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InFlight {
    /// A plan's outcome (the session waits for `complete`).
    Plan,
    /// WATCH's versions of this many keys (the session waits for `watched`).
    Versions(usize),
    /// A DBSIZE, SCAN or KEYS reply.
    Keyspace,
    /// An administrative command's reply.
    Admin,
}

/// One client connection without its transport.
///
/// The caller owns the transport (a mio socket in `ferrotx-server`, a simulated client's
/// byte stream in [`RespClient`](crate::RespClient)) and drives the connection:
///
/// 1. [`RespConnection::feed`] appends the bytes received (and
///    [`RespConnection::end_input`] says the client closed its side);
/// 2. [`RespConnection::handle`] handles the complete requests buffered, in order, one
///    at a time, writing what the session answers alone to the output, until it returns
///    a [`Step`]:
///    - [`Step::Work`]: a request needs the data. Run the work ([`crate::execute`], in a
///      coroutine of a worker) and give its result to [`RespConnection::complete`];
///      meanwhile later requests stay buffered (replies keep their order) and `handle`
///      answers [`Stop::Waiting`];
///    - [`Step::Info`]: INFO needs the node's numbers: gather them and call
///      [`RespConnection::info_reply`], then `handle` again;
///    - [`Step::Admin`]: an administrative command (FERROTX COPIES): answer it and give
///      the reply to [`RespConnection::complete`] as [`WorkResult::Admin`];
///    - [`Step::Stopped`]: nothing more to do until more input ([`Stop::Incomplete`]),
///      a work result ([`Stop::Waiting`]), the client taking replies
///      ([`Stop::OutputFull`]), or ever ([`Stop::Closing`]: write the output, then
///      close);
/// 3. [`RespConnection::output`] is what to send; [`RespConnection::consume_output`]
///    says how much was sent, and [`RespConnection::compact_output`] drops it once a
///    round of sending is over.
///
/// Every connection of a front end adds to one [`Shared`]: the counters INFO reports,
/// and a scratch buffer. Buffers keep their memory between requests (an idle connection
/// keeps at most [`IDLE_BUFFER_BYTES_MAX`] per buffer), so a request allocates nothing
/// here once the buffers have grown.
#[derive(Debug)]
pub struct RespConnection {
    client_id: u64,
    session: Session,
    parser: RequestParser,
    /// Bytes received and not yet handled start at `input_start`.
    input: Vec<u8>,
    input_start: usize,
    /// Bytes to send start at `output_start`.
    output: Vec<u8>,
    output_start: usize,
    in_flight: Option<InFlight>,
    /// Requests handled, for back-off seeds.
    requests: u64,
    /// The client closed its side: handle what is buffered, then close.
    eof: bool,
    /// Close once the output is sent (QUIT, a protocol error).
    closing: bool,
}

impl RespConnection {
    /// The connection of client `client_id` (its CLIENT ID: unique on the node, never
    /// reused), with the front end's session settings and parser limits.
    pub fn new(
        session: impl Into<Arc<SessionConfig>>,
        limits: ParserLimits,
        client_id: u64,
    ) -> Self {
        Self {
            client_id,
            session: Session::new(session, client_id),
            parser: RequestParser::new(limits),
            input: Vec::new(),
            input_start: 0,
            output: Vec::new(),
            output_start: 0,
            in_flight: None,
            requests: 0,
            eof: false,
            closing: false,
        }
    }

    /// Its CLIENT ID.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// Its session (RESP version, MULTI, WATCH, ...).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Appends bytes the client sent.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
    }

    /// The client closed its side: what is buffered is still handled, then the
    /// connection is over ([`RespConnection::is_over`]).
    pub fn end_input(&mut self) {
        self.eof = true;
    }

    /// Bytes received and not handled yet.
    pub fn unhandled_input(&self) -> usize {
        self.input.len() - self.input_start
    }

    /// Handles the buffered complete requests while nothing waits, and says what the
    /// caller must do next (see [`RespConnection`]).
    pub fn handle(&mut self, shared: &mut Shared) -> Step {
        let step = loop {
            if self.closing {
                break Step::Stopped(Stop::Closing);
            }
            if self.in_flight.is_some() {
                break Step::Stopped(Stop::Waiting);
            }
            if self.output_full() {
                break Step::Stopped(Stop::OutputFull);
            }
            let parsed = self.parser.parse(
                &self.input[self.input_start..],
                self.session.auth_required(),
            );
            match parsed {
                Ok(Parsed::Incomplete) => break Step::Stopped(Stop::Incomplete),
                Ok(Parsed::Empty { consumed }) => self.input_start += consumed,
                Ok(Parsed::Command { args, consumed }) => {
                    // A few relaxed loads (the limit first: none, and that is all).
                    self.session
                        .set_out_of_memory(shared.memory.as_ref().is_some_and(|m| m.over()));
                    let mut action = self.session.handle(args);
                    self.input_start += consumed;
                    self.requests += 1;
                    shared.counters.commands_processed += 1;
                    if let Action::Run(plan) = &mut action {
                        self.join_pipelined(plan, &mut shared.counters);
                    }
                    if let Some(step) = self.act(action, shared) {
                        break step;
                    }
                }
                Err(error) => {
                    // Redis answers the error and closes; the rest of the input is
                    // dropped.
                    self.write_reply(&error.reply(), &mut shared.counters);
                    self.closing = true;
                    self.input_start = self.input.len();
                }
            }
        };
        // Drop what was handled; keep the same unhandled bytes at the front, as the
        // parser requires.
        if self.input_start == self.input.len() {
            self.input.clear();
            self.input_start = 0;
            if self.input.capacity() > IDLE_BUFFER_BYTES_MAX {
                self.input.shrink_to(IDLE_BUFFER_BYTES_MAX);
            }
        } else if self.input_start > self.input.len() / 2 {
            self.input.drain(..self.input_start);
            self.input_start = 0;
        }
        step
    }

    /// The result of the work of the last [`Step::Work`]: completes the waiting
    /// request and writes its replies. Then [`RespConnection::handle`] goes on.
    ///
    /// # Panics
    ///
    /// If no work is in flight, or `result` is not of the kind of work in flight.
    pub fn complete(&mut self, result: WorkResult, shared: &mut Shared) {
        let in_flight = self
            .in_flight
            .take()
            .expect("work completes only for a connection waiting for it");
        let stopping = || Reply::error_static("ERR ferrotx: the node is stopping");
        let counters = &mut shared.counters;
        let mut replies = std::mem::take(&mut shared.replies);
        match (in_flight, result) {
            (InFlight::Plan, WorkResult::Plan(run)) => {
                counters.transactions_aborted += u64::from(run.aborts);
                counters.transaction_aborts_max = counters.transaction_aborts_max.max(run.aborts);
                if matches!(run.outcome, Outcome::Committed(_)) {
                    counters.transactions_committed += 1;
                }
                self.session.complete(run.outcome, &mut replies);
            }
            (InFlight::Plan, WorkResult::Dropped) => {
                self.session
                    .complete(Outcome::Failed(stopping()), &mut replies);
            }
            (InFlight::Versions(_), WorkResult::Versions(Ok(versions))) => {
                replies.push(self.session.watched(&versions));
            }
            (InFlight::Versions(keys), WorkResult::Versions(Err(error))) => {
                // The keys stay watched at a version no key has, so EXEC fails safely.
                let _ = self.session.watched(&vec![VERSION_UNREADABLE; keys]);
                replies.push(error);
            }
            (InFlight::Versions(keys), WorkResult::Dropped) => {
                let _ = self.session.watched(&vec![VERSION_UNREADABLE; keys]);
                replies.push(stopping());
            }
            (InFlight::Keyspace, WorkResult::Keyspace(reply)) => replies.push(reply),
            (InFlight::Keyspace, WorkResult::Dropped) => replies.push(stopping()),
            (InFlight::Admin, WorkResult::Admin(reply)) => replies.push(reply),
            (InFlight::Admin, WorkResult::Dropped) => replies.push(stopping()),
            (in_flight, result) => {
                unreachable!("{result:?} does not answer {in_flight:?}")
            }
        }
        for reply in replies.drain(..) {
            self.write_reply(&reply, counters);
        }
        shared.replies = replies;
    }

    /// Writes INFO's reply (of the last [`Step::Info`]) from the node's numbers
    /// `stats`. Then [`RespConnection::handle`] goes on.
    pub fn info_reply(&mut self, request: &InfoRequest, stats: &InfoStats, shared: &mut Shared) {
        let reply = self.session.info_reply(request, stats);
        self.write_reply(&reply, &mut shared.counters);
    }

    /// The output not sent yet.
    pub fn output(&self) -> &[u8] {
        &self.output[self.output_start..]
    }

    /// True while output waits to be sent.
    pub fn has_output(&self) -> bool {
        self.output_start < self.output.len()
    }

    /// The first `bytes` of [`RespConnection::output`] were sent.
    ///
    /// # Panics
    ///
    /// If that is more than the output.
    pub fn consume_output(&mut self, bytes: usize) {
        assert!(
            bytes <= self.output.len() - self.output_start,
            "more output sent than there was"
        );
        self.output_start += bytes;
    }

    /// Frees the output sent, once a round of sending is over (calling it after each
    /// send would move the unsent bytes more often).
    pub fn compact_output(&mut self) {
        if self.output_start == self.output.len() {
            self.output.clear();
            self.output_start = 0;
            if self.output.capacity() > IDLE_BUFFER_BYTES_MAX {
                self.output.shrink_to(IDLE_BUFFER_BYTES_MAX);
            }
        } else if self.output_start > self.output.len() / 2 {
            self.output.drain(..self.output_start);
            self.output_start = 0;
        }
    }

    /// True while the replies not yet taken by the client are at the bound past which no
    /// request is handled ([`OUTPUT_PAUSE_BYTES`]).
    pub fn output_full(&self) -> bool {
        self.output.len() - self.output_start >= OUTPUT_PAUSE_BYTES
    }

    /// True while a request waits for its work's result.
    pub fn is_waiting(&self) -> bool {
        self.in_flight.is_some()
    }

    /// True once the connection closes (QUIT, a protocol error): no further request is
    /// handled.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// True once nothing is left to do: closing (or the client gone), nothing waiting
    /// for a worker, every reply sent. The caller closes the connection.
    pub fn is_over(&self) -> bool {
        (self.closing || self.eof) && self.in_flight.is_none() && !self.has_output()
    }

    /// Whether receiving more is useful now (the transport may have none to give): not
    /// once the input ended or the connection closes; while a request waits or the
    /// output is full, only up to [`READ_AHEAD_BYTES_MAX`] unhandled bytes.
    pub fn wants_input(&self) -> bool {
        if self.eof || self.closing {
            return false;
        }
        let blocked = self.in_flight.is_some() || self.output_full();
        // Not blocked: the parser stopped at an incomplete request (its limits bound
        // it). Blocked: read ahead, within a bound.
        !blocked || self.unhandled_input() < READ_AHEAD_BYTES_MAX
    }

    /// Adds the data commands pipelined behind `plan`'s, already buffered, to it
    /// ([`Session::join`]): they run as one transaction, and their replies come in order
    /// when it is over. Stops at the first request that does not join (it is handled
    /// once the plan completes) or is not complete yet.
    fn join_pipelined(&mut self, plan: &mut Plan, counters: &mut Counters) {
        loop {
            let parsed = self.parser.parse(
                &self.input[self.input_start..],
                self.session.auth_required(),
            );
            let consumed = match parsed {
                Ok(Parsed::Empty { consumed }) => consumed,
                Ok(Parsed::Command { args, consumed }) if self.session.join(plan, args) => {
                    self.requests += 1;
                    counters.commands_processed += 1;
                    counters.commands_pipelined += 1;
                    consumed
                }
                _ => return,
            };
            self.input_start += consumed;
        }
    }

    /// Does what the session asked for, or says what the caller must do.
    fn act(&mut self, action: Action, shared: &mut Shared) -> Option<Step> {
        let counters = &mut shared.counters;
        let seed = self.client_id.rotate_left(32) ^ self.requests;
        let (work, in_flight) = match action {
            Action::Reply(reply) => {
                self.write_reply(&reply, counters);
                return None;
            }
            Action::Close(reply) => {
                if let Some(reply) = reply {
                    self.write_reply(&reply, counters);
                }
                self.closing = true;
                return None;
            }
            Action::Info(request) => return Some(Step::Info(request)),
            Action::Config(request) => {
                let memory = shared.memory.as_deref();
                let before = ConfigValues {
                    maxmemory: memory.and_then(Memory::limit).unwrap_or(0),
                };
                let mut values = before;
                let mut reply = request.reply(&mut values);
                if values != before {
                    match memory {
                        Some(memory) => memory.set_limit(values.maxmemory),
                        // No budget to hold it: say so rather than pretend.
                        None => {
                            reply = Reply::error_static(
                                "ERR ferrotx: this front end has no node memory to limit",
                            )
                        }
                    }
                }
                self.write_reply(&reply, counters);
                return None;
            }
            Action::Admin(request) => {
                // Not a work item for a worker: the caller answers it.
                self.in_flight = Some(InFlight::Admin);
                return Some(Step::Admin(request));
            }
            Action::Run(plan) => (Work::Plan(plan), InFlight::Plan),
            Action::ReadVersions(keys) => {
                let count = keys.len();
                (Work::Versions(keys), InFlight::Versions(count))
            }
            // The session does not wait for these, but the replies must keep their
            // order: later requests wait here.
            Action::Keyspace(request) => (Work::Keyspace(request), InFlight::Keyspace),
        };
        self.in_flight = Some(in_flight);
        Some(Step::Work { work, seed })
    }

    fn write_reply(&mut self, reply: &Reply, counters: &mut Counters) {
        if reply.is_error() {
            counters.error_replies += 1;
        }
        reply.encode(self.session.protocol(), &mut self.output);
    }
}

#[cfg(test)]
mod tests {
    use ferrotx_resp::{Outcome, ProtocolVersion, Reply};

    use super::*;
    use crate::execute::PlanRun;

    fn connection() -> RespConnection {
        RespConnection::new(SessionConfig::default(), ParserLimits::default(), 9)
    }

    /// Takes the whole output, as a socket that takes everything would.
    fn take(connection: &mut RespConnection) -> Vec<u8> {
        let output = connection.output().to_vec();
        connection.consume_output(output.len());
        connection.compact_output();
        output
    }

    fn committed(replies: Vec<Reply>, aborts: u32) -> WorkResult {
        WorkResult::Plan(PlanRun {
            outcome: Outcome::Committed(replies),
            aborts,
        })
    }

    #[test]
    fn answers_alone_at_once_and_later_requests_wait_for_the_work() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"PING\r\nGET k\r\nPING\r\n");
        let Step::Work {
            work: Work::Plan(plan),
            seed,
        } = connection.handle(&mut shared)
        else {
            panic!("GET needs the data");
        };
        assert_eq!(plan.commands().len(), 1);
        assert_eq!(
            seed,
            9u64.rotate_left(32) ^ 2,
            "the client id and request count"
        );
        assert_eq!(connection.output(), b"+PONG\r\n");
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Waiting),
            "one request at a time"
        );
        assert!(connection.is_waiting() && connection.wants_input());
        connection.complete(committed(vec![Reply::bulk_static("v")], 2), &mut shared);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        assert_eq!(take(&mut connection), b"+PONG\r\n$1\r\nv\r\n+PONG\r\n");
        assert_eq!(
            shared.counters,
            Counters {
                commands_processed: 3,
                commands_pipelined: 0,
                error_replies: 0,
                transactions_committed: 1,
                transactions_aborted: 2,
                transaction_aborts_max: 2,
            }
        );
        assert_eq!(connection.unhandled_input(), 0);
        connection.end_input();
        assert!(connection.is_over());
    }

    #[test]
    fn pipelined_data_commands_join_the_plan() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"SET a 1\r\nINCR a\r\nGET a\r\nPING\r\nGET");
        let Step::Work {
            work: Work::Plan(plan),
            ..
        } = connection.handle(&mut shared)
        else {
            panic!("SET needs the data");
        };
        assert_eq!(plan.commands().len(), 3);
        assert_eq!(shared.counters.commands_pipelined, 2);
        let replies = vec![Reply::ok(), Reply::Integer(2), Reply::bulk_static("2")];
        connection.complete(committed(replies, 0), &mut shared);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        assert_eq!(take(&mut connection), b"+OK\r\n:2\r\n$1\r\n2\r\n+PONG\r\n");
        assert_eq!(
            connection.unhandled_input(),
            3,
            "the incomplete request stays"
        );
    }

    #[test]
    fn watch_without_versions_makes_exec_fail_and_dropped_work_answers_an_error() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"WATCH k\r\n");
        let Step::Work {
            work: Work::Versions(keys),
            ..
        } = connection.handle(&mut shared)
        else {
            panic!("WATCH reads versions");
        };
        assert_eq!(keys, [b"k".to_vec()]);
        let error = Reply::error_static("ERR ferrotx: WATCH could not read its keys");
        connection.complete(WorkResult::Versions(Err(error)), &mut shared);
        assert_eq!(
            connection.session().watched_keys()[0].version,
            VERSION_UNREADABLE
        );
        connection.feed(b"GET k\r\n");
        assert!(matches!(connection.handle(&mut shared), Step::Work { .. }));
        connection.complete(WorkResult::Dropped, &mut shared);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        assert_eq!(
            take(&mut connection),
            b"-ERR ferrotx: WATCH could not read its keys\r\n\
              -ERR ferrotx: the node is stopping\r\n"
        );
        assert_eq!(shared.counters.error_replies, 2);
    }

    #[test]
    fn info_asks_the_caller_for_the_numbers() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"INFO stats\r\nPING\r\n");
        let Step::Info(request) = connection.handle(&mut shared) else {
            panic!("INFO needs the node's numbers");
        };
        let stats = InfoStats {
            total_commands_processed: 41,
            ..InfoStats::default()
        };
        connection.info_reply(&request, &stats, &mut shared);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        let output = take(&mut connection);
        let text = String::from_utf8_lossy(&output);
        assert!(text.contains("total_commands_processed:41"), "{text}");
        assert!(text.ends_with("+PONG\r\n"), "{text}");
    }

    #[test]
    fn an_admin_command_waits_for_the_callers_reply() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"FERROTX COPIES\r\nPING\r\n");
        assert_eq!(
            connection.handle(&mut shared),
            Step::Admin(ferrotx_resp::AdminRequest::Copies)
        );
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Waiting),
            "PING waits for its reply"
        );
        let reply = Reply::Array(vec![Reply::Integer(7)]);
        connection.complete(WorkResult::Admin(reply), &mut shared);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        assert_eq!(take(&mut connection), b"*1\r\n:7\r\n+PONG\r\n");
        connection.feed(b"FERROTX COPIES\r\n");
        assert!(matches!(connection.handle(&mut shared), Step::Admin(_)));
        connection.complete(WorkResult::Dropped, &mut shared);
        assert_eq!(
            take(&mut connection),
            b"-ERR ferrotx: the node is stopping\r\n"
        );
    }

    #[test]
    fn a_protocol_error_is_answered_and_closes() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        connection.feed(b"*1\r\n$x\r\nPING\r\n");
        assert_eq!(connection.handle(&mut shared), Step::Stopped(Stop::Closing));
        assert!(connection.is_closing() && !connection.wants_input());
        assert!(!connection.is_over(), "until its reply is sent");
        let output = take(&mut connection);
        assert!(output.starts_with(b"-ERR Protocol error"), "{output:?}");
        assert!(connection.is_over());
    }

    #[test]
    fn output_past_the_pause_waits_for_the_client() {
        let (mut connection, mut shared) = (connection(), Shared::default());
        let mut request = Vec::new();
        let arg = vec![b'x'; 1 << 20];
        for _ in 0..5 {
            request.clear();
            request.extend_from_slice(b"*2\r\n$4\r\nECHO\r\n$1048576\r\n");
            request.extend_from_slice(&arg);
            request.extend_from_slice(b"\r\n");
            connection.feed(&request);
        }
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::OutputFull)
        );
        assert!(connection.output_full());
        assert_eq!(shared.counters.commands_processed, 4);
        let sent = connection.output().len() - 10;
        connection.consume_output(sent);
        connection.compact_output();
        assert_eq!(connection.output().len(), 10);
        assert_eq!(
            connection.handle(&mut shared),
            Step::Stopped(Stop::Incomplete)
        );
        assert_eq!(shared.counters.commands_processed, 5);
        let echo = Reply::bulk(arg).to_bytes(ProtocolVersion::Resp2);
        assert_eq!(connection.output().len(), 10 + echo.len());
    }
}
