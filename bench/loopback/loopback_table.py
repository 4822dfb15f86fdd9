#!/usr/bin/python3
"""The loopback table of docs/HEADLINE.md from the metrics loopback_table.sh wrote.

    loopback_table.py DIR CODEC...

Reads DIR/SLUG-seedS.jsonl (SLUG: the codec with "-" for every character but letters,
digits and "."; the trainer's metrics, summary line last) and prints a
Markdown table, one row per codec: the codec in use, final test accuracy, training seconds
and training time over `none`'s of the same seed (mean [min, max] over seeds), and the
traffic on the wire and contributed against dense fp32.
"""

import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from result_tables import last_summary, spread  # noqa: E402


def main(directory, codecs):
    runs = {}
    for codec in codecs:
        slug = re.sub(r"[^A-Za-z0-9.]", "-", codec)
        for path in glob.glob(os.path.join(glob.escape(directory), slug + "-seed*.jsonl")):
            seed = int(re.search(r"-seed(\d+)\.jsonl$", path).group(1))
            s = last_summary(path)
            if s:
                runs[(codec, seed)] = s
    seeds = sorted({seed for _, seed in runs})
    print(f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))}), "
          "mean [min, max]:\n")
    print("| --compressor | codec in use | test accuracy (%) | training (s) | training / none's "
          "| on the wire / dense on the wire | contributed / dense | ranks' parameters equal |")
    print("|---|---|---|---|---|---|---|---|")
    for codec in codecs:
        mine = {seed: runs[(codec, seed)] for seed in seeds if (codec, seed) in runs}
        if not mine:
            continue
        first = next(iter(mine.values()))
        ratio = [s["train_s"] / runs[("none", seed)]["train_s"] for seed, s in mine.items()
                 if ("none", seed) in runs]
        wire = [s["bytes_on_wire"] / s["bytes_dense_on_wire"] for s in mine.values()
                if s.get("bytes_dense_on_wire")]
        contributed = [s["bytes_contributed"] / s["bytes_dense"] for s in mine.values()
                       if s.get("bytes_dense")]
        equal = all(len(set(s.get("param_checksums", []))) == 1 for s in mine.values())
        print(f"| `{codec}` | `{first.get('codec', '')}` "
              f"| {spread([s['test_accuracy'] for s in mine.values()], '.2f', 100)} "
              f"| {spread([s['train_s'] for s in mine.values()], '.1f')} "
              f"| {spread(ratio, '.3f')} | {spread(wire, '.4f')} | {spread(contributed, '.4f')} "
              f"| {'yes' if equal else 'NO'} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: loopback_table.py DIR CODEC...")
    sys.exit(main(sys.argv[1], sys.argv[2:]))
