//! A many-endpoint RPC workload under faults, and its checks: every request runs at most
//! once, every call completes after the network heals, every response is the right one.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;

use ferrotx_node::Worker;
use ferrotx_rpc::{Config, Engine, Event, HandlerError, RpcError};
use ferrotx_wire::EndpointId;
use foldhash::fast::FixedState;
use hashbrown::HashMap;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::network::{Faults, SimNetwork, SimTransport};
use crate::simulator::Simulator;

/// The request type of the workload's handler.
pub const ECHO: u8 = 1;

/// Shape of the workload.
#[derive(Clone, Debug)]
pub struct RpcWorkload {
    /// Nodes of the cluster.
    pub nodes: u16,
    /// Worker threads (endpoints) per node.
    pub threads: u16,
    /// Coroutines per endpoint.
    pub coroutines: usize,
    /// Batches each coroutine sends.
    pub batches: usize,
    /// Largest batch.
    pub max_batch: usize,
    /// Share of requests and responses longer than a datagram (split into packets).
    pub large_share: f64,
    /// Datagram size of every engine; small, so that splitting is exercised.
    pub datagram_bytes: usize,
    /// Outstanding requests per session.
    pub credits: u8,
    /// Network faults for the whole run.
    pub faults: Faults,
    /// A partition between node 0 and the others, from and to these times.
    pub partition_ns: Option<(u64, u64)>,
    /// Restart the endpoint at this index at this time: its process dies with everything
    /// in memory (coroutines, sessions, saved responses, datagrams in its inbox) and a new
    /// incarnation starts in its place with new coroutines.
    pub restart: Option<(u64, usize)>,
    /// Simulated time by which every call must have completed.
    pub deadline_ns: u64,
}

impl RpcWorkload {
    /// The workload of the CI seed sweep, with faults drawn from `seed`: loss up to 10%,
    /// duplication up to 5%, delays of 1 to 300 microseconds (so reordering), and a
    /// partition of node 0 lasting up to 40 ms that then heals.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_f00d);
        let partition_start = rng.random_range(0..5_000_000);
        let partition_len = rng.random_range(0..40_000_000);
        let mut workload = Self {
            nodes: 3,
            threads: 2,
            coroutines: 4,
            batches: 8,
            max_batch: 6,
            large_share: 0.05,
            datagram_bytes: 1_200,
            credits: rng.random_range(1..=8),
            faults: Faults {
                loss: rng.random_range(0.0..0.10),
                duplicate: rng.random_range(0.0..0.05),
                corrupt: 0.0,
                delay_min_ns: 1_000,
                delay_max_ns: rng.random_range(1_000..300_000),
            },
            partition_ns: rng
                .random_bool(0.7)
                .then_some((partition_start, partition_start + partition_len)),
            restart: rng
                .random_bool(0.3)
                .then(|| (rng.random_range(0..10_000_000), rng.random_range(0..6))),
            deadline_ns: 30_000_000_000,
        };
        // Damaged copies of up to 5% of datagrams, which authentication must drop; drawn
        // last so that the seed's other draws are what they were before.
        workload.faults.corrupt = rng.random_range(0.0..0.05);
        workload
    }
}

/// What a run did and what its checks found.
#[derive(Debug, Default)]
pub struct RpcOutcome {
    /// Calls issued.
    pub calls: u64,
    /// Calls that completed with the right response.
    pub completed: u64,
    /// Handler executions, all endpoints together.
    pub executions: u64,
    /// Retransmissions, all endpoints together.
    pub retransmissions: u64,
    /// Datagrams the network lost, duplicated, cut.
    pub lost: u64,
    /// Duplicated datagrams.
    pub duplicated: u64,
    /// Datagrams cut by the partition.
    pub partitioned: u64,
    /// Suspect reports.
    pub suspects: usize,
    /// Calls that failed because their target restarted.
    pub refused: u64,
    /// Peer restarts noticed, all endpoints together.
    pub restarts_seen: u64,
    /// Simulated time at the end.
    pub end_ns: u64,
    /// Everything that went wrong; empty when the run is correct.
    pub violations: Vec<String>,
    /// A digest of the run, equal for equal seeds.
    pub digest: u64,
}

/// What happened to each call, kept by the handlers and the coroutines.
#[derive(Default)]
struct Ledger {
    /// Handler runs per call id, over every incarnation of every endpoint.
    executions: HashMap<u64, u32, FixedState>,
    /// Calls issued and not yet completed, by call id.
    pending: HashMap<u64, (), FixedState>,
    /// Calls that failed with `TargetRestarted`.
    refused: Vec<u64>,
    issued: u64,
    completed: u64,
    violations: Vec<String>,
}

/// A call's id: its endpoint, the incarnation (life) of the endpoint, its coroutine and a
/// counter, so ids never repeat across restarts.
fn call_id(endpoint: EndpointId, life: u64, coroutine: usize, counter: u64) -> u64 {
    debug_assert!(life < 16 && coroutine < 16 && counter < 1 << 24);
    (u64::from(endpoint.0) << 32) | (life << 28) | ((coroutine as u64) << 24) | counter
}

fn pattern(call_id: u64, i: usize, salt: u8) -> u8 {
    (call_id as u8).wrapping_add(i as u8).wrapping_mul(31) ^ salt
}

/// Request payload: call id, wanted response length, then a pattern the handler checks.
fn write_request(buf: &mut Vec<u8>, call_id: u64, request_len: usize, response_len: usize) {
    buf.extend_from_slice(&call_id.to_le_bytes());
    buf.extend_from_slice(&(response_len as u32).to_le_bytes());
    buf.extend((12..request_len.max(12)).map(|i| pattern(call_id, i, 0)));
}

fn check_response(call_id: u64, response_len: usize, response: &[u8]) -> bool {
    response.len() == response_len.max(8)
        && response[..8] == call_id.to_le_bytes()
        && response[8..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(call_id, i + 8, 0x5a))
}

fn size(rng: &mut ChaCha8Rng, large_share: f64, datagram_bytes: usize) -> usize {
    if rng.random_bool(large_share) {
        rng.random_range(datagram_bytes..datagram_bytes * 6)
    } else {
        rng.random_range(12..200)
    }
}

/// A worker for endpoint number `e` in its incarnation `life`, with the workload's
/// handler and coroutines.
fn spawn_worker(
    seed: u64,
    workload: &RpcWorkload,
    endpoints: &[EndpointId],
    e: usize,
    life: u64,
    network: &Rc<RefCell<SimNetwork>>,
    ledger: &Rc<RefCell<Ledger>>,
) -> Worker<SimTransport> {
    let endpoint = endpoints[e];
    let restarted = workload.restart.map(|(_, r)| endpoints[r]);
    let config = Config {
        incarnation: life,
        callers: workload.coroutines,
        max_batch: workload.max_batch,
        credits: workload.credits,
        datagram_bytes: workload.datagram_bytes,
        rto_min_ns: 200_000,
        rto_max_ns: 20_000_000,
        suspect_after_ns: 5_000_000,
        // Sealed and opened as on real nodes: the damaged copies the network delivers
        // must all be dropped.
        auth: Some(crate::run::sim_auth(0)),
        ..Config::default()
    };
    let mut engine = Engine::new(endpoint, config);
    let handler_ledger = ledger.clone();
    engine.register(
        ECHO,
        Box::new(move |request, response| {
            let payload = request.payload;
            let mut ledger = handler_ledger.borrow_mut();
            if payload.len() < 12 {
                ledger.violations.push(format!("short request {payload:?}"));
                return Err(HandlerError("short request"));
            }
            let call_id = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
            let response_len = u32::from_le_bytes(payload[8..12].try_into().expect("4 bytes"));
            if !payload[12..]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == pattern(call_id, i + 12, 0))
            {
                ledger
                    .violations
                    .push(format!("call {call_id:#x}: request corrupted"));
            }
            *ledger.executions.entry(call_id).or_insert(0) += 1;
            response.extend_from_slice(&call_id.to_le_bytes());
            response.extend((8..(response_len as usize).max(8)).map(|i| pattern(call_id, i, 0x5a)));
            Ok(())
        }),
    );
    let transport = SimNetwork::endpoint(network, endpoint);
    let mut worker = Worker::new(transport, engine);
    for c in 0..workload.coroutines {
        let ledger = ledger.clone();
        let endpoints = endpoints.to_vec();
        let workload = workload.clone();
        let mut rng = ChaCha8Rng::seed_from_u64(
            seed.wrapping_mul(1_000_003) ^ ((e as u64) << 16) ^ (life << 40) ^ c as u64,
        );
        worker.executor().spawn(move |co| async move {
            let mut counter = 0u64;
            let mut expected = Vec::with_capacity(workload.max_batch);
            for _ in 0..workload.batches {
                let n = rng.random_range(1..=workload.max_batch);
                expected.clear();
                for _ in 0..n {
                    let call_id = call_id(endpoint, life, c, counter);
                    counter += 1;
                    let target = endpoints[rng.random_range(0..endpoints.len())];
                    let request_len = size(&mut rng, workload.large_share, workload.datagram_bytes);
                    let response_len =
                        size(&mut rng, workload.large_share, workload.datagram_bytes);
                    co.push_with(target, ECHO, |buf| {
                        write_request(buf, call_id, request_len, response_len)
                    });
                    expected.push((call_id, target, response_len));
                }
                {
                    let mut ledger = ledger.borrow_mut();
                    ledger.issued += n as u64;
                    for &(call_id, _, _) in &expected {
                        ledger.pending.insert(call_id, ());
                    }
                }
                co.call().await;
                for (i, &(call_id, target, response_len)) in expected.iter().enumerate() {
                    let result = co.result(i, |r| match r {
                        Ok(bytes) => Ok(check_response(call_id, response_len, bytes)),
                        Err(e) => Err(e),
                    });
                    let mut ledger = ledger.borrow_mut();
                    ledger.pending.remove(&call_id);
                    match result {
                        Ok(true) => ledger.completed += 1,
                        // Only a call to the endpoint that restarted may be refused so.
                        Err(RpcError::TargetRestarted) if Some(target) == restarted => {
                            ledger.completed += 1;
                            ledger.refused.push(call_id);
                        }
                        Ok(false) => ledger
                            .violations
                            .push(format!("call {call_id:#x}: wrong response")),
                        Err(e) => ledger
                            .violations
                            .push(format!("call {call_id:#x} to {target}: {e}")),
                    }
                }
            }
        });
    }
    worker
}

/// Runs the workload from `seed` and checks it.
pub fn run(seed: u64, workload: &RpcWorkload) -> RpcOutcome {
    let network = SimNetwork::new(seed, workload.faults.clone());
    let mut sim = Simulator::new(network.clone());
    let ledger = Rc::new(RefCell::new(Ledger::default()));
    let endpoints: Vec<EndpointId> = (0..workload.nodes)
        .flat_map(|n| (0..workload.threads).map(move |t| EndpointId::new(n, t)))
        .collect();
    for e in 0..endpoints.len() {
        let worker = spawn_worker(seed, workload, &endpoints, e, 1, &network, &ledger);
        sim.workers.push(worker);
    }

    // Faults happen in time order: the partition and the restart may overlap.
    let mut faults: Vec<(u64, u8)> = Vec::new();
    if let Some((start, end)) = workload.partition_ns {
        faults.push((start, 0));
        faults.push((end, 1));
    }
    if let Some((at, _)) = workload.restart {
        faults.push((at, 2));
    }
    faults.sort_unstable();
    let mut now = 0;
    let mut dead_life_calls = Vec::new();
    for (at, fault) in faults {
        now = now.max(sim.run_until(at));
        match fault {
            0 => network
                .borrow_mut()
                .partition(&[0], &(1..workload.nodes).collect::<Vec<_>>()),
            1 => network.borrow_mut().heal(),
            _ => {
                let (_, e) = workload.restart.expect("a restart was planned");
                // The old life's calls in flight die with it; remember them.
                let prefix = call_id(endpoints[e], 1, 0, 0) >> 28;
                dead_life_calls.extend(
                    ledger
                        .borrow()
                        .pending
                        .keys()
                        .copied()
                        .filter(|id| id >> 28 == prefix),
                );
                sim.workers[e] = spawn_worker(seed, workload, &endpoints, e, 2, &network, &ledger);
            }
        }
    }
    network.borrow_mut().heal();
    now = now.max(sim.run_until(workload.deadline_ns));

    let ledger = ledger.borrow();
    let mut outcome = RpcOutcome {
        calls: ledger.issued - dead_life_calls.len() as u64,
        completed: ledger.completed,
        refused: ledger.refused.len() as u64,
        end_ns: now,
        violations: ledger.violations.clone(),
        suspects: sim
            .events
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::Suspect(_)))
            .count(),
        ..RpcOutcome::default()
    };
    for (call_id, &count) in &ledger.executions {
        outcome.executions += u64::from(count);
        if count > 1 {
            outcome
                .violations
                .push(format!("call {call_id:#x} executed {count} times"));
        }
    }
    let unfinished: usize = sim.workers.iter_mut().map(|w| w.executor().live()).sum();
    if unfinished > 0 {
        outcome.violations.push(format!(
            "{unfinished} coroutines still waiting at the deadline"
        ));
    }
    if outcome.completed != outcome.calls {
        outcome.violations.push(format!(
            "{} of {} calls of live coroutines completed",
            outcome.completed, outcome.calls
        ));
    }
    // Every call answered with its response ran exactly once. A call refused because its
    // target restarted, or issued by a life that died, ran at most once (checked above).
    let may_not_have_run = outcome.refused + dead_life_calls.len() as u64;
    let answered = outcome.completed - outcome.refused;
    if outcome.executions < answered || outcome.executions > answered + may_not_have_run {
        outcome.violations.push(format!(
            "{} executions for {answered} answered calls and {may_not_have_run} that may or may not have run",
            outcome.executions
        ));
    }
    for call_id in ledger.executions.keys() {
        if ledger.pending.contains_key(call_id) && !dead_life_calls.contains(call_id) {
            outcome.violations.push(format!(
                "call {call_id:#x} ran but its caller never learned"
            ));
        }
    }
    let mut digest = FixedState::with_seed(1).build_hasher();
    digest.write_u64(now);
    for worker in &mut sim.workers {
        let stats = *worker.executor().shared().engine().stats();
        outcome.retransmissions += stats.retransmissions;
        outcome.restarts_seen += stats.peer_restarts;
        digest.write_u64(stats.datagrams_sent);
        digest.write_u64(stats.retransmissions);
        digest.write_u64(stats.duplicate_requests_answered);
        digest.write_u64(stats.stale_responses);
    }
    let counters = network.borrow().counters;
    outcome.lost = counters.lost;
    outcome.duplicated = counters.duplicated;
    outcome.partitioned = counters.partitioned;
    digest.write_u64(counters.delivered);
    outcome.digest = digest.finish();
    outcome
}
