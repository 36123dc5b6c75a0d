//! UDP transport: one non-blocking kernel socket per endpoint, whole batches per system
//! call.
//!
//! FaSST gives each core one unreliable-datagram queue pair and posts a whole batch of
//! sends with one doorbell. The kernel analogue is one UDP socket per worker thread and one
//! `sendmmsg` per batch, whatever the destinations; receiving drains up to a batch with one
//! `recvmmsg`. Everything the system calls need (message headers, I/O vectors, address
//! slots) is allocated at construction and only refilled per call, and every peer's socket
//! address is built once, so moving datagrams allocates nothing.
//!
//! Use: [`UdpTransport::bind`] once, then from the worker thread call
//! [`Transport::send_batch`], [`Transport::recv_batch`] and [`Transport::wait`] in any order.
//! [`UdpTransport::insert_peer`] and [`UdpTransport::remove_peer`] change the membership
//! between those calls.

use std::ffi::c_void;
use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use ferrotx_wire::EndpointId;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::{AddressBook, Doorbell, RxBatch, Transport, TransportError, TransportStats, TxBatch};

/// Default size asked for each of the socket's receive and send buffers. At 64 KiB per
/// datagram, 8 MiB holds 128 full datagrams, several batches from every peer, so a worker
/// that pauses for a millisecond (a page fault, a descheduling) does not drop what its
/// peers sent meanwhile. Linux caps the plain request at `net.core.rmem_max`/`wmem_max`
/// (often 208 KiB); the transport asks with `SO_RCVBUFFORCE` first, which a process with
/// `CAP_NET_ADMIN` (root) may use to pass that cap.
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// Default number of datagrams the system-call arrays are sized for. One loop iteration of
/// a worker sends at most one datagram per destination per coroutine batch; 64 covers
/// about 20 coroutine slots each talking to a few endpoints. A larger batch grows the
/// arrays once.
pub const DEFAULT_MAX_BATCH: usize = 64;

/// Settings of a [`UdpTransport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Receive buffer size to ask the kernel for (`SO_RCVBUF`).
    pub recv_buffer_bytes: usize,
    /// Send buffer size to ask the kernel for (`SO_SNDBUF`).
    pub send_buffer_bytes: usize,
    /// Number of datagrams the system-call arrays are first sized for.
    pub max_batch: usize,
}

impl Default for UdpConfig {
    fn default() -> Self {
        Self {
            recv_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            send_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

/// A peer as the socket addresses it.
struct Peer {
    /// Its address in canonical form (see [`canonical`]), the key of the reverse map.
    addr: SocketAddr,
    /// Its address in the socket's family, ready for `msg_name`.
    sockaddr: SockAddr,
}

/// A [`Transport`] over one non-blocking UDP socket (Linux only: it relies on
/// `sendmmsg`, `recvmmsg` and `ppoll`).
///
/// It is `Send`, so it may be built on one thread and moved to the worker that drives it.
pub struct UdpTransport {
    local: EndpointId,
    socket: Socket,
    local_addr: SocketAddr,
    /// Where each known endpoint listens.
    peers: HashMap<EndpointId, Peer, FixedState>,
    /// Which endpoint listens at each canonical address; the inverse of `peers`.
    endpoints: HashMap<SocketAddr, EndpointId, FixedState>,
    /// Arrays for `sendmmsg`, refilled for every batch.
    arrays: MessageArrays,
    /// Arrays for `recvmmsg`, prepared once per receive batch (see `recv_batch`).
    recv_arrays: MessageArrays,
    /// Id of the `RxBatch` that `recv_arrays` point into, 0 for none.
    recv_prepared_for: u64,
    /// Entries of `recv_arrays` the kernel wrote in the last call, to reset before the next.
    recv_touched: usize,
    stats: TransportStats,
    truncated_received: u64,
    last_error: Option<i32>,
    recv_buffer_bytes: usize,
    send_buffer_bytes: usize,
    /// Polled beside the socket by `wait`.
    doorbell: Arc<Doorbell>,
}

impl UdpTransport {
    /// Opens the socket of endpoint `local`, bound to `bind_addr` (port 0 picks a free
    /// port; see [`UdpTransport::local_addr`]), able to reach every endpoint of `peers`
    /// (which may list `local` too). IPv4 and IPv6 are both supported; a socket bound to an
    /// IPv6 address also reaches IPv4 peers, through IPv4-mapped addresses.
    pub fn bind(
        local: EndpointId,
        bind_addr: SocketAddr,
        peers: &AddressBook,
        config: UdpConfig,
    ) -> Result<Self, TransportError> {
        assert!(config.max_batch > 0, "max_batch must be at least 1");
        let socket = Socket::new(
            Domain::for_address(bind_addr),
            Type::DGRAM,
            Some(Protocol::UDP),
        )
        .map_err(TransportError::Socket)?;
        socket
            .set_nonblocking(true)
            .map_err(option_error("O_NONBLOCK"))?;
        if bind_addr.is_ipv6() {
            // Dual stack, whatever the system default, so that IPv4 peers stay reachable.
            socket
                .set_only_v6(false)
                .map_err(option_error("IPV6_V6ONLY"))?;
        }
        let recv_buffer_bytes =
            set_buffer_size(&socket, Buffer::Receive, config.recv_buffer_bytes)?;
        let send_buffer_bytes = set_buffer_size(&socket, Buffer::Send, config.send_buffer_bytes)?;
        socket
            .bind(&SockAddr::from(bind_addr))
            .map_err(|source| TransportError::Bind {
                addr: bind_addr,
                source,
            })?;
        let local_addr = socket
            .local_addr()
            .map_err(TransportError::Socket)?
            .as_socket()
            .expect("a UDP socket is bound to an IP address");
        let mut transport = Self {
            local,
            socket,
            local_addr,
            peers: HashMap::with_capacity_and_hasher(peers.len(), FixedState::default()),
            endpoints: HashMap::with_capacity_and_hasher(peers.len(), FixedState::default()),
            arrays: MessageArrays::new(config.max_batch),
            recv_arrays: MessageArrays::new(0),
            recv_prepared_for: 0,
            recv_touched: 0,
            stats: TransportStats::default(),
            truncated_received: 0,
            last_error: None,
            recv_buffer_bytes,
            send_buffer_bytes,
            doorbell: Arc::new(Doorbell::event_fd().map_err(TransportError::Socket)?),
        };
        for (endpoint, addr) in peers.iter() {
            transport.insert_peer(endpoint, addr)?;
        }
        Ok(transport)
    }

    /// Adds `endpoint` at `addr`, or moves it there. Allocates; call it between batches,
    /// not per datagram.
    pub fn insert_peer(
        &mut self,
        endpoint: EndpointId,
        addr: SocketAddr,
    ) -> Result<(), TransportError> {
        let key = canonical(addr);
        if let Some(&other) = self.endpoints.get(&key).filter(|&&other| other != endpoint) {
            return Err(TransportError::DuplicateAddress {
                first: other,
                second: endpoint,
                addr,
            });
        }
        let sockaddr = match (self.local_addr, key) {
            (SocketAddr::V4(_), SocketAddr::V6(_)) => {
                return Err(TransportError::AddressFamily { endpoint, addr });
            }
            (SocketAddr::V6(_), SocketAddr::V4(v4)) => {
                SockAddr::from(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            (_, key) => SockAddr::from(key),
        };
        if let Some(old) = self.peers.insert(
            endpoint,
            Peer {
                addr: key,
                sockaddr,
            },
        ) {
            self.endpoints.remove(&old.addr);
        }
        self.endpoints.insert(key, endpoint);
        Ok(())
    }

    /// Forgets `endpoint`: datagrams to it are dropped and datagrams from its address
    /// count as from an unknown sender. Returns its address, if it was known.
    pub fn remove_peer(&mut self, endpoint: EndpointId) -> Option<SocketAddr> {
        let peer = self.peers.remove(&endpoint)?;
        self.endpoints.remove(&peer.addr);
        Some(peer.addr)
    }

    /// The address the socket is bound to (with the port the kernel chose, if 0 was
    /// asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Receive buffer size the kernel granted, as it reports it (Linux reports twice the
    /// size set, the extra covering its bookkeeping).
    pub fn recv_buffer_bytes(&self) -> usize {
        self.recv_buffer_bytes
    }

    /// Send buffer size the kernel granted, as it reports it (see
    /// [`UdpTransport::recv_buffer_bytes`]).
    pub fn send_buffer_bytes(&self) -> usize {
        self.send_buffer_bytes
    }

    /// Datagrams received longer than the receive batch's buffers, and so truncated (the
    /// decoder then rejects them). Non-zero means the receive buffers are smaller than
    /// what peers send.
    pub fn truncated_received(&self) -> u64 {
        self.truncated_received
    }

    /// The last unexpected error a system call returned (not "would block"), for
    /// diagnosis: the datagrams it concerned are already counted as dropped.
    pub fn last_error(&self) -> Option<io::Error> {
        self.last_error.map(io::Error::from_raw_os_error)
    }

    /// The endpoint listening at `addr`, if known.
    fn endpoint_at(
        &self,
        storage: &libc::sockaddr_storage,
        len: libc::socklen_t,
    ) -> Option<EndpointId> {
        let addr = socket_addr_from_raw(storage, len)?;
        self.endpoints.get(&canonical(addr)).copied()
    }
}

impl UdpTransport {
    /// Points `recv_arrays` at the buffers of `batch`, one entry per buffer.
    fn prepare_recv_arrays(&mut self, batch: &mut RxBatch) {
        self.recv_arrays.reserve(batch.capacity());
        let MessageArrays {
            headers,
            iovecs,
            names,
        } = &mut self.recv_arrays;
        // Base pointers, as in `send_batch`.
        let iovecs_base = iovecs.as_mut_ptr();
        let names_base = names.as_mut_ptr();
        let mut slots = 0;
        for (index, (buffer, bytes)) in batch.buffer_pointers().enumerate() {
            iovecs[index] = libc::iovec {
                iov_base: buffer.cast::<c_void>(),
                iov_len: bytes,
            };
            let header = &mut headers[index].msg_hdr;
            header.msg_name = names_base.wrapping_add(index).cast::<c_void>();
            header.msg_namelen = SOCKADDR_STORAGE_BYTES;
            header.msg_iov = iovecs_base.wrapping_add(index);
            header.msg_iovlen = 1;
            header.msg_control = ptr::null_mut();
            header.msg_controllen = 0;
            header.msg_flags = 0;
            headers[index].msg_len = 0;
            slots += 1;
        }
        debug_assert_eq!(slots, batch.capacity());
        self.recv_prepared_for = batch.id();
    }
}

impl Transport for UdpTransport {
    fn local(&self) -> EndpointId {
        self.local
    }

    fn send_batch(&mut self, batch: &TxBatch) -> usize {
        if batch.is_empty() {
            return 0;
        }
        self.arrays.reserve(batch.len());
        let MessageArrays {
            headers, iovecs, ..
        } = &mut self.arrays;
        // Headers point at their I/O vector through this base pointer rather than through
        // a reference to one element, which the next element's write would invalidate.
        let iovecs_base = iovecs.as_mut_ptr();
        let mut filled = 0;
        let mut unroutable = 0;
        for (target, datagram) in batch.iter() {
            let Some(peer) = self.peers.get(&target) else {
                unroutable += 1;
                continue;
            };
            iovecs[filled] = libc::iovec {
                // The kernel only reads through this pointer on send.
                iov_base: datagram.as_ptr().cast_mut().cast::<c_void>(),
                iov_len: datagram.len(),
            };
            let header = &mut headers[filled].msg_hdr;
            // The kernel only reads the address on send; `peers` is not changed while the
            // call runs, so the pointer stays valid.
            header.msg_name = peer.sockaddr.as_ptr().cast_mut().cast::<c_void>();
            header.msg_namelen = peer.sockaddr.len();
            header.msg_iov = iovecs_base.wrapping_add(filled);
            header.msg_iovlen = 1;
            header.msg_control = ptr::null_mut();
            header.msg_controllen = 0;
            header.msg_flags = 0;
            headers[filled].msg_len = 0;
            filled += 1;
        }
        debug_assert_eq!(filled + unroutable, batch.len());

        // One call for the whole batch (FaSST's doorbell batching). The kernel may accept
        // fewer: then the call is repeated for the rest.
        let fd = self.socket.as_raw_fd();
        let mut next = 0;
        let mut accepted = 0;
        while next < filled {
            let count = libc::c_uint::try_from(filled - next).unwrap_or(libc::c_uint::MAX);
            self.stats.send_calls += 1;
            // SAFETY: `headers[next..filled]` are initialised message headers whose name,
            // I/O vector and data pointers point into `peers`, `iovecs` and `batch`, all of
            // which outlive the call and none of which is moved or changed during it;
            // `count` does not exceed the number of those headers.
            // Called directly, as `recvmmsg` in `recv_batch`.
            let sent = unsafe {
                libc::syscall(
                    libc::SYS_sendmmsg,
                    fd,
                    headers[next..].as_mut_ptr(),
                    count,
                    0 as libc::c_int,
                )
            };
            if sent > 0 {
                let sent = usize::try_from(sent).expect("positive count");
                assert!(
                    sent <= filled - next,
                    "kernel sent more datagrams than given"
                );
                next += sent;
                accepted += sent;
                continue;
            }
            let error = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            match error {
                libc::EINTR => continue,
                // The send buffer is full: the rest of the batch is dropped, like on a
                // congested link, and the RPC layer retransmits.
                libc::EAGAIN | libc::ENOBUFS => break,
                // Any other error concerns the first datagram only (no route to its
                // target, too large for the path, refused by a firewall): drop it alone
                // and send the rest.
                _ => {
                    self.last_error = Some(error);
                    next += 1;
                }
            }
        }
        self.stats.datagrams_sent += accepted as u64;
        self.stats.send_dropped += (batch.len() - accepted) as u64;
        accepted
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> usize {
        batch.clear();
        let slots = batch.capacity();
        if self.recv_prepared_for == batch.id() {
            // A worker polls with the same batch over and over, mostly finding nothing:
            // the arrays already point at its buffers, and the kernel changed only the
            // lengths, name lengths and flags of the entries it filled last time.
            for header in &mut self.recv_arrays.headers[..self.recv_touched] {
                header.msg_hdr.msg_namelen = SOCKADDR_STORAGE_BYTES;
                header.msg_hdr.msg_flags = 0;
                header.msg_len = 0;
            }
        } else {
            self.prepare_recv_arrays(batch);
        }
        self.recv_touched = 0;

        let fd = self.socket.as_raw_fd();
        let count = libc::c_uint::try_from(slots).unwrap_or(libc::c_uint::MAX);
        let received = loop {
            // SAFETY: `recv_arrays.headers[..slots]` are initialised message headers,
            // prepared for this very batch (same id): their I/O vectors point at its
            // `slots` buffers (each `iov_len` bytes of capacity, which never move while the
            // batch lives) and their names at `recv_arrays.names`; all outlive the call
            // and nothing else touches them during it. A null timeout is allowed.
            //
            // The system call is made directly: glibc's wrapper is a cancellation point
            // and brackets the call with cancellation bookkeeping, which costs a tenth of
            // an empty poll.
            let received = unsafe {
                libc::syscall(
                    libc::SYS_recvmmsg,
                    fd,
                    self.recv_arrays.headers.as_mut_ptr(),
                    count,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut::<libc::timespec>(),
                )
            };
            if received >= 0 {
                break usize::try_from(received).expect("non-negative count");
            }
            let error = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            match error {
                libc::EINTR => continue,
                libc::EAGAIN => return 0,
                _ => {
                    self.last_error = Some(error);
                    return 0;
                }
            }
        };
        assert!(
            received <= slots,
            "kernel received more datagrams than slots"
        );
        self.recv_touched = received;

        for index in 0..received {
            let header = &self.recv_arrays.headers[index];
            let bytes = header.msg_len as usize;
            assert!(
                bytes <= self.recv_arrays.iovecs[index].iov_len,
                "kernel overran a buffer"
            );
            if header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                // Kept truncated: the decoder rejects it and counts why.
                self.truncated_received += 1;
            }
            let source =
                self.endpoint_at(&self.recv_arrays.names[index], header.msg_hdr.msg_namelen);
            if source.is_none() {
                self.stats.unknown_sender += 1;
            }
            // SAFETY: the kernel wrote `bytes` bytes (at most the slot's `iov_len`,
            // asserted above) through the pointer from `buffer_pointers` at this index,
            // which is the batch's next buffer since the kernel fills entries in order and
            // the batch was cleared first.
            unsafe { batch.set_received(bytes, source) };
        }
        self.stats.datagrams_received += received as u64;
        received
    }

    fn wait(&mut self, timeout: Option<Duration>) {
        let bell = self.doorbell.fd().expect("an eventfd bell");
        let watched = self.doorbell.watched();
        let mut polls = [
            libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: bell,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: watched.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timespec = timeout.map(|timeout| libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9, so it fits a `c_long` of any width.
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        });
        let timespec_ptr = timespec.as_ref().map_or(ptr::null(), ptr::from_ref);
        // SAFETY: `polls` is an array of three valid pollfds (poll skips a negative
        // descriptor: nothing watched); `timespec_ptr` is null (no limit) or points at a
        // timespec that outlives the call; a null signal mask leaves it unchanged.
        let ready = unsafe {
            libc::ppoll(
                polls.as_mut_ptr(),
                polls.len() as libc::nfds_t,
                timespec_ptr,
                ptr::null(),
            )
        };
        if ready < 0 {
            let error = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // An interrupted wait is a spurious return, which callers allow.
            if error != libc::EINTR {
                self.last_error = Some(error);
            }
        } else {
            if polls[1].revents != 0 {
                self.doorbell.clear();
            }
            if polls[2].revents != 0 {
                self.doorbell.set_watched_ready();
            }
        }
    }

    fn doorbell(&self) -> Option<Arc<Doorbell>> {
        Some(self.doorbell.clone())
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}

/// Size of an address slot, for `msg_namelen`.
const SOCKADDR_STORAGE_BYTES: libc::socklen_t =
    size_of::<libc::sockaddr_storage>() as libc::socklen_t;

/// The arrays `sendmmsg` and `recvmmsg` read: headers, one I/O vector per header, and one
/// address slot per header for receiving. Their pointers are rewritten before every call
/// and mean nothing between calls.
struct MessageArrays {
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
}

// SAFETY: the raw pointers inside the arrays are only dereferenced (by the kernel) during a
// system call made by the thread that owns the transport, after being rewritten for that
// call; between calls they are dead values. Moving the arrays to another thread is
// therefore as safe as moving plain integers.
unsafe impl Send for MessageArrays {}

impl MessageArrays {
    fn new(len: usize) -> Self {
        let mut arrays = Self {
            headers: Vec::new(),
            iovecs: Vec::new(),
            names: Vec::new(),
        };
        arrays.reserve(len);
        arrays
    }

    /// Makes room for `len` datagrams. Allocates only when `len` passes every earlier size.
    fn reserve(&mut self, len: usize) {
        if self.headers.len() >= len {
            return;
        }
        // SAFETY: `mmsghdr` is a C struct of integers and raw pointers, for which all
        // zeroes (null pointers, zero lengths) is a valid value.
        self.headers
            .resize_with(len, || unsafe { std::mem::zeroed() });
        // SAFETY: `iovec` is a raw pointer and a length; all zeroes is valid.
        self.iovecs
            .resize_with(len, || unsafe { std::mem::zeroed() });
        // SAFETY: `sockaddr_storage` is plain integers and bytes; all zeroes is valid.
        self.names
            .resize_with(len, || unsafe { std::mem::zeroed() });
    }
}

/// One of the socket's two buffers.
#[derive(Clone, Copy)]
enum Buffer {
    Receive,
    Send,
}

/// Asks for a buffer of `bytes`, first past the system cap (`SO_*BUFFORCE`, which needs
/// `CAP_NET_ADMIN`), then within it, and returns the size the kernel reports.
fn set_buffer_size(socket: &Socket, buffer: Buffer, bytes: usize) -> Result<usize, TransportError> {
    let (force, force_name) = match buffer {
        Buffer::Receive => (libc::SO_RCVBUFFORCE, "SO_RCVBUFFORCE"),
        Buffer::Send => (libc::SO_SNDBUFFORCE, "SO_SNDBUFFORCE"),
    };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if setsockopt_int(socket, libc::SOL_SOCKET, force, value).is_err() {
        // Without the capability the kernel refuses the forced variant; the plain one is
        // silently capped at `net.core.rmem_max`/`wmem_max`.
        let plain = match buffer {
            Buffer::Receive => socket.set_recv_buffer_size(bytes),
            Buffer::Send => socket.set_send_buffer_size(bytes),
        };
        plain.map_err(option_error(force_name.trim_end_matches("FORCE")))?;
    }
    let granted = match buffer {
        Buffer::Receive => socket.recv_buffer_size(),
        Buffer::Send => socket.send_buffer_size(),
    };
    granted.map_err(option_error(force_name))
}

fn setsockopt_int(
    socket: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a valid `c_int` that outlives the call, and its size is
    // passed with it.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            ptr::from_ref(&value).cast::<c_void>(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn option_error(option: &'static str) -> impl FnOnce(io::Error) -> TransportError {
    move |source| TransportError::SocketOption { option, source }
}

/// The form under which an address is looked up: IPv4-mapped IPv6 addresses (what a
/// dual-stack socket reports for IPv4 senders) become IPv4, and the IPv6 flow label,
/// which varies per packet, is cleared.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => addr,
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, v6.scope_id())),
        },
    }
}

/// The address the kernel wrote into an address slot, if it is an IP address.
fn socket_addr_from_raw(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: `sockaddr_storage` is large and aligned enough for every socket
            // address type, and the family says the kernel wrote a `sockaddr_in` (of the
            // length checked above).
            let addr = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(addr.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a `sockaddr_in6`.
            let addr = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(addr.sin6_addr.s6_addr);
            let port = u16::from_be(addr.sin6_port);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                port,
                0,
                addr.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Instant;

    use super::*;

    const A: EndpointId = EndpointId::new(0, 0);
    const B: EndpointId = EndpointId::new(1, 0);
    const C: EndpointId = EndpointId::new(1, 1);
    /// Long enough that a loaded test machine still delivers loopback datagrams in time.
    const PATIENCE: Duration = Duration::from_secs(5);

    fn open(local: EndpointId, bind_addr: &str) -> UdpTransport {
        let config = UdpConfig {
            max_batch: 4,
            ..UdpConfig::default()
        };
        UdpTransport::bind(
            local,
            bind_addr.parse().unwrap(),
            &AddressBook::new(),
            config,
        )
        .unwrap()
    }

    /// Makes every transport know every other.
    fn introduce(transports: &mut [&mut UdpTransport]) {
        let book: Vec<(EndpointId, SocketAddr)> = transports
            .iter()
            .map(|t| (t.local(), t.local_addr()))
            .collect();
        for transport in transports.iter_mut() {
            for &(endpoint, addr) in &book {
                transport.insert_peer(endpoint, addr).unwrap();
            }
        }
    }

    /// Receives until `count` datagrams arrived, waiting in between.
    fn receive(transport: &mut UdpTransport, count: usize) -> Vec<(Option<EndpointId>, Vec<u8>)> {
        let mut batch = RxBatch::new(16, 2048);
        let mut all = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while all.len() < count && Instant::now() < deadline {
            transport.wait(Some(Duration::from_millis(100)));
            transport.recv_batch(&mut batch);
            all.extend((0..batch.len()).map(|i| {
                let (source, bytes) = batch.get(i);
                (source, bytes.to_vec())
            }));
        }
        all
    }

    #[test]
    fn one_call_sends_to_several_destinations() {
        let mut a = open(A, "127.0.0.1:0");
        let mut b = open(B, "127.0.0.1:0");
        let mut c = open(C, "127.0.0.1:0");
        introduce(&mut [&mut a, &mut b, &mut c]);

        let mut batch = TxBatch::new(8, 64);
        for i in 0..6u8 {
            assert!(batch.push(if i % 2 == 0 { B } else { C }, &[i; 10]));
        }
        assert_eq!(a.send_batch(&batch), 6);
        let stats = a.stats();
        assert_eq!(
            stats.send_calls, 1,
            "the whole batch leaves in one sendmmsg"
        );
        assert_eq!(stats.datagrams_sent, 6);
        assert_eq!(stats.send_dropped, 0);

        let at_b = receive(&mut b, 3);
        assert_eq!(
            at_b,
            vec![
                (Some(A), vec![0; 10]),
                (Some(A), vec![2; 10]),
                (Some(A), vec![4; 10])
            ]
        );
        let at_c = receive(&mut c, 3);
        assert_eq!(
            at_c,
            vec![
                (Some(A), vec![1; 10]),
                (Some(A), vec![3; 10]),
                (Some(A), vec![5; 10])
            ]
        );
        assert_eq!(b.stats().datagrams_received, 3);

        // And back, including to itself.
        batch.clear();
        assert!(batch.push(A, b"reply"));
        assert!(batch.push(B, b"self"));
        assert_eq!(b.send_batch(&batch), 2);
        assert_eq!(receive(&mut a, 1), vec![(Some(B), b"reply".to_vec())]);
        assert_eq!(receive(&mut b, 1), vec![(Some(B), b"self".to_vec())]);
    }

    #[test]
    fn batches_larger_than_the_arrays() {
        let mut a = open(A, "127.0.0.1:0");
        let mut b = open(B, "127.0.0.1:0");
        introduce(&mut [&mut a, &mut b]);
        let mut batch = TxBatch::new(40, 16);
        for i in 0..40u8 {
            assert!(batch.push(B, &[i]));
        }
        assert_eq!(a.send_batch(&batch), 40);
        let mut rx = RxBatch::new(40, 16);
        let mut got = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while got.len() < 40 && Instant::now() < deadline {
            b.wait(Some(Duration::from_millis(100)));
            b.recv_batch(&mut rx);
            got.extend((0..rx.len()).map(|i| rx.get(i).1[0]));
        }
        assert_eq!(got, (0..40).collect::<Vec<u8>>());
    }

    #[test]
    fn unknown_target_is_dropped_and_the_rest_sent() {
        let mut a = open(A, "127.0.0.1:0");
        let mut b = open(B, "127.0.0.1:0");
        introduce(&mut [&mut a, &mut b]);
        let mut batch = TxBatch::new(4, 16);
        assert!(batch.push(EndpointId::new(9, 9), b"lost"));
        assert!(batch.push(B, b"kept"));
        assert_eq!(a.send_batch(&batch), 1);
        assert_eq!(a.stats().send_dropped, 1);
        assert_eq!(receive(&mut b, 1), vec![(Some(A), b"kept".to_vec())]);

        assert_eq!(a.remove_peer(B), Some(b.local_addr()));
        assert_eq!(a.send_batch(&batch), 0);
        assert_eq!(a.stats().send_dropped, 3);
    }

    #[test]
    fn unknown_sender_is_counted() {
        let mut a = open(A, "127.0.0.1:0");
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(b"who am I", a.local_addr()).unwrap();
        assert_eq!(receive(&mut a, 1), vec![(None, b"who am I".to_vec())]);
        assert_eq!(a.stats().unknown_sender, 1);
    }

    #[test]
    fn long_datagrams_are_kept_truncated() {
        let mut a = open(A, "127.0.0.1:0");
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(&[7; 100], a.local_addr()).unwrap();
        let mut batch = RxBatch::new(2, 32);
        let deadline = Instant::now() + PATIENCE;
        while batch.is_empty() && Instant::now() < deadline {
            a.wait(Some(Duration::from_millis(100)));
            a.recv_batch(&mut batch);
        }
        assert_eq!(batch.get(0), (None, &[7; 32][..]));
        assert_eq!(a.truncated_received(), 1);
    }

    #[test]
    fn wait_times_out() {
        let mut a = open(A, "127.0.0.1:0");
        let start = Instant::now();
        a.wait(Some(Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(29));
        let mut batch = RxBatch::new(2, 32);
        assert_eq!(a.recv_batch(&mut batch), 0);
        assert!(a.last_error().is_none());
    }

    #[test]
    fn wait_returns_on_arrival() {
        let mut a = open(A, "127.0.0.1:0");
        let target = a.local_addr();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .send_to(b"wake", target)
                .unwrap();
        });
        let start = Instant::now();
        a.wait(Some(Duration::from_secs(30)));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "wait slept past the arrival"
        );
        sender.join().unwrap();
        let mut batch = RxBatch::new(2, 32);
        assert_eq!(a.recv_batch(&mut batch), 1);
    }

    #[test]
    fn transport_moves_to_another_thread() {
        let mut a = open(A, "127.0.0.1:0");
        let mut b = open(B, "127.0.0.1:0");
        introduce(&mut [&mut a, &mut b]);
        let receiver = std::thread::spawn(move || receive(&mut b, 1));
        let mut batch = TxBatch::new(1, 16);
        assert!(batch.push(B, b"moved"));
        assert_eq!(a.send_batch(&batch), 1);
        assert_eq!(receiver.join().unwrap(), vec![(Some(A), b"moved".to_vec())]);
    }

    #[test]
    fn buffer_sizes_are_recorded() {
        let a = open(A, "127.0.0.1:0");
        assert!(a.recv_buffer_bytes() > 0);
        assert!(a.send_buffer_bytes() > 0);
        eprintln!(
            "granted: receive {} send {}",
            a.recv_buffer_bytes(),
            a.send_buffer_bytes()
        );
    }

    /// Opens an IPv6 loopback transport, or `None` where the machine has no IPv6.
    fn open_ipv6(local: EndpointId, bind_addr: &str) -> Option<UdpTransport> {
        let config = UdpConfig {
            max_batch: 4,
            ..UdpConfig::default()
        };
        match UdpTransport::bind(
            local,
            bind_addr.parse().unwrap(),
            &AddressBook::new(),
            config,
        ) {
            Ok(transport) => Some(transport),
            Err(TransportError::Bind { .. } | TransportError::Socket(_)) => None,
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn ipv6_and_dual_stack() {
        let (Some(mut a), Some(mut b)) = (open_ipv6(A, "[::1]:0"), open_ipv6(B, "[::]:0")) else {
            eprintln!("no IPv6 on this machine; skipped");
            return;
        };
        let mut c = open(C, "127.0.0.1:0");
        introduce(&mut [&mut a, &mut b]);
        b.insert_peer(C, c.local_addr()).unwrap();
        c.insert_peer(
            B,
            SocketAddr::from((Ipv4Addr::LOCALHOST, b.local_addr().port())),
        )
        .unwrap();

        let mut batch = TxBatch::new(4, 16);
        assert!(batch.push(B, b"six"));
        assert_eq!(a.send_batch(&batch), 1);
        assert_eq!(receive(&mut b, 1), vec![(Some(A), b"six".to_vec())]);

        // B's dual-stack socket reaches the IPv4-only C, and knows it when it answers.
        batch.clear();
        assert!(batch.push(C, b"to four"));
        assert_eq!(b.send_batch(&batch), 1);
        assert_eq!(receive(&mut c, 1), vec![(Some(B), b"to four".to_vec())]);
        batch.clear();
        assert!(batch.push(B, b"from four"));
        assert_eq!(c.send_batch(&batch), 1);
        assert_eq!(receive(&mut b, 1), vec![(Some(C), b"from four".to_vec())]);
        assert_eq!(b.stats().unknown_sender, 0);
    }

    #[test]
    fn bad_address_books_are_rejected() {
        let mut book = AddressBook::new();
        book.insert(B, "[::1]:4000".parse().unwrap());
        let error = UdpTransport::bind(
            A,
            "127.0.0.1:0".parse().unwrap(),
            &book,
            UdpConfig::default(),
        );
        assert!(matches!(
            error,
            Err(TransportError::AddressFamily { endpoint: B, .. })
        ));

        let mut book = AddressBook::new();
        book.insert(B, "127.0.0.1:4000".parse().unwrap());
        book.insert(C, "127.0.0.1:4000".parse().unwrap());
        let error = UdpTransport::bind(
            A,
            "127.0.0.1:0".parse().unwrap(),
            &book,
            UdpConfig::default(),
        );
        assert!(matches!(
            error,
            Err(TransportError::DuplicateAddress {
                first: B,
                second: C,
                ..
            })
        ));
    }

    #[test]
    fn canonical_addresses() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:7".parse().unwrap();
        assert_eq!(canonical(mapped), "10.0.0.1:7".parse().unwrap());
        let flow = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 7, 1234, 0));
        assert_eq!(canonical(flow), "[::1]:7".parse().unwrap());
    }
}
