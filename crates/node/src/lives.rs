//! A node's successive lives: what a process removed from the cluster while alive (a
//! false positive: paused past its lease, or cut off by a partition that healed) does to
//! come back as a new life, shared by `ferrotx node` (which replaces its process,
//! `crates/ferrotx/src/rejoin.rs`) and a benchmark's driven node (which starts a new life
//! inside its process, `ferrotx_bench::driver`), so that `cluster local` and `bench`
//! clusters behave the same: the new life joins the running cluster, holds nothing at
//! first and is given backups to fill. A false positive costs one refill, not a node.

use std::time::Duration;

/// A life removed sooner than this after its admission is removed "quickly": the next
/// one waits first. A lease is at most a few seconds, and a node that keeps its lease for
/// a second after admission renewed it several times.
pub const QUICK_REMOVAL: Duration = Duration::from_secs(1);

/// The first wait after a quick removal: a few leases of the default length.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The longest wait: a node that keeps being removed still tries every few seconds,
/// which costs the cluster one reconfiguration each time.
pub const BACKOFF_MAX: Duration = Duration::from_secs(4);

/// The wait before the next life, after a life that was a member for `lasted` and was
/// itself preceded by a wait of `previous`: none after a life that lasted, else twice the
/// previous one, from [`BACKOFF_FIRST`] up to [`BACKOFF_MAX`], so that a node too slow
/// for its lease does not make the cluster reconfigure in a tight loop.
pub fn next_backoff(lasted: Duration, previous: Duration) -> Duration {
    if lasted >= QUICK_REMOVAL {
        return Duration::ZERO;
    }
    let backoff = (previous * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX);
    assert!(backoff > Duration::ZERO && backoff <= BACKOFF_MAX);
    backoff
}

/// The incarnation of a new life of a node whose last life was `previous` (`None`: the
/// first), with the clock at `clock` ([`crate::incarnation_from_clock`]): greater than
/// the removed life's even if the clock is coarse or stepped back, or the members would
/// take the new life's datagrams for the old one's.
pub fn next_incarnation(previous: Option<u64>, clock: u64) -> u64 {
    let incarnation = match previous {
        Some(previous) => clock.max(previous.checked_add(1).expect("incarnations fit u64")),
        None => clock,
    };
    assert!(incarnation >= 1, "incarnation 0 is no life");
    incarnation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_life_is_later_than_the_removed_one_whatever_the_clock() {
        assert_eq!(next_incarnation(None, 1_000), 1_000);
        // The clock moved on: it is taken.
        assert_eq!(next_incarnation(Some(1_000), 5_000), 5_000);
        // The same microsecond, or a clock that stepped back: one more than the old life.
        assert_eq!(next_incarnation(Some(1_000), 1_000), 1_001);
        assert_eq!(next_incarnation(Some(1_000), 3), 1_001);
    }

    #[test]
    fn quick_removals_wait_longer_each_time_up_to_the_cap() {
        let quick = Duration::from_millis(200);
        assert_eq!(next_backoff(quick, Duration::ZERO), BACKOFF_FIRST);
        assert_eq!(next_backoff(quick, BACKOFF_FIRST), BACKOFF_FIRST * 2);
        assert_eq!(next_backoff(quick, BACKOFF_MAX), BACKOFF_MAX);
        let mut backoff = Duration::ZERO;
        for _ in 0..20 {
            let next = next_backoff(quick, backoff);
            assert!(next >= backoff && next <= BACKOFF_MAX);
            backoff = next;
        }
        assert_eq!(backoff, BACKOFF_MAX);
        // A life that lasted starts the count again.
        assert_eq!(next_backoff(QUICK_REMOVAL, BACKOFF_MAX), Duration::ZERO);
        assert_eq!(
            next_backoff(Duration::from_secs(60), BACKOFF_FIRST),
            Duration::ZERO
        );
    }
}
