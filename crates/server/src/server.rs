//! Starting and stopping a node's Redis front end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use ferrotx_node::NodeHandle;
use ferrotx_redis_exec::{KvTable, SweepStats, run_sweeper};
use ferrotx_resp::{ParserLimits, SessionConfig};
use mio::net::TcpListener;
use mio::{Interest, Poll, Waker};

use crate::dispatch::Context;
use crate::error::ServerError;
use crate::event_loop::{EventLoop, LISTENER, OnWorker, WAKER};
use crate::inbox::Inbox;
use crate::options::ServerOptions;

/// Bytes of one read from a client: large enough that a pipeline of small requests
/// arrives in few reads.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Connections the kernel completes and queues before the I/O thread accepts them (the
/// kernel caps it at `net.core.somaxconn`). The standard library listens with 128: a
/// burst of new clients (a connection pool filling, redis-benchmark starting) larger
/// than that while the I/O thread waits for a core overflowed it, and each client past
/// it waited a second for its SYN to be sent again. Redis's `tcp-backlog` is 511.
const LISTEN_BACKLOG: i32 = 1024;

/// A non-blocking listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as
/// the standard library's).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(TcpListener::from_std(socket.into()))
}

/// Unix time in nanoseconds at the node's executor time 0 (key expiry's wall clock):
/// the system clock read beside a worker's `now_ns` (now, if no worker answers).
fn wall_offset_ns(node: &NodeHandle) -> u64 {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let unix_ns = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let reading = node.spawn(0, move |co, _| async move { (co.now_ns(), unix_ns()) });
    let reading = reading
        .ok()
        .and_then(|r| r.recv_timeout(Duration::from_secs(5)).ok());
    let (now_ns, unix) = reading.unwrap_or_else(|| (0, unix_ns()));
    unix.saturating_sub(now_ns)
}

/// Starts the active expiry ([`run_sweeper`]) on every worker thread of `node`: one
/// coroutine each, which ends once `stopped` is true (at its next pass, within 100 ms)
/// or with the node.
fn start_sweepers(node: &NodeHandle, kv: KvTable, stopped: &Arc<AtomicBool>) {
    let partitions = node.config().partitions().partition_count();
    let threads = node.threads();
    for thread in 0..threads {
        let stopped = stopped.clone();
        // Fails only if the node has stopped: then there is nothing to sweep.
        let _ = node.spawn(thread, move |co, coordinator| async move {
            let stats = SweepStats::default();
            let stop = || stopped.load(Ordering::Relaxed);
            run_sweeper(&co, &coordinator, kv, partitions, threads, &stats, stop).await;
        });
    }
}

/// A running Redis front end of one node: a listener, an I/O thread, and an expired-key
/// sweeper on each of the node's worker threads. Stopped by
/// [`RespServer::stop`] or when dropped; stop it before its node, so that no client
/// waits on a stopped worker (if the node stops first, waiting clients are answered an
/// error).
pub struct RespServer {
    local_addr: SocketAddr,
    inbox: Arc<Inbox>,
    thread: Option<JoinHandle<()>>,
    /// Closes when the loop run on a worker ends (`None` with a thread of its own).
    on_worker: Option<mpsc::Receiver<()>>,
    /// Tells the sweepers to end.
    sweepers_stop: Arc<AtomicBool>,
}

impl RespServer {
    /// Listens on `options.addr` and serves the node of `node` from a new I/O thread.
    /// Fails if the schema has no suitable `kv` table or the address cannot be listened
    /// on.
    pub fn start(node: NodeHandle, options: &ServerOptions) -> Result<Self, ServerError> {
        let kv = KvTable::find(node.config())?.with_wall_offset_ns(wall_offset_ns(&node));
        let mut listener = listen(options.addr).map_err(|source| ServerError::Bind {
            addr: options.addr,
            source,
        })?;
        let local_addr = listener.local_addr().map_err(ServerError::EventLoop)?;
        let poll = Poll::new().map_err(ServerError::EventLoop)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(ServerError::EventLoop)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(ServerError::EventLoop)?;
        let inbox = Arc::new(Inbox::new(waker));
        let session = SessionConfig {
            password: options.password.clone(),
            pipeline_commands_max: options.pipeline_commands_max.max(1),
            ..SessionConfig::default()
        };
        let limits = ParserLimits {
            request_bytes_max: options.max_request_bytes,
            ..ParserLimits::default()
        };
        let context = Context::new(
            node.clone(),
            inbox.clone(),
            kv,
            session,
            limits,
            options.max_clients,
            local_addr.port(),
            READ_BUFFER_BYTES,
        );
        let event_loop = EventLoop::new(poll, listener, context);
        let (thread, on_worker) = if options.on_worker && node.can_attach(0) {
            let (ended, on_worker) = mpsc::channel();
            node.attach(0, Box::new(OnWorker::new(event_loop, ended)))
                .map_err(ServerError::Attach)?;
            (None, Some(on_worker))
        } else {
            let thread = std::thread::Builder::new()
                .name(format!("ferrotx-resp-{}", node.id()))
                .spawn(move || event_loop.run())
                .map_err(ServerError::EventLoop)?;
            (Some(thread), None)
        };
        let sweepers_stop = Arc::new(AtomicBool::new(false));
        start_sweepers(&node, kv, &sweepers_stop);
        Ok(Self {
            local_addr,
            inbox,
            thread,
            on_worker,
            sweepers_stop,
        })
    }

    /// The address it listens on (with the port chosen if the options gave 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether its event loop has ended (it ends only when stopped, when its node stops,
    /// or if it panicked).
    pub fn has_ended(&self) -> bool {
        match (&self.thread, &self.on_worker) {
            (Some(thread), _) => thread.is_finished(),
            (None, Some(ended)) => {
                matches!(ended.try_recv(), Err(mpsc::TryRecvError::Disconnected))
            }
            (None, None) => true,
        }
    }

    /// Waits (up to 5 s) for the loop run on a worker to end.
    fn wait_on_worker(&mut self) {
        if let Some(ended) = self.on_worker.take() {
            let _ = ended.recv_timeout(std::time::Duration::from_secs(5));
        }
    }

    /// Stops serving: closes the listener and every connection, and waits for the I/O
    /// thread; the sweepers end at their next pass. Panics if the I/O thread panicked.
    pub fn stop(mut self) {
        self.sweepers_stop.store(true, Ordering::Relaxed);
        self.inbox.request_stop();
        self.wait_on_worker();
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .expect("the Redis front end's I/O thread panicked");
        }
    }
}

impl Drop for RespServer {
    fn drop(&mut self) {
        self.sweepers_stop.store(true, Ordering::Relaxed);
        self.inbox.request_stop();
        self.wait_on_worker();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_listener_queues_a_burst_of_connections_without_accepting() {
        // Nothing accepts: every connection must still complete at once from the queue
        // (with the standard library's 128, the 130th waited for a SYN retransmission).
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(128);
        let burst = 600.min(somaxconn);
        let clients: Vec<TcpStream> = (0..burst)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_millis(500))
                    .unwrap_or_else(|error| panic!("connection {i} of {burst}: {error}"))
            })
            .collect();
        assert_eq!(clients.len(), burst);
    }
}
