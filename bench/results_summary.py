#!/usr/bin/python3
"""The first page of docs/RESULTS.md: per link, what gradwire runs by default there against
DDP's best configuration of the same run, one table and one figure a link, from the
committed matrices (docs/results/<folder>/results.csv and the runs it names).

    results_summary.py ROOT LINK            print LINK's table (10mbit, 100mbit, 1gbit,
                                            10gbit); ROOT is docs/results (docs_tables.py
                                            runs it in docs/results/results-summary: ..)
    results_summary.py --contents TEMPLATE [TEMPLATE ...]
                                            print a contents list of the templates' "## "
                                            sections, each a link to its anchor (the
                                            first template's on its own page)
    results_summary.py --figures ROOT OUTDIR
                                            draw OUTDIR/results_LINK.png for every link

A row: one model's matrix, gradwire's configuration (`auto`, as 9004d22 built it, from
100 Mbit/s to 10 Gbit/s; DiLoCo with its default H at 10 Mbit/s; DDP with gradwire's
hook, `ddp:gradwire-auto`, where a matrix has it) against the best DDP configuration of
the same table (plot_e2e.best_ddp(): the one reaching the target in the most seeds, then
soonest). The ratios and verdicts are headline_table.compare()'s, seed by seed within a
round: the time to the target and to the strict target (the round's floor's final
quality), mean [min, max] over the seeds, "faster" / "slower" when every seed's ratio is
on that side of 1, "not resolved" when they straddle it; the final quality is gradwire's
less DDP's, seed by seed (accuracy in points, higher is better; gpt's validation loss,
lower is better); the compute floor / DDP is the floor's time to the target over DDP's:
what no exchange at all would give. Machines as headline_table.py's ROWS: seconds compare
within a row only.
"""
import math
import os
import textwrap
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
sys.path.insert(0, HERE)
import plot_e2e  # noqa: E402
from headline_table import ROWS, compare  # noqa: E402
from result_tables import spread  # noqa: E402

# The links, in order, and per link its rows: (folder, gradwire's configuration as its
# name starts, a short name for the figure). What a row is in words and the machine it ran
# on come from headline_table.py's ROWS, else from EXTRA.
LINKS = [
    ("10mbit", "10 Mbit/s", [
        ("e2e-cnn-wide-4hosts-10mbit-sparseloco-reported-seeds", "diloco:inner_steps=auto",
         "DiLoCo, 4-bit, auto H"),
        ("e2e-gpt-4hosts-10mbit-small-h-reported-seeds", "diloco:inner_steps=auto",
         "DiLoCo, 4-bit, auto H"),
    ]),
    ("100mbit", "100 Mbit/s", [
        ("e2e-cnn-4hosts-100mbit-warmup-rule-seeds", "auto", "C++, auto"),
        ("e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds", "auto", "C++, auto"),
        ("e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds", "ddp:gradwire-auto",
         "Python hook, auto"),
        ("e2e-gpt-4hosts-100mbit-warmup-rule-seeds", "auto", "C++, auto"),
        ("e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds", "ddp:gradwire-auto",
         "Python hook, auto"),
    ]),
    ("1gbit", "1 Gbit/s", [
        ("e2e-cnn-4hosts-1gbit-owntime-seeds", "auto", "C++, auto"),
        ("e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds", "auto", "C++, auto"),
        ("e2e-cnn-wide-4hosts-1gbit-hook-rule-seeds", "ddp:gradwire-auto",
         "Python hook, auto before issue 62"),
        ("e2e-gpt-4hosts-1gbit-warmup-rule-seeds", "auto", "C++, auto"),
        ("e2e-gpt-4hosts-1gbit-hook-adam-seeds", "ddp:gradwire-auto",
         "Python hook, auto before issue 62"),
    ]),
    ("10gbit", "10 Gbit/s", [
        ("e2e-cnn-4hosts-10gbit-3epochs-open-seeds", "auto", "C++, auto"),
        ("e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds", "auto", "C++, auto"),
        ("e2e-gpt-4hosts-10gbit-open-ftz-seeds", "auto", "C++, auto, flush-to-zero"),
    ]),
]
# Rows not in headline_table.py's ROWS: (folder, prefix) -> (words, machine). The 1 Gbit
# hook matrices ran on 2026-11-28 (their command.txt), on machine 1 as re-provisioned
# 2026-11-27, before issue 62's `auto`; no later hook matrix at 1 Gbit is committed.
EXTRA = {
    ("e2e-cnn-wide-4hosts-1gbit-hook-rule-seeds", "ddp:gradwire-auto"):
        ("Python: DDP + `gradwire.ddp.hook`, auto before issue 62 (build ffea83c); "
         "2 epochs", 1),
    ("e2e-gpt-4hosts-1gbit-hook-adam-seeds", "ddp:gradwire-auto"):
        ("Python: DDP + `gradwire.ddp.hook`, auto before issue 62 (build b165cda)", 1),
}
HOSTS = 4  # every matrix above: 4 emulated hosts, one rank each


def describe(folder, prefix):
    for row in ROWS:
        if row[0] == folder and row[2] == prefix:
            if row[1] != HOSTS:
                sys.exit(f"results_summary: {folder} has {row[1]} hosts, not {HOSTS}")
            return row[3], row[4]
    if (folder, prefix) in EXTRA:
        return EXTRA[(folder, prefix)]
    sys.exit(f"results_summary: {folder} {prefix} is in neither ROWS nor EXTRA")


def final_gap(mine, theirs):
    """gradwire's final quality less DDP's, seed by seed within a round, as
    "mean [min, max]" with its unit."""
    metric = mine["metric"]
    seeds = sorted(set(mine["per_seed"]) & set(theirs["per_seed"]))
    diffs = [mine["per_seed"][k]["accuracy"] - theirs["per_seed"][k]["accuracy"]
             for k in seeds if mine["per_seed"][k]["accuracy"] is not None
             and theirs["per_seed"][k]["accuracy"] is not None]
    if not diffs:
        return ""
    if metric.accuracy:
        return spread(diffs, "+.2f", scale=100) + " points"
    return "loss " + spread(diffs, "+.3f")


def rows(root, link):
    """Each row of `link`: its cells and the ratios its figure draws."""
    found = [entry for entry in LINKS if entry[0] == link]
    if not found:
        sys.exit(f"results_summary: no link {link} (one of "
                 + ", ".join(e[0] for e in LINKS) + ")")
    out = []
    for folder, prefix, short in found[0][2]:
        words, machine = describe(folder, prefix)
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            sys.exit(f"results_summary: no matrix {folder} in {root}")
        results = plot_e2e.Results(path)
        summary = results.summary
        if results.bandwidths != [link]:
            sys.exit(f"results_summary: {folder} is not a {link} matrix")
        for model in results.models:
            best = plot_e2e.best_ddp(summary, model, link, results.configs)
            configs = [c for c in results.configs if c.startswith(prefix)
                       and (model, link, c) in summary]
            if not best or not configs:
                sys.exit(f"results_summary: {folder} has no DDP configuration or none "
                         f"starting {prefix}")
            c = compare(summary, model, link, configs[0], best)
            mine = summary[(model, link, configs[0])]
            theirs = summary[(model, link, best)]
            seeds = len(set(mine["per_seed"]) & set(theirs["per_seed"]))
            strict_cells = c["strict_cells"]
            neither = seeds - len(c["strict"]) if c["strict"] else 0
            if neither:  # ratios() leaves out the seeds neither side reached: say so
                strict_cells += (f"; neither reached it in {neither} "
                                 f"seed{'s' if neither != 1 else ''}")
            out.append({
                "model": model, "words": words, "short": short, "best": best,
                "machine": machine, "folder": folder, "compare": c,
                "target": mine["metric"].target(mine["target"]),
                "gap": final_gap(mine, theirs), "seeds": seeds, "strict_cells": strict_cells,
                "verdict": plot_e2e.verdict(c["target"]),
                # The figure's words: the strict target's ratio and verdict (not drawn).
                "strict_verdict": ", ".join(p for p in strict_cells.split(" | ") if p),
            })
    order = {"cnn": 0, "cnn-wide": 1, "gpt": 2}
    return sorted(out, key=lambda r: order.get(r["model"], 3))  # stable: C++ before hook


def table(root, link):
    lines = ["| model | gradwire | baseline: DDP's best | target | time to target, gradwire "
             "/ DDP | verdict | time to the strict target (the floor's final quality), "
             "gradwire / DDP | verdict | final quality, gradwire less DDP | the compute "
             "floor / DDP | seeds | machine |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows(root, link):
        c = r["compare"]
        lines.append(f"| {r['model']} | {r['words']} | `{r['best']}` | {r['target']} | "
                     f"{c['target_cells']} | {r['strict_cells']} | {r['gap']} | "
                     f"{c['floor_cell']} | {r['seeds']} | {r['machine']} |")
    return "\n".join(lines)


def slug(heading, seen):
    """GitHub's anchor of a heading: lower case, letters, digits, '-' and '_' kept, spaces
    to '-', everything else dropped; a repeated one gets -1, -2, ..."""
    text = "".join(ch for ch in heading.strip().lower()
                   if ch.isalnum() or ch in "-_ ").replace(" ", "-")
    n = seen.get(text, 0)
    seen[text] = n + 1
    return text if n == 0 else f"{text}-{n}"


def sections(template):
    """(the page's "# " title, [(its "## " section, anchor)]) of a template, outside code
    blocks. The anchors count repeats over the template's headings of every level; the
    tables that @tables expands carry "#### " headings of their own, none of which repeats
    a "## "."""
    title, found, seen, fenced = None, [], {}, False
    with open(template) as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            level = len(line) - len(line.lstrip("#"))
            if fenced or not 1 <= level <= 6 or line[level:level + 1] != " ":
                continue
            heading = line[level:].strip()
            anchor = slug(heading, seen)
            if level == 1 and title is None:
                title = heading
            elif level == 2:
                found.append((heading.replace("[", "(").replace("]", ")"), anchor))
    return title, found


def contents(templates):
    """A Markdown list of the results pages' "## " sections, linked: the first template's
    (the page that holds the list) by anchor, then each further page, named by its title,
    with its sections as PAGE.md#anchor (a template NAME.md.in makes docs/NAME.md)."""
    _, own = sections(templates[0])
    lines = [f"- [{heading}](#{anchor})" for heading, anchor in own]
    for template in templates[1:]:
        page = os.path.basename(template)[:-len(".in")]
        title, found = sections(template)
        lines.append(f"- [{title}]({page})")
        lines += [f"  - [{heading}]({page}#{anchor})" for heading, anchor in found]
    return "\n".join(lines)


def finite(values):
    return [v for v in values if math.isfinite(v) and v > 0]


def figure(root, link, words, out, xlim):
    plt = plot_e2e.pyplot()
    data = rows(root, link)
    n = len(data)
    labelled = False
    fig, ax = plt.subplots(figsize=(10.0, 1.9 + 0.66 * n))
    for i, r in enumerate(data):
        y = n - 1 - i
        c = r["compare"]
        mine, floor = finite(c["target"]), finite(c["floor"] or [])
        if floor:
            m = sum(floor) / len(floor)
            ax.plot([min(floor), max(floor)], [y - 0.18] * 2, color="0.6", linewidth=1.5)
            ax.plot([m], [y - 0.18], marker="D", color="0.6", markersize=6,
                    label="the compute floor (no exchange) / DDP" if i == 0 else None)
        if mine:
            m = sum(mine) / len(mine)
            color = {"faster": "tab:green", "slower": "tab:red"}.get(r["verdict"], "tab:blue")
            ax.plot([min(mine), max(mine)], [y + 0.1] * 2, color=color, linewidth=2.5)
            ax.plot([m], [y + 0.1], marker="o", color=color, markersize=8)
            if not labelled:
                ax.plot([], [], marker="o", color="0.2", linewidth=2.5,
                        label="gradwire / DDP's best")
                labelled = True
        never = sum(1 for v in c["target"] if not math.isfinite(v))
        only = sum(1 for v in c["target"] if v == 0)
        notes = ([f"{never} seed(s) not reached"] if never else []) + (
            [f"{only} seed(s) DDP did not reach"] if only else [])
        text = "\n".join(textwrap.wrap(
            f"target {r['target']}: {r['verdict']}" + (f" ({'; '.join(notes)})" if notes
                                                       else ""), 44)
            + textwrap.wrap(f"strict target: {r['strict_verdict']}", 44))
        ax.text(xlim[1] * 1.01, y, text, va="center", fontsize=7.5)
    ax.axvline(1.0, color="black", linewidth=0.9, linestyle="--")
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"{r['model']}: {r['short']}\nagainst {r['best']}, machine "
                        f"{r['machine']}" for r in reversed(data)], fontsize=7.5)
    ax.set_ylim(-1.1, n - 0.4)
    ax.set_xlim(*xlim)
    ax.set_xlabel("time to the target, gradwire / DDP's best, seed by seed within a round "
                  "(dot: mean; bar: min to max)\nleft of the dashed line: gradwire sooner; "
                  "green: faster in every seed, red: slower in every seed, blue: not resolved",
                  fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{words} per host, {HOSTS} emulated hosts: time to the target against DDP's "
                 "best configuration\ndata: docs/results (bench/results_summary.py)",
                 fontsize=9)
    ax.legend(loc="lower left", fontsize=7.5, framealpha=0.9, ncol=2)
    fig.tight_layout()
    fig.subplots_adjust(right=0.72)
    fig.savefig(out, dpi=90, metadata={"Software": None})
    plt.close(fig)
    print(f"results_summary: wrote {out}")


def figures(root, outdir):
    values = [v for link, _, _ in LINKS for r in rows(root, link)
              for v in finite(r["compare"]["target"]) + finite(r["compare"]["floor"] or [])]
    xlim = (min(0.9 * min(values), 0.9), max(1.1 * max(values), 1.1))
    os.makedirs(outdir, exist_ok=True)
    for link, words, _ in LINKS:
        figure(root, link, words, os.path.join(outdir, f"results_{link}.png"), xlim)


def main(argv):
    if len(argv) >= 2 and argv[0] == "--contents":
        print(contents(argv[1:]))
    elif len(argv) == 3 and argv[0] == "--figures":
        figures(argv[1], argv[2])
    elif len(argv) == 2 and not argv[0].startswith("-"):
        print(table(argv[0], argv[1]))
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
