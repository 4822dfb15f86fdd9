#!/usr/bin/env bash
# int8's two allreduce paths at 2, 4 and 8 ranks (issue 46): the shared-scale ring
# (floor(127 / W) levels per sign) against the reduce-scatter (127 at any W,
# ALGORITHMS.md 2.7). On loopback, the Fashion-MNIST CNN:
#  1. training: `gradwire train --workers W --epochs EPOCHS --compressor int8
#     --quantized-path PATH`, and fp32 (`--compressor none`) as the reference, seeds in
#     rounds (every W and path once per seed);
#  2. the aggregate's error against the exact mean, step by step on the same gradients
#     (hook_side_by_side.py, gradwire's DDP hook with int8 on either path, with and
#     without error feedback);
# then the tables (int8_paths_table.py, hook_side_by_side_table.py).
#
#   bash bench/quality/int8_paths.sh OUT_DIR [EPOCHS] [SEEDS] [WORLDS]
#
# A training run that finished (its metrics end in a summary) and a world's aggregates
# already measured are kept, so an interrupted invocation resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: int8_paths.sh OUT_DIR [EPOCHS] [SEEDS] [WORLDS]}
epochs=${2:-3}
seeds=${3:-3}
worlds=${4:-"2 4 8"}
mkdir -p "$out/train" "$out/steps"
cat > "$out/command.txt" <<TEXT
bash bench/quality/int8_paths.sh $out $epochs $seeds "$worlds"
  training: ./build/gradwire train --workers W --epochs $epochs --compressor int8 --quantized-path PATH --seed S --progress none --metrics train/int8-PATH-wW-seedS.jsonl (W: $worlds; PATH: ring, reduce-scatter; seeds 0-$((seeds - 1)) in rounds), and the reference --compressor none (train/none-wW-seedS.jsonl)
  aggregates: PYTHONPATH=build/python ./build/gradwire run -n W -- /usr/bin/python3 bench/quality/hook_side_by_side.py --model cnn --steps 200 --label "W ranks" --out steps/wW --hooks gradwire:int8+ring gradwire:int8+reduce-scatter gradwire:int8:ef=0+ring gradwire:int8:ef=0+reduce-scatter
TEXT
for ((s = 0; s < seeds; ++s)); do
  for w in $worlds; do
    for path in none ring reduce-scatter; do
      codec=(--compressor int8 --quantized-path "$path") name="int8-$path"
      [ "$path" = none ] && codec=(--compressor none) name=none  # fp32: the reference
      metrics="$out/train/$name-w$w-seed$s.jsonl"
      [ -s "$metrics" ] && grep -q '"summary"' "$metrics" && continue  # finished: kept
      echo "== seed $s, $w ranks: $name"
      ./build/gradwire train --workers "$w" --epochs "$epochs" "${codec[@]}" \
        --seed "$s" --progress none \
        --metrics "$metrics" 2>&1 | grep -E "summary|error" || true
    done
  done
done
for w in $worlds; do
  [ -s "$out/steps/w$w/steps.jsonl" ] && continue  # measured: kept (remove it to measure again)
  echo "== aggregates, $w ranks"
  rm -rf "$out/steps/w$w"
  PYTHONPATH=build/python ./build/gradwire run -n "$w" -- /usr/bin/python3 \
    bench/quality/hook_side_by_side.py --model cnn --steps 200 --label "$w ranks" \
    --out "$out/steps/w$w" --hooks gradwire:int8+ring gradwire:int8+reduce-scatter \
    gradwire:int8:ef=0+ring gradwire:int8:ef=0+reduce-scatter > "$out/steps/w$w.log" 2>&1 ||
    { tail -20 "$out/steps/w$w.log"; exit 1; }
  rm "$out/steps/w$w.log"  # its step lines, which steps.jsonl holds
done
/usr/bin/python3 bench/quality/int8_paths_table.py "$out" | tee "$out/results.md"
