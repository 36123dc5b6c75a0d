//! One client connection: its socket, buffers, RESP parser and session, and what it waits
//! for from a worker.
//!
//! [`Connection::pump`] does everything that can be done now: handle the complete
//! requests buffered (in order, one at a time), write replies, read more. It stops when
//! the socket has nothing more to read or cannot take more output, when a request waits
//! for a worker (later requests stay buffered: replies must keep their order), or when
//! the connection's turn is over. Events and finished work call it again.

use std::io::{self, Read, Write};

use ferrotx_redis_exec::VERSION_UNREADABLE;
use ferrotx_resp::{Action, Outcome, Parsed, Plan, Reply, RequestParser, Session};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::dispatch::{Context, Work};
use crate::inbox::WorkResult;

/// Buffered output past which no further request is handled until the client reads:
/// replies to a pipeline are bounded by what the client takes.
const OUTPUT_PAUSE_BYTES: usize = 4 << 20;

/// Unhandled input read ahead while a request waits for a worker (pipelined requests):
/// past this the connection stops reading until it catches up.
const READ_AHEAD_BYTES_MAX: usize = 1 << 20;

/// Reads per turn of one connection: with the 64 KiB read buffer, 1 MiB, after which it
/// waits for the other connections' turn.
const READS_PER_TURN: usize = 16;

/// An empty buffer keeps at most this much memory, so that idle connections cost little
/// after a large request or reply.
const IDLE_BUFFER_BYTES_MAX: usize = 16 << 10;

/// What a connection waits for from a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InFlight {
    /// A plan's outcome (the session waits for `complete`).
    Plan,
    /// WATCH's versions of this many keys (the session waits for `watched`).
    Versions(usize),
    /// A DBSIZE, SCAN or KEYS reply.
    Keyspace,
}

/// Why [`Connection::handle_requests`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The next request is not complete (or there is none).
    Incomplete,
    /// A request waits for a worker.
    Waiting,
    /// The client has not taken enough replies.
    OutputFull,
    /// The connection is closing.
    Closing,
}

/// Whether a connection goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Open,
    Closed,
}

/// One client connection.
pub(crate) struct Connection {
    stream: TcpStream,
    token: Token,
    client_id: u64,
    session: Session,
    parser: RequestParser,
    /// Bytes read and not yet handled start at `input_start`.
    input: Vec<u8>,
    input_start: usize,
    /// Bytes to write start at `output_start`.
    output: Vec<u8>,
    output_start: usize,
    in_flight: Option<InFlight>,
    /// Requests handled, for back-off seeds.
    requests: u64,
    /// The socket may have more to read (no `WouldBlock` since the last readable event).
    may_read: bool,
    /// The client closed its side: handle what is buffered, then close.
    eof: bool,
    /// Close once the output is written (QUIT, a protocol error).
    closing: bool,
    /// WRITABLE is registered (only while output waits).
    wants_writable: bool,
}

impl Connection {
    /// A connection registered as `token` for client id `client_id`.
    pub fn new(stream: TcpStream, token: Token, client_id: u64, context: &Context) -> Self {
        Self {
            stream,
            token,
            client_id,
            session: Session::new(context.session.clone(), client_id),
            parser: RequestParser::new(context.parser_limits),
            input: Vec::new(),
            input_start: 0,
            output: Vec::new(),
            output_start: 0,
            in_flight: None,
            requests: 0,
            may_read: true,
            eof: false,
            closing: false,
            wants_writable: false,
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The socket became readable.
    pub fn readable(&mut self) {
        self.may_read = true;
    }

    /// Does what can be done now (see the module docs); `Closed` once the connection is
    /// over (the caller deregisters and drops it).
    pub fn pump(&mut self, registry: &Registry, context: &mut Context) -> State {
        let mut reads = 0;
        loop {
            let stopped = self.handle_requests(context);
            if self.flush(context).is_err() {
                return State::Closed;
            }
            if self.is_over() {
                return State::Closed;
            }
            if stopped == Stop::OutputFull && !self.output_full() {
                // The client took enough replies: handle the requests that waited.
                continue;
            }
            if !self.wants_input() {
                break;
            }
            if reads == READS_PER_TURN {
                context.ready.push(self.token.0);
                break;
            }
            reads += 1;
            match self.stream.read(&mut context.scratch) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    context.stats.input_bytes += n as u64;
                    self.input.extend_from_slice(&context.scratch[..n]);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.may_read = false;
                    break;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return State::Closed,
            }
        }
        if self.update_interest(registry).is_err() {
            return State::Closed;
        }
        State::Open
    }

    /// Finished work for this connection: completes the waiting request, then goes on.
    pub fn complete(
        &mut self,
        result: WorkResult,
        registry: &Registry,
        context: &mut Context,
    ) -> State {
        let in_flight = self
            .in_flight
            .take()
            .expect("work completes only for a connection waiting for it");
        let stopping = || Reply::error_static("ERR ferrotx: the node is stopping");
        let mut replies = std::mem::take(&mut context.replies);
        match (in_flight, result) {
            (InFlight::Plan, WorkResult::Plan(run)) => {
                context.stats.transactions_aborted += u64::from(run.aborts);
                if matches!(run.outcome, Outcome::Committed(_)) {
                    context.stats.transactions_committed += 1;
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
            (in_flight, result) => {
                unreachable!("{result:?} does not answer {in_flight:?}")
            }
        }
        for reply in replies.drain(..) {
            self.write_reply(&reply, context);
        }
        context.replies = replies;
        self.pump(registry, context)
    }

    /// Handles the buffered complete requests while nothing waits; says why it stopped.
    fn handle_requests(&mut self, context: &mut Context) -> Stop {
        let stop = loop {
            if self.closing {
                break Stop::Closing;
            }
            if self.in_flight.is_some() {
                break Stop::Waiting;
            }
            if self.output_full() {
                break Stop::OutputFull;
            }
            let parsed = self.parser.parse(
                &self.input[self.input_start..],
                self.session.auth_required(),
            );
            match parsed {
                Ok(Parsed::Incomplete) => break Stop::Incomplete,
                Ok(Parsed::Empty { consumed }) => self.input_start += consumed,
                Ok(Parsed::Command { args, consumed }) => {
                    let mut action = self.session.handle(args);
                    self.input_start += consumed;
                    self.requests += 1;
                    context.stats.commands_processed += 1;
                    if let Action::Run(plan) = &mut action {
                        self.join_pipelined(plan, context);
                    }
                    self.act(action, context);
                }
                Err(error) => {
                    // Redis answers the error and closes; the rest of the input is
                    // dropped.
                    self.write_reply(&error.reply(), context);
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
        stop
    }

    /// Adds the data commands pipelined behind `plan`'s, already buffered, to it
    /// ([`Session::join`]): they run as one transaction, and their replies come in order
    /// when it is over. Stops at the first request that does not join (it is handled
    /// once the plan completes) or is not complete yet.
    fn join_pipelined(&mut self, plan: &mut Plan, context: &mut Context) {
        loop {
            let parsed = self.parser.parse(
                &self.input[self.input_start..],
                self.session.auth_required(),
            );
            let consumed = match parsed {
                Ok(Parsed::Empty { consumed }) => consumed,
                Ok(Parsed::Command { args, consumed }) if self.session.join(plan, args) => {
                    self.requests += 1;
                    context.stats.commands_processed += 1;
                    context.stats.commands_pipelined += 1;
                    consumed
                }
                _ => return,
            };
            self.input_start += consumed;
        }
    }

    /// True while the replies not yet taken by the client are at the bound past which no
    /// request is handled.
    fn output_full(&self) -> bool {
        self.output.len() - self.output_start >= OUTPUT_PAUSE_BYTES
    }

    /// Does what the session asked for.
    fn act(&mut self, action: Action, context: &mut Context) {
        let seed = self.client_id.rotate_left(32) ^ self.requests;
        match action {
            Action::Reply(reply) => self.write_reply(&reply, context),
            Action::Close(reply) => {
                if let Some(reply) = reply {
                    self.write_reply(&reply, context);
                }
                self.closing = true;
            }
            Action::Run(plan) => {
                self.in_flight = Some(InFlight::Plan);
                context.dispatch(Work::Plan(plan), self.token.0, self.client_id, seed);
            }
            Action::ReadVersions(keys) => {
                self.in_flight = Some(InFlight::Versions(keys.len()));
                context.dispatch(Work::Versions(keys), self.token.0, self.client_id, seed);
            }
            Action::Keyspace(request) => {
                // The session does not wait for these, but the replies must keep their
                // order: later requests wait here.
                self.in_flight = Some(InFlight::Keyspace);
                context.dispatch(Work::Keyspace(request), self.token.0, self.client_id, seed);
            }
            Action::Info(request) => {
                let stats = context.stats.info(
                    context.node.config(),
                    context.node.id(),
                    context.port,
                    context.clients_max,
                );
                let reply = self.session.info_reply(&request, &stats);
                self.write_reply(&reply, context);
            }
        }
    }

    fn write_reply(&mut self, reply: &Reply, context: &mut Context) {
        if reply.is_error() {
            context.stats.error_replies += 1;
        }
        reply.encode(self.session.protocol(), &mut self.output);
    }

    /// Writes buffered output until done or the socket is full; an error means the
    /// connection is broken.
    fn flush(&mut self, context: &mut Context) -> io::Result<()> {
        while self.output_start < self.output.len() {
            match self.stream.write(&self.output[self.output_start..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.output_start += n;
                    context.stats.output_bytes += n as u64;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
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
        Ok(())
    }

    /// True once nothing is left to do: closing (or the client gone and no complete
    /// request left), nothing waiting for a worker, every reply written.
    fn is_over(&self) -> bool {
        (self.closing || self.eof)
            && self.in_flight.is_none()
            && self.output_start == self.output.len()
    }

    /// Whether reading more is useful now.
    fn wants_input(&self) -> bool {
        if !self.may_read || self.eof || self.closing {
            return false;
        }
        let blocked = self.in_flight.is_some() || self.output_full();
        // Not blocked: the parser stopped at an incomplete request (its limits bound
        // it). Blocked: read ahead, within a bound.
        !blocked || self.input.len() - self.input_start < READ_AHEAD_BYTES_MAX
    }

    /// Registers WRITABLE interest exactly while output waits (an idle connection
    /// costs the event loop nothing).
    fn update_interest(&mut self, registry: &Registry) -> io::Result<()> {
        let wants_writable = self.output_start < self.output.len();
        if wants_writable != self.wants_writable {
            let interest = if wants_writable {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry.reregister(&mut self.stream, self.token, interest)?;
            self.wants_writable = wants_writable;
        }
        Ok(())
    }
}
