//! A simulated Redis client: the bytes a real client would send, through the same
//! connection core ([`RespConnection`]) and work ([`execute`]) as the server's
//! connections, in one coroutine of a node's worker.
//!
//! Where the server hands each work item to a worker thread and waits for its result in
//! its event loop, a [`RespClient`] awaits [`execute`] in its own coroutine, so one
//! client is one coroutine and its requests run in order, as a connection's do. It draws
//! no randomness and reads no clock (the work's back-offs are seeded from the client id
//! and the request count, and time is the executor's), so a simulation replays it from
//! its seed.

use std::sync::Arc;

use ferrotx_cluster::Configuration;
use ferrotx_exec::Co;
use ferrotx_resp::{InfoStats, ParserLimits, Reply, Session, SessionConfig};
use ferrotx_txn::coordinator::Coordinator;

use crate::connection::{Counters, RespConnection, Shared, Step, Stop};
use crate::error::KvTableError;
use crate::kv_table::KvTable;
use crate::resp_value::{RespValue, encode_request, parse_reply};
use crate::work::{WorkResult, execute};

/// What a simulated client is answered to an administrative command (FERROTX COPIES),
/// which only the server answers.
const ADMIN_UNAVAILABLE: &str =
    "ERR ferrotx: FERROTX commands are answered by a node's Redis server, not in a simulation";

/// One simulated Redis client connected to a node: create it with
/// [`RespClient::for_config`] (or [`RespClient::new`]), then, in a coroutine of one of
/// the node's workers, send it requests with [`RespClient::request`] (RESP bytes, which
/// may hold several pipelined requests) or [`RespClient::command`] (one command's
/// arguments). Each returns the replies, parsed.
#[derive(Debug)]
pub struct RespClient {
    connection: RespConnection,
    shared: Shared,
    kv: KvTable,
    partitions: u32,
    /// Output of the connection not yet parsed into replies.
    received: Vec<u8>,
    /// Bytes sent and received, for INFO.
    input_bytes: u64,
    output_bytes: u64,
}

impl RespClient {
    /// A client with CLIENT ID `client_id` (give each client of a node its own: the
    /// work's back-offs are seeded from it) of a front end whose sessions have the
    /// settings `session`, over the `kv` table of a configuration with `partitions`
    /// partitions.
    pub fn new(
        kv: KvTable,
        partitions: u32,
        client_id: u64,
        session: impl Into<Arc<SessionConfig>>,
    ) -> Self {
        Self {
            connection: RespConnection::new(session, ParserLimits::default(), client_id),
            shared: Shared::default(),
            kv,
            partitions,
            received: Vec::new(),
            input_bytes: 0,
            output_bytes: 0,
        }
    }

    /// A client of a node of `config` (its `kv` table and partition count); see
    /// [`RespClient::new`].
    pub fn for_config(
        config: &Configuration,
        client_id: u64,
        session: impl Into<Arc<SessionConfig>>,
    ) -> Result<Self, KvTableError> {
        let kv = KvTable::find(config)?;
        let partitions = config.partitions().partition_count();
        Ok(Self::new(kv, partitions, client_id, session))
    }

    /// Its CLIENT ID.
    pub fn client_id(&self) -> u64 {
        self.connection.client_id()
    }

    /// Its connection's session (RESP version, MULTI, watched keys, ...).
    pub fn session(&self) -> &Session {
        self.connection.session()
    }

    /// What its connection counted (commands, pipelined commands, error replies,
    /// transactions committed and aborted).
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// True once the connection closed (QUIT, a protocol error): nothing more is
    /// handled.
    pub fn is_closed(&self) -> bool {
        self.connection.is_closing()
    }

    /// Sends `bytes` (any part of a RESP stream: several requests, or part of one) and
    /// runs every complete request, in order, with their work awaited here; returns the
    /// replies of all the complete requests sent so far that were not returned yet, in
    /// order. A request not complete yet stays buffered until the bytes that complete it
    /// are sent.
    ///
    /// # Panics
    ///
    /// If the connection's output is not RESP (a bug of the front end).
    pub async fn request(
        &mut self,
        co: &Co,
        coordinator: &Coordinator,
        bytes: &[u8],
    ) -> Vec<RespValue> {
        self.send(bytes);
        self.run(co, coordinator).await;
        self.replies()
    }

    /// Sends one command with its arguments and returns its reply.
    ///
    /// # Panics
    ///
    /// If it did not get exactly one reply: a request sent before was not complete, or
    /// the command was one the connection closes on without a reply (one that looks
    /// like HTTP).
    pub async fn command<A: AsRef<[u8]>>(
        &mut self,
        co: &Co,
        coordinator: &Coordinator,
        args: &[A],
    ) -> RespValue {
        let mut bytes = Vec::new();
        encode_request(args, &mut bytes);
        let mut replies = self.request(co, coordinator, &bytes).await;
        assert_eq!(replies.len(), 1, "one command, one reply: {replies:?}");
        replies.pop().expect("one reply")
    }

    /// Sends `bytes` without running anything yet (a pipelining client sends several
    /// requests before it reads): [`RespClient::run`] handles them.
    pub fn send(&mut self, bytes: &[u8]) {
        self.input_bytes += bytes.len() as u64;
        self.connection.feed(bytes);
    }

    /// Handles every complete request sent, in order, awaiting each one's work; their
    /// replies wait for [`RespClient::replies`].
    pub async fn run(&mut self, co: &Co, coordinator: &Coordinator) {
        loop {
            let step = self.connection.handle(&mut self.shared);
            self.take_output();
            match step {
                Step::Work { work, seed } => {
                    let result =
                        execute(co, coordinator, self.kv, self.partitions, work, seed).await;
                    self.connection.complete(result, &mut self.shared);
                }
                Step::Info(request) => {
                    let stats = self.info(co);
                    self.connection
                        .info_reply(&request, &stats, &mut self.shared);
                }
                Step::Admin(_) => {
                    // A simulated client reaches no node of its own to ask.
                    let reply = Reply::error_static(ADMIN_UNAVAILABLE);
                    self.connection
                        .complete(WorkResult::Admin(reply), &mut self.shared);
                }
                // Its output was taken: handle the requests that waited.
                Step::Stopped(Stop::OutputFull) => {}
                Step::Stopped(Stop::Incomplete | Stop::Closing) => break,
                Step::Stopped(Stop::Waiting) => {
                    unreachable!("the client completes its work before handling more")
                }
            }
        }
        self.take_output();
    }

    /// The complete replies received and not returned yet, in order (a reply not
    /// complete yet stays for a later call).
    ///
    /// # Panics
    ///
    /// If the connection's output is not RESP (a bug of the front end).
    pub fn replies(&mut self) -> Vec<RespValue> {
        let mut replies = Vec::new();
        let mut at = 0;
        loop {
            match parse_reply(&self.received[at..]) {
                Ok(Some((reply, used))) => {
                    replies.push(reply);
                    at += used;
                }
                Ok(None) => break,
                Err(error) => panic!("the front end's output is not RESP: {error}"),
            }
        }
        self.received.drain(..at);
        replies
    }

    /// Bytes received and not parsed into replies yet.
    pub fn received(&self) -> &[u8] {
        &self.received
    }

    /// Moves the connection's output to what the client received.
    fn take_output(&mut self) {
        let output = self.connection.output();
        self.output_bytes += output.len() as u64;
        self.received.extend_from_slice(output);
        let sent = output.len();
        self.connection.consume_output(sent);
        self.connection.compact_output();
    }

    /// INFO's numbers: this client's alone, as if it were the node's only one.
    fn info(&self, co: &Co) -> InfoStats {
        let counters = &self.shared.counters;
        InfoStats {
            server_time_usec: co.now_ns() / 1_000,
            connected_clients: 1,
            clients_max: 1,
            total_connections_received: 1,
            total_commands_processed: counters.commands_processed,
            total_net_input_bytes: self.input_bytes,
            total_net_output_bytes: self.output_bytes,
            total_error_replies: counters.error_replies,
            partitions: self.partitions,
            transactions_committed: counters.transactions_committed,
            transactions_aborted: counters.transactions_aborted,
            ..InfoStats::default()
        }
    }
}
