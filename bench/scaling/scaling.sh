#!/usr/bin/env bash
# The scaling table of docs/SCALING.md: `gradwire bench exchange` on the emulated cluster at
# 2, 4, 8 and 16 hosts (one rank each, every link shaped to RATE), then the alpha-beta fit
# and the predictions up to 1,024 ranks (fit_scaling.py). Root only (network namespaces).
#
#   bash bench/scaling/scaling.sh [OUT_DIR] [RATE] [EXCHANGE ARGS...]
# e.g. bash bench/scaling/scaling.sh /tmp/scaling 100mbit --elements 262144 --density 0.01
#      WORLDS="2 4 8" bash bench/scaling/scaling.sh /tmp/q 100mbit --quantized int8,fp16,bf16,int4 \
#        --elements 842496 --steps 5   (each codec's two dense paths, gpt's gradient size)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/gradwire-scaling}
rate=${2:-100mbit}
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$out"
worlds=${WORLDS:-"2 4 8 16"}
for w in $worlds; do
  echo "== $w hosts at $rate"
  timeout 900 ./build/gradwire cluster --hosts "$w" --bandwidth "$rate" --no-prefix \
    --master-port 29611 -- ./build/gradwire bench exchange "$@" | tee "$out/world-$w.jsonl"
done
/usr/bin/python3 bench/scaling/fit_scaling.py --rate "$rate" --out "$out" "$out"/world-*.jsonl
