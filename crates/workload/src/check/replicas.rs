//! Replicas equal to their primaries: once the cluster is quiet, every backup copy of a
//! key holds the primary's version and value (FaRM's backups apply every committed write).

use ferrotx_store::{Key, TableId};

use crate::history::Row;
use crate::state::{CopyState, StateReader};

/// A copy that differs from its primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The key has no single primary copy.
    NoPrimary {
        /// The key.
        row: Row,
        /// How many copies claim to be primary.
        primaries: usize,
    },
    /// A backup holds another version or value than the primary.
    BackupDiffers {
        /// The key.
        row: Row,
        /// The primary.
        primary: CopyState,
        /// The backup.
        backup: CopyState,
    },
}

/// Compares every backup of every key of `rows` with its primary.
pub fn check(rows: impl IntoIterator<Item = Row>, state: &impl StateReader) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (table, key) in rows {
        check_one(table, key, state, &mut violations);
    }
    violations
}

fn check_one(table: TableId, key: Key, state: &impl StateReader, out: &mut Vec<Violation>) {
    let copies = state.copies(table, &key);
    let primaries: Vec<&CopyState> = copies.iter().filter(|c| c.primary).collect();
    let [primary] = primaries[..] else {
        out.push(Violation::NoPrimary {
            row: (table, key),
            primaries: primaries.len(),
        });
        return;
    };
    for backup in copies.iter().filter(|c| !c.primary) {
        // Absent on both: a tombstone, or no object (reclaimed; it reads at its copy's
        // floor), whose versions differ while reclamation goes round the copies.
        let both_absent = backup.value.is_none() && primary.value.is_none();
        if !both_absent && (backup.version != primary.version || backup.value != primary.value) {
            out.push(Violation::BackupDiffers {
                row: (table, key),
                primary: primary.clone(),
                backup: backup.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(node: u16, primary: bool, version: u64, value: u8) -> CopyState {
        CopyState {
            node,
            primary,
            version,
            value: Some(vec![value; 8]),
        }
    }

    fn row() -> Row {
        (TableId(1), Key::from(3))
    }

    #[test]
    fn equal_copies_pass_and_a_differing_backup_is_reported() {
        let same = |_: TableId, _: &Key| [copy(0, true, 4, 9), copy(1, false, 4, 9)];
        assert!(check([row()], &same).is_empty());
        let behind = |_: TableId, _: &Key| {
            [
                copy(0, true, 4, 9),
                copy(1, false, 4, 9),
                copy(2, false, 3, 8),
            ]
        };
        assert!(matches!(
            &check([row()], &behind)[..],
            [Violation::BackupDiffers { backup, .. }] if backup.node == 2
        ));
        let other_value = |_: TableId, _: &Key| [copy(0, true, 4, 9), copy(1, false, 4, 1)];
        assert_eq!(check([row()], &other_value).len(), 1);
    }

    #[test]
    fn a_key_without_one_primary_is_reported() {
        let two = |_: TableId, _: &Key| [copy(0, true, 4, 9), copy(1, true, 4, 9)];
        assert_eq!(
            check([row()], &two),
            [Violation::NoPrimary {
                row: row(),
                primaries: 2
            }]
        );
    }
}
