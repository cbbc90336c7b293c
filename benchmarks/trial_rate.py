"""Fix-search trials per minute, side by side in one run: each workload searched with its trials in one
process (``NBCOMPILE_TRIAL_PROCESSES=1``) and side by side in forked children (the default on a machine
with more than one core), in turn, each in a fresh process, same budget.

Usage: python benchmarks/trial_rate.py [--budget S] [names...]
Writes benchmarks/results/trial_rate.json: per workload the trials run, the search time, trials per minute
in each mode, the splits left, and the ratio; the overall ratio of trials per minute.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from fix_search import _run_in_process  # noqa: E402

from _common import write  # noqa: E402

#: Transformers workloads whose 60 s searches are cut by their budget (the trial rate decides how far they get).
DEFAULT = ["bert_output_attentions", "longformer_global", "jetmoe"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    from nbcompile.engine import forked

    rows = []
    for name in args.names or DEFAULT:
        row: dict = {"name": name}
        for mode, env in (("one_process", {forked.ENV: "1"}), ("forked", {})):
            got = _run_in_process(name, args.budget, args.backend, env)
            if "error" in got:
                row[mode] = {"error": got["error"]}
                continue
            row[mode] = {"trials_run": got["trials_run"], "search_s": got["search_s"], "state": got["state"],
                         "trials_per_min": round(60 * got["trials_run"] / max(got["search_s"], 1e-9), 1),
                         "splits_before": got["splits_before"], "splits_after": got["splits_after"]}
        one, fork = row.get("one_process", {}), row.get("forked", {})
        if "trials_per_min" in one and "trials_per_min" in fork:
            row["ratio"] = round(fork["trials_per_min"] / max(one["trials_per_min"], 1e-9), 2)
        print(name, row, flush=True)
        rows.append(row)
    both = [r for r in rows if "ratio" in r]

    def rate(mode: str) -> float:
        trials = sum(r[mode]["trials_run"] for r in both)
        return round(60 * trials / max(sum(r[mode]["search_s"] for r in both), 1e-9), 1)

    summary = {"budget_s": args.budget, "backend": args.backend, "at_once": forked.at_once(),
               "one_process_trials_per_min": rate("one_process") if both else None,
               "forked_trials_per_min": rate("forked") if both else None}
    if both:
        summary["ratio"] = round(summary["forked_trials_per_min"] / max(summary["one_process_trials_per_min"], 1e-9), 2)
    print(summary)
    write("trial_rate", {"summary": summary, "workloads": rows}, args.out)


if __name__ == "__main__":
    main()
