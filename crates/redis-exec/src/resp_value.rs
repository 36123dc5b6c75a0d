//! A client's side of RESP: replies as a client reads them ([`RespValue`], parsed from
//! bytes by [`parse_reply`]) and requests as a client writes them ([`encode_request`]).
//!
//! It reads RESP2 (simple strings, errors, integers, bulk strings, arrays, and both
//! nulls) and the RESP3 types ferrotx writes after `HELLO 3` (null, boolean, map, set,
//! verbatim string); other RESP3 types (doubles, big numbers, pushes, attributes) are
//! refused as unknown.

/// One reply as a client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RespValue {
    /// A simple string (`+OK`).
    Simple(Vec<u8>),
    /// An error (`-ERR ...`), without the `-`.
    Error(Vec<u8>),
    /// An integer (`:1`).
    Integer(i64),
    /// A bulk string (`$5\r\nhello`).
    Bulk(Vec<u8>),
    /// The null bulk string (`$-1`), or RESP3's null (`_`).
    Null,
    /// The null array (`*-1`): EXEC of a transaction whose watched key changed, in
    /// RESP2.
    NullArray,
    /// An array.
    Array(Vec<RespValue>),
    /// A RESP3 boolean (`#t`, `#f`).
    Boolean(bool),
    /// A RESP3 map (`%`), as its pairs in order.
    Map(Vec<(RespValue, RespValue)>),
    /// A RESP3 set (`~`), as its items in order.
    Set(Vec<RespValue>),
    /// A RESP3 verbatim string (`=`) and its three-byte format.
    Verbatim {
        /// The format: `txt` or `mkd`.
        format: [u8; 3],
        /// The text.
        text: Vec<u8>,
    },
}

impl RespValue {
    /// `+OK`.
    pub fn ok() -> Self {
        Self::Simple(b"OK".to_vec())
    }

    /// A simple string.
    pub fn simple(text: impl Into<Vec<u8>>) -> Self {
        Self::Simple(text.into())
    }

    /// A bulk string.
    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Self {
        Self::Bulk(bytes.into())
    }

    /// True for either null (`$-1`, `*-1`, `_`).
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null | Self::NullArray)
    }

    /// True for an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }

    /// The message of an error (with its code, without the `-`).
    pub fn error_message(&self) -> Option<&[u8]> {
        match self {
            Self::Error(message) => Some(message),
            _ => None,
        }
    }

    /// The bytes of a bulk, simple or verbatim string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Bulk(bytes) | Self::Simple(bytes) | Self::Verbatim { text: bytes, .. } => {
                Some(bytes)
            }
            _ => None,
        }
    }

    /// The value of an integer.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Self::Integer(value) => Some(*value),
            _ => None,
        }
    }

    /// The items of an array or a set.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            Self::Array(items) | Self::Set(items) => Some(items),
            _ => None,
        }
    }
}

/// Why bytes are not a RESP reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a RESP reply at byte {offset}: {problem}")]
pub struct ReplyError {
    /// Where in the bytes given.
    pub offset: usize,
    /// What is wrong there.
    pub problem: &'static str,
}

/// Deepest nesting of arrays, maps and sets read (ferrotx's deepest reply, COMMAND
/// DOCS, nests far less).
const DEPTH_MAX: usize = 64;

/// The first reply in `input` and the bytes it takes, or `None` if `input` holds only
/// the start of one.
pub fn parse_reply(input: &[u8]) -> Result<Option<(RespValue, usize)>, ReplyError> {
    parse_at(input, 0, 0)
}

/// The reply at `at` and the offset after it, or `None` if it is not complete.
fn parse_at(
    input: &[u8],
    at: usize,
    depth: usize,
) -> Result<Option<(RespValue, usize)>, ReplyError> {
    let fail = |offset, problem| Err(ReplyError { offset, problem });
    let Some((&kind, _)) = input[at..].split_first() else {
        return Ok(None);
    };
    let Some((line, next)) = line(input, at + 1) else {
        return Ok(None);
    };
    let value = match kind {
        b'+' => RespValue::Simple(line.to_vec()),
        b'-' => RespValue::Error(line.to_vec()),
        b':' => RespValue::Integer(integer(line, at)?),
        b'_' if line.is_empty() => RespValue::Null,
        b'#' => match line {
            b"t" => RespValue::Boolean(true),
            b"f" => RespValue::Boolean(false),
            _ => return fail(at, "a boolean is #t or #f"),
        },
        b'$' | b'=' => {
            let len = integer(line, at)?;
            if len == -1 && kind == b'$' {
                return Ok(Some((RespValue::Null, next)));
            }
            let Ok(len) = usize::try_from(len) else {
                return fail(at, "a negative length");
            };
            let Some(end) = next.checked_add(len).filter(|end| *end + 2 <= input.len()) else {
                return Ok(None);
            };
            if &input[end..end + 2] != b"\r\n" {
                return fail(end, "a string not followed by CRLF");
            }
            let bytes = &input[next..end];
            let value = if kind == b'$' {
                RespValue::Bulk(bytes.to_vec())
            } else {
                if bytes.len() < 4 || bytes[3] != b':' {
                    return fail(next, "a verbatim string starts with its format and ':'");
                }
                RespValue::Verbatim {
                    format: [bytes[0], bytes[1], bytes[2]],
                    text: bytes[4..].to_vec(),
                }
            };
            return Ok(Some((value, end + 2)));
        }
        b'*' | b'~' | b'%' => {
            let len = integer(line, at)?;
            if len == -1 && kind == b'*' {
                return Ok(Some((RespValue::NullArray, next)));
            }
            let Ok(len) = usize::try_from(len) else {
                return fail(at, "a negative length");
            };
            if depth == DEPTH_MAX {
                return fail(at, "nested too deep");
            }
            let Some(items_len) = len.checked_mul(if kind == b'%' { 2 } else { 1 }) else {
                return fail(at, "a length too large");
            };
            // Each item takes at least 3 bytes: no allocation larger than the input.
            let mut items = Vec::with_capacity(items_len.min((input.len() - next) / 3));
            let mut at = next;
            for _ in 0..items_len {
                let Some((item, after)) = parse_at(input, at, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at = after;
            }
            let value = match kind {
                b'*' => RespValue::Array(items),
                b'~' => RespValue::Set(items),
                _ => {
                    let mut pairs = Vec::with_capacity(len);
                    let mut items = items.into_iter();
                    while let (Some(key), Some(value)) = (items.next(), items.next()) {
                        pairs.push((key, value));
                    }
                    RespValue::Map(pairs)
                }
            };
            return Ok(Some((value, at)));
        }
        _ => return fail(at, "an unknown reply type"),
    };
    Ok(Some((value, next)))
}

/// The line from `from` to the next CRLF, and the offset after the CRLF.
fn line(input: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let len = input[from..].windows(2).position(|pair| pair == b"\r\n")?;
    Some((&input[from..from + len], from + len + 2))
}

/// A decimal integer (a reply's, or a length).
fn integer(text: &[u8], at: usize) -> Result<i64, ReplyError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(ReplyError {
            offset: at,
            problem: "not a decimal integer",
        })
}

/// Appends the request of `args` (a command and its arguments) as a RESP array of bulk
/// strings, as clients send it.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        let arg = arg.as_ref();
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use ferrotx_resp::{ProtocolVersion, Reply};

    use super::*;

    fn parse_all(input: &[u8]) -> Vec<RespValue> {
        let mut values = Vec::new();
        let mut at = 0;
        while let Some((value, used)) = parse_reply(&input[at..]).unwrap() {
            values.push(value);
            at += used;
        }
        assert_eq!(at, input.len(), "every byte is a reply");
        values
    }

    #[test]
    fn reads_every_resp2_type() {
        let input = b"+OK\r\n-ERR no\r\n:-42\r\n$5\r\nhe\r\no\r\n$0\r\n\r\n$-1\r\n*-1\r\n\
                      *3\r\n:1\r\n*0\r\n*1\r\n$1\r\nx\r\n";
        assert_eq!(
            parse_all(input),
            vec![
                RespValue::ok(),
                RespValue::Error(b"ERR no".to_vec()),
                RespValue::Integer(-42),
                RespValue::bulk("he\r\no"),
                RespValue::bulk(""),
                RespValue::Null,
                RespValue::NullArray,
                RespValue::Array(vec![
                    RespValue::Integer(1),
                    RespValue::Array(vec![]),
                    RespValue::Array(vec![RespValue::bulk("x")]),
                ]),
            ]
        );
    }

    #[test]
    fn reads_what_the_server_encodes_in_either_protocol() {
        let reply = Reply::Array(vec![
            Reply::Map(vec![(Reply::bulk_static("k"), Reply::Boolean(true))]),
            Reply::Set(vec![Reply::Integer(3)]),
            Reply::Verbatim {
                format: *b"txt",
                text: b"a:b".to_vec().into(),
            },
            Reply::Null,
            Reply::NullArray,
        ]);
        let resp3 = parse_all(&reply.to_bytes(ProtocolVersion::Resp3));
        assert_eq!(
            resp3,
            vec![RespValue::Array(vec![
                RespValue::Map(vec![(RespValue::bulk("k"), RespValue::Boolean(true))]),
                RespValue::Set(vec![RespValue::Integer(3)]),
                RespValue::Verbatim {
                    format: *b"txt",
                    text: b"a:b".to_vec()
                },
                RespValue::Null,
                RespValue::Null,
            ])]
        );
        let resp2 = parse_all(&reply.to_bytes(ProtocolVersion::Resp2));
        assert_eq!(
            resp2,
            vec![RespValue::Array(vec![
                RespValue::Array(vec![RespValue::bulk("k"), RespValue::Integer(1)]),
                RespValue::Array(vec![RespValue::Integer(3)]),
                RespValue::bulk("a:b"),
                RespValue::Null,
                RespValue::NullArray,
            ])]
        );
    }

    #[test]
    fn every_proper_prefix_is_incomplete() {
        let input = b"*2\r\n$3\r\nabc\r\n%1\r\n+a\r\n=7\r\ntxt:xyz\r\n";
        for end in 0..input.len() {
            assert_eq!(
                parse_reply(&input[..end]),
                Ok(None),
                "prefix of {end} bytes"
            );
        }
        assert_eq!(parse_reply(input).unwrap().unwrap().1, input.len());
    }

    #[test]
    fn refuses_what_is_not_a_reply() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"$3\r\nabcde\r\n",
            b"#x\r\n",
            b"=3\r\ntxt\r\n",
            b"_x\r\n",
        ] {
            let error = parse_reply(bad).unwrap_err();
            assert!(!error.problem.is_empty(), "{bad:?}");
        }
        let deep: Vec<u8> = b"*1\r\n".repeat(DEPTH_MAX + 1);
        assert_eq!(parse_reply(&deep).unwrap_err().problem, "nested too deep");
    }

    #[test]
    fn requests_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_request(&["SET", "k", ""], &mut out);
        encode_request(&[b"GET".as_slice(), b"k"], &mut out);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        );
    }
}
