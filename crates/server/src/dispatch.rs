//! What every connection of the event loop shares: the node's worker threads to hand work
//! to, the inbox results come back in, and the counters.

use std::sync::Arc;

use ferrotx_node::NodeHandle;
use ferrotx_redis_exec::{KvTable, Shared, Work, execute};
use ferrotx_resp::{AdminRequest, ParserLimits, SessionConfig};

use crate::inbox::{Inbox, Responder};
use crate::stats::Stats;

/// The event loop's state apart from its connections.
pub(crate) struct Context {
    pub node: NodeHandle,
    pub inbox: Arc<Inbox>,
    pub kv: KvTable,
    pub session: Arc<SessionConfig>,
    pub parser_limits: ParserLimits,
    pub clients_max: usize,
    pub port: u16,
    pub stats: Stats,
    /// The counters the connections keep, and their scratch space.
    pub shared: Shared,
    /// Connections to pump again without waiting for an event (they stopped reading to
    /// let others have a turn).
    pub ready: Vec<usize>,
    /// Read buffer shared by every connection.
    pub scratch: Vec<u8>,
    /// Reads one connection gets per turn.
    pub reads_per_turn: usize,
    /// Connections one round accepts; more wait for the next round.
    pub accepts_per_turn: usize,
    /// The listener may have more connections waiting (a round stopped accepting).
    pub accept_pending: bool,
    next_thread: u16,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: NodeHandle,
        inbox: Arc<Inbox>,
        kv: KvTable,
        session: SessionConfig,
        parser_limits: ParserLimits,
        clients_max: usize,
        port: u16,
        scratch_bytes: usize,
    ) -> Self {
        let memory = node.memory().clone();
        Self {
            node,
            inbox,
            kv,
            session: Arc::new(session),
            parser_limits,
            clients_max,
            port,
            stats: Stats::new(),
            shared: Shared::with_memory(memory),
            ready: Vec::new(),
            scratch: vec![0; scratch_bytes],
            reads_per_turn: crate::connection::READS_PER_TURN,
            accepts_per_turn: usize::MAX,
            accept_pending: false,
            next_thread: 0,
        }
    }

    /// Hands `work` of connection `token` (client `client_id`) to the next worker thread,
    /// round robin; its result comes back through the inbox. Never blocks: the worker
    /// queues the coroutine until it has a free slot. If the node has stopped, the work is
    /// dropped at once and its result is [`WorkResult::Dropped`].
    pub fn dispatch(&mut self, work: Work, token: usize, client_id: u64, seed: u64) {
        let thread = self.next_thread;
        self.next_thread = (self.next_thread + 1) % self.node.threads();
        let responder = Responder::new(self.inbox.clone(), token, client_id);
        let kv = self.kv;
        let partitions = self.node.config().partitions().partition_count();
        // A refused spawn drops the closure, and with it the responder, which reports
        // the work dropped.
        let _ = self.node.spawn(thread, move |co, coordinator| async move {
            let result = execute(&co, &coordinator, kv, partitions, work, seed).await;
            responder.send(result);
        });
    }

    /// Answers the administrative command `request` of connection `token` (client
    /// `client_id`) on a thread of its own ([`crate::admin`]); its reply comes back
    /// through the inbox, as a worker's result does. Never blocks.
    pub fn admin(&mut self, request: AdminRequest, token: usize, client_id: u64) {
        let responder = Responder::new(self.inbox.clone(), token, client_id);
        crate::admin::answer(&self.node, request, responder);
    }
}
