//! Checks of the members' addresses: every endpoint reachable, no two sharing a port.

use std::net::IpAddr;

use crate::error::ConfigError;
use crate::member::Member;

/// Checks that each member's host is a real address, that its ports are fixed and fit
/// below 65,536 for `threads` RPC endpoints, that it gives at most one RESP address, and
/// that no port of an address is used twice (two members on one host, a RESP port among
/// RPC ports, two members with one RESP address).
pub(crate) fn check_addresses(members: &[Member], threads: u16) -> Result<(), ConfigError> {
    debug_assert!(threads > 0, "threads checked before addresses");
    // Inclusive port ranges: each member's RPC range, and its RESP port if any.
    let mut ranges: Vec<(IpAddr, u16, u16, u16)> = Vec::with_capacity(members.len() * 2);
    for member in members {
        if member.host.is_unspecified() {
            return Err(ConfigError::UnspecifiedHost {
                node: member.node,
                host: member.host,
            });
        }
        if member.resp.is_some() && member.resp_port.is_some() {
            return Err(ConfigError::RespAddressTwice { node: member.node });
        }
        let resp = member.resp_addr();
        if member.rpc_port_base == 0 || resp.is_some_and(|addr| addr.port() == 0) {
            return Err(ConfigError::PortZero { node: member.node });
        }
        let rpc_port_last =
            member
                .rpc_port_base
                .checked_add(threads - 1)
                .ok_or(ConfigError::PortOverflow {
                    node: member.node,
                    rpc_port_base: member.rpc_port_base,
                    threads,
                })?;
        ranges.push((
            member.host,
            member.rpc_port_base,
            rpc_port_last,
            member.node,
        ));
        if let Some(addr) = resp {
            ranges.push((addr.ip(), addr.port(), addr.port(), member.node));
        }
        // A lease port given is checked like the others; the default one (after the
        // last worker's port) is for members that leave room for it.
        if let Some(port) = member.lease_port {
            if port == 0 {
                return Err(ConfigError::PortZero { node: member.node });
            }
            ranges.push((member.host, port, port, member.node));
        }
    }
    // Sorted by host then first port, the ranges of a host overlap exactly when one starts
    // at or before the end of the range before it (no earlier range reaches further, or
    // it would have overlapped that one already).
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let (host, _, previous_last, previous_node) = pair[0];
        let (next_host, next_first, _, next_node) = pair[1];
        if host == next_host && next_first <= previous_last {
            return Err(ConfigError::PortClash {
                host,
                port: next_first,
                first: previous_node.min(next_node),
                second: previous_node.max(next_node),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::testing::member;

    fn on(node: u16, host: [u8; 4], rpc_port_base: u16, resp_port: Option<u16>) -> Member {
        Member {
            host: IpAddr::V4(Ipv4Addr::from(host)),
            rpc_port_base,
            resp_port,
            lease_port: None,
            ..member(node, "a")
        }
    }

    #[test]
    fn members_sharing_a_host_need_disjoint_ports() {
        let host = [127, 0, 0, 1];
        // Adjacent ranges are fine: 7000-7003, 7004-7007, RESP 7008 and 6379.
        let members = [on(0, host, 7000, Some(7008)), on(1, host, 7004, Some(6379))];
        check_addresses(&members, 4).unwrap();
        // The same ports on another host are fine too.
        let members = [on(0, host, 7000, None), on(1, [127, 0, 0, 2], 7000, None)];
        check_addresses(&members, 4).unwrap();

        let clash = |members: &[Member]| match check_addresses(members, 4) {
            Err(ConfigError::PortClash {
                port,
                first,
                second,
                ..
            }) => (port, first, second),
            other => panic!("expected a clash, got {other:?}"),
        };
        assert_eq!(
            clash(&[on(0, host, 7000, None), on(1, host, 7003, None)]),
            (7003, 0, 1)
        );
        assert_eq!(
            clash(&[on(5, host, 7010, None), on(2, host, 7000, Some(7012))]),
            (7012, 2, 5)
        );
        // A RESP port among its own RPC ports.
        assert_eq!(clash(&[on(3, host, 7000, Some(7002))]), (7002, 3, 3));
        // Two equal RESP ports.
        assert_eq!(
            clash(&[on(0, host, 7000, Some(6379)), on(1, host, 8000, Some(6379))]),
            (6379, 0, 1)
        );
        // A range inside a longer one that started before the range between them.
        let members = [
            on(0, host, 7000, Some(7100)),
            on(1, host, 7004, None),
            on(2, host, 7050, None),
        ];
        check_addresses(&members, 4).unwrap();
        assert_eq!(
            clash(&[on(0, host, 7000, Some(6000)), on(1, host, 5999, None)]),
            (6000, 0, 1)
        );
    }

    #[test]
    fn resp_addresses_are_checked_like_ports() {
        let host = [127, 0, 0, 1];
        let with_resp = |node: u16, rpc_port_base: u16, resp: &str| Member {
            resp: Some(resp.parse().unwrap()),
            ..on(node, host, rpc_port_base, None)
        };
        // Distinct addresses, and the same port on other addresses, are fine.
        let members = [
            with_resp(0, 7000, "127.0.0.1:7379"),
            with_resp(1, 7004, "127.0.0.1:7380"),
            with_resp(2, 7008, "127.0.0.2:7379"),
        ];
        check_addresses(&members, 4).unwrap();
        // The same address twice.
        let members = [
            with_resp(0, 7000, "127.0.0.1:7379"),
            with_resp(1, 7004, "127.0.0.1:7379"),
        ];
        assert!(matches!(
            check_addresses(&members, 4),
            Err(ConfigError::PortClash {
                port: 7379,
                first: 0,
                second: 1,
                ..
            })
        ));
        // Among the RPC ports of its host, or on the RESP port of another member.
        assert!(matches!(
            check_addresses(&[with_resp(3, 7000, "127.0.0.1:7001")], 4),
            Err(ConfigError::PortClash { port: 7001, .. })
        ));
        let members = [
            with_resp(0, 7000, "127.0.0.1:6379"),
            on(1, host, 7004, Some(6379)),
        ];
        assert!(matches!(
            check_addresses(&members, 4),
            Err(ConfigError::PortClash { port: 6379, .. })
        ));
        // Both forms on one member, or port 0.
        let both = Member {
            resp_port: Some(6379),
            lease_port: None,
            ..with_resp(4, 7000, "127.0.0.1:7379")
        };
        assert!(matches!(
            check_addresses(&[both], 4),
            Err(ConfigError::RespAddressTwice { node: 4 })
        ));
        assert!(matches!(
            check_addresses(&[with_resp(5, 7000, "127.0.0.1:0")], 4),
            Err(ConfigError::PortZero { node: 5 })
        ));
        // Every interface is a valid address to listen on.
        check_addresses(&[with_resp(6, 7000, "0.0.0.0:6379")], 4).unwrap();
    }

    #[test]
    fn ports_must_be_fixed_and_fit() {
        assert!(matches!(
            check_addresses(&[on(1, [127, 0, 0, 1], 0, None)], 4),
            Err(ConfigError::PortZero { node: 1 })
        ));
        assert!(matches!(
            check_addresses(&[on(1, [127, 0, 0, 1], 7000, Some(0))], 4),
            Err(ConfigError::PortZero { node: 1 })
        ));
        check_addresses(&[on(1, [127, 0, 0, 1], u16::MAX - 3, None)], 4).unwrap();
        assert!(matches!(
            check_addresses(&[on(1, [127, 0, 0, 1], u16::MAX - 2, None)], 4),
            Err(ConfigError::PortOverflow {
                node: 1,
                rpc_port_base: 65_533,
                threads: 4
            })
        ));
        assert!(matches!(
            check_addresses(&[on(2, [0, 0, 0, 0], 7000, None)], 4),
            Err(ConfigError::UnspecifiedHost { node: 2, .. })
        ));
    }
}
