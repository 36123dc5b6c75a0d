//! Splitting an inline command line into arguments, as Redis's `sdssplitargs` does.
//!
//! Arguments are separated by white space. An argument may be, or contain from some
//! point on, a double-quoted part with escapes (`\n`, `\r`, `\t`, `\b`, `\a`, `\xHH`, and
//! `\` before any other byte gives that byte) or a single-quoted part where only `\'` is
//! an escape. A closing quote must be followed by white space or the end of the line,
//! and an unterminated quote is an error. The line is read as a C string: it ends at its
//! first NUL byte.

use std::ops::Range;

use crate::number::is_c_space;

/// The line has an unbalanced quote (Redis: "unbalanced quotes in request").
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnbalancedQuotes;

/// Splits `line` into arguments: appends each argument's bytes to `bytes` and its range
/// in `bytes` to `ranges`. On error, `bytes` and `ranges` may hold partial results.
pub(crate) fn split(
    line: &[u8],
    bytes: &mut Vec<u8>,
    ranges: &mut Vec<Range<usize>>,
) -> Result<(), UnbalancedQuotes> {
    let line = match memchr::memchr(0, line) {
        Some(end) => &line[..end],
        None => line,
    };
    // Reads past the end see NUL, as C does at the string's terminator.
    let at = |index: usize| line.get(index).copied().unwrap_or(0);
    let mut position = 0;
    loop {
        while position < line.len() && is_c_space(line[position]) {
            position += 1;
        }
        if position == line.len() {
            return Ok(());
        }
        let start = bytes.len();
        let mut in_double_quotes = false;
        let mut in_single_quotes = false;
        loop {
            let byte = at(position);
            if in_double_quotes {
                if byte == b'\\'
                    && at(position + 1) == b'x'
                    && at(position + 2).is_ascii_hexdigit()
                    && at(position + 3).is_ascii_hexdigit()
                {
                    bytes.push(hex_value(at(position + 2)) * 16 + hex_value(at(position + 3)));
                    position += 3;
                } else if byte == b'\\' && at(position + 1) != 0 {
                    position += 1;
                    bytes.push(match at(position) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if byte == b'"' {
                    // The closing quote must be followed by a space or nothing at all.
                    if at(position + 1) != 0 && !is_c_space(at(position + 1)) {
                        return Err(UnbalancedQuotes);
                    }
                    position += 1;
                    break;
                } else if byte == 0 {
                    return Err(UnbalancedQuotes);
                } else {
                    bytes.push(byte);
                }
            } else if in_single_quotes {
                if byte == b'\\' && at(position + 1) == b'\'' {
                    position += 1;
                    bytes.push(b'\'');
                } else if byte == b'\'' {
                    if at(position + 1) != 0 && !is_c_space(at(position + 1)) {
                        return Err(UnbalancedQuotes);
                    }
                    position += 1;
                    break;
                } else if byte == 0 {
                    return Err(UnbalancedQuotes);
                } else {
                    bytes.push(byte);
                }
            } else {
                match byte {
                    // Only these end an unquoted argument (not \v or \f, which are
                    // skipped between arguments but kept inside one).
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if byte != 0 {
                            position += 1;
                        }
                        break;
                    }
                    b'"' => in_double_quotes = true,
                    b'\'' => in_single_quotes = true,
                    other => bytes.push(other),
                }
            }
            position += 1;
        }
        ranges.push(start..bytes.len());
    }
}

/// The value of an ASCII hexadecimal digit.
fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => unreachable!("checked to be a hexadecimal digit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[u8]) -> Result<Vec<Vec<u8>>, UnbalancedQuotes> {
        let mut bytes = Vec::new();
        let mut ranges = Vec::new();
        split(line, &mut bytes, &mut ranges)?;
        Ok(ranges
            .into_iter()
            .map(|range| bytes[range].to_vec())
            .collect())
    }

    fn ok(line: &[u8], expected: &[&[u8]]) {
        let expected: Vec<Vec<u8>> = expected.iter().map(|arg| arg.to_vec()).collect();
        assert_eq!(
            args(line),
            Ok(expected),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }

    #[test]
    fn plain_words() {
        ok(b"", &[]);
        ok(b"   ", &[]);
        ok(b"PING", &[b"PING"]);
        ok(b"SET  key\tvalue ", &[b"SET", b"key", b"value"]);
        ok(b"\x0bGET\x0ba", &[b"GET\x0ba"]);
        ok(b"a\rb", &[b"a", b"b"]);
    }

    #[test]
    fn double_quotes_and_escapes() {
        ok(br#"SET "a b" "c""#, &[b"SET", b"a b", b"c"]);
        ok(br#""\x41\x4a\x4A""#, &[b"AJJ"]);
        ok(br#""\n\r\t\b\a\q\\\"""#, &[b"\n\r\t\x08\x07q\\\""]);
        // An incomplete \x escape is an escaped 'x'.
        ok(br#""\xzz""#, &[b"xzz"]);
        ok(br#""\x4""#, &[b"x4"]);
        ok(br#""""#, &[b""]);
        // A quote may start inside an argument.
        ok(br#"a"b c""#, &[b"ab c"]);
        ok(br#""a"   b"#, &[b"a", b"b"]);
    }

    #[test]
    fn single_quotes() {
        ok(br"'a b' 'it\'s' '\n'", &[b"a b", b"it's", b"\\n"]);
        ok(b"''", &[b""]);
    }

    #[test]
    fn unbalanced_quotes() {
        for line in [
            &br#""abc"#[..],
            br#"'abc"#,
            br#""ab"c"#,
            br#"'ab'c"#,
            br#""a\"#,
            br#"x "y"#,
        ] {
            assert_eq!(args(line), Err(UnbalancedQuotes), "{line:?}");
        }
    }

    #[test]
    fn the_line_ends_at_nul() {
        ok(b"GET a\0b c", &[b"GET", b"a"]);
        assert_eq!(args(b"GET \"a\0b\""), Err(UnbalancedQuotes));
    }
}
