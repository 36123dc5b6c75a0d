//! The incremental request parser: RESP multibulk requests and inline commands.
//!
//! [`RequestParser::parse`] reads the request at the start of the connection's input
//! buffer. It returns [`Parsed::Incomplete`] until the whole request is there, then
//! [`Parsed::Command`] with the arguments (ranges into the buffer for multibulk, so
//! nothing is copied) and how many bytes to drop from the front of the buffer. Between
//! calls the parser remembers how far it got, so a large request arriving in pieces is
//! scanned once, not again from the start at every read: the caller must call it again
//! with the same bytes at the front of the buffer (more may be appended) until it returns
//! something other than `Incomplete`, and must drop exactly `consumed` bytes after
//! [`Parsed::Command`] or [`Parsed::Empty`]. A pipeline is parsed one request per call.
//!
//! Errors carry Redis 7's exact messages (`networking.c`, `processMultibulkBuffer` and
//! `processInlineBuffer`); the node replies [`ProtocolError::reply`] and closes the
//! connection, as Redis does. The parser copies Redis's leniencies too, so that it
//! accepts exactly what Redis accepts: the two bytes after a bulk string are skipped
//! without being checked, as is the byte after the CR that ends a `*` or `$` line, and a
//! header or inline line is searched for as a C string, so a NUL byte before its end
//! hides the end (the request then waits for more data until it is too big).

mod inline;

use std::ops::{Index, Range};

use crate::number::parse_i64;
use crate::reply::Reply;

/// Default limit on one request's bytes: 512 MiB, Redis's default `proto-max-bulk-len`
/// (the node configures far less: a ferrotx value is at most 1 MiB).
pub const REQUEST_BYTES_MAX_DEFAULT: usize = 512 * 1024 * 1024;

/// Default limit on one request's arguments: 1,048,576, the limit Redis enforced before
/// 7.0 (7.0 allows up to 2^31 - 1, but nothing ferrotx runs needs more, and each
/// argument costs a range here).
pub const ARGS_MAX_DEFAULT: usize = 1024 * 1024;

/// Longest inline request, and longest `*<count>` or `$<length>` line, while its end is
/// not in the buffer: Redis's `PROTO_INLINE_MAX_SIZE` (64 KiB).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;

/// Most arguments a client that must still authenticate may send in one request
/// (Redis 7: more is "unauthenticated multibulk length"), so that a client without the
/// password cannot make the server buffer much.
pub const UNAUTHENTICATED_ARGS_MAX: i64 = 10;

/// Longest argument a client that must still authenticate may send (Redis 7: longer is
/// "unauthenticated bulk length").
pub const UNAUTHENTICATED_BULK_BYTES_MAX: i64 = 16 * 1024;

/// Largest argument count Redis 7 accepts (`INT_MAX`); above it the count is invalid.
const MULTIBULK_COUNT_MAX: i64 = i32::MAX as i64;

/// What the parser accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParserLimits {
    /// Most bytes of one request's arguments added up (a bulk string longer than this
    /// is "invalid bulk length", as with Redis's `proto-max-bulk-len`; a request of many
    /// arguments totalling more is [`ProtocolError::RequestTooBig`]).
    pub request_bytes_max: usize,
    /// Most arguments of one request (more is "invalid multibulk length").
    pub args_max: usize,
}

impl Default for ParserLimits {
    fn default() -> Self {
        Self {
            request_bytes_max: REQUEST_BYTES_MAX_DEFAULT,
            args_max: ARGS_MAX_DEFAULT,
        }
    }
}

/// A request the client must not send: the connection is answered
/// [`ProtocolError::reply`] and closed. Each message is Redis 7's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// An inline request longer than [`INLINE_BYTES_MAX`] without its line end.
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
    /// An inline request with an unterminated quote, or a closing quote followed by
    /// something other than white space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A `*<count>` line longer than [`INLINE_BYTES_MAX`] without its end.
    #[error("Protocol error: too big mbulk count string")]
    MultibulkCountTooBig,
    /// A `*<count>` that is not an integer, is above 2^31 - 1 or above the configured
    /// most arguments.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// More than [`UNAUTHENTICATED_ARGS_MAX`] arguments before authentication.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A `$<length>` line longer than [`INLINE_BYTES_MAX`] without its end.
    #[error("Protocol error: too big bulk count string")]
    BulkCountTooBig,
    /// An argument that does not start with `$` (the byte found is kept).
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    /// A `$<length>` that is not an integer, is negative or is above the request limit.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An argument longer than [`UNAUTHENTICATED_BULK_BYTES_MAX`] before
    /// authentication.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// A request whose arguments add up to more than the configured request limit
    /// (Redis has no such error: it closes a client whose query buffer passes 1 GiB
    /// without a reply). Send smaller requests.
    #[error("Protocol error: request too big (over {request_bytes_max} bytes)")]
    RequestTooBig {
        /// The configured limit.
        request_bytes_max: usize,
    },
}

impl ProtocolError {
    /// The error reply to send before closing the connection: `-ERR <message>`, byte
    /// for byte as Redis sends it.
    pub fn reply(&self) -> Reply {
        if let Self::ExpectedDollar(byte) = *self {
            // Redis formats the byte with printf's %c into a C string: a NUL ends the
            // message there, and CR or LF become spaces like any CR or LF in an error.
            let mut message = b"ERR Protocol error: expected '$', got '".to_vec();
            if byte != 0 {
                message.push(byte);
                message.push(b'\'');
            }
            return Reply::error(message);
        }
        Reply::error(format!("ERR {self}"))
    }
}

/// A request's arguments: byte ranges into a buffer (the parser's input for multibulk
/// requests, its own copy for inline ones). Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    bytes: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    /// Arguments at `ranges` of `bytes`. Panics if a range is outside `bytes`.
    pub fn new(bytes: &'a [u8], ranges: &'a [Range<usize>]) -> Self {
        assert!(
            ranges
                .iter()
                .all(|range| range.start <= range.end && range.end <= bytes.len()),
            "argument range outside its buffer"
        );
        Self { bytes, ranges }
    }

    /// The number of arguments, the command's name included.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True if there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Argument `index` (0 is the command's name), if there is one.
    pub fn get(&self, index: usize) -> Option<&'a [u8]> {
        self.ranges
            .get(index)
            .map(|range| &self.bytes[range.clone()])
    }

    /// The arguments in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + Clone + 'a {
        let bytes = self.bytes;
        self.ranges.iter().map(move |range| &bytes[range.clone()])
    }

    /// The arguments from `start` on, as owned byte strings.
    pub fn to_vecs_from(&self, start: usize) -> Vec<Vec<u8>> {
        self.iter().skip(start).map(<[u8]>::to_vec).collect()
    }
}

impl Index<usize> for Args<'_> {
    type Output = [u8];

    fn index(&self, index: usize) -> &[u8] {
        &self.bytes[self.ranges[index].clone()]
    }
}

/// Arguments that own their bytes: for requests made by code (tests, the simulator)
/// rather than read from a client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArgsBuf {
    bytes: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl ArgsBuf {
    /// Arguments holding copies of `args`.
    pub fn new<I>(args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut buf = Self::default();
        for arg in args {
            let start = buf.bytes.len();
            buf.bytes.extend_from_slice(arg.as_ref());
            buf.ranges.push(start..buf.bytes.len());
        }
        buf
    }

    /// The arguments, borrowed.
    pub fn args(&self) -> Args<'_> {
        Args::new(&self.bytes, &self.ranges)
    }
}

/// What [`RequestParser::parse`] found at the front of the buffer.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// The request is not complete: read more and call again with the same bytes at
    /// the front of the buffer.
    Incomplete,
    /// A request with no arguments (an empty inline line, `*0` or `*-1`), which Redis
    /// ignores: drop `consumed` bytes and call again.
    Empty {
        /// Bytes to drop from the front of the buffer.
        consumed: usize,
    },
    /// A whole request: handle `args`, then drop `consumed` bytes and call again.
    Command {
        /// The request's arguments (at least one).
        args: Args<'a>,
        /// Bytes to drop from the front of the buffer.
        consumed: usize,
    },
}

/// Where the parser is within the request at the front of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing of the request read yet.
    Start,
    /// An inline request whose line end has not been found in the first `searched`
    /// bytes (`hidden` once a NUL byte came first: Redis's `strchr` cannot see past it).
    Inline { searched: usize, hidden: bool },
    /// A multibulk request with `remaining` arguments to read from `cursor`; `bulk` is
    /// the length of the next argument once its `$<length>` line has been read, and
    /// `payload` the bytes of the arguments announced so far.
    Multibulk {
        remaining: usize,
        cursor: usize,
        bulk: Option<usize>,
        payload: usize,
    },
}

/// The incremental request parser of one connection (see the [module docs](self) for
/// the calling protocol).
#[derive(Debug)]
pub struct RequestParser {
    limits: ParserLimits,
    state: State,
    /// The current request's arguments found so far.
    ranges: Vec<Range<usize>>,
    /// The bytes of an inline request's arguments (quotes and escapes change them, so
    /// they cannot be ranges of the input).
    inline_bytes: Vec<u8>,
}

impl Default for RequestParser {
    fn default() -> Self {
        Self::new(ParserLimits::default())
    }
}

impl RequestParser {
    /// A parser enforcing `limits`.
    pub fn new(limits: ParserLimits) -> Self {
        assert!(limits.args_max > 0, "a request has at least one argument");
        assert!(
            limits.request_bytes_max > 0,
            "a request has at least one byte"
        );
        Self {
            limits,
            state: State::Start,
            ranges: Vec::new(),
            inline_bytes: Vec::new(),
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> ParserLimits {
        self.limits
    }

    /// Parses the request at the front of `buffer`. `auth_required` is true while the
    /// connection must still authenticate ([`crate::Session::auth_required`]): Redis
    /// then refuses large requests. After an error the connection must be closed; the
    /// parser is not usable for it any more.
    pub fn parse<'a>(
        &'a mut self,
        buffer: &'a [u8],
        auth_required: bool,
    ) -> Result<Parsed<'a>, ProtocolError> {
        if self.state == State::Start {
            self.ranges.clear();
            self.inline_bytes.clear();
            match buffer.first() {
                None => return Ok(Parsed::Incomplete),
                Some(b'*') => {
                    self.state = State::Multibulk {
                        remaining: 0,
                        cursor: 0,
                        bulk: None,
                        payload: 0,
                    };
                }
                Some(_) => {
                    self.state = State::Inline {
                        searched: 0,
                        hidden: false,
                    };
                }
            }
        }
        let result = match self.state {
            State::Start => unreachable!("set above"),
            State::Inline { .. } => self.parse_inline(buffer),
            State::Multibulk { .. } => self.parse_multibulk(buffer, auth_required),
        };
        match result {
            Ok(Step::Incomplete) => Ok(Parsed::Incomplete),
            Ok(Step::Done { consumed, inline }) => {
                self.state = State::Start;
                if self.ranges.is_empty() {
                    return Ok(Parsed::Empty { consumed });
                }
                let bytes = if inline { &self.inline_bytes } else { buffer };
                Ok(Parsed::Command {
                    args: Args::new(bytes, &self.ranges),
                    consumed,
                })
            }
            Err(error) => {
                self.state = State::Start;
                Err(error)
            }
        }
    }

    /// An inline request: one line ending in LF (or CRLF).
    fn parse_inline(&mut self, buffer: &[u8]) -> Result<Step, ProtocolError> {
        let State::Inline {
            mut searched,
            mut hidden,
        } = self.state
        else {
            unreachable!("called for inline requests");
        };
        let mut newline = None;
        if !hidden {
            match memchr::memchr2(b'\n', 0, &buffer[searched..]) {
                Some(offset) if buffer[searched + offset] == b'\n' => {
                    newline = Some(searched + offset);
                }
                Some(_) => hidden = true,
                None => searched = buffer.len(),
            }
        }
        let Some(newline) = newline else {
            self.state = State::Inline { searched, hidden };
            if buffer.len() > INLINE_BYTES_MAX {
                return Err(ProtocolError::InlineTooBig);
            }
            return Ok(Step::Incomplete);
        };
        let line_end = if newline > 0 && buffer[newline - 1] == b'\r' {
            newline - 1
        } else {
            newline
        };
        inline::split(
            &buffer[..line_end],
            &mut self.inline_bytes,
            &mut self.ranges,
        )
        .map_err(|_| ProtocolError::UnbalancedQuotes)?;
        if self.ranges.len() > self.limits.args_max {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        Ok(Step::Done {
            consumed: newline + 1,
            inline: true,
        })
    }

    /// A multibulk request: `*<count>\r\n` then `count` times `$<length>\r\n<bytes>\r\n`.
    fn parse_multibulk(
        &mut self,
        buffer: &[u8],
        auth_required: bool,
    ) -> Result<Step, ProtocolError> {
        let State::Multibulk {
            mut remaining,
            mut cursor,
            mut bulk,
            mut payload,
        } = self.state
        else {
            unreachable!("called for multibulk requests");
        };
        assert!(
            cursor <= buffer.len(),
            "the buffer lost bytes between calls"
        );
        if cursor == 0 {
            let Some(line) = header_line(buffer, 0) else {
                if buffer.len() > INLINE_BYTES_MAX {
                    return Err(ProtocolError::MultibulkCountTooBig);
                }
                return Ok(Step::Incomplete);
            };
            let count = parse_i64(&buffer[1..line.cr])
                .filter(|&count| count <= MULTIBULK_COUNT_MAX)
                .ok_or(ProtocolError::InvalidMultibulkLength)?;
            if count > UNAUTHENTICATED_ARGS_MAX && auth_required {
                return Err(ProtocolError::UnauthenticatedMultibulkLength);
            }
            if count <= 0 {
                return Ok(Step::Done {
                    consumed: line.next,
                    inline: false,
                });
            }
            remaining = usize::try_from(count).expect("at most 2^31 - 1");
            if remaining > self.limits.args_max {
                return Err(ProtocolError::InvalidMultibulkLength);
            }
            cursor = line.next;
            self.ranges.reserve(remaining.min(1024));
        }
        while remaining > 0 {
            let length = match bulk {
                Some(length) => length,
                None => {
                    let Some(line) = header_line(buffer, cursor) else {
                        if buffer.len() - cursor > INLINE_BYTES_MAX {
                            return Err(ProtocolError::BulkCountTooBig);
                        }
                        break;
                    };
                    if buffer[cursor] != b'$' {
                        return Err(ProtocolError::ExpectedDollar(buffer[cursor]));
                    }
                    let length = parse_i64(&buffer[cursor + 1..line.cr])
                        .filter(|&length| length >= 0)
                        .and_then(|length| usize::try_from(length).ok())
                        .filter(|&length| length <= self.limits.request_bytes_max)
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    if length as i64 > UNAUTHENTICATED_BULK_BYTES_MAX && auth_required {
                        return Err(ProtocolError::UnauthenticatedBulkLength);
                    }
                    payload += length;
                    if payload > self.limits.request_bytes_max {
                        return Err(ProtocolError::RequestTooBig {
                            request_bytes_max: self.limits.request_bytes_max,
                        });
                    }
                    cursor = line.next;
                    bulk = Some(length);
                    length
                }
            };
            // The argument and the two bytes after it (CRLF, not checked, as in Redis).
            if buffer.len() - cursor < length + 2 {
                break;
            }
            self.ranges.push(cursor..cursor + length);
            cursor += length + 2;
            remaining -= 1;
            bulk = None;
        }
        self.state = State::Multibulk {
            remaining,
            cursor,
            bulk,
            payload,
        };
        if remaining == 0 {
            Ok(Step::Done {
                consumed: cursor,
                inline: false,
            })
        } else {
            Ok(Step::Incomplete)
        }
    }
}

/// A parse step's result, before it is turned into [`Parsed`].
enum Step {
    Incomplete,
    Done { consumed: usize, inline: bool },
}

/// Where a `*` or `$` header line ends.
struct HeaderLine {
    /// The index of its CR.
    cr: usize,
    /// The index after its end (the CR and the byte after it).
    next: usize,
}

/// The header line starting at `start`, if its end is in the buffer. Like Redis, it
/// looks for the CR as in a C string (a NUL byte first means not found) and needs one
/// more byte after the CR, which it does not check.
fn header_line(buffer: &[u8], start: usize) -> Option<HeaderLine> {
    let offset = memchr::memchr2(b'\r', 0, &buffer[start..])?;
    let cr = start + offset;
    if buffer[cr] != b'\r' || cr + 2 > buffer.len() {
        return None;
    }
    Some(HeaderLine { cr, next: cr + 2 })
}

#[cfg(test)]
mod tests;
