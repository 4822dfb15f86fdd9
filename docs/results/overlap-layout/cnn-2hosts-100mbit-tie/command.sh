cd /work/main
HOSTS=2 EPOCHS=3 bash /tmp/ev/overlap_seeds.sh /tmp/ev/out2 "0 1 2" \
  int8-pairs=/tmp/gwbin/gradwire_pairs,int8,100mbit \
  int8-tie1ms=/tmp/gwbin/gradwire_tie1ms,int8,100mbit
