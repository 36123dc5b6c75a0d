//! Writing datagrams: a header, then messages appended until the datagram is full.
//!
//! The functions work on a plain `Vec<u8>` whose capacity is the datagram limit, keeping
//! the message count in the header itself, so a caller can append to a datagram across
//! several calls without holding a borrow. Nothing here grows the vector past its
//! capacity, so writing never allocates.

use zerocopy::IntoBytes;
use zerocopy::little_endian::{U16, U32, U64};

use crate::header::{
    EndpointId, FORMAT_VERSION, MAGIC, MessageHeader, MessageKind, PACKET_HEADER_BYTES,
    PacketHeader, Status, ViewId,
};

/// Bytes a message adds to a datagram besides its payload.
pub const MESSAGE_OVERHEAD_BYTES: usize = size_of::<MessageHeader>();

/// Byte range of `PacketHeader::message_count`.
const COUNT_RANGE: std::ops::Range<usize> = 4..6;

/// Where a fragment sits in its message.
#[derive(Clone, Copy, Debug)]
pub struct FragmentInfo {
    /// Length of the whole message.
    pub message_len: u32,
    /// Byte offset of the fragment.
    pub offset: u32,
    /// Packet index of the fragment.
    pub packet_index: u16,
    /// Number of packets of the message.
    pub packet_count: u16,
}

impl FragmentInfo {
    /// A message sent whole in one packet.
    pub fn whole(message_len: u32) -> Self {
        Self {
            message_len,
            offset: 0,
            packet_index: 0,
            packet_count: 1,
        }
    }
}

/// The fields of one message besides its fragment position and payload.
#[derive(Clone, Copy, Debug)]
pub struct MessageFields {
    /// Request or response.
    pub kind: MessageKind,
    /// Request type.
    pub request_type: u8,
    /// Response status (`Status::Ok` for requests).
    pub status: Status,
    /// Client session slot.
    pub slot: u8,
    /// Request number within the session.
    pub request_number: u64,
}

/// Clears `buf` and writes a packet header with no message into it.
pub fn start_datagram(
    buf: &mut Vec<u8>,
    source: EndpointId,
    target: EndpointId,
    view: ViewId,
    incarnation: u64,
    target_incarnation: u64,
) {
    assert!(buf.capacity() >= PACKET_HEADER_BYTES + MESSAGE_OVERHEAD_BYTES);
    buf.clear();
    let header = PacketHeader {
        magic: U16::new(MAGIC),
        version: FORMAT_VERSION,
        flags: 0,
        message_count: U16::new(0),
        reserved: U16::new(0),
        source: U32::new(source.0),
        target: U32::new(target.0),
        view: U64::new(view.0),
        incarnation: U64::new(incarnation),
        target_incarnation: U64::new(target_incarnation),
    };
    buf.extend_from_slice(header.as_bytes());
}

/// Number of messages in a datagram begun with [`start_datagram`].
pub fn message_count(buf: &[u8]) -> u16 {
    u16::from_le_bytes([buf[COUNT_RANGE.start], buf[COUNT_RANGE.start + 1]])
}

/// Bytes of payload one more message could carry in `buf`.
pub fn message_room(buf: &Vec<u8>) -> usize {
    (buf.capacity() - buf.len()).saturating_sub(MESSAGE_OVERHEAD_BYTES)
}

/// Appends a message to a datagram begun with [`start_datagram`]; returns false, writing
/// nothing, if it does not fit within the buffer's capacity.
pub fn push_message(
    buf: &mut Vec<u8>,
    fields: MessageFields,
    fragment: FragmentInfo,
    payload: &[u8],
) -> bool {
    let count = message_count(buf);
    if payload.len() > message_room(buf) || count == u16::MAX {
        return false;
    }
    debug_assert!(fields.kind == MessageKind::Response || fields.status == Status::Ok);
    debug_assert!(fragment.offset as usize + payload.len() <= fragment.message_len as usize);
    debug_assert!(fragment.packet_index < fragment.packet_count);
    let header = MessageHeader {
        kind: fields.kind as u8,
        request_type: fields.request_type,
        status: fields.status as u8,
        slot: fields.slot,
        request_number: U64::new(fields.request_number),
        message_len: U32::new(fragment.message_len),
        offset: U32::new(fragment.offset),
        fragment_len: U32::new(payload.len() as u32),
        packet_index: U16::new(fragment.packet_index),
        packet_count: U16::new(fragment.packet_count),
    };
    buf.extend_from_slice(header.as_bytes());
    buf.extend_from_slice(payload);
    buf[COUNT_RANGE].copy_from_slice(&(count + 1).to_le_bytes());
    true
}
