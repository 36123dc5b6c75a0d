//! The driver of reclamation ([`crate::reclaim`]): each worker thread looks for
//! tombstones in the partitions `p` with `p % threads == thread` this node is primary
//! of, a step of records at a time, and frees a batch on every copy in two rounds.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrotx_exec::Co;
use ferrotx_store::{Key, TableId};
use ferrotx_wire::{EndpointId, RequestType};

use super::Coordinator;
use crate::answer::Answer;
use crate::participant::Role;
use crate::reclaim::{
    RECLAIM_KEYS_MAX, ReclaimOptions, ReclaimRequest, decode_check_response, encode_reclaim,
};

impl Coordinator {
    /// Reclaims this thread's share of the tombstones of the partitions this node is
    /// primary of, forever (a background coroutine of every worker): one step of
    /// `options.records_per_step` records of one table at a time, in turn, sleeping
    /// `options.interval_ns` between steps, or `options.busy_interval_ns` while steps
    /// keep finding tombstones.
    pub async fn run_reclaim(&self, co: Co, options: ReclaimOptions) {
        let threads = u32::from(self.ship_threads.get().max(1));
        let thread = u32::from(self.local.thread());
        // Where each (partition, table) stands; a table's turn comes round.
        let mut cursors: BTreeMap<(u32, TableId), u64> = BTreeMap::new();
        let mut turn = 0usize;
        let mut found = Vec::new();
        loop {
            let mut busy = false;
            if self.accepting.get() {
                let store = self.store();
                let mut tables: Vec<(u32, TableId)> = store
                    .hosted()
                    .filter(|&(p, role)| {
                        role == Role::Primary && p % threads == thread && !store.is_recovering(p)
                    })
                    .flat_map(|(p, _)| {
                        store
                            .get(p, Role::Primary)
                            .into_iter()
                            .flat_map(move |copy| copy.tables().map(move |t| (p, t)))
                    })
                    .collect();
                tables.sort_unstable();
                cursors.retain(|k, _| tables.binary_search(k).is_ok());
                if !tables.is_empty() {
                    turn = turn.wrapping_add(1);
                    let (p, table) = tables[turn % tables.len()];
                    let cursor = cursors.entry((p, table)).or_insert(0);
                    found.clear();
                    let next = store
                        .get(p, Role::Primary)
                        .and_then(|copy| {
                            copy.tombstones(table, *cursor, options.records_per_step, &mut found)
                                .ok()
                        })
                        .unwrap_or(0);
                    *cursor = next;
                    drop(store);
                    let mut freed = 0;
                    for batch in found.chunks(RECLAIM_KEYS_MAX) {
                        freed += self.reclaim_batch(&co, p, table, batch).await;
                    }
                    busy = freed > 0;
                    if freed < found.len() {
                        // Some stay (a delete not applied everywhere yet, a lost answer, a
                        // view change): the table is walked again, even if no new delete
                        // comes to mark it.
                        if let Some(copy) = self.store().get(p, Role::Primary) {
                            let _ = copy.mark_tombstones(table);
                        }
                    }
                }
            }
            let pause = if busy {
                options.busy_interval_ns
            } else {
                options.interval_ns
            };
            co.sleep_until(co.now_ns() + pause).await;
        }
    }

    /// Frees `batch`'s tombstones of `table` of partition `p` (this node its primary) on
    /// every copy, in the two rounds of [`crate::reclaim`]. Returns how many this
    /// primary freed.
    async fn reclaim_batch(&self, co: &Co, p: u32, table: TableId, batch: &[(Key, u64)]) -> usize {
        let placement = self.placement();
        let me = self.local.node();
        if placement.primary(p) != me || batch.is_empty() {
            return 0;
        }
        let backups: Vec<u16> = placement.backups(p).to_vec();
        let threads = self.ship_threads.get().max(1);
        // Round 1: every thread of every copy's node, this one's included.
        let check = ReclaimRequest {
            partition: p,
            table,
            keys: batch.to_vec(),
        };
        let nodes: Vec<u16> = std::iter::once(me).chain(backups.iter().copied()).collect();
        for &node in &nodes {
            for thread in 0..threads {
                co.push_with(
                    EndpointId::new(node, thread),
                    RequestType::ReclaimCheck.into(),
                    |buffer| encode_reclaim(&check, buffer),
                );
            }
        }
        co.call().await;
        let mut clear = vec![true; batch.len()];
        let asked = nodes.len() * usize::from(threads);
        for i in 0..asked {
            let answer = co.result(i, |response| {
                response
                    .ok()
                    .and_then(|bytes| decode_check_response(bytes, batch.len()))
            });
            match answer {
                Some(answer) => {
                    for (c, a) in clear.iter_mut().zip(answer) {
                        *c &= a;
                    }
                }
                // Refused, lost, or the node is gone: not this round.
                None => return 0,
            }
        }
        let keys: Vec<(Key, u64)> = batch
            .iter()
            .zip(&clear)
            .filter(|(_, c)| **c)
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() || !Arc::ptr_eq(&placement, &self.placement()) {
            // Nothing clear, or a view change: a backup named since was not asked.
            return 0;
        }
        // Round 2: the backups raise the keys' floors and free theirs.
        let reclaim = ReclaimRequest {
            partition: p,
            table,
            keys,
        };
        for &node in &backups {
            co.push_with(self.endpoint(node), RequestType::Reclaim.into(), |buffer| {
                encode_reclaim(&reclaim, buffer)
            });
        }
        if !backups.is_empty() {
            co.call().await;
            for i in 0..backups.len() {
                let done = co.result(i, |response| response.is_ok_and(Answer::is_granted));
                if !done {
                    // A backup may not have raised its floor: the primary keeps its
                    // tombstones (versions read here stay at or below every backup's).
                    return 0;
                }
            }
        }
        if !Arc::ptr_eq(&placement, &self.placement()) {
            return 0;
        }
        // Then this primary's own.
        let store = self.store();
        let Some(copy) = store.get(p, Role::Primary) else {
            return 0;
        };
        reclaim
            .keys
            .iter()
            .filter(|(key, version)| copy.reclaim(table, key, *version) == Ok(true))
            .count()
    }
}
