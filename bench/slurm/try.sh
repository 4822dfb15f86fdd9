#!/usr/bin/env bash
# Tries docs/LAUNCH.md's two Slurm scripts on a Slurm cluster of two nodes on this machine
# (root; installs slurm-wlm and munge; stops every daemon it started, whatever happens):
# 2 nodes x 2 ranks of the example program, whose accuracy must equal `gradwire run -n 4`'s.
#   bash bench/slurm/try.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${1:-/tmp/gradwire-slurm}
mkdir -p "$out"
export DEBIAN_FRONTEND=noninteractive
dpkg -s slurm-wlm munge >/dev/null 2>&1 || { apt-get update && apt-get install -y slurm-wlm munge; }

cleanup() {
  for pidfile in /run/slurm/slurmd-n1.pid /run/slurm/slurmd-n2.pid /run/slurm/slurmctld.pid \
                 /run/munge/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
}
failed() {
  echo "try.sh: failed at line $1; the daemons' logs:" >&2
  tail -n 5 /var/log/slurm/gradwire-slurm*.log >&2 2>/dev/null || true
}
trap cleanup EXIT
trap 'failed $LINENO' ERR

# A state directory of its own, fresh every time (slurmctld refuses another cluster's state).
rm -rf /var/spool/gradwire-slurm
mkdir -p /run/munge /var/spool/gradwire-slurm/ctld /var/spool/gradwire-slurm/n1 \
         /var/spool/gradwire-slurm/n2 /var/log/slurm /run/slurm
chown munge: /run/munge
chown slurm: /var/spool/gradwire-slurm/ctld /var/log/slurm /run/slurm
[ -f /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1; \
                                 chown munge: /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
su -s /bin/sh munge -c /usr/sbin/munged
host=$(hostname)
# Its own configuration (SLURM_CONF, read by the daemons and the commands): /etc/slurm is
# left alone. Not for a machine of a real Slurm cluster (the same ports).
export SLURM_CONF=/var/spool/gradwire-slurm/slurm.conf
sed "s/@HOST@/$host/g" bench/slurm/slurm.conf.in > "$SLURM_CONF"
slurmctld
slurmd -N n1
slurmd -N n2
for _ in $(seq 30); do
  [ "$(sinfo -h -N -o '%t' | grep -c idle)" = 2 ] && break
  sleep 1
done
sinfo -N

export GRADWIRE=$root/build/gradwire
export TRAIN="$root/build/mnist_distributed 1 2000"
expected=$("$GRADWIRE" run -n 4 --master-port 29502 -- $TRAIN | grep -o 'accuracy [0-9.]*')
echo "gradwire run -n 4: $expected"
status=0
for script in rank_per_task launcher_per_node; do
  (cd "$out" && sbatch --wait -o "$script.out" "$root/bench/slurm/$script.sbatch") || status=1
  got=$(grep -o 'accuracy [0-9.]*' "$out/$script.out" | head -n 1 || true)
  echo "$script: ${got:-no accuracy} (log $out/$script.out)"
  [ "$got" = "$expected" ] || status=1
done
exit $status
