//! Randomized, growing back-off between the attempts of a transaction.
//!
//! Coordinators on different nodes that write the same hot keys at the same moment each
//! lock their own node's keys in memory first and lose the others': retried at once, they
//! can keep doing so. Waiting a random time that grows with each attempt breaks the tie;
//! a retry that lost a conflict also carries its age, which makes transactions take turns
//! (docs/transactions.md, "Fairness"), and then waits briefly ([`Backoff::wait_aged`]).

use ferrotx_exec::Co;

/// How long a transaction is retried before the client is told it failed. A few
/// clients incrementing one key from every node of a loaded 2-core machine needed up to
/// 76 attempts over 0.46 s; the limit leaves room for several times that, and is still
/// below the timeouts clients commonly set.
const RETRY_NS_MAX: u64 = 2_000_000_000;

/// Most attempts of one transaction, whatever the time: retries end even where the
/// clock barely moves. Aged retries wait 50 to 100 us, so [`RETRY_NS_MAX`] holds up to
/// about 27,000 of them: this bound must not end them first.
const ATTEMPTS_MAX: u32 = 1 << 16;

/// The first back-off's ceiling: a couple of round trips between nodes.
const BACKOFF_FIRST_NS: u64 = 10_000;

/// The largest back-off: long enough for a few commits of other coordinators to finish,
/// short enough that a retried command still answers within milliseconds.
const BACKOFF_MAX_NS: u64 = 2_000_000;

/// Conflicts a transaction loses before its retries carry its age. Mild contention is
/// left to optimism and the growing back-off, which costs nothing; a transaction that
/// keeps losing then takes its turn. Measured with `scripts/hot_pair.py` (10 clients per
/// node on two keys of two primaries, quiet machine, two runs each): ages from the
/// first lost conflict gave 2,757 and 2,534 blocks/s, from the 16th 3,885 and 3,363
/// (the build without ages: 3,541 and 3,262), every node's share at least 22% in both
/// (8% without ages), the longest block 60 and 102 ms (456 and 575 ms without); from
/// the 4th, 2,492 and 2,018.
pub(crate) const AGE_AFTER_LOST: u32 = 16;

/// The largest back-off of a transaction that carries its age ([`Backoff::wait_aged`]):
/// its objects are reserved for it meanwhile, so others wait on it while it sleeps; a
/// few round trips let the commit that beat it finish.
const BACKOFF_AGED_MAX_NS: u64 = 100_000;

/// The back-off of one transaction's attempts.
pub(crate) struct Backoff {
    /// xorshift64 state, never 0.
    state: u64,
    attempt: u32,
    started_ns: u64,
}

impl Backoff {
    /// A back-off for a transaction first tried at `now_ns`, whose random draws come from
    /// `seed` (deterministic, so that a run in the simulator replays).
    pub fn new(seed: u64, now_ns: u64) -> Self {
        Self {
            state: seed | 1,
            attempt: 0,
            started_ns: now_ns,
        }
    }

    /// True once the transaction has been retried long enough ([`RETRY_NS_MAX`]) or
    /// often enough ([`ATTEMPTS_MAX`]): give up rather than wait again.
    pub fn exhausted(&self, co: &Co) -> bool {
        self.attempt + 1 >= ATTEMPTS_MAX
            || co.now_ns().saturating_sub(self.started_ns) >= RETRY_NS_MAX
    }

    /// The next wait: uniform in the upper half of a ceiling that doubles per attempt,
    /// up to [`BACKOFF_MAX_NS`].
    pub fn next_delay_ns(&mut self) -> u64 {
        let ceiling = (BACKOFF_FIRST_NS << self.attempt.min(16)).min(BACKOFF_MAX_NS);
        self.attempt += 1;
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        ceiling / 2 + self.state % (ceiling / 2 + 1)
    }

    /// Waits the next delay asleep on the worker's timer ([`Co::sleep_until`]), so the
    /// worker's other coroutines and its event loop go on meanwhile, and an otherwise
    /// idle worker sleeps. Time passes while it sleeps in the simulator too, which a
    /// coroutine that yielded until its deadline would not let it do (time stands still
    /// while a worker has work).
    pub async fn wait(&mut self, co: &Co) {
        let delay = self.next_delay_ns();
        co.sleep_until(co.now_ns() + delay).await;
    }

    /// The wait after an abort of a transaction that has lost `lost` conflicts so far:
    /// [`Backoff::wait_aged`] once its retries carry its age ([`AGE_AFTER_LOST`]), else
    /// [`Backoff::wait`].
    pub async fn wait_after(&mut self, co: &Co, lost: u32) {
        if lost >= AGE_AFTER_LOST {
            self.wait_aged(co).await;
        } else {
            self.wait(co).await;
        }
    }

    /// [`Backoff::wait`] before an attempt that carries the transaction's age
    /// ([`ferrotx_txn::reservation`]): capped at [`BACKOFF_AGED_MAX_NS`], since the
    /// objects it reserved stay idle for younger transactions while it sleeps.
    pub async fn wait_aged(&mut self, co: &Co) {
        let delay = match self.next_delay_ns() {
            // Still random, so that two aged transactions do not retry in step.
            d if d > BACKOFF_AGED_MAX_NS => {
                BACKOFF_AGED_MAX_NS / 2 + d % (BACKOFF_AGED_MAX_NS / 2 + 1)
            }
            d => d,
        };
        co.sleep_until(co.now_ns() + delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_up_to_the_cap_and_differ_between_seeds() {
        let mut backoff = Backoff::new(7, 0);
        let mut ceiling = BACKOFF_FIRST_NS;
        for _ in 0..64 {
            let delay = backoff.next_delay_ns();
            assert!(
                (ceiling / 2..=ceiling).contains(&delay),
                "{delay} {ceiling}"
            );
            ceiling = (ceiling * 2).min(BACKOFF_MAX_NS);
        }
        let draws = |seed| {
            let mut backoff = Backoff::new(seed, 0);
            (0..8).map(|_| backoff.next_delay_ns()).collect::<Vec<_>>()
        };
        assert_ne!(draws(1), draws(2));
        assert_eq!(draws(3), draws(3));
    }
}
