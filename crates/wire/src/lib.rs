//! Packet and message formats of ferrotx.
//!
//! A datagram is one [`PacketHeader`] followed by `message_count` messages, each a
//! [`MessageHeader`] and its fragment bytes. Everything is little-endian with explicit
//! sizes and no padding, read in place with `zerocopy` (no copy, no allocation).
//!
//! The decoder is total: [`decode`] either returns a [`Datagram`] whose every message was
//! checked, or a [`DecodeError`] naming why the bytes were rejected. It never panics, and a
//! datagram is accepted or rejected whole, so a caller never acts on half of a forged one.

pub mod auth;
pub mod batch;
mod decode;
mod encode;
mod header;
mod request_type;

pub use decode::{Datagram, DecodeError, Message, Messages, decode};
pub use encode::{
    FragmentInfo, MESSAGE_OVERHEAD_BYTES, MessageFields, message_count, message_room, push_message,
    start_datagram,
};
pub use header::{
    EndpointId, FORMAT_VERSION, MAGIC, MAX_MESSAGE_BYTES, MAX_PACKETS_PER_MESSAGE, MessageHeader,
    MessageKind, PACKET_HEADER_BYTES, PacketHeader, Status, ViewId,
};
pub use request_type::{RequestType, UnknownRequestType};
