#!/usr/bin/env bash
# What recording a timeline costs (ARCHITECTURE.md, "Timeline"): the same 4-worker job on
# this machine, off and on alternated ROUNDS times (off, on, off, on, ...), then the table
# (timeline_cost.py): training seconds off and on per round, the on / off ratio, and the
# trace's events and bytes.
#
#   bash bench/timeline/timeline_cost.sh GRADWIRE OUT_DIR [ROUNDS=2] [EPOCHS=1]
set -euo pipefail
gradwire=$(realpath "$1") out=$2 rounds=${3:-2} epochs=${4:-1}
mkdir -p "$out"
job=("$gradwire" train --workers 4 --model cnn --epochs "$epochs" --progress none)
for r in $(seq 1 "$rounds"); do
  "${job[@]}" --metrics "$out/off-r$r.jsonl" > "$out/off-r$r.log" 2>&1
  "${job[@]}" --metrics "$out/on-r$r.jsonl" --timeline "$out/on-r$r.trace.json" \
    > "$out/on-r$r.log" 2>&1
  # The trace's event count and size (the trace itself, MBs, need not be kept).
  /usr/bin/python3 -c 'import json, os, sys
t = json.load(open(sys.argv[1]))
print(len(t["traceEvents"] if isinstance(t, dict) else t), os.path.getsize(sys.argv[1]))' \
    "$out/on-r$r.trace.json" > "$out/on-r$r.trace.txt"
  echo "round $r done"
done
/usr/bin/python3 "$(dirname "$0")/timeline_cost.py" "$out" > "$out/results.md"
cat "$out/results.md"
