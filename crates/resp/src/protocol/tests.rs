use proptest::prelude::*;

use super::*;
use crate::reply::ProtocolVersion;

/// What a connection sees from feeding `chunks` one after another: each request's
/// arguments (an empty list for an empty request), then the error if one ended it.
fn feed(
    limits: ParserLimits,
    auth_required: bool,
    chunks: &[&[u8]],
) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
    let mut parser = RequestParser::new(limits);
    let mut buffer = Vec::new();
    let mut requests = Vec::new();
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
        loop {
            let consumed = match parser.parse(&buffer, auth_required) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => {
                    requests.push(Vec::new());
                    consumed
                }
                Ok(Parsed::Command { args, consumed }) => {
                    assert!(!args.is_empty());
                    requests.push(args.to_vecs_from(0));
                    consumed
                }
                Err(error) => return (requests, Some(error)),
            };
            assert!(consumed > 0 && consumed <= buffer.len());
            buffer.drain(..consumed);
        }
    }
    (requests, None)
}

fn all(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
    feed(ParserLimits::default(), false, &[input])
}

fn request(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|arg| arg.to_vec()).collect()
}

fn error_bytes(error: ProtocolError) -> Vec<u8> {
    error.reply().to_bytes(ProtocolVersion::Resp2)
}

#[test]
fn multibulk_request() {
    let (requests, error) = all(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
    assert_eq!(requests, vec![request(&[b"GET", b"key"])]);
    assert_eq!(error, None);
}

#[test]
fn multibulk_arguments_are_binary_safe_and_point_into_the_buffer() {
    let input = b"*2\r\n$4\r\na\r\n\0\r\n$0\r\n\r\n";
    let mut parser = RequestParser::default();
    let Ok(Parsed::Command { args, consumed }) = parser.parse(input, false) else {
        panic!("a whole request");
    };
    assert_eq!(consumed, input.len());
    assert_eq!(args.len(), 2);
    assert_eq!(&args[0], b"a\r\n\0");
    assert_eq!(args.get(1), Some(&b""[..]));
    assert_eq!(args.get(2), None);
    // Zero copy: the argument is the input's own bytes.
    assert_eq!(args[0].as_ptr(), input[8..].as_ptr());
}

#[test]
fn inline_requests() {
    let (requests, error) = all(b"SET k v\r\nGET k\nPING\r\n");
    assert_eq!(
        requests,
        vec![
            request(&[b"SET", b"k", b"v"]),
            request(&[b"GET", b"k"]),
            request(&[b"PING"]),
        ]
    );
    assert_eq!(error, None);
}

#[test]
fn inline_quoting() {
    let (requests, _) = all(b"SET \"a b\" 'c d' \"\\x41\\n\"\r\n");
    assert_eq!(requests, vec![request(&[b"SET", b"a b", b"c d", b"A\n"])]);
}

#[test]
fn empty_requests_are_skipped() {
    let (requests, error) = all(b"\r\n   \r\n\n*0\r\n*-1\r\nPING\r\n");
    assert_eq!(
        requests,
        vec![
            request(&[]),
            request(&[]),
            request(&[]),
            request(&[]),
            request(&[]),
            request(&[b"PING"]),
        ]
    );
    assert_eq!(error, None);
}

#[test]
fn the_bytes_after_a_bulk_string_are_not_checked() {
    // Redis skips two bytes after each bulk string whatever they are.
    let (requests, error) = all(b"*1\r\n$4\r\nPINGxxPING\r\n");
    assert_eq!(requests, vec![request(&[b"PING"]), request(&[b"PING"])]);
    assert_eq!(error, None);
}

#[test]
fn the_byte_after_a_header_cr_is_not_checked() {
    let (requests, _) = all(b"*1\rx$4\ryPING\r\n");
    assert_eq!(requests, vec![request(&[b"PING"])]);
}

#[test]
fn a_whole_pipeline_at_every_split_point() {
    let pipeline: &[u8] = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\n\
        GET k\r\n\r\n*1\r\n$4\r\nPING\r\nECHO \"a b\"\n*0\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n";
    let expected = all(pipeline);
    assert_eq!(expected.1, None);
    assert_eq!(
        expected.0,
        vec![
            request(&[b"SET", b"k", b"va\r\nl"]),
            request(&[b"GET", b"k"]),
            request(&[]),
            request(&[b"PING"]),
            request(&[b"ECHO", b"a b"]),
            request(&[]),
            request(&[b"ECHO", b""]),
        ]
    );
    for split in 0..=pipeline.len() {
        let (first, second) = pipeline.split_at(split);
        assert_eq!(
            feed(ParserLimits::default(), false, &[first, second]),
            expected,
            "split at {split}"
        );
    }
    for first in 0..=pipeline.len() {
        for second in first..=pipeline.len() {
            let chunks = [
                &pipeline[..first],
                &pipeline[first..second],
                &pipeline[second..],
            ];
            assert_eq!(feed(ParserLimits::default(), false, &chunks), expected);
        }
    }
    let bytes: Vec<&[u8]> = pipeline.chunks(1).collect();
    assert_eq!(feed(ParserLimits::default(), false, &bytes), expected);
}

#[test]
fn incomplete_requests_wait() {
    for partial in [
        &b"*"[..],
        b"*2",
        b"*2\r",
        b"*2\r\n",
        b"*2\r\n$3",
        b"*2\r\n$3\r",
        b"*2\r\n$3\r\nGET",
        b"*2\r\n$3\r\nGET\r",
        b"*2\r\n$3\r\nGET\r\n$1\r\nk",
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r",
        b"GET k",
        b"GET k\r",
    ] {
        let mut parser = RequestParser::default();
        assert!(
            matches!(parser.parse(partial, false), Ok(Parsed::Incomplete)),
            "{partial:?}"
        );
    }
    let mut parser = RequestParser::default();
    assert!(matches!(parser.parse(b"", false), Ok(Parsed::Incomplete)));
}

#[test]
fn protocol_error_replies_are_redis_bytes() {
    for (error, bytes) in [
        (
            ProtocolError::InlineTooBig,
            &b"-ERR Protocol error: too big inline request\r\n"[..],
        ),
        (
            ProtocolError::UnbalancedQuotes,
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        (
            ProtocolError::MultibulkCountTooBig,
            b"-ERR Protocol error: too big mbulk count string\r\n",
        ),
        (
            ProtocolError::InvalidMultibulkLength,
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            ProtocolError::UnauthenticatedMultibulkLength,
            b"-ERR Protocol error: unauthenticated multibulk length\r\n",
        ),
        (
            ProtocolError::BulkCountTooBig,
            b"-ERR Protocol error: too big bulk count string\r\n",
        ),
        (
            ProtocolError::ExpectedDollar(b':'),
            b"-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            ProtocolError::ExpectedDollar(0xff),
            b"-ERR Protocol error: expected '$', got '\xff'\r\n",
        ),
        (
            ProtocolError::ExpectedDollar(b'\r'),
            b"-ERR Protocol error: expected '$', got ' '\r\n",
        ),
        (
            ProtocolError::ExpectedDollar(0),
            b"-ERR Protocol error: expected '$', got '\r\n",
        ),
        (
            ProtocolError::InvalidBulkLength,
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            ProtocolError::UnauthenticatedBulkLength,
            b"-ERR Protocol error: unauthenticated bulk length\r\n",
        ),
        (
            ProtocolError::RequestTooBig {
                request_bytes_max: 100,
            },
            b"-ERR Protocol error: request too big (over 100 bytes)\r\n",
        ),
    ] {
        assert_eq!(error_bytes(error), bytes, "{error:?}");
    }
}

#[test]
fn multibulk_length_errors() {
    for input in [
        &b"*x\r\n"[..],
        b"*\r\n",
        b"*+1\r\n",
        b"*01\r\n",
        b"*1 \r\n",
        b"* 1\r\n",
        b"*2147483648\r\n",
        b"*99999999999999999999\r\n",
    ] {
        assert_eq!(
            all(input),
            (vec![], Some(ProtocolError::InvalidMultibulkLength)),
            "{input:?}"
        );
    }
    // 2^31 - 1 is a valid count (above the configured limit here, though).
    let limits = ParserLimits {
        request_bytes_max: 1 << 20,
        args_max: 3,
    };
    assert_eq!(
        feed(limits, false, &[b"*4\r\n"]),
        (vec![], Some(ProtocolError::InvalidMultibulkLength))
    );
    assert_eq!(
        feed(limits, false, &[b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"]).0,
        vec![request(&[b"a", b"b", b"c"])]
    );
    assert_eq!(
        feed(limits, false, &[b"a b c d\r\n"]),
        (vec![], Some(ProtocolError::InvalidMultibulkLength))
    );
}

#[test]
fn bulk_errors() {
    for (input, error) in [
        (&b"*1\r\n:1\r\n"[..], ProtocolError::ExpectedDollar(b':')),
        (b"*1\r\n\r\n", ProtocolError::ExpectedDollar(b'\r')),
        (b"*1\r\n$-1\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$x\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$+4\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$04\r\n", ProtocolError::InvalidBulkLength),
    ] {
        assert_eq!(all(input), (vec![], Some(error)), "{input:?}");
    }
    // The request before the bad one is returned first.
    let (requests, error) = all(b"PING\r\n*1\r\n$+4\r\nPING\r\n");
    assert_eq!(requests, vec![request(&[b"PING"])]);
    assert_eq!(error, Some(ProtocolError::InvalidBulkLength));
}

#[test]
fn request_size_limits() {
    let limits = ParserLimits {
        request_bytes_max: 10,
        args_max: 100,
    };
    assert_eq!(
        feed(limits, false, &[b"*1\r\n$11\r\n"]),
        (vec![], Some(ProtocolError::InvalidBulkLength))
    );
    assert_eq!(
        feed(limits, false, &[b"*1\r\n$10\r\n0123456789\r\n"]).0,
        vec![request(&[b"0123456789"])]
    );
    assert_eq!(
        feed(limits, false, &[b"*2\r\n$6\r\n012345\r\n$5\r\n"]),
        (
            vec![],
            Some(ProtocolError::RequestTooBig {
                request_bytes_max: 10
            })
        )
    );
}

#[test]
fn too_big_lines() {
    let long = vec![b'a'; INLINE_BYTES_MAX];
    // Exactly the limit without a line end still waits; one more byte is too big.
    assert_eq!(
        feed(ParserLimits::default(), false, &[&long]),
        (vec![], None)
    );
    assert_eq!(
        feed(ParserLimits::default(), false, &[&long, b"a"]),
        (vec![], Some(ProtocolError::InlineTooBig))
    );
    // A long line whose end is there is fine.
    let mut line = vec![b'a'; INLINE_BYTES_MAX + 10];
    line.extend_from_slice(b"\r\n");
    assert_eq!(all(&line).0.len(), 1);

    let mut count = b"*".to_vec();
    count.extend_from_slice(&long);
    assert_eq!(
        all(&count),
        (vec![], Some(ProtocolError::MultibulkCountTooBig))
    );
    let mut bulk = b"*1\r\n$".to_vec();
    bulk.extend_from_slice(&long);
    assert_eq!(all(&bulk), (vec![], Some(ProtocolError::BulkCountTooBig)));
}

#[test]
fn a_nul_hides_the_line_end() {
    // Redis looks for the line end with strchr, which stops at a NUL byte: the request
    // waits for more data, which never makes it whole.
    let (requests, error) = feed(ParserLimits::default(), false, &[b"GET a\0b\r\n"]);
    assert_eq!((requests, error), (vec![], None));
    let filler = vec![b'x'; INLINE_BYTES_MAX];
    assert_eq!(
        feed(ParserLimits::default(), false, &[b"GET a\0b\r\n", &filler]),
        (vec![], Some(ProtocolError::InlineTooBig))
    );
    assert_eq!(all(b"*1\0\r\n"), (vec![], None));
}

#[test]
fn unbalanced_quotes() {
    for input in [&b"GET \"abc\r\n"[..], b"GET \"ab\"c\r\n", b"GET 'a\r\n"] {
        assert_eq!(
            all(input),
            (vec![], Some(ProtocolError::UnbalancedQuotes)),
            "{input:?}"
        );
    }
}

#[test]
fn unauthenticated_limits() {
    let mut eleven = b"*11\r\n".to_vec();
    for _ in 0..11 {
        eleven.extend_from_slice(b"$1\r\na\r\n");
    }
    assert_eq!(
        feed(ParserLimits::default(), true, &[&eleven]),
        (vec![], Some(ProtocolError::UnauthenticatedMultibulkLength))
    );
    assert_eq!(feed(ParserLimits::default(), false, &[&eleven]).0.len(), 1);
    assert_eq!(
        feed(ParserLimits::default(), true, &[b"*1\r\n$16385\r\n"]),
        (vec![], Some(ProtocolError::UnauthenticatedBulkLength))
    );
    let mut at_limit = b"*1\r\n$16384\r\n".to_vec();
    at_limit.extend_from_slice(&[b'a'; 16384]);
    at_limit.extend_from_slice(b"\r\n");
    assert_eq!(feed(ParserLimits::default(), true, &[&at_limit]).0.len(), 1);
    // Ten arguments are fine, and empty requests too.
    assert_eq!(
        feed(ParserLimits::default(), true, &[b"*-1\r\n*0\r\n"]).0,
        vec![request(&[]), request(&[])]
    );
}

#[test]
fn args_buf_round_trips() {
    let buf = ArgsBuf::new([&b"SET"[..], b"", b"\0\r\n"]);
    let args = buf.args();
    assert_eq!(args.len(), 3);
    assert_eq!(
        args.iter().collect::<Vec<_>>(),
        vec![&b"SET"[..], b"", b"\0\r\n"]
    );
    assert_eq!(args.to_vecs_from(1), vec![b"".to_vec(), b"\0\r\n".to_vec()]);
}

#[test]
#[should_panic(expected = "argument range outside its buffer")]
fn args_out_of_their_buffer_panic() {
    let ranges: Vec<Range<usize>> = std::iter::once(0..5).collect();
    let _ = Args::new(b"abc", &ranges);
}

/// A multibulk encoding of `args`.
fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

proptest! {
    #[test]
    fn random_pipelines_in_random_chunks(
        requests in prop::collection::vec(
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 1..5),
            1..6,
        ),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut pipeline = Vec::new();
        for args in &requests {
            pipeline.extend_from_slice(&multibulk(args));
        }
        let mut points: Vec<usize> = cuts.iter().map(|cut| cut.index(pipeline.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for point in points {
            chunks.push(&pipeline[start..point]);
            start = point;
        }
        chunks.push(&pipeline[start..]);
        let (parsed, error) = feed(ParserLimits::default(), false, &chunks);
        prop_assert_eq!(error, None);
        prop_assert_eq!(parsed, requests);
    }
}
