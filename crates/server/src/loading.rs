//! Redis's `-LOADING` while a node restarts from its data directory (issue 32).
//!
//! From the moment a restarting node starts loading its copies until it serves (its
//! copies loaded, the whole cluster back, the first view's recovery under way), its
//! Redis address answers every command with `-LOADING`, as Redis does while it loads its
//! dataset, instead of refusing connections. [`LoadingResponder::stop`] closes the
//! listener and every connection, so that the node's [`crate::RespServer`] can take the
//! address. Off the data path: a thread that accepts, and one per connection (a
//! restart's clients are few and short-lived).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrotx_resp::{Parsed, ParserLimits, ProtocolVersion, RequestParser};

/// The reply to every command while the node loads: Redis's own text.
pub const LOADING_REPLY: &[u8] = b"-LOADING Redis is loading the dataset in memory\r\n";

/// Most clients answered at once; more are closed as they connect.
const CONNECTIONS_MAX: usize = 64;

/// How often the threads look at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// Answers `-LOADING` on a Redis address until stopped.
pub struct LoadingResponder {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl LoadingResponder {
    /// Listens on `addr` and answers every command of every client `-LOADING`.
    pub fn start(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("ferrotx-loading".into())
            .spawn(move || accept(&listener, &flag))?;
        Ok(Self {
            stop,
            acceptor: Some(acceptor),
            addr,
        })
    }

    /// The address it answers on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes the listener and every connection, and waits for its threads.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

impl Drop for LoadingResponder {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept(listener: &TcpListener, stop: &Arc<AtomicBool>) {
    let mut connections = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            // Past the cap a client is closed at once (it retries, or sees the node
            // down): a restart's clients are few, and a flood must not spawn threads
            // without bound.
            Ok(_) if connections.len() >= CONNECTIONS_MAX => {}
            Ok((stream, _)) => {
                let flag = stop.clone();
                if let Ok(handle) = std::thread::Builder::new()
                    .name("ferrotx-loading-client".into())
                    .spawn(move || answer(stream, &flag))
                {
                    connections.push(handle);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
        connections.retain(|c: &JoinHandle<()>| !c.is_finished());
    }
    for connection in connections {
        let _ = connection.join();
    }
}

/// Answers each whole command of `stream` `-LOADING` until the client closes, a request
/// is malformed, or the responder stops.
fn answer(mut stream: TcpStream, stop: &AtomicBool) {
    if stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let mut parser = RequestParser::new(ParserLimits::default());
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                continue;
            }
            Err(_) => return,
        }
        loop {
            let consumed = match parser.parse(&buffer, false) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { consumed }) => consumed,
                Ok(Parsed::Command { consumed, .. }) => {
                    if stream.write_all(LOADING_REPLY).is_err() {
                        return;
                    }
                    consumed
                }
                Err(e) => {
                    let mut reply = Vec::new();
                    e.reply().encode(ProtocolVersion::Resp2, &mut reply);
                    let _ = stream.write_all(&reply);
                    return;
                }
            };
            buffer.drain(..consumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_answered_loading_until_stopped() {
        let responder = LoadingResponder::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = responder.local_addr();
        let mut client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // Two commands pipelined, the second split: two replies.
        client
            .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1")
            .unwrap();
        client.write_all(b"\r\nk\r\n").unwrap();
        let mut got = Vec::new();
        while got.len() < 2 * LOADING_REPLY.len() {
            let mut chunk = [0u8; 256];
            let n = client.read(&mut chunk).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, [LOADING_REPLY, LOADING_REPLY].concat());
        responder.stop();
        // The address is free again.
        TcpListener::bind(addr).unwrap();
    }
}
