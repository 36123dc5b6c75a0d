//! Advancing a simulated cluster from event to event.

use std::cell::RefCell;
use std::rc::Rc;

use ferrotx_node::Worker;
use ferrotx_rpc::Event;
use ferrotx_transport::Transport;
use ferrotx_wire::EndpointId;

use crate::network::{SimNetwork, SimTransport};

/// Steps a worker may take at one instant before the simulator calls it a livelock.
const STEPS_PER_INSTANT_MAX: usize = 10_000;

/// Every worker of a simulated cluster and their network.
pub struct Simulator {
    /// The network, to change faults and partitions between runs.
    pub network: Rc<RefCell<SimNetwork>>,
    /// The workers, in the order they are stepped.
    pub workers: Vec<Worker<SimTransport>>,
    /// Events reported by the workers, with the time and the reporting endpoint.
    pub events: Vec<(u64, EndpointId, Event)>,
}

impl Simulator {
    /// A simulator over `network` with no workers yet.
    pub fn new(network: Rc<RefCell<SimNetwork>>) -> Self {
        Self {
            network,
            workers: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Current simulated time.
    pub fn now_ns(&self) -> u64 {
        self.network.borrow().now_ns()
    }

    /// Runs until simulated time `until_ns`, or until nothing is left to happen (no
    /// datagram in flight, no timer set, no worker busy). Returns the time reached.
    pub fn run_until(&mut self, until_ns: u64) -> u64 {
        loop {
            let now = self.now_ns();
            for worker in &mut self.workers {
                let mut steps = 0;
                while worker.step(now) {
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
            }
            let next_delivery = self.network.borrow().next_delivery_ns();
            let next_timer = self
                .workers
                .iter()
                .filter_map(|w| w.next_timeout_ns())
                .min();
            let next = match (next_delivery, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => return now,
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
}
