#!/usr/bin/env bash
# The parameter-server table of docs/PARAMETER_SERVER.md: 4 workers, one at quarter speed,
# the Fashion-MNIST CNN, the same number of epochs, for BSP, SSP:2 and ASP with every
# updater, plus Hylo on BSP. Runs one job after the other (each takes the machine's cores);
# writes OUT/<name>.jsonl and prints each job's summary line.
#
#   bash bench/ps/staleness_table.sh [OUT_DIR] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/gradwire-ps-table}
epochs=${2:-2}
mkdir -p "$out"
common=(train --strategy ps --servers 1 --workers 4 --worker-speed 1,1,1,0.25
        --epochs "$epochs" --progress none)
# Asynchrony adds implicit momentum of about 1 - 1/W (Mitliagkas et al. 2016): with 4
# workers, explicit momentum 0.9 on top diverges (see the asp-sgd-m0.9 row), so the
# asynchronous runs use 0.6.
runs=(
  "bsp|--consistency bsp"
  "hylo-bsp|--consistency bsp --compressor hylo"
  "ssp2|--consistency ssp:2 --momentum 0.6"
  "asp-sgd|--consistency asp --updater sgd --momentum 0.6"
  "asp-asgd-staleness|--consistency asp --updater asgd-staleness --momentum 0.6"
  "asp-dc-asgd|--consistency asp --updater dc-asgd --momentum 0.6"
  "asp-dc-asgd-a|--consistency asp --updater dc-asgd-a --momentum 0.6"
  "asp-ddc-asgd|--consistency asp --updater ddc-asgd --momentum 0.6"
  "asp-sgd-m0.9|--consistency asp --updater sgd --momentum 0.9"
)
for run in "${runs[@]}"; do
  name=${run%%|*}
  read -r -a extra <<< "${run#*|}"
  echo "== $name: gradwire ${common[*]} ${extra[*]}"
  ./build/gradwire "${common[@]}" "${extra[@]}" --metrics "$out/$name.jsonl" 2>&1 |
    grep -E "summary|error|exited" || true
done
