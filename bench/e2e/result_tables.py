"""What the result tables of the benchmarks share (plot_e2e.py, bench/loopback and bench/ps
import it): a figure over seeds as 'mean [min, max]', and the summary line of a run's
metrics (JSON Lines; a line still being written is skipped)."""

import json


def spread(values, spec, scale=1):
    """'mean [min, max]' of the values given (None: left out); one value alone as itself."""
    values = [scale * v for v in values if v is not None]
    if not values:
        return ""
    m = sum(values) / len(values)
    if len(values) == 1:
        return format(m, spec)
    return f"{m:{spec}} [{min(values):{spec}}, {max(values):{spec}}]"


def header(columns):
    """A Markdown table's first two lines for these column names."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def events(path):
    """The events of a metrics file, in order; a line that does not parse (one still being
    written) is skipped."""
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def last_summary(path):
    """The last `"event": "summary"` line of a metrics file, or None."""
    last = None
    for event in events(path):
        if event.get("event") == "summary":
            last = event
    return last
