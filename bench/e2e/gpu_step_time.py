#!/usr/bin/env python3
"""Step compute time on a GPU, for docs/EMULATION.md's mapping of emulated links to real
clusters: forward + backward + SGD step of a model at a per-GPU batch, no communication.

    python3 bench/e2e/gpu_step_time.py [--json FILE]

Prints, per model and precision, the step time and the fp32 gradient bytes; their ratio
(bytes of gradient per second of compute) is what a link must carry to keep up.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cnn(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 5), nn.Conv2d(32, 64, 5)
        self.fc1, self.fc2 = nn.Linear(1024, hidden), nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def models():
    import torchvision
    yield "cnn (Fashion-MNIST)", lambda: Cnn(128), (1, 28, 28), 64, 10
    yield "cnn-wide (Fashion-MNIST)", lambda: Cnn(2048), (1, 28, 28), 64, 10
    yield "resnet18 (ImageNet)", torchvision.models.resnet18, (3, 224, 224), 64, 1000
    yield "resnet50 (ImageNet)", torchvision.models.resnet50, (3, 224, 224), 64, 1000
    yield "vgg16 (ImageNet)", torchvision.models.vgg16, (3, 224, 224), 64, 1000


def step_time(make, shape, batch, classes, precision, steps=30, warmup=10):
    model = make().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *shape, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device="cuda")
    def one():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16-amp"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        one()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    grad_bytes = 4 * sum(p.numel() for p in model.parameters())
    return seconds, grad_bytes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, make, shape, batch, classes in models():
        for precision in ("fp32/tf32", "bf16-amp"):
            seconds, grad_bytes = step_time(make, shape, batch, classes, precision)
            row = {"model": name, "batch": batch, "precision": precision, "step_s": seconds,
                   "grad_bytes": grad_bytes, "grad_bytes_per_compute_s": grad_bytes / seconds}
            rows.append(row)
            print(f"{name:26s} batch {batch} {precision:9s}: step {1e3 * seconds:8.2f} ms, "
                  f"gradient {grad_bytes / 1e6:8.2f} MB, {grad_bytes / seconds / 1e9:7.2f} GB of "
                  f"gradient per second of compute")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
