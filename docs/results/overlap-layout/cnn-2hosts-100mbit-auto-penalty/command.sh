# auto with PowerSGD's penalty at 0.1 against the default 0.2; build 90b18cd; 2 emulated
# hosts, cnn, 100 Mbit, 3 epochs, seeds 0-2, interleaved (run right after
# cnn-2hosts-100mbit-codec-cpu/, whose fixed-plan runs it is compared with).
cd /work/main
B=/tmp/gwbin/gradwire_90b1
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/pen "0 1 2" \
  floor=$B,none,unlimited auto-p10=$B,auto:penalty=0.1,100mbit auto-p20=$B,auto,100mbit
