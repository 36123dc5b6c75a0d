//! Two workers over in-process queues, stepped by hand in one thread: every coroutine
//! whose batch completes is resumed in the same loop iteration, and each iteration sends
//! all its requests to one destination in one datagram.

use std::cell::Cell;
use std::rc::Rc;

use ferrotx_node::Worker;
use ferrotx_rpc::{Config, Engine};
use ferrotx_transport::mem::MemNetwork;
use ferrotx_wire::EndpointId;

#[test]
fn every_completed_batch_resumes_in_the_same_iteration() {
    const COROUTINES: usize = 20;
    const BATCH: usize = 8;
    let network = MemNetwork::new();
    let client_id = EndpointId::new(1, 0);
    let server_id = EndpointId::new(0, 0);
    let mut server_engine = Engine::new(
        server_id,
        Config {
            callers: 1,
            ..Config::default()
        },
    );
    server_engine.register(
        1,
        Box::new(|_, response| {
            response.resize(32, 0);
            Ok(())
        }),
    );
    let mut server = Worker::new(network.endpoint(server_id), server_engine);
    let config = Config {
        callers: COROUTINES,
        max_batch: BATCH,
        credits: 160,
        ..Config::default()
    };
    let mut client_engine = Engine::new(client_id, config);
    // As a membership layer would: the client knows the server's incarnation, so its
    // first requests need no connect round trip and every iteration below is one round.
    client_engine.set_peer_incarnation(server_id, 1);
    let mut client = Worker::new(network.endpoint(client_id), client_engine);
    let rounds = Rc::new(Cell::new(0usize));
    for _ in 0..COROUTINES {
        let rounds = rounds.clone();
        client.executor().spawn(move |co| async move {
            loop {
                for _ in 0..BATCH {
                    co.push(server_id, 1, &[0; 32]);
                }
                co.call().await;
                rounds.set(rounds.get() + 1);
            }
        });
    }
    for step in 0..30u64 {
        client.step(step * 10);
        assert_eq!(rounds.get(), COROUTINES * step as usize);
        server.step(step * 10 + 5);
    }
    let stats = *client.executor().shared().engine().stats();
    assert_eq!(stats.datagrams_sent, 30, "one datagram per iteration");
    assert_eq!(stats.messages_sent, (30 * COROUTINES * BATCH) as u64);
    assert_eq!(stats.retransmissions, 0);
}
