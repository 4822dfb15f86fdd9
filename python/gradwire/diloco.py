"""DiLoCo for PyTorch programs: local SGD with an outer optimizer and streamed, quantized
outer gradients (docs/ALGORITHMS.md, "DiLoCo"), the algorithm of `--strategy diloco`.

    with gradwire.DiLoCo(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                         link_bits_per_s=10e6) as diloco:  # H chosen for a 10 Mbit/s link
        for x, y in loader:
            diloco.zero_grad()
            loss_fn(model(x), y).backward()
            diloco.step()            # or the inner optimizer's own step(): the same
    # leaving the block (or diloco.finish()) leaves one model on every rank; leaving it on
    # an exception puts back the last model the ranks agreed on

Every inner step synchronizes on schedule, whoever calls it: diloco.step(), or the inner
optimizer's step() called by the program or a library (GradScaler, Lightning, Hugging Face's
Trainer, an LR scheduler's wrapper): DiLoCo wraps the optimizer's step from construction to
finish() (afterwards it is a local step again).

Every rank steps the inner optimizer on its own gradients; every `inner_steps` steps each of
the `fragments` parts of the model is averaged over the ranks, on gradwire's exchange
thread, as its outer gradient theta_global - theta encoded by `codec` ("none", "fp16",
"bf16", "int8", "int4", "sparseloco"), and lands `delay` steps later with the outer step
(Nesterov momentum `outer_momentum`, rate `outer_lr`). The model to evaluate is the one the ranks
agree on: global_model_state().
"""
import logging
import types

import torch

from gradwire import _C, _groups

__all__ = ["DiLoCo"]

# `gradwire train --strategy diloco`'s defaults (include/gradwire/diloco_options.h): auto H,
# two fragments, the ranks' mean model as the outer step (rate 1, no momentum), int4.
_DEFAULTS = _C.DILOCO_DEFAULTS

_log = logging.getLogger("gradwire.diloco")


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
        codec: the outer gradient's encoding: "none", "fp16", "bf16", "int8", "int4", or
            "sparseloco" (SparseLoCo: each rank's own error-feedback accumulator, decaying by
            beta, of which the top-k of every chunk goes in 2 bits a value by an allgather;
            e.g. "sparseloco:density=0.02,bits=2,beta=0.95", docs/CODECS.md; with it the
            defaults' outer step, rate 1 and no momentum, is SparseLoCo's own).
        process_group: the ranks (default: the default group's). DiLoCo exchanges over a
            Gloo group of its own over them, made here (a collective), so that the
            program's own collectives never meet DiLoCo's exchange thread on one group. It
            needs no port of its own: Gloo connects its pairs as the default group's did.
        timeout: seconds any exchange may take (default GRADWIRE_TIMEOUT, else 300); it
            bounds DiLoCo's group's own Gloo operations too, so a rank that raised
            gradwire.TimeoutError has nothing of DiLoCo's left running and exits at once.
    """

    def __init__(self, model, inner_optimizer, *, inner_steps=_DEFAULTS["inner_steps"],
                 fragments=_DEFAULTS["fragments"], delay=_DEFAULTS["delay"],
                 outer_lr=_DEFAULTS["outer_lr"], outer_momentum=_DEFAULTS["outer_momentum"],
                 nesterov=_DEFAULTS["nesterov"], outer_warmup=_DEFAULTS["outer_warmup"],
                 codec=_DEFAULTS["codec"], process_group=None, link_bits_per_s=1e9,
                 link_latency_s=50e-6, timeout=None):
        _groups.require_initialized("gradwire.DiLoCo")
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
            timeout = _groups.default_timeout()
        store, rank, size = _groups.rendezvous("diloco", process_group)
        self.process_group = process_group
        self._finished = False
        self._abandoned = False  # abandon()ed: finished, but a checkpoint may be loaded
        with torch.no_grad():
            self._impl = _C.DiLoCoModel(
                codec, int(inner_steps), int(fragments), int(delay), float(outer_lr),
                float(outer_momentum), bool(nesterov), int(outer_warmup),
                float(link_bits_per_s), float(link_latency_s), store, rank, size,
                float(timeout), self._names, self._params, self._buffers())
        self._wrap_inner_step()

    def _buffers(self):
        return [b for b in self.model.buffers() if b.dtype == torch.float32]

    def _wrap_inner_step(self):
        """The inner optimizer's step() (an attribute of the instance, over its class's)
        steps, then runs DiLoCo's schedule: so does every caller of it. (torch 1.13's
        optimizers have no step hooks; torchft registers a step post-hook where they do.)"""
        optimizer = self.inner_optimizer
        self._replaced_step = optimizer.__dict__.get("step")  # an LR scheduler's wrapper
        unwrapped = optimizer.step
        diloco = self

        def step(_optimizer, *args, **kwargs):
            loss = unwrapped(*args, **kwargs)
            if not diloco._finished:  # after finish() or abandon(): a local step
                diloco._after_inner_step()
            return loss
        step._gradwire_diloco = self
        if getattr(unwrapped, "_with_counter", False):
            # An LR scheduler wrapped step() before: keep its mark, or it warns that step()
            # was overridden after it was made.
            step._with_counter = True
        # A bound method, as the step it replaces: torch's LR schedulers wrap
        # optimizer.step through its __self__ and __func__.
        optimizer.step = types.MethodType(step, optimizer)

    def _unwrap_inner_step(self):
        """Puts back what step() was (the class's, or an LR scheduler's wrapper), unless
        something wrapped it again since (then this wrapper stays, a local step)."""
        step = self.inner_optimizer.__dict__.get("step")
        if getattr(step, "_gradwire_diloco", None) is not self:
            return
        if self._replaced_step is None:
            del self.inner_optimizer.step
        else:
            self.inner_optimizer.step = self._replaced_step

    def _after_inner_step(self):
        with torch.no_grad():
            self._impl.after_step(self._params, self._buffers())
        for line in self._impl.take_decisions():
            if self._impl.rank == 0:
                _log.info("gradwire DiLoCo: %s", line)

    # --- the optimizer's face --------------------------------------------------------

    def zero_grad(self, set_to_none=False):
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """Steps the inner optimizer, then DiLoCo's schedule: a fragment may go out or
        land (with the outer step) here. Returns what the inner step returned. The same as
        the inner optimizer's own step()."""
        if self._finished:
            raise _C.ConfigError("gradwire.DiLoCo: step() after finish()")
        return self.inner_optimizer.step(closure)

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
        self._unwrap_inner_step()

    def abandon(self):
        """Stops DiLoCo without a collective and puts back the last model the ranks agreed
        on (parameters theta_g, buffers rank 0's as of the last round): what leaving the
        `with` block on an exception does, as torchft's LocalSGD does. The exchange in
        flight, if any, is not merged (it ends on its own, within the timeout); the inner
        optimizer's step() no longer synchronizes; step() raises. Local: the other ranks
        may be anywhere."""
        if self._finished:
            return
        self._finished = True
        self._abandoned = True
        self._unwrap_inner_step()
        with torch.no_grad():
            self._impl.global_parameters(self._params)
            buffers = self._buffers()
            if buffers:
                self._impl.agreed_buffers(buffers)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        # Leaving on an exception: the other ranks may never reach finish()'s collective.
        if kind is None:
            self.finish()
        else:
            self.abandon()
        return False

    # --- what to evaluate and what to keep -------------------------------------------

    def global_model_state(self):
        """The model's state_dict as the ranks agree on it, the model to evaluate (after
        finish(), the model itself): every key of a parameter (a tied weight's every name)
        holds theta_global, as of each fragment's last synchronization; every float32
        buffer rank 0's as of the last round's synchronization (BatchNorm's statistics;
        they travel with the round's last fragment); other buffers (integer counters such
        as num_batches_tracked) this rank's own."""
        live = self.model.state_dict(keep_vars=True)
        agreed = {}
        params = [torch.empty_like(p) for p in self._params]
        self._impl.global_parameters(params)
        agreed.update((id(p), t) for p, t in zip(self._params, params))
        live_buffers = self._buffers()
        buffers = [torch.empty_like(b) for b in live_buffers]
        if buffers:
            self._impl.agreed_buffers(buffers)
        agreed.update((id(b), t) for b, t in zip(live_buffers, buffers))
        return {name: agreed[id(t)] if id(t) in agreed else t.detach().clone()
                for name, t in live.items()}

    def state_dict(self):
        """This rank's state, for an exact resume: its model (parameters and buffers:
        between synchronizations every rank's differ), DiLoCo's (theta_global and the outer
        momentum per fragment, the schedule, the exchange in flight, which this waits for)
        and the inner optimizer's. Every rank saves its own."""
        agreed = [torch.empty_like(b) for b in self._buffers()]
        if agreed:
            self._impl.agreed_buffers(agreed)
        return {"model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "inner_optimizer": self.inner_optimizer.state_dict(),
                "diloco": self._impl.save_state(), "agreed_buffers": agreed}

    def load_state_dict(self, state):
        """Restores state_dict(): the model, the inner optimizer and DiLoCo; the next steps
        are the saved run's. (Building a DiLoCo gives every rank rank 0's parameters: this
        puts back this rank's own.) gradwire.PayloadError for a state of another model,
        schedule or configuration.

        A rollback (loading into this running DiLoCo, after a loss spike): every rank loads
        at the same step, each its own state. An exchange in flight is finished first (every
        rank is in it) and discarded. After a rank diverged (the outer gradient non-finite:
        every rank raised gradwire.Error at the same step), loading is how the job goes on;
        after a failed collective (a peer died or timed out) it raises that failure. After
        leaving the block on an exception (abandon()), loading makes DiLoCo synchronize
        again; after finish() it raises gradwire.ConfigError."""
        if self._finished and not self._abandoned:
            raise _C.ConfigError("gradwire.DiLoCo: load_state_dict() after finish(); load the "
                                 "state into a new DiLoCo")
        self._impl.load_state(state["diloco"])
        if self._abandoned:  # left on an exception, rolled back: synchronizing again
            self._finished = self._abandoned = False
            self._wrap_inner_step()
        self.model.load_state_dict(state["model"])
        self.inner_optimizer.load_state_dict(state["inner_optimizer"])
        if state.get("agreed_buffers"):
            self._impl.set_agreed_buffers(state["agreed_buffers"])

    def stats(self):
        """H and the delay in force, steps, exchanges, outer steps, bytes sent."""
        return self._impl.stats()

    def traffic(self):
        return self._impl.traffic()
