"""gradwire.ddp.hook against PyTorch's own DDP: parity with DDP's allreduce, each codec's
average against the exact mean, DDP's modes, and every failure raised on every rank. Each
test runs real ranks (tests/python/ranks.py); the hook's state: test_hook_state.py."""
import json

import pytest
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire
from ddp_models import BUCKET_MB, Net, assert_params_equal, batches, train
from ranks import check_dead_peer_failed, error_of, expect_success, first_failing_step, run_ranks

# --- parity with DDP's own allreduce -----------------------------------------------------

def parity_worker(rank, world):
    return train(rank, None, 20)[0], train(rank, "none", 20)[0]


@pytest.mark.parametrize("world", [2, 4])
def test_none_equals_ddp_allreduce(world):
    # Both divide each gradient by the world size (exactly: W is a power of two) and sum
    # with Gloo's allreduce, but over buckets of their own sizes: Gloo's ring adds the ranks'
    # values of a coordinate in an order that depends on where the coordinate falls in the
    # buffer. Two ranks' a + b is the same in either order: bit for bit. Four ranks' sums
    # may round differently (a few ulp a step): equal within 1e-6 after 20 steps.
    for rank, (ddp_params, hook_params) in enumerate(expect_success(
            run_ranks(world, parity_worker))):
        if world == 2:
            assert_params_equal(ddp_params, hook_params, "rank %d" % rank)
        else:
            for k, (x, y) in enumerate(zip(ddp_params, hook_params)):
                assert (x - y).abs().max().item() <= 1e-6, (rank, k)


def modes_worker(rank, world):
    out = {}
    modes = {
        "no_sync": ({}, 2, False),
        "find_unused_parameters": ({"find_unused_parameters": True}, 1, True),
        "gradient_as_bucket_view": ({"gradient_as_bucket_view": True}, 1, False),
        "static_graph": ({"static_graph": True}, 1, False),
    }
    for name, (kwargs, accumulate, unused) in modes.items():
        ref = train(rank, None, 12, kwargs, accumulate, unused_branch=unused)[0]
        got = train(rank, "none", 12, kwargs, accumulate, unused_branch=unused)[0]
        int8 = train(rank, "int8", 12, kwargs, accumulate, unused_branch=unused)[0]
        out[name] = (ref, got, int8)
    return out


def test_ddp_modes_match_ddp_allreduce():
    results = expect_success(run_ranks(2, modes_worker))
    for name in results[0]:
        for rank in range(2):
            ref, got, _ = results[rank][name]
            assert_params_equal(ref, got, "%s, rank %d" % (name, rank))
        # int8 trains too, and leaves both ranks with one model.
        assert_params_equal(results[0][name][2], results[1][name][2], name + " int8")


# --- the parameters' order: the C++ path's ----------------------------------------------

def layout_worker(rank, world):
    out = {}
    for mode, kwargs in [("default", {}), ("one bucket", {"bucket_cap_mb": 25}),
                         ("find_unused_parameters", {"find_unused_parameters": True})]:
        torch.manual_seed(0)
        model = Net()
        ddp = DDP(model, **dict({"bucket_cap_mb": BUCKET_MB}, **kwargs))
        state, hook = gradwire.ddp.hook("none", model=model, bucket_cap_mb=1000,
                                        first_bucket_mb=1000)
        ddp.register_comm_hook(state, hook)
        for x, y in batches(rank, 2):
            F.cross_entropy(ddp(x), y).backward()
        out[mode] = state.bucket_layout()
    return out


def test_parameters_are_numbered_as_the_cpp_path_numbers_them():
    # DistributedOptimizer numbers the parameters in registration order and fills its
    # buckets from the last one down (the order backward finishes them): one bucket lists
    # them last registered first, however DDP cut its own first-iteration buckets.
    want = "[fc2.bias fc2.weight fc1.bias fc1.weight conv.bias conv.weight]"
    for out in expect_success(run_ranks(2, layout_worker)):
        for mode, layout in out.items():
            assert layout.startswith(want), (mode, layout)


# --- each codec's average ----------------------------------------------------------------

def rank_gradient(rank, n, step=0):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(n, generator=g) * (1 + rank)


# (codec, bound on one step's |average - mean| / max|mean|, or None for no one-step bound)
ONE_STEP = [
    ("none", 1e-6),
    ("fp16", 2e-3),
    ("bf16", 1.6e-2),
    ("int8", None),  # per block: half a level of the largest |g| over ranks, see below
]
STEPS = 40
# Over STEPS steps of one gradient per rank, the relative distance of the mean decoded
# average from the exact mean is |residual| / (STEPS |mean|): what the codec holds back.
# A sparsifier of density d holds about 1/d steps of gradient (1 / (0.05 x 40) = 0.5); a
# rank-2 PowerSGD of a rank-30 matrix most of the other directions; an unbiased quantizer
# (qsgd, terngrad) or signSGD a few steps' worth. A codec that lost what it did not send
# would stay about 1 - d (sparsifiers) or its one-step error away.
EF_BOUND = {"powersgd:rank=2": 0.3, "topk:density=0.05": 0.6, "laplace-topk:density=0.05": 0.6,
            "randomk:density=0.05": 0.6, "dgc:density=0.05": 0.6, "qsgd": 0.25,
            "terngrad": 0.25, "signsgd": 0.25}
EF_CODECS = ["int8", "powersgd:rank=2", "topk:density=0.05", "laplace-topk:density=0.05",
             "randomk:density=0.05", "dgc:density=0.05", "2bit", "qsgd", "terngrad",
             "signsgd", "int4", "hylo"]


def codec_average_worker(rank, world, codecs, steps):
    shape = [30, 40]
    n = 30 * 40
    out = {}
    for codec in codecs:
        state, _ = gradwire.ddp.hook(codec)
        state._bind()  # as the first bucket does
        total = torch.zeros(n)
        first = None
        for step in range(steps):
            buffer = rank_gradient(rank, n).clone()  # the same gradient every step
            fut = state._impl.exchange(buffer, [1], [shape], ["fc.weight"], True)
            avg = fut.wait()
            assert avg.data_ptr() == buffer.data_ptr()  # in place, the bucket's own memory
            if first is None:
                first = avg.clone()
            total += avg
        out[codec] = (first, total / steps)
    return out


def test_each_codec_averages_within_its_bound():
    world = 2
    n = 30 * 40
    codecs = [c for c, _ in ONE_STEP] + EF_CODECS
    results = expect_success(run_ranks(world, codec_average_worker, codecs, STEPS))
    mean = sum(rank_gradient(r, n) for r in range(world)) / world
    scale = mean.abs().max().item()
    failures = []
    for codec in codecs:
        first0, avg0 = results[0][codec]
        for rank in range(1, world):
            if not torch.equal(results[rank][codec][0], first0):
                failures.append(codec + ": ranks differ")
        bound = dict(ONE_STEP).get(codec)
        err = (first0 - mean).abs().max().item()
        if codec == "int8":
            # Shared scale: every rank rounds to levels of step max|g| / floor(127 / W).
            level = max(rank_gradient(r, n).abs().max().item() for r in range(world)) / (127 // world)
            if err > 0.5 * level + 1e-6:
                failures.append("int8: one step off by %g, half a level is %g" % (err, level / 2))
        elif bound is not None and err / scale > bound:
            failures.append("%s: one step off by %g of max|mean| (bound %g)" % (codec, err / scale, bound))
        # Error feedback delays what a step does not send, never loses it: over the steps,
        # with the same gradients every step, the average of the averages approaches the
        # mean as (the residual) / steps.
        if codec in EF_CODECS:
            rel = (avg0 - mean).norm().item() / mean.norm().item()
            if rel > EF_BOUND.get(codec, 0.1):
                failures.append("%s: %d steps average %.3f off the mean (relative)" % (codec, STEPS, rel))
    assert not failures, "\n".join(failures)


def quantized_path_worker(rank, world, paths):
    shape = [30, 40]
    out = {}
    for path in paths:
        state, _ = gradwire.ddp.hook("int8:ef=0", quantized_path=path)
        state._bind()
        buffer = rank_gradient(rank, 30 * 40).clone()
        out[path] = state._impl.exchange(buffer, [1], [shape], ["fc.weight"], True).wait().clone()
    return out


def test_int8_keeps_its_levels_on_the_reduce_scatter():
    # 5 ranks: int8's ring has floor(127 / 5) = 25 levels per sign, the reduce-scatter 127
    # (two roundings, each within half a step of max|g| / 127); "auto" takes it beyond 4.
    world, n = 5, 30 * 40
    results = expect_success(run_ranks(world, quantized_path_worker,
                                       ["ring", "reduce-scatter", "auto"]))
    mean = sum(rank_gradient(r, n) for r in range(world)) / world
    largest = max(rank_gradient(r, n).abs().max().item() for r in range(world))
    for path in ("ring", "reduce-scatter", "auto"):
        for rank in range(1, world):
            assert torch.equal(results[rank][path], results[0][path]), path
    ring = (results[0]["ring"] - mean).abs().max().item()
    scatter = (results[0]["reduce-scatter"] - mean).abs().max().item()
    assert ring <= 0.5 * largest / 25 + 1e-6
    assert scatter <= largest / 127 + 1e-6
    assert ring > 2 * scatter
    assert torch.equal(results[0]["auto"], results[0]["reduce-scatter"])


def codec_training_worker(rank, world, codecs):
    out = {}
    for codec in codecs:
        params, losses = train(rank, codec, 30, lr=0.02)
        out[codec] = (params, losses)
    return out


def test_each_codec_trains_ddp_with_equal_ranks():
    codecs = ["fp16", "int8", "powersgd:rank=2", "topk:density=0.05", "2bit", "hylo", "auto"]
    results = expect_success(run_ranks(2, codec_training_worker, codecs))
    for codec in codecs:
        assert_params_equal(results[0][codec][0], results[1][codec][0], codec)
        losses = results[0][codec][1]
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert last < first, "%s: loss %.3f -> %.3f" % (codec, first, last)


# --- auto under a per-coordinate optimizer --------------------------------------------

def auto_codec_worker(rank, world):
    model = Net()
    codec = lambda spec, opt: gradwire.ddp.hook(spec, optimizer=opt)[0].codec  # noqa: E731
    return {"sgd": codec("auto", torch.optim.SGD(model.parameters(), lr=0.1)),
            "adamw": codec("auto", torch.optim.AdamW(model.parameters())),
            "none": codec("auto", None),
            "adamw_rank4": codec("auto:rank=4", torch.optim.AdamW(model.parameters())),
            "adamw_int8": codec("int8", torch.optim.Adam(model.parameters()))}


def auto_log_lines(rank, codec, steps, with_optimizer=True, decay_at=None, **options):
    """`steps` SGD steps (lr 0.05, 0.02 from step `decay_at`) under the hook with `codec`
    and `options`, given the optimizer or not: the lines the `gradwire` logger took (rank
    0 logs auto's decisions)."""
    import logging
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    state, hook = gradwire.ddp.hook(codec, model=model,
                                    optimizer=opt if with_optimizer else None, **options)
    ddp.register_comm_hook(state, hook)
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    log = logging.getLogger("gradwire")
    log.setLevel(logging.INFO)
    log.addHandler(Keep())
    for step, (x, y) in enumerate(batches(rank, steps)):
        if step == decay_at:
            for group in opt.param_groups:
                group["lr"] = 0.02
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    return lines


def lr_decay_worker(rank, world, with_optimizer):
    """auto with short windows and trials and Accordion's regimes on (off by default); the
    rate halves at step 12. The decisions rank 0 logged."""
    return auto_log_lines(rank, "auto:window=3,trial=1,plans=none/fp16,regimes=on", 30,
                          with_optimizer, decay_at=12)


def test_auto_follows_the_optimizers_learning_rate():
    """Given the optimizer, auto sees its rate fall (the C++ path's regime rule: to half or
    less) and measures its plans again, saying why; without it, it cannot."""
    followed = expect_success(run_ranks(2, lr_decay_worker, True))[0]
    assert any("learning-rate decay" in line for line in followed), followed
    blind = expect_success(run_ranks(2, lr_decay_worker, False))[0]
    assert not any("learning-rate decay" in line for line in blind), blind


def test_auto_under_adam_runs_powersgd_at_the_cpp_paths_rank():
    """As DistributedOptimizer: plain auto under Adam-like optimizers runs its PowerSGD
    plan at rank 16, charges it Adam's family's penalty, 0, and runs 2 dense steps first
    (strategy/registry.h); a given rank, or a fixed codec, stays; under SGD or no
    optimizer, rank 8, 0.096 and no dense start."""
    for out in expect_success(run_ranks(2, auto_codec_worker)):
        assert "rank=16" in out["adamw"] and "penalty=0," in out["adamw"], out
        assert "dense=2" in out["adamw"], out
        assert "rank=8" in out["sgd"] and "rank=8" in out["none"], out
        assert "penalty=0.096" in out["sgd"] and "penalty=0.096" in out["none"], out
        assert "dense=0" in out["sgd"] and "dense=0" in out["none"], out
        assert "rank=4" in out["adamw_rank4"], out
        assert out["adamw_int8"] == gradwire.canonical_codec("int8"), out


def link_worker(rank, world, bits_per_s):
    """auto between none and fp16 over a link of `bits_per_s`: the lines rank 0 logged."""
    return auto_log_lines(rank, "auto:trial=1,plans=none/fp16", 12, link_bits_per_s=bits_per_s)


def predicted_none_ms(lines):
    for line in lines:
        if "exchange ms/step predicted: none " in line:
            return float(line.split("exchange ms/step predicted: none ")[1].split()[0])
    raise AssertionError("no decision with predictions: %r" % (lines,))


def test_auto_predicts_with_the_link_it_is_told():
    """link_bits_per_s reaches auto's cost model, as --link-bandwidth does the C++ path's:
    the same job over a tenth of the bandwidth predicts none's exchange about ten times as
    long (the model's latency term aside)."""
    fast = predicted_none_ms(expect_success(run_ranks(2, link_worker, 1e6))[0])
    slow = predicted_none_ms(expect_success(run_ranks(2, link_worker, 1e5))[0])
    assert fast > 0 and 8 < slow / fast <= 10.01, (fast, slow)


# --- failures: a typed exception on every rank, promptly ----------------------------------

def bad_input_worker(rank, world):
    out = {}
    outcome = error_of
    out["unknown"] = outcome(lambda: gradwire.ddp.hook("nosuch"))
    out["bad_option"] = outcome(lambda: gradwire.ddp.hook("topk:density=7"))

    def differ():  # the ranks compare their configurations at the first step
        model = DDP(Net(), bucket_cap_mb=BUCKET_MB)
        state, hook = gradwire.ddp.hook("int8" if rank == 0 else "fp16")
        model.register_comm_hook(state, hook)
        F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.zeros(4, dtype=torch.long)).backward()
    out["differ"] = outcome(differ)

    def link_differs():  # the link is part of the configuration the ranks compare
        model = DDP(Net(), bucket_cap_mb=BUCKET_MB)
        state, hook = gradwire.ddp.hook("auto", link_bits_per_s=1e8 if rank == 0 else 1e9)
        model.register_comm_hook(state, hook)
        F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.zeros(4, dtype=torch.long)).backward()
    out["link_differs"] = outcome(link_differs)
    out["bad_link"] = outcome(lambda: gradwire.ddp.hook("auto", link_bits_per_s=0))
    int8, _ = gradwire.ddp.hook("int8")
    fp16, _ = gradwire.ddp.hook("fp16")
    out["other_codec_state"] = outcome(lambda: int8.load_state_dict(fp16.state_dict()))
    garbage = dict(int8.state_dict(), state=b"\x01\x02\x03")
    out["garbage_state"] = outcome(lambda: int8.load_state_dict(garbage))

    def float64_model():
        model = DDP(Net().double(), bucket_cap_mb=BUCKET_MB)
        state, hook = gradwire.ddp.hook("int8")
        model.register_comm_hook(state, hook)
        F.cross_entropy(model(torch.randn(4, 1, 8, 8).double()),
                        torch.zeros(4, dtype=torch.long)).backward()
    try:
        float64_model()
        out["float64"] = "ok"
    except Exception as e:  # noqa: BLE001
        out["float64"] = (type(e).__name__, str(e))

    def misnamed_tensor():  # a typo in a layer policy's @NAME
        model = DDP(Net(), bucket_cap_mb=BUCKET_MB)
        state, hook = gradwire.ddp.hook("fc=int8,@fc9.weight=fp16", model=model.module)
        model.register_comm_hook(state, hook)
        F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.zeros(4, dtype=torch.long)).backward()
    out["misnamed"] = outcome(misnamed_tensor)
    return out


def test_bad_inputs_raise_named_errors_on_every_rank():
    results = expect_success(run_ranks(2, bad_input_worker))
    for rank, out in enumerate(results):
        assert out["unknown"][0] == "ConfigError" and "nosuch" in out["unknown"][1], out
        assert out["bad_option"][0] == "ConfigError" and "density" in out["bad_option"][1], out
        assert out["differ"][0] == "MismatchError", out
        assert "int8" in out["differ"][1] and "fp16" in out["differ"][1], out
        assert out["link_differs"][0] == "MismatchError" and "link" in out["link_differs"][1], out
        assert out["bad_link"][0] == "ConfigError" and "link_bits_per_s" in out["bad_link"][1], out
        assert out["other_codec_state"][0] == "MismatchError", out
        assert out["garbage_state"][0] == "PayloadError", out
        assert out["float64"][0] == "ConfigError" and "float32" in out["float64"][1], out
        assert out["misnamed"][0] == "ConfigError" and "fc9.weight" in out["misnamed"][1], out


def nan_worker(rank, world):
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    state, hook = gradwire.ddp.hook("int8")
    ddp.register_comm_hook(state, hook)
    out = []
    for step, (x, y) in enumerate(batches(rank, 4)):
        if step == 2 and rank == 1:
            x = x * float("nan")
        try:
            F.cross_entropy(ddp(x), y).backward()
            out.append("ok")
        except Exception as e:  # noqa: BLE001
            out.append((type(e).__name__, str(e)))
        ddp.zero_grad()
    return out


def test_a_refused_gradient_fails_the_step_on_every_rank():
    for rank, out in enumerate(expect_success(run_ranks(2, nan_worker))):
        assert out[0] == out[1] == out[3] == "ok", (rank, out)
        name, message = out[2]
        assert name == "Error" and "rank 1" in message and "non-finite" in message, (rank, out)


def bad_bucket_worker(rank, world):
    """Two buckets a step, driven as DDP drives the hook; at step 1 rank 1's second bucket
    holds a parameter its first step never showed. Each step: both futures' outcomes, how
    long the step took."""
    import time
    state, _ = gradwire.ddp.hook("int8")
    state._bind()  # as the first bucket does
    out = []
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)
        first, second = torch.randn(40, generator=g), torch.randn(300, generator=g)
        key = 99 if (step == 1 and rank == 1) else 22
        start = time.monotonic()
        futures = [state._impl.exchange(first, [11], [[40]], ["fc.bias"], False),
                   state._impl.exchange(second, [key], [[6, 50]], ["fc.weight"], True)]
        outcomes = []
        for f in futures:
            assert f.done()  # completed by the last bucket's call, whatever failed
            outcomes.append(error_of(f.wait))
        out.append((outcomes, time.monotonic() - start))
    return out


def test_a_bucket_one_rank_cannot_take_fails_every_future_of_the_step_on_every_rank():
    for rank, out in enumerate(expect_success(run_ranks(2, bad_bucket_worker, timeout=60))):
        assert out[0][0] == ["ok", "ok"] and out[2][0] == ["ok", "ok"], (rank, out)
        (first, second), seconds = out[1]
        assert first == second, (rank, out[1])
        assert first[0] == "Error", first
        assert "failed on rank 1: parameter 'fc.weight' was not in the first step" in first[1], first
        assert seconds < 10, (rank, seconds)


def skipped_batch_worker(rank, world, codec, drop_everywhere, bad=2, steps=(6, 6)):
    """6 steps of Net under DDP with the hook, which follows the optimizer; rank 1's batch
    2 is rejected in backward before any gradient is final (a hook on the logits) and the
    loop goes on, as a program that skips a bad batch does. `drop_everywhere`: the
    reference, where every rank drops batch 2 before its forward."""
    import time
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    state, hook = gradwire.ddp.hook(codec, optimizer=opt)
    ddp.register_comm_hook(state, hook)
    out = []
    for step, (x, y) in enumerate(batches(rank, steps[rank])):
        opt.zero_grad()
        if step == bad and drop_everywhere:
            out.append(("dropped", "", 0.0))
            continue
        start = time.monotonic()
        try:
            logits = ddp(x)
            if step == bad and rank == 1:
                logits.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("a bad batch")))
            F.cross_entropy(logits, y).backward()
            opt.step()
            out.append("ok")
        except Exception as e:  # noqa: BLE001 - the loop skips the batch and goes on
            out.append((type(e).__name__, str(e), time.monotonic() - start))
    return out, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("codec", ["none", "int8"])
def test_a_skipped_batch_fails_that_step_on_every_rank_and_keeps_them_in_step(codec):
    results = expect_success(run_ranks(2, skipped_batch_worker, codec, False))
    (out0, params0), (out1, params1) = results
    assert out1[:2] + out1[3:] == ["ok"] * 5 and out1[2][1] == "a bad batch", out1
    assert out0[:2] + out0[3:] == ["ok"] * 5, out0
    name, message, seconds = out0[2]
    assert name == "Error" and "failed on rank 1: it skipped a step" in message, out0[2]
    assert seconds < 10, seconds
    assert_params_equal(params0, params1, codec)  # every step after it paired
    if codec == "none":  # as a job that dropped batch 2 on every rank
        dropped = expect_success(run_ranks(2, skipped_batch_worker, codec, True))
        assert_params_equal(params0, dropped[0][1], "against the dropped batch")


def test_a_batch_skipped_before_the_first_exchange_fails_out_of_step_on_every_rank():
    """Before any exchange the ranks do not yet agree on the loop's zero_grad() calls per
    step: rank 1's next exchange meets rank 0's first, and it fails on both at once naming
    each rank's count (the calls before the hook bound count too); rank 1 runs one batch
    more, and both go on in step."""
    results = expect_success(run_ranks(2, skipped_batch_worker, "int8", False, 0, (6, 7)))
    (out0, params0), (out1, params1) = results
    assert out1[0][1] == "a bad batch" and out1[2:] == ["ok"] * 5, out1
    assert out0[1:] == ["ok"] * 5, out0
    for out in (out0[0], out1[1]):
        assert out[0] == "Error" and "the ranks are out of step" in out[1], out
        assert "rank 0 1, rank 1 2" in out[1], out
        assert out[2] < 10, out
    assert_params_equal(params0, params1, "after the out-of-step failure")


def dead_peer_worker(rank, world, timeout):
    torch.manual_seed(0)
    ddp = DDP(Net(), bucket_cap_mb=BUCKET_MB)
    state, hook = gradwire.ddp.hook("int8", timeout=timeout)
    ddp.register_comm_hook(state, hook)
    data = batches(rank, 6)

    def step(i):
        F.cross_entropy(ddp(data[i][0]), data[i][1]).backward()
    # The last rank is killed before its fourth backward.
    return first_failing_step(step, len(data), 3, rank == world - 1)


def test_a_dead_peer_fails_every_other_rank_within_the_timeout():
    timeout = 6.0
    check_dead_peer_failed(run_ranks(3, dead_peer_worker, timeout, timeout=90), timeout,
                          dead_rank=2, at_step=3)


# --- the timeline (gradwire.timeline) ---------------------------------------------------

def timeline_worker(rank, world, path):
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
    state, hook = gradwire.ddp.hook("none", model=model)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gradwire.timeline.enable()
    for x, y in batches(rank, 3):
        opt.zero_grad()
        with gradwire.timeline.span("forward"):
            loss = F.cross_entropy(ddp(x), y)
        with gradwire.timeline.span("backward"):
            loss.backward()
        with gradwire.timeline.span("step", "step"):
            opt.step()
    gradwire.timeline.write(path)


def test_the_timeline_holds_every_ranks_steps_and_the_hooks_exchange(tmp_path):
    """One trace from every rank: the program's spans (three steps) with the hook's wait
    for the exchange inside each backward, and the exchange thread's spans."""
    path = str(tmp_path / "run.trace.json")
    expect_success(run_ranks(2, timeline_worker, path, timeout=90))
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    spans = [e for e in events if e.get("ph") == "X"]
    for rank in (0, 1):
        mine = [e for e in spans if e["pid"] == rank]
        named = lambda name: [e for e in mine if e["name"] == name]  # noqa: E731
        counts = [len(named(n)) for n in ("forward", "backward", "wait for the exchange", "step")]
        assert counts == [3, 3, 3, 3], (rank, counts)
        for backward, wait in zip(named("backward"), named("wait for the exchange")):
            assert backward["ts"] <= wait["ts"]
            assert wait["ts"] + wait["dur"] <= backward["ts"] + backward["dur"] + 1
            assert wait["tid"] == backward["tid"]
        communicate = named("communicate")
        assert communicate and all(e["tid"] != named("forward")[0]["tid"] for e in communicate)
