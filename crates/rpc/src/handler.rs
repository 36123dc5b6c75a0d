//! Request handlers: registered per request type, run inline in the event loop. A
//! deferred handler answers later, through [`crate::Engine::respond`].

use ferrotx_wire::EndpointId;

use crate::error::HandlerError;

/// A complete request as its handler sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The endpoint that sent the request.
    pub source: EndpointId,
    /// Its request type.
    pub request_type: u8,
    /// Its payload.
    pub payload: &'a [u8],
}

/// A request handler. It runs inline in the worker's event loop, so it must be short
/// (look up, lock, validate, install, append). It appends its response to the buffer it
/// is given (empty on entry), or returns an error whose text becomes the response.
pub type Handler = Box<dyn FnMut(&Request<'_>, &mut Vec<u8>) -> Result<(), HandlerError>>;

/// A handler that answers later: it takes the request (copying what it needs) and the
/// [`Deferred`] token, and the layer above answers with [`crate::Engine::respond`] once
/// the work is done (eRPC's background continuations). Until then, duplicates of the
/// request are ignored, and it still runs at most once.
pub type DeferredHandler = Box<dyn FnMut(&Request<'_>, Deferred)>;

/// Where the answer to a deferred request goes: the session slot it arrived on and the
/// request's number there, and the life of the client that sent it. Answering a token
/// whose request is gone (the client restarted, or moved on) does nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Deferred {
    pub(crate) peer: u32,
    pub(crate) slot: u8,
    pub(crate) request_number: u64,
    pub(crate) incarnation: u64,
    /// The endpoint that sent the request.
    pub source: EndpointId,
}

/// A registered handler.
pub(crate) enum Registered {
    /// Answers at once.
    Now(Handler),
    /// Answers through [`crate::Engine::respond`].
    Later(DeferredHandler),
}
