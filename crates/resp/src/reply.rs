//! Replies, and their encoding in RESP2 or RESP3.
//!
//! A [`Reply`] is built once and encoded with the connection's protocol version at the
//! time it is written ([`Reply::encode`]). The RESP2 forms of RESP3-only types are Redis
//! 7's: a map is a flat array of keys and values, a set an array, a boolean the integer
//! 1 or 0, a verbatim string a bulk string, and both nulls (bulk and array) are `_` in
//! RESP3.

use std::borrow::Cow;

use crate::number::write_i64;

/// The RESP version a connection speaks: 2 until the client asks for 3 with `HELLO 3`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProtocolVersion {
    /// RESP2, every connection's protocol at first.
    #[default]
    Resp2,
    /// RESP3, chosen with `HELLO 3`.
    Resp3,
}

impl ProtocolVersion {
    /// The version's number, as HELLO reports it (2 or 3).
    pub fn number(self) -> i64 {
        match self {
            Self::Resp2 => 2,
            Self::Resp3 => 3,
        }
    }
}

/// One reply to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A simple string (`+OK`): no CR or LF inside.
    Simple(Cow<'static, [u8]>),
    /// An error, starting with its code (`ERR syntax error`, `WRONGPASS ...`), without
    /// the leading `-`: no CR or LF inside (the constructors make sure).
    Error(Cow<'static, [u8]>),
    /// An integer.
    Integer(i64),
    /// A binary-safe bulk string.
    Bulk(Cow<'static, [u8]>),
    /// The null bulk string: a missing value (`$-1` in RESP2, `_` in RESP3).
    Null,
    /// The null array: EXEC of a transaction whose watched key changed (`*-1` in RESP2,
    /// `_` in RESP3).
    NullArray,
    /// An array of replies.
    Array(Vec<Reply>),
    /// A set (RESP3 `~`; an array in RESP2).
    Set(Vec<Reply>),
    /// A map of key and value pairs (RESP3 `%`; a flat array of keys and values in
    /// RESP2).
    Map(Vec<(Reply, Reply)>),
    /// A boolean (RESP3 `#t` / `#f`; the integer 1 or 0 in RESP2).
    Boolean(bool),
    /// A verbatim string with its three-byte format, such as `txt` (RESP3 `=`; a bulk
    /// string of the text alone in RESP2).
    Verbatim {
        /// The format: `txt` for plain text, `mkd` for markdown.
        format: [u8; 3],
        /// The text.
        text: Cow<'static, [u8]>,
    },
    /// A reply encoded in this protocol whatever the connection speaks when it is
    /// written: an entry of EXEC's reply made before a HELLO inside the same block
    /// switched the protocol (Redis writes each entry as the command runs).
    InProtocol(ProtocolVersion, Box<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Self {
        Self::Simple(Cow::Borrowed(b"OK"))
    }

    /// `+QUEUED`, the reply to a command queued inside MULTI.
    pub fn queued() -> Self {
        Self::Simple(Cow::Borrowed(b"QUEUED"))
    }

    /// A simple string known when compiling.
    pub fn simple_static(text: &'static str) -> Self {
        debug_assert!(!text.contains(['\r', '\n']), "CR or LF in a simple string");
        Self::Simple(Cow::Borrowed(text.as_bytes()))
    }

    /// An error known when compiling: `message` starts with the error code (`ERR ...`).
    pub fn error_static(message: &'static str) -> Self {
        debug_assert!(!message.contains(['\r', '\n']), "CR or LF in an error");
        debug_assert!(
            !message.starts_with('-'),
            "an error is stored without its '-'"
        );
        Self::Error(Cow::Borrowed(message.as_bytes()))
    }

    /// An error built at run time: `message` starts with the error code (`ERR ...`).
    /// Like Redis's `addReplyErrorFormat`, every CR and LF inside (which may come from a
    /// client's arguments) becomes a space, so the reply stays one line.
    pub fn error(message: impl Into<Vec<u8>>) -> Self {
        let mut message = message.into();
        for byte in &mut message {
            if *byte == b'\r' || *byte == b'\n' {
                *byte = b' ';
            }
        }
        Self::Error(Cow::Owned(message))
    }

    /// A bulk string that owns its bytes.
    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Self {
        Self::Bulk(Cow::Owned(bytes.into()))
    }

    /// A bulk string known when compiling.
    pub fn bulk_static(text: &'static str) -> Self {
        Self::Bulk(Cow::Borrowed(text.as_bytes()))
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        self.error_message().is_some()
    }

    /// The message of an error reply (with its code, without the `-`).
    pub fn error_message(&self) -> Option<&[u8]> {
        match self {
            Self::Error(message) => Some(message),
            Self::InProtocol(_, reply) => reply.error_message(),
            _ => None,
        }
    }

    /// Appends this reply in `version` to `out`. Allocates nothing but `out`'s growth.
    pub fn encode(&self, version: ProtocolVersion, out: &mut Vec<u8>) {
        let resp3 = version == ProtocolVersion::Resp3;
        match self {
            Self::Simple(text) => line(out, b'+', text),
            Self::Error(message) => line(out, b'-', message),
            Self::Integer(value) => header(out, b':', *value),
            Self::Bulk(bytes) => bulk(out, bytes),
            Self::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Self::Null => out.extend_from_slice(b"$-1\r\n"),
            Self::NullArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Self::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Self::Array(items) => {
                header(out, b'*', length(items.len()));
                for item in items {
                    item.encode(version, out);
                }
            }
            Self::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, length(items.len()));
                for item in items {
                    item.encode(version, out);
                }
            }
            Self::Map(pairs) => {
                if resp3 {
                    header(out, b'%', length(pairs.len()));
                } else {
                    header(out, b'*', length(pairs.len()) * 2);
                }
                for (key, value) in pairs {
                    key.encode(version, out);
                    value.encode(version, out);
                }
            }
            Self::Boolean(value) if resp3 => {
                out.extend_from_slice(if *value { b"#t\r\n" } else { b"#f\r\n" });
            }
            Self::Boolean(value) => header(out, b':', i64::from(*value)),
            Self::Verbatim { format, text } if resp3 => {
                // The length counts the format and its colon.
                header(out, b'=', length(text.len()) + 4);
                out.extend_from_slice(format);
                out.push(b':');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Self::Verbatim { text, .. } => bulk(out, text),
            Self::InProtocol(version, reply) => reply.encode(*version, out),
        }
    }

    /// This reply in `version`, as a new buffer (for tests and logs).
    pub fn to_bytes(&self, version: ProtocolVersion) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(version, &mut out);
        out
    }
}

/// A length as RESP writes it.
fn length(len: usize) -> i64 {
    i64::try_from(len).expect("a length fits in i64")
}

/// `<kind><value>\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, value: i64) {
    out.push(kind);
    write_i64(out, value);
    out.extend_from_slice(b"\r\n");
}

/// `<kind><text>\r\n` for simple strings and errors.
fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    debug_assert!(
        memchr::memchr2(b'\r', b'\n', text).is_none(),
        "CR or LF in a one-line reply"
    );
    out.push(kind);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// `$<len>\r\n<bytes>\r\n`.
fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    header(out, b'$', length(bytes.len()));
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProtocolVersion::{Resp2, Resp3};

    fn both(reply: &Reply) -> (Vec<u8>, Vec<u8>) {
        (reply.to_bytes(Resp2), reply.to_bytes(Resp3))
    }

    #[test]
    fn scalars_are_the_same_in_both_versions() {
        for (reply, bytes) in [
            (Reply::ok(), &b"+OK\r\n"[..]),
            (Reply::queued(), b"+QUEUED\r\n"),
            (
                Reply::error_static("ERR syntax error"),
                b"-ERR syntax error\r\n",
            ),
            (Reply::Integer(0), b":0\r\n"),
            (Reply::Integer(-42), b":-42\r\n"),
            (Reply::Integer(i64::MIN), b":-9223372036854775808\r\n"),
            (Reply::bulk(b"a\r\nb".to_vec()), b"$4\r\na\r\nb\r\n"),
            (Reply::bulk(Vec::new()), b"$0\r\n\r\n"),
        ] {
            assert_eq!(both(&reply), (bytes.to_vec(), bytes.to_vec()), "{reply:?}");
        }
    }

    #[test]
    fn nulls_differ() {
        assert_eq!(both(&Reply::Null), (b"$-1\r\n".to_vec(), b"_\r\n".to_vec()));
        assert_eq!(
            both(&Reply::NullArray),
            (b"*-1\r\n".to_vec(), b"_\r\n".to_vec())
        );
    }

    #[test]
    fn aggregates_in_both_versions() {
        let array = Reply::Array(vec![
            Reply::Integer(1),
            Reply::Null,
            Reply::bulk_static("x"),
        ]);
        assert_eq!(
            both(&array),
            (
                b"*3\r\n:1\r\n$-1\r\n$1\r\nx\r\n".to_vec(),
                b"*3\r\n:1\r\n_\r\n$1\r\nx\r\n".to_vec()
            )
        );
        let map = Reply::Map(vec![
            (Reply::bulk_static("proto"), Reply::Integer(3)),
            (Reply::bulk_static("modules"), Reply::Array(Vec::new())),
        ]);
        assert_eq!(
            both(&map),
            (
                b"*4\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n".to_vec(),
                b"%2\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n".to_vec()
            )
        );
        let set = Reply::Set(vec![Reply::simple_static("readonly")]);
        assert_eq!(
            both(&set),
            (
                b"*1\r\n+readonly\r\n".to_vec(),
                b"~1\r\n+readonly\r\n".to_vec()
            )
        );
        assert_eq!(
            both(&Reply::Map(Vec::new())),
            (b"*0\r\n".to_vec(), b"%0\r\n".to_vec())
        );
    }

    #[test]
    fn booleans_and_verbatim() {
        assert_eq!(
            both(&Reply::Boolean(true)),
            (b":1\r\n".to_vec(), b"#t\r\n".to_vec())
        );
        assert_eq!(
            both(&Reply::Boolean(false)),
            (b":0\r\n".to_vec(), b"#f\r\n".to_vec())
        );
        let text = Reply::Verbatim {
            format: *b"txt",
            text: Cow::Borrowed(b"# Server\r\n"),
        };
        assert_eq!(
            both(&text),
            (
                b"$10\r\n# Server\r\n\r\n".to_vec(),
                b"=14\r\ntxt:# Server\r\n\r\n".to_vec()
            )
        );
    }

    #[test]
    fn runtime_errors_lose_their_line_breaks() {
        let reply = Reply::error(b"ERR unknown command 'a\r\nb'".to_vec());
        assert_eq!(reply.to_bytes(Resp2), b"-ERR unknown command 'a  b'\r\n");
        assert!(reply.is_error());
        assert_eq!(
            reply.error_message(),
            Some(&b"ERR unknown command 'a  b'"[..])
        );
        assert_eq!(Reply::ok().error_message(), None);
    }

    #[test]
    fn a_reply_in_its_own_protocol_ignores_the_connections() {
        let null = Reply::InProtocol(Resp2, Box::new(Reply::Null));
        assert_eq!(both(&null), (b"$-1\r\n".to_vec(), b"$-1\r\n".to_vec()));
        let map = Reply::InProtocol(
            Resp3,
            Box::new(Reply::Map(vec![(
                Reply::bulk_static("a"),
                Reply::Integer(1),
            )])),
        );
        assert_eq!(map.to_bytes(Resp2), b"%1\r\n$1\r\na\r\n:1\r\n");
        let error = Reply::InProtocol(Resp2, Box::new(Reply::error_static("ERR x")));
        assert!(error.is_error());
        assert_eq!(error.error_message(), Some(&b"ERR x"[..]));
    }

    #[test]
    fn encoding_appends() {
        let mut out = b"prefix".to_vec();
        Reply::Integer(7).encode(Resp2, &mut out);
        assert_eq!(out, b"prefix:7\r\n");
    }

    #[test]
    fn version_numbers() {
        assert_eq!(Resp2.number(), 2);
        assert_eq!(Resp3.number(), 3);
        assert_eq!(ProtocolVersion::default(), Resp2);
    }
}
