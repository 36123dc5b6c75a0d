#!/usr/bin/env bash
# Fails if a protocol crate depends, directly or through any crate, on one that does I/O
# (sockets, event loops, system calls, the OS's randomness) or on one of ferrotx's edge
# crates. Protocol code is sans-IO (ARCHITECTURE.md, "Determinism"): the simulator runs it
# unchanged. This is the dependency half of that rule; the code half is clippy's
# lints/sans-io.clippy.toml, which every protocol crate's clippy.toml links to.
#
# Only normal dependencies count: dev-dependencies (proptest, which seeds itself from the
# OS) serve tests, and build dependencies run at build time. The host target's tree is
# checked, through Cargo.lock (--locked), so the check needs nothing that `cargo build`
# has not fetched; pass --offline to run without the network.
#
# Usage: scripts/check_sans_io.sh [--offline]
set -euo pipefail
cd "$(dirname "$0")/.."

# The protocol crates. A new one is added here and gets the clippy.toml symlink.
protocol_crates=(
  ferrotx-wire
  ferrotx-buggify
  ferrotx-store
  ferrotx-rpc
  ferrotx-exec
  ferrotx-txn
  ferrotx-cluster
  ferrotx-resp
  ferrotx-redis-exec
  ferrotx-workload
  ferrotx-membership
  ferrotx-wal
)

# Crates no protocol crate may reach: system interfaces and event loops, the OS's random
# source, and ferrotx's crates at the edge (sockets, threads, processes).
banned=(
  libc
  socket2
  mio
  nix
  tokio
  getrandom
  ferrotx-transport
  ferrotx-node
  ferrotx-server
  ferrotx-coord
  ferrotx-bench
)

flags=(--locked -e normal)
if [ "${1:-}" = "--offline" ]; then
  flags+=(--offline)
fi

failed=0
for crate in "${protocol_crates[@]}"; do
  # One line per package of the crate's tree: "name vX.Y.Z".
  packages=$(cargo tree "${flags[@]}" -p "$crate" --prefix none --format '{p}' | awk '{ print $1 }' | sort -u)
  for name in "${banned[@]}"; do
    if grep -qx -- "$name" <<<"$packages"; then
      failed=1
      echo "error: protocol crate $crate depends on $name, which does I/O or belongs at the edge; the path, from $name up to $crate:"
      # The inverted tree shows through which crates it comes (every version, if several).
      for spec in $(cargo tree "${flags[@]}" -p "$crate" --prefix none --format '{p}' \
        | awk -v name="$name" '$1 == name { print $1 "@" substr($2, 2) }' | sort -u); do
        cargo tree "${flags[@]}" -p "$crate" -i "$spec" | sed 's/^/    /'
      done
    fi
  done
done

if [ "$failed" -ne 0 ]; then
  echo "Protocol crates must stay sans-IO: take time, randomness and I/O from the caller, and move the dependency to an edge crate (transport, node, server, bench)." >&2
  exit 1
fi
echo "sans-IO dependencies: ok (${#protocol_crates[@]} protocol crates, none reaches ${banned[*]})"
