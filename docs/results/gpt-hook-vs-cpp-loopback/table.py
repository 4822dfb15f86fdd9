#!/usr/bin/env python3
"""The validation loss at every evaluation of each run here (command.txt): C++ path and
the hook with the same codec, and DDP's own allreduce. Prints Markdown."""
import json
import os

RUNS = [("DDP allreduce (peer)", "ddp-allreduce"), ("hook none", "hook-none"),
        ("C++ none", "cpp-none"), ("hook fp16", "hook-fp16"), ("C++ fp16", "cpp-fp16"),
        ("hook auto", "hook-auto"), ("C++ auto", "cpp-auto")]
evals = {}
for label, name in RUNS:
    with open(name + ".jsonl") as f:
        evals[label] = [json.loads(l) for l in f if '"eval"' in l]
steps = [e["step"] for e in evals[RUNS[0][0]]]
print("| run | " + " | ".join("step %d" % s for s in steps) + " |")
print("|---|" + "---|" * len(steps))
for label, _ in RUNS:
    print("| %s | " % label + " | ".join("%.4f" % e["val_loss"] for e in evals[label]) + " |")
