"""Local-update methods in the DDP peer: PyTorch's own local SGD (--hook localsgd), and
the model the ranks agree on, which is what the peer evaluates for it and for gradwire's
DiLoCo (the papers' protocol: a user keeps the synchronized model, not one rank's own).

Local SGD as a user of torch 1.13 runs it (torch.distributed.algorithms): DDP with
post_localSGD_hook, whose gradients are allreduced for the first `warmup` steps and then
not at all (post_local_gradient_allreduce=False: one rank per host, no intra-node group),
and PostLocalSGDOptimizer with PeriodicModelAverager(period, warmup) around the inner
optimizer: after step k (counted from 0) with k >= warmup and (k - warmup) a multiple of
`period`, the parameters are averaged over the ranks (one fp32 allreduce of the whole
model, divided by the world size first). Buffers (BatchNorm's statistics) and the
optimizer's state stay each rank's own. This is DiLoCo with outer learning rate 1 and no
outer momentum, in fp32, without streaming.
"""

import contextlib

import torch
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook
from torch.distributed.algorithms.model_averaging import averagers, utils
from torch.distributed.optim import PostLocalSGDOptimizer


class LocalSGD:
    """--hook localsgd: registers the hook on `ddp` and steps `optimizer` under the
    averager. `counter` (the peer's ByteCounter) counts the averaging allreduces and the
    warm-up's gradient allreduces; `clock` (the peer's TrainingClock) is paused while the
    synchronized model is copied aside (the evaluation's bookkeeping, not training)."""

    def __init__(self, ddp, model, optimizer, period, warmup, counter):
        if period < 1 or warmup < 0:
            raise SystemExit("ddp_peer: --localsgd-period must be at least 1 and "
                             "--localsgd-warmup at least 0")
        self.period, self.warmup = period, warmup
        self.state = post_localSGD_hook.PostLocalSGDState(
            process_group=None, subgroup=None, start_localSGD_iter=warmup,
            post_local_gradient_allreduce=False)
        ddp.register_comm_hook(self.state, post_localSGD_hook.post_localSGD_hook)
        self.averager = averagers.PeriodicModelAverager(period=period, warmup_steps=warmup)
        self.optimizer = PostLocalSGDOptimizer(optim=optimizer, averager=self.averager)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.counter = counter
        self.clock = None
        # The model as last averaged, while the ranks' own have moved on from it; None
        # while every rank's model is the same (before the first local step, during the
        # warm-up, right after an averaging step).
        self._synced = None

    def description(self):
        return f"ddp:localsgd:period={self.period},warmup={self.warmup}"

    def _averages(self, k):
        return k >= self.warmup and (k - self.warmup) % self.period == 0

    def step(self):
        k = self.averager.step
        models_meet = k < self.warmup or self._averages(k)
        if not models_meet and self._synced is None:
            # The first local step since the models met: keep the model they met on.
            self._pause()
            self._synced = [p.detach().clone() for p in self.params]
            self._resume()
        self.counter.active = True
        try:
            self.optimizer.step()
        finally:
            self.counter.active = False
        if models_meet:
            self._synced = None

    def finish(self):
        """Averages the ranks' models once more unless they just met (collective), so that
        the job ends with one model on every rank, as DiLoCo's finish() does."""
        if self._synced is None:
            return
        self.counter.active = True
        try:
            with torch.no_grad():
                utils.average_parameters(iter(self.params), None)
        finally:
            self.counter.active = False
        self._synced = None

    @contextlib.contextmanager
    def synchronized_model(self):
        """The model the ranks last met on, in the model's parameters while the context
        lasts; this rank's own afterwards."""
        if self._synced is None:
            yield
            return
        with swapped_parameters(self.params, self._synced):
            yield

    def _pause(self):
        if self.clock is not None:
            self.clock.pause()

    def _resume(self):
        if self.clock is not None:
            self.clock.resume()


@contextlib.contextmanager
def swapped_parameters(params, values):
    """`values` in `params` while the context lasts, their own values afterwards."""
    with torch.no_grad():
        own = [p.detach().clone() for p in params]
        for p, v in zip(params, values):
            p.copy_(v)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, v in zip(params, own):
                p.copy_(v)


@contextlib.contextmanager
def diloco_synchronized_model(diloco, model):
    """gradwire.DiLoCo's synchronized model (global_model_state(): every fragment as last
    merged, the same on every rank) in `model` while the context lasts."""
    state = diloco.global_model_state()
    names = [name for name, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    with swapped_parameters(params, [state[name] for name in names]):
        yield
