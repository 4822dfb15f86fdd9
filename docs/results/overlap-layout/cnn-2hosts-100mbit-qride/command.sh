# PowerSGD (min_rate=2, rank 8) with the last group's Q on the allreduce of the bucket
# that ends backward (after: this commit's binary) against the same plan with Q in an
# allreduce of its own (before: ec7e235's binary), and the plan before min_rate
# (conv and fc weights low rank, fp16 for the rest; on this commit's binary, where a group
# followed by an fp16 bucket keeps its own Q); auto on this commit. 2 emulated hosts, cnn,
# 100 Mbit, seeds 0-2, interleaved.
cd /work/main
OLD='conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16'
NEW='powersgd:min_rate=2,rank=8'
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/qride "0 1 2" \
  floor=/tmp/gwbin/gradwire_ride,none,unlimited \
  psgd-old-plan=/tmp/gwbin/gradwire_ride,$OLD,100mbit \
  psgd-minrate=/tmp/gwbin/gradwire_minrate,$NEW,100mbit \
  psgd-qride=/tmp/gwbin/gradwire_ride,$NEW,100mbit \
  auto-qride=/tmp/gwbin/gradwire_ride,auto,100mbit
