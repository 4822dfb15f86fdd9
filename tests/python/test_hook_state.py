"""gradwire.ddp.hook's state: each rank's own through a checkpoint (resumed equals
uninterrupted, bit for bit; another rank's state refused), copies and unpickling that talk to
no other rank, and the codec state of parameters DDP found unused."""
import copy
import io
import pickle

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire
from ddp_models import BUCKET_MB, Net, assert_params_equal, batches, train
from ranks import error_of, expect_success, run_ranks


# --- state through a checkpoint ----------------------------------------------------------

def resume_worker(rank, world, codec, how):
    """Every rank saves its own checkpoint (model, optimizer, hook state) at step 10, goes
    on to step 16; then resumes from it in a new DDP. Also: rank 0's state loaded on rank 1
    (the mistake of saving one rank's state for all)."""
    data = batches(rank, 16, seed=3)

    def step(ddp, opt, x, y):
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    state, hook = gradwire.ddp.hook(codec)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for x, y in data[:10]:
        step(ddp, opt, x, y)
    blob = io.BytesIO()
    hook_state = state.state_dict() if how == "state_dict" else pickle.dumps(state)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "hook": hook_state}, blob)
    for x, y in data[10:]:  # the uninterrupted run goes on
        step(ddp, opt, x, y)
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    # The resumed run: a new model, optimizer, DDP and hook state from the checkpoint.
    blob.seek(0)
    saved = torch.load(blob)
    resumed = Net()
    resumed.load_state_dict(saved["model"])
    ddp2 = DDP(resumed, bucket_cap_mb=BUCKET_MB)
    if how == "state_dict":
        state2, hook2 = gradwire.ddp.hook(codec)
        state2.load_state_dict(saved["hook"])
    else:
        state2, hook2 = pickle.loads(saved["hook"]), gradwire.ddp._gradwire_hook
    ddp2.register_comm_hook(state2, hook2)
    opt2 = torch.optim.SGD(resumed.parameters(), lr=0.05, momentum=0.9)
    opt2.load_state_dict(saved["opt"])
    for x, y in data[10:]:
        step(ddp2, opt2, x, y)

    rank0s = [saved["hook"]]
    dist.broadcast_object_list(rank0s)
    fresh, _ = gradwire.ddp.hook(codec)
    if how == "state_dict":
        wrong_rank = error_of(lambda: fresh.load_state_dict(rank0s[0]))
    else:
        wrong_rank = error_of(lambda: pickle.loads(rank0s[0]))
    return uninterrupted, [p.detach().clone() for p in resumed.parameters()], wrong_rank


@pytest.mark.parametrize("codec,how", [("int8", "state_dict"), ("topk:density=0.05", "state_dict"),
                                       ("powersgd:rank=2", "pickle")])
def test_each_ranks_resumed_run_equals_its_uninterrupted_one(codec, how):
    # The resumed DDP starts from its first-iteration buckets and rebuilds them, where the
    # uninterrupted one does not: gradwire's exchange does not depend on DDP's buckets.
    results = expect_success(run_ranks(2, resume_worker, codec, how))
    for rank, (a, b, wrong_rank) in enumerate(results):
        assert_params_equal(a, b, "%s via %s, rank %d" % (codec, how, rank))
    assert results[0][2] == "ok"
    name, message = results[1][2]
    assert name == "MismatchError" and "rank 0's of 2 ranks" in message, results[1][2]
    assert "this is rank 1 of 2" in message, message


# --- copies and unpickling are local --------------------------------------------------------

def local_copies_worker(rank, world):
    """Rank 0 alone builds, deep-copies and pickles states; rank 1 unpickles rank 0's (a
    broadcast object); the program's own collective and a DDP with the hook then run as if
    none of that happened, the unpickled state on a process group set after unpickling."""
    first, _ = gradwire.ddp.hook("none")
    if rank == 0:
        gradwire.ddp.hook("int8")
        copy.deepcopy(first)
        pickle.loads(pickle.dumps(first))
    objects = [first if rank == 0 else None]
    dist.broadcast_object_list(objects)
    total = torch.ones(1)
    dist.all_reduce(total)

    group = dist.new_group([0, 1])
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB, process_group=group)
    state = objects[0]
    state.process_group = group
    ddp.register_comm_hook(state, gradwire.ddp._gradwire_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches(rank, 6):
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    return total.item(), [p.detach().clone() for p in model.parameters()], train(rank, None, 6)[0]


def test_copies_and_unpickling_talk_to_no_other_rank():
    for rank, (total, hooked, reference) in enumerate(
            expect_success(run_ranks(2, local_copies_worker, timeout=90))):
        assert total == 2.0
        # "none" over two ranks is DDP's allreduce bit for bit.
        assert_params_equal(hooked, reference, "rank %d" % rank)


# --- parameters DDP found unused --------------------------------------------------------------

class TwoHeads(torch.nn.Module):
    """A head `b` that some steps leave out, whose gradient depends on nothing else, and a
    parameter `c` every step uses with a gradient of exactly zero (so that it moves no
    codec's scale)."""

    def __init__(self):
        super().__init__()
        self.b = torch.nn.Linear(12, 6)
        self.c = torch.nn.Parameter(torch.ones(6))

    def forward(self, x, use_b):
        return self.b(x) if use_b else None, 0.0 * self.c.sum()


def unused_worker(rank, world, codec, pattern):
    """DDP with find_unused_parameters over TwoHeads; the steps where pattern is False leave
    `b` out on every rank. The parameters of `b` at the end."""
    torch.manual_seed(0)
    model = TwoHeads()
    # The program's own gradient hooks on b's weight, one before DDP and one after the
    # first step (when the hook registers its own on every parameter): both keep running.
    calls = [0, 0]

    def count(which):
        def hook(grad):
            calls[which] += 1
        return hook
    model.b.weight.register_hook(count(0))
    ddp = DDP(model, find_unused_parameters=True)
    state, hook = gradwire.ddp.hook(codec)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    data = [(torch.randn(8, 12, generator=g), torch.randint(0, 6, (8,), generator=g))
            for _ in range(sum(pattern))]
    used = 0
    for step, use_b in enumerate(pattern):
        if step == 1:
            model.b.weight.register_hook(count(1))
        opt.zero_grad(set_to_none=True)
        out, zero = ddp(data[used][0] if use_b else data[0][0], use_b)
        loss = zero + (F.cross_entropy(out, data[used][1]) if use_b else 0.0)
        loss.backward()
        opt.step()  # skips b where its .grad stayed None
        used += use_b
    return [p.detach().clone() for p in model.b.parameters()], calls


@pytest.mark.parametrize("codec", ["topk:density=0.1", "int8", "powersgd:rank=2"])
def test_a_parameter_unused_everywhere_keeps_its_codec_state(codec):
    """b's training with steps that leave it out on every rank equals b's training without
    those steps: its error feedback (or PowerSGD's Q) waits for the next step that uses it,
    as DistributedOptimizer's does, instead of being sent into an average DDP throws away."""
    skipping = expect_success(run_ranks(2, unused_worker, codec, [True, False, True, False, True]))
    straight = expect_success(run_ranks(2, unused_worker, codec, [True, True, True]))
    for rank in range(2):
        assert_params_equal(skipping[rank][0], straight[rank][0], "%s, rank %d" % (codec, rank))
        assert skipping[rank][1] == [3, 2] and straight[rank][1] == [3, 2], (
            skipping[rank][1], straight[rank][1])
