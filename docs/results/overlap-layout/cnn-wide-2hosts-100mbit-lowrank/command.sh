# PowerSGD rank 8 fixed, before (27bc23a's binary, as 0e929e1: low-rank tensors after the
# buckets) and after (03d022c: low-rank groups during backward), 2 emulated hosts,
# cnn-wide, 100 Mbit, 1 epoch, seeds 0-2, interleaved.
cd /work/main
P='conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16'
MODEL=cnn-wide HOSTS=2 EPOCHS=1 bash bench/e2e/overlap_seeds.sh /tmp/bench/lrg-wide "0 1 2" \
  psgd-before=/tmp/gwbin/gradwire_final4,$P,100mbit \
  psgd-after=/tmp/gwbin/gradwire_lrg2,$P,100mbit
