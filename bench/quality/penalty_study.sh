#!/usr/bin/env bash
# The steps each of auto's plans needs to reach a model's target, against none's (issue 46):
# auto scores a plan that compresses (powersgd) as step_ms x (1 + penalty), so the penalty
# that makes its score the time to the target is  steps_powersgd / steps_none - 1.
# Steps do not depend on the link, so this runs over loopback, 4 workers, every model with
# its e2e recipe and targets:
#   cnn, cnn-wide: SGD, 3 epochs, batch 64 (705 steps), accuracy 88%; powersgd at rank 8
#   gpt:           AdamW, 1 epoch of 12288 windows, batch 8, loss 1.93; powersgd at rank 16
# Plans (PLANS, default "none powersgd"; int8 may be added: it is not charged; powersgd8
# is powersgd at auto's default rank 8 on every model; powersgd-start2 is powersgd dense for
# the first 2 steps only, DDP's hook's start in the e2e baseline and auto's dense start
# since issue 62): none, and powersgd as auto ran it before issue 62
# (codec_plan.cc: powersgd:min_rate=2,rank=R) from the step auto could first run it before
# issue 62: auto then ran no compressing plan in a critical regime, and its detector called
# windows 0 and 1 critical (regime_detector.h, window 50 steps), so PowerSGD's earliest step
# was 100: plan powersgd sends the first 100 steps dense (key start=100, the codec's
# DDP-style dense start). Since issue 62 auto's dense start is 2 steps: plan
# powersgd-start2. PowerSGD from
# step 0, which auto never runs, stalled gpt on its 2.4 plateau in one seed of two
# (docs/results/auto-penalty, runs/*-powersgd-from0-*). The bucket layout is fixed (a
# fixed codec repeats bit for bit), an evaluation every 32 steps (crossings interpolated).
# Seeds in rounds, models and plans interleaved within a seed; a run already finished is
# kept, so an invocation can add seeds.
#
#   bash bench/quality/penalty_study.sh OUT FIRST_SEED SEEDS [MODEL ...]
#   bash bench/quality/penalty_study.sh docs/results/auto-penalty 100 3 cnn cnn-wide gpt
#
# Writes OUT/runs/<model>-<plan>-seed<S>.jsonl and .log, appends the command to
# OUT/command.txt; bench/quality/penalty_table.py OUT prints the table (OUT/results.md).
set -euo pipefail
out="$1"; first="$2"; seeds="$3"; shift 3
models=("$@"); [ ${#models[@]} -gt 0 ] || models=(cnn cnn-wide gpt)
powersgd_start=100  # auto's two critical windows of 50 steps: see above
here="$(cd "$(dirname "$0")/../.." && pwd)"
gradwire="${GRADWIRE:-$here/build/gradwire}"
mkdir -p "$out/runs"
echo "${PLANS:+PLANS=\"$PLANS\" }bash bench/quality/penalty_study.sh $out $first $seeds ${models[*]}" >> "$out/command.txt"
for ((seed = first; seed < first + seeds; ++seed)); do
  for model in "${models[@]}"; do
    case "$model" in
      gpt) rank=16; recipe=(--epochs 1 --train-limit 12288 --batch-size 8) ;;
      cnn | cnn-wide) rank=8; recipe=(--epochs 3 --batch-size 64) ;;
      *) echo "penalty_study.sh: no recipe for model '$model'" >&2; exit 2 ;;
    esac
    for plan in ${PLANS:-none powersgd}; do
      case "$plan" in
        powersgd) codec="powersgd:min_rate=2,rank=$rank,start=$powersgd_start" ;;
        powersgd8) codec="powersgd:min_rate=2,rank=8,start=$powersgd_start" ;;
        powersgd-start2) codec="powersgd:min_rate=2,rank=$rank,start=2" ;;
        *) codec="$plan" ;;
      esac
      name="$model-$plan-seed$seed"
      [ -s "$out/runs/$name.jsonl" ] && grep -q '"summary"' "$out/runs/$name.jsonl" && continue
      echo "$(date -u +%H:%M:%S) $model $codec seed $seed"
      "$gradwire" train --model "$model" --workers 4 "${recipe[@]}" --eval-every 32 \
        --compressor "$codec" --bucket-layout fixed --seed "$seed" --progress none \
        --metrics "$out/runs/$name.jsonl" > "$out/runs/$name.log" 2>&1
    done
  done
done
