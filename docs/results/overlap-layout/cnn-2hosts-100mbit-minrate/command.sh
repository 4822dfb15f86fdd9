# PowerSGD with DDP's min_compression_rate (min_rate=2: cnn's conv1 and fc2 weights dense,
# in one fp32 bucket with the biases) against the plan before it (conv and fc weights low
# rank, everything else fp16), both on the binary of this commit (min_rate defaults to 0:
# the old plan runs as before); auto on this commit (its powersgd plan is the new one) and
# on 03d022c's binary (before). 2 emulated hosts, cnn, 100 Mbit, seeds 0-2, interleaved.
cd /work/main
OLD='conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16'
NEW='powersgd:min_rate=2,rank=8'
HOSTS=2 EPOCHS=3 bash bench/e2e/overlap_seeds.sh /tmp/bench/minrate "0 1 2" \
  floor=/tmp/gwbin/gradwire_minrate,none,unlimited \
  psgd-before=/tmp/gwbin/gradwire_minrate,$OLD,100mbit \
  psgd-minrate=/tmp/gwbin/gradwire_minrate,$NEW,100mbit \
  auto-before=/tmp/gwbin/gradwire_lrg2,auto,100mbit \
  auto-after=/tmp/gwbin/gradwire_minrate,auto,100mbit
