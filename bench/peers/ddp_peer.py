#!/usr/bin/python3
"""The baseline gradwire is measured against: PyTorch DistributedDataParallel.

Trains the job of `gradwire train --worker` in DDP over Gloo, one rank per process, under
torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME), as
`gradwire cluster` and `gradwire run` set them:

    gradwire cluster --hosts 4 --bandwidth 100mbit -- \
        /usr/bin/python3 bench/peers/ddp_peer.py --hook fp16 --model cnn --epochs 3

Same as gradwire train: the models (cnn, cnn-wide, mlp, built in the same order from the
same seed, so both start from the same weights: compare "initial_checksum"; gpt, whose
initial weights come from gradwire: --initial-weights FILE), the data (Fashion-MNIST, the
same normalization; gpt: the text corpus, the same split and windows), the sharding
(DistributedSampler's permutation, reproduced in peer_jobs.py with the rest), per-worker
batch, the recipe (SGD with momentum, or gpt's AdamW with warm-up, cosine and clipping
after the exchange; --accumulate micro-batches under no_sync()), epochs, one compute
thread per rank, and the metrics file (JSON Lines: "eval", "epoch" and "summary" events,
docs/ARCHITECTURE.md). Training time excludes evaluation: the clock stops while rank 0
evaluates (on every core, the others waiting at a barrier).

Hooks (--hook): gradwire (gradwire.ddp.hook with --gradwire-codec: gradwire's codecs
through DDP, the Python module on PYTHONPATH), allreduce (DDP's default_hooks.allreduce_hook, what DDP does without a
hook), fp16 and bf16 (default_hooks.fp16_compress_hook / bf16_compress_hook) and powersgd
(powerSGD_hook.powerSGD_hook with DDP's recommended settings: error feedback, warm start,
vanilla allreduce for the first --powersgd-start-iter steps, 10% of the run by default;
by default one bucket for the whole model, as its second allreduce, sent from the first's
callback, can otherwise reach Gloo in different orders on different ranks, which Gloo
aborts on; --powersgd-buckets ddp keeps DDP's buckets and runs each bucket's hook after
the one before, so every rank issues its collectives in one order: bucket_order.py).
Gloo in torch 1.13 cannot sum bfloat16 ("Invalid scalar type"); there the bf16 hook's
allreduce runs as a ring (reduce-scatter then allgather) of bfloat16 chunks over
send/recv, inside the hook, so it does not overlap backward as Gloo's asynchronous
allreduce does. "bytes_contributed" counts what each rank hands to the hooks' allreduces,
"bytes_on_wire" what its sends put on the network (Gloo's ring allreduce: 2(W-1) chunks of
ceil(B/W) bytes; the bf16 ring: its chunks), both summed over ranks, as gradwire counts.

--strategy diloco trains the same job without DDP under the Python module's gradwire.DiLoCo
(what `gradwire train --strategy diloco` runs, from a PyTorch loop), with the trainer's
flags: --inner-steps, --fragments, --fragment-delay, --outer-lr, --outer-momentum,
--outer-warmup, --compressor (the outer codec) and --link-bandwidth (for inner_steps auto).
As the trainer, it lands the exchange in flight before the clock stops, evaluates the
synchronized model (every fragment as last merged: what the ranks agree on) and, after
finish() at the end, the model every rank holds.

--hook localsgd is PyTorch's own local SGD (post_localSGD_hook, PostLocalSGDOptimizer,
PeriodicModelAverager: local_updates.py): gradients allreduced for --localsgd-warmup steps,
then the models averaged every --localsgd-period steps; evaluated, like DiLoCo, on the
model the ranks last met on, and averaged once more at the end.
"""

import argparse
import contextlib
import datetime
import json
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

import bucket_order  # beside this file (bench/peers/, build/bench/, libexec/gradwire/)
import local_updates
from peer_jobs import (BIBLE_CORPUS, FASHION_MNIST_DIR, ImageJob, TextJob,
                       load_initial_weights, lr_at, make_model, make_optimizer,
                       parameter_crc32, recipe, shard)


# ---- communication hooks ----------------------------------------------------------------

def ring_allreduce_wire_bytes(nbytes, world):
    """What one rank sends in Gloo's ring allreduce (gradwire's comm/wire_bytes.h)."""
    return 0 if world < 2 else 2 * (world - 1) * ((nbytes + world - 1) // world)


class ByteCounter:
    """Counts the bytes each rank hands to dist.all_reduce while it is `active` (during
    backward, where DDP runs the hooks and the callbacks they chain: PowerSGD sends Q from
    P's callback), and what its sends put on the wire."""

    def __init__(self):
        self.contributed = 0
        self.wire = 0
        self.active = False
        self.gradwire = None  # gradwire's hook state, which counts its own bytes
        self._all_reduce = dist.all_reduce
        dist.all_reduce = self._counting_all_reduce

    def _counting_all_reduce(self, tensor, *args, **kwargs):
        if self.active:
            nbytes = tensor.numel() * tensor.element_size()
            self.contributed += nbytes
            self.wire += ring_allreduce_wire_bytes(nbytes, dist.get_world_size())
        return self._all_reduce(tensor, *args, **kwargs)



def gloo_sums_bfloat16():
    try:
        probe = torch.zeros(1, dtype=torch.bfloat16)
        dist.all_reduce(probe)
        return True
    except RuntimeError:
        return False


def ring_allreduce_(flat, counter):
    """Sums `flat` (1-D, any dtype) over all ranks in place: reduce-scatter, then allgather,
    each W-1 exchanges of one chunk with the ring's neighbours."""
    world, rank = dist.get_world_size(), dist.get_rank()
    counter.contributed += flat.numel() * flat.element_size()
    if world == 1:
        return flat
    chunks = list(flat.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world

    def pass_on(send, recv):
        """Sends `send` to the right, returns what came from the left in `recv`'s shape."""
        incoming = torch.empty_like(recv)
        counter.wire += send.numel() * send.element_size()
        ops = [dist.P2POp(dist.isend, send.contiguous(), right),
               dist.P2POp(dist.irecv, incoming, left)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return incoming

    for k in range(world - 1):
        send, recv = chunks[(rank - k) % world], chunks[(rank - k - 1) % world]
        recv.copy_(recv.float().add_(pass_on(send, recv).float()))
    for k in range(world - 1):
        send, recv = chunks[(rank - k + 1) % world], chunks[(rank - k) % world]
        recv.copy_(pass_on(send, recv))
    return flat


def bf16_ring_hook(counter):
    """DDP's bf16_compress_hook (cast to bfloat16, divide by the world, sum, cast back) with
    the sum as a ring over send/recv, for Gloo builds without a bfloat16 allreduce."""
    def hook(state, bucket):
        buffer = bucket.buffer()
        compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())
        ring_allreduce_(compressed, counter)
        buffer.copy_(compressed)
        future = torch.futures.Future()
        future.set_result(buffer)
        return future
    return hook


def import_gradwire():
    """The Python module: from PYTHONPATH, else the source tree's build."""
    try:
        import gradwire
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "build", "python"))
        import gradwire
    return gradwire


def link_bits_per_s(text):
    """tc's notation (10mbit, 1gbit, 500kbit) in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for suffix, scale in units.items():
        if text.lower().endswith(suffix):
            return float(text[:-len(suffix)]) * scale
    return float(text)


def make_diloco(model, optimizer, args):
    """--strategy diloco: gradwire.DiLoCo over the model, with the trainer's flags."""
    gradwire = import_gradwire()
    given = {"inner_steps": args.inner_steps, "fragments": args.fragments,
             "delay": args.fragment_delay, "outer_lr": args.outer_lr,
             "outer_momentum": args.outer_momentum, "outer_warmup": args.outer_warmup,
             "codec": args.compressor}
    options = {k: v for k, v in given.items() if v is not None}
    if options.get("inner_steps", "auto") != "auto":
        options["inner_steps"] = int(options["inner_steps"])
    return gradwire.DiLoCo(model, optimizer, link_bits_per_s=link_bits_per_s(args.link_bandwidth),
                           **options)


def register_hook(ddp, optimizer, args, total_steps, counter):
    """Registers --hook on `ddp`; returns the codec description for the summary."""
    if args.hook == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        return "ddp:allreduce"
    if args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return "ddp:fp16"
    if args.hook == "bf16":
        if gloo_sums_bfloat16():
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
            return "ddp:bf16"
        ddp.register_comm_hook(None, bf16_ring_hook(counter))
        return "ddp:bf16(ring over send/recv: Gloo has no bfloat16 sum)"
    if args.hook == "gradwire":
        # gradwire's codecs as DDP's hook. Its collectives run in C++, past dist.all_reduce:
        # its bytes come from its own counters.
        gradwire = import_gradwire()
        # auto's decisions (the gradwire.ddp logger, rank 0) into the run's log.
        log = logging.getLogger("gradwire")
        log.setLevel(logging.INFO)
        log.addHandler(logging.StreamHandler(sys.stdout))
        state, hook = gradwire.ddp.hook(args.gradwire_codec, model=ddp.module,
                                        optimizer=optimizer, bucket_cap_mb=args.bucket_mb,
                                        first_bucket_mb=args.gradwire_first_bucket_mb,
                                        quantized_path=args.gradwire_quantized_path,
                                        link_bits_per_s=link_bits_per_s(args.link_bandwidth))
        ddp.register_comm_hook(state, hook)
        counter.gradwire = state
        return f"ddp:gradwire-{state.codec}"
    start = args.powersgd_start_iter
    if start < 0:
        start = max(2, total_steps // 10)
    state = powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=args.powersgd_rank,
        start_powerSGD_iter=start, use_error_feedback=True, warm_start=True,
        random_seed=args.seed)
    if args.powersgd_buckets == "ddp":
        # DDP's buckets, each bucket's hook after the one before (bucket_order.py).
        ddp.register_comm_hook(state, bucket_order.in_bucket_order(powerSGD_hook.powerSGD_hook))
    else:
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return (f"ddp:powersgd:rank={args.powersgd_rank},start_iter={start},ef=1,warm_start=1"
            + (",buckets=ddp" if args.powersgd_buckets == "ddp" else ""))


# ---- the training loop --------------------------------------------------------------------

class TrainingClock:
    """A stopwatch that can be paused: training time without the evaluations."""

    def __init__(self):
        self.banked, self.started = 0.0, time.monotonic()

    def pause(self):
        if self.started is not None:
            self.banked += time.monotonic() - self.started
            self.started = None

    def resume(self):
        if self.started is None:
            self.started = time.monotonic()

    def seconds(self):
        return self.banked + (time.monotonic() - self.started if self.started is not None else 0)


def show(job, value):
    """gradwire's Metric::show."""
    if job.higher_is_better:
        return f"{job.metric} {100 * value:.2f}%"
    return f"{job.metric} {value:.4f}"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hook",
                   choices=["allreduce", "fp16", "bf16", "powersgd", "gradwire", "localsgd"],
                   default="allreduce")
    p.add_argument("--localsgd-period", type=int, default=10,
                   help="with --hook localsgd: steps between model averages")
    p.add_argument("--localsgd-warmup", type=int, default=0,
                   help="with --hook localsgd: steps of gradient allreduce first")
    p.add_argument("--gradwire-codec", default="auto",
                   help="with --hook gradwire: gradwire.ddp.hook's codec (auto, int8, ...)")
    p.add_argument("--gradwire-first-bucket-mb", type=float, default=1.0,
                   help="with --hook gradwire: gradwire's first bucket (first_bucket_mb)")
    p.add_argument("--gradwire-quantized-path", default="auto",
                   choices=["auto", "ring", "reduce-scatter"],
                   help="with --hook gradwire: gradwire.ddp.hook's quantized_path")
    p.add_argument("--strategy", choices=["ddp", "diloco"], default="ddp",
                   help="diloco: gradwire.DiLoCo instead of DDP (the Python module)")
    # diloco's flags left out keep gradwire.DiLoCo's defaults (the trainer's).
    p.add_argument("--inner-steps", help="diloco: H, or auto")
    p.add_argument("--fragments", type=int)
    p.add_argument("--fragment-delay", type=int)
    p.add_argument("--outer-lr", type=float)
    p.add_argument("--outer-momentum", type=float)
    p.add_argument("--outer-warmup", type=int)
    p.add_argument("--compressor", help="diloco: the outer codec")
    p.add_argument("--link-bandwidth", default="1gbit",
                   help="the link (tc notation) diloco's inner_steps auto plans for and "
                        "the gradwire hook's auto predicts with")
    p.add_argument("--model", default="cnn")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    # The recipe: what is not given is the model's (gradwire's recipe.h).
    p.add_argument("--optimizer", choices=["sgd", "adamw"])
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--lr-schedule", dest="schedule", choices=["constant", "cosine"])
    p.add_argument("--warmup", type=float)
    p.add_argument("--clip-norm", type=float)
    p.add_argument("--accumulate", type=int, default=1,
                   help="micro-batches per step, all but the last under ddp.no_sync()")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=FASHION_MNIST_DIR)
    p.add_argument("--corpus", default=BIBLE_CORPUS, help="gpt's text file")
    p.add_argument("--initial-weights", default="",
                   help="start from gradwire's weights (gradwire train --save-initial-weights); "
                        "required for gpt, whose initialization libtorch's generator draws")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps")
    p.add_argument("--metrics", default="", help="JSON Lines metrics file (rank 0)")
    p.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    p.add_argument("--flush-denormal", action="store_true",
                   help="flush subnormal floats to zero (torch.set_flush_denormal), as "
                        "gradwire train --flush-denormal")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--powersgd-rank", type=int, default=2)
    p.add_argument("--powersgd-buckets", choices=["one", "ddp"], default="one",
                   help="one: the whole model in one bucket; ddp: DDP's buckets, each "
                        "bucket's hook after the one before (bucket_order.py)")
    p.add_argument("--powersgd-start-iter", type=int, default=-1,
                   help="vanilla allreduce before this step (default: 10%% of the steps)")
    p.add_argument("--progress", choices=["lines", "none"], default="lines")
    p.add_argument("--timeline", default="",
                   help="record where each step's time goes (gradwire.timeline: forward, "
                        "backward, step and gradwire's own spans) to this trace file (rank 0)")
    p.add_argument("--print-shard", metavar="SIZE,WORLD,RANK,SEED,EPOCH",
                   help="print DistributedSampler's shard as JSON and exit")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.print_shard:
        size, world, rank, seed, epoch = (int(v) for v in args.print_shard.split(","))
        print(json.dumps(shard(size, rank, world, seed, epoch)))
        return 0
    r = recipe(args)
    if args.epochs < 1 or args.batch_size < 1 or args.accumulate < 1 or not r["lr"] > 0:
        raise SystemExit("ddp_peer: --epochs, --batch-size and --accumulate must be at least 1, "
                         "--lr positive")
    if args.model == "gpt" and not args.initial_weights:
        raise SystemExit("ddp_peer: gpt needs --initial-weights FILE (gradwire train --model gpt "
                         "--seed S --save-initial-weights FILE)")
    # Before any thread starts: threads inherit the floating-point mode of their creator.
    if args.flush_denormal and not torch.set_flush_denormal(True):
        raise SystemExit("ddp_peer: --flush-denormal: this CPU has no flush-to-zero mode")
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    timeout = datetime.timedelta(seconds=float(os.environ.get("GRADWIRE_TIMEOUT", "300")))
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    root = rank == 0

    job = TextJob(args, root) if args.model == "gpt" else ImageJob(args, root)
    torch.manual_seed(args.seed)
    model = make_model(args.model)
    if args.initial_weights:
        load_initial_weights(model, args.initial_weights)
    bucket_mb = args.bucket_mb
    diloco = None  # --strategy diloco: no DDP; the model itself runs the batches
    if args.hook == "powersgd" and args.strategy == "ddp" and args.powersgd_buckets == "one":
        # PowerSGD's hook sends its second allreduce (Q) from the first's (P) callback. With
        # more than one bucket, ranks can then hand Gloo their collectives in different
        # orders, and Gloo aborts ("op.preamble.length <= op.nbytes", seen on cnn-wide): one
        # bucket for the whole model, the first included (DDP's documented knob).
        bucket_mb = max(bucket_mb, 4 * sum(p.numel() for p in model.parameters()) / 2**20 + 1)
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(bucket_mb * 2**20)
    ddp = model
    if args.strategy == "ddp":
        ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    per_rank = (job.train_size() + world - 1) // world
    step_samples = args.batch_size * args.accumulate
    steps = (per_rank + step_samples - 1) // step_samples
    counter = ByteCounter()
    optimizer = make_optimizer(r, model, job.no_decay())
    local_sgd = None  # --hook localsgd: PyTorch's post-local SGD (local_updates.py)
    if args.strategy == "diloco":
        diloco = make_diloco(model, optimizer, args)
        counter.gradwire = diloco
        outer_codec = args.compressor or import_gradwire()._C.DILOCO_DEFAULTS["codec"]
        codec = f"python:diloco/{outer_codec}"
    elif args.hook == "localsgd":
        local_sgd = local_updates.LocalSGD(ddp, model, optimizer, args.localsgd_period,
                                           args.localsgd_warmup, counter)
        codec = local_sgd.description()
    else:
        codec = register_hook(ddp, optimizer, args, steps * args.epochs, counter)
    initial_checksum = parameter_crc32(model)
    numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    metrics = open(args.metrics, "w") if root and args.metrics else None
    if root:
        micro = f" x {args.accumulate} micro-batches" if args.accumulate > 1 else ""
        print(f"{world} workers, model {args.model}, {codec}, {job.train_size()} training "
              f"samples, batch {args.batch_size} per worker{micro}, {r['optimizer']} lr "
              f"{r['lr']:g}", flush=True)

    def write(line):
        if metrics:
            metrics.write(json.dumps(line) + "\n")
            metrics.flush()

    clock = TrainingClock()
    if local_sgd is not None:
        local_sgd.clock = clock
    state = {"step": 0, "evaluated": 0, "quality": 0.0}

    def stop_clock():
        # DiLoCo's exchange in flight lands first: none runs on in time not counted.
        if diloco is not None:
            diloco.wait_for_exchange()
        clock.pause()

    def synchronized_model():
        # What the ranks agree on (local-update methods: the model as last synchronized).
        if diloco is not None:
            return local_updates.diloco_synchronized_model(diloco, model)
        if local_sgd is not None:
            return local_sgd.synchronized_model()
        return contextlib.nullcontext()

    def evaluate_now(epoch):  # with the clock paused
        with span("evaluate", "evaluate"):
            evaluate_in_span(epoch)

    def evaluate_in_span(epoch):
        if root:
            with synchronized_model():
                state["quality"] = job.evaluate(model)
            write({"event": "eval", "epoch": epoch, "step": state["step"],
                   "train_s": clock.seconds(), job.metric: state["quality"]})
        dist.barrier()
        state["evaluated"] = state["step"]

    def all_ranks_sum(value):
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0])

    def span(name, category="compute"):  # gradwire.timeline.span when --timeline is given
        return contextlib.nullcontext()

    if args.timeline:
        timeline = import_gradwire().timeline
        timeline.enable()
        span = timeline.span
    job_start = time.monotonic()
    progress_every = max(1, (steps + 3) // 4)
    last = {}
    for epoch in range(1, args.epochs + 1):
        indices = torch.tensor(shard(job.train_size(), rank, world, args.seed, epoch),
                               dtype=torch.int64)
        clock.resume()
        epoch_start = clock.seconds()
        loss_sum, samples = 0.0, 0
        for step in range(steps):
            batch = indices[step * step_samples:(step + 1) * step_samples]
            optimizer.zero_grad(set_to_none=True)
            # gradwire's take_step: micro-batches weighted by their share of the batch, all
            # but the last under no_sync(); the clip sees the averaged gradient.
            micro_batches = batch.split(args.batch_size)
            for k, part in enumerate(micro_batches):
                last_part = k + 1 == len(micro_batches)
                context = (contextlib.nullcontext() if last_part or diloco is not None
                           else ddp.no_sync())
                with context:
                    with span("forward"):
                        loss = job.loss(ddp, part)
                    loss_sum += loss.item() * len(part)
                    if len(part) < len(batch):
                        loss = loss * (len(part) / len(batch))
                    counter.active = True
                    try:
                        with span("backward"):
                            loss.backward()
                    finally:
                        counter.active = False
            if r["clip_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), r["clip_norm"])
            if r["schedule"] != "constant":
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(r, state["step"], steps * args.epochs)
            with span("step", "step"):
                (diloco or local_sgd or optimizer).step()
            state["step"] += 1
            samples += len(batch)
            if root and args.progress == "lines" and ((step + 1) % progress_every == 0 or step + 1 == steps):
                rate = samples * world / max(1e-9, clock.seconds() - epoch_start)
                print(f"epoch {epoch}/{args.epochs} {100 * (step + 1) // steps:3d}% loss "
                      f"{loss_sum / samples:.4f} {rate:.0f} samples/s", flush=True)
            if args.eval_every > 0 and state["step"] % args.eval_every == 0 and step + 1 < steps:
                stop_clock()
                evaluate_now(epoch)
                clock.resume()
        # DiLoCo's ranks train apart between rounds: the job ends with one model on every
        # rank (a collective, counted as training), and that model is evaluated.
        if diloco is not None and epoch == args.epochs:
            diloco.finish()
            state["evaluated"] = -1
        if local_sgd is not None and epoch == args.epochs:
            local_sgd.finish()
            state["evaluated"] = -1
        # Evaluation and the epoch's bookkeeping are not training time.
        stop_clock()
        train_s = clock.seconds() - epoch_start
        if state["evaluated"] != state["step"]:
            evaluate_now(epoch)
        mean_loss = all_ranks_sum(loss_sum / max(1, samples)) / world
        contributed, wire = counter.contributed, counter.wire
        if counter.gradwire is not None:  # cumulative since the hook was made
            traffic = counter.gradwire.traffic()
            contributed, wire = traffic["bytes_contributed"], traffic["bytes_on_wire"]
        contributed = all_ranks_sum(contributed)
        wire = all_ranks_sum(wire)
        dense = 4.0 * numel * state["step"] * world
        dense_wire = ring_allreduce_wire_bytes(4 * numel, world) * state["step"] * world
        last = {"epoch": epoch, "train_loss": mean_loss, job.metric: state["quality"],
                "elapsed_s": time.monotonic() - job_start, "train_s": clock.seconds(),
                "steps": state["step"], "samples_per_s": samples * world / train_s,
                "bytes_contributed": int(contributed), "bytes_on_wire": int(wire),
                "bytes_dense": int(dense), "bytes_dense_on_wire": int(dense_wire)}
        write(dict(last, event="epoch"))
        if root:
            print(f"epoch {epoch}/{args.epochs}: train_loss {mean_loss:.4f} "
                  f"{show(job, state['quality'])} {train_s:.1f} s on the wire "
                  f"{wire / 1e6:.2f} MB ({wire / dense_wire if dense_wire else 0:.4f} of dense "
                  f"fp32's)", flush=True)

    if args.timeline:
        timeline.write(args.timeline)
    checksum = parameter_crc32(model)
    gathered = [None] * world
    dist.all_gather_object(gathered, checksum)
    summary = dict(last, event="summary", elapsed_s=time.monotonic() - job_start,
                   train_s=clock.seconds(), workers=world, strategy=args.strategy,
                   compressor="gradwire" if diloco is not None else args.hook,
                   codec=codec, model=args.model, metric=job.metric, batch_size=args.batch_size,
                   recipe=dict(r, accumulate=args.accumulate),
                   initial_checksum=initial_checksum, param_checksums=gathered)
    write(summary)
    if root:
        print(f"summary: {world} workers, {args.model}, {codec}: "
              f"{show(job, summary[job.metric])}, {summary['train_s']:.1f} s training, "
              f"bytes_on_wire/bytes_dense_on_wire "
              f"{summary['bytes_on_wire'] / max(1, summary['bytes_dense_on_wire']):.4f}, "
              f"ranks' parameters {'identical' if len(set(gathered)) == 1 else 'DIFFER'}",
              flush=True)
    if metrics:
        metrics.close()
    # Leave together (bounded), then exit without the process group's teardown, which was
    # once seen spinning after its peer had gone.
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    except RuntimeError as e:
        print(f"ddp_peer: rank {rank}: leaving without the others: {e}", file=sys.stderr)
    return 0 if len(set(gathered)) == 1 else 4


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
