//! Redis clients against node processes over TCP on loopback: `ferrotx cluster local`
//! and `ferrotx node` with a Redis address, as a user runs them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    ferrotx, interrupt, lines_until, member_nodes, status, temp_path, test_ports, wait_status,
};

/// A port range of its own for each test ([`test_ports`]).
fn port_base(test: u16) -> u16 {
    test_ports(test)
}

/// A minimal Redis client: commands as RESP arrays, one reply at a time.
struct Redis {
    reader: BufReader<TcpStream>,
}

impl Redis {
    /// Connects to `addr`, waiting for the node process to listen (it starts in the
    /// background).
    fn connect(addr: &str) -> Self {
        let deadline = Instant::now() + Duration::from_secs(20);
        let stream = loop {
            match TcpStream::connect(addr) {
                Ok(stream) => break stream,
                Err(error) => {
                    assert!(Instant::now() < deadline, "{addr}: {error}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    /// Sends one command, returns its reply as text.
    fn call(&mut self, args: &[&str]) -> String {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request += &format!("${}\r\n{arg}\r\n", arg.len());
        }
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut reply = Vec::new();
        self.read_value(&mut reply);
        String::from_utf8(reply).unwrap()
    }

    fn read_value(&mut self, out: &mut Vec<u8>) {
        let start = out.len();
        assert!(
            self.reader.read_until(b'\n', out).unwrap() > 0,
            "connection closed"
        );
        let number = || -> i64 {
            std::str::from_utf8(&out[start + 1..out.len() - 2])
                .unwrap()
                .parse()
                .unwrap()
        };
        match out[start] {
            b'$' => {
                let len = number();
                if len >= 0 {
                    let mut body = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut body).unwrap();
                    out.extend_from_slice(&body);
                }
            }
            b'*' => {
                for _ in 0..number().max(0) {
                    self.read_value(out);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn a_local_cluster_serves_redis_clients_on_every_node() {
    let base = port_base(12);
    let mut child = ferrotx()
        .args(["cluster", "local", "--nodes", "3", "--replicas", "3"])
        .args(["--port-base", &base.to_string()])
        .args(["--resp-port-base", &(base + 3).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_until(&mut child, "Ctrl-C stops the cluster");
    let addrs: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", base + 3 + i))
        .collect();
    let listed = format!("Redis clients: {}", addrs.join(", "));
    assert!(lines.contains(&listed), "{lines:?}");
    let mut clients: Vec<Redis> = addrs.iter().map(|addr| Redis::connect(addr)).collect();

    assert_eq!(clients[0].call(&["PING"]), "+PONG\r\n");
    assert_eq!(clients[0].call(&["SET", "greeting", "hello"]), "+OK\r\n");
    for client in &mut clients {
        assert_eq!(client.call(&["GET", "greeting"]), "$5\r\nhello\r\n");
    }
    // A transaction over keys of several partitions, from node 2.
    assert_eq!(clients[2].call(&["MULTI"]), "+OK\r\n");
    for i in 0..8 {
        assert_eq!(
            clients[2].call(&["SET", &format!("k{i}"), &i.to_string()]),
            "+QUEUED\r\n"
        );
    }
    assert_eq!(clients[2].call(&["INCR", "k7"]), "+QUEUED\r\n");
    let exec = clients[2].call(&["EXEC"]);
    assert_eq!(exec, format!("*9\r\n{}:8\r\n", "+OK\r\n".repeat(8)));
    assert_eq!(
        clients[1].call(&["MGET", "k0", "k7", "nope"]),
        "*3\r\n$1\r\n0\r\n$1\r\n8\r\n$-1\r\n"
    );
    // WATCH on node 0, a write from node 1 in between: EXEC answers nil.
    assert_eq!(clients[0].call(&["WATCH", "k3"]), "+OK\r\n");
    assert_eq!(clients[1].call(&["SET", "k3", "changed"]), "+OK\r\n");
    assert_eq!(clients[0].call(&["MULTI"]), "+OK\r\n");
    assert_eq!(clients[0].call(&["SET", "k3", "lost"]), "+QUEUED\r\n");
    assert_eq!(clients[0].call(&["EXEC"]), "*-1\r\n");
    assert_eq!(clients[2].call(&["GET", "k3"]), "$7\r\nchanged\r\n");
    // Increments from a client of every node at once add up.
    std::thread::scope(|scope| {
        for addr in &addrs {
            scope.spawn(move || {
                let mut client = Redis::connect(addr);
                for _ in 0..100 {
                    assert!(client.call(&["INCR", "counter"]).starts_with(':'));
                }
            });
        }
    });
    assert_eq!(clients[1].call(&["GET", "counter"]), "$3\r\n300\r\n");
    // The whole keyspace, from any node.
    assert_eq!(clients[0].call(&["DBSIZE"]), ":10\r\n");
    let keys = clients[2].call(&["KEYS", "k*"]);
    assert!(keys.starts_with("*8\r\n"), "{keys}");
    interrupt(child);
}

#[test]
fn a_node_serves_redis_on_its_configured_address_with_a_password() {
    let base = port_base(14);
    let config = temp_path("resp-node.toml");
    std::fs::write(
        &config,
        format!(
            "id = 1\nthreads_per_node = 2\nreplicas = 1\npartition_count = 4\n\
             [resp]\nrequirepass = \"sesame\"\nmax_clients = 2\n\
             [[member]]\nnode = 0\nfailure_domain = \"a\"\nhost = \"127.0.0.1\"\n\
             rpc_port_base = {base}\nresp = \"127.0.0.1:{}\"\n",
            base + 2
        ),
    )
    .unwrap();
    let mut child = ferrotx()
        .args(["node", "--config"])
        .arg(&config)
        .args(["--id", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{}", base + 2);
    let lines = lines_until(&mut child, "serving Redis clients");
    let _ = std::fs::remove_file(&config);
    assert!(
        lines
            .last()
            .unwrap()
            .ends_with(&format!("serving Redis clients on {addr}")),
        "{lines:?}"
    );
    let mut client = Redis::connect(&addr);
    assert_eq!(
        client.call(&["SET", "a", "1"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(client.call(&["AUTH", "sesame"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", "a", "1"]), "+OK\r\n");
    let _second = Redis::connect(&addr);
    let mut third = Redis::connect(&addr);
    let mut refused = String::new();
    third.reader.read_to_string(&mut refused).unwrap();
    assert_eq!(refused, "-ERR max number of clients reached\r\n");
    assert_eq!(client.call(&["GET", "a"]), "$1\r\n1\r\n");
    interrupt(child);
}

#[test]
fn a_node_without_a_kv_table_refuses_to_serve_redis() {
    let base = port_base(15);
    let config = temp_path("resp-no-kv.toml");
    std::fs::write(
        &config,
        format!(
            "id = 1\nthreads_per_node = 1\nreplicas = 1\npartition_count = 1\n\
             [[member]]\nnode = 0\nfailure_domain = \"a\"\nhost = \"127.0.0.1\"\n\
             rpc_port_base = {base}\nresp_port = {}\n\
             [[table]]\nid = 2\nname = \"accounts\"\nvalue_bytes = 8\n",
            base + 1
        ),
    )
    .unwrap();
    let output = ferrotx()
        .args(["node", "--config"])
        .arg(&config)
        .args(["--id", "0"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&config);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Redis front end"), "{stderr}");
    assert!(
        stderr.contains("no table named \"kv\" (it has accounts)"),
        "{stderr}"
    );
}

/// FaRM 5.1-5.2 over real processes: kill -9 one node of three, and the survivors agree on
/// a configuration without it and go on serving every acknowledged key; restart it, and it
/// is admitted as a new member (holding no partition) while no survivor exits.
#[test]
fn a_killed_node_is_removed_and_its_restart_admitted_as_a_new_member() {
    let base = port_base(13);
    let config = temp_path("membership.toml");
    let mut cluster = start_cluster_with_config(base, &config);
    let addr = |node: u16| format!("127.0.0.1:{}", base + 3 + node);
    let mut first = Redis::connect(&addr(0));
    for i in 0..300 {
        assert_eq!(
            first.call(&["SET", &format!("k{i}"), &format!("v{i}")]),
            "+OK\r\n"
        );
    }
    let before = wait_status(&config, 20, |s| member_nodes(s) == [0, 1, 2]);
    let id = before["configuration"].as_u64().unwrap();
    // kill -9 node 2 (found by its command line).
    let pid = pid_of_node(&config, 2);
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    let after = wait_status(&config, 30, |s| member_nodes(s) == [0, 1]);
    assert!(after["configuration"].as_u64().unwrap() > id);
    assert!(
        after["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["alive"] == true && m["view"] == after["configuration"]),
        "{after:#}"
    );
    // Every partition kept two copies: a backup was promoted where node 2 was primary.
    assert_eq!(after["without_copy"], 0);
    let mut survivor = Redis::connect(&addr(1));
    for i in 0..300 {
        assert_eq!(
            survivor.call(&["GET", &format!("k{i}")]),
            format!("${}\r\nv{i}\r\n", format!("v{i}").len())
        );
    }
    assert_eq!(survivor.call(&["SET", "after", "1"]), "+OK\r\n");
    // Restarted from the same configuration: a new member, with no partition.
    let mut restarted = ferrotx()
        .args(["node", "--id", "2", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let admitted = wait_status(&config, 30, |s| member_nodes(s) == [0, 1, 2]);
    let copies = admitted["copies"].as_array().unwrap();
    assert!(
        copies
            .iter()
            .all(|c| !c.as_array().unwrap().contains(&2.into()))
    );
    let mut third = Redis::connect(&addr(2));
    assert_eq!(third.call(&["GET", "k7"]), "$2\r\nv7\r\n");
    assert_eq!(third.call(&["SET", "from2", "x"]), "+OK\r\n");
    assert_eq!(first.call(&["GET", "from2"]), "$1\r\nx\r\n");
    // No survivor exited.
    assert!(cluster.try_wait().unwrap().is_none());
    let s = status(&config);
    assert!(
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["alive"] == true)
    );
    let _ = restarted.kill();
    let _ = restarted.wait();
    interrupt(cluster);
    let _ = std::fs::remove_file(&config);
}

/// Starts `ferrotx cluster local` (3 nodes, 3 replicas) from port `base`, its
/// configuration written to `config`, and waits until it runs.
fn start_cluster_with_config(base: u16, config: &std::path::Path) -> Child {
    let _ = std::fs::remove_file(ferrotx_state(config));
    let mut cluster = ferrotx()
        .args(["cluster", "local", "--nodes", "3", "--replicas", "3"])
        .args(["--port-base", &base.to_string()])
        .args(["--resp-port-base", &(base + 3).to_string()])
        .arg("--config-out")
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    lines_until(&mut cluster, "Ctrl-C stops the cluster");
    cluster
}

/// The pid of the node process of `node` started from `config` (by its command line).
fn pid_of_node(config: &std::path::Path, node: u16) -> String {
    let pids = Command::new("pgrep")
        .args([
            "-f",
            &format!("node --config {} --id {node}", config.display()),
        ])
        .output()
        .unwrap();
    let pids = String::from_utf8(pids.stdout).unwrap();
    pids.split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("node {node} runs"))
        .to_string()
}

/// The coordination file next to a configuration file.
fn ferrotx_state(config: &std::path::Path) -> std::path::PathBuf {
    let mut name = config.file_name().unwrap().to_os_string();
    name.push(".state.toml");
    config.with_file_name(name)
}

/// A node paused (SIGSTOP) past its lease is removed; when it resumes its removed life
/// serves nothing (no read of the value it held before): it learns it was removed and
/// comes back as a new life, the same process, which serves the new values.
#[test]
fn a_node_paused_past_its_lease_never_serves_its_old_life_again() {
    let base = port_base(11);
    let config = temp_path("paused.toml");
    let mut cluster = start_cluster_with_config(base, &config);
    let addr = |node: u16| format!("127.0.0.1:{}", base + 3 + node);
    let mut first = Redis::connect(&addr(0));
    // Keys written through node 2, a third of them with their primary there; one
    // connection per key, opened before the pause.
    const KEYS: usize = 30;
    let mut clients: Vec<Redis> = (0..KEYS).map(|_| Redis::connect(&addr(2))).collect();
    for (i, client) in clients.iter_mut().enumerate() {
        assert_eq!(client.call(&["SET", &format!("p{i}"), "old"]), "+OK\r\n");
    }
    let before = wait_status(&config, 20, |s| member_nodes(s) == [0, 1, 2]);
    let life_of = |s: &serde_json::Value| s["members"][2]["incarnation"].as_u64();
    let old_life = life_of(&before).unwrap();
    let pid = pid_of_node(&config, 2);
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_status(&config, 30, |s| member_nodes(s) == [0, 1]);
    for i in 0..KEYS {
        assert_eq!(first.call(&["SET", &format!("p{i}"), "new"]), "+OK\r\n");
    }
    // Every GET is sent as it resumes: none may answer the old value (a node outside its
    // lease serves nothing, even the keys it was primary of), and its life ends.
    for client in &clients {
        client
            .reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    for (i, client) in clients.iter_mut().enumerate() {
        let request = format!("*2\r\n$3\r\nGET\r\n${}\r\np{i}\r\n", format!("p{i}").len());
        let _ = client.reader.get_mut().write_all(request.as_bytes());
    }
    let read_until = Instant::now() + Duration::from_secs(3);
    for client in &mut clients {
        let mut reply = String::new();
        while Instant::now() < read_until {
            match client.reader.read_line(&mut reply) {
                Ok(_) => break,
                Err(_) => continue,
            }
        }
        assert!(
            !reply.starts_with("$3"),
            "a removed node answered {reply:?}"
        );
    }
    // Back as a new life of node 2, in the same process (it replaced itself), and
    // refilled: no partition short of copies, no backup being filled.
    let after = wait_status(&config, 60, |s| {
        member_nodes(s) == [0, 1, 2]
            && life_of(s).is_some_and(|life| life != old_life)
            && s["members"][2]["alive"] == true
            && s["short_of_copies"] == 0
            && s["backups_filling"] == 0
    });
    assert!(life_of(&after).unwrap() > old_life, "{after:#}");
    assert_eq!(pid_of_node(&config, 2), pid);
    let mut again = Redis::connect(&addr(2));
    for i in 0..KEYS {
        assert_eq!(first.call(&["GET", &format!("p{i}")]), "$3\r\nnew\r\n");
        assert_eq!(again.call(&["GET", &format!("p{i}")]), "$3\r\nnew\r\n");
    }
    assert!(cluster.try_wait().unwrap().is_none());
    interrupt(cluster);
    let _ = std::fs::remove_file(&config);
}
