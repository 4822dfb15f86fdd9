#!/usr/bin/env bash
# Step time of two gradwire builds, A and B, side by side: 4 workers of the reference CNN,
# one compute thread each, on loopback (`gradwire train --workers 4`) and on an emulated
# cluster of 4 hosts at 100 Mbit (`gradwire cluster`, root). Runs alternate A, B, A, B...
# so that both see the same machine; each prints the mean step time (train_s / steps).
#
#   bench/e2e/step_time_ab.sh OLD_GRADWIRE NEW_GRADWIRE OUT_DIR [REPEATS] [CONFIGS...]
#
# CONFIGS are gradwire train arguments, e.g. "--compressor none" (the default set below).
set -euo pipefail
a="$1" b="$2" out="$3" repeats="${4:-2}"
shift $(( $# < 4 ? $# : 4 ))
configs=("$@")
if [ ${#configs[@]} -eq 0 ]; then
  configs=("--compressor none" "--compressor none --bucket-mb 0.01"
           "--compressor topk:density=0.01 --bucket-mb 0.01")
fi
mkdir -p "$out"
common=(--model cnn --epochs 1 --batch-size 64 --train-limit 15360 --test-limit 500
        --progress none)

step_ms() {  # metrics file -> mean step time in ms
  /usr/bin/python3 -c 'import json,sys
s=[json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]
print("%.2f" % (1000 * s["train_s"] / s["steps"]))' "$1"
}

printf "%-12s %-55s %10s %10s\n" link config "A ms/step" "B ms/step"
for link in loopback 100mbit; do
  for config in "${configs[@]}"; do
    for r in $(seq 1 "$repeats"); do
      declare -A ms=()
      for side in A B; do
        bin="$a"; [ "$side" = B ] && bin="$b"
        metrics="$out/${link}-${side}-${r}-$(echo "$config" | tr -c 'a-z0-9' '_').jsonl"
        # shellcheck disable=SC2086
        if [ "$link" = loopback ]; then
          "$bin" train --workers 4 --threads 1 "${common[@]}" $config --metrics "$metrics" \
            >/dev/null
        else
          "$bin" cluster --hosts 4 --bandwidth 100mbit -- "$bin" train --worker --threads 1 \
            "${common[@]}" $config --metrics "$metrics" >/dev/null
        fi
        ms[$side]="$(step_ms "$metrics")"
      done
      printf "%-12s %-55s %10s %10s\n" "$link" "$config" "${ms[A]}" "${ms[B]}"
    done
  done
done
