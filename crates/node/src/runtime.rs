//! Driving a worker with the real clock.

use std::time::{Duration, Instant};

use ferrotx_transport::Transport;

use crate::worker::Worker;

/// How an idle worker waits.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    /// Keep polling this long after the last work before sleeping. A round trip on
    /// loopback is a few microseconds, so polling through it keeps latency at the
    /// kernel's limit, while an idle node sleeps almost all the time.
    pub spin: Duration,
    /// Longest sleep, so a stop request is noticed in time.
    pub sleep_max: Duration,
    /// While polling, give the core to any other runnable thread (`sched_yield`) instead
    /// of spinning: with more busy workers than cores (three node processes on two cores)
    /// a spinning worker otherwise holds a core that a peer needs to answer it.
    pub yield_while_polling: bool,
}

impl Default for Idle {
    fn default() -> Self {
        Self {
            spin: Duration::from_micros(200),
            sleep_max: Duration::from_millis(100),
            yield_while_polling: false,
        }
    }
}

/// What a worker's loop does next, as [`run_with`]'s hook says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// End the loop.
    Stop,
    /// Go on: step the worker, and sleep if it has nothing to do.
    Go,
    /// Go on without sleeping: the hook did work of its own (or has more to do).
    Busy,
}

/// Runs `worker` on this thread while `keep_running` says so (asked once per loop
/// iteration, so it must be cheap: an atomic load, a counter), with time measured from
/// `epoch`.
pub fn run<T: Transport>(
    worker: &mut Worker<T>,
    epoch: Instant,
    idle: Idle,
    mut keep_running: impl FnMut(&mut Worker<T>) -> bool,
) {
    run_with(worker, epoch, idle, |worker, _| {
        if keep_running(worker) {
            Flow::Go
        } else {
            Flow::Stop
        }
    });
}

/// [`run`], with a hook that is asked once per loop iteration and once more before the
/// worker sleeps, with the time, and may keep the worker awake ([`Flow::Busy`]).
pub fn run_with<T: Transport>(
    worker: &mut Worker<T>,
    epoch: Instant,
    idle: Idle,
    mut hook: impl FnMut(&mut Worker<T>, u64) -> Flow,
) {
    let spin_ns = idle.spin.as_nanos() as u64;
    let mut idle_since_ns: Option<u64> = None;
    let doorbell = worker.transport().doorbell();
    loop {
        let now_ns = epoch.elapsed().as_nanos() as u64;
        let flow = hook(worker, now_ns);
        if flow == Flow::Stop {
            break;
        }
        if worker.step(now_ns) || flow == Flow::Busy {
            idle_since_ns = None;
            continue;
        }
        let since = *idle_since_ns.get_or_insert(now_ns);
        if now_ns - since < spin_ns {
            if idle.yield_while_polling {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        // Armed, look for work from other threads once more (the hook starts waiting
        // coroutines), so that work published from now on rings the bell.
        if let Some(bell) = &doorbell {
            bell.arm();
            match hook(worker, now_ns) {
                Flow::Stop => {
                    bell.disarm();
                    break;
                }
                Flow::Busy => {
                    bell.disarm();
                    idle_since_ns = None;
                    continue;
                }
                Flow::Go => {}
            }
            if worker.step(now_ns) {
                bell.disarm();
                idle_since_ns = None;
                continue;
            }
        }
        let timeout = match worker.next_timeout_ns() {
            Some(deadline) => Duration::from_nanos(deadline.saturating_sub(now_ns)),
            None => idle.sleep_max,
        };
        worker
            .transport_mut()
            .wait(Some(timeout.min(idle.sleep_max)));
        if let Some(bell) = &doorbell {
            bell.disarm();
        }
    }
}
