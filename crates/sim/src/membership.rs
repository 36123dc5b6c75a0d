//! Membership in the simulator: every node runs the production lease and reconfiguration
//! state machine ([`ferrotx_membership::Membership`]) on its own drifting clock, its
//! messages carried by the simulated network between the nodes' lease endpoints (thread
//! [`LEASE_THREAD`], under the same loss, duplication, delays, partitions, pauses and
//! crashes as worker traffic), with one shared [`MemoryCoordination`].
//!
//! [`MembershipState`] holds what the cluster shares and what the checkers found:
//! - (a) the coordination service's history has strictly growing ids (one view per id);
//! - (b) at every simulator step, every node whose `serving_until` is after its local
//!   clock is a member of the highest view committed anywhere so far;
//! - (c) once the last fault is over, every live node converges to the latest view and
//!   serves within [`CONVERGENCE_LEASES`] leases;
//! - (e) the CM never swaps in a view without a member whose lease at the CM still runs,
//!   unless that life crashed;
//! - (d) no view stored orphans a partition ([`View::orphaned_in`]): leaves it with no
//!   copy, member or suspended, while a life that held one has not crashed (checked when
//!   it is swapped in, against the lives crashed by then);
//! - (f) no view admits a life new to it (neither a member nor suspended before) while it
//!   drops (removes or suspends) a member: joiners are admitted in a view of their own,
//!   after the members are settled, so that an empty joiner never helps make a view that
//!   drops a partition's last holders.

use std::collections::BTreeSet;

use ferrotx_cluster::{MemoryCoordination, View, ViewMember};
use ferrotx_membership::Options;
use ferrotx_wire::EndpointId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::faults::DRIFT_PPM_MAX;

/// The thread id of every node's lease endpoint (no worker has it).
pub const LEASE_THREAD: u16 = u16::MAX;

/// Leases within which live nodes must converge once the last fault is over.
pub const CONVERGENCE_LEASES: u64 = 20;

/// Violations kept per run (the first ones; the count goes on).
const VIOLATIONS_KEPT: usize = 20;

/// Node `node`'s lease endpoint.
pub fn lease_endpoint(node: u16) -> EndpointId {
    EndpointId::new(node, LEASE_THREAD)
}

/// The simulator's membership options: a 10 ms lease (simulated time) and a drift bound
/// of the simulator's largest clock drift.
pub fn default_options() -> Options {
    Options {
        lease_ns: 10_000_000,
        drift_ppm: DRIFT_PPM_MAX.unsigned_abs().into(),
        // The simulator's members switch at once: a member that does not acknowledge
        // within a lease failed.
        ack_timeout_min_ns: 0,
        ..Options::default()
    }
}

/// What the simulated cluster's membership shares, and what its checkers found.
#[derive(Debug)]
pub struct MembershipState {
    /// Every node's options.
    pub options: Options,
    /// The coordination service every node reads and swaps.
    pub coordination: MemoryCoordination,
    /// The highest view id any node committed so far.
    pub committed_max: u64,
    /// Removals: (simulated time, node, incarnation, the view without it).
    pub removed: Vec<(u64, u16, u64, u64)>,
    /// The lives crashed so far (their memory is gone): the only ones whose copies may be
    /// lost.
    pub crashed: BTreeSet<ViewMember>,
    /// Removed nodes the supervisor restarts: (simulated time, node).
    pub restarts_pending: Vec<(u64, u16)>,
    /// Each node's longest install delay (simulated ns; a node past the end has none):
    /// how long after `Action::Install` it calls `installed` (and so acknowledges), as a
    /// real node does only once its worker threads have switched. Each install draws its
    /// delay uniformly between 0 and this, from the seed ([`MembershipState::delay_installs`]).
    pub install_delay_max_ns: Vec<u64>,
    /// Where the install delays are drawn from.
    install_rng: ChaCha8Rng,
    /// Installs whose `installed` call is deferred: (simulated time due, node, its
    /// incarnation, view id).
    pub installs_pending: Vec<(u64, u16, u64, u64)>,
    /// Whether the driver calls `tick` only when `next_timeout_ns` is due (the state
    /// machine's contract, as its own test harness drives it). When false (the default),
    /// it also ticks after delivering datagrams, as a lease thread that polls its socket
    /// and then its timers does: a CM whose members all renew has no timeout due, and
    /// processes a join only at a tick (see the report of the membership seeds).
    pub strict_ticks: bool,
    /// Whether a removed node is restarted (as a new life) a lease after it stopped.
    pub restart_removed: bool,
    /// From when no fault is left to come (set by the run); convergence is timed from it.
    pub faults_over_ns: Option<u64>,
    /// When every live node first served in the latest view after `faults_over_ns`.
    pub converged_ns: Option<u64>,
    /// Simulator steps (instants) taken so far, and the bound.
    pub steps: u64,
    /// Steps after which the run stops (a livelock guard).
    pub steps_max: u64,
    /// Installs and commits carried out.
    pub installs: u64,
    /// Commits carried out.
    pub commits: u64,
    /// Hints of newer configurations forwarded from workers.
    pub hints: u64,
    /// Commits of a view older than one already committed elsewhere (a node resuming
    /// from a pause commits the view it was removed from). Not a serving violation as
    /// long as its lease is over, which (b) checks; reported as a membership bug.
    pub stale_commits: Vec<String>,
    /// When each view was stored: (simulated time, view id).
    pub stored_at: Vec<(u64, u64)>,
    /// The coordination service's faults ([`crate::FaultKind::Coord`]); `None`: every
    /// call is answered at once, as before that kind existed.
    pub coord: Option<CoordFaults>,
    /// Violations found (the first [`VIOLATIONS_KEPT`]) and how many in all.
    pub violations: Vec<String>,
    /// Violations found in all.
    pub violations_count: u64,
    /// Serving violations already reported: (node, view), to report each once.
    reported: BTreeSet<(u16, u64)>,
    /// Events of the simulator already looked at.
    pub(crate) events_seen: usize,
}

impl MembershipState {
    /// Shared state for nodes run with `options`.
    pub fn new(options: Options) -> Self {
        Self {
            options,
            coordination: MemoryCoordination::new(),
            committed_max: 0,
            removed: Vec::new(),
            crashed: BTreeSet::new(),
            restarts_pending: Vec::new(),
            install_delay_max_ns: Vec::new(),
            install_rng: ChaCha8Rng::seed_from_u64(0),
            installs_pending: Vec::new(),
            restart_removed: true,
            strict_ticks: false,
            faults_over_ns: None,
            converged_ns: None,
            steps: 0,
            steps_max: 3_000_000,
            installs: 0,
            commits: 0,
            hints: 0,
            violations: Vec::new(),
            stale_commits: Vec::new(),
            stored_at: Vec::new(),
            coord: None,
            violations_count: 0,
            reported: BTreeSet::new(),
            events_seen: 0,
        }
    }

    /// Carries the coordination service's calls out apart from the nodes, with the
    /// faults of [`crate::FaultKind::Coord`]: a swap answered "outcome unknown" with
    /// chance `unknown` (stored or not, half each), drawn from `seed`.
    pub fn coord_faults(&mut self, unknown: f64, seed: u64) {
        self.coord = Some(CoordFaults {
            unknown,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xc00d_fa17),
            latency_max_ns: 0,
            slow_until: 0,
            down_until: 0,
            back: None,
            pending: Vec::new(),
            counts: CoordCounts::default(),
        });
    }

    /// A node's call to the coordination service, carried out once due: at once, or up
    /// to the latency while the service is slow, and never before the node's earlier
    /// calls (one call in flight per node, as a node's coordination thread makes them).
    pub fn coord_call(&mut self, now: u64, node: u16, life: u64, call: CoordCall) {
        let coord = self.coord.as_mut().expect("coordination faults");
        let delay = if now < coord.slow_until && coord.latency_max_ns > 0 {
            coord.counts.delayed += 1;
            coord.rng.random_range(0..=coord.latency_max_ns)
        } else {
            0
        };
        let after = coord
            .pending
            .iter()
            .filter(|(_, n, l, _)| *n == node && *l == life)
            .map(|(at, ..)| *at)
            .max()
            .unwrap_or(0);
        coord
            .pending
            .push(((now + delay).max(after), node, life, call));
    }

    /// Delays each node's installs by up to `max_ns[node]` (drawn from `seed`). With no
    /// delays (the default) every node calls `installed` at once, as before.
    pub fn delay_installs(&mut self, max_ns: Vec<u64>, seed: u64) {
        self.install_delay_max_ns = max_ns;
        self.install_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x510e_1a57);
    }

    /// The delay of node `node`'s next install: 0, drawing nothing, unless the node has
    /// a longest delay.
    pub(crate) fn install_delay(&mut self, node: u16) -> u64 {
        match self.install_delay_max_ns.get(usize::from(node)) {
            Some(&max) if max > 0 => self.install_rng.random_range(0..=max),
            _ => 0,
        }
    }

    /// Records a violation.
    pub fn violation(&mut self, what: String) {
        self.violations_count += 1;
        if self.violations.len() < VIOLATIONS_KEPT {
            self.violations.push(what);
        }
    }

    /// Records that node `node` serves in view `view` while `committed` is committed,
    /// once per node and view.
    pub(crate) fn serving_outside(
        &mut self,
        now: u64,
        node: u16,
        view: Option<u64>,
        until: u64,
        local: u64,
    ) {
        let key = (node, view.unwrap_or(u64::MAX));
        if self.reported.insert(key) {
            let committed = self.committed_max;
            self.violation(format!(
                "(b) at {now} ns node {node} serves (serving_until {until} > its clock {local}) in view {view:?} while view {committed} is committed"
            ));
        }
    }

    /// Checks (a) over the coordination service's history.
    pub fn check_history(&mut self) {
        let history = self.coordination.history();
        for w in history.windows(2) {
            if w[1].id <= w[0].id {
                self.violation(format!(
                    "(a) view {} stored after view {}: ids must grow",
                    w[1].id, w[0].id
                ));
            }
        }
    }

    /// Check (e) on a view the CM of `current` (node `cm`, its clock at `local`) is about
    /// to swap in: no member whose lease at this CM still runs leaves (removed or
    /// suspended), unless that life crashed (its newer life proves it dead).
    pub(crate) fn check_leased_kept(
        &mut self,
        now: u64,
        cm: u16,
        local: u64,
        membership: &ferrotx_membership::Membership,
        current: &View,
        next: &View,
    ) {
        if current.cm != cm || current.is_ended() {
            return;
        }
        for m in &current.members {
            if next.is_member(m.node, m.incarnation) || self.crashed.contains(m) {
                continue;
            }
            if membership
                .alive_until(m.node)
                .is_some_and(|until| until > local)
            {
                self.violation(format!(
                    "(e) at {now} ns CM {cm} swaps in view {} without node {} (life {}), whose lease at the CM still runs",
                    next.id, m.node, m.incarnation
                ));
            }
        }
    }

    /// Checks (d) and (f) on a view about to be swapped in at `now` (simulated ns) over `current`.
    pub(crate) fn check_swap(&mut self, now: u64, current: Option<&View>, next: &View) {
        let Some(current) = current else { return };
        if current.is_ended() || next.id != current.id + 1 {
            return;
        }
        let admitted = next.members.iter().find(|m| {
            !current.is_member(m.node, m.incarnation)
                && !current.is_suspended(m.node, m.incarnation)
        });
        let dropped = current
            .members
            .iter()
            .find(|m| !next.is_member(m.node, m.incarnation));
        if let (Some(a), Some(d)) = (admitted, dropped) {
            self.violation(format!(
                "(f) at {now} ns view {} admits node {} (life {}) while it drops node {} (life {}) of view {}",
                next.id, a.node, a.incarnation, d.node, d.incarnation, current.id
            ));
        }
        let orphaned = current.orphaned_in(next, &self.crashed);
        if !orphaned.is_empty() {
            self.violation(format!(
                "(d) at {now} ns view {} orphans partitions {orphaned:?} that view {} held on lives not crashed",
                next.id, current.id
            ));
        }
    }

    /// Views stored so far.
    pub fn history(&self) -> Vec<View> {
        self.coordination.history()
    }

    /// Partitions of the latest view that lost every copy to crashes: no copy on a
    /// member, and every suspended life holding one crashed (exact accounting; a partition
    /// whose holder may be alive is not lost, and must come back).
    pub fn lost_partitions(&self) -> usize {
        let Some(v) = self.coordination.current() else {
            return 0;
        };
        (0..v.copies.len())
            .filter(|&p| {
                v.copies[p].is_empty()
                    && v.suspended_copies(p as u32).iter().all(|&n| {
                        v.suspended_incarnation(n).is_some_and(|i| {
                            self.crashed.contains(&ViewMember {
                                node: n,
                                incarnation: i,
                            })
                        })
                    })
            })
            .count()
    }

    /// Whether some view removed a member of the view before it (a failure was handled).
    pub fn lost_a_member(&self) -> bool {
        let history = self.coordination.history();
        !self.removed.is_empty()
            || history.windows(2).any(|w| {
                w[0].members
                    .iter()
                    .any(|m| !w[1].is_member(m.node, m.incarnation))
            })
    }
}

/// A call to the coordination service a node made, not answered yet.
#[derive(Clone, Debug)]
pub enum CoordCall {
    /// [`ferrotx_membership::Action::Read`].
    Read,
    /// [`ferrotx_membership::Action::Cas`].
    Cas {
        /// The id the swap expects.
        expected: Option<u64>,
        /// The view to store.
        next: View,
    },
}

/// The coordination service's faults in a run, and the calls under way.
#[derive(Debug)]
pub struct CoordFaults {
    /// Chance that a swap is answered "outcome unknown" (half of them stored).
    pub unknown: f64,
    /// Draws latencies and unknown outcomes.
    pub rng: ChaCha8Rng,
    /// Calls made before `slow_until` are answered up to this late.
    pub latency_max_ns: u64,
    /// See `latency_max_ns`.
    pub slow_until: u64,
    /// Calls carried out before then are answered "unavailable".
    pub down_until: u64,
    /// The store went back: until when, and the view to restore then.
    pub back: Option<(u64, Option<View>)>,
    /// Calls under way: (due, node, life, call).
    pub pending: Vec<(u64, u16, u64, CoordCall)>,
    /// What happened.
    pub counts: CoordCounts,
}

/// What the coordination service's faults did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoordCounts {
    /// Calls answered late.
    pub delayed: u64,
    /// Calls answered "unavailable".
    pub unavailable: u64,
    /// Swaps answered "outcome unknown" that stored the view, and that did not.
    pub unknown_stored: u64,
    /// See `unknown_stored`.
    pub unknown_not_stored: u64,
    /// Times the store went back.
    pub went_back: u64,
    /// Reads a node answered with a view older than its own: it found the store behind
    /// (and refuses to swap against it, [`ferrotx_membership::Membership::store_behind`]).
    pub found_behind: u64,
}
