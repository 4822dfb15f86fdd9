"""Fashion-MNIST with PyTorch DDP, gradwire's codecs as DDP's communication hook.

A plain PyTorch DDP program (DistributedSampler, SGD, a checkpoint each epoch); the lines
gradwire adds are marked `# gradwire`. From the build tree:

    PYTHONPATH=build/python ./build/gradwire run -n 4 -- /usr/bin/python3 examples/ddp_hook.py

(installed: `gradwire run -n 4 -- python3 examples/ddp_hook.py`). Options: --codec (default
auto; int8, powersgd:rank=8, topk:density=0.01, none, ...), --epochs, --limit (samples),
--checkpoint PATH (every rank saves PATH.rank<R> after each epoch and resumes from it when it
exists: the hook's state is each rank's own, error feedback's residuals differ per rank).
"""
import argparse
import gzip
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import gradwire  # gradwire

DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def load(train, limit):
    prefix = "train" if train else "t10k"
    with gzip.open(os.path.join(DATA, prefix + "-images-idx3-ubyte.gz")) as f:
        images = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8)
    with gzip.open(os.path.join(DATA, prefix + "-labels-idx1-ubyte.gz")) as f:
        labels = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8)
    x = images.view(-1, 1, 28, 28).float().div(255).sub(0.2860).div(0.3530)
    y = labels.long()
    if limit:
        x, y = x[:limit], y[:limit]
    return TensorDataset(x, y)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--codec", default="auto")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint", default="")
    args = parser.parse_args()

    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))

    train_set, test_set = load(True, args.limit), load(False, args.limit and 2000)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    state, hook = gradwire.ddp.hook(args.codec, model=model)  # gradwire
    first_epoch = 0
    checkpoint = "%s.rank%d" % (args.checkpoint, rank)  # gradwire: one per rank
    if args.checkpoint and os.path.exists(checkpoint):
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state.load_state_dict(saved["hook"])  # gradwire
        first_epoch = saved["epoch"] + 1
    ddp = DDP(model)
    ddp.register_comm_hook(state, hook)  # gradwire

    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()
        ddp.eval()
        correct = 0
        with torch.no_grad():
            for x, y in DataLoader(test_set, batch_size=1000):
                correct += (model(x).argmax(1) == y).sum().item()
        if rank == 0:
            traffic = state.traffic()  # gradwire
            print("epoch %d: test accuracy %.2f%% codec %s, %.1f MB sent (fp32 allreduce: "
                  "%.1f MB)" % (epoch, 100.0 * correct / len(test_set), state.codec,
                                traffic["bytes_on_wire"] / 1e6,
                                traffic["bytes_dense_on_wire"] / 1e6), flush=True)
        if args.checkpoint:  # every rank its own: the hook's state differs per rank
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "hook": state.state_dict(), "epoch": epoch},  # gradwire: hook
                       checkpoint)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
