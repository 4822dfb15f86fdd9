#!/usr/bin/env bash
# Step time of two gradwire binaries, A and B, side by side, for both reference models:
# 4 workers on loopback and on 4 emulated hosts (`gradwire cluster`, root), models cnn and
# cnn-wide, rounds interleaved (A B A B ...) so that the machine's drift hits both. Unlike
# step_time_ab.sh (cnn, any train arguments, a printed table) it fixes the codec per link
# and keeps every run as JSON. One JSONL line per run in
# OUT/runs.jsonl; OUT/summary.md the per-step means and the ratio B / A per round.
#
#   bash bench/e2e/step_time_models_ab.sh A_BINARY B_BINARY OUT [ROUNDS] [STEPS]
#   MODELS="cnn" bash bench/e2e/step_time_models_ab.sh ...   (default: cnn cnn-wide)
#
# Each run is one epoch of STEPS steps per worker (batch 64, --train-limit 256 x STEPS),
# codec `none` on loopback and `int8` at 100 Mbit (what auto ends on there), one thread per
# rank; the step time is the run's training seconds over its steps.
set -euo pipefail
a="$1" b="$2" out="$3" rounds="${4:-3}" steps="${5:-100}"
mkdir -p "$out"
: >"$out/runs.jsonl"
limit=$((256 * steps))
common=(--epochs 1 --batch-size 64 --threads 1 --train-limit "$limit" --test-limit 500
        --eval-every 100000 --progress none --seed 0)

run_one() {  # label binary model link codec
  local label="$1" bin="$2" model="$3" link="$4" codec="$5" metrics
  metrics="$(mktemp /tmp/step_ab_XXXX.jsonl)"
  if [ "$link" = loopback ]; then
    "$bin" train --workers 4 --model "$model" --compressor "$codec" "${common[@]}" \
      --metrics "$metrics" >/dev/null
  else
    "$bin" cluster --hosts 4 --bandwidth "$link" --no-prefix -- \
      "$bin" train --worker --model "$model" --compressor "$codec" --link-bandwidth "$link" \
      "${common[@]}" --metrics "$metrics" >/dev/null
  fi
  python3 - "$metrics" "$label" "$model" "$link" "$codec" "$round" >>"$out/runs.jsonl" <<'PY'
import json, sys
path, label, model, link, codec, rnd = sys.argv[1:]
last = [json.loads(l) for l in open(path) if l.strip()][-1]
steps = last.get("steps") or last.get("step")
print(json.dumps({"binary": label, "model": model, "link": link, "codec": codec,
                  "round": int(rnd), "steps": steps, "train_s": last["train_s"],
                  "step_ms": 1000 * last["train_s"] / steps}))
PY
  rm -f "$metrics"
}

for round in $(seq 1 "$rounds"); do
  for model in ${MODELS:-cnn cnn-wide}; do
    for link in loopback 100mbit; do
      codec=none
      [ "$link" = loopback ] || codec=int8
      run_one A "$a" "$model" "$link" "$codec"
      run_one B "$b" "$model" "$link" "$codec"
      tail -n 2 "$out/runs.jsonl"
    done
  done
done

/usr/bin/python3 "$(dirname "$0")/step_time_summary.py" "$out/runs.jsonl" >"$out/summary.md"
cat "$out/summary.md"
