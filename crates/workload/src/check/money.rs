//! Money conserved (the bank and SmallBank): the total of every balance at the end is the
//! initial total plus the money committed transactions created (SmallBank's deposits and
//! checks; nothing for the bank), plus that of any subset of the indeterminate ones; and
//! every committed audit saw the initial total.

use std::collections::BTreeSet;

use crate::check::serializability::committed_or_proved;
use crate::history::{History, Note, Outcome, Row};
use crate::state::StateReader;

/// Indeterminate money-moving transactions beyond which the possible totals are checked
/// as a range rather than enumerated (each one doubles the sums to enumerate).
const ENUMERATED_SUMS_MAX: usize = 4096;

/// Money created or destroyed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The final total is none of the possible ones.
    Total {
        /// The total found.
        found: i128,
        /// The least and the greatest possible total.
        possible: (i128, i128),
    },
    /// A balance could not be read at its primary.
    Unreadable {
        /// The key.
        row: Row,
    },
    /// A committed audit saw another total.
    Audit {
        /// Its record id.
        id: u64,
        /// What it saw.
        total: i128,
        /// What it should have seen.
        expected: i128,
    },
}

/// Every committed audit ([`Note::Total`]) saw `expected`.
pub fn audits(history: &History, expected: i128) -> Vec<Violation> {
    history
        .notes_of(Outcome::Committed)
        .filter_map(|(index, note)| match note {
            Note::Total(total) if total != expected => Some(Violation::Audit {
                id: history.records[index].id,
                total,
                expected,
            }),
            _ => None,
        })
        .collect()
}

/// The total of the balances (the first 8 bytes of each value, little-endian, signed if
/// `signed`) of `rows` at their primaries is `initial` plus the [`Note::Money`] of the
/// transactions that committed, and of any subset of the indeterminate ones.
pub fn conserved(
    history: &History,
    initial: i128,
    rows: impl IntoIterator<Item = Row>,
    signed: bool,
    state: &impl StateReader,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut found = 0i128;
    for row in rows {
        let balance = state
            .primary(row.0, &row.1)
            .and_then(|c| c.value)
            .and_then(|v| v.get(..8).map(|b| <[u8; 8]>::try_from(b).expect("8 bytes")));
        match balance {
            Some(bytes) if signed => found += i128::from(i64::from_le_bytes(bytes)),
            Some(bytes) => found += i128::from(u64::from_le_bytes(bytes)),
            None => violations.push(Violation::Unreadable { row }),
        }
    }
    let proved = committed_or_proved(&history.records);
    let mut sure = initial;
    let mut maybe = Vec::new();
    for &(index, note) in &history.notes {
        if let Note::Money(money) = note {
            if proved[index] {
                sure += i128::from(money);
            } else if history.records[index].outcome() == Outcome::Indeterminate {
                maybe.push(i128::from(money));
            }
        }
    }
    let low = sure + maybe.iter().filter(|m| **m < 0).sum::<i128>();
    let high = sure + maybe.iter().filter(|m| **m > 0).sum::<i128>();
    if !possible_sums(sure, &maybe).is_none_or(|sums| sums.contains(&found))
        || !(low..=high).contains(&found)
    {
        violations.push(Violation::Total {
            found,
            possible: (low, high),
        });
    }
    violations
}

/// Every total `base` plus a subset of `maybe` can make, or `None` when there are too
/// many to list.
fn possible_sums(base: i128, maybe: &[i128]) -> Option<BTreeSet<i128>> {
    let mut sums = BTreeSet::from([base]);
    for &m in maybe {
        let more: Vec<i128> = sums.iter().map(|s| s + m).collect();
        sums.extend(more);
        if sums.len() > ENUMERATED_SUMS_MAX {
            return None;
        }
    }
    Some(sums)
}

#[cfg(test)]
mod tests {
    use ferrotx_store::{Key, TableId};

    use super::*;
    use crate::state::CopyState;

    fn rows() -> [Row; 2] {
        [(TableId(1), Key::from(0)), (TableId(1), Key::from(1))]
    }

    /// Balances of 50 and `second`.
    fn balances(second: i64) -> impl Fn(TableId, &Key) -> Vec<CopyState> {
        move |_, key| {
            let balance = if *key == Key::from(0) { 50 } else { second };
            vec![CopyState {
                node: 0,
                primary: true,
                version: 2,
                value: Some(balance.to_le_bytes().to_vec()),
            }]
        }
    }

    /// A history of one transaction creating `money`, with `outcome`.
    fn moving(money: i64, outcome: Outcome) -> History {
        let mut history = History::new();
        let index = history.open();
        history.notes.push((index, Note::Money(money)));
        history.close(index, outcome);
        history
    }

    #[test]
    fn money_created_is_reported() {
        let history = History::new();
        assert!(conserved(&history, 100, rows(), true, &balances(50)).is_empty());
        assert_eq!(
            conserved(&history, 100, rows(), true, &balances(51)),
            [Violation::Total {
                found: 101,
                possible: (100, 100)
            }]
        );
    }

    #[test]
    fn committed_deposits_count_and_indeterminate_ones_may() {
        let committed = moving(5, Outcome::Committed);
        assert!(conserved(&committed, 95, rows(), true, &balances(50)).is_empty());
        let aborted = moving(5, Outcome::Aborted);
        assert_eq!(
            conserved(&aborted, 95, rows(), true, &balances(50)).len(),
            1
        );
        let unknown = moving(5, Outcome::Indeterminate);
        assert!(conserved(&unknown, 95, rows(), true, &balances(50)).is_empty());
        assert!(conserved(&unknown, 100, rows(), true, &balances(50)).is_empty());
        assert_eq!(
            conserved(&unknown, 97, rows(), true, &balances(50)).len(),
            1
        );
    }

    #[test]
    fn an_audit_that_saw_another_total_is_reported_once_committed() {
        let mut history = History::new();
        for (total, outcome) in [
            (100, Outcome::Committed),
            (99, Outcome::Aborted),
            (98, Outcome::Committed),
        ] {
            let index = history.open();
            history.notes.push((index, Note::Total(total)));
            history.close(index, outcome);
        }
        assert_eq!(
            audits(&history, 100),
            [Violation::Audit {
                id: 2,
                total: 98,
                expected: 100
            }]
        );
    }
}
