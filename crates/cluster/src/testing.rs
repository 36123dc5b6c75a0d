//! Helpers for the tests of this crate.

use std::net::{IpAddr, Ipv4Addr};

use crate::member::Member;

/// Members with node ids 0, 1, ... in the given failure domains, each on its own loopback
/// address with RPC ports from 7000.
pub(crate) fn members_in(domains: &[&str]) -> Vec<Member> {
    domains
        .iter()
        .enumerate()
        .map(|(index, domain)| {
            let node = u16::try_from(index).unwrap();
            member(node, domain)
        })
        .collect()
}

/// Node `node` in `domain`, at 127.0.0.1 + `node`, RPC ports from 7000.
pub(crate) fn member(node: u16, domain: &str) -> Member {
    Member {
        node,
        failure_domain: domain.to_owned(),
        host: IpAddr::V4(Ipv4Addr::from(0x7f00_0001 + u32::from(node))),
        rpc_port_base: 7000,
        resp_port: None,
        lease_port: None,
        resp: None,
    }
}
