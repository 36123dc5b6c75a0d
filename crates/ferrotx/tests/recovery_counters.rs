//! Transaction-state recovery's counters as an operator sees them: `recovery_*` fields in
//! a node's INFO, and `ferrotx status` gathering them from every member.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ferrotx, interrupt, lines_until, member_nodes, temp_path, test_ports, wait_status};

/// The vote kinds, as `ferrotx status` and INFO name them.
const VOTE_KINDS: [&str; 6] = [
    "unknown",
    "truncated",
    "abort",
    "lock",
    "commit_backup",
    "commit_primary",
];

/// One command over a fresh connection to `addr` (retried while the node starts), its
/// reply's text (a bulk string's contents, or the whole line otherwise).
fn call(addr: &str, args: &[&str]) -> String {
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
    let mut reader = BufReader::new(stream);
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    reader.get_mut().write_all(request.as_bytes()).unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    match line.strip_prefix('$') {
        Some(len) => {
            let len: usize = len.trim_end().parse().unwrap();
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body).unwrap();
            body.truncate(len);
            String::from_utf8(body).unwrap()
        }
        None => line,
    }
}

fn status_output(config: &Path, json: bool) -> std::process::Output {
    let mut command = ferrotx();
    command.arg("status");
    if json {
        command.arg("--json");
    }
    let started = Instant::now();
    let out = command.arg("--config").arg(config).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each member is asked within 300 ms, all at once, after a probe of 500 ms at most.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "status was slow"
    );
    out
}

/// Requires `r` to be a recovery object with every counter; returns its rounds.
fn check_recovery_object(r: &serde_json::Value) -> u64 {
    for key in ["rounds", "waited"] {
        assert!(r[key].as_u64().is_some(), "{key} in {r}");
    }
    for key in ["commit", "abort"] {
        assert!(
            r["decisions"][key].as_u64().is_some(),
            "decisions.{key} in {r}"
        );
    }
    let votes = r["votes"].as_object().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(votes.len(), VOTE_KINDS.len(), "{r}");
    for kind in VOTE_KINDS {
        assert!(votes[kind].as_u64().is_some(), "votes.{kind} in {r}");
    }
    r["rounds"].as_u64().unwrap()
}

/// The pid `cluster local` listed for `node`.
fn pid_of_node(lines: &[String], node: u16) -> String {
    let line = lines
        .iter()
        .find(|l| l.contains(&format!("node {node} (")))
        .unwrap_or_else(|| panic!("node {node} not listed: {lines:?}"));
    line.split_whitespace().nth(1).unwrap().to_owned()
}

fn state_path(config: &Path) -> PathBuf {
    let mut name = config.file_name().unwrap().to_os_string();
    name.push(".state.toml");
    config.with_file_name(name)
}

#[test]
fn status_and_info_report_recovery_counters_and_a_kill_adds_rounds() {
    let base = test_ports(0);
    let config = temp_path("recovery-counters.toml");
    let _ = std::fs::remove_file(state_path(&config));
    let mut cluster = ferrotx()
        .args(["cluster", "local", "--nodes", "3", "--replicas", "3"])
        .args(["--port-base", &base.to_string()])
        .args(["--resp-port-base", &(base + 3).to_string()])
        .arg("--config-out")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_until(&mut cluster, "Ctrl-C stops the cluster");
    let addr = |node: u16| format!("127.0.0.1:{}", base + 3 + node);

    // INFO has every counter, in the ferrotx section (`field:value` lines).
    let info = call(&addr(0), &["INFO"]);
    let ferrotx_section = info.split("# ferrotx\r\n").nth(1).expect("# ferrotx");
    let mut fields = vec![
        "recovery_rounds".to_owned(),
        "recovery_decided_commit".to_owned(),
        "recovery_decided_abort".to_owned(),
        "recovery_waited".to_owned(),
    ];
    fields.extend(VOTE_KINDS.iter().map(|k| format!("recovery_votes_{k}")));
    for field in &fields {
        let line = ferrotx_section
            .split("\r\n")
            .find(|l| l.starts_with(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in {info}"));
        let value = line.split_once(':').unwrap().1;
        assert!(value.parse::<u64>().is_ok(), "{line}");
    }
    // Every line is `name:value`, a `# Section` heading or the empty line between.
    for line in info.split("\r\n") {
        assert!(
            line.is_empty() || line.starts_with("# ") || line.contains(':'),
            "{line:?}"
        );
    }

    // Status: a recovery object for every member, and their sum.
    let s = wait_status(&config, 30, |s| {
        member_nodes(s) == [0, 1, 2]
            && s["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| !m["recovery"].is_null())
    });
    let mut rounds_before = 0;
    for m in s["members"].as_array().unwrap() {
        rounds_before += check_recovery_object(&m["recovery"]);
    }
    assert_eq!(
        check_recovery_object(&s["recovery"]),
        rounds_before,
        "{s:#}"
    );
    assert_eq!(s["recovery"]["members"], 3, "{s:#}");
    let text = String::from_utf8(status_output(&config, false).stdout).unwrap();
    for node in 0..3 {
        let line = format!("  node {node}: ");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&line) && l.contains("rounds, decided")),
            "{text}"
        );
    }

    // Some committed writes, then kill -9 node 2: each survivor's worker thread runs a
    // recovery round for the view without it.
    for i in 0..50 {
        assert_eq!(
            call(&addr(i % 2), &["INCR", &format!("c{}", i % 5)]).as_bytes()[0],
            b':'
        );
    }
    let pid = pid_of_node(&lines, 2);
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    let after = wait_status(&config, 30, |s| {
        member_nodes(s) == [0, 1]
            && s["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["recovery"]["rounds"].as_u64().is_some_and(|r| r >= 1))
    });
    // Still answering after recovery, and the sum covers the two survivors only.
    assert_eq!(call(&addr(0), &["INCR", "c0"]).as_bytes()[0], b':');
    assert_eq!(after["recovery"]["members"], 2, "{after:#}");
    let survivors: u64 = after["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| check_recovery_object(&m["recovery"]))
        .sum();
    assert_eq!(check_recovery_object(&after["recovery"]), survivors);
    assert!(survivors >= 2, "{after:#}");
    interrupt(cluster);
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(state_path(&config));
}

#[test]
fn status_authenticates_to_ask_a_node_with_a_password() {
    let base = test_ports(1);
    let config = temp_path("recovery-counters-password.toml");
    let _ = std::fs::remove_file(state_path(&config));
    std::fs::write(
        &config,
        format!(
            "id = 1\nthreads_per_node = 2\nreplicas = 1\npartition_count = 4\n\
             [resp]\nrequirepass = \"sesame\"\n\
             [[member]]\nnode = 0\nfailure_domain = \"a\"\nhost = \"127.0.0.1\"\n\
             rpc_port_base = {base}\nresp = \"127.0.0.1:{}\"\n",
            base + 3
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
    lines_until(&mut child, "serving Redis clients");
    let s = wait_status(&config, 30, |s| !s["members"][0]["recovery"].is_null());
    // A new cluster's first configuration has nothing to recover.
    assert_eq!(check_recovery_object(&s["members"][0]["recovery"]), 0);
    assert_eq!(s["recovery"]["members"], 1, "{s:#}");
    interrupt(child);
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(state_path(&config));
}
