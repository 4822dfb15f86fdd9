"""Runs a function on W ranks (processes) of a Gloo job, with a deadline, and cleans up.

    results = run_ranks(2, worker, arg, timeout=60)

`worker(rank, world, *args)` runs in a fresh process (spawned: nothing inherited but
sys.path) after torch.distributed.init_process_group("gloo"); what it returns (picklable)
is results[rank]. An exception in a worker is returned as a RankFailure (its type name,
message and the seconds since the rank started), so a test can check every rank's error;
a rank that exits without returning gives a RankFailure of type "exit". Every rank still
running at the deadline is killed and the call fails.
"""
import io
import multiprocessing
import os
import queue
import socket
import time
import traceback


class RankFailure:
    def __init__(self, type_name, message, seconds, trace=""):
        self.type_name = type_name
        self.message = message
        self.seconds = seconds
        self.trace = trace

    def __repr__(self):
        return "RankFailure(%s: %s after %.1f s)" % (self.type_name, self.message, self.seconds)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, worker, args, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    start = time.monotonic()
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        value = worker(rank, world, *args)
        # As bytes: a tensor put on a queue as it is would be shared through this
        # process's memory, gone once it exits.
        blob = io.BytesIO()
        torch.save(value, blob)
        results.put((rank, blob.getvalue()))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the test
        blob = io.BytesIO()
        torch.save(RankFailure(type(e).__name__, str(e), time.monotonic() - start,
                               traceback.format_exc()), blob)
        results.put((rank, blob.getvalue()))
        results.close()
        results.join_thread()  # flushed before leaving
        # A failed rank leaves at once, as a failed training process does; a clean
        # destroy_process_group would wait for peers that may never come.
        os._exit(0)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


def run_ranks(world, worker, *args, timeout=120):
    import torch
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, worker, args, results))
             for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    deadline = time.monotonic() + timeout
    all_gone_at = None
    try:
        while len(out) < world and time.monotonic() < deadline:
            try:
                rank, blob = results.get(timeout=0.2)
                out[rank] = torch.load(io.BytesIO(blob))
            except queue.Empty:
                # Every rank gone: what they put may still be on its way for a moment.
                if all(not p.is_alive() for p in procs):
                    all_gone_at = all_gone_at or time.monotonic()
                    if time.monotonic() - all_gone_at > 2.0:
                        break
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
            p.join()
    if alive and len(out) < world:
        raise AssertionError("ranks %s still running after %.0f s; results: %r"
                             % ([procs.index(p) for p in alive], timeout, out))
    for r in range(world):
        if r not in out:
            out[r] = RankFailure("exit", "exit code %s" % procs[r].exitcode, 0.0)
    return [out[r] for r in range(world)]


def expect_success(results):
    failures = {r: v for r, v in enumerate(results) if isinstance(v, RankFailure)}
    assert not failures, "\n".join("rank %d: %r\n%s" % (r, f, f.trace)
                                   for r, f in failures.items())
    return results


def error_of(fn):
    """"ok" when fn() returns, else (the gradwire.Error subclass's name, its message)."""
    import gradwire
    try:
        fn()
        return "ok"
    except gradwire.Error as e:
        return (type(e).__name__, str(e))


def first_failing_step(step, steps, die_at, dies):
    """Runs step(i) for i < steps; when `dies`, this process exits (as a killed rank does)
    before step `die_at`. The first gradwire.Error: (its type's name, its message, the
    seconds that step ran, i); "no failure" when none."""
    import time
    import gradwire
    for i in range(steps):
        if dies and i == die_at:
            os._exit(3)
        start = time.monotonic()
        try:
            step(i)
        except gradwire.Error as e:
            return (type(e).__name__, str(e), time.monotonic() - start, i)
    return "no failure"


def check_dead_peer_failed(results, timeout, dead_rank, at_step):
    """Every rank but the dead one failed at `at_step` within twice the timeout (and a
    margin for this loaded machine), with a gradwire error naming the dead rank (a closed
    connection fails at once; the survivors then name the rank that had not reached the
    collective, gloo_collectives.cc)."""
    for rank, result in enumerate(results):
        if rank == dead_rank:
            continue
        assert isinstance(result, tuple), (rank, result)
        name, message, seconds, step = result
        assert step == at_step, (rank, result)
        assert seconds <= 2 * timeout + 5, (rank, result)
        assert name in ("Error", "TimeoutError"), (rank, result)
        assert ("rank %d had not reached" % dead_rank in message
                or "rank %d did not arrive" % dead_rank in message), (rank, result)
