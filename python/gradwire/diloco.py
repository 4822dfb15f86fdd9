"""DiLoCo for PyTorch programs: local SGD with an outer optimizer and streamed, quantized
outer gradients (docs/ALGORITHMS.md, "DiLoCo"), the algorithm of `--strategy diloco`.

    with gradwire.DiLoCo(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                         link_bits_per_s=10e6) as diloco:  # H chosen for a 10 Mbit/s link
        for x, y in loader:
            diloco.zero_grad()
            loss_fn(model(x), y).backward()
            diloco.step()
    # leaving the block (or diloco.finish()) leaves one model on every rank

Every rank steps the inner optimizer on its own gradients; every `inner_steps` steps each of
the `fragments` parts of the model is averaged over the ranks, on gradwire's exchange
thread, as its outer gradient theta_global - theta encoded by `codec` ("none", "fp16",
"bf16", "int8", "int4"), and lands `delay` steps later with the outer step (Nesterov
momentum `outer_momentum`, rate `outer_lr`). The model to evaluate is the one the ranks
agree on: global_model_state().
"""
import itertools
import logging
import os

import torch
import torch.distributed as dist

from gradwire import _C

__all__ = ["DiLoCo"]

# `gradwire train --strategy diloco`'s defaults (include/gradwire/diloco_options.h): auto H,
# two fragments, the ranks' mean model as the outer step (rate 1, no momentum), int4.
_DEFAULTS = _C.DILOCO_DEFAULTS

_log = logging.getLogger("gradwire.diloco")
_group_numbers = itertools.count()


class DiLoCo:
    """Args:
        model: the torch.nn.Module every rank trains (float32, CPU); its parameters start
            as rank 0's.
        inner_optimizer: the optimizer over the model's parameters (AdamW in the papers).
        inner_steps: H, inner steps per round, or "auto" (the default): gradwire times the
            first steps and picks the smallest H whose exchanges hide under the inner steps
            (with fragments or a delay) over a link of `link_bits_per_s`.
        fragments: F, parts of the model synchronized in turn, one every H / F steps.
        delay: steps an exchange runs while training goes on (at most H / F).
        outer_lr, outer_momentum, nesterov: the outer optimizer. The defaults, 1 and 0, set
            the synchronized model to the ranks' mean (periodic model averaging), which
            gradwire's tuning found better than the papers' Nesterov 0.7/0.9 at 4 ranks.
        outer_warmup: outer steps over which outer_lr ramps up linearly, per fragment
            (its k-th outer step takes outer_lr * min(1, (k + 1) / outer_warmup); 0: none).
        codec: the outer gradient's encoding: "none", "fp16", "bf16", "int8", "int4".
        process_group: the ranks; default: a Gloo group of its own over the default
            group's ranks, made here (a collective), so that the program's own collectives
            never meet DiLoCo's exchange thread on one group. It needs no port of its own:
            Gloo connects its pairs as the default group's did. A group given here must
            not be used by anything else while DiLoCo lives.
        timeout: seconds any exchange may take (default GRADWIRE_TIMEOUT, else 300).
    """

    def __init__(self, model, inner_optimizer, *, inner_steps=_DEFAULTS["inner_steps"],
                 fragments=_DEFAULTS["fragments"], delay=_DEFAULTS["delay"],
                 outer_lr=_DEFAULTS["outer_lr"], outer_momentum=_DEFAULTS["outer_momentum"],
                 nesterov=_DEFAULTS["nesterov"], outer_warmup=_DEFAULTS["outer_warmup"],
                 codec=_DEFAULTS["codec"], process_group=None, link_bits_per_s=1e9,
                 link_latency_s=50e-6, timeout=None):
        if not dist.is_available() or not dist.is_initialized():
            raise _C.ConfigError(
                "gradwire.DiLoCo needs torch.distributed initialized "
                "(torch.distributed.init_process_group('gloo'))")
        if inner_steps == "auto":
            inner_steps = 0
        if not isinstance(inner_steps, int) or isinstance(inner_steps, bool) or inner_steps < 0:
            raise _C.ConfigError("inner_steps must be a positive integer or 'auto', got %r"
                                 % (inner_steps,))
        self.model = model
        self.inner_optimizer = inner_optimizer
        named = list(model.named_parameters())
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        if timeout is None:
            text = os.environ.get("GRADWIRE_TIMEOUT", "")
            timeout = float(text) if text else 300.0
        store = None
        if process_group is None:
            process_group = dist.new_group(backend="gloo")
            store = dist.PrefixStore("gradwire/diloco/%d" % next(_group_numbers),
                                     dist.distributed_c10d._get_default_store())
        elif dist.get_backend(process_group) != "gloo":
            raise _C.ConfigError("gradwire.DiLoCo runs over a Gloo process group; this one "
                                 "is '%s'" % dist.get_backend(process_group))
        self.process_group = process_group
        self._finished = False
        with torch.no_grad():
            self._impl = _C.DiLoCoModel(
                codec, int(inner_steps), int(fragments), int(delay), float(outer_lr),
                float(outer_momentum), bool(nesterov), int(outer_warmup),
                float(link_bits_per_s), float(link_latency_s), process_group, store, float(timeout), self._names,
                self._params, self._buffers())

    def _buffers(self):
        return [b for b in self.model.buffers() if b.dtype == torch.float32]

    # --- the optimizer's face --------------------------------------------------------

    def zero_grad(self, set_to_none=False):
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """Steps the inner optimizer, then DiLoCo's schedule: a fragment may go out or
        land (with the outer step) here. Returns what the inner step returned."""
        if self._finished:
            raise _C.ConfigError("gradwire.DiLoCo: step() after finish()")
        loss = self.inner_optimizer.step(closure)
        with torch.no_grad():
            self._impl.after_step(self._params, self._buffers())
        for line in self._impl.take_decisions():
            if self._impl.rank == 0:
                _log.info("gradwire DiLoCo: %s", line)
        return loss

    @property
    def param_groups(self):
        return self.inner_optimizer.param_groups

    def wait_for_exchange(self):
        """Waits until the outer exchange in flight (if any) has finished; it still lands
        (with the outer step) at its step. For a program that stops its clock to evaluate or
        to checkpoint, so that no exchange runs on in time it does not count. A failed
        exchange raises here."""
        self._impl.wait_for_exchange()

    # --- the end ---------------------------------------------------------------------

    def finish(self):
        """Lands the exchange in flight and averages what each fragment did since its
        last synchronization: afterwards every rank holds the same model. Collective;
        idempotent."""
        if self._finished:
            return
        with torch.no_grad():
            self._impl.finish(self._params, self._buffers())
        self._finished = True

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        # Leaving on an exception: the other ranks may never reach finish()'s collective.
        if kind is None:
            self.finish()
        return False

    # --- what to evaluate and what to keep -------------------------------------------

    def global_model_state(self):
        """The model's state_dict with the parameters the ranks agree on (theta_global, as
        of each fragment's last synchronization): the model to evaluate. After finish(),
        the model itself."""
        state = self.model.state_dict()
        out = [torch.empty_like(p) for p in self._params]
        self._impl.global_parameters(out)
        for name, tensor in zip(self._names, out):
            state[name] = tensor
        return state

    def state_dict(self):
        """This rank's state, for an exact resume: its model (parameters and buffers:
        between synchronizations every rank's differ), DiLoCo's (theta_global and the outer
        momentum per fragment, the schedule, the exchange in flight, which this waits for)
        and the inner optimizer's. Every rank saves its own."""
        return {"model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "inner_optimizer": self.inner_optimizer.state_dict(),
                "diloco": self._impl.save_state()}

    def load_state_dict(self, state):
        """Restores state_dict(): the model, the inner optimizer and DiLoCo; the next steps
        are the saved run's. (Building a DiLoCo gives every rank rank 0's parameters: this
        puts back this rank's own.) gradwire.PayloadError for a state of another model,
        schedule or configuration.

        A rollback (loading into this running DiLoCo, after a loss spike): every rank loads
        at the same step, each its own state. An exchange in flight is finished first (every
        rank is in it) and discarded. After a rank diverged (the outer gradient non-finite:
        every rank raised gradwire.Error at the same step), loading is how the job goes on;
        after a failed collective (a peer died or timed out) it raises that failure."""
        self._impl.load_state(state["diloco"])
        self.model.load_state_dict(state["model"])
        self.inner_optimizer.load_state_dict(state["inner_optimizer"])

    def stats(self):
        """H and the delay in force, steps, exchanges, outer steps, bytes sent."""
        return self._impl.stats()

    def traffic(self):
        return self._impl.traffic()
