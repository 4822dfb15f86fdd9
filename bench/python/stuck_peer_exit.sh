#!/usr/bin/env bash
# How long a rank whose peer is stuck (alive, asleep) takes to raise and then to exit, for
# the DDP hook and DiLoCo: tests/python/rank_job.py on 2 ranks over loopback, rank 1 asleep
# for SLEEP s before its step 3, GRADWIRE_TIMEOUT=TIMEOUT. One line per run: the mode, the
# seconds from rank 1 falling asleep to rank 0 raising, from raising to rank 0's process
# being gone, and rank 0's exit code (1: the uncaught exception; a signal shows negative).
# Usage: bench/python/stuck_peer_exit.sh [RUNS] [TIMEOUT] [SLEEP]   (PYTHONPATH=build/python)
set -euo pipefail
runs=${1:-3} timeout=${2:-4} sleep_s=${3:-40}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/gradwire-stuck-peer.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "mode run raised_after_s exited_after_raise_s exit_code (timeout ${timeout} s, peer asleep ${sleep_s} s)"
for run in $(seq 1 "$runs"); do
  for mode in ddp diloco; do
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    for rank in 0 1; do
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank WORLD_SIZE=2 GLOO_SOCKET_IFNAME=lo \
        OMP_NUM_THREADS=1 GRADWIRE_TIMEOUT=$timeout \
        /usr/bin/python3 "$here/tests/python/rank_job.py" "$mode" 1 "$sleep_s" \
        > "$work/$mode.$rank.out" 2> "$work/$mode.$rank.err" &
      eval "pid$rank=\$!"
    done
    set +e
    wait "$pid0"
    code=$?
    set -e
    gone=$(/usr/bin/python3 -c 'import time; print("%.3f" % time.monotonic())')
    kill "$pid1" 2> /dev/null || true
    wait "$pid1" 2> /dev/null || true
    asleep=$(awk '/^sleeping/ {print $2}' "$work/$mode.1.out")
    raised=$(awk '/^raised/ {print $2}' "$work/$mode.0.out")
    awk -v m="$mode" -v r="$run" -v a="$asleep" -v s="$raised" -v g="$gone" -v c="$code" \
      'BEGIN { printf "%s %d %.2f %.2f %d\n", m, r, s - a, g - s, c }'
    grep -h "^raised" "$work/$mode.0.out" | cut -c1-200 >&2
  done
done
