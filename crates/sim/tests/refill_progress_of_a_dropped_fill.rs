//! A worker thread's fill progress (`run_refill`'s `Progress`: table, cursor, locked
//! keys, floors) was kept per partition, not per fill, and started again only when the
//! primary's (node, life) changed. A FETCH in flight when a view dropped the fill (or
//! the pause after it) can outlast several views; if a later view gives the node the
//! same partition to fill again, from the same primary life, the new fill (a fresh,
//! empty copy) resumed from the old one's position and was reported done having
//! copied nothing.
//!
//! `membership-random-writes` seed 27 at commit 7dc4c74 (which added suspended lives):
//! node 1 fills partition 2 from primary node 2 (life 1) in views 3 to 5; its last FETCH
//! hangs across view 6 (members [1, 3, 4]: node 2 suspended holding partition 2, the
//! fill dropped) and view 7 (node 2 readmitted, same life; node 1 given a new fill of
//! partition 2). In view 8 the thread resumes with the old progress (every table
//! visited, no locked key left), takes the floors and marks the new fill done with 0
//! objects; view 9 counts node 1 as a copy of partition 2 that holds nothing.

use ferrotx_sim::membership_scenarios::{self, failure};
use ferrotx_sim::run::run;

#[test]
fn bug_a_new_fill_resumed_an_old_fills_progress() {
    let name = "membership-random-writes";
    let options = membership_scenarios::options(name, 27);
    let report = run(&mut *membership_scenarios::scenario(name), &options);
    assert_eq!(failure(name, &report), None, "{:#?}", report.membership);
    assert!(
        report.passed(),
        "{:?} {:#?}",
        report.checked.violations,
        report.membership
    );
}
