#!/usr/bin/env python3
"""Fits the alpha-beta cost model (src/gradwire/comm/cost_model.h) to `gradwire bench
exchange` measurements and checks its predictions of the sparse paths against them.

Inputs: JSON Lines from rank 0 of `gradwire bench exchange` at several world sizes.
Outputs in --out: fit.json (alpha, beta), results.md (the tables), scaling.png (measured
points beside the model up to 1,024 ranks).

The formulas are cost_model.cc's; keep the two in step.
"""
import argparse
import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

SIZE_BYTES = 8
PAIR_BYTES = 8


def coefficients(op, w, nbytes):
    """(a, b) with time = a alpha + b beta for one collective."""
    if op == "allreduce":
        return 2 * (w - 1), 2 * (w - 1) / w * nbytes
    if op in ("allgather", "alltoall"):
        return 2 * (w - 1), (w - 1) * (SIZE_BYTES + nbytes)
    raise ValueError(op)


def path_seconds(alpha, beta, path, w, n, payload, pairs, union):
    """Per-rank load: payload bytes and pairs of one rank; union over all ranks."""
    def ag(b):
        return 2 * (w - 1) * alpha + (w - 1) * (SIZE_BYTES + b) * beta
    if w < 2:
        return 0.0
    if path == "allgather":
        return ag(payload)
    if path == "split":
        reduced = min(PAIR_BYTES * union / w, 4 * n / w)
        return ag(PAIR_BYTES * pairs / w) + ag(reduced)
    if path == "dense":
        return 2 * (w - 1) * alpha + 2 * (w - 1) / w * 4 * n * beta
    raise ValueError(path)


def synthetic_load(n, density, shared, w):
    """What `gradwire bench exchange` generates: per rank k = density n pairs, a `shared`
    fraction on coordinates every rank picks; the union of W ranks."""
    d_shared, d_own = density * shared, density * (1 - shared)
    pairs = n * (1 - (1 - d_shared) * (1 - d_own))
    union = n * (1 - (1 - d_shared) * (1 - d_own) ** w)
    return 4 + PAIR_BYTES * pairs, pairs, union


# Payload bytes of n elements (compress/quantize/: the 8-byte header, then the body).
PAYLOADS = {
    "int8": lambda n: 8 + 4 + 4 * math.ceil(n / 256) + n,         # block 256
    "int4": lambda n: 8 + 4 + 4 * math.ceil(n / 128) + math.ceil(n / 2),  # block 128
    "fp16": lambda n: 8 + 2 * n,
    "bf16": lambda n: 8 + 2 * n,
}


def reduce_scatter_seconds(alpha, beta, w, payload):
    """strategy/codec_reduce_scatter.h: an alltoall of each range's payload, then an
    allgather of each owner's encoded mean (one byte more), `payload` a range's."""
    alltoall = 2 * (w - 1) * alpha + (w - 1) * (SIZE_BYTES + payload) * beta
    allgather = 2 * (w - 1) * alpha + (w - 1) * (SIZE_BYTES + payload + 1) * beta
    return alltoall + allgather


def ring_path_seconds(alpha, beta, w, codec, n):
    """A quantizer's own path for n elements: int8's shared-scale ring (an allreduce of the
    block maxima, then of the int8 values), fp16's allreduce, bf16's and int4's allgather
    of payloads."""
    def allreduce(b):
        return 2 * (w - 1) * alpha + 2 * (w - 1) / w * b * beta
    if codec == "int8":
        return allreduce(4 * math.ceil(n / 256)) + allreduce(n)
    if codec == "fp16":
        return allreduce(2 * n)
    return 2 * (w - 1) * alpha + (w - 1) * (SIZE_BYTES + PAYLOADS[codec](n)) * beta


def quantized_paths_table(alpha, beta, fit_world):
    """A bucket of the whole model per quantizer: its ring path (int8's shared-scale
    allreduce of floor(127/W) levels, fp16's allreduce, int4's and bf16's allgather of
    payloads) against the reduce-scatter, predicted with the fit."""
    models = {"cnn": 738_344, "cnn-wide": 8_687_144, "gpt": 3_369_984}
    md = ["", f"Quantized buckets (one bucket of the whole model, no overlap, no codec compute; "
              f"the {fit_world}-rank fit): each codec's ring path against the reduce-scatter "
              "(summed in fp32 by each range's owner, every level kept; "
              "strategy/codec_reduce_scatter.h). int8's shared-scale ring has floor(127 / W) "
              "levels per sign and none beyond 127 ranks (\"-\"):\n",
          "| model | world | int8 ring levels | int8 shared-scale ring (ms) | "
          "int8 reduce-scatter (ms) | fp16 ring (ms) | fp16 reduce-scatter (ms) | "
          "int4 allgather (ms) | int4 reduce-scatter (ms) | bf16 allgather (ms) | "
          "bf16 reduce-scatter (ms) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, fp32_bytes in models.items():
        n = fp32_bytes // 4
        for w in (4, 8, 16, 64, 256, 1024):
            rs = {c: reduce_scatter_seconds(alpha, beta, w, f(math.ceil(n / w)))
                  for c, f in PAYLOADS.items()}
            ring = {c: ring_path_seconds(alpha, beta, w, c, n) for c in PAYLOADS}
            levels = 127 // w
            cells = [name, str(w), str(levels) if levels else "-",
                     f"{ring['int8'] * 1e3:,.1f}" if levels else "-", f"{rs['int8'] * 1e3:,.1f}",
                     f"{ring['fp16'] * 1e3:,.1f}", f"{rs['fp16'] * 1e3:,.1f}",
                     f"{ring['int4'] * 1e3:,.1f}", f"{rs['int4'] * 1e3:,.1f}",
                     f"{ring['bf16'] * 1e3:,.1f}", f"{rs['bf16'] * 1e3:,.1f}"]
            md.append("| " + " | ".join(cells) + " |")
    return md


def quantized_measured_table(rows, per_world, fallback):
    """`bench exchange --quantized`: each codec's two paths for one dense bucket, measured
    (the allreduce strategy's synchronize(): encode, collectives, decode; over the runs
    given, mean [min, max] of each run's median) against the model's exchange with that
    world's fit (no codec compute)."""
    md = ["", "Quantized bucket, measured (the allreduce strategy itself, encoding and decoding "
              "included; mean [min, max] over the runs) against the model (this world's fit, "
              "collectives only):\n",
          "| world | codec | path | elements | runs | on the wire a rank (bytes) | "
          "measured (ms) | model (ms) | measured / model |",
          "|---|---|---|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["codec"], r["world"], r["path"]), []).append(r)
    for (name, w, path), runs in sorted(groups.items()):
        a_, b_ = per_world.get(w, fallback)
        n = runs[0]["elements"]
        codec = name.split(":")[0]
        model = None
        if codec in PAYLOADS:
            model = (reduce_scatter_seconds(a_, b_, w, PAYLOADS[codec](math.ceil(n / w)))
                     if path == "reduce-scatter" else ring_path_seconds(a_, b_, w, codec, n))
        ms = [1e3 * r["seconds"] for r in runs]
        shown = (f"{ms[0]:.1f}" if len(ms) == 1 else
                 f"{sum(ms) / len(ms):.1f} [{min(ms):.1f}, {max(ms):.1f}]")
        model_text = "" if model is None else f"{model * 1e3:.1f}"
        ratio = "" if model is None else f"{sum(ms) / len(ms) / 1e3 / model:.2f}"
        md.append(f"| {w} | {name} | {path} | {n:,} | {len(runs)} | {runs[0]['wire_bytes']:,} | "
                  f"{shown} | {model_text} | {ratio} |")
    return md


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True,
                        help="folder for fit.json, results.md and scaling.png; '-': print the "
                             "tables only (bench/docs_tables.py checks them so)")
    parser.add_argument("--rate", default="")
    args = parser.parse_args()

    rows = []
    for path in args.files:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    collectives = [r for r in rows if r["op"] in ("allreduce", "allgather", "alltoall")]
    sparse = [r for r in rows if r["op"] == "sparse"]
    quantized = [r for r in rows if r["op"] == "quantized"]
    if not collectives:
        raise SystemExit("no collective measurements to fit")

    # Least squares on relative error (each point weighted by 1 / its time), so the
    # small-message points fix alpha and the large ones beta: one fit per world size
    # (emulated hosts share this machine's cores, which stretches alpha as W grows), and
    # one over every point.
    def fit_points(points):
        a = np.array([coefficients(r["op"], r["world"], r["bytes"]) for r in points], float)
        t = np.array([r["seconds"] for r in points], float)
        w = 1 / t
        (alpha, beta), *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
        return max(alpha, 0.0), max(beta, 1e-15)

    worlds_measured = sorted({r["world"] for r in collectives})
    per_world = {w: fit_points([r for r in collectives if r["world"] == w])
                 for w in worlds_measured}
    alpha_all, beta_all = fit_points(collectives)
    # Extrapolation uses the smallest world's fit: one rank per core, as on real hosts.
    alpha, beta = per_world[worlds_measured[0]]
    fit = {"alpha_s": alpha, "beta_s_per_byte": beta, "bandwidth_bits_per_s": 8 / beta,
           "from_world": worlds_measured[0],
           "per_world": {str(w): {"alpha_s": a_, "beta_s_per_byte": b_}
                         for w, (a_, b_) in per_world.items()},
           "all_worlds": {"alpha_s": alpha_all, "beta_s_per_byte": beta_all},
           "points": len(collectives), "rate": args.rate}
    write = args.out != "-"
    if write:
        with open(f"{args.out}/fit.json", "w") as f:
            json.dump(fit, f, indent=1)

    md = []
    md.append(f"Alpha-beta fits of the collectives ({args.rate} links), per world size and over "
              f"all {len(collectives)} points:\n")
    md.append("| world | alpha (us) | beta (ns/byte) | effective bandwidth (Mbit/s) |")
    md.append("|---|---|---|---|")
    for w, (a_, b_) in per_world.items():
        md.append(f"| {w} | {a_ * 1e6:.0f} | {b_ * 1e9:.1f} | {8 / b_ / 1e6:.1f} |")
    md.append(f"| all | {alpha_all * 1e6:.0f} | {beta_all * 1e9:.1f} | "
              f"{8 / beta_all / 1e6:.1f} |")
    md.append("")
    md.append("| world | collective | bytes | measured (ms) | model, this world's fit (ms) | "
              "error |")
    md.append("|---|---|---|---|---|---|")
    for r in sorted(collectives, key=lambda r: (r["op"], r["world"], r["bytes"])):
        ca, cb = coefficients(r["op"], r["world"], r["bytes"])
        a_, b_ = per_world[r["world"]]
        model = ca * a_ + cb * b_
        md.append(f"| {r['world']} | {r['op']} | {r['bytes']:,} | {r['seconds'] * 1e3:.2f} | "
                  f"{model * 1e3:.2f} | {100 * (model / r['seconds'] - 1):+.0f}% |")

    if sparse:
        md.append("")
        md.append("| world | path | union / n | measured (ms) | model, this world's fit (ms) | error "
                  "| fastest measured "
                  "| model's choice |")
        md.append("|---|---|---|---|---|---|---|---|")
        by_world = {}
        for r in sparse:
            by_world.setdefault(r["world"], []).append(r)
        for w in sorted(by_world):
            group = by_world[w]
            fastest = min(group, key=lambda r: r["seconds"])["path"]
            predictions = {}
            a_, b_ = per_world.get(w, (alpha, beta))
            for r in group:
                predictions[r["path"]] = path_seconds(a_, b_, r["path"], w, r["elements"],
                                                      r["payload_bytes"] / w, r["pairs"] / w,
                                                      r["union"])
            choice = min(predictions, key=predictions.get)
            for r in group:
                model = predictions[r["path"]]
                md.append(f"| {w} | {r['path']} | {r['union'] / r['elements']:.3f} | "
                          f"{r['seconds'] * 1e3:.2f} | {model * 1e3:.2f} | "
                          f"{100 * (model / r['seconds'] - 1):+.0f}% | {fastest} | {choice} |")

    if sparse:
        n = sparse[0]["elements"]
        density = sparse[0]["density"]
        shared = sparse[0]["shared"]
        worlds = [2 ** i for i in range(1, 11)]
        md.append("")
        md.append(f"Predicted per step with the {worlds_measured[0]}-rank fit, the same bucket "
                  f"({n:,} elements, density {density}, {shared:.0%} of each rank's "
                  f"coordinates shared) up to 1,024 ranks:\n")
        md.append("| world | union / n | allgather (ms) | split (ms) | dense (ms) | cheapest |")
        md.append("|---|---|---|---|---|---|")
        curves = {p: [] for p in ("allgather", "split", "dense")}
        for w in worlds:
            payload, pairs, union = synthetic_load(n, density, shared, w)
            times = {p: path_seconds(alpha, beta, p, w, n, payload, pairs, union) for p in curves}
            for p in curves:
                curves[p].append(times[p])
            md.append(f"| {w} | {union / n:.3f} | {times['allgather'] * 1e3:.1f} | "
                      f"{times['split'] * 1e3:.1f} | {times['dense'] * 1e3:.1f} | "
                      f"{min(times, key=times.get)} |")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = {"allgather": "tab:red", "split": "tab:green", "dense": "tab:blue"}
        for p, ys in curves.items():
            ax.plot(worlds, [y * 1e3 for y in ys], color=colors[p], label=f"{p} (model)")
            pts = [r for r in sparse if r["path"] == p]
            ax.scatter([r["world"] for r in pts], [r["seconds"] * 1e3 for r in pts],
                       color=colors[p], marker="o", label=f"{p} (measured)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (one per emulated host)")
        ax.set_ylabel("exchange time per step (ms)")
        ax.set_title(f"Sparse bucket of {n:,} floats, density {density}, {args.rate} links")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        if write:
            fig.savefig(f"{args.out}/scaling.png", dpi=110)

    # Every codec's exchange per step for the reference models, from their fp32 gradient
    # bytes and PowerSGD's measured factor bytes (docs/RESULTS.md, 4 workers: contributed
    # = on the wire / 1.5), with the smallest world's fit.
    models = {"cnn": (738_344, 18_624), "cnn-wide": (8_687_144, 57_024)}
    worlds = [2 ** i for i in range(1, 11)]
    md.append("")
    md.append(f"Predicted exchange per step (no overlap, no codec compute) with the "
              f"{worlds_measured[0]}-rank fit, per codec, for the reference models; topk at "
              f"density 0.01 takes the cheapest sparse path, between ranks that pick the same "
              f"coordinates (U = k) and independent ones (U = n (1 - (1 - d)^W)):\n")
    md.append("| model | world | none (ms) | fp16 (ms) | int8 (ms) | powersgd rank 2 (ms) | "
              "topk 0.01, same coordinates (ms) | topk 0.01, independent (ms) |")
    md.append("|---|---|---|---|---|---|---|---|")
    for name, (fp32_bytes, powersgd_bytes) in models.items():
        n = fp32_bytes / 4
        for w in (4, 16, 64, 256, 1024):
            def allreduce(b):
                return 2 * (w - 1) * alpha + 2 * (w - 1) / w * b * beta
            none = allreduce(fp32_bytes)
            fp16 = allreduce(fp32_bytes / 2)
            # block maxima (a float per 256), then the levels; W int8 values must sum in
            # int8: 127 ranks at most on this path
            int8 = allreduce(n / 256 * 4) + allreduce(n) if w <= 127 else None
            powersgd = 2 * allreduce(powersgd_bytes / 2)  # P, then Q
            k = 0.01 * n
            payload = PAIR_BYTES * k
            same = min(path_seconds(alpha, beta, p, w, n, payload, k, k)
                       for p in ("allgather", "split", "dense"))
            independent = min(path_seconds(alpha, beta, p, w, n, payload, k,
                                           n * (1 - 0.99 ** w))
                              for p in ("allgather", "split", "dense"))
            md.append(f"| {name} | {w} | {none * 1e3:.1f} | {fp16 * 1e3:.1f} | "
                      f"{'-' if int8 is None else f'{int8 * 1e3:.1f}'} | {powersgd * 1e3:.1f} | {same * 1e3:.1f} | "
                      f"{independent * 1e3:.1f} |")

    if quantized:
        md += quantized_measured_table(quantized, per_world, (alpha, beta))
    md += quantized_paths_table(alpha, beta, worlds_measured[0])
    if write:
        with open(f"{args.out}/results.md", "w") as f:
            f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
