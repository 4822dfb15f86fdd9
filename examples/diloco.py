"""A byte-level transformer on the King James Bible, trained with gradwire's DiLoCo.

A plain PyTorch program (AdamW, a checkpoint per rank); the lines gradwire adds are marked
`# gradwire`. From the build tree:

    PYTHONPATH=build/python ./build/gradwire run -n 4 -- /usr/bin/python3 examples/diloco.py

Each rank trains on its own shard of the text and steps AdamW on its own gradients; every
--inner-steps steps DiLoCo averages the model, a fragment at a time, with 4-bit outer
gradients sent while training goes on. The validation loss is of the model the ranks agree
on (diloco.global_model_state()). Options: --steps, --inner-steps, --fragments, --delay,
--codec, --checkpoint PREFIX (each rank saves and resumes PREFIX.rank<R>).
"""
import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import gradwire  # gradwire

CORPUS = "/var/cache/gradwire/kjv.txt"  # scripts/prepare_corpus.sh writes it


class TinyGPT(nn.Module):
    def __init__(self, context=64, width=96, layers=2, heads=4):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        h = self.embed(x) + self.position[: x.shape[1]]
        h = self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]])
        return self.head(self.norm(h))


def batch(text, batch_size, context, generator):
    start = torch.randint(0, len(text) - context - 1, (batch_size,), generator=generator)
    index = start[:, None] + torch.arange(context + 1)
    chunk = text[index]
    return chunk[:, :-1], chunk[:, 1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--inner-steps", type=int, default=50)
    parser.add_argument("--fragments", type=int, default=2)
    parser.add_argument("--delay", type=int, default=5)
    parser.add_argument("--codec", default="int4")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--checkpoint", default="")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    with open(CORPUS, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    split = int(0.95 * len(data))
    shard = len(data[:split]) // world
    train = data[rank * shard:(rank + 1) * shard]  # this rank's part of the text
    valid = data[split:]

    torch.manual_seed(0)
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    diloco = gradwire.DiLoCo(model, optimizer, inner_steps=args.inner_steps,  # gradwire
                             fragments=args.fragments, delay=args.delay, codec=args.codec)
    generator = torch.Generator().manual_seed(1 + rank)
    first = 0
    path = "%s.rank%d" % (args.checkpoint, rank) if args.checkpoint else ""
    if path and os.path.exists(path):
        saved = torch.load(path)
        diloco.load_state_dict(saved["diloco"])  # gradwire: model, AdamW and DiLoCo
        generator.set_state(saved["generator"])
        first = saved["step"]

    evaluator = TinyGPT()
    for step in range(first, args.steps):
        x, y = batch(train, args.batch, model.context, generator)
        diloco.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        diloco.step()  # gradwire: was optimizer.step()
        if (step + 1) % args.eval_every == 0:
            evaluator.load_state_dict(diloco.global_model_state())  # gradwire
            g = torch.Generator().manual_seed(12345)
            with torch.no_grad():
                vx, vy = batch(valid, 64, model.context, g)
                val = F.cross_entropy(evaluator(vx).flatten(0, 1), vy.flatten()).item()
            if rank == 0:
                stats = diloco.stats()
                print("step %d: train loss %.3f, validation loss %.3f (%.2f bits/byte), %d "
                      "outer steps, %.2f MB sent" % (step + 1, loss.item(), val,
                                                    val / math.log(2), stats["outer_steps"],
                                                    stats["bytes_on_wire"] / 1e6), flush=True)
            if path:
                torch.save({"diloco": diloco.state_dict(), "generator": generator.get_state(),
                            "step": step + 1}, path)
    diloco.finish()  # gradwire: one model on every rank
    if rank == 0:
        print("done: %d inner steps, %s" % (args.steps, diloco.stats()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
