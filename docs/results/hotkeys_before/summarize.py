#!/usr/bin/env python3
"""Writes docs/results/hotkeys_before.md from the sets of measure.sh outputs given."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [("zipf099_rmw", "`bench kv --zipf 0.99 --keys-per-txn 1 --write-share 1`"),
         ("hot1_rmw", "`bench kv --hot-keys 1 --keys-per-txn 1 --write-share 1`"),
         ("hot16_rmw", "`bench kv --hot-keys 16 --keys-per-txn 1 --write-share 1`")]


def kv_table(d):
    out = ["| case | run | txn/s | abort rate | node 0 txn/s (abort rate) | node 1 | node 2 "
           "| attempts/s, node 0/1/2 | primary of keys (0/1/2) | p50 / p99 us | retrans"
           "missions | checks |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- "
           "| --- | --- | ---: | --- |"]
    for case, label in CASES:
        for i in (1, 2, 3):
            path = os.path.join(d, f"{case}_{i}.json")
            if not os.path.exists(path):
                continue
            r = json.load(open(path))
            nodes = [f"{n['throughput_per_s']:,.0f} ({n['abort_rate'] * 100:.1f}%)"
                     for n in r["nodes"]]
            keys = "/".join(str(n["primary_keys"]) for n in r["nodes"]
                            if n.get("primary_keys") is not None) or "-"
            attempts = " / ".join(
                f"{(n['committed'] + n['aborted']) / max(n['duration_s'], 1e-9):,.0f}"
                for n in r["nodes"])
            lat = r["latency_us"]
            out.append(f"| {label} | {i} | {r['throughput_per_s']:,.0f} | "
                       f"{r['abort_rate'] * 100:.1f}% | {' | '.join(nodes)} | {attempts} | "
                       f"{keys} | {lat['p50']:.0f} / {lat['p99']:.0f} | "
                       f"{r['retransmissions']:,} | "
                       f"{'passed' if r['checks']['ok'] else 'FAILED'} |")
    return out


def main():
    lines = [
        "# Hot keys before issue 14: raw figures",
        "",
        "The \"before\" figures of issue 14 (contention on hot keys), measured on branch "
        "`hotkeys` with the commit named in each set (the transaction code as it was: "
        "only the benchmark tooling changed). Written by "
        "`python3 docs/results/hotkeys_before/summarize.py SET...` from the outputs of "
        "`docs/results/hotkeys_before/measure.sh SET`, which runs, from the worktree root, "
        "after `cargo build --release -p ferrotx`:",
        "",
        "```sh",
        "for i in 1 2 3; do",
        "  ferrotx bench kv --zipf 0.99 --keys-per-txn 1 --write-share 1 --json SET/zipf099_rmw_$i.json",
        "  ferrotx bench kv --hot-keys 1 --keys-per-txn 1 --write-share 1 --json SET/hot1_rmw_$i.json",
        "  ferrotx bench kv --hot-keys 16 --keys-per-txn 1 --write-share 1 --json SET/hot16_rmw_$i.json",
        "done",
        "python3 scripts/hot_incr.py --bin target/release/ferrotx -n 100000 -c 20 --runs 3 "
        "--json SET/hot_incr.json --md SET/hot_incr.md",
        "```",
        "",
        "bench kv: 3 node processes of 1 worker thread, 3 replicas, 20 client coroutines on "
        "every node, 5 s measured after 0.5 s of warm-up; an aborted transaction is not "
        "retried (each attempt is a transaction), so the abort rate is aborted attempts / "
        "attempts. Per node: the commits per second of the clients on that node and their "
        "abort rate. The machine is a shared 2-core VM; the load average (from log.txt) "
        "is the other engineers' builds and tests as much as ours: compare within a set.",
        "",
    ]
    notes = os.path.join(HERE, "notes.md")
    if os.path.exists(notes):
        lines += [open(notes).read().strip(), ""]
    for d in sys.argv[1:]:
        name = os.path.basename(os.path.normpath(d))
        log = open(os.path.join(d, "log.txt")).read().strip().splitlines()
        commit = "?"
        hi = os.path.join(d, "hot_incr.json")
        if os.path.exists(hi):
            commit = json.load(open(hi))["machine"].get("ferrotx_commit", "?")
        lines += [f"## Set {name}", "", f"ferrotx {commit}. Load average (1, 5, 15 min) "
                  "as each step started:", "", "```", *log, "```", "", *kv_table(d), ""]
        md = os.path.join(d, "hot_incr.md")
        if os.path.exists(md):
            text = open(md).read().split("\n", 2)[2].strip()
            lines += ["### scripts/hot_incr.py", "", text, ""]
        lines += ["### Raw output of bench kv", ""]
        for case, _ in CASES:
            for i in (1, 2, 3):
                path = os.path.join(d, f"{case}_{i}.txt")
                if os.path.exists(path):
                    lines += ["```", open(path).read().strip(), "```", ""]
    with open(os.path.join(HERE, "..", "hotkeys_before.md"), "w") as f:
        f.write("\n".join(lines))


main()
