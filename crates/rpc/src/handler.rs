//! Request handlers: registered per request type, run inline in the event loop.

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
