//! Fixed-layout headers.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// First two bytes of every ferrotx datagram ("FX" read as a little-endian u16).
pub const MAGIC: u16 = u16::from_le_bytes(*b"FX");

/// Version of this format. A datagram of another version is dropped and counted.
pub const FORMAT_VERSION: u8 = 1;

/// Largest message (request or response payload) the RPC layer carries. The store keeps
/// values of up to 1 MiB, and a message carries a value plus its key and headers, so the
/// limit leaves 64 KiB of room above the largest value.
pub const MAX_MESSAGE_BYTES: u32 = (1 << 20) + (64 << 10);

/// Most packets one message may be split into. With the smallest datagram the RPC layer
/// accepts (1,024 bytes of room, see `rpc::Config`), a message of `MAX_MESSAGE_BYTES`
/// needs about 1,100 packets; 2,048 covers it and bounds the reassembly bitmap.
pub const MAX_PACKETS_PER_MESSAGE: u16 = 2048;

/// Size of [`PacketHeader`] on the wire.
pub const PACKET_HEADER_BYTES: usize = size_of::<PacketHeader>();

/// An RPC endpoint: one worker thread of one node, the analogue of a datagram queue pair
/// in FaSST. The high 16 bits name the node, the low 16 bits the thread.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EndpointId(pub u32);

impl EndpointId {
    /// The endpoint of thread `thread` on node `node`.
    pub const fn new(node: u16, thread: u16) -> Self {
        Self(((node as u32) << 16) | thread as u32)
    }

    /// The node this endpoint belongs to.
    pub const fn node(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// The thread of its node this endpoint belongs to.
    pub const fn thread(self) -> u16 {
        self.0 as u16
    }
}

impl std::fmt::Debug for EndpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.node(), self.thread())
    }
}

impl std::fmt::Display for EndpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The id of a view: the cluster's membership and partition map at one time, which
/// reconfiguration replaces by the next id (FaRM's configuration id, section 5.2; not the
/// static `Configuration` file). Every datagram carries its sender's, and a node drops
/// datagrams of another view (precise membership). On the wire, a little-endian u64.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug)]
pub struct ViewId(pub u64);

impl ViewId {
    /// The id that precedes every view: a node that has joined none.
    pub const NONE: ViewId = ViewId(0);

    /// The id as a number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The id of the view that replaces this one.
    pub const fn next(self) -> ViewId {
        ViewId(self.0 + 1)
    }
}

impl std::fmt::Display for ViewId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl From<u64> for ViewId {
    fn from(id: u64) -> Self {
        Self(id)
    }
}

/// The fixed header at the start of every datagram (40 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct PacketHeader {
    /// [`MAGIC`].
    pub magic: U16,
    /// [`FORMAT_VERSION`].
    pub version: u8,
    /// Reserved, zero.
    pub flags: u8,
    /// Number of messages that follow; at least one.
    pub message_count: U16,
    /// Reserved, zero.
    pub reserved: U16,
    /// Endpoint that sent the datagram.
    pub source: U32,
    /// Endpoint the datagram is for.
    pub target: U32,
    /// [`ViewId`] of the sender (FaRM's precise membership): a node drops datagrams of
    /// another view.
    pub view: U64,
    /// Incarnation of the sending endpoint: grows each time its process starts, so that a
    /// receiver can tell a restarted peer (reset its sessions) from a late packet of the
    /// peer's previous life (drop it).
    pub incarnation: U64,
    /// Incarnation of the target as the sender knows it (0 before it has heard from the
    /// target). A response carries the incarnation of the client that asked, so a late
    /// response to a client's previous life is not taken for an answer by its new life,
    /// which reuses slots and request numbers.
    pub target_incarnation: U64,
}

/// Whether a message is a request or a response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum MessageKind {
    /// A request from a client session slot.
    Request = 1,
    /// The response to the request with the same slot and request number.
    Response = 2,
}

/// Outcome carried by a response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Status {
    /// The handler ran; the payload is its response.
    Ok = 0,
    /// No handler is registered for the request type.
    UnknownRequestType = 1,
    /// The handler rejected the request; the payload is its error text.
    HandlerError = 2,
    /// The request was addressed to an earlier incarnation of the target, which has
    /// restarted since: it was not run by this one (it may have run in the earlier one).
    TargetRestarted = 3,
    /// The target's slot holds a later request of the session than this one: a late
    /// duplicate whose client has moved on, or a request overtaken by a forged or broken
    /// one (it may have run before). The payload is the slot's request number (8 bytes,
    /// little-endian), past which the client numbers its next requests.
    Overtaken = 4,
}

impl Status {
    /// The status with this wire value, if any.
    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::Ok),
            1 => Some(Self::UnknownRequestType),
            2 => Some(Self::HandlerError),
            3 => Some(Self::TargetRestarted),
            4 => Some(Self::Overtaken),
            _ => None,
        }
    }
}

/// The header of one message (or of one packet of a message split across datagrams);
/// 28 bytes, followed by `fragment_len` bytes of payload.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct MessageHeader {
    /// [`MessageKind`] as a byte.
    pub kind: u8,
    /// Request type, chosen by the layer above; the key of the handler table.
    pub request_type: u8,
    /// [`Status`] of a response; zero in a request.
    pub status: u8,
    /// Session slot of the client that owns the request (one of its credits).
    pub slot: u8,
    /// Request number within the session; grows by one for every new request, so a
    /// server can tell a retransmission from a new request on the same slot.
    pub request_number: U64,
    /// Length of the whole message, all packets together.
    pub message_len: U32,
    /// Byte offset of this fragment within the message.
    pub offset: U32,
    /// Bytes of this fragment that follow the header.
    pub fragment_len: U32,
    /// Index of this packet within the message, for deduplicating reassembly.
    pub packet_index: U16,
    /// Number of packets the message was split into.
    pub packet_count: U16,
}

impl MessageHeader {
    /// The message kind; valid on any header the decoder returned.
    pub fn message_kind(&self) -> MessageKind {
        if self.kind == MessageKind::Request as u8 {
            MessageKind::Request
        } else {
            MessageKind::Response
        }
    }
}

const _: () = assert!(size_of::<PacketHeader>() == 40);
const _: () = assert!(size_of::<MessageHeader>() == 28);
