//! The membership situations of issue 30, each a scenario with its faults placed by hand
//! (`ferrotx_sim::membership_scenarios::SITUATIONS`, some on a cue: `ferrotx_sim::plot`),
//! run over many seeds under a paced writing load with every checker on: strict
//! serializability, lost writes, replicas, and membership's (a) to (e) (ids grow, nobody
//! serves outside the committed view, every live node serves in the latest view within 20
//! leases of the last fault, full strength with equal copies, the CM never drops a member
//! whose lease at it runs). Nothing is excused, and each seed must reach its situation
//! (`membership_scenarios::reached`):
//!
//! - `membership-cm-cut-during-join`: the CM cut off after the first answer of a probe
//!   round that probes a joiner, others still to answer;
//! - `membership-cm-isolated-member-paused`: the CM cut off while a member of its view is
//!   paused;
//! - `membership-last-holder-readmitted`: a partition's last holder cut off, suspended,
//!   and readmitted as the same life with its copies;
//! - `membership-false-positive-rejoin`: a member removed while alive comes back by itself
//!   as a new life and is refilled;
//! - `membership-seed-7`: node 1 removed, then node 0 or 2 crashes for good while the view
//!   is [0, 2]; the survivor and node 1's new life go on.
//!
//! `FERROTX_SIM_SEEDS=N` (default 50 per scenario) and `FERROTX_SIM_SEED_BASE`; replay
//! one seed with `FERROTX_SIM_SEED=<seed> cargo test -p ferrotx-sim --test
//! membership_situations -- --nocapture`, or `ferrotx sim --workload NAME --seed S`.

use ferrotx_sim::membership_scenarios::{self, failure};
use ferrotx_sim::run::run;
use ferrotx_sim::seeds::{self, SeedPlan};

/// Runs scenario `name` over the seeds the environment asks for (50 by default): every
/// seed must pass every check and reach its situation.
fn sweep(name: &str) {
    let (range, verbose) = match seeds::from_env_with_default(50) {
        SeedPlan::Replay(seed) => (seed..seed + 1, true),
        SeedPlan::Sweep(range) => (range, false),
    };
    let mut failed = Vec::new();
    let mut healthy_removed = Vec::new();
    let (mut committed, mut views, mut slowest) = (0, 0, 0u64);
    let mut sums = [0u64; 7];
    for seed in range.clone() {
        let options = membership_scenarios::options(name, seed);
        let report = run(&mut *membership_scenarios::scenario(name), &options);
        let m = report.membership.as_ref().expect("membership ran");
        if verbose {
            println!("{name} seed {seed}: {report:#?}");
        }
        committed += report.checked.committed;
        views += m.views.len() as u64;
        slowest = slowest.max(m.converged_after_ns.unwrap_or(0));
        let s = &m.situations;
        for (sum, n) in sums.iter_mut().zip([
            s.cm_cut_between_replies,
            s.cm_cut_after_joiner_answer,
            s.cm_isolated_while_paused,
            s.suspended,
            s.readmitted,
            s.rejoined,
            s.refilled,
        ]) {
            *sum += n;
        }
        if !m.healthy_removed.is_empty() {
            healthy_removed.push(seed);
        }
        if let Some(why) = failure(name, &report) {
            eprintln!("{name} seed {seed} FAILED: {why}");
            failed.push(seed);
        }
    }
    println!(
        "{name}: {} seeds, {committed} committed, {views} views, slowest convergence {:.1} ms; \
         CM cut between two probe answers {} (after the joiner's {}), CM cut off while a \
         member was paused {}, lives suspended {}, readmitted with their copies {}, removed \
         lives back as new ones {}, refilled {}; members off the struck side removed in \
         seeds {healthy_removed:?} (reported, not failed)",
        range.end - range.start,
        slowest as f64 / 1e6,
        sums[0],
        sums[1],
        sums[2],
        sums[3],
        sums[4],
        sums[5],
        sums[6]
    );
    assert!(
        failed.is_empty(),
        "{name}: failing seeds {failed:?}; replay one with FERROTX_SIM_SEED=S or ferrotx sim --workload {name} --seed S"
    );
}

#[test]
fn the_cm_cut_off_between_two_probe_answers_during_a_join() {
    sweep("membership-cm-cut-during-join");
}

#[test]
fn the_cm_isolated_while_a_member_is_paused() {
    sweep("membership-cm-isolated-member-paused");
}

#[test]
fn a_last_holder_suspended_is_readmitted_with_its_copies() {
    sweep("membership-last-holder-readmitted");
}

#[test]
fn a_member_removed_while_alive_rejoins_as_a_new_life_and_is_refilled() {
    sweep("membership-false-positive-rejoin");
}

#[test]
fn the_cluster_of_seed_7_converges_with_the_survivor_and_a_new_life() {
    sweep("membership-seed-7");
}

/// Every situation scenario is in the membership list, so `ferrotx sim --workload
/// membership` runs it.
#[test]
fn the_situations_are_membership_scenarios() {
    for name in membership_scenarios::SITUATIONS {
        assert!(membership_scenarios::is_membership(name), "{name}");
    }
}
