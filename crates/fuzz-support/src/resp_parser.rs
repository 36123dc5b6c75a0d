//! The RESP request parser ([`RequestParser`]): any bytes from a client must parse into
//! requests, stop at an incomplete one, or end in a protocol error, never panic; and the
//! parser must find the same requests and the same error whether the bytes arrive at
//! once or in pieces (its calling protocol: the same bytes at the front of the buffer,
//! more appended, until it returns something other than `Incomplete`).
//!
//! Input layout: byte 0 chooses `auth_required` and the limits (small ones too, so that
//! their errors are reachable), byte 1 seeds the sizes of the pieces, the rest is what
//! the client sends.

use ferrotx_resp::protocol::{ARGS_MAX_DEFAULT, INLINE_BYTES_MAX, REQUEST_BYTES_MAX_DEFAULT};
use ferrotx_resp::{Parsed, ParserLimits, ProtocolError, ProtocolVersion, RequestParser};

/// What the parser found, in order.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Empty { consumed: usize },
    Command { args: Vec<Vec<u8>>, consumed: usize },
    Error(ProtocolError),
}

/// Splits `data` into the parser's settings and the client's bytes.
fn settings(data: &[u8]) -> Option<(bool, ParserLimits, u8, &[u8])> {
    let (&flags, rest) = data.split_first()?;
    let (&seed, input) = rest.split_first()?;
    let request_bytes_max =
        [REQUEST_BYTES_MAX_DEFAULT, 64 << 10, 1024, 16][usize::from(flags >> 1) & 3];
    let args_max = [ARGS_MAX_DEFAULT, 64, 3, 1][usize::from(flags >> 3) & 3];
    let limits = ParserLimits {
        request_bytes_max,
        args_max,
    };
    Some((flags & 1 == 1, limits, seed, input))
}

/// Checks one parse result against the buffer it came from and records it; false once
/// the parse ends (incomplete with nothing more to feed is the caller's to see).
fn record(
    parsed: Result<Parsed<'_>, ProtocolError>,
    buffer_len: usize,
    events: &mut Vec<Event>,
) -> Option<usize> {
    match parsed {
        Ok(Parsed::Incomplete) => None,
        Ok(Parsed::Empty { consumed }) => {
            assert!(
                consumed > 0 && consumed <= buffer_len,
                "{consumed} of {buffer_len}"
            );
            events.push(Event::Empty { consumed });
            Some(consumed)
        }
        Ok(Parsed::Command { args, consumed }) => {
            assert!(
                consumed > 0 && consumed <= buffer_len,
                "{consumed} of {buffer_len}"
            );
            assert!(!args.is_empty(), "a command has at least one argument");
            let args = args.to_vecs_from(0);
            // Each argument byte comes from at least one byte of the request.
            let arg_bytes: usize = args.iter().map(Vec::len).sum();
            assert!(
                arg_bytes <= consumed,
                "{arg_bytes} argument bytes from {consumed}"
            );
            events.push(Event::Command { args, consumed });
            Some(consumed)
        }
        Err(error) => {
            // The reply sent before closing must encode in both protocols.
            let mut out = Vec::new();
            error.reply().encode(ProtocolVersion::Resp2, &mut out);
            error.reply().encode(ProtocolVersion::Resp3, &mut out);
            assert!(out.starts_with(b"-ERR Protocol error"), "{out:?}");
            events.push(Event::Error(error));
            None
        }
    }
}

/// Every request in `input`, given whole.
fn whole(limits: ParserLimits, auth_required: bool, input: &[u8]) -> Vec<Event> {
    let mut parser = RequestParser::new(limits);
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(consumed) = record(
        parser.parse(&input[at..], auth_required),
        input.len() - at,
        &mut events,
    ) {
        at += consumed;
    }
    events
}

/// Every request in `input`, fed in pieces of 1 to 64 bytes drawn from `seed`.
fn in_pieces(limits: ParserLimits, auth_required: bool, seed: u8, input: &[u8]) -> Vec<Event> {
    let mut parser = RequestParser::new(limits);
    let mut events = Vec::new();
    let mut buffer = Vec::new();
    let mut fed = 0;
    let mut state = u32::from(seed) | 1;
    loop {
        let buffer_len = buffer.len();
        match parser.parse(&buffer, auth_required) {
            Ok(Parsed::Incomplete) => {
                if fed == input.len() {
                    return events;
                }
                // A small linear congruential generator: the pieces vary with the seed.
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let piece = ((state >> 16) % 64 + 1) as usize;
                let end = (fed + piece).min(input.len());
                buffer.extend_from_slice(&input[fed..end]);
                fed = end;
            }
            parsed => match record(parsed, buffer_len, &mut events) {
                Some(consumed) => {
                    buffer.drain(..consumed);
                }
                None => return events,
            },
        }
    }
}

/// Parses the client's bytes of `data` whole and in pieces, and compares.
pub fn run(data: &[u8]) {
    let Some((auth_required, limits, seed, input)) = settings(data) else {
        return;
    };
    let whole = whole(limits, auth_required, input);
    let pieces = in_pieces(limits, auth_required, seed, input);
    // Redis refuses a line longer than its inline limit while the line's end has not
    // arrived, so with longer inputs how the bytes arrive may legitimately change the
    // outcome.
    if input.len() <= INLINE_BYTES_MAX {
        assert_eq!(whole, pieces, "whole and in pieces differ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_parses_the_same_whole_and_in_pieces() {
        let mut data = vec![0, 7];
        data.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n\r\n*0\r\n*1\r\n$2\r\nX");
        run(&data);
        let (auth, limits, _, input) = settings(&data).unwrap();
        // Two commands and two empty requests; the last request is incomplete.
        assert_eq!(whole(limits, auth, input).len(), 4);
    }
}
