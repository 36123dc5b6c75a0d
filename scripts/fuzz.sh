#!/usr/bin/env bash
# A fuzzing campaign: runs every cargo-fuzz target (or those named) for SECONDS each, one
# after the other, then prints per target libFuzzer's executions, coverage (`cov:`, the
# edges reached) and features (`ft:`), the corpus size and the crashes found.
#
# Usage: scripts/fuzz.sh [--update-corpus] [--keep-going] [--cpu] [--timeout S] SECONDS [TARGET...]
#   scripts/fuzz.sh 600                        ten minutes per target
#   scripts/fuzz.sh --cpu 3600 redis_session   one CPU-hour on one target
#
# SECONDS is wall time (libFuzzer's -max_total_time), which a busy machine stretches: a
# campaign of 3,900 s next to builds got 42 CPU-minutes. With --cpu, SECONDS is the CPU
# time of the fuzzing process instead: a watcher interrupts it (SIGINT: libFuzzer prints
# its final figures and stops) once /proc says it has used that much.
#
# Each target starts from its committed corpus (fuzz/corpus/<target>) and its regression
# inputs (fuzz/regressions/<target>); new inputs go to fuzz/target/fuzz-work/<target>
# (ignored by git). With --update-corpus, they are added to fuzz/corpus/<target>, which
# is then minimised (`cargo fuzz cmin`, keeping every edge) and given its seed inputs
# again (`--example fuzz_seeds`): commit the result. With --keep-going, libFuzzer
# runs in fork mode and carries on past crashes, timeouts and out-of-memory inputs
# (otherwise a target stops at its first crash). Crashes land in fuzz/artifacts/<target>/;
# minimise one with `cargo fuzz tmin <target> <file>` and commit it under
# fuzz/regressions/<target>/ (fuzz/README.md).
#
# --timeout S (default 10) is libFuzzer's limit on one input, in wall time: a campaign
# paused with SIGSTOP (to free the cores for a benchmark) reports a false timeout on
# resuming after more than S seconds, so raise it for a campaign that will be paused.
# Running the fuzzers under SCHED_IDLE (`chrt -i 0`) instead does not work here: node
# processes that poll with sched_yield hand their cores to them (TATP fell to a third).
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and runs it with RUSTC_BOOTSTRAP=1: its
# sanitizer flags are nightly-only. Logs: fuzz/target/fuzz-logs/<target>.log.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../fuzz"

update_corpus=0
keep_going=0
cpu=0
timeout=10
while [ $# -gt 0 ]; do
  case "$1" in
    --update-corpus) update_corpus=1; shift ;;
    --keep-going) keep_going=1; shift ;;
    --cpu) cpu=1; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,32p' "$self"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [--update-corpus] [--keep-going] [--cpu] [--timeout S] SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift

export RUSTC_BOOTSTRAP=1
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

echo "== building ${#targets[@]} targets"
cargo fuzz build -O

mkdir -p target/fuzz-logs
summary=()
reseed=0
for target in "${targets[@]}"; do
  work=target/fuzz-work/$target
  log=target/fuzz-logs/$target.log
  mkdir -p "$work" "corpus/$target" "artifacts/$target"
  inputs=("$work" "corpus/$target")
  [ -d "regressions/$target" ] && inputs+=("regressions/$target")
  wall=$seconds
  # With --cpu, the wall-time limit is only a backstop (ten times the CPU asked).
  [ $cpu = 1 ] && wall=$((seconds * 10))
  flags=(-max_total_time="$wall" -timeout="$timeout" -print_final_stats=1)
  if [ $keep_going = 1 ]; then
    flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  echo "== $target: ${seconds}s (log: fuzz/$log)"
  status=0
  watcher=
  if [ $cpu = 1 ]; then
    # Every 5 s: the CPU time of the fuzzing processes alive (in fork mode, children that
    # ended are not counted, so the campaign runs longer than asked); SIGINT to them once
    # it reaches SECONDS.
    (
      tick=$(getconf CLK_TCK)
      while sleep 5; do
        pids=$(pgrep -f "release/$target -artifact_prefix" || true)
        [ -z "$pids" ] && continue
        used=0
        for pid in $pids; do
          t=$(awk -v tick="$tick" '{ print int(($14 + $15) / tick) }' "/proc/$pid/stat" 2>/dev/null || echo 0)
          used=$((used + t))
        done
        if [ "$used" -ge "$seconds" ]; then
          kill -INT $pids 2>/dev/null || true
          break
        fi
      done
    ) &
    watcher=$!
  fi
  cargo fuzz run -O "$target" "${inputs[@]}" -- "${flags[@]}" >"$log" 2>&1 || status=$?
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null || true
  # libFuzzer's status lines look like "#123456  DONE  cov: 2045 ft: 9871 corp: 312/40Kb
  # ... exec/s: 1234 ..." (fork mode: "#123456: cov: 2045 ft: 9871 corp: 312 exec/s:
  # ..."): the last one holds the totals.
  last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -n 1 || true)
  execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")
  cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | awk '{ print $2 }')
  ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | awk '{ print $2 }')
  rate=$(grep -oE 'exec/s: [0-9]+' <<<"$last" | awk '{ print $2 }')
  crashes=$(find "artifacts/$target" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  result=ok
  # An interrupt is how --cpu ends a run (libFuzzer exits 72 on SIGINT, cargo fuzz then 1).
  if [ "$status" != 0 ] && ! { [ $cpu = 1 ] && grep -q "libFuzzer: run interrupted" "$log"; }; then
    result="stopped (status $status): see fuzz/$log"
  fi
  if [ $update_corpus = 1 ]; then
    cp -n "$work"/* "corpus/$target"/ 2>/dev/null || true
    # Edges only (no hit counts), covered by as few inputs as libFuzzer finds: the corpus
    # keeps every edge reached (`cov:`) in a few hundred files, not every feature (`ft:`).
    cargo fuzz cmin -O "$target" "corpus/$target" -- -use_counters=0 -set_cover_merge=1 >>"$log" 2>&1
    reseed=1
  fi
  corpus=$(find "corpus/$target" -maxdepth 1 -type f | wc -l)
  line=$(printf '%-14s %9s execs %7s exec/s  cov %6s  ft %7s  corpus %5s  crashes %3s  %s' \
    "$target" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes" "$result")
  echo "$line"
  summary+=("$line")
done

if [ $reseed = 1 ]; then
  # cmin renames every file after its hash: write the named seeds back.
  (cd .. && cargo run -q -p ferrotx-fuzz-support --example fuzz_seeds >/dev/null)
fi

echo "== summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
