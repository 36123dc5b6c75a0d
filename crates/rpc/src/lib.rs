//! The RPC engine of one worker thread: FaSST's datagram RPCs, made reliable in software.
//!
//! The engine is sans-IO. Its caller (a worker's event loop, or the simulator) feeds it
//! received datagrams with [`Engine::handle_datagram`], lets it write outgoing datagrams
//! with [`Engine::poll_transmit`], calls [`Engine::handle_timeout`] once
//! [`Engine::next_timeout_ns`] has passed, and passes the time in nanoseconds each time.
//! It never reads a clock, a random generator or a socket.
//!
//! Requests are made by *callers* (one per coroutine slot): a caller builds a batch with
//! [`Engine::batch_push`], sends it with [`Engine::submit`], and is reported ready by
//! [`Engine::poll_ready`] only once every request of the batch has an outcome, which it
//! reads with [`Engine::result`].
//!
//! Reliability follows eRPC and RAMCloud's FastTransport: between each pair of endpoints a
//! session holds `credits` slots, so at most that many requests are outstanding; each
//! request carries its slot and a request number; the client retransmits after a timeout
//! found by a periodic scan; the server keeps the last response of each slot, so a
//! duplicate of a finished request gets the saved response and a duplicate of an older one
//! is not run (at-most-once execution; it is answered "overtaken", see `docs/rpc.md`). A
//! new request on a slot tells the server that the client has the previous response,
//! which frees it. Messages longer than a datagram are
//! split into packets and reassembled. A peer that stays silent while requests wait on it
//! is reported as suspect with [`Event::Suspect`]; the engine never gives up on a request
//! by itself. Once the membership layer calls [`Engine::switch_configuration`], the engine
//! talks to members of the configuration only, and a change of configuration completes
//! every outstanding call with an error (see `docs/rpc.md`, "Membership mode").

mod caller;
mod config;
mod engine;
mod error;
mod handler;
mod partial;
mod receive;
mod retransmit;
mod rto;
mod session;
mod stats;
mod transmit;

pub use caller::CallerId;
pub use config::Config;
pub use engine::{CONNECT_REQUEST_TYPE, Engine, Event};
pub use error::{HandlerError, RpcError};
pub use handler::{Deferred, DeferredHandler, Handler, Request};
pub use stats::Stats;
