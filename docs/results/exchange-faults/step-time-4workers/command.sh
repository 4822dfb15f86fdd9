# dd53a7c (A, built in the worktree /tmp/before as the parent README says) against this
# change (B, build/), 4 workers, 1 round of 100 steps, on the 2-core development machine.
bash bench/e2e/step_time_models_ab.sh /tmp/before/build/gradwire ./build/gradwire /tmp/ab 1 100
