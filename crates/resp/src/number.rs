//! Redis's integer parsing and formatting, byte for byte.
//!
//! Redis accepts an integer argument or stored value only in its canonical decimal form
//! (`string2ll` in `util.c`): an optional `-`, then digits without leading zeros ("0"
//! alone is fine), nothing else (no spaces, no `+`, not "-0"), at most 20 bytes, inside
//! the i64 range. The same rule decides whether INCR can use a stored value.

/// Longest text `string2ll` looks at: Redis's `LONG_STR_SIZE` (21) less one, enough for
/// "-9223372036854775808".
const I64_TEXT_BYTES_MAX: usize = 20;

/// `text` as an i64 if it is one in Redis's canonical form (`string2ll`), else `None`.
pub(crate) fn parse_i64(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > I64_TEXT_BYTES_MAX {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    // The first digit must be 1-9: this refuses "", "-", "-0", "01" and anything
    // that does not start with a digit.
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    if negative {
        // -(i64::MIN) is i64::MAX + 1: allowed as a magnitude only when negative.
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// A SCAN cursor as Redis reads it (`parseScanCursorOrReply`): C's `strtoul` in base 10
/// over the argument as a C string, refused if it starts with white space, has anything
/// after the digits, or overflows. As with `strtoul`, an optional sign is accepted
/// ("-1" is 2^64 - 1) and the empty string is cursor 0.
pub(crate) fn parse_scan_cursor(text: &[u8]) -> Option<u64> {
    // Redis hands the argument to strtoul as a C string: it ends at the first NUL.
    let text = match memchr::memchr(0, text) {
        Some(end) => &text[..end],
        None => text,
    };
    if text.first().is_some_and(|&byte| is_c_space(byte)) {
        return None;
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        // strtoul found no number: the end pointer is the start of the text, so the
        // text is valid only if it is empty.
        return text.is_empty().then_some(0);
    }
    let mut value: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// C's `isspace` in the C locale.
pub(crate) fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Appends the decimal text of `value` to `out` (no allocation beyond `out`'s growth).
pub(crate) fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

/// Appends the decimal text of `value` to `out`.
pub(crate) fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    // u64::MAX has 20 digits.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// The decimal text of `value`.
pub(crate) fn i64_text(value: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(I64_TEXT_BYTES_MAX);
    write_i64(&mut out, value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_accepts_only_the_canonical_form() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"1"), Some(1));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"1234567890"), Some(1_234_567_890));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"00",
            b"-0",
            b"-01",
            b"1.0",
            b"1e3",
            b"0x10",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"99999999999999999999",
            b"123456789012345678901",
            b"1\0",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn scan_cursor_follows_strtoul() {
        assert_eq!(parse_scan_cursor(b"0"), Some(0));
        assert_eq!(parse_scan_cursor(b"42"), Some(42));
        assert_eq!(parse_scan_cursor(b"007"), Some(7));
        assert_eq!(parse_scan_cursor(b"+5"), Some(5));
        assert_eq!(parse_scan_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_scan_cursor(b""), Some(0));
        assert_eq!(parse_scan_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_scan_cursor(b"5\0junk"), Some(5));
        for bad in [
            &b" 1"[..],
            b"\t1",
            b"1 ",
            b"x",
            b"+",
            b"-",
            b"1x",
            b"18446744073709551616",
        ] {
            assert_eq!(parse_scan_cursor(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_integers() {
        for value in [0, 1, -1, 10, -10, i64::MAX, i64::MIN, 1_000_000] {
            assert_eq!(i64_text(value), value.to_string().into_bytes());
        }
        let mut out = Vec::new();
        write_u64(&mut out, u64::MAX);
        assert_eq!(out, b"18446744073709551615");
    }
}
