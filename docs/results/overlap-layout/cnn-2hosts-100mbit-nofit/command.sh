# 7730a57 (auto without fit among its default plans, each plan timed on its layout's
# proposal) against a8b4075's auto (gradwire_final3 = e3d0bca, the same code), 2 emulated
# hosts, cnn, 100 Mbit, seeds 0-2, interleaved.
cd /work/main
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/nofit "0 1 2" \
  floor=/tmp/gwbin/gradwire_nofit,none,unlimited \
  int8=/tmp/gwbin/gradwire_nofit,int8,100mbit \
  auto=/tmp/gwbin/gradwire_nofit,auto,100mbit \
  auto-before=/tmp/gwbin/gradwire_final3,auto,100mbit
