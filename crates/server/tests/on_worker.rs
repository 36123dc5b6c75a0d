//! The event loop run on a node's worker thread (`ServerOptions::on_worker`): nodes over
//! UDP, whose workers can watch the sockets in their sleep (the in-process queues of the
//! other tests cannot, and run the loop on a thread of its own).

mod common;

use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Client;
use ferrotx_cluster::{Configuration, RespSettings, default_tables};
use ferrotx_node::{Node, NodeOptions};
use ferrotx_server::{RespServer, ServerOptions};

/// One node of `threads` worker threads over UDP on loopback, serving shipped Redis
/// commands as `ferrotx node` does.
fn udp_node(threads: u16) -> Node {
    // Free consecutive ports: bound, read and released (another process may take one
    // meanwhile; then the test fails to bind, and says so).
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port().min(u16::MAX - 8);
    drop(probe);
    let config = Configuration::local(1, 1, threads, 2, port)
        .unwrap()
        .with_tables(default_tables())
        .unwrap();
    let kv = ferrotx_redis_exec::KvTable::find(&config).unwrap();
    let options = NodeOptions {
        procedures: ferrotx_redis_exec::procedures(kv),
        ..NodeOptions::default()
    };
    Node::start_udp(Arc::new(config), 0, &options).expect("binding the node's UDP ports")
}

fn serve(node: &Node, on_worker: bool) -> RespServer {
    let mut options = ServerOptions::new("127.0.0.1:0".parse().unwrap(), &RespSettings::default());
    options.on_worker = on_worker;
    RespServer::start(node.handle(), &options).unwrap()
}

/// Held by each test: they look at this process's threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Whether this process has a thread named like a Redis front end's I/O thread.
fn io_thread_running() -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|task| {
        let comm = task.unwrap().path().join("comm");
        std::fs::read_to_string(comm).is_ok_and(|name| name.starts_with("ferrotx-resp"))
    })
}

#[test]
fn a_loop_on_the_worker_serves_commands_pipelines_and_transactions() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for threads in [1, 2] {
        let node = udp_node(threads);
        let server = serve(&node, true);
        let addr = server.local_addr();
        let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(addr)).collect();
        for (i, client) in clients.iter_mut().enumerate() {
            assert_eq!(client.text(&["SET", &format!("k{i}"), "v"]), "+OK\r\n");
            assert_eq!(client.text(&["INCR", "counter"]), format!(":{}\r\n", i + 1));
        }
        assert!(!io_thread_running(), "no I/O thread of its own");
        // A pipeline, answered in order.
        let mut pipeline = Vec::new();
        for _ in 0..50 {
            pipeline.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n");
        }
        clients[0].send(&pipeline);
        for n in 5..55 {
            assert_eq!(clients[0].reply(), format!(":{n}\r\n").into_bytes());
        }
        let client = &mut clients[1];
        assert_eq!(client.text(&["MULTI"]), "+OK\r\n");
        assert_eq!(client.text(&["INCR", "counter"]), "+QUEUED\r\n");
        assert_eq!(client.text(&["GET", "k0"]), "+QUEUED\r\n");
        assert_eq!(client.text(&["EXEC"]), "*2\r\n:55\r\n$1\r\nv\r\n");
        // INFO counts the increments run at their primary (published by the worker
        // within a few of its loop iterations).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let info = String::from_utf8(client.call(&["INFO"])).unwrap();
            let field = |name: &str| -> u64 {
                info.lines()
                    .find_map(|line| line.strip_prefix(&format!("{name}:")))
                    .unwrap_or_else(|| panic!("INFO has no {name}: {info}"))
                    .trim()
                    .parse()
                    .unwrap()
            };
            let (calls, operations, batches) = (
                field("ship_calls"),
                field("ship_operations"),
                field("ship_batches"),
            );
            // 4 SETs, 4 INCRs, the pipeline (one plan: its keys share a primary) and
            // the MULTI block.
            if calls >= 10 && operations >= 10 {
                assert!((1..=operations).contains(&batches), "{info}");
                break;
            }
            assert!(Instant::now() < deadline, "{info}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!server.has_ended());
        server.stop();
        for client in &mut clients {
            assert!(
                client.read_to_end().is_empty(),
                "closed when the server stops"
            );
        }
        node.stop();
    }
}

#[test]
fn a_loop_on_the_worker_ends_with_its_node_and_closes_its_clients() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let node = udp_node(1);
    let server = serve(&node, true);
    let mut client = Client::connect(server.local_addr());
    assert_eq!(client.text(&["PING"]), "+PONG\r\n");
    node.stop();
    assert!(client.read_to_end().is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.has_ended() {
        assert!(Instant::now() < deadline, "the loop ended with the node");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stopping it then returns at once.
    let started = Instant::now();
    server.stop();
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_loop_on_a_thread_of_its_own_still_serves() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let node = udp_node(1);
    let server = serve(&node, false);
    let mut client = Client::connect(server.local_addr());
    assert_eq!(client.text(&["SET", "a", "1"]), "+OK\r\n");
    assert_eq!(client.text(&["INCR", "a"]), ":2\r\n");
    // (The thread names itself once it runs.)
    assert!(io_thread_running());
    server.stop();
    node.stop();
}

#[test]
fn a_second_front_end_on_the_node_gets_a_thread_and_the_first_keeps_serving() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let node = udp_node(1);
    let first = serve(&node, true);
    let mut a = Client::connect(first.local_addr());
    assert_eq!(a.text(&["SET", "x", "1"]), "+OK\r\n");
    let second = serve(&node, true);
    let mut b = Client::connect(second.local_addr());
    assert_eq!(b.text(&["INCR", "x"]), ":2\r\n");
    assert_eq!(a.text(&["INCR", "x"]), ":3\r\n");
    assert!(!first.has_ended() && !second.has_ended());
    assert!(
        io_thread_running(),
        "the second runs on a thread of its own"
    );
    second.stop();
    assert_eq!(a.text(&["GET", "x"]), "$1\r\n3\r\n");
    first.stop();
    node.stop();
}

#[test]
fn a_burst_of_clients_larger_than_a_round_accepts_is_served() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let node = udp_node(1);
    let server = serve(&node, true);
    let mut clients: Vec<Client> = (0..300)
        .map(|_| Client::connect(server.local_addr()))
        .collect();
    for (i, client) in clients.iter_mut().enumerate() {
        assert_eq!(client.text(&["PING"]), "+PONG\r\n", "client {i}");
    }
    server.stop();
    node.stop();
}
