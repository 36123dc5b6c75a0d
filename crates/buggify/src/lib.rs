//! Fault points inside production code that fire only in simulation, after FoundationDB's
//! BUGGIFY.
//!
//! Production code asks [`fires`] at a named point where it may legally behave worse than
//! usual: wait before the next phase of the commit, give up a transaction it could have
//! committed, hold back truncation. Outside the simulator nothing is enabled and the call
//! is one relaxed atomic load. The simulator enables the points on its own thread for one
//! run with [`enable`] and a seed: each point is activated for the run with probability
//! [`ACTIVATION_PROBABILITY`] when it is first reached, and an active point fires with
//! probability [`FIRE_PROBABILITY`] each time it is reached, so every run stresses a
//! different few places hard rather than all of them lightly. Everything is drawn from the
//! seed, so a run replays exactly.
//!
//! The state is per thread: a simulation runs one cluster in one thread, and other
//! threads of the same process (other tests running at once) see nothing enabled.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Probability that a point reached in a run is active for that run (FoundationDB's
/// choice: a quarter of the points, so that runs differ in which places misbehave).
pub const ACTIVATION_PROBABILITY: f64 = 0.25;

/// Probability that an active point fires each time it is reached.
pub const FIRE_PROBABILITY: f64 = 0.25;

/// Threads with fault points enabled, in the whole process: zero outside simulations, so
/// [`fires`] costs one relaxed load in production.
static THREADS_ENABLED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    static TRAP: RefCell<Option<Trap>> = const { RefCell::new(None) };
    /// Whether a trap sprang and nobody took it yet (cheap to poll after each step).
    static SPRUNG: Cell<bool> = const { Cell::new(false) };
}

/// A trap armed at one point ([`arm_trap`]).
struct Trap {
    point: &'static str,
    /// The visit of `point` (1 = the first) at which it springs.
    visit: u64,
    visits: u64,
    /// Whether the point fires when the trap springs (for delay points: the coroutine
    /// stops right there).
    force: bool,
    sprung: bool,
}

/// One run's fault points.
struct State {
    rng: SplitMix64,
    /// Each point reached so far: whether it is active, and how often it fired.
    points: BTreeMap<&'static str, Point>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Point {
    active: bool,
    fired: u64,
}

/// Whether fault point `point` fires now. Always false outside a simulation.
#[inline]
pub fn fires(point: &'static str) -> bool {
    if THREADS_ENABLED.load(Ordering::Relaxed) == 0 {
        return false;
    }
    fires_enabled(point)
}

#[cold]
fn fires_enabled(point: &'static str) -> bool {
    let trapped = TRAP.with(|trap| {
        let mut trap = trap.borrow_mut();
        let trap = trap.as_mut()?;
        if trap.sprung || trap.point != point {
            return None;
        }
        trap.visits += 1;
        if trap.visits < trap.visit {
            return None;
        }
        trap.sprung = true;
        SPRUNG.with(|s| s.set(true));
        Some(trap.force)
    });
    if trapped == Some(true) {
        return true;
    }
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let Some(state) = state.as_mut() else {
            return false;
        };
        let active = match state.points.get(point) {
            Some(p) => p.active,
            None => {
                let active = state.rng.chance(ACTIVATION_PROBABILITY);
                state.points.insert(point, Point { active, fired: 0 });
                active
            }
        };
        if !active || !state.rng.chance(FIRE_PROBABILITY) {
            return false;
        }
        state.points.get_mut(point).expect("inserted above").fired += 1;
        true
    })
}

/// A number drawn uniformly from `0..bound` from the run's seed (0 outside a simulation
/// or for a bound of 0): how long a fired point waits, for example.
pub fn below(bound: u64) -> u64 {
    if bound == 0 || THREADS_ENABLED.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    STATE.with(|state| {
        state
            .borrow_mut()
            .as_mut()
            .map_or(0, |state| state.rng.next() % bound)
    })
}

/// Enables fault points on this thread for one run drawn from `seed`, until the returned
/// guard is dropped.
///
/// # Panics
///
/// If they are already enabled on this thread.
pub fn enable(seed: u64) -> Enabled {
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        assert!(state.is_none(), "fault points enabled twice on one thread");
        *state = Some(State {
            rng: SplitMix64(seed ^ 0xb066_1f7e),
            points: BTreeMap::new(),
        });
    });
    THREADS_ENABLED.fetch_add(1, Ordering::Relaxed);
    Enabled { _private: () }
}

/// Fault points enabled on this thread; dropping it disables them.
#[derive(Debug)]
pub struct Enabled {
    _private: (),
}

impl Enabled {
    /// Every point reached so far with how often it fired (0 for points reached but not
    /// active, or active and never drawn).
    pub fn fired(&self) -> BTreeMap<&'static str, u64> {
        STATE.with(|state| {
            state
                .borrow()
                .as_ref()
                .map(|s| s.points.iter().map(|(k, p)| (*k, p.fired)).collect())
                .unwrap_or_default()
        })
    }
}

impl Drop for Enabled {
    fn drop(&mut self) {
        STATE.with(|state| *state.borrow_mut() = None);
        THREADS_ENABLED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Arms a trap on this thread: the `visit`-th time (1 = the first) any code of this
/// thread reaches fault point `point`, the trap springs, once. A simulator that steps one
/// worker at a time polls [`take_sprung`] after each step and so learns which worker was
/// exactly there (to crash, pause or cut off its node). With `force`, the point fires
/// when the trap springs (at a delay point the coroutine stops right at it); otherwise
/// the point behaves as it would without the trap. Works with or without [`enable`].
/// The trap is disarmed when the returned guard is dropped.
///
/// # Panics
///
/// If a trap is already armed on this thread.
pub fn arm_trap(point: &'static str, visit: u64, force: bool) -> Armed {
    TRAP.with(|trap| {
        let mut trap = trap.borrow_mut();
        assert!(trap.is_none(), "a trap armed twice on one thread");
        *trap = Some(Trap {
            point,
            visit: visit.max(1),
            visits: 0,
            force,
            sprung: false,
        });
    });
    SPRUNG.with(|s| s.set(false));
    THREADS_ENABLED.fetch_add(1, Ordering::Relaxed);
    Armed { _private: () }
}

/// The point of the trap that sprang since the last call, if one did (cheap: one
/// thread-local flag when none did).
pub fn take_sprung() -> Option<&'static str> {
    if !SPRUNG.with(|s| s.replace(false)) {
        return None;
    }
    TRAP.with(|trap| trap.borrow().as_ref().map(|t| t.point))
}

/// A trap armed on this thread; dropping it disarms it.
#[derive(Debug)]
pub struct Armed {
    _private: (),
}

impl Armed {
    /// How often the trap's point was reached so far, and whether it sprang.
    pub fn visits(&self) -> (u64, bool) {
        TRAP.with(|trap| {
            trap.borrow()
                .as_ref()
                .map_or((0, false), |t| (t.visits, t.sprung))
        })
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        TRAP.with(|trap| *trap.borrow_mut() = None);
        SPRUNG.with(|s| s.set(false));
        THREADS_ENABLED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// SplitMix64 (Steele, Lea and Flood): a tiny generator, enough to draw fault decisions
/// from a seed without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, probability: f64) -> bool {
        // 53 random bits as a fraction in [0, 1).
        ((self.next() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "another thread must see nothing enabled"
    )]
    fn nothing_fires_unless_enabled_on_this_thread() {
        assert!(!fires("test.point"));
        let enabled = enable(7);
        // Another thread sees nothing enabled.
        let other = std::thread::spawn(|| (0..1000).any(|_| fires("test.point")));
        assert!(!other.join().unwrap());
        drop(enabled);
        assert!(!(0..1000).any(|_| fires("test.point")));
    }

    #[test]
    fn a_trap_springs_once_at_its_visit() {
        assert_eq!(take_sprung(), None);
        let armed = arm_trap("trap.point", 3, true);
        assert!(!fires("trap.point"));
        assert!(!fires("other.point"));
        assert!(!fires("trap.point"));
        assert_eq!(take_sprung(), None);
        assert!(fires("trap.point"), "forced at the third visit");
        assert_eq!(take_sprung(), Some("trap.point"));
        assert_eq!(take_sprung(), None);
        assert!(!(0..100).any(|_| fires("trap.point")), "once");
        assert_eq!(take_sprung(), None);
        assert!(armed.visits().1);
        drop(armed);
        // Unforced: the point does not fire, but the trap springs.
        let _armed = arm_trap("trap.point", 1, false);
        assert!(!fires("trap.point"));
        assert_eq!(take_sprung(), Some("trap.point"));
    }

    #[test]
    fn a_seed_replays_and_seeds_differ() {
        let run = |seed| {
            let enabled = enable(seed);
            let draws: Vec<bool> = (0..200)
                .map(|i| fires(["a", "b", "c", "d", "e", "f", "g", "h"][i % 8]))
                .collect();
            (draws, enabled.fired())
        };
        assert_eq!(run(1), run(1));
        let runs: Vec<_> = (0..20).map(run).collect();
        assert!(runs.windows(2).any(|w| w[0] != w[1]));
        // Over many seeds some points are active and fire, and some are not.
        let fired: u64 = runs.iter().flat_map(|(_, f)| f.values()).sum();
        let silent = runs
            .iter()
            .flat_map(|(_, f)| f.values())
            .filter(|&&n| n == 0)
            .count();
        assert!(fired > 0 && silent > 0);
    }
}
