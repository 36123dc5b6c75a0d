//! The driver of data recovery ([`crate::refill`]): each worker thread fills the new
//! backups of the partitions `p` with `p % threads == thread`, one paced FETCH at a time,
//! taking its fills in turn. [`REFILL_SLOTS`] coroutines of the thread share that work
//! and its pace ([`RefillThread`]), each fetching from another source, so that a primary
//! cut off or paused holds up only the fills copied from it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_wire::RequestType;

use super::{Coordinator, NO_PRIMARY};
use crate::refill::{
    FETCH_KEYS_MAX, FetchRequest, FetchStatus, FetchWhat, Fill, RefillOptions,
    decode_fetch_response, encode_fetch,
};

/// How long the driver sleeps with nothing to fill (a view switch wakes it sooner).
const IDLE_NS: u64 = 20_000_000;

/// Coroutines per worker thread that run data recovery ([`Coordinator::run_refill`]):
/// the FETCHes one thread may have in flight, each from another source (primary), so
/// that up to this many minus one sources stalled at once leave the others copying.
pub const REFILL_SLOTS: u16 = 4;

/// A FETCH's round trip counts for pacing as at most this many times the smoothed round
/// trip of the answers before it: more is time spent blocked on a primary cut off or
/// paused (a reliable call waits for a heal or a view change), not work.
const STALL_FACTOR: u64 = 4;

/// Where one fill stands in this thread.
struct Progress {
    /// The fill this is the progress of. A fill of the same partition made later (the
    /// node was given the partition to fill again after a view dropped it) is another
    /// copy, empty, and starts from nothing, even from the same primary.
    fill: Arc<Fill>,
    /// The primary copied from: its node and life. Another one means starting again.
    source: (u16, u64),
    /// The table being visited (index into the partition's tables), and the cursor.
    table: usize,
    cursor: u64,
    /// Keys found locked, to fetch again by name, with their table.
    locked: BTreeSet<(TableId, Key)>,
    /// Tables whose floors were taken (the last step, once every object was copied).
    floors: usize,
    /// The log position of the last page of it logged here (issue 32: a fill is done
    /// only once what it copied is on this node's disk).
    logged: u64,
}

/// What the refill coroutines of one worker thread share: the fills' progress, the
/// partitions and sources with a FETCH in flight, and the thread's pace.
#[derive(Default)]
pub struct RefillThread {
    /// Per partition; a fill being stepped is taken out while its FETCH is in flight.
    progress: RefCell<BTreeMap<u32, Progress>>,
    /// Partitions with a FETCH in flight, and the primaries they are fetched from.
    busy: RefCell<BTreeSet<u32>>,
    sources: RefCell<BTreeSet<u16>>,
    /// No FETCH of this thread starts before then, whichever coroutine makes it.
    next_ns: Cell<u64>,
    /// The fill taken last, so that fills are taken in turn.
    turn: Cell<usize>,
    /// Smoothed round trip of the FETCHes answered (capped as [`STALL_FACTOR`] says).
    srtt_ns: Cell<u64>,
}

/// How one FETCH went.
struct Step {
    /// Its partition is down to one copy.
    last_copy: bool,
    /// The primary answered it, and the answer was applied.
    answered: bool,
}

impl Coordinator {
    /// Fills this thread's share of the node's new backups, forever (one of the
    /// [`REFILL_SLOTS`] background coroutines of every worker, sharing `thread_state`),
    /// one FETCH at a time per coroutine and at the thread's pace, its fills in turn,
    /// after a first delay drawn from `seed` and `slot`.
    ///
    /// After each FETCH the thread waits `options.interval_ns`, or `options.pace` times
    /// the FETCH's work (its round trip, with the primary's work and queue, and applying
    /// its answer) if that is longer, so that copying takes a bounded share of the
    /// threads' time however slow the machine; both divided by `last_copy_speedup` for a
    /// partition left with one copy. The work counts a round trip at most
    /// [`STALL_FACTOR`] times the smoothed one: time blocked on a primary cut off or
    /// paused is not work, so a FETCH answered after a heal does not hold the fills back
    /// for `pace` times the cut. A FETCH not answered (refused, the view changed) waits
    /// the interval.
    pub async fn run_refill(
        &self,
        co: Co,
        options: RefillOptions,
        seed: u64,
        slot: u16,
        thread_state: std::rc::Rc<RefillThread>,
    ) {
        let threads = u64::from(self.ship_threads.get().max(1));
        let thread = u64::from(self.local.thread());
        let shared = &*thread_state;
        let mut started = false;
        loop {
            let store = self.store();
            let mine: Vec<Arc<Fill>> = store
                .fills()
                .iter()
                .filter(|f| u64::from(f.partition()) % threads == thread && !f.is_done())
                .cloned()
                .collect();
            // Progress belongs to its fill, not its partition: a step in flight across
            // views that dropped the fill and gave it again (the same primary back, a
            // suspended life readmitted) must not carry the old copy's position over.
            shared.progress.borrow_mut().retain(|p, s| {
                mine.iter()
                    .any(|f| f.partition() == *p && Arc::ptr_eq(f, &s.fill))
            });
            if mine.is_empty() || !self.accepting.get() {
                // Nothing to fill, or the view is not committed yet.
                co.wait_until(&self.opened, co.now_ns() + IDLE_NS).await;
                continue;
            }
            if !started {
                // A random start, so that the nodes filling do not all ask at once.
                started = true;
                let delay = splitmix(seed ^ thread ^ u64::from(slot) << 16)
                    % options.interval_ns.max(1).saturating_mul(4);
                co.sleep_until(co.now_ns() + delay).await;
                continue;
            }
            if co.now_ns() < shared.next_ns.get() {
                co.sleep_until(shared.next_ns.get()).await;
                continue;
            }
            // The next fill in turn that no coroutine of this thread is fetching, from a
            // source none is fetching from.
            let placement = self.placement();
            let start = shared.turn.get();
            let pick = (1..=mine.len())
                .map(|i| {
                    (
                        start.wrapping_add(i),
                        &mine[start.wrapping_add(i) % mine.len()],
                    )
                })
                .find(|(_, f)| {
                    let p = f.partition();
                    !shared.busy.borrow().contains(&p)
                        && !shared.sources.borrow().contains(&placement.primary(p))
                });
            let Some((turn, fill)) = pick else {
                // Every fill left is in flight, or its source is.
                co.sleep_until(co.now_ns() + options.interval_ns.max(1))
                    .await;
                continue;
            };
            shared.turn.set(turn);
            let (p, source) = (fill.partition(), placement.primary(fill.partition()));
            drop(placement);
            shared.busy.borrow_mut().insert(p);
            shared.sources.borrow_mut().insert(source);
            let mut state = shared.progress.borrow_mut().remove(&p);
            let began = co.now_ns();
            let step = self.fill_step(&co, fill, &mut state, &options).await;
            let took = co.now_ns().saturating_sub(began);
            if let Some(state) = state {
                shared.progress.borrow_mut().insert(p, state);
            }
            shared.busy.borrow_mut().remove(&p);
            shared.sources.borrow_mut().remove(&source);
            let work = if step.answered {
                let srtt = shared.srtt_ns.get();
                let work = took.min(srtt.saturating_mul(STALL_FACTOR).max(options.interval_ns));
                shared.srtt_ns.set(if srtt == 0 {
                    work
                } else {
                    (7 * srtt + work) / 8
                });
                work
            } else {
                0
            };
            let speedup = if step.last_copy {
                options.last_copy_speedup.max(1)
            } else {
                1
            };
            let pause = options.interval_ns.max(work.saturating_mul(options.pace)) / speedup;
            let next = co.now_ns() + pause;
            shared.next_ns.set(shared.next_ns.get().max(next));
        }
    }

    /// One FETCH of `fill`, applied, from its progress `slot` (made if `None`).
    async fn fill_step(
        &self,
        co: &Co,
        fill: &Arc<Fill>,
        slot: &mut Option<Progress>,
        options: &RefillOptions,
    ) -> Step {
        let p = fill.partition();
        let placement = self.placement();
        let primary = placement.primary(p);
        let copies = 1 + placement.backups(p).len() - placement.filling(p).len();
        let unanswered = Step {
            last_copy: copies <= 1,
            answered: false,
        };
        if primary == NO_PRIMARY || primary == self.local.node() {
            return Step {
                last_copy: false,
                ..unanswered
            };
        }
        let store = self.store();
        let Some(copy) = store.get_any(p) else {
            return Step {
                last_copy: false,
                ..unanswered
            };
        };
        let tables: Vec<TableId> = copy.tables().collect();
        let life = self
            .members
            .borrow()
            .iter()
            .find(|m| m.0 == primary)
            .map_or(0, |m| m.1);
        let fresh = Progress {
            fill: fill.clone(),
            source: (primary, life),
            table: 0,
            cursor: 0,
            locked: BTreeSet::new(),
            floors: 0,
            logged: 0,
        };
        let restarted = slot.as_ref().is_some_and(|s| s.source != (primary, life));
        if slot.is_none() || restarted {
            // A copy from nothing (a new primary: its index has another order): on this
            // node's disk, the writes to the partition logged before this view are the
            // old copy's (`crate::participant::restore`).
            self.participant.borrow_mut().log_fill_begin(p, self.view());
            *slot = Some(fresh);
            if restarted {
                fill.restarted();
            }
        }
        let state = slot.as_mut().expect("set above");
        let request = if let Some(&table) = tables.get(state.table) {
            FetchRequest {
                partition: p,
                table,
                what: FetchWhat::Page {
                    cursor: state.cursor,
                    count: options.objects_per_fetch,
                    bytes_max: options.bytes_per_fetch,
                },
            }
        } else if let Some(&(table, _)) = state.locked.first() {
            let keys: Vec<Key> = state
                .locked
                .iter()
                .filter(|(t, _)| *t == table)
                .take(FETCH_KEYS_MAX / 2)
                .map(|(_, k)| *k)
                .collect();
            FetchRequest {
                partition: p,
                table,
                what: FetchWhat::Keys(keys),
            }
        } else if let Some(&table) = tables.get(state.floors) {
            FetchRequest {
                partition: p,
                table,
                what: FetchWhat::Floors,
            }
        } else {
            // Done once what it copied is on this node's disk too (at once in `memory`
            // mode).
            let logged = state.logged;
            if !crate::participant::Participant::wait_durable(&self.participant, co, logged).await {
                return unanswered;
            }
            fill.set_done();
            return unanswered;
        };
        co.push_with(
            self.endpoint(primary),
            RequestType::Fetch.into(),
            |buffer| encode_fetch(&request, buffer),
        );
        co.call().await;
        if self.placement().primary(p) != primary {
            // The view changed meanwhile: the next step starts again if it must.
            return unanswered;
        }
        let (mut objects, mut bytes) = (0u64, 0u64);
        let mut logged = 0u64;
        let mut refetched = Vec::new();
        let mut locked = Vec::new();
        let answered = co.result(0, |response| {
            let Ok(bytes_in) = response else {
                return None;
            };
            let Ok((FetchStatus::Ok, Some(page))) = decode_fetch_response(bytes_in) else {
                return None;
            };
            let next = page.next_cursor;
            if request.what == FetchWhat::Floors {
                // Keys the primary reclaimed before now read here at no lower version,
                // bucket by bucket (crates/store `Partition::raise_floors_each`).
                let floors = page.floors().ok()?;
                logged = self.participant.borrow_mut().log_fill(
                    p,
                    self.view(),
                    request.table,
                    true,
                    bytes_in,
                );
                return copy
                    .raise_floors_each(request.table, &floors)
                    .ok()
                    .map(|()| 0);
            }
            // On this node's disk, for a restart (`crate::participant::restore`).
            logged = self.participant.borrow_mut().log_fill(
                p,
                self.view(),
                request.table,
                false,
                bytes_in,
            );
            let visited = page.visit(
                |o| {
                    objects += 1;
                    bytes += (o.key.as_bytes().len() + o.value.map_or(0, <[u8]>::len)) as u64;
                    refetched.push(o.key);
                    if o.version > 0 {
                        // Newer than the copy's, or left alone.
                        let _ = copy.apply(request.table, &o.key, o.version, o.value);
                    }
                },
                |key| locked.push(key),
            );
            visited.ok().map(|()| next)
        });
        let Some(next) = answered else {
            // Not ready (recovery), refused (a view change coming), lost: try again.
            return unanswered;
        };
        fill.copied(objects, bytes);
        state.logged = state.logged.max(logged);
        let table = request.table;
        match request.what {
            FetchWhat::Page { .. } => {
                state.cursor = next;
                if next == 0 {
                    state.table += 1;
                }
            }
            FetchWhat::Keys(_) => {
                for key in refetched {
                    state.locked.remove(&(table, key));
                }
            }
            FetchWhat::Floors => state.floors += 1,
        }
        for key in locked {
            state.locked.insert((table, key));
        }
        if ferrotx_buggify::fires("txn.refill.after_fetch") {
            // A filling node slowed here; the simulator's traps fail a node at this point.
            super::buggify_delay(co).await;
        }
        Step {
            answered: true,
            ..unanswered
        }
    }
}

/// A 64-bit mix (splitmix64's finaliser), for the first delay.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
