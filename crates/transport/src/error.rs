//! Errors of the transport layer.

use std::net::SocketAddr;

use ferrotx_wire::EndpointId;

/// Why a transport could not be set up. Once running, transports never fail: datagrams
/// they cannot move are counted in [`crate::TransportStats`] and the RPC layer retransmits.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The operating system refused to create the UDP socket.
    #[error("cannot create a UDP socket: {0}; check the process's file descriptor limit")]
    Socket(#[source] std::io::Error),
    /// A socket option could not be set.
    #[error("cannot set socket option {option}: {source}")]
    SocketOption {
        /// Name of the option, as in the C headers.
        option: &'static str,
        /// The error the kernel returned.
        #[source]
        source: std::io::Error,
    },
    /// Binding the socket to its local address failed.
    #[error(
        "cannot bind UDP socket to {addr}: {source}; is another process using the port, \
         or is the address not one of this machine's?"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The error the kernel returned.
        #[source]
        source: std::io::Error,
    },
    /// Two endpoints of the address book share one address, so a received datagram's
    /// sender could not be told apart.
    #[error("endpoints {first} and {second} both have address {addr}; give each its own port")]
    DuplicateAddress {
        /// The endpoint listed first.
        first: EndpointId,
        /// The endpoint listed second.
        second: EndpointId,
        /// The address they share.
        addr: SocketAddr,
    },
    /// A peer has an IPv6 address but the socket is bound to an IPv4 one, which cannot
    /// reach it.
    #[error(
        "endpoint {endpoint} has IPv6 address {addr} but the socket is IPv4; \
         bind to an IPv6 address (such as [::]) to reach both families"
    )]
    AddressFamily {
        /// The unreachable endpoint.
        endpoint: EndpointId,
        /// Its address.
        addr: SocketAddr,
    },
}
