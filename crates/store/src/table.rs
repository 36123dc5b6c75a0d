//! Table descriptions.

use crate::error::StoreError;
use crate::key::{KEY_BYTES_MAX, Key};

/// Largest value of any table: 1 MiB (the RESP front end and RAMCloud's latency table need
/// values this large; the RPC layer carries messages up to 1 MiB plus 64 KiB of headers).
pub const VALUE_BYTES_MAX: usize = 1 << 20;

/// A table's number within the cluster's schema.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TableId(pub u16);

/// How large a table's values are.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValueSize {
    /// Every value has exactly this many bytes: the fast path, written in place.
    Fixed(usize),
    /// Values of any size up to this many bytes.
    Variable(usize),
}

/// A table: its id, name, value size, and how its keys are placed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TableSpec {
    /// Its id.
    pub id: TableId,
    /// Its name, for people.
    pub name: String,
    /// Its values' size.
    pub value_size: ValueSize,
    /// The locality hint: if set, a key is placed by its first this many bytes (its
    /// partition key) rather than by all of them, so rows whose keys share that prefix
    /// share a partition, and a transaction over them touches one primary. Every key of
    /// the table must then be at least this long.
    pub partition_key_bytes: Option<u8>,
}

impl TableSpec {
    /// A table of fixed-size values.
    pub fn fixed(id: u16, name: &str, value_bytes: usize) -> Self {
        assert!(value_bytes <= VALUE_BYTES_MAX);
        Self {
            id: TableId(id),
            name: name.to_owned(),
            value_size: ValueSize::Fixed(value_bytes),
            partition_key_bytes: None,
        }
    }

    /// A table of values of up to `max_bytes`.
    pub fn variable(id: u16, name: &str, max_bytes: usize) -> Self {
        assert!(max_bytes <= VALUE_BYTES_MAX);
        Self {
            id: TableId(id),
            name: name.to_owned(),
            value_size: ValueSize::Variable(max_bytes),
            partition_key_bytes: None,
        }
    }

    /// The same table with keys placed by their first `bytes` bytes (see
    /// [`TableSpec::partition_key_bytes`]). Panics unless `bytes` is 1 to `KEY_BYTES_MAX`.
    pub fn with_partition_key(mut self, bytes: usize) -> Self {
        assert!(
            (1..=KEY_BYTES_MAX).contains(&bytes),
            "a partition key has 1 to {KEY_BYTES_MAX} bytes"
        );
        self.partition_key_bytes = Some(bytes as u8);
        self
    }

    /// The bytes of `key` that place it: its partition key if the table has one (all of
    /// `key` if it is shorter, which [`TableSpec::check_key`] refuses), else all of it.
    pub fn partition_key<'k>(&self, key: &'k Key) -> &'k [u8] {
        let bytes = key.as_bytes();
        match self.partition_key_bytes {
            Some(n) => &bytes[..usize::from(n).min(bytes.len())],
            None => bytes,
        }
    }

    /// Checks that `key` may be a key of this table: at least as long as its partition
    /// key.
    pub fn check_key(&self, key: &Key) -> Result<(), StoreError> {
        match self.partition_key_bytes {
            Some(n) if key.as_bytes().len() < usize::from(n) => {
                Err(StoreError::KeyShorterThanPartitionKey {
                    len: key.as_bytes().len(),
                    min: usize::from(n),
                })
            }
            _ => Ok(()),
        }
    }

    /// Checks that `value` may be stored in this table.
    pub fn check_value(&self, value: &[u8]) -> Result<(), StoreError> {
        match self.value_size {
            ValueSize::Fixed(n) if value.len() != n => Err(StoreError::WrongValueSize {
                len: value.len(),
                expected: n,
            }),
            ValueSize::Variable(max) if value.len() > max => Err(StoreError::ValueTooLarge {
                len: value.len(),
                max,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_key_is_a_prefix_of_the_key() {
        let plain = TableSpec::fixed(1, "t", 8);
        let key = Key::from_pair(7, 9);
        assert_eq!(plain.partition_key(&key), key.as_bytes());
        assert_eq!(plain.check_key(&Key::from_bytes(b"").unwrap()), Ok(()));
        let grouped = TableSpec::fixed(2, "rows", 8).with_partition_key(8);
        assert_eq!(grouped.partition_key(&key), &7u64.to_be_bytes());
        assert_eq!(
            grouped.partition_key(&Key::from_pair(7, 10)),
            grouped.partition_key(&key)
        );
        assert_eq!(grouped.check_key(&Key::from(7)), Ok(()));
        assert_eq!(
            grouped.check_key(&Key::from_bytes(b"abc").unwrap()),
            Err(StoreError::KeyShorterThanPartitionKey { len: 3, min: 8 })
        );
    }

    #[test]
    #[should_panic(expected = "a partition key has 1 to 16 bytes")]
    fn a_partition_key_fits_a_key() {
        let _ = TableSpec::fixed(1, "t", 8).with_partition_key(17);
    }
}
