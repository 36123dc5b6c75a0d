//! The counters INFO reports, kept by the I/O thread (no atomics: one thread owns them):
//! connections and bytes here, requests and transactions in the connections'
//! [`Counters`].

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ferrotx_cluster::Configuration;
use ferrotx_node::{NodeHandle, RECOVERY_VOTES, RecoveryStats, ShipStats};
use ferrotx_redis_exec::Counters;
use ferrotx_resp::InfoStats;

/// What a server counted since it started.
#[derive(Debug)]
pub(crate) struct Stats {
    pub started: Instant,
    pub connected_clients: u64,
    pub connections_received: u64,
    pub connections_rejected: u64,
    pub input_bytes: u64,
    pub output_bytes: u64,
}

impl Stats {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            connected_clients: 0,
            connections_received: 0,
            connections_rejected: 0,
            input_bytes: 0,
            output_bytes: 0,
        }
    }

    /// INFO's numbers, with the connections' `counters` and the recovery and shipping
    /// counters of the node of `handle`, serving on `port` with at most `clients_max`
    /// clients.
    pub fn info(
        &self,
        counters: &Counters,
        handle: &NodeHandle,
        port: u16,
        clients_max: usize,
    ) -> InfoStats {
        let (recovery, ship) = (&handle.recovery_stats(), &handle.ship_stats());
        let (config, node): (&Configuration, u16) = (handle.config(), handle.id());
        let now_usec = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
            });
        let mut extra = vec![
            ("configuration_id".to_owned(), config.id().to_string()),
            (
                "worker_threads".to_owned(),
                config.threads_per_node().to_string(),
            ),
            (
                "pipelined_commands_joined".to_owned(),
                counters.commands_pipelined.to_string(),
            ),
            (
                "transaction_aborts_max".to_owned(),
                counters.transaction_aborts_max.to_string(),
            ),
        ];
        extra.extend(recovery_fields(recovery));
        extra.extend(ship_fields(ship));
        // Datagrams dropped by reason (`dropped_bad_mac`, `dropped_replay`, ...).
        extra.extend(
            handle
                .drop_stats()
                .fields()
                .iter()
                .map(|(name, n)| (format!("dropped_{name}"), n.to_string())),
        );
        if let Some((health, timeout_ms)) = handle.coordination_health() {
            extra.extend(coordination_fields(&health, timeout_ms));
        }
        let memory = handle.memory();
        InfoStats {
            used_memory: memory.used(),
            used_memory_rss: ferrotx_node::resident_bytes(),
            used_memory_peak: memory.peak(),
            used_memory_dataset: memory.store(),
            maxmemory: memory.limit().unwrap_or(0),
            process_id: std::process::id(),
            tcp_port: port,
            server_time_usec: now_usec,
            uptime_seconds: self.started.elapsed().as_secs(),
            connected_clients: self.connected_clients,
            clients_max: clients_max as u64,
            total_connections_received: self.connections_received,
            total_commands_processed: counters.commands_processed,
            total_net_input_bytes: self.input_bytes,
            total_net_output_bytes: self.output_bytes,
            rejected_connections: self.connections_rejected,
            total_error_replies: counters.error_replies,
            node_id: u32::from(node),
            cluster_nodes: u32::try_from(config.members().len()).unwrap_or(u32::MAX),
            partitions: config.partitions().partition_count(),
            replicas: u32::from(config.replicas()),
            transactions_committed: counters.transactions_committed,
            transactions_aborted: counters.transactions_aborted,
            extra,
            ..InfoStats::default()
        }
    }
}

/// INFO's `coordination_*` fields: how the coordination service answers this node.
/// `coordination_state` is `ok`, `slow` (a call under way for half its deadline),
/// `failing` (the last answer failed) or `went_back` (it holds a view older than the
/// node's); durations in milliseconds, with 0 for none.
pub(crate) fn coordination_fields(
    health: &ferrotx_node::CoordinationHealth,
    timeout_ms: u64,
) -> Vec<(String, String)> {
    let mut fields = vec![
        (
            "coordination_state".to_owned(),
            health.state(timeout_ms).to_owned(),
        ),
        ("coordination_calls".to_owned(), health.calls.to_string()),
        (
            "coordination_failures".to_owned(),
            health.failures.to_string(),
        ),
        (
            "coordination_timeouts".to_owned(),
            health.timeouts.to_string(),
        ),
        (
            "coordination_late_answers".to_owned(),
            health.late.to_string(),
        ),
        (
            "coordination_call_in_flight_ms".to_owned(),
            health.in_flight_ms.unwrap_or(0).to_string(),
        ),
        (
            "coordination_last_ok_ms_ago".to_owned(),
            health.last_ok_ms_ago.unwrap_or(0).to_string(),
        ),
        (
            "coordination_store_behind".to_owned(),
            health.store_behind.unwrap_or(0).to_string(),
        ),
        ("coordination_timeout_ms".to_owned(), timeout_ms.to_string()),
    ];
    if let Some(e) = &health.last_error {
        // One line, whatever the error's text holds.
        fields.push((
            "coordination_last_error".to_owned(),
            e.replace(['\r', '\n'], " "),
        ));
    }
    fields
}

/// INFO's `recovery_*` fields (in the `# ferrotx` section) for a node's transaction-state
/// recovery counters: `recovery_rounds`, `recovery_decided_commit`,
/// `recovery_decided_abort`, `recovery_votes_<kind>` for each vote kind, and
/// `recovery_waited`.
pub(crate) fn recovery_fields(recovery: &RecoveryStats) -> Vec<(String, String)> {
    let mut fields = vec![
        ("recovery_rounds".to_owned(), recovery.rounds.to_string()),
        (
            "recovery_decided_commit".to_owned(),
            recovery.committed.to_string(),
        ),
        (
            "recovery_decided_abort".to_owned(),
            recovery.aborted.to_string(),
        ),
    ];
    for (kind, n) in RECOVERY_VOTES.iter().zip(recovery.votes) {
        fields.push((format!("recovery_votes_{}", kind.name()), n.to_string()));
    }
    fields.push(("recovery_waited".to_owned(), recovery.waited.to_string()));
    fields
}

/// INFO's `ship_*` fields (in the `# ferrotx` section): operations shipped to their
/// keys' primary by this node's callers (`ship_calls`), and, as a primary, operations run
/// (`ship_operations`), the batches that committed them (`ship_batches`; operations per
/// batch is the combining), batch retries after conflicts, requests answered from a
/// remembered result after a configuration change, and requests told to ask again.
pub(crate) fn ship_fields(ship: &ShipStats) -> Vec<(String, String)> {
    [
        ("ship_calls", ship.shipped),
        ("ship_operations", ship.operations),
        ("ship_batches", ship.batches),
        ("ship_batch_retries", ship.batch_retries),
        ("ship_answered_again", ship.answered_again),
        ("ship_retries_asked", ship.retries_asked),
    ]
    .into_iter()
    .map(|(name, n)| (name.to_owned(), n.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_fields_name_every_counter() {
        let stats = RecoveryStats {
            rounds: 1,
            committed: 2,
            aborted: 3,
            votes: [4, 5, 6, 7, 8, 9],
            waited: 10,
        };
        let fields: Vec<String> = recovery_fields(&stats)
            .into_iter()
            .map(|(name, value)| format!("{name}:{value}"))
            .collect();
        assert_eq!(
            fields,
            [
                "recovery_rounds:1",
                "recovery_decided_commit:2",
                "recovery_decided_abort:3",
                "recovery_votes_unknown:4",
                "recovery_votes_truncated:5",
                "recovery_votes_abort:6",
                "recovery_votes_lock:7",
                "recovery_votes_commit_backup:8",
                "recovery_votes_commit_primary:9",
                "recovery_waited:10",
            ]
        );
    }
}
