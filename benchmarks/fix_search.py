"""The fix search on real graph-breaking code: transformers models with tiny random configs
(``fix_workloads.py``, which reads them from ``workloads/``) and the seed documents' scenarios.

Each workload runs in a fresh process, as a real ``%%compile`` cell in an IPython shell (``--entry``
and ``--run`` from the workload), then ``Session.fix(budget_s)`` searches and applies the best
configuration. Per workload: graph breaks and recompiles before and after, the check, the search
time and trial count, what was chosen, the breaks left with why, and the steady-state time per call
eager / before / after, measured side by side in one run by the bench's timer
(``timing.bench_configs``) on the session's backend.

The share of splits and breaks removed is given next to GraphMend's 73% (107 of 147 splits on Hugging
Face models, arXiv 2509.16248), which rewrites source code with three rules; nbcompile sets toggles and
``torch._dynamo.config`` values, and proves source rewrites of the cell's own code for the user to accept
(it never edits a library: a library break's rewrite is shown as information, with the breaks left).

Splits are also counted as GraphMend and the PT2 corpora count them (``Report.splits``: graphs - 1 per
call of an entry, from the session's recording backend), beside the break events and the break sites
(``causes``); a workload is fully fixed with no break and no split left. The rules the chosen
configuration uses (a toggle, a ``torch._dynamo.config`` value, a source rewrite of the cell) are
given per workload and summed per rule; a proven rewrite is not applied until the user accepts it, so
the breaks after accepting are the search's own count of the chosen trial.

Usage: python benchmarks/fix_search.py [--budget S] [--backend aot_eager] [--follow-advice] [names...]
(the results in benchmarks/results were made with --follow-advice: a search that says its budget was too small
runs again with the budget it asked for, as its user would; each such row keeps the first run's counts)
Writes benchmarks/results/fix_search.json and fix_search.html (the plot).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fix_workloads import WORKLOADS, Workload  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests"))
from _common import RESULTS, environment, write  # noqa: E402
from nbhelpers import MY_CUSTOM_FUNCTION_CELL, PRINT_IN_HELPER_CELL  # noqa: E402  (the seed cells the tests use)

#: The seed documents' graph-breaking scenarios (../shared/seeds), as cells.
SEEDS = [
    Workload("seed_allow_in_graph_custom_function", "torch", MY_CUSTOM_FUNCTION_CELL + "a = torch.ones(3)\n", "fn",
             "fn(a)", note="seed 000/001: a graph break inside the function allow_in_graph makes opaque"),
    Workload("seed_print_in_helper", "torch", PRINT_IN_HELPER_CELL + "x = torch.randn(8)\n", "outer", "outer(x)",
             note="seed 001: a print in a nested call; disable moves it out of the graph"),
    Workload("seed_item_data_dependent", "torch", textwrap.dedent("""\
        import torch
        def helper(x):
            s = x.sum().item()
            return x * (2.0 if s > 0 else 3.0)
        def f(x):
            return helper(x.sin()).cos()
        xs = [torch.randn(4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
        """), "f", "[f(x) for x in xs]", note="seed 002: .item() and a data-dependent branch in a helper"),
]
GRAPHMEND_SHARE = 107 / 147


def run_one(workload: Workload, budget: float, backend: str) -> dict:
    """In this process: the cell, the search, the bench. Prints nothing but the result."""
    import contextlib
    import io

    import torch

    sys.path.insert(0, str(HERE.parent / "tests"))
    from real_models_oracle import import_torchvision

    import_torchvision()
    from IPython.testing.globalipapp import get_ipython

    import nbcompile
    from nbcompile.engine import timing

    ip = get_ipython()
    ip.run_line_magic("load_ext", "nbcompile")
    if not workload.grad:
        torch.set_grad_enabled(False)
    line = f'--backend {backend} --no-panel --entry {workload.entry} --run "{workload.run}"'
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_cell(f"%%compile {line}\n{workload.cell}", store_history=True)
    session = nbcompile.last()
    if session is None:
        return {"name": workload.name, "error": "the cell did not make a session"}
    before = session.report
    options_before = session.workload.options  # replaced whole when the search applies a config
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = session.fix(budget_s=budget)
    search_s = time.perf_counter() - start
    after = session.report
    best = result.best if result.applied else result.start
    chosen = result.best  # applied, or (needing source rewrites) left for the user to accept
    out = {
        "name": workload.name, "needs": workload.needs, "note": workload.note, "backend": backend,
        "breaks_before": before.break_count, "breaks_after": after.break_count,
        "recompiles_before": before.recompile_count, "recompiles_after": after.recompile_count,
        "graphs_before": before.graph_count, "graphs_after": after.graph_count,
        "check_after": "ok" if after.check is None or after.check.ok else f"FAILED: {after.check.message}",
        "check_compared": bool(after.check and after.check.compared),
        "search_s": round(search_s, 2), "trials": len(result.trials), "state": result.state,
        "budget_s": budget, "budget_bound": result.budget_bound,
        "rejected": sum(1 for t in result.trials if t.rejected),
        "chosen": best.describe() if best is not None else None, "applied": result.applied,
        "tracked_library_functions": result.tracked, "left": result.unremovable,
        "noisy": result.noisy,
        # GraphMend's count: graphs - 1 per call of an entry (Report.splits), beside break events and sites
        "splits_before": before.splits, "splits_after": after.splits,
        "causes_before": len(before.causes), "causes_after": len(after.causes),
        "fully_fixed": after.break_count == 0 and after.splits == 0,
        "trials_run": sum(1 for t in result.trials if t.seconds > 0),
        "trials_per_min": round(60 * sum(1 for t in result.trials if t.seconds > 0) / max(result.elapsed_s, 1e-9), 1),
        "rules": rules_of(chosen) if chosen is not None and chosen is not result.start else [],
        "chosen_needs_accepting": chosen.describe() if chosen is not None and chosen.rewrites else None,
        "not_applied": result.applied_note,
        "rewrites": [{"cell_line": r.cell_line, "rule": r.rule, "diff": r.diff()} for r in
                     (chosen.rewrites if chosen is not None else [])],
        "alone": {t.label: (result.start.breaks or 0) - t.breaks for t in result.trials
                  if "(from" not in t.label and t.label != "start" and t.tried and t.admissible
                  and result.start is not None and result.start.breaks is not None},
    }
    if chosen is not None and chosen.rewrites and chosen.breaks is not None:  # proven, to be accepted: count them
        out["breaks_after_accepting"] = chosen.breaks
        out["splits_after_accepting"] = chosen.splits
        out["graphs_after_accepting"] = best.graphs
    configs = [("before", result.start.toggles if result.start else {}, {})]
    if chosen is not None and chosen is not result.start and (result.applied or chosen.rewrites):
        options = dict(chosen.options)
        if chosen.rewrites:  # timed as the user runs it after accepting them: the rewritten functions
            from nbcompile.facades.rewrites import CellRewrites
            options["_replace"] = CellRewrites(session.workload, before).functions(chosen.rewrites)
        configs.append(("after", chosen.toggles, options))
    applied_options = session.workload.options
    try:
        session.workload.options = options_before  # "before" as it was; "after" adds the chosen config itself
        with contextlib.redirect_stdout(io.StringIO()):
            bench = timing.bench_configs(session.workload, configs, min_run_time=0.3)
        rows = {row.config: row for row in bench.rows}
        eager = bench.rows[0]
        out["eager_s"] = eager.median_s
        out["before_s"] = rows["before"].median_s
        out["after_s"] = rows["after"].median_s if "after" in rows else rows["before"].median_s
        out["timing_noisy"] = "; ".join(sorted({r.noisy for r in bench.rows if r.noisy}))
    except Exception as exc:
        out["timing_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        session.workload.options = applied_options
    session.reset()
    return out


def _run_in_process(name: str, budget: float, backend: str, env: dict[str, str] | None = None) -> dict:
    """One workload in a fresh process (``env``: more environment for it, ``NBCOMPILE_TRIAL_PROCESSES``)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--one", name, "--budget", str(budget), "--backend", backend],
                          capture_output=True, text=True, timeout=budget * 4 + 600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    row = json.loads(line[7:]) if line else {"name": name, "error": done.stderr.strip().splitlines()[-1:]}
    row["process_s"] = round(time.perf_counter() - began, 1)
    return row


def _advised_budget(row: dict) -> int | None:
    """The budget the search said to give it ("... give the search at least 79 s"), or None."""
    import re

    found = re.search(r"give the search at least (\d+) s", row.get("budget_bound") or "")
    return int(found[1]) if found else None


def rules_of(trial) -> list[str]:
    """What a chosen configuration changes, by kind: ``config:capture_scalar_outputs``, ``rewrite:where``,
    ``toggle:disable``, ``dynamic``."""
    kinds = [f"toggle:{m}" for m in sorted(set(trial.toggles.values())) if m != "compile"]
    kinds += [f"config:{n}" for n in sorted(trial.options.get("_config", {}))]
    kinds += [f"rewrite:{r.rule}" for r in trial.rewrites]
    kinds += ["dynamic"] if trial.options.get("dynamic") else []
    return kinds


def _figure(rows: list[dict]):
    import plotly.graph_objects as go

    names = [r["name"] for r in rows]
    fig = go.Figure([
        go.Bar(name="breaks before", x=names, y=[r.get("breaks_before", 0) for r in rows]),
        go.Bar(name="breaks after", x=names, y=[r.get("breaks_after", 0) for r in rows]),
    ])
    fig.update_layout(barmode="group", title={"text": "nbcompile fix search: graph breaks before and after"},
                      yaxis={"title": {"text": "graph breaks"}}, height=420)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--follow-advice", action="store_true",
                        help="when a search says its budget was too small (give it at least N s), run that workload "
                             "again with N s, as its user would; the first run's counts are kept in the row")
    parser.add_argument("--merge", action="store_true",
                        help="re-run only the named workloads and replace their rows in the existing results")
    args = parser.parse_args()
    everything = {w.name: w for w in [*WORKLOADS, *SEEDS]}
    if args.one:
        print("RESULT " + json.dumps(run_one(everything[args.one], args.budget, args.backend)), flush=True)
        return
    names = args.names or list(everything)
    rows = []
    for name in names:
        row = _run_in_process(name, args.budget, args.backend)
        advised = _advised_budget(row)
        if args.follow_advice and advised is not None and advised > args.budget:
            # what a user does when the search says its budget was too small: run it again with that much
            first = {k: row.get(k) for k in ("splits_after", "breaks_after", "causes_after", "fully_fixed",
                                             "trials_run", "search_s", "budget_bound")}
            print(f"{name}: the search advised {advised} s ({row.get('budget_bound')}); running it again", flush=True)
            row = _run_in_process(name, float(advised), args.backend)
            row["at_base_budget"] = first
        rows.append(row)
        if "error" in row:
            print(f"{name}: ERROR {row['error']}", flush=True)
            continue
        def ms(key: str, row: dict = row) -> str:
            return f"{row[key] * 1e3:.2f} ms" if row.get(key) is not None else "not timed"

        speed = (f"eager {ms('eager_s')}, before {ms('before_s')}, after {ms('after_s')}"
                 if "timing_error" not in row else row["timing_error"])
        print(f"{name}: splits {row['splits_before']} -> {row['splits_after']}, causes {row['causes_before']} -> "
              f"{row['causes_after']}, breaks {row['breaks_before']} -> {row['breaks_after']}, recompiles "
              f"{row['recompiles_before']} -> {row['recompiles_after']}, check {row['check_after']}, "
              f"{row['trials']} trials in {row['search_s']} s ({row['state']}); {speed}; chosen: {row['chosen']}",
              flush=True)
    if args.merge:  # the other workloads' rows as the last full run measured them
        previous = json.loads((args.out or RESULTS / "fix_search.json").read_text())["workloads"]
        fresh = {r["name"]: r for r in rows}
        rows = [fresh.pop(r["name"], r) for r in previous] + list(fresh.values())
    ok = [r for r in rows if "error" not in r]
    before = sum(r["breaks_before"] for r in ok)
    after = sum(r["breaks_after"] for r in ok)
    library = [r for r in ok if r["needs"] == "transformers"]
    lib_before = sum(r["breaks_before"] for r in library)
    lib_after = sum(r["breaks_after"] for r in library)
    splits_before = sum(r["splits_before"] for r in ok)
    splits_after = sum(r["splits_after"] for r in ok)
    # a proven rewrite is not applied until the user accepts it: after accepting, the search's own count
    accepted = sum(r.get("breaks_after_accepting", r["breaks_after"]) for r in ok)
    splits_accepted = sum(r.get("splits_after_accepting", r["splits_after"]) or 0 for r in ok)
    by_rule: dict[str, int] = {}
    for r in ok:
        removed = r["breaks_before"] - r.get("breaks_after_accepting", r["breaks_after"])
        if removed > 0 and r["rules"]:
            key = " + ".join(r["rules"])
            by_rule[key] = by_rule.get(key, 0) + removed
    summary = {
        "workloads": len(ok),
        "splits_before": splits_before, "splits_after": splits_after,
        "share_splits_removed": round((splits_before - splits_after) / splits_before, 3) if splits_before else None,
        "causes_before": sum(r["causes_before"] for r in ok), "causes_after": sum(r["causes_after"] for r in ok),
        "fully_fixed": sum(1 for r in ok if r["fully_fixed"]),
        "breaks_before": before, "breaks_after": after,
        "splits_after_accepting_rewrites": splits_accepted,
        "share_splits_removed_after_accepting": round((splits_before - splits_accepted) / splits_before, 3)
        if splits_before else None,
        "fully_fixed_after_accepting": sum(1 for r in ok if r["fully_fixed"] or (
            r.get("breaks_after_accepting") == 0 and r.get("splits_after_accepting") == 0)),
        "breaks_after_accepting_rewrites": accepted,
        "share_removed_after_accepting": round((before - accepted) / before, 3) if before else None,
        "breaks_removed_by_rule": by_rule,
        "trials_per_min": round(sum(r["trials_run"] for r in ok) * 60 / max(sum(r["search_s"] for r in ok), 1e-9), 1),
        "share_removed": round((before - after) / before, 3) if before else None,
        "transformers_share_removed": round((lib_before - lib_after) / lib_before, 3) if lib_before else None,
        "graphmend_share_removed": round(GRAPHMEND_SHARE, 3),
        "checks_ok": sum(1 for r in ok if r["check_after"] == "ok"),
        # the advice followed (--follow-advice): what the runs at the base budget left, for comparison
        "advice_followed": [r["name"] for r in ok if "at_base_budget" in r],
        "share_splits_removed_at_base_budget": round(
            (splits_before - sum(r.get("at_base_budget", r)["splits_after"] for r in ok)) / splits_before, 3)
        if splits_before else None,
        "budget_s": args.budget, "backend": args.backend,
    }
    print(json.dumps(summary, indent=2))
    out = write("fix_search", {"summary": summary, "workloads": rows}, args.out)
    html = RESULTS / "fix_search.html" if args.out is None else args.out.with_suffix(".html")
    env = environment()
    head = (f"<h2>nbcompile fix search ({env['device']}, torch {env['torch']}): breaks "
            f"{before} -> {after} ({summary['share_removed']:.0%} removed; GraphMend: 73%)</h2>")
    html.write_text("<html><body>" + head + _figure(ok).to_html(full_html=False, include_plotlyjs="cdn")
                    + "</body></html>\n")
    print(f"wrote {html} (and {out.name})")


if __name__ == "__main__":
    main()
