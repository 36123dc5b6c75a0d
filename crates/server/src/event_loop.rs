//! The I/O thread: one mio `Poll` over the listener, the connections and a waker.
//!
//! Everything here is readiness-driven, edge-triggered: a connection is looked at when
//! its socket becomes readable or writable, when a worker finishes its work, or when it
//! gave up its turn with input left. An idle connection is a socket and a few hundred
//! bytes in the slab, with no timer and no thread, so thousands cost nothing but memory.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use ferrotx_node::{Polled, Poller};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::connection::{Connection, State};
use crate::dispatch::Context;
use crate::inbox::Inbox;

/// The listener's token (connections use their slab keys, far below).
pub(crate) const LISTENER: Token = Token(usize::MAX - 1);

/// The waker's token.
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

/// Events taken per `poll`.
const EVENTS_PER_POLL: usize = 1024;

/// Redis's answer to a client over `maxclients`, sent before closing it.
const TOO_MANY_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

/// Whether the loop goes on after a [`EventLoop::turn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    Go,
    Stop,
}

/// Least time between two looks at the sockets (an `epoll_wait`) of a loop run on a busy
/// worker ([`OnWorker`]): the worker's sleep watches them, so this bounds only how long a
/// request waits while the worker is busy with other work.
const ON_WORKER_POLL_INTERVAL_NS: u64 = 20_000;

/// Connections a round of the loop on a worker accepts (the rest in the next rounds).
const ACCEPTS_PER_TURN_ON_WORKER: usize = 64;

/// The event loop run on a worker thread, as its [`Poller`]: no thread of its own, so a
/// request and its reply cross no thread and wake none. It looks at its sockets when
/// the worker's sleep found them ready, when finished work waits in the inbox, when a
/// connection is owed a turn, and every [`ON_WORKER_POLL_INTERVAL_NS`] meanwhile.
pub(crate) struct OnWorker {
    event_loop: EventLoop,
    events: Events,
    last_poll_ns: u64,
    /// Whether the inbox knows the loop runs on this thread.
    marked: bool,
    /// Dropped with the loop: tells [`crate::RespServer::stop`] that it is over.
    _ended: std::sync::mpsc::Sender<()>,
}

impl OnWorker {
    pub fn new(mut event_loop: EventLoop, ended: std::sync::mpsc::Sender<()>) -> Self {
        // Bounded rounds: the worker has datagrams to answer between them.
        let context = &mut event_loop.context;
        context.reads_per_turn = crate::connection::READS_PER_TURN_ON_WORKER;
        context.accepts_per_turn = ACCEPTS_PER_TURN_ON_WORKER;
        Self {
            event_loop,
            events: Events::with_capacity(EVENTS_PER_POLL),
            last_poll_ns: 0,
            marked: false,
            _ended: ended,
        }
    }
}

impl Poller for OnWorker {
    fn fd(&self) -> RawFd {
        self.event_loop.poll.as_raw_fd()
    }

    fn poll(&mut self, now_ns: u64, woke: bool) -> Polled {
        let context = &self.event_loop.context;
        if context.inbox.stop_requested() {
            return Polled::Done;
        }
        let due = woke
            || context.accept_pending
            || !context.ready.is_empty()
            || context.inbox.has_work()
            || now_ns.saturating_sub(self.last_poll_ns) >= ON_WORKER_POLL_INTERVAL_NS;
        if !due {
            return Polled::Idle;
        }
        // The sockets only when the sleep found them ready or the interval is up: a round
        // for finished work or a connection's turn alone costs no system call.
        let look = woke
            || context.accept_pending
            || now_ns.saturating_sub(self.last_poll_ns) >= ON_WORKER_POLL_INTERVAL_NS;
        if !self.marked {
            context.inbox.loop_runs_here();
            self.marked = true;
        }
        let timeout = if look {
            self.last_poll_ns = now_ns;
            Some(Duration::ZERO)
        } else {
            None
        };
        if self.event_loop.turn(&mut self.events, timeout, look) == Turn::Stop {
            return Polled::Done;
        }
        let context = &self.event_loop.context;
        if context.ready.is_empty() && !context.inbox.has_work() && !context.accept_pending {
            Polled::Idle
        } else {
            Polled::Busy
        }
    }
}

/// The I/O thread's state.
pub(crate) struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    connections: Slab<Connection>,
    context: Context,
    next_client_id: u64,
}

impl EventLoop {
    pub fn new(poll: Poll, listener: TcpListener, context: Context) -> Self {
        Self {
            poll,
            listener,
            connections: Slab::new(),
            context,
            next_client_id: 1,
        }
    }

    /// Runs until the inbox asks it to stop; the connections close when it returns.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        loop {
            // Sleep until something happens, unless a connection is owed a turn.
            let timeout = (!self.context.ready.is_empty()).then_some(Duration::ZERO);
            if self.turn(&mut events, timeout, true) == Turn::Stop {
                return;
            }
        }
    }

    /// One round: if `look`, waits up to `timeout` (`None`: until something happens) for
    /// events and handles them; then the finished work in the inbox and the connections
    /// owed a turn.
    fn turn(&mut self, events: &mut Events, timeout: Option<Duration>, look: bool) -> Turn {
        if !look {
            events.clear();
        } else if let Err(error) = self.poll.poll(events, timeout) {
            if error.kind() == io::ErrorKind::Interrupted {
                return Turn::Go;
            }
            // Not seen in practice (epoll fails only on bad arguments): the front end
            // ends, its clients are closed, and its node goes on.
            eprintln!("ferrotx: the Redis front end's poll failed, closing it: {error}");
            return Turn::Stop;
        }
        let inbox: Arc<Inbox> = self.context.inbox.clone();
        if inbox.stop_requested() {
            return Turn::Stop;
        }
        if self.context.accept_pending {
            self.accept();
        }
        for event in events.iter() {
            match event.token() {
                LISTENER => self.accept(),
                WAKER => {}
                Token(key) => {
                    let Some(connection) = self.connections.get_mut(key) else {
                        continue;
                    };
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        connection.readable();
                    }
                    // Writable needs no flag: a turn always tries to write.
                    self.turn_of(key);
                }
            }
        }
        inbox.drain(|completion| {
            let Some(connection) = self.connections.get_mut(completion.token) else {
                return;
            };
            if connection.client_id() != completion.client_id {
                // Its connection closed; the slot went to another one.
                return;
            }
            let state =
                connection.complete(completion.result, self.poll.registry(), &mut self.context);
            if state == State::Closed {
                Self::close(
                    &mut self.connections,
                    &mut self.context,
                    &self.poll,
                    completion.token,
                );
            }
        });
        for key in std::mem::take(&mut self.context.ready) {
            if self.connections.contains(key) {
                self.turn_of(key);
            }
        }
        Turn::Go
    }

    /// Gives connection `key` a turn.
    fn turn_of(&mut self, key: usize) {
        let connection = &mut self.connections[key];
        if connection.pump(self.poll.registry(), &mut self.context) == State::Closed {
            Self::close(&mut self.connections, &mut self.context, &self.poll, key);
        }
    }

    fn close(connections: &mut Slab<Connection>, context: &mut Context, poll: &Poll, key: usize) {
        let mut connection = connections.remove(key);
        // Dropping the socket removes it from epoll anyway; deregistering says so.
        let _ = poll.registry().deregister(connection.stream_mut());
        context.stats.connected_clients -= 1;
    }

    /// Accepts every waiting connection, over the client limit answering and closing.
    fn accept(&mut self) {
        self.context.accept_pending = false;
        for _ in 0..self.context.accepts_per_turn {
            let (mut stream, _) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    // Out of file descriptors or memory: the connection waits in the
                    // backlog and is taken with the next one.
                    eprintln!("ferrotx: accepting a Redis client failed: {error}");
                    return;
                }
            };
            let stats = &mut self.context.stats;
            stats.connections_received += 1;
            if self.connections.len() >= self.context.clients_max {
                stats.connections_rejected += 1;
                // A fresh socket's send buffer takes these few bytes at once.
                let _ = stream.write(TOO_MANY_CLIENTS);
                continue;
            }
            // Replies go out as soon as they are written, as Redis does.
            let _ = stream.set_nodelay(true);
            let entry = self.connections.vacant_entry();
            let token = Token(entry.key());
            if let Err(error) =
                self.poll
                    .registry()
                    .register(&mut stream, token, Interest::READABLE)
            {
                eprintln!("ferrotx: registering a Redis client failed: {error}");
                continue;
            }
            let client_id = self.next_client_id;
            self.next_client_id += 1;
            entry.insert(Connection::new(stream, token, client_id, &self.context));
            self.context.stats.connected_clients += 1;
        }
        // Stopped before the listener said it had no more: the next round goes on.
        self.context.accept_pending = true;
    }
}
