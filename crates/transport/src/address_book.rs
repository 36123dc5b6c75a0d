//! Where each endpoint listens.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use ferrotx_wire::EndpointId;

/// The UDP address of every endpoint of a cluster: the static membership a
/// [`crate::udp::UdpTransport`] is built from. Iteration is in endpoint order, so two
/// books with the same entries behave the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressBook {
    addresses: BTreeMap<EndpointId, SocketAddr>,
}

impl AddressBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// The usual single-machine layout: thread `t` of node `n` listens on
    /// `127.0.0.1:(base_port + n * threads + t)`, for `nodes` nodes of `threads` threads.
    ///
    /// # Panics
    ///
    /// If the last port would pass 65,535; pick a lower `base_port`.
    pub fn loopback(base_port: u16, nodes: u16, threads: u16) -> Self {
        let endpoints = u32::from(nodes) * u32::from(threads);
        assert!(
            u32::from(base_port) + endpoints <= u32::from(u16::MAX) + 1,
            "{nodes} nodes of {threads} threads from port {base_port} pass port 65535"
        );
        let mut book = Self::new();
        for node in 0..nodes {
            for thread in 0..threads {
                let offset = u32::from(node) * u32::from(threads) + u32::from(thread);
                let port =
                    u16::try_from(u32::from(base_port) + offset).expect("port range checked above");
                book.insert(
                    EndpointId::new(node, thread),
                    SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                );
            }
        }
        book
    }

    /// Sets the address of `endpoint`, returning the one it replaces.
    pub fn insert(&mut self, endpoint: EndpointId, addr: SocketAddr) -> Option<SocketAddr> {
        self.addresses.insert(endpoint, addr)
    }

    /// The address of `endpoint`, if known.
    pub fn get(&self, endpoint: EndpointId) -> Option<SocketAddr> {
        self.addresses.get(&endpoint).copied()
    }

    /// Number of endpoints in the book.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// True if the book holds no endpoint.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Every endpoint and its address, in endpoint order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (EndpointId, SocketAddr)> + '_ {
        self.addresses
            .iter()
            .map(|(&endpoint, &addr)| (endpoint, addr))
    }
}

impl FromIterator<(EndpointId, SocketAddr)> for AddressBook {
    fn from_iter<I: IntoIterator<Item = (EndpointId, SocketAddr)>>(iter: I) -> Self {
        Self {
            addresses: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_layout() {
        let book = AddressBook::loopback(40_000, 3, 4);
        assert_eq!(book.len(), 12);
        assert_eq!(
            book.get(EndpointId::new(0, 0)),
            Some("127.0.0.1:40000".parse().unwrap())
        );
        assert_eq!(
            book.get(EndpointId::new(2, 3)),
            Some("127.0.0.1:40011".parse().unwrap())
        );
        assert_eq!(book.get(EndpointId::new(3, 0)), None);
        let ports: Vec<u16> = book.iter().map(|(_, addr)| addr.port()).collect();
        assert_eq!(ports, (40_000..40_012).collect::<Vec<_>>());
    }

    #[test]
    fn loopback_up_to_the_last_port() {
        let book = AddressBook::loopback(u16::MAX - 3, 2, 2);
        assert_eq!(book.get(EndpointId::new(1, 1)).unwrap().port(), u16::MAX);
    }

    #[test]
    #[should_panic(expected = "pass port 65535")]
    fn loopback_overflow_panics() {
        let _ = AddressBook::loopback(u16::MAX - 2, 2, 2);
    }
}
