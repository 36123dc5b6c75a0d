//! No acknowledged write lost: each key's final version at its primary is the highest
//! version a committed transaction installed (or its initial version if none did), or a
//! higher version that an indeterminate transaction may have installed. A key absent at
//! its primary with no object reads at its floor, which may be past every version
//! the key had (ferrotx-txn's `reclaim`): that is fine if its last committed write
//! deleted it (or it never existed).

use std::collections::{BTreeMap, BTreeSet};

use crate::check::serializability::committed_or_proved;
use crate::history::{Outcome, Row, TxnRecord, VERSION_UNKNOWN};
use crate::state::StateReader;

/// A key whose primary lost or invented a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub row: Row,
    /// The primary's version (`None`: no single primary).
    pub primary_version: Option<u64>,
    /// The highest version a committed transaction installed.
    pub highest_committed: u64,
}

/// Checks every key of `rows` and every key the history wrote. `initial_version` gives a
/// key's version before the history (1 for loaded rows, 0 for absent ones).
pub fn check(
    history: &[TxnRecord<Row>],
    rows: impl IntoIterator<Item = Row>,
    initial_version: impl Fn(&Row) -> u64,
    state: &impl StateReader,
) -> Vec<Violation> {
    let proved = committed_or_proved(history);
    let mut highest: BTreeMap<Row, u64> = BTreeMap::new();
    let mut maybe: BTreeSet<(Row, u64)> = BTreeSet::new();
    let mut deleted: BTreeSet<(Row, u64)> = BTreeSet::new();
    for (record, &proved) in history.iter().zip(&proved) {
        if proved {
            deleted.extend(record.deletes.iter().copied());
        }
        for &(row, version) in &record.writes {
            if proved && version != VERSION_UNKNOWN {
                let entry = highest.entry(row).or_insert(0);
                *entry = (*entry).max(version);
            } else if record.outcome() == Outcome::Indeterminate {
                maybe.insert((row, version));
            }
        }
    }
    let mut all: BTreeSet<Row> = rows.into_iter().collect();
    all.extend(highest.keys().copied());
    all.extend(maybe.iter().map(|(row, _)| *row));
    let mut violations = Vec::new();
    for row in all {
        let highest_committed = highest
            .get(&row)
            .copied()
            .unwrap_or(0)
            .max(initial_version(&row));
        let primary = state.primary(row.0, &row.1);
        let primary_version = primary.as_ref().map(|c| c.version);
        let absent = primary.as_ref().is_some_and(|c| c.value.is_none());
        let gone = deleted.contains(&(row, highest_committed))
            || (!highest.contains_key(&row) && initial_version(&row) == 0);
        let fine = match primary_version {
            None => false,
            Some(v) if v == highest_committed => true,
            Some(v) => {
                v > highest_committed
                    && ((absent && gone)
                        || maybe.contains(&(row, v))
                        || maybe.contains(&(row, VERSION_UNKNOWN)))
            }
        };
        if !fine {
            violations.push(Violation {
                row,
                primary_version,
                highest_committed,
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use ferrotx_store::{Key, TableId};

    use super::*;
    use crate::history::END_UNKNOWN;
    use crate::state::CopyState;

    fn x() -> Row {
        (TableId(1), Key::from(7))
    }

    fn record(id: u64, writes: &[(Row, u64)], end_ns: u64) -> TxnRecord<Row> {
        TxnRecord {
            id,
            start_ns: id * 10,
            end_ns,
            committed: end_ns != END_UNKNOWN,
            reads: Vec::new(),
            writes: writes.to_vec(),
            absent: Vec::new(),
            deletes: Vec::new(),
        }
    }

    fn primary_at(version: u64) -> impl Fn(TableId, &Key) -> Vec<CopyState> {
        move |_, _| {
            vec![CopyState {
                node: 0,
                primary: true,
                version,
                value: Some(vec![0; 8]),
            }]
        }
    }

    #[test]
    fn a_primary_behind_the_last_committed_write_lost_it() {
        let history = [record(1, &[(x(), 2)], 15), record(2, &[(x(), 3)], 25)];
        let found = check(&history, [x()], |_| 1, &primary_at(2));
        assert_eq!(
            found,
            [Violation {
                row: x(),
                primary_version: Some(2),
                highest_committed: 3
            }]
        );
        assert!(check(&history, [x()], |_| 1, &primary_at(3)).is_empty());
    }

    #[test]
    fn an_indeterminate_write_may_or_may_not_be_there() {
        let history = [
            record(1, &[(x(), 2)], 15),
            record(2, &[(x(), 3)], END_UNKNOWN),
        ];
        assert!(check(&history, [x()], |_| 1, &primary_at(2)).is_empty());
        assert!(check(&history, [x()], |_| 1, &primary_at(3)).is_empty());
        // But not a version nobody wrote.
        assert_eq!(check(&history, [x()], |_| 1, &primary_at(4)).len(), 1);
    }
}
