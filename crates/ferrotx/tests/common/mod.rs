//! What the end-to-end tests of the `ferrotx` command share.

#![allow(dead_code)] // Each test binary uses its own part.

pub mod bank;
pub mod capture;
pub mod client;
pub mod copies;
pub mod nodes;
pub mod rolling;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The `ferrotx` binary under test.
pub fn ferrotx() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrotx"))
}

/// The first of 16 ports (UDP and TCP) that test number `test` of a file may use: apart
/// for every test of the file (they run at once), and per process, so that two runs
/// rarely meet. All below Linux's ephemeral ports (32768 and up): a port the kernel gave
/// a client socket, maybe still in TIME_WAIT, cannot be taken by a node.
pub fn test_ports(test: u16) -> u16 {
    assert!(test < 16, "16 tests per file");
    10_000 + (std::process::id() % 85) as u16 * 256 + test * 16
}

/// A path in the temporary directory, unique to this test process and `name`.
pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrotx-test-{}-{name}", std::process::id()))
}

/// Runs `ferrotx bench <what>` with `args` plus `--json`, requires it to succeed, and
/// returns its JSON report.
pub fn bench(what: &str, name: &str, args: &[&str]) -> serde_json::Value {
    let json = temp_path(name);
    let output = ferrotx()
        .args(["bench", what, "--json"])
        .arg(&json)
        .args(args)
        .output()
        .expect("run ferrotx");
    assert!(
        output.status.success(),
        "ferrotx bench {what} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("report written")).expect("JSON");
    let _ = std::fs::remove_file(json);
    report
}

/// The number at `key` of a JSON report.
pub fn number(report: &serde_json::Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {report}"))
}

/// Reads `child`'s stdout until a line contains `last`; returns the lines. The rest is
/// drained in the background, so the child never blocks on a full pipe.
pub fn lines_until(child: &mut Child, last: &str) -> Vec<String> {
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "ended: {lines:?}");
        lines.push(line.trim().to_owned());
        if line.contains(last) {
            break;
        }
    }
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
    });
    lines
}

/// `ferrotx status --json` of the cluster of `config`.
pub fn status(config: &Path) -> serde_json::Value {
    let out = ferrotx()
        .args(["status", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until `check` holds for the cluster's status, for at most `secs` seconds.
pub fn wait_status(
    config: &Path,
    secs: u64,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(config);
        if check(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "status never got there: {s:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The nodes of a status's members.
pub fn member_nodes(s: &serde_json::Value) -> Vec<u64> {
    s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node"].as_u64().unwrap())
        .collect()
}

/// Stops `child` with SIGINT and waits (15 s at most) for it to exit successfully.
pub fn interrupt(mut child: Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        assert!(Instant::now() < deadline, "did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}
