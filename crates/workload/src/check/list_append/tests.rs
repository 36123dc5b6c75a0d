use proptest::prelude::*;

use super::*;

const X: ListKey = 1;
const Y: ListKey = 2;

fn append(key: ListKey, element: Element) -> MicroOp {
    MicroOp::Append { key, element }
}

fn read(key: ListKey, list: &[Element]) -> MicroOp {
    MicroOp::Read {
        key,
        list: Some(list.to_vec()),
    }
}

fn txn(id: u64, span: (u64, u64), ops: Vec<MicroOp>) -> Transaction {
    Transaction {
        id,
        start: span.0,
        end: span.1,
        outcome: Outcome::Committed,
        ops,
    }
}

fn with(outcome: Outcome, mut t: Transaction) -> Transaction {
    t.outcome = outcome;
    t
}

fn finals(reads: &[(ListKey, &[Element])]) -> BTreeMap<ListKey, Vec<Element>> {
    reads.iter().map(|(k, l)| (*k, l.to_vec())).collect()
}

fn names(history: &[Transaction], final_reads: &BTreeMap<ListKey, Vec<Element>>) -> Vec<String> {
    let violations = check(history, final_reads);
    for v in &violations {
        // Every report must format.
        assert!(!v.to_string().is_empty());
    }
    violations.iter().map(Violation::name).collect()
}

#[test]
fn a_serial_history_passes() {
    let h = [
        txn(1, (0, 10), vec![read(X, &[]), append(X, 1)]),
        txn(2, (20, 30), vec![read(X, &[1]), append(Y, 2), append(X, 3)]),
        txn(3, (40, 50), vec![read(X, &[1, 3]), read(Y, &[2])]),
    ];
    assert_eq!(
        names(&h, &finals(&[(X, &[1, 3]), (Y, &[2])])),
        Vec::<String>::new()
    );
}

#[test]
fn overlapping_transactions_may_see_older_lists() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (5, 15), vec![read(X, &[])]),
    ];
    assert!(names(&h, &finals(&[(X, &[1])])).is_empty());
}

#[test]
fn a_stale_read_after_an_acknowledged_append_is_g_single_item_realtime() {
    // T1's append was acknowledged before T2 started, yet T2 missed it.
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![read(X, &[])]),
    ];
    let violations = check(&h, &finals(&[(X, &[1])]));
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].name(), "G-single-item-realtime");
    assert_eq!(
        violations[0].to_string(),
        "G-single-item-realtime: T2 -rw(1)-> T1 -rt-> T2"
    );
    // One event later is concurrent, and allowed.
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (10, 30), vec![read(X, &[])]),
    ];
    assert!(names(&h, &finals(&[(X, &[1])])).is_empty());
}

#[test]
fn a_stale_read_is_found_through_a_later_read_too() {
    // No final read: a third transaction's read places element 1.
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![read(X, &[])]),
        txn(3, (40, 50), vec![read(X, &[1])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["G-single-item-realtime"]);
}

#[test]
fn a_lost_append_is_reported() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![append(X, 2)]),
    ];
    assert_eq!(names(&h, &finals(&[(X, &[2])])), ["lost-append"]);
}

#[test]
fn write_skew_is_g2_item() {
    let h = [
        txn(1, (0, 10), vec![read(X, &[]), read(Y, &[]), append(X, 1)]),
        txn(2, (0, 10), vec![read(X, &[]), read(Y, &[]), append(Y, 2)]),
    ];
    assert_eq!(names(&h, &finals(&[(X, &[1]), (Y, &[2])])), ["G2-item"]);
}

#[test]
fn a_lost_update_is_g_single_item() {
    // Both read the empty list and appended; the second append's writer never saw the
    // first's, yet comes after it.
    let h = [
        txn(1, (0, 10), vec![read(X, &[]), append(X, 1)]),
        txn(2, (0, 10), vec![read(X, &[]), append(X, 2)]),
    ];
    assert_eq!(names(&h, &finals(&[(X, &[1, 2])])), ["G-single-item"]);
}

#[test]
fn circular_information_flow_is_g1c() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1), read(Y, &[2])]),
        txn(2, (0, 10), vec![append(Y, 2), read(X, &[1])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["G1c"]);
}

#[test]
fn a_write_cycle_is_g0() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1), append(Y, 2)]),
        txn(2, (0, 10), vec![append(X, 3), append(Y, 4)]),
    ];
    assert_eq!(names(&h, &finals(&[(X, &[1, 3]), (Y, &[4, 2])])), ["G0"]);
}

#[test]
fn a_write_cycle_through_real_time_is_g0_realtime() {
    // T2 started after T1 ended, yet its append to x comes first.
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![append(X, 2)]),
    ];
    assert_eq!(names(&h, &finals(&[(X, &[2, 1])])), ["G0-realtime"]);
}

#[test]
fn a_read_of_an_aborted_append_is_g1a() {
    let h = [
        with(Outcome::Aborted, txn(1, (0, 10), vec![append(X, 1)])),
        txn(2, (20, 30), vec![read(X, &[1])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["G1a"]);
}

#[test]
fn a_read_of_an_intermediate_append_is_g1b() {
    // T1 appended to x twice; T2 saw only the first. That is also a cycle: T2 read
    // from T1 (wr) and missed T1's second append (rw).
    let h = [
        txn(1, (0, 10), vec![append(X, 1), append(X, 2)]),
        txn(2, (0, 10), vec![read(X, &[1])]),
    ];
    assert_eq!(
        names(&h, &finals(&[(X, &[1, 2])])),
        ["G1b", "G-single-item"]
    );
}

#[test]
fn a_non_prefix_read_is_an_incompatible_order() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (0, 10), vec![append(X, 2)]),
        txn(3, (20, 30), vec![read(X, &[1, 2])]),
        txn(4, (20, 30), vec![read(X, &[2])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["incompatible-order"]);
}

#[test]
fn a_garbage_element_is_reported() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![read(X, &[1, 99])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["garbage-read"]);
}

#[test]
fn a_duplicated_element_is_reported() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![read(X, &[1, 1])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["duplicate-elements"]);
}

#[test]
fn a_duplicated_append_is_reported() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        txn(2, (20, 30), vec![append(X, 1)]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["duplicate-append"]);
}

#[test]
fn a_read_that_misses_its_own_append_is_internal() {
    let h = [txn(1, (0, 10), vec![append(X, 5), read(X, &[])])];
    assert_eq!(names(&h, &finals(&[(X, &[5])])), ["internal"]);
    let h = [txn(
        1,
        (0, 10),
        vec![read(X, &[]), append(X, 5), read(X, &[5]), read(X, &[5, 6])],
    )];
    assert_eq!(
        names(&h, &finals(&[(X, &[5])])),
        ["garbage-read", "internal"]
    );
}

#[test]
fn an_indeterminate_append_that_was_read_counts_as_committed() {
    // T1's client never learned its fate, but T2 saw its element, so T1 committed, and
    // T3, which started after T2 ended, missed it.
    let h = [
        with(Outcome::Indeterminate, txn(1, (0, 0), vec![append(X, 1)])),
        txn(2, (5, 10), vec![read(X, &[1])]),
        txn(3, (20, 30), vec![read(X, &[])]),
    ];
    assert_eq!(names(&h, &BTreeMap::new()), ["G-single-item-realtime"]);
}

#[test]
fn an_indeterminate_append_never_read_is_no_violation() {
    let h = [
        with(Outcome::Indeterminate, txn(1, (0, 0), vec![append(X, 1)])),
        txn(2, (20, 30), vec![read(X, &[])]),
    ];
    assert!(names(&h, &finals(&[(X, &[])])).is_empty());
}

#[test]
fn an_indeterminate_transaction_has_no_known_end() {
    // T1 may have committed after T2 read, so T2 missing it is allowed.
    let h = [
        with(Outcome::Indeterminate, txn(1, (0, 5), vec![append(X, 1)])),
        txn(2, (20, 30), vec![read(X, &[])]),
    ];
    assert!(names(&h, &finals(&[(X, &[1])])).is_empty());
}

#[test]
fn reads_of_aborted_transactions_are_ignored() {
    let h = [
        txn(1, (0, 10), vec![append(X, 1)]),
        with(Outcome::Aborted, txn(2, (20, 30), vec![read(X, &[7, 8])])),
    ];
    assert!(names(&h, &finals(&[(X, &[1])])).is_empty());
}

/// A tiny deterministic generator for the tests' histories.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// A strictly serializable history: transactions take effect one by one at commit points
/// 10 apart, each spanning a random interval around its point; some abort (and change
/// nothing) and some are indeterminate (and took effect or not).
fn serial_history(
    seed: u64,
    count: u64,
    keys: u64,
) -> (Vec<Transaction>, BTreeMap<ListKey, Vec<Element>>) {
    let mut rng = XorShift(seed | 1);
    let mut state: BTreeMap<ListKey, Vec<Element>> = (0..keys).map(|k| (k, Vec::new())).collect();
    let mut next_element = 0;
    let mut history = Vec::new();
    for id in 0..count {
        let point = 100 + id * 10;
        let start = point - rng.below(60);
        let end = point + rng.below(60);
        let outcome = match rng.below(10) {
            0 => Outcome::Aborted,
            1 => Outcome::Indeterminate,
            _ => Outcome::Committed,
        };
        let takes_effect = match outcome {
            Outcome::Committed => true,
            Outcome::Aborted => false,
            Outcome::Indeterminate => rng.below(2) == 0,
        };
        let mut view = state.clone();
        let mut ops = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let key = rng.below(keys);
            if rng.below(2) == 0 {
                next_element += 1;
                view.get_mut(&key).unwrap().push(next_element);
                ops.push(append(key, next_element));
            } else {
                // An indeterminate transaction's reads are unknown to its client.
                let list = (outcome != Outcome::Indeterminate).then(|| view[&key].clone());
                ops.push(MicroOp::Read { key, list });
            }
        }
        if takes_effect {
            state = view;
        }
        history.push(Transaction {
            id,
            start,
            end,
            outcome,
            ops,
        });
    }
    (history, state)
}

#[test]
fn a_large_serializable_history_passes() {
    let (history, final_reads) = serial_history(7, 5_000, 8);
    let violations = check(&history, &final_reads);
    assert!(violations.is_empty(), "{}", violations[0]);
}

#[test]
fn a_large_history_with_one_stale_read_is_caught() {
    let (mut history, final_reads) = serial_history(11, 5_000, 8);
    // A read late in the history that misses everything: stale by far.
    let last = history.last().unwrap().end;
    history.push(txn(9_999, (last + 1, last + 2), vec![read(3, &[])]));
    let found = names(&history, &final_reads);
    assert_eq!(found, ["G-single-item-realtime"]);
}

fn arbitrary_op() -> impl Strategy<Value = MicroOp> {
    prop_oneof![
        (0..4u64, 0..12u64).prop_map(|(key, element)| MicroOp::Append { key, element }),
        (
            0..4u64,
            proptest::option::of(proptest::collection::vec(0..12u64, 0..6))
        )
            .prop_map(|(key, list)| MicroOp::Read { key, list }),
    ]
}

fn arbitrary_txn() -> impl Strategy<Value = Transaction> {
    (
        0..1000u64,
        0..30u64,
        0..30u64,
        prop_oneof![
            Just(Outcome::Committed),
            Just(Outcome::Aborted),
            Just(Outcome::Indeterminate)
        ],
        proptest::collection::vec(arbitrary_op(), 0..5),
    )
        .prop_map(|(id, start, end, outcome, ops)| Transaction {
            id,
            start,
            end,
            outcome,
            ops,
        })
}

proptest! {
    #[test]
    fn arbitrary_histories_never_panic(
        history in proptest::collection::vec(arbitrary_txn(), 0..20),
        final_reads in proptest::collection::btree_map(0..4u64, proptest::collection::vec(0..12u64, 0..8), 0..3),
    ) {
        for v in check(&history, &final_reads) {
            prop_assert!(!v.to_string().is_empty());
        }
    }

    #[test]
    fn serializable_histories_pass(seed in any::<u64>(), count in 1..200u64, keys in 1..6u64) {
        let (history, final_reads) = serial_history(seed, count, keys);
        let violations = check(&history, &final_reads);
        prop_assert!(violations.is_empty(), "{}", violations[0]);
    }
}
