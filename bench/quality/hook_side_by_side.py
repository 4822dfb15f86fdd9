#!/usr/bin/python3
"""DDP communication hooks side by side, step by step, on the same gradients.

    ./build/gradwire train --model gpt --seed 0 --save-initial-weights W.bin
    PYTHONPATH=build/python ./build/gradwire run -n 4 -- /usr/bin/python3 \\
        bench/quality/hook_side_by_side.py --model gpt --initial-weights W.bin --out DIR \\
        --hooks torch:powersgd:rank=16,start=2,min_rate=2 \\
                gradwire:powersgd:rank=16,start=2,min_rate=2

Every rank holds one copy of the model (bench/peers/peer_jobs.py's, the same weights) per
hook and a plain one. Each step every copy runs forward and backward on the rank's batch
(the trainer's shard and batches), so every hook sees the same local gradients; the plain
copy's, allreduced in fp32, are the exact mean. Then every copy takes the exact mean's
step (the model's recipe: SGD with momentum, or AdamW with clipping, warm-up and cosine
over --schedule-steps), so the trajectory is the exact one and each hook is measured on
it, with its own state (error feedback, warm start) carried from step to step.

Hooks (--hooks):
  torch:powersgd:rank=R,start=N,min_rate=M   PyTorch's powerSGD_hook (error feedback and
                                             warm start, one bucket: its second allreduce,
                                             issued from the first's callback, can reach
                                             Gloo in different orders with several)
  gradwire:SPEC[+PATH]                       gradwire.ddp.hook(SPEC), PATH its
                                             quantized_path (ring, reduce-scatter, auto)

Per step and hook: the output's relative error ||G~ - G|| / ||G|| against the exact mean G
over every parameter, and under AdamW the relative error of the step that G~ would give
from the exact run's optimizer state (AdamW divides each coordinate by the root of its own
second moment: a coordinate a hook under-sends is under-stepped in proportion). Two hooks'
random starts differ (PowerSGD's first Q: torch's generator against gradwire's), so they
are compared through what they produce. Rank 0 appends one JSON line a step to
OUT/steps.jsonl; hook_side_by_side_table.py makes the table.
"""
import argparse
import copy
import json
import math
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import peer_jobs  # noqa: E402  (the models, data, shard, recipe and optimizer)


def parse_hook(text):
    """("torch" or "gradwire", spec, quantized path or None)."""
    system, _, rest = text.partition(":")
    if system == "torch" and rest.startswith("powersgd"):
        return system, rest, None
    if system == "gradwire" and rest:
        spec, _, path = rest.rpartition("+")
        if path not in ("ring", "reduce-scatter", "auto"):
            spec, path = rest, None
        return system, spec, path
    raise SystemExit(f"hook_side_by_side: unknown hook '{text}' "
                     "(torch:powersgd:rank=R,start=N,min_rate=M or gradwire:SPEC[+PATH])")


def register(model, hook, seed):
    """model wrapped in DDP with `hook` registered."""
    system, spec, path = hook
    if system == "torch":
        params = dict(kv.split("=") for kv in spec.partition(":")[2].split(",") if kv)
        net = DDP(model, bucket_cap_mb=1024)
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(params.get("rank", 1)),
            start_powerSGD_iter=int(params.get("start", 2)),
            min_compression_rate=float(params.get("min_rate", 2)),
            use_error_feedback=True, warm_start=True, random_seed=seed)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return net
    import gradwire
    net = DDP(model)
    options = {"quantized_path": path} if path else {}
    state, fn = gradwire.ddp.hook(spec, model=model, **options)
    net.register_comm_hook(state, fn)
    return net


def clipped(grads, max_norm):
    if not max_norm:
        return grads
    total = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    factor = min(1.0, max_norm / (total + 1e-6))
    return {n: g * factor for n, g in grads.items()}


def adam_step(optimizer, names_by_id, grads, lr):
    """The Adam part of AdamW's step (weight decay aside: the same for every gradient) that
    `grads` would give from the optimizer's state now, without taking it."""
    update = {}
    for group in optimizer.param_groups:
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            g = grads[names_by_id[id(p)]]
            state = optimizer.state.get(p, {})
            step = int(state["step"]) + 1 if "step" in state else 1
            m = state.get("exp_avg", torch.zeros_like(g)) * beta1 + (1 - beta1) * g
            v = state.get("exp_avg_sq", torch.zeros_like(g)) * beta2 + (1 - beta2) * g * g
            denom = (v / (1 - beta2 ** step)).sqrt() + group["eps"]
            update[names_by_id[id(p)]] = lr * (m / (1 - beta1 ** step)) / denom
    return update


def relative(a, b):
    num = sum(float((a[n] - b[n]).pow(2).sum()) for n in b)
    den = sum(float(b[n].pow(2).sum()) for n in b)
    return math.sqrt(num / den) if den > 0 else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="gpt", choices=["gpt", "cnn", "cnn-wide"])
    p.add_argument("--hooks", nargs="+", required=True)
    p.add_argument("--initial-weights", help="gpt's, from gradwire train --save-initial-weights")
    p.add_argument("--corpus", default=peer_jobs.BIBLE_CORPUS)
    p.add_argument("--data-dir", default=peer_jobs.FASHION_MNIST_DIR)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--schedule-steps", type=int, default=0,
                   help="the recipe's run length (default: one epoch)")
    p.add_argument("--batch-size", type=int, default=0, help="default: 8 for gpt, else 64")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="", help="written into every line (e.g. the build)")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    gpt = args.model == "gpt"
    if gpt and not args.initial_weights:
        raise SystemExit("hook_side_by_side: gpt needs --initial-weights")
    batch_size = args.batch_size or (8 if gpt else 64)
    job_args = argparse.Namespace(
        model=args.model, corpus=args.corpus, data_dir=args.data_dir,
        train_limit=args.train_limit or (12288 if gpt else 0), test_limit=0, optimizer=None,
        lr=None, momentum=None, weight_decay=None, schedule=None, warmup=None, clip_norm=None)
    job = peer_jobs.TextJob(job_args, root=False) if gpt else peer_jobs.ImageJob(job_args, False)
    recipe = peer_jobs.recipe(job_args)
    torch.manual_seed(args.seed)
    plain = peer_jobs.make_model(args.model)
    if args.initial_weights:
        peer_jobs.load_initial_weights(plain, args.initial_weights)
    hooks = [parse_hook(h) for h in args.hooks]
    # One bucket for torch's PowerSGD (its first bucket too).
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    copies = [copy.deepcopy(plain) for _ in hooks]
    nets = [register(m, h, args.seed) for m, h in zip(copies, hooks)]
    optimizer = peer_jobs.make_optimizer(recipe, plain, job.no_decay())
    adamw = recipe["optimizer"] == "adamw"
    names = [n for n, _ in plain.named_parameters()]
    names_by_id = {id(q): n for n, q in plain.named_parameters()}
    indices = peer_jobs.shard(job.train_size(), rank, world, args.seed, 0)
    steps_per_epoch = len(indices) // batch_size
    schedule_steps = args.schedule_steps or steps_per_epoch
    os.makedirs(args.out, exist_ok=True)
    for step in range(args.steps):
        at = (step % steps_per_epoch) * batch_size
        batch = torch.as_tensor(indices[at:at + batch_size], dtype=torch.int64)
        plain.zero_grad(set_to_none=True)
        job.loss(plain, batch).backward()
        mean = {n: q.grad.detach().clone() for n, q in plain.named_parameters()}
        for n in names:
            dist.all_reduce(mean[n])
            mean[n] /= world
        lr = peer_jobs.lr_at(recipe, step, schedule_steps)
        exact = clipped(mean, recipe["clip_norm"])
        exact_update = adam_step(optimizer, names_by_id, exact, lr) if adamw else None
        line = {"step": step, "label": args.label, "model": args.model, "world": world,
                "seed": args.seed, "hooks": {}}
        for text, model, net in zip(args.hooks, copies, nets):
            model.zero_grad(set_to_none=True)
            job.loss(net, batch).backward()
            out = {n: q.grad.detach().clone() for n, q in model.named_parameters()}
            flat = torch.cat([out[n].flatten() for n in names])
            gathered = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(gathered, flat)
            entry = {"output_error": relative(out, mean),
                     "ranks_agree": all(torch.equal(gathered[0], g) for g in gathered)}
            if adamw:
                update = adam_step(optimizer, names_by_id, clipped(out, recipe["clip_norm"]), lr)
                entry["update_error"] = relative(update, exact_update)
            line["hooks"][text] = entry
        # The exact step, then every copy set to it.
        for group in optimizer.param_groups:
            group["lr"] = lr
        for n, q in plain.named_parameters():
            q.grad = exact[n]
        optimizer.step()
        with torch.no_grad():
            for model in copies:
                for (_, q), (_, c) in zip(plain.named_parameters(), model.named_parameters()):
                    c.copy_(q)
        if rank == 0:
            with open(os.path.join(args.out, "steps.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
