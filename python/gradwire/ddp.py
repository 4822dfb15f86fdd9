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

The exchange runs over a Gloo group of gradwire's own over the ranks of ``process_group``
(gradwire/_groups.py), made at the hook's first bucket: building, copying or unpickling a
state talks to no other rank.

State (``state.state_dict()`` / ``load_state_dict()``, or pickling the state itself) is this
rank's: the codec state of every parameter (error feedback's residuals, PowerSGD's Q, which
differ from rank to rank) and `auto`'s choice. Every rank saves its own and loads its own
(a state of another rank or world size raises gradwire.MismatchError). A hook registers
once per DDP model: to resume, build a new DDP model and register a state loaded from the
checkpoint; it continues exactly where the saved one was.
"""
import logging
import types
import weakref

import torch
import torch.distributed as dist

from gradwire import _C, _groups

__all__ = ["hook", "HookState"]

_log = logging.getLogger("gradwire.ddp")


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
        process_group: the ranks DDP reduces over (default: the default group's). The
            exchange runs over a Gloo group of gradwire's own over those ranks, made at the
            first bucket (none of gradwire's traffic goes over the program's groups).
        model: names the parameters, for layer policies that name them (@NAME), for
            bias/norm kinds and for the log; without it a parameter is "param<N>" and its
            kind goes by its shape.
        optimizer: the optimizer that steps the model, for "auto": under one that scales
            each coordinate by its own gradient's statistics (Adam, AdamW, RMSprop,
            Adagrad, ...), auto's PowerSGD plan runs at rank 16 instead of 8, is charged
            that family's penalty (0, not SGD's 0.096) and waits out 2 dense steps (none
            under SGD), as the C++ path's does (a low-rank gradient fed back later makes
            Adam's step sizes of its own: rank 8 ended above fp32's loss on gpt, and
            PowerSGD from the first step stalled it in one seed); and auto follows its
            learning rate, as the C++ path does: with "auto:regimes=on" a decay to half
            or less starts a critical regime and a new trial of the plans. Without it, auto assumes SGD at a fixed rate.
            The hook also follows its zero_grad() and step() (the latest hook state given
            an optimizer does): a rank whose backward threw before any gradient was final
            (a bad batch the program skipped) then takes part in the others' exchange of
            that step at its next zero_grad(), so that the step fails on every rank (its
            backward raises there, naming the rank) and the next steps pair; without it,
            such a rank's next exchange pairs with the others' skipped one and the ranks
            end a step apart (as with DDP's own allreduce).
        timeout: seconds any collective of the hook may take (default GRADWIRE_TIMEOUT,
            else 300) before every rank's backward() fails with gradwire.TimeoutError. It
            bounds the hook's group's own Gloo operations too: a rank that raised it has
            nothing of gradwire's left running and exits at once. (The program's own
            group, and DDP's collectives on it, keep that group's timeout: 30 minutes
            unless init_process_group was given one.)
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
            the cost model predicts it faster than their allgather; fp16 from 3 ranks on
            links of 1 Gbit/s (the default link_bits_per_s) and faster, where Gloo's
            software fp16 sum costs more than the reduce-scatter's casts).
        link_bits_per_s, link_latency_s: the link between the ranks (default 1 Gbit/s,
            50 us a message step; the C++ path's --link-bandwidth), which the cost model
            predicts exchanges with: auto's (it rules out plans whose exchange alone
            could not win, and decides a trial the measurements leave unresolved) and
            the per-bucket choices of quantized_path and sparse_aggregation "auto".
            Every rank gives the same (checked at the first step).
    """

    def __init__(self, codec="auto", *, process_group=None, model=None, optimizer=None,
                 timeout=None, bucket_cap_mb=25.0, first_bucket_mb=1.0, overlap=True,
                 sparse_aggregation="auto", quantized_path="auto", link_bits_per_s=1e9,
                 link_latency_s=50e-6):
        if isinstance(optimizer, _PER_COORDINATE_OPTIMIZERS):
            codec = _C.codec_for_per_coordinate_optimizer(codec)
        self._optimizer = optimizer
        self.codec_spec = codec
        self.process_group = process_group
        self.timeout = _groups.default_timeout() if timeout is None else float(timeout)
        self.options = dict(bucket_cap_mb=float(bucket_cap_mb),
                            first_bucket_mb=float(first_bucket_mb), overlap=bool(overlap),
                            sparse_aggregation=sparse_aggregation,
                            quantized_path=quantized_path,
                            link_bits_per_s=float(link_bits_per_s),
                            link_latency_s=float(link_latency_s))
        self._names = {}
        if model is not None:
            self._names = {id(p): name for name, p in model.named_parameters()}
        self._check()
        if optimizer is not None:
            _follow(optimizer, self)

    def _check(self):
        o = self.options
        # A state pickled before the link options existed assumes the default link.
        o.setdefault("link_bits_per_s", 1e9)
        o.setdefault("link_latency_s", 50e-6)
        _C.check_hook_options(self.codec_spec, o["sparse_aggregation"], o["quantized_path"],
                              o["bucket_cap_mb"], o["first_bucket_mb"], o["overlap"],
                              o["link_bits_per_s"], o["link_latency_s"])
        if not self.timeout > 0:
            raise _C.ConfigError("timeout must be positive, got %r" % (self.timeout,))
        self._codec = _C.canonical_codec(self.codec_spec)
        self._impl = None        # made at the first bucket (_bind)
        self._pending = None     # a state loaded before then
        self._bind_error = None  # why binding failed, for the rest of that step's buckets
        self._step_params = None  # this step's parameters, until watch_gradients() takes
        self._watching = False    # them (the end of a backward after the first)
        self._loop_counts = [0, 0]  # the optimizer's zero_grad() and step() before binding

    def _bind(self):
        """The hook's own group over process_group's ranks, and the C++ exchange: a
        collective (every rank agrees on the configuration), at the first bucket."""
        _groups.require_initialized("gradwire.ddp.hook")
        store, rank, size = _groups.rendezvous("ddp-hook", self.process_group)
        o = self.options
        impl = _C.DdpCommHook(self.codec_spec, o["sparse_aggregation"], o["quantized_path"],
                              o["bucket_cap_mb"], o["first_bucket_mb"], o["overlap"],
                              o["link_bits_per_s"], o["link_latency_s"], store, rank, size,
                              self.timeout)
        self._impl = impl
        impl.count_loop(*self._loop_counts)
        if self._pending is not None:
            try:
                impl.load_state(self._pending)
            except _C.Error as e:
                # Bound here and nowhere else would leave the others waiting: the first
                # step fails on every rank instead, naming this one.
                impl.refuse_next_step("its hook state does not fit: %s" % e)
            self._pending = None

    # The optimizer's calls, where the state follows it (_follow).
    def _loop_zero_grad(self):
        if self._impl is None:
            self._loop_counts[0] += 1
        else:
            self._impl.zero_grad()  # may first make up for a step this rank skipped

    def _loop_step(self):
        if self._impl is None:
            self._loop_counts[1] += 1
        else:
            self._impl.count_step()

    @property
    def codec(self):
        """The codec with every option spelled out."""
        return self._codec

    def traffic(self):
        """This rank's bytes since the hook was made: contributed (what its codecs
        produced), on the wire, and the same two for fp32 allreduce."""
        if self._impl is None:
            return {"steps": 0, "bytes_contributed": 0, "bytes_on_wire": 0, "bytes_dense": 0,
                    "bytes_dense_on_wire": 0}
        return self._impl.traffic()

    def bucket_layout(self):
        """gradwire's buckets, by parameter name, and how they were chosen."""
        return "" if self._impl is None else self._impl.bucket_layout()

    def _exchange(self, bucket):
        if self._impl is None:
            try:
                if self._bind_error is None:
                    self._bind()
                else:
                    raise self._bind_error
            except Exception as e:  # noqa: BLE001 - the step fails with it, on every bucket
                # In the future: raised here, DDP would make any error a RuntimeError.
                self._bind_error = None if bucket.is_last() else e
                return _C.failed_future(e)
        params = bucket.parameters()
        keys = [id(p) for p in params]
        if not self._watching:
            # The C++ side learns which parameters get a gradient on this rank
            # (find_unused_parameters) from hooks registered once this backward is over,
            # when autograd runs no parameter's hooks; until that worked (a first step that
            # failed), every step tries again.
            if self._step_params is None:
                self._step_params = []
                torch.autograd.Variable._execution_engine.queue_callback(
                    lambda state=self, impl=self._impl, seen=self._step_params:
                    state._watch(impl, seen))
            self._step_params.extend(params)
            if bucket.is_last():
                self._step_params = None  # the callback holds this step's list
        names = [self._names.get(id(p), "") for p in params] if self._names else []
        if names and not all(names):
            names = []
        if bucket.is_last() and self._optimizer is not None:
            # The rate the optimizer ran the last step with (a schedule sets it after
            # backward), before the exchange's end as DistributedOptimizer passes it.
            self._impl.set_learning_rate(float(self._optimizer.param_groups[0]["lr"]))
        future = self._impl.exchange(bucket.buffer(), keys, [list(p.shape) for p in params],
                                     names, bucket.is_last())
        if bucket.is_last() and self._impl.rank == 0:
            for line in self._impl.take_decisions():
                _log.info("gradwire auto: %s", line)
        return future

    def _watch(self, impl, seen):
        self._watching = impl.watch_gradients([id(p) for p in seen], seen) > 0

    def state_dict(self):
        """This rank's exchange state (codec states, auto's choice), for this rank's
        checkpoint: every rank saves its own."""
        if self._impl is not None:
            return {"codec": self.codec, "state": self._impl.save_state()}
        return {"codec": self.codec, "state": self._pending}

    def load_state_dict(self, state):
        """Restores state_dict()'s state, saved by this rank; the next steps then exchange
        exactly as the saved hook's would have. Call it before the first step of a new DDP
        model (a hook registers once per model). gradwire.MismatchError for another codec's
        state, another model's, or another rank's or world size's; gradwire.PayloadError for
        bytes that are not a hook state."""
        if state.get("codec") != self.codec:
            raise _C.MismatchError(
                "the hook state was saved with codec '%s'; this hook runs '%s'"
                % (state.get("codec"), self.codec))
        saved = state["state"]
        if saved is None:  # saved before its first step: nothing to restore
            return
        if self._impl is not None:
            self._impl.load_state(saved)
            return
        rank, size = _C.hook_state_rank(saved)
        if dist.is_available() and dist.is_initialized():
            group = self.process_group
            here = (dist.get_rank(group), dist.get_world_size(group))
            if (rank, size) != here:
                raise _C.MismatchError(
                    "the hook state is rank %d's of %d ranks; this is rank %d of %d: each rank "
                    "saves and loads its own hook state (error feedback's residuals differ "
                    "from rank to rank)" % (rank, size, here[0], here[1]))
        self._pending = saved

    # Pickling, as PyTorch's PowerSGDState: everything but the process group (and the
    # model's names and the optimizer), which is the default group again once unpickled
    # (set state.process_group before the first step for another). Local: the state binds
    # to its ranks at its first bucket.
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
        self._check()
        self.load_state_dict(pickled["saved"])


def _follow(optimizer, state):
    """The optimizer's zero_grad() and step() tell `state` (the latest hook state given it)
    where the program's loop is. Wrapped once per optimizer, as bound methods over the
    class's (torch's LR schedulers wrap step() through __self__ and __func__)."""
    optimizer.__dict__["_gradwire_hook_state"] = weakref.ref(state)
    if "_gradwire_follows" in optimizer.__dict__:
        return
    optimizer.__dict__["_gradwire_follows"] = True
    zero_grad, step = optimizer.zero_grad, optimizer.step

    def following(_optimizer):
        ref = _optimizer.__dict__.get("_gradwire_hook_state")
        return ref() if ref is not None else None

    def follow_zero_grad(_optimizer, *args, **kwargs):
        state = following(_optimizer)
        if state is not None:
            state._loop_zero_grad()
        return zero_grad(*args, **kwargs)

    def follow_step(_optimizer, *args, **kwargs):
        out = step(*args, **kwargs)
        state = following(_optimizer)
        if state is not None:
            state._loop_step()
        return out
    if getattr(step, "_with_counter", False):
        # An LR scheduler wrapped step() before: keep its mark, or it warns that step() was
        # overridden after it was made.
        follow_step._with_counter = True
    optimizer.zero_grad = types.MethodType(follow_zero_grad, optimizer)
    optimizer.step = types.MethodType(follow_step, optimizer)


def _gradwire_hook(state, bucket):
    # DDP inspects this function: its second parameter must be named `bucket`.
    return state._exchange(bucket)


def hook(codec="auto", **options):
    """(state, hook) for ``model.register_comm_hook(state, hook)``; options as
    :class:`HookState`'s. Checks that the codec exists and the options are valid
    (gradwire.ConfigError, here); at the first step, that every rank runs the same codec and
    options (gradwire.MismatchError, from backward())."""
    state = HookState(codec, **options)
    return state, _gradwire_hook
