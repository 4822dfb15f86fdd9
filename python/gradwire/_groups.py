"""Where gradwire's own Gloo groups rendezvous.

gradwire.ddp.hook and gradwire.DiLoCo exchange over a Gloo group of their own, made in C++
over the ranks of the program's group (the default one unless given): gradwire's timeout
bounds its Gloo operations too, so a rank that raised gradwire.TimeoutError can exit at
once, and the program's groups carry none of gradwire's traffic. Each group rendezvouses
under a prefix of the job's store that the group's ranks agree on without talking: the
program group's global ranks and how many groups of that kind this process has bound over
them (every rank binds its hooks, and makes its DiLoCos, in the same order).
"""
import collections
import os

import torch.distributed as dist

from gradwire import _C

_bound = collections.Counter()  # (kind, global ranks) -> groups made


def default_timeout():
    """GRADWIRE_TIMEOUT's seconds, else 300."""
    text = os.environ.get("GRADWIRE_TIMEOUT", "")
    return float(text) if text else 300.0


def require_initialized(what):
    if not dist.is_available() or not dist.is_initialized():
        raise _C.ConfigError(
            "%s needs torch.distributed initialized "
            "(torch.distributed.init_process_group('gloo'))" % what)


def rendezvous(kind, process_group):
    """(store, rank, size) for a new group of `kind` over `process_group`'s ranks (None:
    the default group's)."""
    default = dist.distributed_c10d._get_default_group()
    group = default if process_group is None or process_group == dist.group.WORLD \
        else process_group
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise _C.ConfigError("%s: this process is not in the given process group" % kind)
    if group == default:
        ranks = tuple(range(size))
    else:
        ranks = tuple(dist.distributed_c10d._get_global_rank(group, r) for r in range(size))
    number = _bound[(kind, ranks)]
    _bound[(kind, ranks)] += 1
    name = "gradwire/%s/%s/%d" % (kind, ",".join(map(str, ranks)), number)
    return dist.PrefixStore(name, dist.distributed_c10d._get_default_store()), rank, size
