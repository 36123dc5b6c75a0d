//! Work from another thread wakes a sleeping worker at once, over both transports.
//!
//! The nodes are told to sleep up to a minute when idle, so a coroutine started on a
//! sleeping worker would wait that long if starting it did not wake the worker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrotx_cluster::Configuration;
use ferrotx_node::{Idle, LocalCluster, Node, NodeOptions};
use ferrotx_store::TableSpec;

fn sleepy() -> NodeOptions {
    NodeOptions {
        idle: Idle {
            spin: Duration::from_micros(50),
            sleep_max: Duration::from_secs(60),
            yield_while_polling: true,
        },
        ..NodeOptions::default()
    }
}

/// Starts a trivial coroutine `rounds` times, each after the worker fell asleep, and
/// returns the slowest start-to-finish time.
fn slowest(rounds: u32, mut spawn: impl FnMut(u32) -> std::sync::mpsc::Receiver<u32>) -> Duration {
    let mut slowest = Duration::ZERO;
    for round in 0..rounds {
        // Long past the polling period: the worker sleeps in the kernel.
        std::thread::sleep(Duration::from_millis(if round % 2 == 0 { 20 } else { 1 }));
        let started = Instant::now();
        let answer = spawn(round)
            .recv_timeout(Duration::from_secs(30))
            .expect("the coroutine ran");
        assert_eq!(answer, round + 1);
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

#[test]
fn starting_a_coroutine_wakes_a_sleeping_udp_worker() {
    let config = Configuration::local(1, 1, 1, 1, 51_000)
        .unwrap()
        .with_tables(vec![TableSpec::fixed(1, "t", 8)])
        .unwrap();
    let node = Node::start_udp(Arc::new(config), 0, &sleepy()).expect("bind");
    let slowest = slowest(40, |round| {
        node.spawn(0, move |_, _| async move { round + 1 })
    });
    node.stop();
    // Without the bell each round waits for the minute-long sleep to end.
    assert!(
        slowest < Duration::from_secs(5),
        "slowest start {slowest:?}"
    );
}

#[test]
fn starting_a_coroutine_wakes_a_sleeping_in_process_worker() {
    let config = Configuration::local(2, 2, 1, 1, 52_000).unwrap();
    let cluster = LocalCluster::start_with(config, vec![TableSpec::fixed(1, "t", 8)], &sleepy());
    let slowest = slowest(40, |round| {
        cluster.spawn((round % 2) as u16, 0, move |_, _| async move { round + 1 })
    });
    cluster.stop();
    assert!(
        slowest < Duration::from_secs(5),
        "slowest start {slowest:?}"
    );
}
