"""One rank of a small job, as a program a user runs (launched by test_process_exit.py with
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set): it leaves the way a failed training
process leaves, through the interpreter's own exit, so whatever keeps a process from
exiting shows.

    python3 rank_job.py ddp|diloco STUCK_RANK SLEEP_S [--sigpipe-default]

Trains 6 steps of a small model (DDP with gradwire's int8 hook, or gradwire.DiLoCo with
H = 2); STUCK_RANK sleeps SLEEP_S seconds before its step 3 (alive, not dead). Prints
"sleeping <t>" there and "raised <t> <type>: <message>" when a gradwire error reaches the
loop, t being time.monotonic() (CLOCK_MONOTONIC, shared by every process), then re-raises.
With --sigpipe-default the program sets SIGPIPE to its default disposition first, and prints
"sigpipe <python's view> <what a child inherits>" and "threads <n> blocking SIGPIPE" after
the first step.
"""
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire


def say(text):
    print(text, flush=True)


def threads_blocking_sigpipe():
    """This process's threads whose signal mask blocks SIGPIPE (/proc's SigBlk)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/status" % task) as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    count += (int(line.split()[1], 16) >> (signal.SIGPIPE - 1)) & 1
    return count


def main():
    mode, stuck, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    if "--sigpipe-default" in sys.argv:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    if mode == "ddp":
        ddp = DDP(model)
        state, hook = gradwire.ddp.hook("int8")
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        step = opt.step
        forward = ddp
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        diloco = gradwire.DiLoCo(model, opt, inner_steps=2, fragments=1, codec="int8")
        step = diloco.step
        forward = model
    g = torch.Generator().manual_seed(rank)
    for i in range(6):
        if i == 3 and rank == stuck:
            say("sleeping %.3f" % time.monotonic())
            time.sleep(sleep_s)
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        try:
            F.cross_entropy(forward(x), y).backward()
            step()
        except gradwire.Error as e:
            say("raised %.3f %s: %s" % (time.monotonic(), type(e).__name__, e))
            raise
        if i == 0 and "--sigpipe-default" in sys.argv:
            # What the process's disposition is now, as Python reports it and as a child
            # inherits it: `yes` ends silently by SIGPIPE under the default, and says
            # "Broken pipe" when it inherited an ignore.
            child = subprocess.run("yes | head -n1", shell=True, capture_output=True, text=True)
            view = "default" if signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL else "other"
            inherited = "ignored" if "Broken pipe" in child.stderr else "default"
            say("sigpipe %s %s" % (view, inherited))
            say("threads %d blocking SIGPIPE" % threads_blocking_sigpipe())
    if mode == "diloco":
        diloco.finish()
    say("done %.3f" % time.monotonic())


if __name__ == "__main__":
    main()
