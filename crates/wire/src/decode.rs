//! The total decoder: any byte string decodes or is rejected with a reason.

use zerocopy::FromBytes;

use crate::header::{
    EndpointId, FORMAT_VERSION, MAGIC, MAX_MESSAGE_BYTES, MAX_PACKETS_PER_MESSAGE, MessageHeader,
    MessageKind, PACKET_HEADER_BYTES, PacketHeader, Status, ViewId,
};

/// Why a datagram was rejected. Each variant is counted separately by the receiver.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[repr(u8)]
pub enum DecodeError {
    /// Shorter than a packet header.
    #[error("datagram shorter than the packet header")]
    Short,
    /// The first two bytes are not ferrotx's magic: not ours, or corrupted.
    #[error("bad magic")]
    BadMagic,
    /// A format version this build does not speak.
    #[error("unsupported format version")]
    BadVersion,
    /// Reserved header fields are not zero.
    #[error("reserved header fields are not zero")]
    BadReserved,
    /// The header announces no messages.
    #[error("datagram holds no message")]
    Empty,
    /// A message header or payload runs past the end of the datagram.
    #[error("message runs past the end of the datagram")]
    Truncated,
    /// Bytes are left after the announced messages.
    #[error("bytes left after the last message")]
    TrailingBytes,
    /// A message kind other than request or response.
    #[error("unknown message kind")]
    BadKind,
    /// An unknown response status, or a status set on a request.
    #[error("bad status")]
    BadStatus,
    /// A message longer than `MAX_MESSAGE_BYTES`.
    #[error("message longer than the limit")]
    TooLarge,
    /// Packet index, count, offset and lengths do not describe a fragment of the message.
    #[error("inconsistent fragment fields")]
    BadFragment,
}

impl DecodeError {
    /// Number of variants, for counter arrays indexed by [`DecodeError::index`].
    pub const COUNT: usize = 11;

    /// Every variant, in index order.
    pub const ALL: [DecodeError; Self::COUNT] = [
        Self::Short,
        Self::BadMagic,
        Self::BadVersion,
        Self::BadReserved,
        Self::Empty,
        Self::Truncated,
        Self::TrailingBytes,
        Self::BadKind,
        Self::BadStatus,
        Self::TooLarge,
        Self::BadFragment,
    ];

    /// Position of this variant in [`DecodeError::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short stable name, for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::BadMagic => "bad_magic",
            Self::BadVersion => "bad_version",
            Self::BadReserved => "bad_reserved",
            Self::Empty => "empty",
            Self::Truncated => "truncated",
            Self::TrailingBytes => "trailing_bytes",
            Self::BadKind => "bad_kind",
            Self::BadStatus => "bad_status",
            Self::TooLarge => "too_large",
            Self::BadFragment => "bad_fragment",
        }
    }
}

/// A datagram whose header and every message passed validation.
#[derive(Clone, Copy)]
pub struct Datagram<'a> {
    header: &'a PacketHeader,
    messages: &'a [u8],
}

impl<'a> Datagram<'a> {
    /// Sending endpoint.
    pub fn source(&self) -> EndpointId {
        EndpointId(self.header.source.get())
    }

    /// Endpoint the datagram is addressed to.
    pub fn target(&self) -> EndpointId {
        EndpointId(self.header.target.get())
    }

    /// The sender's view.
    pub fn view(&self) -> ViewId {
        ViewId(self.header.view.get())
    }

    /// Incarnation of the sending endpoint.
    pub fn incarnation(&self) -> u64 {
        self.header.incarnation.get()
    }

    /// Incarnation of the target as the sender knows it; 0 if unknown.
    pub fn target_incarnation(&self) -> u64 {
        self.header.target_incarnation.get()
    }

    /// Number of messages.
    pub fn message_count(&self) -> usize {
        usize::from(self.header.message_count.get())
    }

    /// The messages, in order.
    pub fn messages(&self) -> Messages<'a> {
        Messages {
            rest: self.messages,
        }
    }
}

/// One validated message: its header and the fragment bytes it carries.
#[derive(Clone, Copy)]
pub struct Message<'a> {
    /// The header.
    pub header: &'a MessageHeader,
    /// The fragment bytes (the whole payload when `packet_count == 1`).
    pub fragment: &'a [u8],
}

impl Message<'_> {
    /// Request or response.
    pub fn kind(&self) -> MessageKind {
        self.header.message_kind()
    }

    /// The response status; `Status::Ok` for requests.
    pub fn status(&self) -> Status {
        Status::from_u8(self.header.status).unwrap_or(Status::Ok)
    }
}

/// Iterator over the messages of a validated datagram.
#[derive(Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        // Validation already walked these bytes, so this cannot fail; it is written without
        // panicking paths anyway.
        let (header, rest) = MessageHeader::ref_from_prefix(self.rest).ok()?;
        let len = header.fragment_len.get() as usize;
        let fragment = rest.get(..len)?;
        self.rest = &rest[len..];
        Some(Message { header, fragment })
    }
}

/// Checks a whole datagram and returns a view of it, or the first reason it is invalid.
pub fn decode(bytes: &[u8]) -> Result<Datagram<'_>, DecodeError> {
    let (header, messages) =
        PacketHeader::ref_from_prefix(bytes).map_err(|_| DecodeError::Short)?;
    debug_assert_eq!(bytes.len() - messages.len(), PACKET_HEADER_BYTES);
    if header.magic.get() != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if header.version != FORMAT_VERSION {
        return Err(DecodeError::BadVersion);
    }
    if header.flags != 0 || header.reserved.get() != 0 {
        return Err(DecodeError::BadReserved);
    }
    let count = header.message_count.get();
    if count == 0 {
        return Err(DecodeError::Empty);
    }
    let mut rest = messages;
    for _ in 0..count {
        let (message, after) =
            MessageHeader::ref_from_prefix(rest).map_err(|_| DecodeError::Truncated)?;
        check_message(message)?;
        let len = message.fragment_len.get() as usize;
        rest = after.get(len..).ok_or(DecodeError::Truncated)?;
    }
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(Datagram { header, messages })
}

fn check_message(message: &MessageHeader) -> Result<(), DecodeError> {
    let status_valid = match message.kind {
        k if k == MessageKind::Request as u8 => message.status == Status::Ok as u8,
        k if k == MessageKind::Response as u8 => Status::from_u8(message.status).is_some(),
        _ => return Err(DecodeError::BadKind),
    };
    if !status_valid {
        return Err(DecodeError::BadStatus);
    }
    let message_len = message.message_len.get();
    if message_len > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge);
    }
    let count = message.packet_count.get();
    let index = message.packet_index.get();
    let offset = u64::from(message.offset.get());
    let fragment_len = u64::from(message.fragment_len.get());
    let fragment_valid = (1..=MAX_PACKETS_PER_MESSAGE).contains(&count)
        && index < count
        && offset + fragment_len <= u64::from(message_len)
        && (count > 1 || (offset == 0 && fragment_len == u64::from(message_len)))
        && (count == 1 || fragment_len > 0);
    if !fragment_valid {
        return Err(DecodeError::BadFragment);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{FragmentInfo, MessageFields, push_message, start_datagram};
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        let mut buf = Vec::with_capacity(512);
        start_datagram(&mut buf, EndpointId(7), EndpointId(9), ViewId(3), 11, 13);
        let request = MessageFields {
            kind: MessageKind::Request,
            request_type: 4,
            status: Status::Ok,
            slot: 2,
            request_number: 100,
        };
        assert!(push_message(
            &mut buf,
            request,
            FragmentInfo::whole(5),
            b"hello"
        ));
        let response = MessageFields {
            kind: MessageKind::Response,
            slot: 1,
            request_number: 99,
            ..request
        };
        assert!(push_message(
            &mut buf,
            response,
            FragmentInfo::whole(0),
            b""
        ));
        buf
    }

    #[test]
    fn round_trip() {
        let buf = sample();
        let d = decode(&buf).unwrap();
        assert_eq!(d.source(), EndpointId(7));
        assert_eq!(d.target(), EndpointId(9));
        assert_eq!(d.view(), ViewId(3));
        assert_eq!(d.incarnation(), 11);
        assert_eq!(d.target_incarnation(), 13);
        let m: Vec<_> = d.messages().collect();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].kind(), MessageKind::Request);
        assert_eq!(m[0].fragment, b"hello");
        assert_eq!(m[0].header.request_number.get(), 100);
        assert_eq!(m[1].kind(), MessageKind::Response);
        assert_eq!(m[1].header.slot, 1);
    }

    #[test]
    fn a_view_id_is_a_little_endian_u64_at_bytes_16_to_24() {
        let mut buf = Vec::with_capacity(512);
        let view = ViewId(0x0102_0304_0506_0708);
        start_datagram(&mut buf, EndpointId(7), EndpointId(9), view, 11, 13);
        assert_eq!(buf[16..24], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(view.to_string(), "72623859790382856");
        assert_eq!(view.next(), ViewId(0x0102_0304_0506_0709));
    }

    #[test]
    fn every_truncation_is_rejected() {
        let buf = sample();
        for len in 0..buf.len() {
            assert!(
                decode(&buf[..len]).is_err(),
                "prefix of {len} bytes accepted"
            );
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert_eq!(decode(&longer).err(), Some(DecodeError::TrailingBytes));
    }

    #[test]
    fn reasons() {
        let buf = sample();
        let mut b = buf.clone();
        b[0] ^= 1;
        assert_eq!(decode(&b).err(), Some(DecodeError::BadMagic));
        let mut b = buf.clone();
        b[2] = 9;
        assert_eq!(decode(&b).err(), Some(DecodeError::BadVersion));
        let mut b = buf.clone();
        b[4] = 0;
        assert_eq!(decode(&b).err(), Some(DecodeError::Empty));
        let mut b = buf.clone();
        b[4] = 1;
        assert_eq!(decode(&b).err(), Some(DecodeError::TrailingBytes));
        let mut b = buf.clone();
        b[4] = 3;
        assert_eq!(decode(&b).err(), Some(DecodeError::Truncated));
        let mut b = buf.clone();
        b[PACKET_HEADER_BYTES] = 3;
        assert_eq!(decode(&b).err(), Some(DecodeError::BadKind));
        let mut b = buf.clone();
        b[PACKET_HEADER_BYTES + 2] = 1; // status on a request
        assert_eq!(decode(&b).err(), Some(DecodeError::BadStatus));
        assert_eq!(decode(&buf[..10]).err(), Some(DecodeError::Short));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes).map(|d| d.messages().count());
        }

        #[test]
        fn mutated_valid_datagrams_never_panic(pos in 0usize..75, byte in any::<u8>()) {
            let mut buf = sample();
            let pos = pos % buf.len();
            buf[pos] = byte;
            if let Ok(d) = decode(&buf) {
                // Whatever was accepted must iterate exactly the announced messages.
                prop_assert_eq!(d.messages().count(), d.message_count());
            }
        }
    }
}
