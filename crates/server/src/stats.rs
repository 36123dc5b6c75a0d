//! The counters INFO reports, kept by the I/O thread (no atomics: one thread owns them):
//! connections and bytes here, requests and transactions in the connections'
//! [`Counters`].

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ferrotx_cluster::Configuration;
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

    /// INFO's numbers, with the connections' `counters`, for node `node` of `config`,
    /// serving on `port` with at most `clients_max` clients.
    pub fn info(
        &self,
        counters: &Counters,
        config: &Configuration,
        node: u16,
        port: u16,
        clients_max: usize,
    ) -> InfoStats {
        let now_usec = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
            });
        InfoStats {
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
            extra: vec![
                ("configuration_id".to_owned(), config.id().to_string()),
                (
                    "worker_threads".to_owned(),
                    config.threads_per_node().to_string(),
                ),
                (
                    "pipelined_commands_joined".to_owned(),
                    counters.commands_pipelined.to_string(),
                ),
            ],
            ..InfoStats::default()
        }
    }
}
