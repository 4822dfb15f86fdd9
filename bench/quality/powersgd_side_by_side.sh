#!/usr/bin/env bash
# gradwire's PowerSGD beside DDP's powerSGD_hook on gpt, 4 ranks on loopback, step by
# step on the same gradients along the exact run (hook_side_by_side.py), at rank 16 with
# 2 dense steps and min_compression_rate 2; once per build given (a label and the folder
# of its Python module), then the table (hook_side_by_side_table.py).
#
#   bash bench/quality/powersgd_side_by_side.sh OUT_DIR STEPS LABEL=PYTHONPATH...
# e.g. bash bench/quality/powersgd_side_by_side.sh /tmp/sbs 384 "before=/tmp/old/python" \
#        "after=build/python"
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: powersgd_side_by_side.sh OUT_DIR STEPS LABEL=PYTHONPATH...}
steps=${2:?steps}
shift 2
mkdir -p "$out"
weights=$(mktemp /tmp/gpt-weights-XXXXXX.bin)
trap 'rm -f "$weights"' EXIT
./build/gradwire train --model gpt --seed 0 --save-initial-weights "$weights" > /dev/null
hooks=(torch:powersgd:rank=16,start=2,min_rate=2 gradwire:powersgd:rank=16,start=2,min_rate=2)
: > "$out/command.txt"
for build in "$@"; do
  label=${build%%=*}
  module=${build#*=}
  slug=${label//[^A-Za-z0-9.]/-}
  echo "PYTHONPATH=$module ./build/gradwire run -n 4 -- /usr/bin/python3 bench/quality/hook_side_by_side.py --model gpt --initial-weights W.bin --steps $steps --label \"$label\" --out $slug --hooks ${hooks[*]}" >> "$out/command.txt"
  rm -rf "${out:?}/$slug"
  PYTHONPATH=$module ./build/gradwire run -n 4 -- /usr/bin/python3 \
    bench/quality/hook_side_by_side.py --model gpt --initial-weights "$weights" \
    --steps "$steps" --label "$label" --out "$out/$slug" --hooks "${hooks[@]}" \
    > "$out/$slug.log" 2>&1 || { tail -20 "$out/$slug.log"; exit 1; }
  rm "$out/$slug.log"  # its step lines, which steps.jsonl holds
done
echo "W.bin: ./build/gradwire train --model gpt --seed 0 --save-initial-weights W.bin" >> "$out/command.txt"
/usr/bin/python3 bench/quality/hook_side_by_side_table.py "$out" --windows 0,2,10,50,200,$steps \
  | tee "$out/results.md"
