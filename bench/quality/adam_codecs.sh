#!/usr/bin/env bash
# Which codecs train gpt with AdamW as well as none does: every codec of the list on the
# same run (4 workers over loopback, gpt's recipe, 1 epoch of 12288 windows = 384 steps of
# 4 x 8 windows of 128 bytes), each seed in turn (codecs interleaved within a seed). Only
# the validation loss per step matters here, not time: loopback is not a slow link.
#
#   bash bench/quality/adam_codecs.sh OUT SEEDS CODEC...
#   bash bench/quality/adam_codecs.sh docs/results/gpt-adamw-codecs 3 none fp16 int8 \
#       powersgd:rank=4 powersgd:rank=16 topk:density=0.01 2bit signsgd
#
# A CODEC of the form diloco:inner_steps=H,fragments=F,delay=TAU/OUTER_CODEC runs strategy
# diloco with those flags (the keys as in `gradwire bench e2e --configs`; outer codec none
# when left out), against allreduce's none of the same seed.
#
# Writes OUT/runs/<codec>-seed<S>.jsonl (the metrics), adds the command to OUT/command.txt
# (a run already finished is kept: invocations add codecs or seeds); then
# bench/quality/adam_codecs_table.py OUT prints the table (OUT/results.md).
set -euo pipefail
out="$1"; seeds="$2"; shift 2
here="$(cd "$(dirname "$0")/../.." && pwd)"
gradwire="${GRADWIRE:-$here/build/gradwire}"
mkdir -p "$out/runs"
echo "bash bench/quality/adam_codecs.sh $out $seeds $*" >> "$out/command.txt"  # every invocation
for ((seed = 0; seed < seeds; ++seed)); do
  for codec in "$@"; do
    name="$(echo "$codec" | tr ':=,/' '----')-seed$seed"
    [ -s "$out/runs/$name.jsonl" ] && grep -q '"summary"' "$out/runs/$name.jsonl" && continue
    echo "$(date -u +%H:%M:%S) $codec seed $seed"
    flags=(--compressor "$codec")
    if [[ "$codec" == diloco* ]]; then
      spec="${codec%%/*}"; outer=none; [[ "$codec" == */* ]] && outer="${codec#*/}"
      flags=(--strategy diloco --compressor "$outer")
      params="${spec#diloco}"; params="${params#:}"
      IFS=',' read -ra pairs <<< "$params"
      for pair in "${pairs[@]}"; do
        case "${pair%%=*}" in
          inner_steps) flags+=(--inner-steps "${pair#*=}") ;;
          fragments) flags+=(--fragments "${pair#*=}") ;;
          delay) flags+=(--fragment-delay "${pair#*=}") ;;
          outer_lr) flags+=(--outer-lr "${pair#*=}") ;;
          outer_momentum) flags+=(--outer-momentum "${pair#*=}") ;;
          *) echo "adam_codecs.sh: unknown diloco key in '$codec'" >&2; exit 2 ;;
        esac
      done
    fi
    "$gradwire" train --model gpt --workers 4 --epochs 1 --train-limit 12288 --batch-size 8 \
      --eval-every 32 "${flags[@]}" --bucket-layout fixed --seed "$seed" \
      --progress none --metrics "$out/runs/$name.jsonl" > "$out/runs/$name.log" 2>&1
  done
done
