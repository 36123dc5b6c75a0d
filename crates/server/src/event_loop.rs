//! The I/O thread: one mio `Poll` over the listener, the connections and a waker.
//!
//! Everything here is readiness-driven, edge-triggered: a connection is looked at when
//! its socket becomes readable or writable, when a worker finishes its work, or when it
//! gave up its turn with input left. An idle connection is a socket and a few hundred
//! bytes in the slab, with no timer and no thread, so thousands cost nothing but memory.

use std::io::{self, Write};
use std::sync::Arc;

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
        let inbox: Arc<Inbox> = self.context.inbox.clone();
        loop {
            // Sleep until something happens, unless a connection is owed a turn.
            let timeout = (!self.context.ready.is_empty()).then_some(std::time::Duration::ZERO);
            if let Err(error) = self.poll.poll(&mut events, timeout) {
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                panic!("the Redis front end's poll failed: {error}");
            }
            if inbox.stop_requested() {
                return;
            }
            for event in &events {
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
                        self.turn(key);
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
                    self.turn(key);
                }
            }
        }
    }

    /// Gives connection `key` a turn.
    fn turn(&mut self, key: usize) {
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
        loop {
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
    }
}
