#!/usr/bin/python3
"""Every generated table under docs/, remade from the raw output committed in docs/results/.

    docs_tables.py --write   rewrite the tables and docs/RESULTS.md from the data
    docs_tables.py --check   fail (exit 1, with a diff) where a committed table is not what
                             its data gives; the test suite runs this

What is generated, and from what:
  docs/results/**/results.md  of every folder with a results.csv (`gradwire bench e2e`'s
                              raw output and the metrics files it names): plot_e2e.py's
                              tables; beside it verdicts.md (@verdicts below) where a
                              table has 3 seeds or more and a DDP configuration
  the files of GENERATORS     each by its own script from its raw files
  **/PREFIXsummary.md         beside a PREFIXruns.jsonl: the summary of the step-time or
                              overlap script (bench/e2e/*_summary.py) that wrote both
  docs/NAME.md                from each template docs/results/NAME.md.in (RESULTS.md, the
                              answer first, and its topic pages RESULTS_*.md), whose
                              directive lines (alone on a line) expand as follows, FOLDER
                              under docs/results:
      @command FOLDER         FOLDER/command.txt, as a shell block
      @tables FOLDER          FOLDER's tables (plot_e2e.py's results.md)
      @verdicts FOLDER        per gradwire configuration and table: its training time over
                              the compute floor, and its training time and times to the
                              steep and the plateau accuracy and to the strict target
                              (the round's floor's final quality: within 0.3 points of
                              its accuracy, 1% of its loss) against the best DDP
                              configuration of the table and against DDP fp16, PyTorch's
                              local SGD (ddp:localsgd) and the best of DDP's per-step
                              hooks where the table has them,
                              seed by seed, each with its verdict (3 seeds or more)
      @plots FOLDER           FOLDER's accuracy-against-time and time-to-target plots
      @file FOLDER/FILE       the file's text: as generated above (GENERATORS), else as
                              committed
                              Everything else in the template is copied as written: the
                              conditions and the reading of the tables, and no figure
                              that a table does not carry.
  quotes in README.md and docs/*.md: between the lines
      <!-- generated from docs/results/FOLDER/FILE -->  and  <!-- end generated -->
                              the file's text as committed (or as generated above)
"""

import difflib
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import plot_e2e  # noqa: E402

# The results pages' templates under docs/results, each making docs/ its name less ".in":
# the answer first (RESULTS.md), then the topic pages it links.
RESULT_PAGES = ["RESULTS.md.in", "RESULTS_AUTO.md.in", "RESULTS_PER_STEP.md.in",
                "RESULTS_DILOCO.md.in", "RESULTS_HOOK.md.in", "RESULTS_EARLIER.md.in"]

# Tables made by a script of their own: the file (under docs/results) -> the script (under
# bench/, or "./NAME" in the file's folder) and its arguments. It runs in the file's folder
# and prints the table.
# gpt's validation-loss and cnn-wide's accuracy targets for bench/e2e/crossings.py tables.
GPT_LOSSES = ["2.10", "1.93", "1.85", "1.80", "1.75", "1.70"]
CNN_WIDE_ACCURACIES = ["0.85", "0.88", "0.89"]

GENERATORS = {
    "loopback-4workers/results.md": ["loopback/loopback_table.py", ".", "none", "fp16",
                                     "int8", "auto", "topk:density=0.01", "2bit"],
    "ps-staleness-table/results.md": ["ps/staleness_table.py", "."],
    "emulation-rho/results.md": ["emulation/rho_table.py", "../e2e-cnn-2hosts-100mbit-seeds",
                                 "../e2e-cnn-wide-2hosts-100mbit-seeds"],
    "codec-speed/results.md": ["codec_tables.py", "."],
    "codec-speed-ab-dd53a7c/results.md": ["codec_ab_table.py", ".", "head", "dd53"],
    "codec-speed-ab-nopic/results.md": ["codec_ab_table.py", ".", "pic", "nopic"],
    "int8-paths/results.md": ["quality/int8_paths_table.py", "."],
    "auto-penalty/results.md": ["quality/penalty_table.py", "."],
    "e2e-gpt-4hosts-10mbit-tuning-2epochs-seed100/crossings.md": [
        "e2e/crossings.py", "."] + GPT_LOSSES,
    "e2e-gpt-4hosts-10mbit-tuning-2epochs-seeds101-102/crossings.md": [
        "e2e/crossings.py", "."] + GPT_LOSSES,
    "e2e-gpt-4hosts-10mbit-tuning-2epochs-seeds101-102/choice.md": [
        "e2e/tuning_choice.py", "../e2e-gpt-4hosts-10mbit-tuning-2epochs-seed100", "."],
    "e2e-gpt-4hosts-10mbit-diloco-protocol-seeds/crossings.md": [
        "e2e/crossings.py", "."] + GPT_LOSSES,
    "e2e-gpt-4hosts-10mbit-diloco-protocol-seeds/crossing-steps.md": [
        "e2e/crossings.py", ".", "--steps"] + GPT_LOSSES,
    "e2e-cnn-wide-4hosts-10mbit-tuning-seeds-h/choice.md": [
        "e2e/tuning_choice.py", "../e2e-cnn-wide-4hosts-10mbit-tuning-seeds", "."],
    "e2e-cnn-wide-4hosts-100mbit-tuning-seeds/choice.md": ["e2e/tuning_choice.py", "."],
    "e2e-cnn-wide-4hosts-100mbit-tuning-ext-seeds/choice.md": ["e2e/tuning_choice.py", "."],
    "e2e-gpt-4hosts-100mbit-tuning-2epochs-seed100/choice.md": ["e2e/tuning_choice.py", "."],
    "e2e-gpt-4hosts-100mbit-tuning-2epochs-seed100/crossing-steps.md": [
        "e2e/crossings.py", ".", "--steps"] + GPT_LOSSES,
    "e2e-gpt-4hosts-100mbit-tuning-2epochs-seeds101-102/choice.md": [
        "e2e/tuning_choice.py", "../e2e-gpt-4hosts-100mbit-tuning-2epochs-seed100", "."],
    "e2e-gpt-4hosts-100mbit-tuning-2epochs-seeds101-102/crossing-steps.md": [
        "e2e/crossings.py", ".", "--steps"] + GPT_LOSSES,
    "e2e-gpt-4hosts-100mbit-diloco-protocol-seeds/crossings.md": [
        "e2e/crossings.py", "."] + GPT_LOSSES,
    "e2e-gpt-4hosts-100mbit-diloco-protocol-seeds/crossing-steps.md": [
        "e2e/crossings.py", ".", "--steps"] + GPT_LOSSES,
    "e2e-cnn-wide-4hosts-100mbit-diloco-protocol-seeds/crossings.md": [
        "e2e/crossings.py", "."] + CNN_WIDE_ACCURACIES,
    "powersgd-side-by-side/results.md": ["quality/hook_side_by_side_table.py", ".", "--windows",
                                         "0,2,10,50,200,384"],
    "link-rates/results.md": ["emulation/link_rates.py", ".", "20mbit", "1gbit", "10gbit",
                              "unlimited"],
    "timeline-cost/results.md": ["timeline/timeline_cost.py", "."],
    "gpt-adamw-codecs/results.md": ["quality/adam_codecs_table.py", "."],
    "headline/results.md": ["headline_table.py", ".."],
    "auto-standing/results.md": ["e2e/auto_standing.py", ".."],
    "trial-cost/results.md": ["e2e/trial_cost.py", ".."],
    "hook-cost/results.md": ["python/hook_cost_table.py", "."],
    "hook-own-group-ab/results.md": ["python/own_group_ab.py", "."],
    "gpt-diloco-quality/results.md": ["quality/adam_codecs_table.py", "."],
    "gpt-diloco-outer-probes/results.md": ["quality/adam_codecs_table.py", "."],
    "overlap-layout/step-time-loopback/summary.md": ["./summary.py", "runs-cnn.txt",
                                                     "runs-cnn-wide.txt"],
    "gpt-hook-vs-cpp-loopback/results.md": ["./table.py"],
    "hook-first-bucket-ab/results.md": ["./table.py"],
    # One plan three times (PowerSGD's first Q seeded 0, 1, 2) beside `auto`.
    "e2e-cnn-wide-4hosts-100mbit-same-plan-seeds/same-plan.md": [
        "e2e/same_plan_noise.py", "."] + CNN_WIDE_ACCURACIES + [
        "strict", "--same", "powersgd:rank=8,min_rate=2", "powersgd:rank=8,min_rate=2,seed=1",
        "powersgd:rank=8,min_rate=2,seed=2", "--candidate", "auto", "--at-step", "59"],
}
# The steps at which gpt's runs first reach each loss of GPT_LOSSES (bench/e2e/crossings.py).
for _folder in ("e2e-gpt-4hosts-10mbit-sparseloco-tuning-seeds",
                "e2e-gpt-4hosts-10mbit-sparseloco-density-seed100",
                "e2e-gpt-4hosts-1gbit-tuning-quality-seeds",
                "e2e-gpt-4hosts-10mbit-small-h-seeds100-101",
                "e2e-gpt-4hosts-10mbit-small-h-seed102",
                "e2e-gpt-4hosts-10mbit-small-h-reported-seeds",
                "e2e-gpt-4hosts-10mbit-sparseloco-auto-seed100",
                "e2e-gpt-4hosts-100mbit-sparseloco-auto-seed100",
                "e2e-gpt-4hosts-100mbit-sparseloco-auto-reported-seeds",
                "e2e-gpt-4hosts-10mbit-sparseloco-auto-seed101",
                "e2e-gpt-4hosts-10gbit-hook-numerics-seeds",
                "e2e-gpt-4hosts-10gbit-hook-powersgd-q-seeds",
                "e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds",
                "e2e-gpt-4hosts-100mbit-warmup-rule-seeds",
                "e2e-gpt-4hosts-1gbit-warmup-rule-seeds",
                "e2e-gpt-4hosts-100mbit-seed1-ftz",
                "e2e-gpt-4hosts-100mbit-tuning-quality-seeds",
                "e2e-gpt-4hosts-100mbit-tuning-trial-plans-seeds"):
    GENERATORS[_folder + "/crossing-steps.md"] = ["e2e/crossings.py", ".", "--steps"] + GPT_LOSSES
# And cnn-wide's runs, each accuracy of CNN_WIDE_ACCURACIES.
for _folder in ("e2e-cnn-wide-4hosts-100mbit-diloco-protocol-seeds",
                "e2e-cnn-wide-4hosts-10mbit-sparseloco-tuning-seeds",
                "e2e-cnn-wide-4hosts-10mbit-tuning-ext-seed100",
                "e2e-cnn-wide-4hosts-10mbit-sparseloco-reported-seeds",
                "e2e-cnn-wide-4hosts-100mbit-sparseloco-probe-seed100",
                "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-seed100",
                "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-slack115-seed100",
                "e2e-cnn-wide-4hosts-100mbit-sparseloco-auto-seed100",
                "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-seed101",
                "e2e-cnn-wide-4hosts-100mbit-same-plan-seeds",
                "e2e-cnn-wide-4hosts-100mbit-sparseloco-auto-reported-seeds",
                "e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds",
                "e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds",
                "e2e-cnn-4hosts-100mbit-warmup-rule-seeds"):
    GENERATORS[_folder + "/crossing-steps.md"] = [
        "e2e/crossings.py", ".", "--steps"] + CNN_WIDE_ACCURACIES
# cnn-wide's one-epoch runs (1 and 10 Gbit), at 85% and 86%: the epoch ends near 86%.
for _folder in ("e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds",
                "e2e-cnn-wide-4hosts-1gbit-warmup-rule-seeds",
                "e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds"):
    GENERATORS[_folder + "/crossing-steps.md"] = ["e2e/crossings.py", ".", "--steps", "0.85",
                                                  "0.86"]
# RESULTS.md's first page (bench/results_summary.py): per link, the default against DDP's
# best configuration, from the matrices it names; and its list of the template's sections.
for _link in ("10mbit", "100mbit", "1gbit", "10gbit"):
    GENERATORS[f"results-summary/{_link}.md"] = ["results_summary.py", "..", _link]
GENERATORS["results-summary/contents.md"] = ["results_summary.py", "--contents"] + [
    "../" + name for name in RESULT_PAGES]
GENERATORS["quantized-paths-8ranks/results.md"] = [
    "scaling/fit_scaling.py", "--rate", "100mbit", "--out", "-"] + [
    f"run{r}/world-{w}.jsonl" for r in (1, 2, 3) for w in (2, 4, 8)]
# A step's cost at two per-rank batches (bench/e2e/batch_step_cost.sh's runs).
GENERATORS["batch-probe-cnn-wide/results.md"] = ["e2e/batch_step_cost.py", "."]
# Each run's mean of its last four evaluations (bench/e2e/late_quality.py), from the rank
# step of the fourth last: 531 of cnn's and cnn-wide's three epochs, 288 of gpt's epoch.
LATE_QUALITY = {
    "e2e-cnn-wide-4hosts-100mbit-rule-seeds": 531,
    "e2e-cnn-wide-4hosts-100mbit-same-plan-seeds": 531,
    "e2e-gpt-4hosts-10gbit-hook-numerics-seeds": 288,
    "e2e-gpt-4hosts-10gbit-hook-powersgd-q-seeds": 288,
    "e2e-cnn-wide-4hosts-100mbit-sparseloco-auto-reported-seeds": 531,
    "e2e-gpt-4hosts-100mbit-rule-seeds": 288,
    "e2e-gpt-4hosts-100mbit-open-seeds": 288,
    "e2e-cnn-wide-4hosts-100mbit-open-seeds": 531,
    "e2e-cnn-wide-4hosts-100mbit-hook-open-seeds": 531,
    "e2e-cnn-wide-4hosts-100mbit-hook-rule-seeds": 531,
    "e2e-cnn-4hosts-100mbit-open-seeds": 531,
    "e2e-cnn-4hosts-1gbit-open-seeds": 531,
    "e2e-cnn-4hosts-1gbit-owntime-seeds": 531,
    "e2e-gpt-4hosts-1gbit-open-seeds": 288,
    "e2e-cnn-4hosts-10gbit-3epochs-open-seeds": 531,
    "e2e-gpt-4hosts-100mbit-hook-open-seeds": 288,
    "e2e-gpt-4hosts-10gbit-open-ftz-seeds": 288,
    "e2e-gpt-4hosts-1gbit-tuning-quality-seeds": 288,
    "e2e-gpt-4hosts-10mbit-sparseloco-tuning-seeds": 672,
    "e2e-gpt-4hosts-10mbit-sparseloco-density-seed100": 672,
    "e2e-gpt-4hosts-10mbit-small-h-seeds100-101": 672,
    "e2e-gpt-4hosts-10mbit-small-h-seed102": 672,
    "e2e-gpt-4hosts-10mbit-small-h-reported-seeds": 672,
    "e2e-gpt-4hosts-10gbit-diloco-h1-seed100": 672,
    "e2e-cnn-wide-4hosts-10mbit-sparseloco-tuning-seeds": 531,
    "e2e-cnn-wide-4hosts-10mbit-tuning-ext-seed100": 531,
    "e2e-cnn-wide-4hosts-10mbit-sparseloco-reported-seeds": 531,
    "e2e-cnn-wide-4hosts-100mbit-sparseloco-probe-seed100": 531,
    "e2e-gpt-4hosts-10mbit-sparseloco-auto-seed100": 672,
    "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-seed100": 531,
    "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-slack115-seed100": 531,
    "e2e-gpt-4hosts-100mbit-sparseloco-auto-seed100": 672,
    "e2e-cnn-wide-4hosts-100mbit-sparseloco-auto-seed100": 531,
    "e2e-gpt-4hosts-100mbit-sparseloco-auto-reported-seeds": 672,
    "e2e-cnn-wide-4hosts-10mbit-sparseloco-auto-seed101": 531,
    "e2e-gpt-4hosts-10mbit-sparseloco-auto-seed101": 672,
    "e2e-gpt-4hosts-100mbit-hook-start2-seeds": 288,
    "e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds": 531,
    "e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds": 288,
    "e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds": 531,
    "e2e-gpt-4hosts-100mbit-warmup-rule-seeds": 288,
    "e2e-cnn-4hosts-100mbit-warmup-rule-seeds": 531,
    "e2e-gpt-4hosts-1gbit-warmup-rule-seeds": 288,
    "e2e-gpt-4hosts-100mbit-tuning-quality-seeds": 288,
    "e2e-gpt-4hosts-100mbit-tuning-trial-plans-seeds": 288,
}
for _folder, _from_step in LATE_QUALITY.items():
    GENERATORS[_folder + "/late_quality.md"] = ["e2e/late_quality.py", ".", str(_from_step)]
# What auto chose and why, from the codec events of its e2e runs (bench/e2e/auto_choices.py).
GENERATORS["auto-choices/results.md"] = [
    "e2e/auto_choices.py", "../e2e-cnn-4hosts-auto-choices",
    "../e2e-cnn-4hosts-100mbit-perstep-seeds", "../e2e-gpt-4hosts-100mbit-auto-choices",
    "../e2e-cnn-wide-4hosts-100mbit-perstep-seeds", "../e2e-gpt-4hosts-100mbit-perstep-seeds",
    "../e2e-gpt-4hosts-1gbit-16bit-seeds",
    "../e2e-gpt-4hosts-10gbit-16bit-seeds"]
for _rate in ("1gbit", "10gbit"):  # fp16's and bf16's two paths for cnn-wide's bucket
    GENERATORS[f"fp16-paths-{_rate}/results.md"] = [
        "scaling/fit_scaling.py", "--rate", _rate, "--out", "-"] + [
        f"run{r}/world-{w}.jsonl" for r in (1, 2) for w in (2, 4)]
for _bucket in ("scaling-1mb", "scaling-8mb"):  # scaling.sh's world-*.jsonl, in glob order
    GENERATORS[_bucket + "/results.md"] = [
        "scaling/fit_scaling.py", "--rate", "100mbit", "--out", "-", "world-16.jsonl",
        "world-2.jsonl", "world-4.jsonl", "world-8.jsonl"]

# Where the step's time goes (bench/timeline/step_breakdown.py) in e2e matrices run with
# --timeline: each seed's floor, then that seed's runs (names between the model-rate
# prefix and the seed: "gradwire-auto", "ddp-gradwire-none", "ddp-allreduce").
def _step_breakdown(folder, rate, runs, seeds=3, model="gpt"):
    args = []
    for r in range(1, seeds + 1):
        args.append(f"floor:{model}-floor-gradwire-none-r{r}.trace.json.gz")
        args += [f"{model}-{rate}-{run}-r{r}.trace.json.gz" for run in runs]
    GENERATORS[folder + "/timelines/results.md"] = ["timeline/step_breakdown.py"] + args


_step_breakdown("e2e-gpt-4hosts-1gbit-seeds", "1gbit", ["gradwire-auto"])
# auto's own cost at 10 Gbit before and after its status fix (issue 62): one seed, no floor
# run: `none` stands as the reference.
for _when in ("before", "after"):
    GENERATORS[f"auto-status-timelines/{_when}/timelines/results.md"] = [
        "timeline/step_breakdown.py", "--per-run",
        "floor:cnn-10gbit-gradwire-none-r1.trace.json.gz",
        "cnn-10gbit-gradwire-auto-r1.trace.json.gz"]
_step_breakdown("e2e-gpt-4hosts-100mbit-codecs-seeds", "100mbit",
                ["gradwire-powersgd-rank-16-min-rate-2", "gradwire-int8", "gradwire-auto"])
_step_breakdown("e2e-gpt-4hosts-10gbit-timelines", "10gbit", ["gradwire-auto"])
_step_breakdown("e2e-cnn-wide-4hosts-1gbit-hook-timelines", "1gbit",
                ["ddp-allreduce", "ddp-gradwire-none", "gradwire-none"], model="cnn-wide")
_step_breakdown("e2e-cnn-wide-4hosts-1gbit-hook-auto-vs-none-1seed", "1gbit",
                ["ddp-allreduce", "ddp-gradwire-none", "ddp-gradwire-auto"], seeds=1,
                model="cnn-wide")
# PowerSGD's step on a free link, DDP's, the hook's and the C++ path's (issue 62).
_step_breakdown("e2e-gpt-4hosts-10gbit-powersgd-timelines", "10gbit",
                ["ddp-powersgd-rank-16-start-2", "ddp-gradwire-powersgd-rank-16-min-rate-2",
                 "gradwire-powersgd-rank-16-start-2-min-rate-2"], seeds=1)
_step_breakdown("e2e-cnn-wide-4hosts-10gbit-powersgd-timelines", "10gbit",
                ["ddp-powersgd-rank-8-start-2", "ddp-gradwire-powersgd-rank-8-min-rate-2",
                 "gradwire-powersgd-rank-8-start-2-min-rate-2"], seeds=1, model="cnn-wide")
_step_breakdown("e2e-cnn-wide-4hosts-100mbit-hook-rule-2587e99-seeds", "100mbit",
                ["ddp-powersgd-rank-8-start-2", "ddp-gradwire-powersgd-rank-8-min-rate-2",
                 "gradwire-powersgd-rank-8-min-rate-2"], model="cnn-wide")


def summaries(results):
    """The summaries of the step-time and overlap scripts: every PREFIXsummary.md beside a
    PREFIXruns.jsonl -> the script that made it (step-time runs name their binary)."""
    found = {}
    for path in glob.glob(os.path.join(results, "**", "*summary.md"), recursive=True):
        runs = path[: -len("summary.md")] + "runs.jsonl"
        if not os.path.exists(runs):
            continue
        with open(runs) as f:
            step_time = '"binary"' in f.readline()
        script = "e2e/step_time_summary.py" if step_time else "e2e/overlap_summary.py"
        found[os.path.relpath(path, results)] = [script, os.path.basename(runs)]
    return found


def e2e_tables(folder):
    return plot_e2e.Results(folder).tables()


def script_table(folder, script, args):
    path = os.path.join(folder, script) if script.startswith("./") else os.path.join(HERE, script)
    out = subprocess.run([sys.executable, path] + args, cwd=folder, check=True,
                         capture_output=True, text=True)
    return out.stdout


def gives_verdicts(folder):
    """Whether some table of the folder has a DDP configuration and 3 seeds or more."""
    results = plot_e2e.Results(folder)
    return any(plot_e2e.best_ddp(results.summary, model, bw, results.configs)
               and max(s["runs"] for k, s in results.summary.items() if k[:2] == (model, bw)) >= 3
               for model in results.models for bw in results.bandwidths)


def verdict_lines(folder):
    """The seed-by-seed comparisons of a results folder against its best DDP configuration
    and DDP fp16, a Markdown bullet each."""
    results = plot_e2e.Results(folder)
    summary, lines = results.summary, []
    for model in results.models:
        for bw in results.bandwidths:
            best = plot_e2e.best_ddp(summary, model, bw, results.configs)
            if not best:
                continue
            # DDP fp16, PyTorch's local SGD (the same job as DiLoCo's) and, where local
            # SGD is the best, the best of DDP's per-step hooks are compared with as well,
            # where the table has them.
            per_step = plot_e2e.best_ddp(summary, model, bw, [
                c for c in results.configs if not c.startswith("ddp:localsgd")])
            bases = [best] + [c for c in results.configs if c != best
                              and (model, bw, c) in summary
                              and (c in ("ddp:fp16", per_step) or c.startswith("ddp:localsgd"))]
            target, steep, metric = (summary[(model, bw, best)][k]
                                     for k in ("target", "steep", "metric"))
            lines.append(f"- {model}, {bw}: the best DDP configuration (reaching "
                         f"{metric.target(target)} in the most seeds, then the least mean time "
                         f"to it) is `{best}`.")
            for config in results.configs:
                key = (model, bw, config)
                if key not in summary or plot_e2e.is_ddp_baseline(config):
                    continue
                mine = summary[key]["per_seed"]
                parts = []
                for base in bases:
                    theirs = summary[(model, bw, base)]["per_seed"]
                    figures = []
                    strict_known = all(x["strict_known"] for x in
                                       list(mine.values()) + list(theirs.values()))
                    for field, words in (("train_s", "training"),
                                         ("steep", f"time to {metric.target(steep)}"),
                                         ("target", f"time to {metric.target(target)}"),
                                         ("strict", f"time to {metric.strict_title()}")):
                        if field == "strict" and not strict_known:
                            continue
                        r = plot_e2e.ratios(mine, theirs, field)
                        figures.append(f"{words} {plot_e2e.ratio_text(r)}, {plot_e2e.verdict(r)}")
                    parts.append(f"against `{base}`: " + "; ".join(figures))
                floor = plot_e2e.spread([p["over_floor"] for p in mine.values()], ".2f")
                over = f" (training / the compute floor {floor})" if floor else ""
                lines.append(f"  - `{config}`{over} " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def results_page(root, files, template):
    """docs/NAME.md from docs/results/NAME.md.in (`template`), its directives expanded."""
    results = os.path.join(root, "docs", "results")
    out = []
    with open(os.path.join(results, template)) as f:
        lines = f.read().splitlines(keepends=True)
    for line in lines:
        words = line.split()
        if len(words) != 2 or not words[0].startswith("@"):
            out.append(line)
            continue
        directive, name = words
        if directive == "@file":
            path = os.path.join(results, name)
            if path in files:
                out.append(files[path])
            elif os.path.isfile(path):
                with open(path) as f:
                    out.append(f.read())
            else:
                raise SystemExit(f"docs_tables: {template} names {name}, not in docs/results")
            continue
        folder = os.path.join(results, name)
        if not os.path.isdir(folder):
            raise SystemExit(f"docs_tables: {template} names {name}, not in docs/results")
        if directive == "@command":
            with open(os.path.join(folder, "command.txt")) as f:
                out.append("```sh\n" + f.read().rstrip("\n") + "\n```\n")
        elif directive == "@tables":
            # One heading level below the template's sections.
            out.append(re.sub(r"^### ", "#### ", e2e_tables(folder), flags=re.M))
        elif directive == "@verdicts":
            out.append(verdict_lines(folder))
        elif directive == "@plots":
            out.append(f"![accuracy against training time](results/{name}/accuracy_vs_time.png)\n"
                       f"\n![time to the plateau accuracy](results/{name}/time_to_target.png)\n")
        else:
            raise SystemExit(f"docs_tables: unknown directive {directive} in {template}")
    return "".join(out)


QUOTE = re.compile(r"(<!-- generated from (docs/results/[^ ]+) -->\n)(.*?)(<!-- end generated -->)",
                   re.S)


def expected(root):
    """path -> the text its data gives, for every generated file."""
    root = os.path.abspath(root)
    results = os.path.join(root, "docs", "results")
    files = {}
    for csv_path in sorted(glob.glob(os.path.join(results, "**", "results.csv"),
                                     recursive=True)):
        folder = os.path.dirname(csv_path)
        files[os.path.join(folder, "results.md")] = e2e_tables(folder)
        if gives_verdicts(folder):
            files[os.path.join(folder, "verdicts.md")] = verdict_lines(folder)
    for name, (script, *args) in {**summaries(results), **GENERATORS}.items():
        path = os.path.join(results, name)
        if not os.path.isdir(os.path.dirname(path)):
            raise SystemExit(f"docs_tables: GENERATORS names {name}, not in docs/results")
        files[path] = script_table(os.path.dirname(path), script, args)
    # A table under docs/results that nothing above makes is a typed table: refuse it.
    for path in glob.glob(os.path.join(results, "**", "*.md"), recursive=True):
        name = os.path.basename(path)
        if name.endswith(("results.md", "summary.md", "verdicts.md")) and path not in files:
            raise SystemExit(f"docs_tables: {os.path.relpath(path, root)} is made by no "
                             "generator: add it to GENERATORS (its script and raw data) or "
                             "remove it")
    for template in RESULT_PAGES:
        files[os.path.join(root, "docs", template[:-len(".in")])] = results_page(
            root, files, template)
    # Quotes last: they may quote a file generated above, as it will be.
    for path in [os.path.join(root, "README.md")] + sorted(
            glob.glob(os.path.join(root, "docs", "*.md"))):
        if path in files:
            continue
        with open(path) as f:
            text = f.read()
        if "<!-- generated from " in text:
            files[path] = fill_quotes(text, files, root)
    return files


def fill_quotes(text, files, root):
    """`text` with every quote filled with its file's text: as `files` will write it where
    it is generated, else as committed."""
    def fill(match):
        path = os.path.join(root, match.group(2))
        if path in files:
            body = files[path]
        elif os.path.isfile(path):
            with open(path) as f:
                body = f.read()
        else:
            raise SystemExit(f"docs_tables: a quote names {match.group(2)}, which does not exist")
        return match.group(1) + body + ("" if body.endswith("\n") else "\n") + match.group(4)
    return QUOTE.sub(fill, text)


def main(argv):
    if len(argv) < 1 or argv[0] not in ("--write", "--check"):
        sys.exit("usage: docs_tables.py --write|--check [REPOSITORY] (default: the one "
                 "holding this script)")
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.dirname(HERE))
    stale = 0
    for path, text in expected(root).items():
        old = open(path).read() if os.path.exists(path) else ""
        if old == text:
            continue
        rel = os.path.relpath(path, root)
        if argv[0] == "--write":
            with open(path, "w") as f:
                f.write(text)
            print(f"docs_tables: wrote {rel}")
            continue
        stale += 1
        print(f"docs_tables: {rel} is not what its data gives "
              f"(python3 bench/docs_tables.py --write remakes it):")
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(keepends=True), text.splitlines(keepends=True),
            "committed/" + rel, "recomputed/" + rel, n=1))
    if argv[0] == "--check":
        print(f"docs_tables: {stale} stale table file(s)" if stale else
              "docs_tables: every table recomputed from its data")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
