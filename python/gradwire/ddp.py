"""gradwire's codecs as a DDP communication hook.

    state, hook = gradwire.ddp.hook("int8")          # or "powersgd:rank=8", "auto", ...
    model = DistributedDataParallel(model)
    model.register_comm_hook(state, hook)

DDP hands the hook its buckets of gradients; gradwire averages them over the ranks with its
allreduce strategy over the whole model (the C++ path's: its own buckets, exchanged during
backward on gradwire's exchange thread in one order on every rank, error feedback where the
codec has it, `auto`'s measured choice), on DDP's process group (``process_group``, the
default group by default). Encoding and decoding run in C++ on the buckets' own memory,
without the GIL. See src/gradwire/torch/ddp_comm_hook.h for the order on the wire.

State (``state.state_dict()`` / ``load_state_dict()``, or pickling the state itself) holds
the codec state of every parameter (error feedback's residuals, PowerSGD's Q) and `auto`'s
choice. A hook registers once per DDP model: to resume, build a new DDP model and register
a state loaded from the checkpoint; it continues exactly where the saved one was.
"""
import itertools
import logging
import os

import torch
import torch.distributed as dist

from gradwire import _C

__all__ = ["hook", "HookState"]

_log = logging.getLogger("gradwire.ddp")
_state_numbers = itertools.count()


def _default_timeout():
    text = os.environ.get("GRADWIRE_TIMEOUT", "")
    return float(text) if text else 300.0


# Optimizers that scale each coordinate by statistics of its own gradient (the C++ path's
# scales_per_coordinate, with the rest of torch.optim's Adam family).
_PER_COORDINATE_OPTIMIZERS = tuple(
    getattr(torch.optim, name) for name in ("Adam", "AdamW", "Adamax", "NAdam", "RAdam",
                                            "RMSprop", "Adagrad", "Adadelta", "SparseAdam")
    if hasattr(torch.optim, name))


class HookState:
    """What gradwire's DDP hook keeps: the codec, the process group and the exchange's
    state. Build it with :func:`hook`.

    The exchange is gradwire's allreduce strategy over all the model's parameters, with
    its own buckets (DDP's buckets only hand the gradients over): codec state per
    parameter, exchanges during backward, and for "auto" the C++ strategy's plans,
    measurements and decisions. Parameters are numbered in the model's registration
    order, as the C++ path numbers them (read from DDP's first step, whose buckets hold
    them in that order), the same in every run of the program.

    Args:
        codec: a codec spec ("none", "fp16", "int8", "powersgd:rank=8",
            "topk:density=0.01", ...), a layer policy ("fc=powersgd:rank=8,default=int8")
            or "auto" (gradwire measures its plans on the job and keeps the fastest).
        process_group: the group DDP reduces over (default: the default group); Gloo.
        model: names the parameters, for layer policies that name them (@NAME), for
            bias/norm kinds and for the log; without it a parameter is "param<N>" and its
            kind goes by its shape.
        optimizer: the optimizer that steps the model, for "auto": under one that scales
            each coordinate by its own gradient's statistics (Adam, AdamW, RMSprop,
            Adagrad, ...), auto's PowerSGD plan runs at rank 16 instead of 8, as the C++
            path's does (a low-rank gradient fed back later makes Adam's step sizes of its
            own: rank 8 ended above fp32's loss on gpt); and auto follows its learning
            rate, as the C++ path does: a decay to half or less starts a critical regime
            and a new trial of the plans. Without it, auto assumes SGD at a fixed rate.
        timeout: seconds any collective of the hook may take (default GRADWIRE_TIMEOUT,
            else 300) before every rank's backward() fails with gradwire.TimeoutError.
        bucket_cap_mb, first_bucket_mb: gradwire's bucket sizes (DDP's defaults, 25
            and 1), filled by DDP's rule (a bucket closes once it reaches its cap), so
            that with the same sizes as DDP's none splits what DDP hands over at once;
            after a few steps gradwire times its buckets and may move their boundaries
            (docs/ARCHITECTURE.md, "Measured layout").
        overlap: exchange buckets during backward (default True).
        sparse_aggregation: buckets of sparse codecs: "auto", "allgather", "split" or
            "dense".
        quantized_path: buckets of fp16, bf16, int8 and int4: "ring" (fp16's and int8's
            allreduce, bf16's and int4's allgather), "reduce-scatter" (summed in fp32,
            every level of the codec kept at any world size) or "auto" (per bucket: int8
            where its ring has under 31 levels, i.e. beyond 4 ranks; bf16 and int4 where
            the cost model predicts it faster than their allgather; fp16 from 3 ranks,
            as on the 1 Gbit/s link the hook's cost model assumes, where Gloo's
            software fp16 sum costs more than the reduce-scatter's casts).
    """

    def __init__(self, codec="auto", *, process_group=None, model=None, optimizer=None,
                 timeout=None, bucket_cap_mb=25.0, first_bucket_mb=1.0, overlap=True,
                 sparse_aggregation="auto", quantized_path="auto"):
        if not dist.is_available() or not dist.is_initialized():
            raise _C.ConfigError(
                "gradwire.ddp.hook needs torch.distributed initialized "
                "(torch.distributed.init_process_group('gloo'))")
        if isinstance(optimizer, _PER_COORDINATE_OPTIMIZERS):
            codec = _C.codec_for_per_coordinate_optimizer(codec)
        self._optimizer = optimizer
        self.codec_spec = codec
        self.process_group = process_group
        self.timeout = _default_timeout() if timeout is None else float(timeout)
        self.options = dict(bucket_cap_mb=float(bucket_cap_mb),
                            first_bucket_mb=float(first_bucket_mb), overlap=bool(overlap),
                            sparse_aggregation=sparse_aggregation,
                            quantized_path=quantized_path)
        self._names = {}
        if model is not None:
            self._names = {id(p): name for name, p in model.named_parameters()}
        self._impl = self._make_impl()

    def _make_impl(self):
        group = self.process_group
        if group is None or group == dist.group.WORLD:
            group = dist.distributed_c10d._get_default_group()
        backend = dist.get_backend(group)
        if backend != "gloo":
            raise _C.ConfigError(
                "gradwire's DDP hook runs over a Gloo process group; this one is '%s'"
                % backend)
        store = None
        if group == dist.distributed_c10d._get_default_group():
            # Where a rank that waits too long says how far it got, so that a failure can
            # name the ranks that never arrived.
            store = dist.PrefixStore("gradwire/ddp-hook/%d" % next(_state_numbers),
                                     dist.distributed_c10d._get_default_store())
        o = self.options
        return _C.DdpCommHook(self.codec_spec, o["sparse_aggregation"],
                              o.get("quantized_path", "auto"), o["bucket_cap_mb"],
                              o["first_bucket_mb"], o["overlap"], group, store, self.timeout)

    @property
    def codec(self):
        """The codec with every option spelled out."""
        return self._impl.codec

    def traffic(self):
        """This rank's bytes since the hook was made: contributed (what its codecs
        produced), on the wire, and the same two for fp32 allreduce."""
        return self._impl.traffic()

    def bucket_layout(self):
        """gradwire's buckets, by parameter name, and how they were chosen."""
        return self._impl.bucket_layout()

    def _exchange(self, bucket):
        params = bucket.parameters()
        names = [self._names.get(id(p), "") for p in params] if self._names else []
        if names and not all(names):
            names = []
        if bucket.is_last() and self._optimizer is not None:
            # The rate the optimizer ran the last step with (a schedule sets it after
            # backward), before the exchange's end as DistributedOptimizer passes it.
            self._impl.set_learning_rate(float(self._optimizer.param_groups[0]["lr"]))
        future = self._impl.exchange(bucket.buffer(), [id(p) for p in params],
                                     [list(p.shape) for p in params], names, bucket.is_last())
        if bucket.is_last() and self._impl.rank == 0:
            for line in self._impl.take_decisions():
                _log.info("gradwire auto: %s", line)
        return future

    def state_dict(self):
        """The exchange's state (codec states, auto's choice), for a checkpoint."""
        return {"codec": self.codec, "state": self._impl.save_state()}

    def load_state_dict(self, state):
        """Restores state_dict()'s state; the next steps then exchange exactly as the
        saved hook's would have. Call it before the first step of a new DDP model (a hook
        registers once per model). gradwire.MismatchError for another codec's state or
        another model's, gradwire.PayloadError for bytes that are not a hook state."""
        if state.get("codec") != self.codec:
            raise _C.MismatchError(
                "the hook state was saved with codec '%s'; this hook runs '%s'"
                % (state.get("codec"), self.codec))
        self._impl.load_state(state["state"])

    # Pickling, as PyTorch's PowerSGDState: everything but the process group (and the
    # model's names and the optimizer), which is the default group again once unpickled.
    def __getstate__(self):
        return {"codec_spec": self.codec_spec, "timeout": self.timeout,
                "options": self.options, "saved": self.state_dict()}

    def __setstate__(self, pickled):
        self.codec_spec = pickled["codec_spec"]
        self.timeout = pickled["timeout"]
        self.options = pickled["options"]
        self.process_group = None
        self._names = {}
        self._optimizer = None
        self._impl = self._make_impl()
        self.load_state_dict(pickled["saved"])


def _gradwire_hook(state, bucket):
    # DDP inspects this function: its second parameter must be named `bucket`.
    return state._exchange(bucket)


def hook(codec="auto", **options):
    """(state, hook) for ``model.register_comm_hook(state, hook)``; options as
    :class:`HookState`'s. Checks on every rank that the codec and options are the same
    (gradwire.MismatchError otherwise) and that the codec exists (gradwire.ConfigError)."""
    state = HookState(codec, **options)
    return state, _gradwire_hook
