#!/usr/bin/python3
"""Single-thread float32 matrix products through the BLAS that python3-torch (and
libtorch, the same library) is linked to, in GFLOP/s: what decides the compute floor of
every fully-connected layer and of gpt. Run it twice to compare BLAS builds:

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/blas/matmul_speed.py
    OMP_NUM_THREADS=1 LD_PRELOAD=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3 \\
        /usr/bin/python3 bench/blas/matmul_speed.py     # Debian's reference BLAS

Shapes: gpt's MLP (1024 tokens x 128 -> 512) and cnn-wide's fc1 (64 x 1024 -> 2048).
"""
import time

import torch

torch.set_num_threads(1)
for m, k, n, what in ((1024, 128, 512, "gpt fc1 (1024 tokens)"),
                      (64, 1024, 2048, "cnn-wide fc1 (batch 64)")):
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - start) / 10)
    print(f"{what}: {m}x{k} @ {k}x{n}: {2 * m * k * n / best / 1e9:.1f} GFLOP/s "
          f"(best of 5 x 10 products)")
