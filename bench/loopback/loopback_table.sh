#!/usr/bin/env bash
# The loopback table of docs/HEADLINE.md: `gradwire train` with 4 local workers on this machine (no link
# limit), the Fashion-MNIST CNN, for each codec and seed, seeds in rounds (every codec once
# per seed before the next seed), then the table from the metrics (loopback_table.py).
#
#   bash bench/loopback/loopback_table.sh OUT_DIR [EPOCHS] [SEEDS] [CODEC...]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: loopback_table.sh OUT_DIR [EPOCHS] [SEEDS] [CODEC...]}
epochs=${2:-3}
seeds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
codecs=("$@")
[ ${#codecs[@]} -gt 0 ] || codecs=(none fp16 int8 auto topk:density=0.01 2bit)
mkdir -p "$out"
echo "./build/gradwire train --workers 4 --epochs $epochs --compressor CODEC --seed S" \
  "--progress none --metrics $out/SLUG-seedS.jsonl (SLUG: CODEC with - for : = ,); codecs: ${codecs[*]}; seeds 0-$((seeds - 1))" \
  > "$out/command.txt"
for ((s = 0; s < seeds; ++s)); do
  for c in "${codecs[@]}"; do
    echo "== seed $s: $c"
    ./build/gradwire train --workers 4 --epochs "$epochs" --compressor "$c" --seed "$s" \
      --progress none --metrics "$out/${c//[^A-Za-z0-9.]/-}-seed$s.jsonl" 2>&1 |
      grep -E "summary|error" || true
  done
done
/usr/bin/python3 bench/loopback/loopback_table.py "$out" "${codecs[@]}" | tee "$out/results.md"
