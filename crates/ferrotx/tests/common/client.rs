//! A Redis client for the tests that kill node processes: one connection, requests
//! pipelined, every reply awaited for at most `REPLY_TIMEOUT`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ferrotx_redis_exec::{RespValue, encode_request, parse_reply};

use super::nodes::MEMBERSHIP_DEADLINE;

/// Longest a client waits for a reply (the server answers every command within 5 s).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request got no reply: its effect is unknown.
#[derive(Debug)]
pub enum NoReply {
    Timeout,
    Lost(String),
}

impl std::fmt::Display for NoReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => write!(f, "no reply in {REPLY_TIMEOUT:?}"),
            Self::Lost(why) => write!(f, "connection lost: {why}"),
        }
    }
}

pub struct Conn {
    stream: TcpStream,
    received: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Option<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        stream.set_nodelay(true).ok()?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT)).ok()?;
        Some(Self {
            stream,
            received: Vec::new(),
        })
    }

    /// Sends `commands` in one write (a pipeline).
    pub fn send(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<(), NoReply> {
        let mut bytes = Vec::new();
        for command in commands {
            encode_request(command, &mut bytes);
        }
        self.stream
            .write_all(&bytes)
            .map_err(|e| NoReply::Lost(e.to_string()))
    }

    /// The next reply.
    pub fn reply(&mut self) -> Result<RespValue, NoReply> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match parse_reply(&self.received) {
                Ok(Some((value, used))) => {
                    self.received.drain(..used);
                    return Ok(value);
                }
                Ok(None) => {}
                Err(e) => return Err(NoReply::Lost(format!("malformed reply: {e}"))),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NoReply::Timeout);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| NoReply::Lost(e.to_string()))?;
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(NoReply::Lost("closed by the server".into())),
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(NoReply::Timeout);
                }
                Err(e) => return Err(NoReply::Lost(e.to_string())),
            }
        }
    }

    /// `commands` pipelined, and one reply per command (stopping at the first failure).
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<RespValue>, NoReply> {
        self.send(commands)?;
        commands.iter().map(|_| self.reply()).collect()
    }

    pub fn call(&mut self, command: Vec<Vec<u8>>) -> Result<RespValue, NoReply> {
        Ok(self.pipeline(&[command])?.remove(0))
    }
}

pub fn cmd(parts: &[&dyn AsRef<[u8]>]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| (*p).as_ref().to_vec()).collect()
}

/// True for an error after which the command certainly took no effect (docs/redis.md).
pub fn certainly_no_effect(message: &[u8]) -> bool {
    [&b"EXECABORT"[..], b"TRYAGAIN", b"CLUSTERDOWN"]
        .iter()
        .any(|code| message.starts_with(code))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn integer_of(value: &RespValue) -> Option<i64> {
    std::str::from_utf8(value.as_bytes()?).ok()?.parse().ok()
}

/// `command` through `addr`, retried (a new connection each time) until it gets a reply
/// that is not an error, for at most `MEMBERSHIP_DEADLINE`.
pub fn call_until_answered(addr: SocketAddr, command: &[Vec<u8>]) -> RespValue {
    let deadline = Instant::now() + MEMBERSHIP_DEADLINE;
    loop {
        let reply = Conn::open(addr).map(|mut c| c.call(command.to_vec()));
        match reply {
            Some(Ok(value)) if !value.is_error() => return value,
            other => assert!(
                Instant::now() < deadline,
                "{} through {addr}: {other:?}",
                text(&command[0])
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
