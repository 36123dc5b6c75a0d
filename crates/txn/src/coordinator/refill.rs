//! The driver of data recovery ([`crate::refill`]): each worker thread fills the new
//! backups of the partitions `p` with `p % threads == thread`, one paced FETCH at a time,
//! taking its fills in turn.

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
}

impl Coordinator {
    /// Fills this thread's share of the node's new backups, forever (a background
    /// coroutine of every worker), one FETCH at a time, its fills in turn, after a first
    /// delay drawn from `seed`. After each FETCH it waits `options.interval_ns`, or
    /// `options.pace` times as long as the FETCH took (its round trip and applying its
    /// answer) if that is longer, so that copying takes a bounded share of the threads'
    /// time however slow the machine; both divided by `last_copy_speedup` for a partition
    /// left with one copy.
    pub async fn run_refill(&self, co: Co, options: RefillOptions, seed: u64) {
        let threads = u64::from(self.ship_threads.get().max(1));
        let thread = u64::from(self.local.thread());
        let mut progress: BTreeMap<u32, Progress> = BTreeMap::new();
        let mut started = false;
        let mut turn = 0usize;
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
            progress.retain(|p, s| {
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
                let delay = splitmix(seed ^ thread) % options.interval_ns.max(1).saturating_mul(4);
                co.sleep_until(co.now_ns() + delay).await;
                continue;
            }
            turn = turn.wrapping_add(1);
            let fill = &mine[turn % mine.len()];
            let began = co.now_ns();
            let last_copy = self.fill_step(&co, fill, &mut progress, &options).await;
            let took = co.now_ns().saturating_sub(began);
            let speedup = if last_copy {
                options.last_copy_speedup.max(1)
            } else {
                1
            };
            let pause = options.interval_ns.max(took.saturating_mul(options.pace)) / speedup;
            co.sleep_until(co.now_ns() + pause).await;
        }
    }

    /// One FETCH of `fill`, applied. Returns whether its partition is down to one copy.
    async fn fill_step(
        &self,
        co: &Co,
        fill: &Arc<Fill>,
        progress: &mut BTreeMap<u32, Progress>,
        options: &RefillOptions,
    ) -> bool {
        let p = fill.partition();
        let placement = self.placement();
        let primary = placement.primary(p);
        let copies = 1 + placement.backups(p).len() - placement.filling(p).len();
        if primary == NO_PRIMARY || primary == self.local.node() {
            return false;
        }
        let store = self.store();
        let Some(copy) = store.get_any(p) else {
            return false;
        };
        let tables: Vec<TableId> = copy.tables().collect();
        let life = self
            .members
            .borrow()
            .iter()
            .find(|m| m.0 == primary)
            .map_or(0, |m| m.1);
        let state = progress.entry(p).or_insert_with(|| Progress {
            fill: fill.clone(),
            source: (primary, life),
            table: 0,
            cursor: 0,
            locked: BTreeSet::new(),
            floors: 0,
        });
        if state.source != (primary, life) {
            // A new primary: its index has another order, so start again.
            *state = Progress {
                fill: fill.clone(),
                source: (primary, life),
                table: 0,
                cursor: 0,
                locked: BTreeSet::new(),
                floors: 0,
            };
            fill.restarted();
        }
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
            fill.set_done();
            return copies <= 1;
        };
        co.push_with(
            self.endpoint(primary),
            RequestType::Fetch.into(),
            |buffer| encode_fetch(&request, buffer),
        );
        co.call().await;
        if self.placement().primary(p) != primary {
            // The view changed meanwhile: the next step starts again if it must.
            return copies <= 1;
        }
        let (mut objects, mut bytes) = (0u64, 0u64);
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
                return copy
                    .raise_floors_each(request.table, &floors)
                    .ok()
                    .map(|()| 0);
            }
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
            return copies <= 1;
        };
        fill.copied(objects, bytes);
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
        copies <= 1
    }
}

/// A 64-bit mix (splitmix64's finaliser), for the first delay.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
