#!/usr/bin/env bash
# EMULATION.md's table of what a shaped link carries (root): for each rate, one TCP stream
# from host 1 to host 0 of a 2-host `gradwire cluster` for SECONDS, then the table
# (link_rates.py).
#
#   bash bench/emulation/link_rates.sh GRADWIRE HELPER OUT_DIR [SECONDS=2] [RATE...]
#   e.g. bash bench/emulation/link_rates.sh build/gradwire build/tests/gradwire_test_helper /tmp/rates
# HELPER is the test suite's helper program (its `stream` mode); RATE defaults to 20mbit
# 1gbit 10gbit unlimited.
set -euo pipefail
gradwire=$(realpath "$1") helper=$(realpath "$2") out=$3 seconds=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(20mbit 1gbit 10gbit unlimited)
mkdir -p "$out"
for rate in "${rates[@]}"; do
  "$gradwire" cluster --hosts 2 --bandwidth "$rate" -- "$helper" stream "$seconds" \
    > "$out/$rate.txt" 2>&1
  echo "$rate: $(grep -h 'received' "$out/$rate.txt")"
done
/usr/bin/python3 "$(dirname "$0")/link_rates.py" "$out" "${rates[@]}" > "$out/results.md"
cat "$out/results.md"
