#!/bin/bash
# The "before" measurements of issue 14: run from the worktree root.
set -u
B=target/release/ferrotx
D=${1:?output directory, e.g. docs/results/hotkeys_before/set2}; mkdir -p $D
run() { # name, args...
  local name=$1; shift
  echo "=== $name: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" | tee -a $D/log.txt
  echo "\$ ferrotx bench kv $* --json $D/$name.json" > $D/$name.txt
  $B bench kv "$@" --json $D/$name.json >> $D/$name.txt 2>$D/$name.stderr
  echo "exit $?" >> $D/$name.txt
  grep -v "measuring:" $D/$name.stderr | grep -v "^$" > $D/$name.stderr.tmp; mv $D/$name.stderr.tmp $D/$name.stderr
}
for i in 1 2 3; do
  run zipf099_rmw_$i --zipf 0.99 --keys-per-txn 1 --write-share 1
  run hot1_rmw_$i --hot-keys 1 --keys-per-txn 1 --write-share 1
  run hot16_rmw_$i --hot-keys 16 --keys-per-txn 1 --write-share 1
done
echo "=== hot_incr: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" | tee -a $D/log.txt
python3 scripts/hot_incr.py --bin $B -n 100000 -c 20 --runs 3 --json $D/hot_incr.json --md $D/hot_incr.md > $D/hot_incr.txt 2>&1
echo "exit $?" >> $D/hot_incr.txt
echo "=== done: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" | tee -a $D/log.txt
