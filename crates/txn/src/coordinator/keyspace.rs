//! Whole-table reads outside transactions: scans and counts of a table at partitions'
//! primaries (for Redis's SCAN, KEYS and DBSIZE, which Redis Cluster does not make
//! transactional either).
//!
//! Each request reads one partition's primary copy as it is when the request reaches
//! it: a scan page or a count is not a snapshot of the cluster, and keys written
//! meanwhile may or may not be seen. What the store's scan guarantees per partition
//! holds: a key present for the whole scan is visited at least once.

use ferrotx_exec::Co;
use ferrotx_store::TableId;
use ferrotx_wire::RequestType;

use super::{Abort, Coordinator};
use crate::messages::{
    ScanPage, decode_count_response, decode_scan_response, encode_count, encode_scan,
};
use crate::participant::Participant;

impl Coordinator {
    /// Visits up to `count` objects of `table` at the primary of `partition` from
    /// `cursor` (0 starts; then a page's `next_cursor`): the present ones with their
    /// values, and where to go on (0 when the partition has been visited whole). A
    /// primary on this node is read in memory, another one with one SCAN RPC. The page
    /// may hold fewer objects than asked for, even none with a cursor to go on from: it
    /// is cut at [`SCAN_OBJECTS_MAX`](crate::participant::SCAN_OBJECTS_MAX) objects and
    /// before the object that would take it past
    /// [`SCAN_RESPONSE_BYTES_MAX`](crate::participant::SCAN_RESPONSE_BYTES_MAX) bytes
    /// (one object always comes). Not a transaction.
    ///
    /// # Panics
    ///
    /// If `partition` is not a partition of the placement.
    pub async fn scan_partition(
        &self,
        co: &Co,
        partition: u32,
        table: TableId,
        cursor: u64,
        count: u32,
    ) -> Result<ScanPage, Abort> {
        self.spec(table)?;
        let primary = self.placement.borrow().primary(partition);
        let page = if primary == self.local.node() {
            let mut request = Vec::new();
            let mut response = Vec::new();
            encode_scan(partition, table, cursor, count, &mut request);
            Participant::scan(&mut self.participant.borrow_mut(), &request, &mut response)
                .map_err(|_| Abort::Protocol)?;
            decode_scan_response(&response).map_err(|_| Abort::Protocol)?
        } else {
            co.push_with(self.endpoint(primary), RequestType::Scan.into(), |buffer| {
                encode_scan(partition, table, cursor, count, buffer)
            });
            co.call().await;
            co.result(0, |response| {
                let bytes = response.map_err(|_| Abort::Protocol)?;
                decode_scan_response(bytes).map_err(|_| Abort::Protocol)
            })?
        };
        // Refused: the primary does not host the partition or the table, which a
        // consistent configuration rules out.
        page.ok_or(Abort::Protocol)
    }

    /// The number of present objects of `table` at the primaries of `partitions`, added
    /// up: this node's in memory, the others' by COUNT RPCs sent in batches. Each
    /// primary counts when its request reaches it; not a transaction.
    ///
    /// # Panics
    ///
    /// If a partition is not a partition of the placement.
    pub async fn count_present(
        &self,
        co: &Co,
        table: TableId,
        partitions: &[u32],
    ) -> Result<u64, Abort> {
        self.spec(table)?;
        let local = self.local.node();
        let batch = co.engine().config().max_batch;
        let (mut request, mut response) = (Vec::new(), Vec::new());
        let mut total = 0u64;
        for chunk in partitions.chunks(batch) {
            let mut remote = 0;
            for &partition in chunk {
                let primary = self.placement.borrow().primary(partition);
                if primary == local {
                    request.clear();
                    response.clear();
                    encode_count(partition, table, &mut request);
                    Participant::count(&mut self.participant.borrow_mut(), &request, &mut response)
                        .map_err(|_| Abort::Protocol)?;
                    let count = decode_count_response(&response).map_err(|_| Abort::Protocol)?;
                    // Refused: not primary here, or blocked by recovery: retry later.
                    total += count.ok_or(Abort::Unavailable)?;
                } else {
                    co.push_with(
                        self.endpoint(primary),
                        RequestType::Count.into(),
                        |buffer| encode_count(partition, table, buffer),
                    );
                    remote += 1;
                }
            }
            if remote > 0 {
                co.call().await;
                for i in 0..remote {
                    total += co.result(i, |response| {
                        let bytes = response.map_err(Abort::from_rpc)?;
                        decode_count_response(bytes)
                            .map_err(|_| Abort::Protocol)?
                            .ok_or(Abort::Unavailable)
                    })?;
                }
            }
        }
        Ok(total)
    }
}
