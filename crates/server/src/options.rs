//! How a node's Redis front end serves: where, with which password and limits.

use std::fmt;
use std::net::SocketAddr;

use ferrotx_cluster::{Configuration, RespSettings};

use crate::error::ServerError;

/// Settings of one node's Redis front end.
#[derive(Clone)]
pub struct ServerOptions {
    /// Where to listen (port 0: any free port, see [`crate::RespServer::local_addr`]).
    pub addr: SocketAddr,
    /// Redis's `requirepass`: clients must authenticate first. `None`: no password.
    pub password: Option<Vec<u8>>,
    /// Largest request a client may send, in bytes.
    pub max_request_bytes: usize,
    /// Most clients connected at once.
    pub max_clients: usize,
    /// Most pipelined data commands run as one transaction.
    pub pipeline_commands_max: usize,
    /// Serve the sockets on the node's worker thread 0 rather than on an I/O thread of
    /// their own (see [`crate::RespServer::start`]); falls back to a thread where the
    /// worker cannot watch sockets.
    pub on_worker: bool,
}

/// The password is never printed.
impl fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerOptions")
            .field("addr", &self.addr)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_clients", &self.max_clients)
            .field("pipeline_commands_max", &self.pipeline_commands_max)
            .field("on_worker", &self.on_worker)
            .finish()
    }
}

impl ServerOptions {
    /// Options that listen on `addr` with the cluster's `settings`.
    pub fn new(addr: SocketAddr, settings: &RespSettings) -> Self {
        Self {
            addr,
            password: settings.requirepass.as_ref().map(|p| p.as_bytes().to_vec()),
            max_request_bytes: settings.max_request_bytes,
            max_clients: settings.max_clients,
            pipeline_commands_max: settings.pipeline_commands_max,
            on_worker: true,
        }
    }

    /// The options of node `node` of `config`: its member's Redis address and the
    /// cluster's `[resp]` settings. Fails if the member has no Redis address.
    ///
    /// # Panics
    ///
    /// If `node` is not a member of `config`.
    pub fn from_config(config: &Configuration, node: u16) -> Result<Self, ServerError> {
        let member = config
            .member(node)
            .unwrap_or_else(|| panic!("node {node} is not a member"));
        let addr = member.resp_addr().ok_or(ServerError::NoAddress { node })?;
        Ok(Self::new(addr, config.resp()))
    }
}
