//! Members: the nodes of a cluster, where they listen and what fails with them.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::limits::MEMBERS_MAX;

/// One node of the cluster.
///
/// Its worker thread `t` (the RPC endpoint `EndpointId::new(node, t)`) listens on UDP
/// port `rpc_port_base + t` of `host`; its Redis-protocol front end, if it runs one, on
/// the TCP address `resp`, or on TCP port `resp_port` of `host` (at most one of the two).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Its node id: the high 16 bits of its endpoints' ids.
    pub node: u16,
    /// What fails with it: a rack, a power supply, a switch. Replicas of a partition go to
    /// distinct failure domains where the cluster has enough of them.
    pub failure_domain: String,
    /// The address its peers reach it at (an address, not a name: resolving names is I/O,
    /// left to whoever writes the file).
    pub host: IpAddr,
    /// UDP port of its thread 0; thread `t` listens on `rpc_port_base + t`.
    pub rpc_port_base: u16,
    /// TCP port of its Redis-protocol front end on `host`, if it runs one there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_port: Option<u16>,
    /// TCP address of its Redis-protocol front end, if it runs one: for clients, so it
    /// may be another address than `host` (loopback, or `0.0.0.0` for every interface).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<SocketAddr>,
    /// UDP port of its lease socket on `host` (leases and reconfiguration have a socket
    /// and thread of their own, FaRM 5.1). Default: the port after its last worker's,
    /// `rpc_port_base + threads_per_node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_port: Option<u16>,
}

impl Member {
    /// The address of its worker thread `thread`.
    ///
    /// # Panics
    ///
    /// If the port passes 65,535, which a validated [`crate::Configuration`] rules out
    /// for every thread below its `threads_per_node`.
    pub fn rpc_addr(&self, thread: u16) -> SocketAddr {
        let port = self
            .rpc_port_base
            .checked_add(thread)
            .expect("thread's RPC port passes 65535");
        SocketAddr::new(self.host, port)
    }

    /// The address of its lease socket, for a cluster of `threads` worker threads per
    /// node.
    pub fn lease_addr(&self, threads: u16) -> SocketAddr {
        let port = self
            .lease_port
            .unwrap_or_else(|| self.rpc_port_base.saturating_add(threads));
        SocketAddr::new(self.host, port)
    }

    /// The address of its Redis-protocol front end, if it runs one: `resp`, or port
    /// `resp_port` of `host`.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp
            .or_else(|| self.resp_port.map(|port| SocketAddr::new(self.host, port)))
    }
}

/// Checks what placement needs of a member list: at least one member, at most
/// [`MEMBERS_MAX`], distinct node ids, and a named failure domain for each.
pub(crate) fn check_members(members: &[Member]) -> Result<(), ConfigError> {
    if members.is_empty() {
        return Err(ConfigError::NoMembers);
    }
    if members.len() > MEMBERS_MAX {
        return Err(ConfigError::TooManyMembers {
            count: members.len(),
            max: MEMBERS_MAX,
        });
    }
    let mut seen = BTreeSet::new();
    for member in members {
        if !seen.insert(member.node) {
            return Err(ConfigError::DuplicateNode { node: member.node });
        }
        if member.failure_domain.is_empty() {
            return Err(ConfigError::EmptyFailureDomain { node: member.node });
        }
    }
    Ok(())
}
