//! Table descriptions.

use crate::error::StoreError;

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

/// A table: its id, name and value size.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TableSpec {
    /// Its id.
    pub id: TableId,
    /// Its name, for people.
    pub name: String,
    /// Its values' size.
    pub value_size: ValueSize,
}

impl TableSpec {
    /// A table of fixed-size values.
    pub fn fixed(id: u16, name: &str, value_bytes: usize) -> Self {
        assert!(value_bytes <= VALUE_BYTES_MAX);
        Self {
            id: TableId(id),
            name: name.to_owned(),
            value_size: ValueSize::Fixed(value_bytes),
        }
    }

    /// A table of values of up to `max_bytes`.
    pub fn variable(id: u16, name: &str, max_bytes: usize) -> Self {
        assert!(max_bytes <= VALUE_BYTES_MAX);
        Self {
            id: TableId(id),
            name: name.to_owned(),
            value_size: ValueSize::Variable(max_bytes),
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

    /// Bytes to reserve for a new object's value.
    pub(crate) fn initial_capacity(&self) -> usize {
        match self.value_size {
            ValueSize::Fixed(n) => n,
            ValueSize::Variable(_) => 0,
        }
    }
}
