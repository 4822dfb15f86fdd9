# a602060 (auto: plans none/fp16/int8/powersgd, each timed on its layout's proposal where
# that could win; the layout check over 20 pairs; decisions with trial_steps), 2 emulated
# hosts, cnn, 100 Mbit, seeds 0-2, interleaved.
cd /work/main
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/v4 "0 1 2" \
  floor=/tmp/gwbin/gradwire_v4,none,unlimited \
  int8=/tmp/gwbin/gradwire_v4,int8,100mbit \
  auto=/tmp/gwbin/gradwire_v4,auto,100mbit
