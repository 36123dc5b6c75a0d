//! Redis keys in ferrotx's store: a fixed 16-byte store key, and a stored value that
//! holds the full Redis key and its value.
//!
//! ferrotx's store keys are at most 16 bytes, and Redis keys can be any length, so a
//! Redis key is stored under the 128-bit XXH3 hash of its bytes ([`store_key`]). The
//! hash is fixed forever, as the data depends on it: XXH3-128 (xxHash 0.8's
//! `XXH3_128bits`, seed 0, default secret), written as the 16 bytes of its canonical
//! big-endian form (`XXH128_canonicalFromHash`, the digest `xxhsum -H2` prints). XXH3 is
//! a published, versioned specification with portable results on every platform; the
//! `xxhash-rust` crate implements it in safe Rust, and only its `xxh3` feature is used.
//! It is not a cryptographic hash, which is fine here: 128 bits make an accidental
//! collision practically impossible (about 2^-64 even after 2^32 keys), and a collision
//! is detected, not silently served, because the stored value carries the full key.
//!
//! The stored value ([`encode`], [`encode_expiring`], [`decode`]) starts with a format
//! byte. Format 1, a key without expiry:
//!
//! | bytes | content |
//! | --- | --- |
//! | 1 | format: 1 |
//! | 4 | the Redis key's length, unsigned little-endian |
//! | key length | the Redis key |
//! | the rest | the Redis value |
//!
//! Format 2, a key with an expiry (a TTL), has 8 more bytes after the format byte:
//!
//! | bytes | content |
//! | --- | --- |
//! | 1 | format: 2 |
//! | 8 | the deadline: Unix time in milliseconds, unsigned little-endian |
//! | 4 | the Redis key's length, unsigned little-endian |
//! | key length | the Redis key |
//! | the rest | the Redis value |
//!
//! So a key without expiry costs what it did before expiry existed, and values written
//! in format 1 read as they always did. A key whose deadline is at or before "now" is
//! expired: every command treats it as absent ([`lookup`] reports it as
//! [`Lookup::Expired`]; [`expired`] checks a stored value alone). The deadline is the
//! wall-clock time of the node that ran the command which set it.
//!
//! So SCAN and KEYS return real key names, and a read checks that the stored key is the
//! one asked for ([`Lookup::Collision`] otherwise, which commands answer with
//! "ERR ferrotx key hash collision").

use xxhash_rust::xxh3::xxh3_128;

/// Bytes of a store key.
pub const STORE_KEY_BYTES: usize = 16;

/// The stored value format of a key without expiry.
pub const FORMAT_VERSION: u8 = 1;

/// The stored value format of a key with an expiry (its deadline follows the format
/// byte).
pub const FORMAT_EXPIRING: u8 = 2;

/// Bytes before the Redis key in a stored value without expiry: the format and the
/// key's length.
pub const HEADER_BYTES: usize = 1 + 4;

/// Bytes a deadline adds to a stored value ([`FORMAT_EXPIRING`]).
pub const DEADLINE_BYTES: usize = 8;

/// The reply to a command on a key whose store key holds another Redis key.
pub const COLLISION_ERROR: &str = "ERR ferrotx key hash collision";

/// The store key of the Redis key `key`: its XXH3-128 hash, big-endian.
pub fn store_key(key: &[u8]) -> [u8; STORE_KEY_BYTES] {
    xxh3_128(key).to_be_bytes()
}

/// Bytes of the stored value of `key` holding `value`, without expiry.
pub fn encoded_len(key: &[u8], value: &[u8]) -> usize {
    stored_len(key.len(), value.len(), false)
}

/// Bytes of a stored value of a key of `key_len` bytes holding `value_len` bytes, with a
/// deadline if `expiring`.
pub fn stored_len(key_len: usize, value_len: usize, expiring: bool) -> usize {
    HEADER_BYTES + if expiring { DEADLINE_BYTES } else { 0 } + key_len + value_len
}

/// Appends the stored value of `key` holding `value`, without expiry, to `out`. Panics
/// if the key is 4 GiB or longer (requests are far smaller).
pub fn encode(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_expiring(key, value, None, out);
}

/// Appends the stored value of `key` holding `value` to `out`, expiring at
/// `expires_at_ms` (Unix time in milliseconds) if given. Panics if the key is 4 GiB or
/// longer (requests are far smaller).
pub fn encode_expiring(key: &[u8], value: &[u8], expires_at_ms: Option<u64>, out: &mut Vec<u8>) {
    let key_len = u32::try_from(key.len()).expect("a Redis key shorter than 4 GiB");
    out.reserve(stored_len(key.len(), value.len(), expires_at_ms.is_some()));
    match expires_at_ms {
        None => out.push(FORMAT_VERSION),
        Some(deadline) => {
            out.push(FORMAT_EXPIRING);
            out.extend_from_slice(&deadline.to_le_bytes());
        }
    }
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// True if the stored value `stored` has a deadline at or before `now_ms` (Unix time
/// in milliseconds): the key is expired, absent for every command, and may be deleted.
/// False for a value without expiry and for one that does not decode.
pub fn expired(stored: &[u8], now_ms: u64) -> bool {
    deadline(stored).is_some_and(|deadline| deadline <= now_ms)
}

/// The deadline of a stored value in format 2, if it has one.
fn deadline(stored: &[u8]) -> Option<u64> {
    if stored.first() != Some(&FORMAT_EXPIRING) {
        return None;
    }
    let bytes = stored.get(1..1 + DEADLINE_BYTES)?;
    Some(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

/// A stored value, decoded: views into its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredEntry<'a> {
    /// The full Redis key.
    pub key: &'a [u8],
    /// The Redis value.
    pub value: &'a [u8],
    /// When it expires (Unix time in milliseconds), if it does.
    pub expires_at_ms: Option<u64>,
}

/// A stored value that is not one: a bug or corruption, never a client's doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value is shorter than its header.
    #[error("stored value of {len} bytes is shorter than its {HEADER_BYTES}-byte header")]
    Truncated {
        /// Its length.
        len: usize,
    },
    /// The format version is not one this code reads (written by a newer ferrotx?).
    #[error("stored value has format version {version}; this ferrotx reads versions 1 and 2")]
    UnknownVersion {
        /// The version found.
        version: u8,
    },
    /// The key's length runs past the end of the value.
    #[error("stored value's key length {key_len} runs past its end ({len} bytes)")]
    KeyPastEnd {
        /// The key length read.
        key_len: usize,
        /// The value's length.
        len: usize,
    },
}

/// Decodes a stored value.
pub fn decode(stored: &[u8]) -> Result<StoredEntry<'_>, DecodeError> {
    let (expires_at_ms, header) = match stored.first() {
        None => return Err(DecodeError::Truncated { len: 0 }),
        Some(&FORMAT_VERSION) => (None, HEADER_BYTES),
        Some(&FORMAT_EXPIRING) => (deadline(stored), HEADER_BYTES + DEADLINE_BYTES),
        Some(&version) => return Err(DecodeError::UnknownVersion { version }),
    };
    if stored.len() < header {
        return Err(DecodeError::Truncated { len: stored.len() });
    }
    let key_len = u32::from_le_bytes(stored[header - 4..header].try_into().expect("4 bytes"));
    let key_len = usize::try_from(key_len).expect("u32 fits in usize");
    let rest = &stored[header..];
    if key_len > rest.len() {
        return Err(DecodeError::KeyPastEnd {
            key_len,
            len: stored.len(),
        });
    }
    let (key, value) = rest.split_at(key_len);
    Ok(StoredEntry {
        key,
        value,
        expires_at_ms,
    })
}

/// What reading the Redis key `key` found under its store key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Nothing: the key is absent.
    Absent,
    /// The key's value, live at the time asked about.
    Value {
        /// The value.
        value: &'a [u8],
        /// Its deadline (Unix time in milliseconds), if it has one.
        expires_at_ms: Option<u64>,
    },
    /// The key, stored but expired: absent for every command (a command that writes
    /// may delete it).
    Expired,
    /// Another Redis key with the same hash (practically impossible).
    Collision,
}

/// Checks what was read under `key`'s store key at `now_ms` (Unix time in
/// milliseconds): absent, `key`'s own value, `key` expired, or another key's.
pub fn lookup<'a>(
    key: &[u8],
    stored: Option<&'a [u8]>,
    now_ms: u64,
) -> Result<Lookup<'a>, DecodeError> {
    let Some(stored) = stored else {
        return Ok(Lookup::Absent);
    };
    let entry = decode(stored)?;
    Ok(if entry.key != key {
        Lookup::Collision
    } else if entry
        .expires_at_ms
        .is_some_and(|deadline| deadline <= now_ms)
    {
        Lookup::Expired
    } else {
        Lookup::Value {
            value: entry.value,
            expires_at_ms: entry.expires_at_ms,
        }
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn store_keys_are_xxh3_128_canonical_digests() {
        // Reference digests from the xxHash reference implementation (python-xxhash's
        // xxh3_128().hexdigest(), the canonical big-endian form).
        for (key, digest) in [
            (&b""[..], "99aa06d3014798d86001c324468d497f"),
            (b"a", "a96faf705af16834e6c632b61e964e1f"),
            (b"foo", "79aef92e83454121ab6e5f64077e7d8a"),
            (b"hello world", "df8d09e93f874900a99b8775cc15b6c7"),
        ] {
            assert_eq!(hex(&store_key(key)), digest, "{key:?}");
        }
        let all_bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(
            hex(&store_key(&all_bytes)),
            "f1f8a93f50849ac39408a4433b952d71"
        );
    }

    #[test]
    fn encoding_is_the_documented_layout() {
        let mut out = Vec::new();
        encode(b"key", b"value", &mut out);
        assert_eq!(out, b"\x01\x03\x00\x00\x00keyvalue");
        assert_eq!(out.len(), encoded_len(b"key", b"value"));
        assert_eq!(
            decode(&out),
            Ok(StoredEntry {
                key: b"key",
                value: b"value",
                expires_at_ms: None,
            })
        );
        let mut expiring = Vec::new();
        encode_expiring(b"key", b"value", Some(0x0102_0304_0506_0708), &mut expiring);
        assert_eq!(
            expiring,
            b"\x02\x08\x07\x06\x05\x04\x03\x02\x01\x03\x00\x00\x00keyvalue"
        );
        assert_eq!(expiring.len(), stored_len(3, 5, true));
        assert_eq!(
            decode(&expiring),
            Ok(StoredEntry {
                key: b"key",
                value: b"value",
                expires_at_ms: Some(0x0102_0304_0506_0708),
            })
        );
        // Without a deadline, the encoding is format 1, byte for byte.
        let mut plain = Vec::new();
        encode_expiring(b"key", b"value", None, &mut plain);
        assert_eq!(plain, out);
    }

    #[test]
    fn expired_compares_the_deadline_with_now() {
        let mut stored = Vec::new();
        encode_expiring(b"k", b"v", Some(1_000), &mut stored);
        assert!(!expired(&stored, 999));
        assert!(expired(&stored, 1_000));
        assert!(expired(&stored, 1_001));
        let mut plain = Vec::new();
        encode(b"k", b"v", &mut plain);
        assert!(!expired(&plain, u64::MAX));
        // Not a stored value: never expired.
        assert!(!expired(b"", 5));
        assert!(!expired(b"\x02\x01", u64::MAX));
    }

    #[test]
    fn bad_stored_values() {
        assert_eq!(decode(b""), Err(DecodeError::Truncated { len: 0 }));
        assert_eq!(
            decode(b"\x01\x00\x00"),
            Err(DecodeError::Truncated { len: 3 })
        );
        assert_eq!(
            decode(b"\x03\x00\x00\x00\x00"),
            Err(DecodeError::UnknownVersion { version: 3 })
        );
        assert_eq!(
            decode(b"\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
            Err(DecodeError::Truncated { len: 11 })
        );
        assert_eq!(
            decode(b"\x01\x05\x00\x00\x00abc"),
            Err(DecodeError::KeyPastEnd { key_len: 5, len: 8 })
        );
        // An empty key and an empty value are fine.
        assert_eq!(
            decode(b"\x01\x00\x00\x00\x00"),
            Ok(StoredEntry {
                key: b"",
                value: b"",
                expires_at_ms: None,
            })
        );
    }

    #[test]
    fn lookups() {
        let mut stored = Vec::new();
        encode(b"k", b"v", &mut stored);
        let value = |deadline| {
            Ok(Lookup::Value {
                value: b"v",
                expires_at_ms: deadline,
            })
        };
        assert_eq!(lookup(b"k", None, 0), Ok(Lookup::Absent));
        assert_eq!(lookup(b"k", Some(&stored), 0), value(None));
        assert_eq!(lookup(b"other", Some(&stored), 0), Ok(Lookup::Collision));
        assert!(lookup(b"k", Some(b"\x07"), 0).is_err());
        let mut expiring = Vec::new();
        encode_expiring(b"k", b"v", Some(50), &mut expiring);
        assert_eq!(lookup(b"k", Some(&expiring), 49), value(Some(50)));
        assert_eq!(lookup(b"k", Some(&expiring), 50), Ok(Lookup::Expired));
        assert_eq!(lookup(b"x", Some(&expiring), 50), Ok(Lookup::Collision));
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(
            key in prop::collection::vec(any::<u8>(), 0..300),
            value in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut out = vec![0xAA];
            encode(&key, &value, &mut out);
            prop_assert_eq!(out.len(), 1 + encoded_len(&key, &value));
            let entry = decode(&out[1..]).unwrap();
            prop_assert_eq!(entry.key, &key[..]);
            prop_assert_eq!(entry.value, &value[..]);
            prop_assert_eq!(
                lookup(&key, Some(&out[1..]), 0).unwrap(),
                Lookup::Value { value: &value[..], expires_at_ms: None }
            );
        }

        #[test]
        fn expiring_values_round_trip(
            key in prop::collection::vec(any::<u8>(), 0..100),
            value in prop::collection::vec(any::<u8>(), 0..100),
            deadline in any::<u64>(),
        ) {
            let mut out = Vec::new();
            encode_expiring(&key, &value, Some(deadline), &mut out);
            prop_assert_eq!(out.len(), stored_len(key.len(), value.len(), true));
            let entry = decode(&out).unwrap();
            prop_assert_eq!(entry.key, &key[..]);
            prop_assert_eq!(entry.value, &value[..]);
            prop_assert_eq!(entry.expires_at_ms, Some(deadline));
            prop_assert!(expired(&out, deadline));
            prop_assert_eq!(expired(&out, deadline.saturating_sub(1)), deadline == 0);
        }

        #[test]
        fn distinct_keys_get_distinct_store_keys(
            a in prop::collection::vec(any::<u8>(), 0..64),
            b in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(store_key(&a), store_key(&b));
        }
    }
}
