# auto scoring each plan's trial by the mean of its steps instead of the median (an
# experiment, not committed: trial-mean.patch on 546813c, built to gradwire_mean) against
# auto as committed (546813c, gradwire_head2); 2 emulated hosts, cnn, 100 Mbit, 3 epochs,
# seeds 0-2, interleaved.
cd /work/main
H=/tmp/gwbin/gradwire_head2 M=/tmp/gwbin/gradwire_mean
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/mean "0 1 2" \
  floor=$H,none,unlimited auto-mean=$M,auto,100mbit auto=$H,auto,100mbit
