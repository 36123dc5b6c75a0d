//! One client connection: its socket and readiness, around the sans-IO connection core
//! ([`RespConnection`]: buffers, RESP parser, session, and what it waits for from a
//! worker).
//!
//! [`Connection::pump`] does everything that can be done now: handle the complete
//! requests buffered (in order, one at a time), write replies, read more. It stops when
//! the socket has nothing more to read or cannot take more output, when a request waits
//! for a worker (later requests stay buffered: replies must keep their order), or when
//! the connection's turn is over. Events and finished work call it again.

use std::io::{self, Read, Write};

use ferrotx_redis_exec::{RespConnection, Step, Stop, WorkResult};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::dispatch::Context;

/// Reads per turn of one connection on an I/O thread of its own: with the 64 KiB read
/// buffer, 1 MiB, after which it waits for the other connections' turn.
pub(crate) const READS_PER_TURN: usize = 16;

/// Reads per turn of one connection when the loop runs on a worker, which has datagrams
/// to answer between turns: 128 KiB.
pub(crate) const READS_PER_TURN_ON_WORKER: usize = 2;

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
    core: RespConnection,
    /// The socket may have more to read (no `WouldBlock` since the last readable event).
    may_read: bool,
    /// WRITABLE is registered (only while output waits).
    wants_writable: bool,
}

impl Connection {
    /// A connection registered as `token` for client id `client_id`.
    pub fn new(stream: TcpStream, token: Token, client_id: u64, context: &Context) -> Self {
        Self {
            stream,
            token,
            core: RespConnection::new(context.session.clone(), context.parser_limits, client_id),
            may_read: true,
            wants_writable: false,
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn client_id(&self) -> u64 {
        self.core.client_id()
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
            if self.core.is_over() {
                return State::Closed;
            }
            if stopped == Stop::OutputFull && !self.core.output_full() {
                // The client took enough replies: handle the requests that waited.
                continue;
            }
            if !(self.may_read && self.core.wants_input()) {
                break;
            }
            if reads == context.reads_per_turn {
                context.ready.push(self.token.0);
                break;
            }
            reads += 1;
            match self.stream.read(&mut context.scratch) {
                Ok(0) => self.core.end_input(),
                Ok(n) => {
                    context.stats.input_bytes += n as u64;
                    self.core.feed(&context.scratch[..n]);
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
        self.core.complete(result, &mut context.shared);
        self.pump(registry, context)
    }

    /// Handles the buffered complete requests while nothing waits, handing work to the
    /// workers, answering INFO and starting administrative commands; says why it
    /// stopped.
    fn handle_requests(&mut self, context: &mut Context) -> Stop {
        loop {
            match self.core.handle(&mut context.shared) {
                Step::Work { work, seed } => {
                    context.dispatch(work, self.token.0, self.core.client_id(), seed);
                }
                Step::Info(request) => {
                    let stats = context.stats.info(
                        &context.shared.counters,
                        &context.node,
                        context.port,
                        context.clients_max,
                    );
                    self.core.info_reply(&request, &stats, &mut context.shared);
                }
                Step::Admin(request) => {
                    context.admin(request, self.token.0, self.core.client_id());
                }
                Step::Stopped(stop) => return stop,
            }
        }
    }

    /// Writes buffered output until done or the socket is full; an error means the
    /// connection is broken.
    fn flush(&mut self, context: &mut Context) -> io::Result<()> {
        while self.core.has_output() {
            match self.stream.write(self.core.output()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.core.consume_output(n);
                    context.stats.output_bytes += n as u64;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        self.core.compact_output();
        Ok(())
    }

    /// Registers WRITABLE interest exactly while output waits (an idle connection
    /// costs the event loop nothing).
    fn update_interest(&mut self, registry: &Registry) -> io::Result<()> {
        let wants_writable = self.core.has_output();
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
