"""The small DDP job the hook's tests train: a model, each rank's batches, a training loop
with DDP (and gradwire's hook), and an exact comparison of parameters."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire

# Small buckets, so that every model is several buckets (and DDP rebuilds them).
BUCKET_MB = 0.004


class Net(nn.Module):
    def __init__(self, unused_branch=False):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 5)
        self.unused = nn.Linear(32, 5) if unused_branch else None

    def forward(self, x):
        x = F.relu(self.conv(x)).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def batches(rank, steps, n=8, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return [(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g))
            for _ in range(steps)]


def train(rank, codec, steps, ddp_kwargs=None, accumulate=1, seed=0, unused_branch=False,
          lr=0.05):
    """Trains Net under DDP (with gradwire's hook unless codec is None); returns the
    parameters and losses. `accumulate` > 1 runs that many micro-batches a step, all but
    the last under no_sync()."""
    torch.manual_seed(seed)
    model = Net(unused_branch)
    ddp = DDP(model, bucket_cap_mb=BUCKET_MB, **(ddp_kwargs or {}))
    if codec is not None:
        state, hook = gradwire.ddp.hook(codec, model=model)
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    losses = []
    data = batches(rank, steps * accumulate, seed=seed)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = data[step * accumulate + micro]
            if micro + 1 < accumulate:
                with ddp.no_sync():
                    F.cross_entropy(ddp(x), y).backward()
            else:
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def assert_params_equal(a, b, what):
    for k, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), "%s: parameter %d differs by %g" % (
            what, k, (x - y).abs().max().item())
