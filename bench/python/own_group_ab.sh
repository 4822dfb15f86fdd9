#!/usr/bin/env bash
# A/B of where gradwire's DDP hook exchanges: over DDP's process group (a build of the tree
# before issue 61, OLD) against over a Gloo group of its own (NEW), on loopback, 2 ranks,
# with bench/python/hook_cost.py (backward's time per step, DDP's own allreduce and the
# compute floor beside). The two builds alternate round by round, OLD first in odd rounds
# and NEW first in even ones; each appends to OUT/<build>/runs.jsonl, round numbers
# rewritten to the A/B's. own_group_ab.py makes the table.
# Usage: bench/python/own_group_ab.sh OLD_PYTHONPATH NEW_PYTHONPATH GRADWIRE_BINARY OUT [ROUNDS [STEPS]]
set -euo pipefail
old=$1 new=$2 gradwire=$3 out=$4 rounds=${5:-5} steps=${6:-40}
here=$(cd "$(dirname "$0")/../.." && pwd)
configs=floor,ddp:allreduce,ddp:gradwire-none,ddp:gradwire-int8
mkdir -p "$out/old" "$out/new"
for round in $(seq 1 "$rounds"); do
  order="old new"
  [ $((round % 2)) -eq 0 ] && order="new old"
  for build in $order; do
    path=$old
    [ "$build" = new ] && path=$new
    tmp=$(mktemp -d)
    PYTHONPATH=$path "$gradwire" run -n 2 -- /usr/bin/python3 "$here/bench/python/hook_cost.py" \
      --out "$tmp" --rounds 1 --steps "$steps" --models cnn,mlp-wide --configs "$configs" > /dev/null
    sed "s/\"round\": 0/\"round\": $round/" "$tmp/runs.jsonl" >> "$out/$build/runs.jsonl"
    rm -rf "$tmp"
    echo "round $round $build done" >&2
  done
done
