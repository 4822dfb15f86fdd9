#!/usr/bin/python3
"""The job of `gradwire train` in PyTorch, as bench/peers/ddp_peer.py trains it and
bench/quality/hook_side_by_side.py steps it: the models (cnn, cnn-wide, mlp, built in the
same order from the same seed as gradwire's; gpt, whose initial weights come from
gradwire), the data (Fashion-MNIST with the same normalization; gpt: the text corpus, the
same split and windows), DistributedSampler's shards, the recipe (src/gradwire/train/
recipe.h: SGD with momentum, or gpt's AdamW with warm-up, cosine and clipping), the
evaluation and the parameters' checksum."""

import gzip
import json
import math
import os
import struct
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training-set pixel statistics (of x / 255)
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


class Cnn(nn.Module):
    """conv(1->32, 5x5) relu maxpool2, conv(32->64, 5x5) relu maxpool2, fc(1024->hidden)
    relu, fc(hidden->10): `cnn` with hidden 128, `cnn-wide` with 2048."""

    def __init__(self, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(1024, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Block(nn.Module):
    """gradwire's gpt block (src/gradwire/train/gpt.h): pre-norm causal self-attention and
    MLP, each added to the residual stream."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = (y.view(b, t, self.heads, hd).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(d, 2))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        scores = scores.masked_fill(mask, float("-inf"))
        attended = torch.matmul(torch.softmax(scores, -1), v)
        x = x + self.proj(attended.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    """gradwire's `gpt`: bytes, context 128, width 128, 4 layers of 4 heads, the token
    embedding tied to the output layer. Its weights come from gradwire
    (--initial-weights), so both sides start from the same ones."""

    def __init__(self, vocabulary=256, context=128, width=128, layers=4, heads=4):
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(vocabulary, width)
        self.wpe = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocabulary, bias=False)
        self.lm_head.weight = self.wte.weight
        # A plain attribute, not a buffer: DDP would broadcast it, and Gloo has no bool.
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, tokens):
        t = tokens.size(1)
        x = self.wte(tokens) + self.wpe[:t]
        mask = self.mask[:t, :t]
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))


def make_model(name):
    if name == "cnn":
        return Cnn(128)
    if name == "cnn-wide":
        return Cnn(2048)
    if name == "mlp":
        return Mlp()
    if name == "gpt":
        return Gpt()
    raise SystemExit(f"ddp_peer: unknown model '{name}'; available: cnn, cnn-wide, mlp, gpt")


def load_initial_weights(model, path):
    """Copies the weights gradwire wrote (`gradwire train --save-initial-weights`, format in
    src/gradwire/train/workload.h) into `model`, checking names and shapes."""
    if not os.path.exists(path):
        raise SystemExit(f"ddp_peer: initial weights {path} not found: write them with "
                         "gradwire train --model M --seed S --save-initial-weights FILE")
    with open(path, "rb") as f:
        if f.readline() != b"gradwire-weights 1\n":
            raise SystemExit(f"ddp_peer: {path} is not a gradwire weights file")
        header = json.loads(f.readline())
        data = f.read()
    named = list(model.named_parameters())
    if [(h["name"], h["shape"]) for h in header] != [(n, list(p.shape)) for n, p in named]:
        raise SystemExit(f"ddp_peer: {path} holds other parameters than this model's")
    offset = 0
    with torch.no_grad():
        for _, p in named:
            n = p.numel() * 4
            p.copy_(torch.frombuffer(bytearray(data[offset:offset + n]),
                                     dtype=torch.float32).view(p.shape))
            offset += n
    if offset != len(data):
        raise SystemExit(f"ddp_peer: {path} has {len(data) - offset} bytes too many")


def read_idx(path, magic):
    if not os.path.exists(path):
        raise SystemExit(f"ddp_peer: Fashion-MNIST file {path} not found: install Debian's "
                         "dataset-fashion-mnist package or pass --data-dir DIR")
    with gzip.open(path, "rb") as f:
        data = f.read()
    if struct.unpack(">I", data[:4])[0] != magic:
        raise SystemExit(f"ddp_peer: {path}: bad magic number")
    return data


def load_fashion_mnist(directory, train, limit):
    prefix = os.path.join(directory, "train" if train else "t10k")
    images = read_idx(prefix + "-images-idx3-ubyte.gz", 0x803)
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz", 0x801)
    n = struct.unpack(">I", images[4:8])[0]
    keep = min(limit, n) if limit > 0 else n
    x = torch.frombuffer(bytearray(images[16:16 + keep * 784]), dtype=torch.uint8)
    x = x.reshape(keep, 1, 28, 28).to(torch.float32).div_(255.0).sub_(MEAN).div_(STD)
    y = torch.frombuffer(bytearray(labels[8:8 + keep]), dtype=torch.uint8).to(torch.int64)
    return x, y


BIBLE_CORPUS = "/var/cache/gradwire/kjv.txt"


def load_text_corpus(path, validation_fraction=0.1):
    """gradwire's load_text_corpus: bytes; the validation text from the first line that
    starts at or after the last `validation_fraction` of the file."""
    if not os.path.exists(path):
        raise SystemExit(f"ddp_peer: text corpus {path} not found: run scripts/install_deps.sh "
                         "or pass --corpus FILE")
    with open(path, "rb") as f:
        text = f.read()
    split = int(len(text) * (1 - validation_fraction))
    while 0 < split < len(text) and text[split - 1] != ord("\n"):
        split += 1
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).to(torch.int64)
    return as_tensor(text[:split]), as_tensor(text[split:])


def windows(text, context, indices):
    """Inputs and targets of the windows `indices` (gradwire's TextWindows::batch)."""
    starts = torch.as_tensor(indices, dtype=torch.int64) * context
    offsets = starts[:, None] + torch.arange(context + 1)
    chunk = text[offsets]
    return chunk[:, :-1], chunk[:, 1:]


class ImageJob:
    """Fashion-MNIST classification; metric: test accuracy."""
    metric, higher_is_better = "test_accuracy", True

    def __init__(self, args, root):
        self.x, self.y = load_fashion_mnist(args.data_dir, True, args.train_limit)
        self.test = load_fashion_mnist(args.data_dir, False, args.test_limit) if root else None

    def train_size(self):
        return len(self.y)

    def loss(self, model, batch):
        return F.cross_entropy(model(self.x.index_select(0, batch)), self.y.index_select(0, batch))

    def evaluate(self, model):
        return evaluate(model, *self.test)

    def no_decay(self):
        return set()


class TextJob:
    """gpt on the text corpus: a sample is a window of 129 bytes; metric: the validation
    loss in nats per character on 256 windows spread over the validation text (or
    --test-limit of them), as gradwire's TextWorkload."""
    metric, higher_is_better = "val_loss", False
    context = 128

    def __init__(self, args, root):
        train, validation = load_text_corpus(args.corpus)
        self.text = train
        self.size = (len(train) - 1) // self.context
        if 0 < args.train_limit < self.size:
            self.size = args.train_limit
        if root:
            count = (len(validation) - 1) // self.context
            n = min(count, args.test_limit if args.test_limit > 0 else 256)
            self.eval = windows(validation, self.context, [i * count // n for i in range(n)])

    def train_size(self):
        return self.size

    def loss(self, model, batch):
        x, y = windows(self.text, self.context, batch)
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    def evaluate(self, model):
        threads = torch.get_num_threads()
        torch.set_num_threads(os.cpu_count() or 1)
        model.eval()
        x, y = self.eval
        total = 0.0
        with torch.no_grad():
            for start in range(0, len(x), 32):
                logits = model(x[start:start + 32])
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                       y[start:start + 32].reshape(-1))
                total += float(loss) * len(logits)
        model.train()
        torch.set_num_threads(threads)
        return total / len(x) if len(x) else 0.0

    def no_decay(self):
        return {"wte.weight", "wpe"}


def recipe(args):
    """gradwire's recipe (src/gradwire/train/recipe.h): the model's, with what is given."""
    gpt = args.model == "gpt"
    r = {"optimizer": "adamw" if gpt else "sgd", "lr": 5e-3 if gpt else 0.05, "momentum": 0.9,
         "weight_decay": 0.1 if gpt else 0.0, "schedule": "cosine" if gpt else "constant",
         "warmup": 0.05 if gpt else 0.0, "clip_norm": 1.0 if gpt else 0.0}
    for key in r:
        given = getattr(args, key)
        if given is not None:
            r[key] = given
    return r


def lr_at(r, step, steps):
    """Recipe::lr_at: linear warm-up over warmup x steps, then cosine to a tenth."""
    if r["schedule"] == "constant":
        return r["lr"]
    warmup_steps = math.floor(r["warmup"] * steps)
    if step < warmup_steps:
        return r["lr"] * (step + 1) / warmup_steps
    decay_steps = steps - warmup_steps
    p = (step - warmup_steps) / (decay_steps - 1) if decay_steps > 1 else 1.0
    low = 0.1 * r["lr"]
    return low + (r["lr"] - low) * (1 + math.cos(math.pi * min(1.0, p))) / 2


def make_optimizer(r, model, no_decay):
    """SGD on every parameter, or AdamW (betas 0.9, 0.99) with two groups: the weight
    matrices decayed, the rest (norms, biases, embeddings) not."""
    if r["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=r["lr"], momentum=r["momentum"],
                               weight_decay=r["weight_decay"])
    named = list(model.named_parameters())
    decayed = [p for n, p in named if p.dim() >= 2 and n not in no_decay]
    kept = [p for n, p in named if not (p.dim() >= 2 and n not in no_decay)]
    groups = [g for g in ({"params": decayed, "weight_decay": r["weight_decay"]},
                          {"params": kept, "weight_decay": 0.0}) if g["params"]]
    return torch.optim.AdamW(groups, lr=r["lr"], betas=(0.9, 0.99), eps=1e-8)


def shard(dataset_size, rank, world_size, seed, epoch):
    """gradwire::DistributedSampler's shard: Fisher-Yates from the back over SplitMix64
    draws seeded with seed * golden + epoch, padded by wrapping around, rank r taking
    positions r, r + W, r + 2W, ..."""
    order = list(range(dataset_size))
    state = (seed * GOLDEN + epoch) & MASK64
    for i in range(dataset_size, 1, -1):
        state = (state + GOLDEN) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        j = (z ^ (z >> 31)) % i
        order[i - 1], order[j] = order[j], order[i - 1]
    per_rank = (dataset_size + world_size - 1) // world_size
    return [order[(j * world_size + rank) % dataset_size] for j in range(per_rank)]


def parameter_crc32(model):
    """CRC-32 of the raw bytes of every parameter in order, as gradwire's initial_checksum."""
    crc = 0
    for p in model.parameters():
        crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
    return f"{crc:08x}"


def evaluate(model, images, labels):
    """Top-1 accuracy in batches of 1000, on every core (the other ranks wait meanwhile)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(labels), 1000):
            logits = model(images[start:start + 1000])
            correct += int(logits.argmax(1).eq(labels[start:start + 1000]).sum())
    model.train()
    torch.set_num_threads(threads)
    return correct / len(labels) if len(labels) else 0.0
