# What the codecs cost without the link (unshaped, as the floor) and with it (100 Mbit):
# int8 and PowerSGD as auto's plan runs it, and auto; build 90b18cd; 2 emulated hosts,
# cnn, 3 epochs, seeds 0-2, interleaved. BIN: that commit's build/gradwire.
cd /work/main
B=/tmp/gwbin/gradwire_90b1
P='powersgd:min_rate=2,rank=8'
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/cpu "0 1 2" \
  floor=$B,none,unlimited int8-fast=$B,int8,unlimited psgd-fast=$B,$P,unlimited \
  int8-100=$B,int8,100mbit psgd-100=$B,$P,100mbit auto-100=$B,auto,100mbit
