//! What an attacker on the hosts' network sees and can send (hostile_cluster.rs): a
//! cluster's UDP datagrams captured on the loopback interface with a raw `AF_PACKET`
//! socket (as tcpdump does), and datagrams sent with any source address through a raw IP
//! socket. Both need CAP_NET_RAW; [`raw_sockets_or_skip`] says what to do without it.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Largest IPv4 packet (the loopback interface's MTU is 65,536: nothing is fragmented).
const PACKET_BYTES_MAX: usize = 65_535;
/// Bytes of the link-layer header the loopback interface puts before each packet (an
/// Ethernet header of zero addresses).
const LOOPBACK_HEADER_BYTES: usize = 14;
/// IPv4 and UDP header bytes, without IP options.
const IPV4_HEADER_BYTES: usize = 20;
const UDP_HEADER_BYTES: usize = 8;

/// True if the test may go on without raw sockets; false if it must fail
/// (`FERROTX_REQUIRE_RAW=1`, as CI, which runs as root, sets). Says so loudly either way.
pub fn raw_sockets_or_skip(test: &str, error: &io::Error) -> bool {
    let required = std::env::var("FERROTX_REQUIRE_RAW").is_ok_and(|v| v == "1");
    eprintln!(
        "\n!!!!!!!! {test}: no raw socket ({error}): it needs CAP_NET_RAW (run as root, or \
         `setcap cap_net_raw+ep` on the test binary). {}\n",
        if required {
            "FERROTX_REQUIRE_RAW=1: failing."
        } else {
            "SKIPPED (set FERROTX_REQUIRE_RAW=1 to make this a failure)."
        }
    );
    !required
}

/// A UDP datagram seen arriving on the loopback interface.
#[derive(Clone, Debug)]
pub struct Captured {
    pub source: SocketAddrV4,
    pub target: SocketAddrV4,
    pub payload: Vec<u8>,
}

/// A raw packet socket bound to the loopback interface. It queues every packet from its
/// opening on: open it right before capturing.
pub struct Capture {
    socket: OwnedFd,
    loopback: i32,
}

impl Capture {
    /// Opens the socket: an error without CAP_NET_RAW.
    pub fn open() -> io::Result<Self> {
        let protocol = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(protocol),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a NUL-terminated name.
        let loopback = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if loopback == 0 {
            return Err(io::Error::last_os_error());
        }
        let loopback = loopback as i32;
        // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = loopback;
        // SAFETY: `addr` is a sockaddr_ll of the length given.
        let bound = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if bound < 0 {
            return Err(io::Error::last_os_error());
        }
        // A large buffer (SO_RCVBUFFORCE: past rmem_max, as root), so that a burst of the
        // cluster's traffic is not lost while this thread parses; and a timeout, so that
        // the capture ends on time on a quiet interface.
        set_option(&socket, libc::SO_RCVBUFFORCE, 32 << 20)?;
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: a timeval of the length given.
        let set = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if set < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { socket, loopback })
    }

    /// The UDP datagrams to 127.0.0.1 on one of `ports` that arrive for `duration`. The
    /// loopback interface shows each packet twice, going out and coming in: only the
    /// second (`PACKET_HOST`) is kept.
    pub fn datagrams_to(&self, ports: &BTreeSet<u16>, duration: Duration) -> Vec<Captured> {
        let deadline = Instant::now() + duration;
        let mut buf = vec![0u8; LOOPBACK_HEADER_BYTES + PACKET_BYTES_MAX];
        let mut out = Vec::new();
        while Instant::now() < deadline {
            // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are writable for the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    self.socket.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&raw mut from).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::Interrupted => continue,
                    _ => panic!("capture: {e}"),
                }
            }
            if from.sll_pkttype != libc::PACKET_HOST || from.sll_ifindex != self.loopback {
                continue;
            }
            if let Some(d) = parse_loopback_frame(&buf[..n as usize])
                && *d.target.ip() == Ipv4Addr::LOCALHOST
                && ports.contains(&d.target.port())
            {
                out.push(d);
            }
        }
        out
    }
}

/// The UDP datagram in a loopback frame, if it holds an unfragmented IPv4 one.
fn parse_loopback_frame(frame: &[u8]) -> Option<Captured> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype != libc::ETH_P_IP as u16 {
        return None;
    }
    let ip = &frame[LOOPBACK_HEADER_BYTES..];
    if ip.len() < IPV4_HEADER_BYTES || ip[0] >> 4 != 4 || ip[9] != libc::IPPROTO_UDP as u8 {
        return None;
    }
    let header = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let fragmented = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    if fragmented || total > ip.len() || header + UDP_HEADER_BYTES > total {
        return None;
    }
    let address = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
    let udp = &ip[header..total];
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    let length = usize::from(port(4));
    if length < UDP_HEADER_BYTES || length > udp.len() {
        return None;
    }
    Some(Captured {
        source: SocketAddrV4::new(address(12), port(0)),
        target: SocketAddrV4::new(address(16), port(2)),
        payload: udp[UDP_HEADER_BYTES..length].to_vec(),
    })
}

/// A raw IPv4 socket that writes its own headers: sends a UDP datagram as if it came from
/// any address, a node's own socket included.
pub struct Spoofer {
    socket: OwnedFd,
    packet: Vec<u8>,
}

impl Spoofer {
    /// Opens the socket: an error without CAP_NET_RAW.
    pub fn open() -> io::Result<Self> {
        // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::IPPROTO_RAW,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            socket,
            packet: Vec::with_capacity(PACKET_BYTES_MAX),
        })
    }

    /// Sends `payload` from `source` to `target` (IPPROTO_RAW implies IP_HDRINCL: the
    /// kernel fills in the IP checksum; a UDP checksum of zero means none).
    pub fn send(
        &mut self,
        source: SocketAddrV4,
        target: SocketAddrV4,
        payload: &[u8],
    ) -> io::Result<()> {
        let udp_length = UDP_HEADER_BYTES + payload.len();
        let total = IPV4_HEADER_BYTES + udp_length;
        assert!(
            total <= PACKET_BYTES_MAX,
            "{total} bytes do not fit a packet"
        );
        let p = &mut self.packet;
        p.clear();
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, libc::IPPROTO_UDP as u8, 0, 0]);
        p.extend_from_slice(&source.ip().octets());
        p.extend_from_slice(&target.ip().octets());
        p.extend_from_slice(&source.port().to_be_bytes());
        p.extend_from_slice(&target.port().to_be_bytes());
        p.extend_from_slice(&(udp_length as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        // SAFETY: sockaddr_in is plain data; all zeros is a valid value.
        let mut to: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_addr.s_addr = u32::from_ne_bytes(target.ip().octets());
        // SAFETY: `p` and `to` are readable for the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.socket.as_raw_fd(),
                p.as_ptr().cast(),
                p.len(),
                0,
                (&raw const to).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn set_option(socket: &OwnedFd, option: i32, value: i32) -> io::Result<()> {
    // SAFETY: an int of the length given.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if set < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
