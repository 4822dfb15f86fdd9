#!/usr/bin/env bash
# Issue 45: DiLoCo's new defaults on loopback against allreduce none, cnn, 4 workers, 2 epochs.
set -euo pipefail
cd "$(dirname "$0")"
gw=${GRADWIRE:-../../../build/gradwire}
for seed in 0 1 2; do
  "$gw" train --workers 4 --epochs 2 --seed $seed --strategy diloco --progress none \
    --metrics diloco-s$seed.jsonl > diloco-s$seed.log 2>&1
  "$gw" train --workers 4 --epochs 2 --seed $seed --compressor none --progress none \
    --metrics none-s$seed.jsonl > none-s$seed.log 2>&1
done
grep -H "summary:" diloco-s*.log none-s*.log > summary.log
