# e99f2e0 (A) against this stop's build (B, 27bc23a's tree: auto's trials on proposals,
# 20 pairs, compress/ subfolders), 4 workers, 2 rounds of 100 steps.
bash bench/e2e/step_time_models_ab.sh /tmp/before/build/gradwire /tmp/gwbin/gradwire_final4 /tmp/bench/step4 2 100
