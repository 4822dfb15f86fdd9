"""gradwire.DiLoCo: the outer loop against a reference written here from the algorithm's
definition (docs/ALGORITHMS.md, DiLoCo), one model on every rank after finish(), an exact
resume from a checkpoint taken while an exchange is in flight (waiting for the exchanges
after the resume), and its errors."""
import inspect
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradwire
from ranks import (check_dead_peer_failed, error_of, expect_success, first_failing_step,
                   run_ranks)


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


def batches(rank, steps, seed=0):
    g = torch.Generator().manual_seed(100 * seed + rank)
    return [(torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g))
            for _ in range(steps)]


def inner_step(model, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()


# --- the outer loop against a reference ---------------------------------------------------

H, STEPS, INNER_LR, OUTER_LR, MU = 3, 9, 0.1, 0.7, 0.9


def diloco_worker(rank, world, warmup=0):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with gradwire.DiLoCo(model, opt, inner_steps=H, fragments=1, outer_lr=OUTER_LR,
                         outer_momentum=MU, outer_warmup=warmup, codec="none") as diloco:
        for x, y in batches(rank, STEPS):
            inner_step(model, opt, x, y)
            diloco.step()
        stats = diloco.stats()
    return [p.detach().clone() for p in model.parameters()], stats


def reference(world, warmup=0):
    """Every rank's inner SGD, simulated one after the other; every H steps the outer
    gradient's mean Delta, m <- mu m + Delta, theta_g <- theta_g - lr (Delta + mu m), and
    every rank restarts from theta_g; the k-th outer step's lr is OUTER_LR min(1, (k + 1) /
    warmup) with a warm-up."""
    models = [make_model() for _ in range(world)]
    opts = [torch.optim.SGD(m.parameters(), lr=INNER_LR) for m in models]
    data = [batches(r, STEPS) for r in range(world)]
    global_params = [p.detach().clone() for p in models[0].parameters()]
    momentum = [torch.zeros_like(p) for p in global_params]
    for step in range(STEPS):
        for r in range(world):
            inner_step(models[r], opts[r], *data[r][step])
            opts[r].step()
        if (step + 1) % H == 0:
            k_outer = (step + 1) // H - 1
            lr = OUTER_LR * min(1.0, (k_outer + 1) / warmup) if warmup else OUTER_LR
            with torch.no_grad():
                for k, g in enumerate(global_params):
                    delta = sum(g - list(m.parameters())[k] for m in models) / world
                    momentum[k] = MU * momentum[k] + delta
                    g -= lr * (delta + MU * momentum[k])
                for m in models:
                    for p, g in zip(m.parameters(), global_params):
                        p.copy_(g)
    return global_params


@pytest.mark.parametrize("warmup", [0, 3])
def test_outer_steps_match_the_reference(warmup):
    results = expect_success(run_ranks(2, diloco_worker, warmup))
    want = reference(2, warmup)
    for rank, (params, stats) in enumerate(results):
        assert stats["outer_steps"] == STEPS // H, stats
        for k, (got, ref) in enumerate(zip(params, want)):
            # The mean over two ranks in float32, summed in another order than here.
            assert (got - ref).abs().max().item() <= 1e-6, (rank, warmup, k)
    if warmup:  # the warm-up changed the outcome
        assert any((a - b).abs().max().item() > 1e-4 for a, b in zip(want, reference(2)))


def optimizer_step_worker(rank, world, how):
    """The reference's loop, but the program steps the inner optimizer itself (as
    GradScaler, Lightning or Hugging Face's Trainer do), under an LR scheduler made after
    DiLoCo (which wraps optimizer.step again), or steps it with a closure."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with gradwire.DiLoCo(model, opt, inner_steps=H, fragments=1, outer_lr=OUTER_LR,
                         outer_momentum=MU, codec="none") as diloco:
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        for x, y in batches(rank, STEPS):
            if how == "closure":
                def closure():
                    inner_step(model, opt, x, y)
                    return 0.0
                opt.step(closure)
            else:
                inner_step(model, opt, x, y)
                opt.step()
            schedule.step()
        stats = diloco.stats()
    opt.zero_grad()
    opt.step()  # after finish(): a local step again (zero gradients: changes nothing)
    return [p.detach().clone() for p in model.parameters()], stats


@pytest.mark.parametrize("how", ["step", "closure"])
def test_the_inner_optimizers_own_step_synchronizes_as_diloco_step_does(how):
    results = expect_success(run_ranks(2, optimizer_step_worker, how))
    want = reference(2)
    for rank, (params, stats) in enumerate(results):
        assert stats["outer_steps"] == STEPS // H, stats
        for k, (got, ref) in enumerate(zip(params, want)):
            assert (got - ref).abs().max().item() <= 1e-6, (rank, how, k)


def exception_worker(rank, world):
    """An exception inside the block after 6 steps, with H 4 in two fragments and a delay
    of 1: fragment 0 landed at step 3, fragment 1 at step 5, and fragment 0 went out again
    at step 6 (in flight). The model afterwards against the agreed one just before; the
    optimizer's step() and DiLoCo's step() afterwards."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    data = batches(rank, 12)
    agreed = None
    try:
        with gradwire.DiLoCo(model, opt, inner_steps=4, fragments=2, delay=1,
                             codec="int8") as diloco:
            for i, (x, y) in enumerate(data[:6]):
                if i == 4:
                    saved = diloco.state_dict()  # fragment 1 in flight (sent at step 4)
                inner_step(model, opt, x, y)
                diloco.step()
            agreed = {k: v.clone() for k, v in diloco.global_model_state().items()}
            raise RuntimeError("the data loader broke")
    except RuntimeError as e:
        raised = str(e)
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    before = [p.detach().clone() for p in model.parameters()]
    inner_step(model, opt, *data[6])
    opt.step()  # a local step now: no exchange, no error
    moved = [not torch.equal(a, p) for a, p in zip(before, model.parameters())]
    step_after = error_of(diloco.step)
    # A rollback to step 4 synchronizes again: fragment 1 lands at step 5, fragment 0 goes
    # out at step 6 and lands at step 7.
    diloco.load_state_dict(saved)
    for x, y in data[4:8]:
        inner_step(model, opt, x, y)
        opt.step()
    rounds = diloco.stats()["exchanges"]
    diloco.finish()
    return (raised, agreed, after, step_after, moved, rounds,
            [p.detach().clone() for p in model.parameters()])


def test_leaving_the_block_on_an_exception_puts_back_the_agreed_model():
    results = expect_success(run_ranks(2, exception_worker))
    for rank, (raised, agreed, after, step_after, moved, rounds, final) in enumerate(results):
        assert raised == "the data loader broke"
        for name in agreed:
            assert torch.equal(after[name], agreed[name]), (rank, name)
            assert torch.equal(after[name], results[0][2][name]), (rank, name)
        assert step_after[0] == "ConfigError", step_after
        assert any(moved), rank
        assert rounds == 3, rounds
        for a, b in zip(final, results[0][6]):
            assert torch.equal(a, b), rank


class TiedNet(nn.Module):
    """A language model's shape: a head tied to the embedding, and a BatchNorm's buffers."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.norm(self.embed(tokens))))


def tied_worker(rank, world):
    torch.manual_seed(0)
    model = TiedNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    diloco = gradwire.DiLoCo(model, opt, inner_steps=2, fragments=1, codec="none")
    for step in range(5):  # rounds land at steps 2 and 4; step 5 trains apart
        tokens = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(tokens), tokens).backward()
        diloco.step()
    state = diloco.global_model_state()
    live = {k: v.clone() for k, v in model.state_dict().items()}
    diloco.finish()
    return state, live


def test_the_agreed_model_holds_every_key_of_the_state_dict_tied_weights_and_buffers():
    results = expect_success(run_ranks(2, tied_worker))
    (state0, live0), (state1, live1) = results
    assert set(state0) == set(live0)
    for name in state0:
        if name.endswith("num_batches_tracked"):  # an integer counter: each rank's own
            continue
        assert torch.equal(state0[name], state1[name]), name
    assert torch.equal(state0["head.weight"], state0["embed.weight"])
    # The ranks had trained apart since step 4: the live models (weights, statistics) differ.
    assert not torch.equal(live0["embed.weight"], live1["embed.weight"])
    assert not torch.equal(live0["norm.running_mean"], live1["norm.running_mean"])


# --- finish() and the synchronized model --------------------------------------------------

def finish_worker(rank, world, codec):
    model = make_model(seed=rank)  # different starts: DiLoCo takes rank 0's
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    diloco = gradwire.DiLoCo(model, opt, inner_steps=4, fragments=2, delay=1, codec=codec)
    for x, y in batches(rank, 11):
        inner_step(model, opt, x, y)
        diloco.step()
    global_state = {k: v.clone() for k, v in diloco.global_model_state().items()}
    local = [p.detach().clone() for p in model.parameters()]
    diloco.finish()
    return global_state, local, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("codec", ["int4", "int8", "sparseloco:chunk=64,density=0.1"])
def test_finish_leaves_one_model_on_every_rank(codec):
    results = expect_success(run_ranks(3, finish_worker, codec))
    for rank in range(1, 3):
        for name in results[0][0]:
            assert torch.equal(results[rank][0][name], results[0][0][name]), (codec, name)
        for k, p in enumerate(results[rank][2]):
            assert torch.equal(p, results[0][2][k]), (codec, rank, k)
    # Before finish() the ranks had trained apart since their last synchronization.
    assert any(not torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


# --- a resume while an exchange is in flight ----------------------------------------------

def resume_worker(rank, world, codec):
    data = batches(rank, 12, seed=5)
    options = dict(inner_steps=4, fragments=2, delay=2, codec=codec)

    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    diloco = gradwire.DiLoCo(model, opt, **options)
    for x, y in data[:7]:  # fragment 1 went out at step 6, lands at step 8
        inner_step(model, opt, x, y)
        diloco.step()
    blob = io.BytesIO()
    torch.save(diloco.state_dict(), blob)  # this rank's model, DiLoCo and optimizer
    for x, y in data[7:]:
        inner_step(model, opt, x, y)
        diloco.step()
    diloco.finish()
    straight = [p.detach().clone() for p in model.parameters()]

    blob.seek(0)
    saved = torch.load(blob)
    model2 = make_model(seed=9)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    diloco2 = gradwire.DiLoCo(model2, opt2, **options)
    diloco2.load_state_dict(saved)
    for x, y in data[7:]:
        inner_step(model2, opt2, x, y)
        diloco2.step()
        # Waiting for the exchange in flight (as a program that stops its clock to
        # evaluate does) changes nothing: it still lands at its step.
        diloco2.wait_for_exchange()
    diloco2.finish()
    return straight, [p.detach().clone() for p in model2.parameters()]


# sparseloco: each rank's own accumulator travels in its own checkpoint.
@pytest.mark.parametrize("codec", ["int8", "sparseloco:chunk=64,density=0.1"])
def test_resume_mid_exchange_equals_the_uninterrupted_run(codec):
    for rank, (a, b) in enumerate(expect_success(run_ranks(2, resume_worker, codec))):
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), (rank, k, (x - y).abs().max().item())


# --- a rollback while an exchange is in flight -------------------------------------------

def rollback_worker(rank, world):
    """Saves at step 7, trains to step 11 (the exchange sent at step 10 in flight: rank 1
    reaches it 0.5 s late, so rank 0's exchange thread is still in it), loads the checkpoint
    into the same DiLoCo and trains steps 7-15 again; against a run that never rolled back."""
    import time
    data = batches(rank, 16, seed=7)
    options = dict(inner_steps=4, fragments=2, delay=2, codec="int8")

    def train(steps, model, opt, diloco, late_at=None):
        for i in steps:
            if i == late_at and rank == 1:
                time.sleep(0.5)
            inner_step(model, opt, *data[i])
            diloco.step()

    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    diloco = gradwire.DiLoCo(model, opt, **options)
    train(range(7), model, opt, diloco)
    blob = io.BytesIO()
    torch.save(diloco.state_dict(), blob)
    train(range(7, 11), model, opt, diloco, late_at=10)
    blob.seek(0)
    start = time.monotonic()
    diloco.load_state_dict(torch.load(blob))
    load_seconds = time.monotonic() - start
    train(range(7, 16), model, opt, diloco)
    diloco.finish()
    rolled_back = [p.detach().clone() for p in model.parameters()]

    model2 = make_model()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    with gradwire.DiLoCo(model2, opt2, **options) as diloco2:
        train(range(16), model2, opt2, diloco2)
    return rolled_back, [p.detach().clone() for p in model2.parameters()], load_seconds


def test_a_rollback_during_an_exchange_waits_for_it_and_equals_the_straight_run():
    for rank, (a, b, seconds) in enumerate(expect_success(run_ranks(2, rollback_worker,
                                                                    timeout=90))):
        assert seconds < 10, (rank, seconds)
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), (rank, k, (x - y).abs().max().item())


def diverged_rollback_worker(rank, world, codec):
    """Rank 1's model diverges at step 3 (NaN): the round's exchange fails on every rank
    alike; every rank loads the checkpoint of step 2 and goes on. Against a run that never
    diverged."""
    data = batches(rank, 8, seed=8)
    options = dict(inner_steps=2, fragments=1, codec=codec)

    def train(steps, model, opt, diloco):
        for i in steps:
            inner_step(model, opt, *data[i])
            diloco.step()

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    diloco = gradwire.DiLoCo(model, opt, **options)
    train(range(2), model, opt, diloco)
    saved = io.BytesIO()
    torch.save(diloco.state_dict(), saved)
    inner_step(model, opt, *data[2])
    diloco.step()
    if rank == 1:
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
    inner_step(model, opt, *data[3])
    failure = error_of(diloco.step)
    saved.seek(0)
    diloco.load_state_dict(torch.load(saved))
    train(range(2, 8), model, opt, diloco)
    diloco.finish()
    rolled_back = [p.detach().clone() for p in model.parameters()]

    model2 = make_model()
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    with gradwire.DiLoCo(model2, opt2, **options) as diloco2:
        train(range(8), model2, opt2, diloco2)
    return failure, rolled_back, [p.detach().clone() for p in model2.parameters()]


@pytest.mark.parametrize("codec", ["int8", "sparseloco:chunk=64,density=0.1"])
def test_after_a_diverged_rank_every_rank_rolls_back_to_the_checkpoint(codec):
    for rank, (failure, a, b) in enumerate(expect_success(run_ranks(2, diverged_rollback_worker,
                                                                    codec, timeout=90))):
        assert failure[0] == "Error" and "rank 1" in failure[1], (rank, failure)
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), (rank, k, (x - y).abs().max().item())


# --- the defaults ---------------------------------------------------------------------------

def test_the_defaults_are_the_trainers_tuned_setting():
    """gradwire.DiLoCo takes `gradwire train --strategy diloco`'s defaults from the C++
    options (one definition): auto H, two fragments, plain averaging, int4."""
    defaults = {name: p.default for name, p in
                inspect.signature(gradwire.DiLoCo.__init__).parameters.items()}
    assert defaults["inner_steps"] == "auto"
    assert defaults["fragments"] == 2 and defaults["delay"] == 0
    assert defaults["outer_lr"] == 1.0 and defaults["outer_momentum"] == 0.0
    assert defaults["outer_warmup"] == 0 and defaults["codec"] == "int4"


def auto_h_log_worker(rank, world):
    """DiLoCo with H chosen for a 10 Mbit/s link: the lines the `gradwire` logger took at
    INFO, and the H in force."""
    import logging
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno == logging.INFO:
                lines.append(record.getMessage())
    log = logging.getLogger("gradwire")
    log.setLevel(logging.INFO)
    log.addHandler(Keep())
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with gradwire.DiLoCo(model, opt, link_bits_per_s=10e6, codec="int8") as diloco:
        for x, y in batches(rank, 40):
            inner_step(model, opt, x, y)
            diloco.step()
        stats = diloco.stats()
    return lines, stats["inner_steps"]


def test_the_choice_of_h_is_one_info_line_of_the_gradwire_logger_on_rank_0():
    """A person can follow what DiLoCo chose: rank 0 logs H and its reason once (after the
    probe steps), not every step; the other ranks say nothing."""
    (lines0, h0), (lines1, h1) = expect_success(run_ranks(2, auto_h_log_worker))
    assert h0 == h1 and h0 >= 10
    assert len(lines0) == 1, lines0
    assert f"diloco:inner_steps={h0}," in lines0[0] and "predicted" in lines0[0], lines0
    assert lines1 == []


# --- errors --------------------------------------------------------------------------------

def errors_worker(rank, world):
    out = {}
    outcome = error_of
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out["fragments"] = outcome(lambda: gradwire.DiLoCo(model, opt, inner_steps=4, fragments=5))
    out["codec"] = outcome(lambda: gradwire.DiLoCo(model, opt, inner_steps=4, codec="powersgd"))
    out["differ"] = outcome(lambda: gradwire.DiLoCo(model, opt, inner_steps=4 + rank))
    double = make_model().double()
    out["float64"] = outcome(lambda: gradwire.DiLoCo(
        double, torch.optim.SGD(double.parameters(), lr=0.1), inner_steps=4))
    return out


def test_bad_options_raise_named_errors_on_every_rank():
    for out in expect_success(run_ranks(2, errors_worker)):
        assert out["fragments"][0] == "ConfigError", out
        assert out["codec"][0] == "ConfigError", out
        assert out["differ"][0] == "MismatchError", out
        assert out["float64"][0] == "ConfigError" and "float32" in out["float64"][1], out


def dead_peer_worker(rank, world, timeout):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    diloco = gradwire.DiLoCo(model, opt, inner_steps=2, fragments=1, codec="int8",
                             timeout=timeout)
    data = batches(rank, 8)

    def step(i):
        if i == len(data):
            diloco.finish()
            return
        inner_step(model, opt, *data[i])
        diloco.step()
    # The last rank is killed before its fourth step: the second round's exchange, which
    # goes out (and, with no delay, lands) in that step, fails on the others.
    return first_failing_step(step, len(data) + 1, 3, rank == world - 1)


def test_a_dead_peer_fails_every_other_rank_within_the_timeout():
    timeout = 6.0
    check_dead_peer_failed(run_ranks(3, dead_peer_worker, timeout, timeout=90), timeout,
                          dead_rank=2, at_step=3)
