//! What the Redis front end's tests share: a cluster in this process with a Redis server
//! on every node, and a minimal RESP client over `std::net::TcpStream`.

#![allow(dead_code)] // Each test binary uses its own part.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ferrotx_bench::lossy::Lossy;
use ferrotx_cluster::{Configuration, RespSettings, default_tables};
use ferrotx_node::{BATCH_DATAGRAMS, LocalCluster, NodeOptions};
use ferrotx_resp::keys;
use ferrotx_server::{RespServer, ServerOptions};
use ferrotx_store::{Key, TableId};
use ferrotx_transport::UDP_MAX_PAYLOAD_BYTES;

/// The `kv` table of the default schema.
pub const KV: TableId = TableId(1);

/// A cluster of `nodes` nodes in this process (over in-process queues), each serving
/// Redis on a free loopback port. Its servers stop before its nodes.
pub struct RedisCluster {
    pub servers: Vec<RespServer>,
    pub cluster: LocalCluster,
}

impl RedisCluster {
    /// 3 nodes, 3 replicas, 2 worker threads each, 2 partitions per node.
    pub fn start() -> Self {
        Self::start_with(RespSettings::default())
    }

    pub fn start_with(settings: RespSettings) -> Self {
        Self::start_shaped(3, 3, 2, 2, settings)
    }

    pub fn start_shaped(
        nodes: u16,
        replicas: u8,
        threads: u16,
        partitions_per_node: u32,
        settings: RespSettings,
    ) -> Self {
        Self::start_lossy(nodes, replicas, threads, partitions_per_node, settings, 0.0)
    }

    /// As [`RedisCluster::start_shaped`], with every worker dropping each datagram it
    /// sends with probability `loss` (the RPC layer retransmits).
    pub fn start_lossy(
        nodes: u16,
        replicas: u8,
        threads: u16,
        partitions_per_node: u32,
        settings: RespSettings,
        loss: f64,
    ) -> Self {
        // The RPC ports are not used (in-process queues); the Redis ports are chosen by
        // the kernel.
        let config = Configuration::local(nodes, replicas, threads, partitions_per_node, 50_000)
            .unwrap()
            .with_resp(settings.clone())
            .unwrap();
        // The nodes run shipped Redis commands, as `ferrotx node` does.
        let kv = ferrotx_redis_exec::KvTable::find(
            &config.clone().with_tables(default_tables()).unwrap(),
        )
        .unwrap();
        // Its workers' clocks start about now: Unix time is theirs plus this offset.
        let wall_offset_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let options = NodeOptions {
            procedures: ferrotx_redis_exec::procedures(kv.with_wall_offset_ns(wall_offset_ns)),
            ..NodeOptions::default()
        };
        let cluster =
            LocalCluster::start_wrapped(config, default_tables(), &options, |local, transport| {
                let seed = u64::from(local.0);
                Lossy::new(
                    transport,
                    loss,
                    seed,
                    BATCH_DATAGRAMS,
                    UDP_MAX_PAYLOAD_BYTES,
                )
            });
        let servers = cluster
            .nodes()
            .into_iter()
            .map(|node| {
                let options = ServerOptions::new("127.0.0.1:0".parse().unwrap(), &settings);
                RespServer::start(cluster.handle(node), &options).unwrap()
            })
            .collect();
        Self { servers, cluster }
    }

    /// The Redis address of node `node`.
    pub fn addr(&self, node: u16) -> SocketAddr {
        self.servers[usize::from(node)].local_addr()
    }

    /// A client of node `node`.
    pub fn client(&self, node: u16) -> Client {
        Client::connect(self.addr(node))
    }

    /// The partition of the Redis key `key`.
    pub fn partition_of(&self, key: &[u8]) -> u32 {
        let store_key = Key::from_bytes(&keys::store_key(key)).unwrap();
        self.cluster.partition_of(KV, &store_key).0
    }

    /// The node that is primary for the Redis key `key`.
    pub fn primary_of(&self, key: &[u8]) -> u16 {
        let partition = ferrotx_store::PartitionId(self.partition_of(key));
        self.cluster.config().partitions().primary(partition)
    }

    /// Keys `prefix0`, `prefix1`, ... until one has its primary on each node in `nodes`,
    /// in that order.
    pub fn keys_with_primaries(&self, prefix: &str, nodes: &[u16]) -> Vec<String> {
        nodes
            .iter()
            .map(|&node| {
                (0..)
                    .map(|i| format!("{prefix}{node}-{i}"))
                    .find(|key| self.primary_of(key.as_bytes()) == node)
                    .unwrap()
            })
            .collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for server in self.servers.drain(..) {
            server.stop();
        }
    }
}

/// A Redis client: writes commands as RESP arrays, reads replies byte for byte.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        self.reader.get_mut()
    }

    /// Sends `args` as one command and returns its reply's bytes.
    pub fn call(&mut self, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        self.call_bytes(&args)
    }

    /// [`Client::call`] with a reply in text (for assertions that print well).
    pub fn text(&mut self, args: &[&str]) -> String {
        String::from_utf8(self.call(args)).unwrap()
    }

    pub fn call_bytes(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&command(args));
        self.reply()
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream().write_all(bytes).unwrap();
    }

    /// Reads one whole reply (RESP2 or RESP3), its bytes as sent.
    pub fn reply(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_value(&mut out);
        out
    }

    fn line(&mut self, out: &mut Vec<u8>) -> Vec<u8> {
        let start = out.len();
        let n = self.reader.read_until(b'\n', out).unwrap();
        assert!(
            n > 0,
            "the server closed the connection; got {:?}",
            String::from_utf8_lossy(out)
        );
        assert!(out.ends_with(b"\r\n"), "{:?}", String::from_utf8_lossy(out));
        out[start + 1..out.len() - 2].to_vec()
    }

    fn read_value(&mut self, out: &mut Vec<u8>) {
        let start = out.len();
        let header = self.line(out);
        let number = || -> i64 { std::str::from_utf8(&header).unwrap().parse().unwrap() };
        match out[start] {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => {}
            b'$' | b'=' | b'!' => {
                let len = number();
                if len >= 0 {
                    let mut body = vec![0; usize::try_from(len).unwrap() + 2];
                    self.reader.read_exact(&mut body).unwrap();
                    out.extend_from_slice(&body);
                }
            }
            b'*' | b'~' | b'>' => {
                for _ in 0..number().max(0) {
                    self.read_value(out);
                }
            }
            b'%' | b'|' => {
                for _ in 0..number() * 2 {
                    self.read_value(out);
                }
            }
            other => panic!("not a RESP reply: {:?}", char::from(other)),
        }
    }

    /// Reads until the server closes the connection, and returns what came.
    pub fn read_to_end(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest).unwrap();
        rest
    }
}

/// `args` as a RESP array of bulk strings.
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A bulk string reply.
pub fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// An array reply of bulk strings.
pub fn bulks(items: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(&bulk(item));
    }
    out
}

/// The bulk strings of an array reply (`*n` then `$len` items), as text.
pub fn parse_bulks(reply: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(reply).unwrap();
    let mut lines = text.split("\r\n");
    let count: usize = lines.next().unwrap()[1..].parse().unwrap();
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let header = lines.next().unwrap();
        assert!(header.starts_with('$'), "{header}");
        items.push(lines.next().unwrap().to_owned());
    }
    items
}
