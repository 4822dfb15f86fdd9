# 85bd03c (auto times a plan on its layout's proposal; fit still a default plan) against
# a8b4075's auto (gradwire_final3 = e3d0bca, the same code), 2 emulated hosts, cnn,
# 100 Mbit, seeds 0-2, interleaved. auto-before seed 2 was spoiled (a build ran beside
# it, then the batch was stopped) and is left out.
cd /work/main
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/trial-layout "0 1 2" \
  floor=/tmp/gwbin/gradwire_trialayout,none,unlimited \
  int8=/tmp/gwbin/gradwire_trialayout,int8,100mbit \
  auto=/tmp/gwbin/gradwire_trialayout,auto,100mbit \
  auto-before=/tmp/gwbin/gradwire_final3,auto,100mbit
