cd /work/main
HOSTS=2 EPOCHS=3 bash /tmp/ev/overlap_seeds.sh /tmp/ev/out3 "0 1 2" \
  floor=/tmp/gwbin/gradwire_final3,none,unlimited \
  int8=/tmp/gwbin/gradwire_final3,int8,100mbit \
  auto=/tmp/gwbin/gradwire_final3,auto,100mbit
cp bench/e2e/step_time_models_ab.sh /tmp/ev/step_ab.sh
bash /tmp/ev/step_ab.sh /tmp/before/build/gradwire /tmp/gwbin/gradwire_final3 /tmp/ev/step 2 100
