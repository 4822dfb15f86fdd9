# 27bc23a, as 0e929e1 (which changed docs and tests only) (before: PowerSGD's tensors exchanged after the buckets, all together) against
# the low-rank groups exchanged during backward (after), 2 emulated hosts, cnn, 100 Mbit,
# seeds 0-2, interleaved. The two binaries: build/gradwire of each commit, copied.
cd /work/main
P='conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16'
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/lrg "0 1 2" \
  floor=/tmp/gwbin/gradwire_lrg,none,unlimited \
  psgd-before=/tmp/gwbin/gradwire_final4,$P,100mbit \
  psgd-after=/tmp/gwbin/gradwire_lrg,$P,100mbit \
  auto-before=/tmp/gwbin/gradwire_final4,auto,100mbit \
  auto-after=/tmp/gwbin/gradwire_lrg,auto,100mbit
