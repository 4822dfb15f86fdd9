#!/usr/bin/python3
"""The table of link_rates.sh: per rate, what one TCP stream carried and its share of the
rate, from DIR/RATE.txt (the receiving rank's "received N bytes in S s").

    link_rates.py DIR RATE...
"""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from plot_e2e import rate_bits  # noqa: E402


def carried(bits):
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.0f} bit/s"


def main(directory, rates):
    out = ["| --bandwidth | carried | of the rate |", "|---|---|---|"]
    for rate in rates:
        with open(os.path.join(directory, rate + ".txt")) as f:
            m = re.search(r"received (\d+) bytes in ([0-9.]+) s", f.read())
        if not m:
            sys.exit(f"link_rates: no 'received' line in {rate}.txt")
        bits = 8 * int(m.group(1)) / float(m.group(2))
        limit = rate_bits(rate)
        share = f"{bits / limit:.2f}" if limit != float("inf") else ""
        out.append(f"| {rate} | {carried(bits)} | {share} |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: link_rates.py DIR RATE...")
    sys.exit(main(sys.argv[1], sys.argv[2:]))
