cd /work/main
HOSTS=2 EPOCHS=3 bash /tmp/ev/overlap_seeds.sh /tmp/ev/out "0 1 2" \
  floor=/tmp/gwbin/gradwire_pairs,none,unlimited \
  int8-5plus5=/tmp/gwbin/gradwire_9c62,int8,100mbit \
  int8-pairs=/tmp/gwbin/gradwire_pairs,int8,100mbit \
  auto-pairs=/tmp/gwbin/gradwire_pairs,auto,100mbit \
  powersgd-pairs=/tmp/gwbin/gradwire_pairs,conv=powersgd:rank=8,fc=powersgd:rank=8,other=fp16,100mbit
