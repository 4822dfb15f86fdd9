#!/usr/bin/python3
"""What gradwire's DDP hook costs, against DDP's own hooks, on loopback (no link to save).

    PYTHONPATH=build/python ./build/gradwire run -n 2 -- /usr/bin/python3 \\
        bench/python/hook_cost.py --out docs/results/hook-cost [--rounds 3 --steps 30]

Each rank trains a model under DDP with each configuration in turn, one round after another
(every configuration once per round: A B C A B C), the same batches; per step it times the
backward pass (forward excluded) and, with a wrapper around the hook, the time autograd's
thread spends inside each hook call: for gradwire, reporting the bucket's gradients, plus
in the last bucket's call the wait for the step's exchange (encoding, collectives,
decoding), which DDP's hooks leave to DDP's wait after backward; for DDP's hooks,
launching the collective and the cast. Backward's time is the comparable figure. The compute floor,
backward without DDP, runs in the same rounds. Rank 0 appends one JSON line per
configuration and round to OUT/runs.jsonl; hook_cost_table.py makes the table.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(name):
    torch.manual_seed(0)
    if name == "mlp-wide":  # 2.2M parameters, 8.7 MB of fp32 gradient
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(),
                             nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(  # "cnn": 0.43M parameters
        nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 384), nn.ReLU(), nn.Linear(384, 10))


def register(ddp, config, model, seconds):
    """Registers `config`'s hook on `ddp`, wrapped so that each call's time goes to
    `seconds`."""
    if config == "ddp:allreduce":
        state, hook = None, default_hooks.allreduce_hook
    elif config == "ddp:fp16":
        state, hook = None, default_hooks.fp16_compress_hook
    else:
        import gradwire
        state, hook = gradwire.ddp.hook(config.split("gradwire-", 1)[1], model=model)

    def bench_hook(hook_state, bucket):  # DDP wants the second parameter named `bucket`
        start = time.perf_counter()
        future = hook(hook_state, bucket)
        seconds.append(time.perf_counter() - start)
        return future
    ddp.register_comm_hook(state, bench_hook)


def run_config(config, model_name, steps, batch, rank):
    model = make_model(model_name)
    g = torch.Generator().manual_seed(rank)
    data = [(torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]
    seconds = []
    if config == "floor":
        net = model
    else:
        net = DDP(model)
        register(net, config, model, seconds)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    backward, in_hook, calls, others, last = [], [], [], [], []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        seconds.clear()
        start = time.perf_counter()
        loss.backward()
        backward.append(time.perf_counter() - start)
        in_hook.append(sum(seconds))
        calls.append(len(seconds))
        if seconds:
            last.append(seconds[-1])
            others.extend(seconds[:-1])
        opt.step()
    skip = 5  # the first steps: DDP's bucket rebuild, gradwire's first step and layout trial
    return {"backward_ms": 1e3 * statistics.median(backward[skip:]),
            "in_hook_ms": 1e3 * statistics.median(in_hook[skip:]),
            # A call for a bucket but the last: the hook's own cost (Python, the report);
            # the last bucket's call: for gradwire, also the wait for the step's exchange.
            "other_call_ms": 1e3 * statistics.median(others[skip:]) if others[skip:] else 0.0,
            "last_call_ms": 1e3 * statistics.median(last[skip:]) if last else 0.0,
            "buckets": statistics.median(calls[skip:])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--models", default="cnn,mlp-wide")
    p.add_argument("--configs", default="floor,ddp:allreduce,ddp:fp16,ddp:gradwire-none,"
                   "ddp:gradwire-fp16,ddp:gradwire-int8,ddp:gradwire-powersgd:rank=8,"
                   "ddp:gradwire-auto")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for r in range(args.rounds):
        for model_name in args.models.split(","):
            for config in args.configs.split(","):
                result = run_config(config, model_name, args.steps, args.batch, rank)
                worst = [None] * dist.get_world_size()
                dist.all_gather_object(worst, result)
                if rank == 0:
                    line = {"round": r, "model": model_name, "config": config,
                            "world": dist.get_world_size(), "steps": args.steps,
                            "batch": args.batch, "ranks": worst}
                    with open(os.path.join(args.out, "runs.jsonl"), "a") as f:
                        f.write(json.dumps(line) + "\n")
                    print(json.dumps(line), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
