//! Redis's glob-style pattern matching (`stringmatchlen` in `util.c`), for SCAN's MATCH
//! option and KEYS.
//!
//! - `*` matches any sequence of bytes, the empty one included;
//! - `?` matches any one byte;
//! - `[abc]` matches one of the bytes listed, `[^abc]` one byte not listed, `[a-z]` one
//!   byte in the range (either order: `[z-a]` is the same), and `\` inside brackets makes
//!   the next byte literal; an unterminated `[` ends at the pattern's end;
//! - `\x` matches `x` literally (a `\` at the pattern's end matches a `\`).
//!
//! Bytes are compared as C's signed `char`, as Redis does on x86-64 and arm64 Linux: in
//! a range, bytes 0x80 to 0xff sort before 0x00.
//!
//! The one difference from Redis 7.0: a pattern with more than [`STAR_NESTING_MAX`]
//! stars that must be tried in turn matches nothing (as in Redis 7.2 and later) rather
//! than recursing without bound, which here could overflow a thread's stack.

/// Most nested `*` a match follows before giving up (Redis 7.2's limit).
pub const STAR_NESTING_MAX: u32 = 1000;

/// True if `string` matches `pattern`, bytes compared exactly.
pub fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut matcher = Matcher {
        pattern,
        string,
        nocase: false,
        skip_longer_matches: false,
    };
    matcher.matches_from(0, 0, 0)
}

/// True if `string` matches `pattern`, ASCII letters compared without case (Redis's
/// `nocase` mode, used for option names).
pub fn matches_nocase(pattern: &[u8], string: &[u8]) -> bool {
    let mut matcher = Matcher {
        pattern,
        string,
        nocase: true,
        skip_longer_matches: false,
    };
    matcher.matches_from(0, 0, 0)
}

struct Matcher<'a> {
    pattern: &'a [u8],
    string: &'a [u8],
    nocase: bool,
    /// Set once the rest of the pattern after some `*` matched nowhere in the rest of
    /// the string: no earlier `*` can then help by matching more (Redis's
    /// `skipLongerMatches`), which keeps matching polynomial.
    skip_longer_matches: bool,
}

impl Matcher<'_> {
    /// The pattern's byte at `index`, or NUL past its end, as C reads the terminator.
    fn pattern_at(&self, index: usize) -> u8 {
        self.pattern.get(index).copied().unwrap_or(0)
    }

    /// Whether `string[s..]` matches `pattern[p..]`; `depth` counts the stars followed.
    fn matches_from(&mut self, mut p: usize, mut s: usize, depth: u32) -> bool {
        if depth > STAR_NESTING_MAX {
            return false;
        }
        while p < self.pattern.len() && s < self.string.len() {
            match self.pattern[p] {
                b'*' => {
                    while self.pattern_at(p + 1) == b'*' {
                        p += 1;
                    }
                    if p + 1 == self.pattern.len() {
                        return true;
                    }
                    while s < self.string.len() {
                        if self.matches_from(p + 1, s, depth + 1) {
                            return true;
                        }
                        if self.skip_longer_matches {
                            return false;
                        }
                        s += 1;
                    }
                    self.skip_longer_matches = true;
                    return false;
                }
                b'?' => s += 1,
                b'[' => {
                    p += 1;
                    let negated = self.pattern_at(p) == b'^';
                    if negated {
                        p += 1;
                    }
                    let byte = self.string[s];
                    let mut matched = false;
                    loop {
                        let left = self.pattern.len() - p;
                        if self.pattern_at(p) == b'\\' && left >= 2 {
                            p += 1;
                            if self.pattern[p] == byte {
                                matched = true;
                            }
                        } else if self.pattern_at(p) == b']' {
                            break;
                        } else if left == 0 {
                            // Unterminated: step back so that the step below ends the
                            // pattern.
                            p -= 1;
                            break;
                        } else if left >= 3 && self.pattern[p + 1] == b'-' {
                            let mut start = signed(self.pattern[p]);
                            let mut end = signed(self.pattern[p + 2]);
                            let mut value = signed(byte);
                            if start > end {
                                std::mem::swap(&mut start, &mut end);
                            }
                            if self.nocase {
                                start = lower(start);
                                end = lower(end);
                                value = lower(value);
                            }
                            p += 2;
                            if start <= value && value <= end {
                                matched = true;
                            }
                        } else if self.same(self.pattern[p], byte) {
                            matched = true;
                        }
                        p += 1;
                    }
                    if negated {
                        matched = !matched;
                    }
                    if !matched {
                        return false;
                    }
                    s += 1;
                }
                literal => {
                    let literal = if literal == b'\\' && self.pattern.len() - p >= 2 {
                        p += 1;
                        self.pattern[p]
                    } else {
                        literal
                    };
                    if !self.same(literal, self.string[s]) {
                        return false;
                    }
                    s += 1;
                }
            }
            p += 1;
            if s == self.string.len() {
                while self.pattern_at(p) == b'*' {
                    p += 1;
                }
                break;
            }
        }
        p == self.pattern.len() && s == self.string.len()
    }

    /// Whether two bytes are equal (without case in nocase mode).
    fn same(&self, a: u8, b: u8) -> bool {
        if self.nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    }
}

/// A byte as C's signed `char`, widened.
fn signed(byte: u8) -> i32 {
    i32::from(byte as i8)
}

/// C's `tolower` in the C locale on a widened `char`.
fn lower(value: i32) -> i32 {
    if (i32::from(b'A')..=i32::from(b'Z')).contains(&value) {
        value + 32
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, string: &str, expected: bool) {
        assert_eq!(
            matches(pattern.as_bytes(), string.as_bytes()),
            expected,
            "{pattern:?} against {string:?}"
        );
    }

    #[test]
    fn redis_documented_examples() {
        // The KEYS documentation's examples.
        for (pattern, yes, no) in [
            (
                "h?llo",
                &["hello", "hallo", "hxllo"][..],
                &["hllo", "heello"][..],
            ),
            ("h*llo", &["hllo", "heeeello", "hello"], &["hell", "hlo"]),
            ("h[ae]llo", &["hello", "hallo"], &["hillo", "hllo"]),
            ("h[^e]llo", &["hallo", "hbllo"], &["hello", "hllo"]),
            ("h[a-b]llo", &["hallo", "hbllo"], &["hcllo", "hello"]),
        ] {
            for string in yes {
                check(pattern, string, true);
            }
            for string in no {
                check(pattern, string, false);
            }
        }
    }

    #[test]
    fn stars() {
        // Redis matches nothing against an empty string but an empty pattern (KEYS *
        // and SCAN MATCH * do not match at all: every key is listed).
        check("*", "", false);
        check("**", "", false);
        check("*", "anything", true);
        check("a*", "a", true);
        check("a*", "", false);
        check("*a", "ba", true);
        check("*a", "ab", false);
        check("a*b*c", "aXbYc", true);
        check("a*b*c", "abc", true);
        check("a*b*c", "acb", false);
        check("a**b", "ab", true);
        check("user:*:name", "user:42:name", true);
        check("user:*:name", "user:42:email", false);
        check("", "", true);
        check("", "a", false);
    }

    #[test]
    fn question_marks() {
        check("?", "", false);
        check("?", "a", true);
        check("??", "a", false);
        check("a?c", "abc", true);
        check("*?", "", false);
    }

    #[test]
    fn brackets() {
        check("[abc]", "b", true);
        check("[abc]", "d", false);
        check("[^abc]", "d", true);
        check("[^abc]", "a", false);
        check("[a-c]", "b", true);
        check("[c-a]", "b", true);
        check("[a-c]", "d", false);
        // "a-]" is a range up to ']' (and the bracket is then unterminated).
        check("[a-]", "-", false);
        check("[a-]", "b", false);
        check("[a-]", "_", true);
        check("[-a]", "-", true);
        check("[\\]]", "]", true);
        check("[\\-]", "-", true);
        check("[]a]", "a", false);
        check("[]", "a", false);
        // An unterminated bracket takes the rest of the pattern.
        check("[abc", "b", true);
        check("[abc", "bc", false);
        check("x[", "xy", false);
        check("x[^", "xy", true);
        check("[a-z0-9]x", "5x", true);
    }

    #[test]
    fn escapes() {
        check("\\*", "*", true);
        check("\\*", "a", false);
        check("\\?", "?", true);
        check("\\[a]", "[a]", true);
        check("a\\", "a\\", true);
        check("\\\\", "\\", true);
    }

    #[test]
    fn case() {
        check("HELLO", "hello", false);
        assert!(matches_nocase(b"HELLO", b"hello"));
        assert!(matches_nocase(b"h[A-C]llo", b"hbllo"));
        assert!(matches_nocase(b"h[b]llo", b"hBllo"));
    }

    #[test]
    fn binary_bytes() {
        assert!(matches(b"a\0*", b"a\0b"));
        assert!(matches(b"?", b"\xff"));
        // As signed chars, 0xff (-1) lies between 0x80 (-128) and 'a'.
        assert!(matches(b"[\x80-a]", b"\xff"));
        assert!(matches(b"[\x80-a]", b"\0"));
        assert!(!matches(b"[\x80-a]", b"b"));
        assert!(matches(b"[a-\xff]", b"\0"));
        assert!(!matches(b"[a-\xff]", b"b"));
    }

    #[test]
    fn many_stars_stay_fast() {
        // Exponential without the skip: 30 stars against 60 bytes that never match.
        let pattern = "a*".repeat(30) + "b";
        let string = "a".repeat(60);
        check(&pattern, &string, false);
    }

    #[test]
    fn deep_nesting_gives_up() {
        let pattern = "a*".repeat(STAR_NESTING_MAX as usize + 10);
        let string = "a".repeat(STAR_NESTING_MAX as usize + 10);
        check(&pattern, &string, false);
        let shallow = "a*".repeat(100);
        check(&shallow, &"a".repeat(100), true);
    }
}
