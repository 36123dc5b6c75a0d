//! `ferrotx sim` end to end: separate processes replay a seed exactly, sweeps report
//! what they injected, and failures say how to replay them.

mod common;

use std::process::Output;

use common::{ferrotx, temp_path};

fn sim(args: &[&str]) -> Output {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    ferrotx()
        .args(&all)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("running ferrotx sim")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The digest covers every datagram delivered and the recorded history, so two
/// processes agree on it only if they ran the same simulation.
#[test]
fn a_seed_replays_exactly_in_another_process() {
    let args = ["--workload", "all", "--seed", "7"];
    let first = sim(&args);
    let second = sim(&args);
    assert!(first.status.success(), "{}", stdout(&first));
    let digests = |out: &Output| -> Vec<String> {
        stdout(out)
            .lines()
            .filter(|l| l.starts_with("digest: "))
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (digests(&first), digests(&second));
    assert!(!a.is_empty() && a.len() >= 5, "{}", stdout(&first));
    assert_eq!(a, b, "seed 7 ran differently in two processes");
    assert_eq!(stdout(&first), stdout(&second));
    // Another seed is another run.
    let other = sim(&["--workload", "all", "--seed", "8"]);
    assert_ne!(digests(&other), a);
}

#[test]
fn a_sweep_reports_every_workload_and_fault_kind() {
    let json = temp_path("sim.json");
    let out = sim(&[
        "--workload",
        "all",
        "--seeds",
        "30",
        "--json",
        json.to_str().expect("a UTF-8 temp path"),
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report"))
            .expect("valid JSON");
    let workloads = report["workloads"].as_object().expect("workloads");
    assert!(workloads.len() >= 5, "{report}");
    for (name, w) in workloads {
        assert_eq!(w["seeds"], 30, "{name}");
        assert_eq!(w["passed"], 30, "{name}");
        assert!(w["committed"].as_u64().unwrap() > 0, "{name}");
        // The Redis front end retries conflicts itself, so resp-list-append and the
        // resp-counter workloads, which use no WATCH, report none (resp-counter's
        // "aborted" are -TRYAGAIN and -CLUSTERDOWN replies); every other workload's
        // clients see aborts.
        if name != "resp-list-append" && !name.starts_with("resp-counter") {
            assert!(w["aborted"].as_u64().unwrap() > 0, "{name}: no contention");
        }
    }
    for (kind, n) in report["faults_injected"].as_object().expect("faults") {
        assert!(n.as_u64().unwrap() > 0, "{kind} never injected");
    }
    assert!(!report["buggify_fired"].as_object().unwrap().is_empty());
    let _ = std::fs::remove_file(json);
}

/// Crash plans run with membership (a crashed node restarts as a new life, admitted and
/// refilled): they pass, and every crash is recovered from, not excused.
#[test]
fn crash_plans_run_with_membership_and_pass() {
    let json = std::env::temp_dir().join(format!("ferrotx-sim-crash-{}.json", std::process::id()));
    let out = sim(&[
        "--workload",
        "bank",
        "--seeds",
        "12",
        "--faults",
        "crash,pause,partition,loss",
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("faults injected: crash 12"), "{text}");
    assert!(text.contains("sim: 12 passed, 0 failed"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(json);
    // Crashed nodes came back as new lives and were refilled.
    assert!(report["fills_counted"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let out = sim(&["--workload", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown workload \"nope\"") && err.contains("bank"),
        "{err}"
    );
    let out = sim(&["--faults", "lose"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown fault kind \"lose\""), "{err}");
    let out = sim(&["--replicas", "4"]);
    assert!(!out.status.success());
    let out = sim(&["--seeds", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seeds must be at least 1"));
    let out = sim(&["--nodes", "1", "--replicas", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("a partition needs at least 2 nodes"));
}
