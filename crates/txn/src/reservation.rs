//! Ages and reservations: how a transaction that keeps losing eventually wins (issue 14,
//! docs/transactions.md "Fairness").
//!
//! FaRM's commit is optimistic: a transaction reads without locking and locks what it
//! writes only at commit, so under contention one may lose again and again. A caller
//! that retries a lost transaction gives each later attempt the transaction's [`Age`]:
//! how many attempts it has lost so far, and who it is. The attempt's LOCK and VALIDATE
//! then *reserve* every object they name at its primary, for whichever transaction goes
//! first: the one that lost more attempts (ties go to the smaller id). While a
//! reservation holds, the primary refuses to lock the object for a transaction that
//! does not go before its owner (one with no age, a first attempt, goes after all), as
//! wait-die makes the younger die; the owner and those before it go ahead. So nothing
//! that comes after the owner can change the object between two of its attempts, and
//! the transaction that goes first of all those waiting, refused by no one, wins within
//! a few attempts: its first aged attempt reserves every object it writes (all its
//! LOCKs are sent at once), the next reserves what it reads, and the one after finds
//! nothing changed. One that loses goes up, so each waiting transaction in turn goes
//! first; new ones start at the bottom.
//!
//! Ages count attempts, not time: no clock is shared between nodes (the simulator's
//! nodes are up to a second apart, and a clock that runs ahead must not make a node's
//! transactions lose for as long). Callers retry aged transactions at about the same
//! rate (every 50 to 100 us in the Redis front end), so attempts lost measure time
//! waited.
//!
//! A reservation is soft state, kept by the node (for all its worker threads) until:
//! - its owner's COMMIT-PRIMARY installs the object (the primary remembers the age of
//!   each aged LOCK it granted);
//! - [`RESERVATION_NS`] pass without its owner asking again (an owner that gave up,
//!   crashed, or was cut off): nothing waits on a reservation, so a lost one costs its
//!   owner at most another attempt, and a dead owner's blocks others for at most that
//!   long;
//! - a reconfiguration (the node's store is rebuilt; the owners retry).
//!
//! It has no log record and no effect on safety: a refusal is an abort, which the
//! protocol always allows. The uncontended path pays one relaxed atomic load per locked
//! object (no reservation anywhere on the node: nothing else).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferrotx_store::{Key, TableId};
use foldhash::fast::FixedState;
use hashbrown::HashMap;

/// How long a reservation outlives its owner's last LOCK or VALIDATE: several attempts
/// of a transaction retrying with a short back-off, far below a command's timeout.
pub const RESERVATION_NS: u64 = 10_000_000;

/// How long a transaction has been losing: the attempts it lost, and a number unique to
/// it. One that lost more goes first; of two that lost as many, the one with the smaller
/// number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Age {
    /// Attempts lost before this one.
    pub lost: u64,
    /// Unique to the transaction (its coordinator's endpoint and a counter): the
    /// reservations' owner.
    pub who: u64,
}

impl Age {
    /// Bytes of an encoded age.
    pub const BYTES: usize = 16;

    /// The same transaction, having lost `lost` attempts.
    pub fn after(self, lost: u32) -> Age {
        Age {
            lost: u64::from(lost),
            ..self
        }
    }

    /// Whether this transaction goes before `other` (another transaction).
    pub fn goes_before(self, other: Age) -> bool {
        self.lost > other.lost || (self.lost == other.lost && self.who < other.who)
    }

    /// Whether it is the same transaction as `other`.
    pub fn same(self, other: Age) -> bool {
        self.who == other.who
    }

    /// Appends its encoding.
    pub fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.lost.to_le_bytes());
        out.extend_from_slice(&self.who.to_le_bytes());
    }

    /// Splits an age off the front of `bytes`.
    pub fn decode(bytes: &[u8]) -> Option<(Age, &[u8])> {
        let (age, rest) = bytes.split_first_chunk::<{ Age::BYTES }>()?;
        let (lost, who) = age.split_at(8);
        Some((
            Age {
                lost: u64::from_le_bytes(lost.try_into().ok()?),
                who: u64::from_le_bytes(who.try_into().ok()?),
            },
            rest,
        ))
    }
}

/// One reserved object.
#[derive(Clone, Copy, Debug)]
struct Reservation {
    owner: Age,
    /// Node-local time (the worker's clock) after which it no longer holds.
    expires_ns: u64,
}

/// An object's place: partition, table, key.
type Place = (u32, TableId, Key);

/// Entries beyond which a reservation sweeps the expired ones out of the map.
const SWEEP_AT: usize = 256;

/// Most reservations held at once: sixteen transactions of the largest size
/// ([`crate::messages::ITEMS_MAX`] objects) reserving together, about 4 MiB. LOCK_AGED and
/// VALIDATE_AGED reserve whatever objects they name (issue 29), so without a bound a peer
/// could grow the map without end within one [`RESERVATION_NS`]. Beyond it a reservation
/// is not made (counted, [`Reservations::refused`]) until those held have expired, at
/// most [`RESERVATION_NS`] after the latest: reservations only help a transaction that
/// keeps losing win at last, and nothing needs one for correctness.
const RESERVATIONS_MAX: usize = 1 << 16;

/// The reservations of one node's primaries, shared by its worker threads (on a cache
/// line of its own: the store's fields beside it are read by every message).
#[derive(Default)]
#[repr(align(64))]
pub struct Reservations {
    /// Entries in `map`: zero on the uncontended path, which then takes no lock.
    live: AtomicUsize,
    /// The latest expiry of any reservation made: once past it, every entry has expired
    /// and the first look clears the map (so the fast path comes back within
    /// [`RESERVATION_NS`] of the last contention).
    latest_expiry_ns: AtomicU64,
    map: Mutex<HashMap<Place, Reservation, FixedState>>,
    /// Reservations not made because `RESERVATIONS_MAX` were held.
    refused: AtomicU64,
    /// Entries at which the next reservation sweeps expired ones out: twice those left by
    /// the last sweep (at least `SWEEP_AT`), so that many live reservations are not
    /// scanned at every reservation (changed under the map's lock).
    sweep_at: AtomicUsize,
}

impl Reservations {
    /// Whether a transaction of `age` (`None`: a first attempt, which goes after all)
    /// may lock the object at `place` at node-local time `now_ns`: yes unless a
    /// reservation of a transaction that goes before it holds it. An expired reservation
    /// is dropped.
    #[inline]
    pub fn admits(&self, place: Place, age: Option<Age>, now_ns: u64) -> bool {
        if self.live.load(Ordering::Relaxed) == 0 {
            return true;
        }
        self.admits_slow(place, age, now_ns)
    }

    fn admits_slow(&self, place: Place, age: Option<Age>, now_ns: u64) -> bool {
        let mut map = self.lock();
        if now_ns >= self.latest_expiry_ns.load(Ordering::Relaxed) {
            map.clear();
            self.live.store(0, Ordering::Relaxed);
            return true;
        }
        let Some(held) = map.get(&place) else {
            return true;
        };
        if held.expires_ns <= now_ns {
            map.remove(&place);
            self.live.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
        age.is_some_and(|age| age.same(held.owner) || age.goes_before(held.owner))
    }

    /// Reserves the object at `place` for `age` until [`RESERVATION_NS`] after `now_ns`,
    /// unless another transaction that goes before it holds it (then nothing changes).
    pub fn reserve(&self, place: Place, age: Age, now_ns: u64) {
        let mut map = self.lock();
        if now_ns >= self.latest_expiry_ns.load(Ordering::Relaxed) && !map.is_empty() {
            // Every reservation has expired (as in `admits_slow`).
            map.clear();
            self.live.store(0, Ordering::Relaxed);
        }
        let fresh = Reservation {
            owner: age,
            expires_ns: now_ns.saturating_add(RESERVATION_NS),
        };
        self.latest_expiry_ns
            .fetch_max(fresh.expires_ns, Ordering::Relaxed);
        if map.len() >= self.sweep_at.load(Ordering::Relaxed).max(SWEEP_AT) {
            map.retain(|_, held| held.expires_ns > now_ns);
            self.live.store(map.len(), Ordering::Relaxed);
            self.sweep_at.store(2 * map.len(), Ordering::Relaxed);
        }
        match map.entry(place) {
            hashbrown::hash_map::Entry::Vacant(_)
                if self.live.load(Ordering::Relaxed) >= RESERVATIONS_MAX =>
            {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            hashbrown::hash_map::Entry::Vacant(entry) => {
                entry.insert(fresh);
                self.live.fetch_add(1, Ordering::Relaxed);
            }
            hashbrown::hash_map::Entry::Occupied(mut entry) => {
                let held = entry.get_mut();
                if held.expires_ns <= now_ns || held.owner.same(age) || age.goes_before(held.owner)
                {
                    *held = fresh;
                }
            }
        }
    }

    /// Drops the reservation of `place` if `age` owns it (its owner installed the
    /// object).
    pub fn release(&self, place: Place, age: Age) {
        if self.live.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut map = self.lock();
        if map.get(&place).is_some_and(|held| held.owner.same(age)) {
            map.remove(&place);
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The map, even if a thread panicked holding it (reservations are soft state).
    fn lock(&self) -> MutexGuard<'_, HashMap<Place, Reservation, FixedState>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reservations not made because the most that may be held were held.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Reservations held (some may have expired and not been dropped yet).
    pub fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn age(lost: u64, who: u64) -> Age {
        Age { lost, who }
    }

    fn place(k: u64) -> Place {
        (0, TableId(1), Key::from_pair(k, 0))
    }

    #[test]
    fn an_age_round_trips_and_goes_by_attempts_lost_then_who() {
        let a = age(5, 9);
        let mut bytes = Vec::new();
        a.encode(&mut bytes);
        bytes.push(7);
        assert_eq!(Age::decode(&bytes), Some((a, &[7u8][..])));
        assert_eq!(Age::decode(&bytes[..15]), None);
        assert!(age(5, 100).goes_before(age(4, 0)));
        assert!(age(5, 1).goes_before(age(5, 2)));
        assert!(!a.goes_before(a));
        assert!(a.after(6).goes_before(a));
        assert!(a.after(6).same(a));
    }

    #[test]
    fn a_reservation_refuses_later_transactions_until_it_expires_or_is_released() {
        let r = Reservations::default();
        let (first, later) = (age(10, 1), age(3, 2));
        assert!(r.admits(place(1), None, 0));
        r.reserve(place(1), first, 0);
        assert_eq!(r.len(), 1);
        // First attempts and later ages are refused; the owner (with any count) and
        // those that go before it are not.
        assert!(!r.admits(place(1), None, 1));
        assert!(!r.admits(place(1), Some(later), 1));
        assert!(r.admits(place(1), Some(first), 1));
        assert!(r.admits(place(1), Some(first.after(0)), 1));
        assert!(r.admits(place(1), Some(age(11, 7)), 1));
        // Other objects are free.
        assert!(r.admits(place(2), None, 1));
        // A later transaction cannot take it over; one that goes before can, and the
        // owner may lose it that way.
        r.reserve(place(1), later, 2);
        assert!(!r.admits(place(1), Some(later), 3));
        r.reserve(place(1), age(11, 7), 3);
        assert!(!r.admits(place(1), Some(first), 4));
        // Only the owner releases it.
        r.release(place(1), first);
        assert!(!r.admits(place(1), Some(first), 4));
        r.release(place(1), age(0, 7));
        assert!(r.is_empty());
        assert!(r.admits(place(1), None, 4));
        // Expiry: refused just before, free at the deadline (and dropped).
        r.reserve(place(3), first, 100);
        assert!(!r.admits(place(3), None, 100 + RESERVATION_NS - 1));
        assert!(r.admits(place(3), None, 100 + RESERVATION_NS));
        assert!(r.is_empty());
        // An expired reservation is taken over by anyone who reserves; an owner that
        // reserves again refreshes it.
        r.reserve(place(4), first, 0);
        r.reserve(place(4), later, RESERVATION_NS);
        assert!(r.admits(place(4), Some(later), RESERVATION_NS + 1));
        assert!(!r.admits(place(4), Some(age(1, 3)), RESERVATION_NS + 1));
        r.reserve(place(4), later.after(4), 2 * RESERVATION_NS);
        assert!(!r.admits(place(4), None, 3 * RESERVATION_NS - 1));
    }

    #[test]
    fn expired_reservations_leave_the_map_and_the_fast_path_comes_back() {
        let r = Reservations::default();
        for k in 0..10 {
            r.reserve(place(k), age(1, k), k);
        }
        assert_eq!(r.len(), 10);
        // Once the last has expired, the first look at any object clears them all.
        assert!(r.admits(place(99), None, 9 + RESERVATION_NS));
        assert!(r.is_empty());
        // Many reservations: those expired are swept out when one is made.
        for k in 0..SWEEP_AT as u64 {
            r.reserve(place(k), age(1, k), 0);
        }
        r.reserve(place(1000), age(1, 1), RESERVATION_NS);
        assert_eq!(r.len(), 1);
        assert!(!r.admits(place(1000), None, RESERVATION_NS + 1));
    }

    /// Issue 29: LOCK_AGED and VALIDATE_AGED reserve whatever objects they name, so a peer
    /// sending many within one reservation's life grew the map without bound.
    #[test]
    fn reservations_are_bounded() {
        let r = Reservations::default();
        let max = 1usize << 16;
        for k in 0..(max as u64 + 1000) {
            r.reserve(place(k), age(1, k), 0);
        }
        assert!(r.len() <= max, "{} reservations", r.len());
        assert_eq!(max, RESERVATIONS_MAX);
        assert_eq!(r.refused(), 1000);
        // Once they expire, reservations are made again.
        r.reserve(place(u64::MAX), age(1, 1), RESERVATION_NS);
        assert_eq!(r.len(), 1);
    }

    proptest! {
        #[test]
        fn any_age_round_trips(lost in any::<u64>(), who in any::<u64>(), rest in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut bytes = Vec::new();
            age(lost, who).encode(&mut bytes);
            prop_assert_eq!(bytes.len(), Age::BYTES);
            bytes.extend_from_slice(&rest);
            let (decoded, after) = Age::decode(&bytes).unwrap();
            prop_assert_eq!(decoded, age(lost, who));
            prop_assert_eq!(after, &rest[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(Age::decode(&bytes).is_some(), bytes.len() >= Age::BYTES);
        }
    }
}
