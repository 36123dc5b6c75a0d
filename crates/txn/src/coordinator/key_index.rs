//! Where a transaction's keys are among its reads and writes: found by a linear search
//! while it has few, through a hash map once it has many, so that a transaction of n
//! keys (an MGET, MSET or DEL of many keys, a long pipeline, a large MULTI block) costs
//! O(n) lookups in all rather than O(n^2). A Redis client chooses n, up to the
//! million arguments a request may carry.

use std::cell::RefCell;

use ferrotx_store::{Key, TableId};
use foldhash::fast::FixedState;
use hashbrown::HashMap;

use crate::messages::{ReadItem, Write};

/// Reads and writes a transaction searches linearly before it builds its map: a search
/// of this many entries costs about what a hash lookup does, and a small transaction
/// (every TATP, SmallBank or bank transaction, most Redis commands) allocates nothing
/// for it.
const LINEAR_KEYS_MAX: usize = 16;

/// Most entries a coordinator's spare map keeps room for between transactions: enough
/// for a transaction of [`ITEMS_MAX`](crate::messages::ITEMS_MAX) writes and as many
/// reads, so that large transactions in a row reuse one map, while a rare huge one
/// (reads of 100,000 keys) does not pin its memory.
const SPARE_KEYS_MAX: usize = 2 * crate::messages::ITEMS_MAX;

/// No entry: a key read but not written, or written but not read.
const NONE: u32 = u32::MAX;

/// A key's places in `reads` and `writes` ([`NONE`] where it has none).
#[derive(Clone, Copy, Debug)]
struct Slots {
    read: u32,
    write: u32,
}

type KeyMap = HashMap<(TableId, Key), Slots, FixedState>;

/// A coordinator's map kept between transactions (one per worker thread), so that large
/// transactions do not allocate one each.
#[derive(Debug, Default)]
pub(super) struct SpareKeyMap(RefCell<Option<KeyMap>>);

impl SpareKeyMap {
    fn take(&self) -> KeyMap {
        self.0.borrow_mut().take().unwrap_or_default()
    }

    fn give(&self, mut map: KeyMap) {
        if map.capacity() <= SPARE_KEYS_MAX {
            map.clear();
            *self.0.borrow_mut() = Some(map);
        }
    }
}

/// The index of one transaction's reads and writes. Its caller keeps the invariant the
/// index relies on: a key appears at most once among the reads and once among the
/// writes, and entries are only ever pushed (each push reported by
/// [`KeyIndex::read_pushed`] or [`KeyIndex::write_pushed`]).
#[derive(Debug, Default)]
pub(super) struct KeyIndex {
    /// Built once the transaction has more than [`LINEAR_KEYS_MAX`] reads and writes.
    map: Option<KeyMap>,
}

impl KeyIndex {
    /// The place of `key` of `table` in `reads`, if it was read.
    pub fn read(&self, reads: &[ReadItem], table: TableId, key: &Key) -> Option<usize> {
        match &self.map {
            Some(map) => map
                .get(&(table, *key))
                .filter(|slots| slots.read != NONE)
                .map(|slots| slots.read as usize),
            None => reads
                .iter()
                .position(|read| read.table == table && read.key == *key),
        }
    }

    /// The place of `key` of `table` in `writes`, if it was written.
    pub fn write(&self, writes: &[Write], table: TableId, key: &Key) -> Option<usize> {
        match &self.map {
            Some(map) => map
                .get(&(table, *key))
                .filter(|slots| slots.write != NONE)
                .map(|slots| slots.write as usize),
            None => writes
                .iter()
                .position(|write| write.table == table && write.key == *key),
        }
    }

    /// The last of `reads` was just pushed.
    pub fn read_pushed(&mut self, reads: &[ReadItem], writes: &[Write], spare: &SpareKeyMap) {
        let last = reads.last().expect("a read was pushed");
        let place = u32::try_from(reads.len() - 1).expect("fewer than 2^32 reads");
        if let Some(map) = self.map.as_mut() {
            let slots = map.entry((last.table, last.key)).or_insert(Slots {
                read: NONE,
                write: NONE,
            });
            assert_eq!(slots.read, NONE, "a transaction reads a key once");
            slots.read = place;
        } else {
            self.build_if_large(reads, writes, spare);
        }
    }

    /// The last of `writes` was just pushed.
    pub fn write_pushed(&mut self, reads: &[ReadItem], writes: &[Write], spare: &SpareKeyMap) {
        let last = writes.last().expect("a write was pushed");
        let place = u32::try_from(writes.len() - 1).expect("fewer than 2^32 writes");
        if let Some(map) = self.map.as_mut() {
            let slots = map.entry((last.table, last.key)).or_insert(Slots {
                read: NONE,
                write: NONE,
            });
            assert_eq!(slots.write, NONE, "a transaction writes a key once");
            slots.write = place;
        } else {
            self.build_if_large(reads, writes, spare);
        }
    }

    /// Gives the map, if one was built, back to `spare` for the next transaction.
    pub fn recycle(&mut self, spare: &SpareKeyMap) {
        if let Some(map) = self.map.take() {
            spare.give(map);
        }
    }

    fn build_if_large(&mut self, reads: &[ReadItem], writes: &[Write], spare: &SpareKeyMap) {
        if reads.len() + writes.len() <= LINEAR_KEYS_MAX {
            return;
        }
        let mut map = spare.take();
        debug_assert!(map.is_empty(), "a spare map is cleared");
        map.reserve(2 * (reads.len() + writes.len()));
        for (place, read) in reads.iter().enumerate() {
            let old = map.insert(
                (read.table, read.key),
                Slots {
                    read: place as u32,
                    write: NONE,
                },
            );
            assert!(old.is_none(), "a transaction reads a key once");
        }
        for (place, write) in writes.iter().enumerate() {
            let slots = map.entry((write.table, write.key)).or_insert(Slots {
                read: NONE,
                write: NONE,
            });
            assert_eq!(slots.write, NONE, "a transaction writes a key once");
            slots.write = place as u32;
        }
        self.map = Some(map);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: u64) -> ReadItem {
        ReadItem {
            partition: 0,
            table: TableId(1),
            key: Key::from(key),
            version: key,
        }
    }

    fn write(key: u64) -> Write {
        Write {
            partition: 0,
            table: TableId(1),
            key: Key::from(key),
            version: key,
            value: None,
        }
    }

    /// Lookups agree with a linear search before and after the map is built, and the
    /// map goes back to the spare for the next transaction.
    #[test]
    fn finds_every_key_linearly_then_through_its_map() {
        let spare = SpareKeyMap::default();
        let mut index = KeyIndex::default();
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for k in 0..100u64 {
            reads.push(read(k));
            index.read_pushed(&reads, &writes, &spare);
            if k % 3 == 0 {
                writes.push(write(k));
                index.write_pushed(&reads, &writes, &spare);
            }
            if k % 5 == 0 {
                writes.push(write(1000 + k));
                index.write_pushed(&reads, &writes, &spare);
            }
            assert_eq!(
                index.map.is_some(),
                reads.len() + writes.len() > LINEAR_KEYS_MAX
            );
            for j in 0..=k {
                let key = Key::from(j);
                assert_eq!(index.read(&reads, TableId(1), &key), Some(j as usize));
                let written = writes.iter().position(|w| w.key == key);
                assert_eq!(index.write(&writes, TableId(1), &key), written);
                assert_eq!(index.read(&reads, TableId(2), &key), None);
            }
            let other = Key::from(1000 + k);
            assert_eq!(index.read(&reads, TableId(1), &other), None);
        }
        index.recycle(&spare);
        assert!(index.map.is_none());
        let map = spare.take();
        assert!(map.is_empty() && map.capacity() >= 2 * 100);
    }
}
