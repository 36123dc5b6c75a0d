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
//! The stored value ([`encode`], [`decode`]), format version 1:
//!
//! | bytes | content |
//! | --- | --- |
//! | 1 | format version: 1 |
//! | 4 | the Redis key's length, unsigned little-endian |
//! | key length | the Redis key |
//! | the rest | the Redis value |
//!
//! So SCAN and KEYS return real key names, and a read checks that the stored key is the
//! one asked for ([`Lookup::Collision`] otherwise, which commands answer with
//! "ERR ferrotx key hash collision").

use xxhash_rust::xxh3::xxh3_128;

/// Bytes of a store key.
pub const STORE_KEY_BYTES: usize = 16;

/// The stored value format this version writes.
pub const FORMAT_VERSION: u8 = 1;

/// Bytes before the Redis key in a stored value: the version and the key's length.
pub const HEADER_BYTES: usize = 1 + 4;

/// The reply to a command on a key whose store key holds another Redis key.
pub const COLLISION_ERROR: &str = "ERR ferrotx key hash collision";

/// The store key of the Redis key `key`: its XXH3-128 hash, big-endian.
pub fn store_key(key: &[u8]) -> [u8; STORE_KEY_BYTES] {
    xxh3_128(key).to_be_bytes()
}

/// Bytes of the stored value of `key` holding `value`.
pub fn encoded_len(key: &[u8], value: &[u8]) -> usize {
    HEADER_BYTES + key.len() + value.len()
}

/// Appends the stored value of `key` holding `value` to `out`. Panics if the key is
/// 4 GiB or longer (requests are far smaller).
pub fn encode(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let key_len = u32::try_from(key.len()).expect("a Redis key shorter than 4 GiB");
    out.reserve(encoded_len(key, value));
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A stored value, decoded: views into its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredEntry<'a> {
    /// The full Redis key.
    pub key: &'a [u8],
    /// The Redis value.
    pub value: &'a [u8],
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
    #[error("stored value has format version {version}; this ferrotx reads version 1")]
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
    if stored.len() < HEADER_BYTES {
        return Err(DecodeError::Truncated { len: stored.len() });
    }
    if stored[0] != FORMAT_VERSION {
        return Err(DecodeError::UnknownVersion { version: stored[0] });
    }
    let key_len = u32::from_le_bytes(stored[1..HEADER_BYTES].try_into().expect("4 bytes"));
    let key_len = usize::try_from(key_len).expect("u32 fits in usize");
    let rest = &stored[HEADER_BYTES..];
    if key_len > rest.len() {
        return Err(DecodeError::KeyPastEnd {
            key_len,
            len: stored.len(),
        });
    }
    let (key, value) = rest.split_at(key_len);
    Ok(StoredEntry { key, value })
}

/// What reading the Redis key `key` found under its store key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Nothing: the key is absent.
    Absent,
    /// The key's value.
    Value(&'a [u8]),
    /// Another Redis key with the same hash (practically impossible).
    Collision,
}

/// Checks what was read under `key`'s store key: absent, `key`'s own value, or another
/// key's.
pub fn lookup<'a>(key: &[u8], stored: Option<&'a [u8]>) -> Result<Lookup<'a>, DecodeError> {
    let Some(stored) = stored else {
        return Ok(Lookup::Absent);
    };
    let entry = decode(stored)?;
    Ok(if entry.key == key {
        Lookup::Value(entry.value)
    } else {
        Lookup::Collision
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
                value: b"value"
            })
        );
    }

    #[test]
    fn bad_stored_values() {
        assert_eq!(decode(b""), Err(DecodeError::Truncated { len: 0 }));
        assert_eq!(
            decode(b"\x01\x00\x00"),
            Err(DecodeError::Truncated { len: 3 })
        );
        assert_eq!(
            decode(b"\x02\x00\x00\x00\x00"),
            Err(DecodeError::UnknownVersion { version: 2 })
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
                value: b""
            })
        );
    }

    #[test]
    fn lookups() {
        let mut stored = Vec::new();
        encode(b"k", b"v", &mut stored);
        assert_eq!(lookup(b"k", None), Ok(Lookup::Absent));
        assert_eq!(lookup(b"k", Some(&stored)), Ok(Lookup::Value(b"v")));
        assert_eq!(lookup(b"other", Some(&stored)), Ok(Lookup::Collision));
        assert!(lookup(b"k", Some(b"\x07")).is_err());
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
            prop_assert_eq!(lookup(&key, Some(&out[1..])).unwrap(), Lookup::Value(&value[..]));
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
