#!/usr/bin/env bash
# Restart soak (a few minutes; not in CI, whose short version is tests/cli/restart_cli_test.cc):
# a 4-worker allreduce job with a checkpoint every N steps and --max-restarts R has one of
# its workers SIGKILLed R times, at random moments; it must finish with the parameters of an
# uninterrupted run (equal param_checksums) and lose no more than the steps since the last
# checkpoint each time. Prints one line per kill and a summary.
#
# Usage: bench/soak/restart_soak.sh GRADWIRE OUT_DIR [KILLS=3] [EVERY=20] [SEED=1]
#   e.g. bench/soak/restart_soak.sh build/gradwire /tmp/soak 3 20 1
set -euo pipefail
gradwire=$(realpath "$1") out=$2 kills=${3:-3} every=${4:-20} seed=${5:-1}
mkdir -p "$out"
rm -rf "$out/ckpt" "$out"/*.jsonl "$out"/*.log
RANDOM=$seed
job=("$gradwire" train --workers 4 --epochs 3 --compressor topk:density=0.01 --progress lines
     --test-limit 2000 --batch-size 32)

echo "reference run (uninterrupted)"
ref_start=$(date +%s.%N)
"${job[@]}" --metrics "$out/reference.jsonl" > "$out/reference.log" 2>&1
ref_wall=$(echo "$(date +%s.%N) - $ref_start" | bc)

echo "soak run: $kills kills, a checkpoint every $every steps"
start=$(date +%s.%N)
"${job[@]}" --metrics "$out/soak.jsonl" --checkpoint-dir "$out/ckpt" --checkpoint-every "$every" \
  --max-restarts "$kills" > "$out/soak.log" 2>&1 &
job_pid=$!
trap 'kill "$job_pid" 2> /dev/null || true' EXIT
for k in $(seq 1 "$kills"); do
  # A moment in the next 6-15 s (the job trains about a minute without kills, 1407 steps).
  sleep $((6 + RANDOM % 10))
  mapfile -t workers < <(pgrep -f -- "$gradwire train --worker" || true)
  if [ ${#workers[@]} -eq 0 ]; then echo "kill $k: no worker left to kill (the job ended)"; break; fi
  victim=${workers[$((RANDOM % ${#workers[@]}))]}
  rank=$(tr '\0' '\n' < "/proc/$victim/environ" 2> /dev/null | sed -n 's/^RANK=//p' || true)
  kill -9 "$victim" 2> /dev/null || true
  printf 'kill %d: rank %s (pid %s) at %.1f s\n' "$k" "${rank:-?}" "$victim" \
    "$(echo "$(date +%s.%N) - $start" | bc)"
  # Wait for the restart's resume line before the next kill.
  for _ in $(seq 1 120); do
    [ "$(grep -c '^\[0\] resumed from' "$out/soak.log" || true)" -ge "$k" ] && break
    sleep 1
  done
done
wait "$job_pid"
status=$?
soak_wall=$(echo "$(date +%s.%N) - $start" | bc)
trap - EXIT
echo "soak job exited with status $status"
printf 'wall time: reference %.1f s, soak %.1f s\n' "$ref_wall" "$soak_wall"

python3 - "$out" "$every" << 'EOF'
import json, sys
out, every = sys.argv[1], int(sys.argv[2])
def lines(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
ref, soak = lines("reference"), lines("soak")
r, s = ref[-1], soak[-1]
resumes = [l for l in soak if l["event"] == "resume"]
print(f"resumed {len(resumes)} times, at steps {[l['step'] for l in resumes]} "
      f"(every one a multiple of {every}: {all(l['step'] % every == 0 for l in resumes)})")
print(f"accuracy: reference {100*r['test_accuracy']:.2f}%, soak {100*s['test_accuracy']:.2f}%")
print(f"parameters equal to the reference's: {s['param_checksums'] == r['param_checksums']}")
print(f"training time: reference {r['train_s']:.1f} s, soak {s['train_s']:.1f} s "
      f"(clock kept across restarts; lost work: the steps after each checkpoint, "
      f"fewer than {every} per kill)")
EOF
