"""Where a training step's time goes, as a Chrome trace (Perfetto, chrome://tracing).

A diagnostic, off unless enabled; the same process-wide timeline `gradwire train
--timeline` writes, so gradwire's own spans (the hook's exchange thread: encode,
communicate, decode; the wait for the exchange) land beside the program's::

    gradwire.timeline.enable()                     # after init_process_group, on every rank
    for batch in data:
        with gradwire.timeline.span("forward"):
            loss = loss_fn(model(batch))
        with gradwire.timeline.span("backward"):
            loss.backward()
        with gradwire.timeline.span("step", "step"):
            optimizer.step()
    gradwire.timeline.write("run.trace.json")      # every rank; rank 0 writes

bench/timeline/step_breakdown.py sums a trace up by these span names. Recording costs two
clock reads and one append under a lock per span; when off, one call.
"""
import contextlib
import time

import torch.distributed as dist

from gradwire import _C


def enable(group=None):
    """Starts recording on this rank. A collective (a barrier on `group`, the default group
    if None): every rank's time 0 is its end, so ranks line up to within its skew."""
    _C.timeline_enable(dist.get_rank(group))
    _C.timeline_name_thread("training")
    dist.barrier(group)
    _C.timeline_set_origin(time.monotonic_ns())


def enabled():
    return _C.timeline_enabled()


@contextlib.contextmanager
def span(name, category="compute"):
    """Records the `with` block as a span of the calling thread when the timeline is on."""
    if not _C.timeline_enabled():
        yield
        return
    start = time.monotonic_ns()
    try:
        yield
    finally:
        _C.timeline_record(name, category, start, time.monotonic_ns())


def write(path, group=None):
    """Gathers every rank's spans (a collective on `group`) and rank 0 writes them to `path`
    as one trace, a process per rank."""
    events = [None] * dist.get_world_size(group)
    dist.all_gather_object(events, _C.timeline_events_json(), group=group)
    if dist.get_rank(group) == 0:
        with open(path, "w") as f:
            f.write(_C.timeline_trace_json(events))
