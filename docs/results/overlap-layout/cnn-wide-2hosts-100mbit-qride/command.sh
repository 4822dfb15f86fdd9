# cnn-wide, 1 epoch: PowerSGD as auto's plan now runs it (min_rate=2, rank 8, a group's Q
# on the next fp32 bucket; e8c9295's binary) against the plan before (conv and fc weights
# low rank, fp16 for the rest, its groups' Q in allreduces of their own; the same binary).
# 2 emulated hosts, 100 Mbit, seeds 0-2, interleaved.
cd /work/main
OLD='conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16'
NEW='powersgd:min_rate=2,rank=8'
MODEL=cnn-wide HOSTS=2 EPOCHS=1 bash bench/e2e/overlap_seeds.sh /tmp/bench/wide-qride "0 1 2" \
  psgd-old-plan=/tmp/gwbin/gradwire_ride,$OLD,100mbit \
  psgd-qride=/tmp/gwbin/gradwire_ride,$NEW,100mbit
