#!/usr/bin/python3
"""A plain DDP training loop, the reference the DDP peer (bench/peers/ddp_peer.py) is timed
against: the same model, data and shard (imported from the peer), DDP over Gloo with
PowerSGD's hook, and nothing else in the loop: no evaluation, no byte counting, no clock
pauses, no timeline spans.

    --threads N      torch's compute threads (0: torch's default, every core)
    --buckets ddp    DDP's default buckets (25 MB, the first 1 MB), each bucket's hook run
                     after the one before (the peer's bucket_order.py: with PowerSGD's hook
                     as it is, ranks hand Gloo their collectives in different orders and
                     the job hangs, seen here on the first try); one: the whole model in
                     one bucket, as the peer runs PowerSGD by default

Prints one JSON line (rank 0): the wall time of all steps (between barriers) and the time
per step from --from-step on (past PowerSGD's dense steps and its first iterations).
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "bench", "peers"))
import bucket_order  # noqa: E402
import ddp_peer  # noqa: E402  the same model, data and shard


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn-wide")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--buckets", choices=["ddp", "one"], default="ddp")
    p.add_argument("--rank", type=int, default=8, help="PowerSGD's rank")
    p.add_argument("--start", type=int, default=2, help="PowerSGD's dense steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-step", type=int, default=25,
                   help="the steps timed per step: from this one to the last")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = ddp_peer.load_fashion_mnist(ddp_peer.FASHION_MNIST_DIR, True, 0)
    torch.manual_seed(args.seed)
    model = ddp_peer.make_model(args.model)
    bucket_mb = 25.0
    if args.buckets == "one":
        bucket_mb = 4 * sum(q.numel() for q in model.parameters()) / 2**20 + 1
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(bucket_mb * 2**20)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                        start_powerSGD_iter=args.start, use_error_feedback=True,
                                        warm_start=True, random_seed=args.seed)
    hook = powerSGD_hook.powerSGD_hook
    ddp.register_comm_hook(state, bucket_order.in_bucket_order(hook) if args.buckets == "ddp"
                           else hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    indices = torch.tensor(ddp_peer.shard(len(y), rank, world, args.seed, 1), dtype=torch.int64)
    dist.barrier()
    start = time.monotonic()
    mark = start
    for step in range(args.steps):
        if step == args.from_step:
            mark = time.monotonic()
        batch = indices[step * args.batch_size:(step + 1) * args.batch_size]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x.index_select(0, batch)),
                                                 y.index_select(0, batch))
        loss.backward()
        optimizer.step()
    dist.barrier()
    end = time.monotonic()
    if rank == 0:
        print(json.dumps({"event": "summary", "threads": torch.get_num_threads(),
                          "buckets": args.buckets, "steps": args.steps,
                          "train_s": end - start,
                          "s_per_step": (end - mark) / (args.steps - args.from_step)}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
