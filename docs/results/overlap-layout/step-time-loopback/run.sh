#!/usr/bin/env bash
# Step time on loopback, 4 workers, codec none, one thread a rank: e99f2e0 (before issue 25)
# against this build with the measured layout and with --bucket-layout fixed, interleaved
# round by round. One line per run in OUT: round config ms/step.
#   MODEL=cnn ROUNDS="1 2 3" BEFORE=e99f2e0/gradwire AFTER=build/gradwire bash run.sh OUT
set -u
out="$1"
common=(--workers 4 --model "${MODEL:-cnn}" --compressor none --epochs 1 --batch-size 64
        --threads 1 --train-limit 25600 --test-limit 500 --eval-every 100000 --progress none
        --seed 0)
for r in ${ROUNDS:-1 2 3}; do
  for cfg in before:$BEFORE: fixed:$AFTER:fixed meas:$AFTER:; do
    IFS=: read -r label bin layout <<<"$cfg"
    m=$(mktemp /tmp/lb_XXXX.jsonl)
    $bin train "${common[@]}" ${layout:+--bucket-layout $layout} --metrics "$m" >/dev/null 2>&1
    python3 -c "import json;l=[json.loads(x) for x in open('$m')][-1];print('$r $label', round(1000*l['train_s']/l['steps'],1))" >>"$out"
    rm -f "$m"
  done
done
