#!/usr/bin/env bash
# The Python examples as a user runs them, under `gradwire run` on 2 ranks, briefly: the DDP
# hook one trains an epoch of 2,048 Fashion-MNIST samples with int8, then resumes from its
# checkpoint for a second epoch; the DiLoCo one runs 60 steps (3 rounds) on the King James
# text. Each must finish and print its figures; the hook's accuracy must beat chance (a
# broken exchange stays near 10%).
# Usage: examples_test.sh GRADWIRE_BINARY PYTHON_PACKAGE_DIR SOURCE_DIR
set -euo pipefail
gradwire=$1 package=$2 source=$3
work=$(mktemp -d /tmp/gradwire-examples-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "examples_test: $*" >&2; exit 1; }
export PYTHONPATH=$package

"$gradwire" run -n 2 -- /usr/bin/python3 "$source/examples/ddp_hook.py" --limit 2048 \
  --codec int8 --checkpoint "$work/ck.pt" > "$work/hook1.log" 2>&1 || { cat "$work/hook1.log"; fail "ddp_hook.py failed"; }
"$gradwire" run -n 2 -- /usr/bin/python3 "$source/examples/ddp_hook.py" --limit 2048 \
  --codec int8 --epochs 2 --checkpoint "$work/ck.pt" > "$work/hook2.log" 2>&1 || { cat "$work/hook2.log"; fail "ddp_hook.py did not resume"; }
cat "$work/hook1.log" "$work/hook2.log"
grep -q "epoch 0: test accuracy" "$work/hook1.log" || fail "no epoch 0 line"
grep -q "epoch 1: test accuracy" "$work/hook2.log" || fail "the resumed run printed no epoch 1"
! grep -q "epoch 0" "$work/hook2.log" || fail "the resumed run trained epoch 0 again"
accuracy=$(grep -o "accuracy [0-9.]*" "$work/hook2.log" | awk '{print $2}')
awk -v a="$accuracy" 'BEGIN { exit !(a > 40) }' || fail "accuracy $accuracy% after 2 epochs"

"$gradwire" run -n 2 -- /usr/bin/python3 "$source/examples/diloco.py" --steps 60 \
  --inner-steps 20 --delay 2 --eval-every 60 > "$work/diloco.log" 2>&1 || { cat "$work/diloco.log"; fail "diloco.py failed"; }
cat "$work/diloco.log"
grep -q "step 60: train loss" "$work/diloco.log" || fail "diloco.py printed no step 60"
grep -q "'outer_steps': 3" "$work/diloco.log" || fail "diloco.py did not make 3 outer steps"
echo "examples_test: ok"
