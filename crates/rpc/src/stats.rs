//! Counters of one engine.

use ferrotx_wire::DecodeError;
use ferrotx_wire::auth::Refusal;

/// What an engine has done and dropped. Counters only grow.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Requests that completed at this client (any outcome).
    pub calls_completed: u64,
    /// Requests this server executed (handler runs).
    pub requests_executed: u64,
    /// Datagrams written by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Messages (or packets of split messages) written.
    pub messages_sent: u64,
    /// Datagrams given to `handle_datagram`.
    pub datagrams_received: u64,
    /// Requests sent again after a timeout.
    pub retransmissions: u64,
    /// Duplicates of finished requests, answered with the saved response.
    pub duplicate_requests_answered: u64,
    /// Duplicates of requests still being reassembled, or of older requests, and packets
    /// other than the first of a retransmitted split request already answered, ignored.
    pub duplicate_requests_ignored: u64,
    /// Requests older than their slot's latest, answered `Status::Overtaken` (late
    /// duplicates, whose clients drop the answer, or requests a forged one overtook).
    pub overtaken_requests_answered: u64,
    /// Requests whose number jumped further past the session's highest than a genuine
    /// client's can (`REQUEST_NUMBER_WINDOW`), dropped: forged, or from a broken peer.
    pub request_number_jumps: u64,
    /// Calls of this client that failed with `RpcError::Overtaken`.
    pub calls_overtaken: u64,
    /// Packets that would have started reassembling a request past the bound on bytes
    /// buffered for partial requests, of their peer or of the engine (see `partial.rs`),
    /// dropped; their clients retransmit.
    pub partial_requests_refused: u64,
    /// Partial requests dropped, silent for the largest retransmission timeout, to make
    /// room for another.
    pub partial_requests_evicted: u64,
    /// Responses a handler wrote over the message limit, answered as a handler error
    /// ("response over the message limit") instead.
    pub responses_over_limit: u64,
    /// Requests handed to a deferred handler, and those it answered
    /// (`Engine::respond`); the difference runs now, or was abandoned.
    pub deferred_started: u64,
    /// See `deferred_started`.
    pub deferred_answered: u64,
    /// Responses that matched no waiting request (late duplicates), dropped.
    pub stale_responses: u64,
    /// Datagrams refused by authentication, by reason (`Refusal::index`): no valid
    /// trailer, another cluster, an unknown key, a bad MAC, a replay.
    pub auth_refused: [u64; Refusal::COUNT],
    /// Datagrams rejected by the decoder, by reason (`DecodeError::index`).
    pub decode_errors: [u64; DecodeError::COUNT],
    /// Datagrams of another configuration, dropped (before membership mode; see
    /// `Engine::switch_configuration`). In membership mode they are counted by
    /// `stale_configuration` and `newer_configuration` instead.
    pub wrong_configuration: u64,
    /// Membership mode: datagrams of an older configuration than this engine's, dropped.
    pub stale_configuration: u64,
    /// Membership mode: datagrams of a newer configuration than this engine's, dropped
    /// (the first of each id higher than any before is reported as
    /// `Event::NewerConfiguration`).
    pub newer_configuration: u64,
    /// Membership mode: datagrams from an endpoint whose node is not a member of the
    /// configuration, or from a member's incarnation other than the one the configuration
    /// names (a restarted member not admitted yet), dropped.
    pub not_member: u64,
    /// Membership mode: requests to a non-member, failed at submit with
    /// `RpcError::NotMember` and never sent.
    pub requests_to_non_members: u64,
    /// Calls that failed because the configuration changed: sent ones with
    /// `RpcError::ConfigurationChanged`, unsent ones with `RpcError::NotSent`.
    pub calls_failed_by_reconfiguration: u64,
    /// Datagrams addressed to another endpoint, dropped.
    pub misdirected: u64,
    /// Datagrams whose claimed source is not where the transport saw them come from.
    pub forged_source: u64,
    /// Datagrams from an earlier incarnation of their sender, dropped.
    pub stale_incarnation: u64,
    /// Times a peer was reset because it restarted (new incarnation).
    pub peer_restarts: u64,
    /// Messages whose fragments disagree with earlier fragments of the same message.
    pub inconsistent_fragments: u64,
    /// Datagrams dropped because the peer table is full.
    pub peers_exhausted: u64,
    /// Times a peer was reported suspect.
    pub suspects: u64,
}

impl Stats {
    /// Datagrams rejected by the decoder, all reasons together.
    pub fn decode_errors_total(&self) -> u64 {
        self.decode_errors.iter().sum()
    }

    /// Datagrams refused by authentication, all reasons together.
    pub fn auth_refused_total(&self) -> u64 {
        self.auth_refused.iter().sum()
    }

    /// Every datagram dropped before its messages were looked at.
    pub fn datagrams_dropped(&self) -> u64 {
        self.auth_refused_total()
            + self.decode_errors_total()
            + self.wrong_configuration
            + self.stale_configuration
            + self.newer_configuration
            + self.not_member
            + self.misdirected
            + self.forged_source
            + self.stale_incarnation
            + self.peers_exhausted
    }
}
