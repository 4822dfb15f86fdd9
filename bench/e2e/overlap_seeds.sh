#!/usr/bin/env bash
# Training time and accuracy of gradwire configurations on emulated hosts, several seeds,
# configurations interleaved within each seed (seed 0: every configuration, then seed 1, ...)
# so that the machine's drift hits all of them alike. For the overlap of issue 25: the
# compute floor (codec none, unshaped links), the defaults and the fixed plans at 100 Mbit.
#
#   bash bench/e2e/overlap_seeds.sh OUT SEEDS CONFIG...
#   CONFIG: LABEL=BINARY,CODEC,LINK   (LINK: unlimited for the floor, else tc notation;
#           CODEC may hold commas: a layer policy such as conv=powersgd:rank=8,other=fp16)
#   HOSTS=4 MODEL=cnn EPOCHS=3 bash bench/e2e/overlap_seeds.sh out "0 1 2" \
#       floor=build/gradwire,none,unlimited auto=build/gradwire,auto,100mbit
#
# One JSON line per run in OUT/runs.jsonl (train seconds, steps, final test accuracy, the
# first evaluation at or above TARGET and its training seconds); OUT/summary.md the
# per-seed table and, per configuration, the ratio to the floor of the same seed.
# Settings are bench e2e's: batch 64 per worker, lr 0.05, momentum 0.9, one thread a rank.
set -euo pipefail
out="$1" seeds="$2"
shift 2
model="${MODEL:-cnn}" epochs="${EPOCHS:-3}" target="${TARGET:-0.88}" hosts="${HOSTS:-4}"
mkdir -p "$out"
touch "$out/runs.jsonl"
for seed in $seeds; do
  for config in "$@"; do
    label="${config%%=*}"
    spec="${config#*=}"
    bin="${spec%%,*}" link="${spec##*,}"
    codec="${spec#*,}" codec="${codec%,*}"
    metrics="$out/metrics-$label-$model-seed$seed.jsonl"
    rm -f "$metrics"
    link_flag=()
    [ "$link" = unlimited ] || link_flag=(--link-bandwidth "$link")
    "$bin" cluster --hosts "$hosts" --bandwidth "$link" --no-prefix -- \
      "$bin" train --worker --model "$model" --compressor "$codec" "${link_flag[@]}" \
      --epochs "$epochs" --batch-size 64 --lr 0.05 --momentum 0.9 --seed "$seed" \
      --threads 1 --eval-every $((60000 / (64 * hosts) / 4)) --progress none --metrics "$metrics" >"$out/log-$label-$model-seed$seed.txt" 2>&1
    /usr/bin/python3 - "$metrics" "$label" "$codec" "$link" "$model" "$seed" "$target" >>"$out/runs.jsonl" <<'PY'
import json, sys
path, label, codec, link, model, seed, target = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
evals = [r for r in rows if "test_accuracy" in r]
last = rows[-1]
hit = next((r for r in evals if r["test_accuracy"] >= float(target)), None)
summary = next((r for r in reversed(rows) if r.get("event") == "summary"), {})
print(json.dumps({"label": label, "codec": codec, "link": link, "model": model,
                  "seed": int(seed), "train_s": last["train_s"],
                  "bucket_layout": summary.get("bucket_layout", ""),
                  "steps": last.get("steps") or last.get("step"),
                  "accuracy": evals[-1]["test_accuracy"] if evals else None,
                  "target": float(target),
                  "target_s": hit["train_s"] if hit else None}))
PY
    tail -n 1 "$out/runs.jsonl"
  done
done
/usr/bin/python3 "$(dirname "$0")/overlap_summary.py" "$out/runs.jsonl" >"$out/summary.md"
cat "$out/summary.md"
