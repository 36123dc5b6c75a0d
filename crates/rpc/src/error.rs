//! Errors of the RPC layer.

/// Why a request has no response payload.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum RpcError {
    /// The request is longer than `ferrotx_wire::MAX_MESSAGE_BYTES`; it was not sent.
    #[error("request larger than the message limit")]
    TooLarge,
    /// The engine already has sessions with `MAX_PEERS` endpoints; it was not sent.
    #[error("too many peers: the session table is full")]
    TooManyPeers,
    /// The target has no handler for the request type.
    #[error("no handler for this request type at the target")]
    UnknownRequestType,
    /// The target restarted after the request was first sent: the new incarnation did not
    /// run it, the earlier one may have. Only the layer above can tell what happened.
    #[error("the target restarted; the request may have run before the restart")]
    TargetRestarted,
    /// The target's session slot had moved past the request: a request of this session
    /// with a later number, forged or from a broken peer, took the slot. The request may
    /// or may not have run (before the later one). The session's next requests are
    /// numbered past the slot's, so they are served again.
    #[error("a later request took the target's slot; the request may or may not have run")]
    Overtaken,
    /// The handler at the target rejected the request; its text is the response payload.
    #[error("the handler rejected the request")]
    Handler,
    /// The configuration changed while the request was outstanding; it may or may not
    /// have run. It is not retransmitted under the new configuration.
    #[error(
        "the configuration changed while the request was outstanding; it may or may not have run"
    )]
    ConfigurationChanged,
    /// The configuration changed before the request was sent (it waited for a credit or
    /// for a connect): never sent, so certainly not run; safe to retry.
    #[error("the request was never sent (the configuration changed); it certainly did not run")]
    NotSent,
    /// The target is not a member of the current configuration (membership mode, see
    /// `Engine::switch_configuration`); the request was not sent.
    #[error("the target is not a member of the configuration; the request was not sent")]
    NotMember,
}

/// A handler's refusal of a request; its text goes back to the caller.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandlerError(pub &'static str);
