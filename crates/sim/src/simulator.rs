//! Advancing a simulated cluster from event to event.
//!
//! Every worker runs on its node's clock: simulated time, shifted and drifting within a
//! bound per node ([`NodeClock`]), so that protocol code sees the clocks of real machines.
//! A paused node's workers are not stepped while its clock keeps running (a stopped
//! process, a long garbage-collection or scheduling stall): when it resumes it sees the
//! time jump, and what arrived meanwhile waits in its inboxes (or overflowed them).

use std::cell::RefCell;
use std::rc::Rc;

use ferrotx_node::Worker;
use ferrotx_rpc::Event;
use ferrotx_transport::Transport;
use ferrotx_wire::EndpointId;

use crate::network::{SimNetwork, SimTransport};

/// Steps a worker may take at one instant before the simulator calls it a livelock.
const STEPS_PER_INSTANT_MAX: usize = 10_000;

/// Parts per million in one.
const PPM: i128 = 1_000_000;

/// A node's clock: `local = offset + t + t * drift_ppm / 10^6` for simulated time `t`.
/// Monotonic as long as `drift_ppm > -10^6`; real clocks drift by tens of ppm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeClock {
    /// Added to every reading.
    pub offset_ns: u64,
    /// How much faster (positive) or slower (negative) than simulated time it runs, in
    /// parts per million.
    pub drift_ppm: i32,
}

impl NodeClock {
    /// The node's reading at simulated time `global_ns`.
    pub fn local_ns(&self, global_ns: u64) -> u64 {
        assert!(
            i128::from(self.drift_ppm) > -PPM,
            "a clock must move forward"
        );
        if self.drift_ppm == 0 {
            return self
                .offset_ns
                .checked_add(global_ns)
                .expect("a clock reading fits 64 bits");
        }
        // `t * drift / 10^6` rounded toward zero, without a 128-bit division (the
        // simulator asks the time of every node at every step): with `t = q * 10^6 + r`,
        // both `q * drift` and `r * drift` have drift's sign, so the quotient splits.
        let drift = i64::from(self.drift_ppm);
        let q = i128::from(global_ns / 1_000_000);
        let r = (global_ns % 1_000_000) as i64;
        let local = i128::from(self.offset_ns)
            + i128::from(global_ns)
            + q * i128::from(drift)
            + i128::from(r * drift / 1_000_000);
        u64::try_from(local.max(0)).expect("a clock reading fits 64 bits")
    }

    /// The earliest simulated time at which the node's clock reads at least `local_ns`.
    pub fn global_ns(&self, local_ns: u64) -> u64 {
        let since_offset = i128::from(local_ns) - i128::from(self.offset_ns);
        if since_offset <= 0 {
            return 0;
        }
        // Invert, then correct the rounding of `local_ns` by stepping forward.
        if self.drift_ppm == 0 {
            return since_offset as u64;
        }
        let rate = PPM + i128::from(self.drift_ppm);
        // A float estimate is exact to within a nanosecond below 2^52 ns (52 days), and
        // the steps below make it exact.
        let mut global = if since_offset < 1 << 52 {
            (since_offset as i64 as f64 * 1e6 / (1e6 + f64::from(self.drift_ppm))) as u64
        } else {
            u64::try_from(since_offset * PPM / rate).unwrap_or(u64::MAX)
        };
        while self.local_ns(global) < local_ns {
            global += 1;
        }
        while global > 0 && self.local_ns(global - 1) >= local_ns {
            global -= 1;
        }
        global
    }
}

/// Every worker of a simulated cluster and their network.
pub struct Simulator {
    /// The network, to change faults and partitions between runs.
    pub network: Rc<RefCell<SimNetwork>>,
    /// The workers, in the order they are stepped.
    pub workers: Vec<Worker<SimTransport>>,
    /// Events reported by the workers, with the (simulated) time and the reporting
    /// endpoint.
    pub events: Vec<(u64, EndpointId, Event)>,
    /// Each node's clock, by node id (nodes beyond the end run on simulated time).
    pub clocks: Vec<NodeClock>,
    /// Until when each node is paused, by node id (0 or a past time: running).
    pub paused_until_ns: Vec<u64>,
    /// A trap armed in `ferrotx_buggify` that sprang: (simulated time, the worker whose
    /// step reached its point, the point). Stepping stops right after that step, so the
    /// caller acts on the worker's node before anything else runs.
    pub trap_hit: Option<(u64, EndpointId, &'static str)>,
}

impl Simulator {
    /// A simulator over `network` with no workers yet.
    pub fn new(network: Rc<RefCell<SimNetwork>>) -> Self {
        Self {
            network,
            workers: Vec::new(),
            events: Vec::new(),
            clocks: Vec::new(),
            paused_until_ns: Vec::new(),
            trap_hit: None,
        }
    }

    /// Current simulated time.
    pub fn now_ns(&self) -> u64 {
        self.network.borrow().now_ns()
    }

    /// Pauses node `node` from now until simulated time `until_ns`.
    pub fn pause(&mut self, node: u16, until_ns: u64) {
        let index = usize::from(node);
        if self.paused_until_ns.len() <= index {
            self.paused_until_ns.resize(index + 1, 0);
        }
        self.paused_until_ns[index] = self.paused_until_ns[index].max(until_ns);
    }

    pub(crate) fn clock(&self, node: u16) -> NodeClock {
        self.clocks
            .get(usize::from(node))
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn paused_until(&self, node: u16) -> u64 {
        self.paused_until_ns
            .get(usize::from(node))
            .copied()
            .unwrap_or(0)
    }

    /// Runs until simulated time `until_ns`, or until nothing is left to happen (no
    /// datagram in flight, no timer set, no worker busy, no pause to end). Returns the
    /// time reached.
    pub fn run_until(&mut self, until_ns: u64) -> u64 {
        loop {
            let now = self.now_ns();
            let next_timer = self.step_workers();
            let Some(next) = self.next_event_ns(next_timer) else {
                return now;
            };
            if next > until_ns {
                self.network.borrow_mut().advance(until_ns);
                return until_ns;
            }
            // Time always moves on, even for a timer already due, so that each instant
            // is stepped once all workers are quiet.
            self.network.borrow_mut().advance(next.max(now + 1));
        }
    }

    /// The earliest of `next_timer` and the network's next delivery.
    pub(crate) fn next_event_ns(&self, next_timer: Option<u64>) -> Option<u64> {
        let next_delivery = self.network.borrow().next_delivery_ns();
        match (next_delivery, next_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => None,
        }
    }

    /// Steps every worker that is not paused at the current instant until it is quiet,
    /// collecting their events; returns the earliest (simulated) time a worker's timer
    /// or a pause's end is due. A worker outside its lease has no timer: it does nothing
    /// until its node's membership renews the lease.
    pub(crate) fn step_workers(&mut self) -> Option<u64> {
        let now = self.now_ns();
        let mut next_timer: Option<u64> = None;
        for i in 0..self.workers.len() {
            let node = self.workers[i].transport().local().node();
            let paused_until = self.paused_until(node);
            if now < paused_until {
                next_timer = Some(next_timer.map_or(paused_until, |t| t.min(paused_until)));
                continue;
            }
            let clock = self.clock(node);
            let local_now = clock.local_ns(now);
            let worker = &mut self.workers[i];
            let mut steps = 0;
            let mut sprung = None;
            while worker.step(local_now) {
                sprung = ferrotx_buggify::take_sprung();
                if sprung.is_some() {
                    break;
                }
                steps += 1;
                assert!(
                    steps < STEPS_PER_INSTANT_MAX,
                    "worker busy without end at {now} ns"
                );
            }
            let local = worker.transport().local();
            for event in worker.events().drain(..) {
                self.events.push((now, local, event));
            }
            if let Some(point) = sprung {
                // Stop here: the caller acts on this worker's node at once, and the next
                // round of steps (1 ns later) runs everyone else.
                self.trap_hit = Some((now, local, point));
                return Some(now);
            }
            if local_now >= worker.serving_until() {
                continue;
            }
            if let Some(deadline) = worker.next_timeout_ns() {
                let at = clock.global_ns(deadline);
                next_timer = Some(next_timer.map_or(at, |t| t.min(at)));
            }
        }
        next_timer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_clock_inverts_to_the_earliest_simulated_time() {
        for clock in [
            NodeClock::default(),
            NodeClock {
                offset_ns: 1_234_567,
                drift_ppm: 250,
            },
            NodeClock {
                offset_ns: 99,
                drift_ppm: -250,
            },
        ] {
            let mut previous = 0;
            for global in (0..5_000_000_000u64).step_by(7_777_777) {
                let local = clock.local_ns(global);
                assert!(local >= previous, "monotonic");
                previous = local;
                let back = clock.global_ns(local);
                assert!(back <= global);
                assert!(clock.local_ns(back) >= local);
                assert!(back == 0 || clock.local_ns(back - 1) < local);
            }
        }
    }

    #[test]
    fn the_split_quotient_is_the_128_bit_formula() {
        // local_ns avoids a 128-bit division; it must read exactly what the formula says.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let global = state >> 20;
            let drift = ((state % 2_001) as i32 - 1_000) * 37;
            let clock = NodeClock {
                offset_ns: state % 1_000_000_007,
                drift_ppm: drift,
            };
            let t = i128::from(global);
            let expected = i128::from(clock.offset_ns) + t + t * i128::from(drift) / PPM;
            assert_eq!(i128::from(clock.local_ns(global)), expected.max(0));
            let back = clock.global_ns(clock.local_ns(global));
            assert!(back <= global);
            assert!(back == 0 || clock.local_ns(back - 1) < clock.local_ns(global));
        }
    }
}
