//! Keys: up to 16 bytes, stored inline.

use crate::error::StoreError;

/// Longest key: 16 bytes holds a u64 id, or two (a partition key and a row key, as TATP's
/// subscriber and call-forwarding ids), inline, with no allocation per key.
pub const KEY_BYTES_MAX: usize = 16;

/// A key of a table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    len: u8,
    bytes: [u8; KEY_BYTES_MAX],
}

impl Key {
    /// A key of `bytes`, at most `KEY_BYTES_MAX` long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        if bytes.len() > KEY_BYTES_MAX {
            return Err(StoreError::KeyTooLong {
                len: bytes.len(),
                max: KEY_BYTES_MAX,
            });
        }
        let mut key = Self {
            len: bytes.len() as u8,
            bytes: [0; KEY_BYTES_MAX],
        };
        key.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(key)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Key {
    /// The key as a record stores it: its length, and its bytes (zero past the length) in
    /// two words.
    pub(crate) fn to_words(self) -> (usize, [u64; 2]) {
        let (first, second) = self.bytes.split_at(8);
        (
            usize::from(self.len),
            [
                u64::from_le_bytes(first.try_into().expect("8 bytes")),
                u64::from_le_bytes(second.try_into().expect("8 bytes")),
            ],
        )
    }

    /// The key a record stores as [`Key::to_words`] gave them (`len` at most 16).
    pub(crate) fn from_words(len: usize, words: [u64; 2]) -> Self {
        let mut bytes = [0; KEY_BYTES_MAX];
        bytes[..8].copy_from_slice(&words[0].to_le_bytes());
        bytes[8..].copy_from_slice(&words[1].to_le_bytes());
        Self {
            len: len.min(KEY_BYTES_MAX) as u8,
            bytes,
        }
    }

    /// The 16 big-endian bytes of `partition` then `row`: with a table whose partition key
    /// is 8 bytes (`TableSpec::with_partition_key(8)`), the rows of one `partition` share
    /// a partition.
    pub fn from_pair(partition: u64, row: u64) -> Self {
        let mut bytes = [0; KEY_BYTES_MAX];
        bytes[..8].copy_from_slice(&partition.to_be_bytes());
        bytes[8..].copy_from_slice(&row.to_be_bytes());
        Self {
            len: KEY_BYTES_MAX as u8,
            bytes,
        }
    }
}

impl From<u64> for Key {
    /// The 8 big-endian bytes of `id` (so keys sort as their numbers).
    fn from(id: u64) -> Self {
        Self::from_bytes(&id.to_be_bytes()).expect("8 bytes fit")
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.len == 8 {
            let id = u64::from_be_bytes(self.bytes[..8].try_into().expect("8 bytes"));
            write!(f, "Key({id})")
        } else {
            write!(f, "Key({:02x?})", self.as_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_up_to_sixteen_bytes() {
        assert_eq!(Key::from(7).as_bytes(), &7u64.to_be_bytes());
        assert_eq!(Key::from_bytes(b"").unwrap().as_bytes(), b"");
        assert!(Key::from_bytes(&[1; 16]).is_ok());
        assert_eq!(
            Key::from_bytes(&[1; 17]),
            Err(StoreError::KeyTooLong { len: 17, max: 16 })
        );
        assert_ne!(
            Key::from_bytes(b"a").unwrap(),
            Key::from_bytes(b"a\0").unwrap()
        );
        assert!(Key::from(1) < Key::from(256));
        let pair = Key::from_pair(3, 4);
        assert_eq!(&pair.as_bytes()[..8], &3u64.to_be_bytes());
        assert_eq!(&pair.as_bytes()[8..], &4u64.to_be_bytes());
        for key in [
            pair,
            Key::from(9),
            Key::from_bytes(b"").unwrap(),
            Key::from_bytes(b"abc").unwrap(),
        ] {
            let (len, words) = key.to_words();
            assert_eq!(Key::from_words(len, words), key);
        }
    }
}
