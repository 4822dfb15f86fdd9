# dd53a7c (A, built in the worktree /tmp/before as the parent README says) against this
# change (B, build/), 4 workers, 100 steps a run, on the 2-core development machine. Two
# rounds, run one after the other as one-round invocations (the second's runs renumbered
# round 2 in runs.jsonl), then the table from them:
bash bench/e2e/step_time_models_ab.sh /tmp/before/build/gradwire ./build/gradwire /tmp/ab 1 100
bash bench/e2e/step_time_models_ab.sh /tmp/before/build/gradwire ./build/gradwire /tmp/ab2 1 100
python3 bench/e2e/step_time_summary.py runs.jsonl > summary.md
