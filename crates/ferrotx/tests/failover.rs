//! `ferrotx bench failover` end to end: one kill -9 of a node of a real process cluster
//! under Redis load, and its JSON report.

mod common;

use common::{bench, number, test_ports};

#[test]
fn one_kill_reports_detection_and_a_well_formed_report() {
    let base = test_ports(0).to_string();
    let report = bench(
        "failover",
        "failover.json",
        &["--kills", "1", "--lease-ms", "200", "--port-base", &base],
    );
    assert_eq!(report["kills"], 1, "{report:#}");
    assert_eq!(report["nodes"], 3, "{report:#}");
    assert_eq!(report["lease_ms"], 200, "{report:#}");
    // Leases and membership (FaRM 5.1-5.2) are built: the killed node is always left out.
    assert_eq!(report["detect_ms"]["count"], 1, "{report:#}");
    assert!(number(&report["detect_ms"], "p50") > 0.0, "{report:#}");
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{report:#}");
    let run = &runs[0];
    assert!(run["detect_ms"].as_f64().is_some(), "{report:#}");
    assert!(
        run["node_killed"].as_u64().is_some_and(|n| n < 3),
        "{run:#}"
    );
    assert!(
        run["acknowledged_writes"].as_u64().is_some_and(|n| n > 0),
        "{run:#}"
    );
    // Present, whatever their values today.
    for key in [
        "recovery_ms",
        "not_recovered",
        "acknowledged_lost",
        "errors",
        "recovery",
    ] {
        assert!(report.get(key).is_some(), "{key} missing: {report:#}");
    }
    for kind in [
        "tryagain",
        "clusterdown",
        "outcome_unknown",
        "other",
        "timeout",
    ] {
        assert!(
            report["errors"][kind].as_u64().is_some(),
            "{kind}: {report:#}"
        );
    }
    // Transaction-state and data recovery (FaRM 5.3, 5.4) are built: nothing
    // acknowledged is lost, every partition serves again, and the restarted node brings
    // the cluster back to full strength.
    assert_eq!(report["acknowledged_lost"], 0, "{report:#}");
    assert_eq!(report["not_recovered"], 0, "{report:#}");
    assert_eq!(report["not_full_strength"], 0, "{report:#}");
    assert_eq!(report["unverified"], 0, "{report:#}");
}
