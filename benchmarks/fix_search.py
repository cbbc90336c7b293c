"""The fix search on real graph-breaking code: transformers models with tiny random configs
(``fix_workloads.py``, which reads them from ``workloads/``) and the seed documents' scenarios.

Each workload runs in a fresh process, as a real ``%%compile`` cell in an IPython shell (``--entry``
and ``--run`` from the workload), then ``Session.fix(budget_s)`` searches and applies the best
configuration. Per workload: graph breaks and recompiles before and after, the check, the search
time and trial count, what was chosen, the breaks left with why, and the steady-state time per call
eager / before / after, measured side by side in one run by the bench's timer
(``timing.bench_configs``) on the session's backend.

The share of breaks removed is given next to GraphMend's 73% (107 of 147 breaks on Hugging Face
models, arXiv 2509.16248), which rewrites source code; nbcompile only sets toggles, and the breaks
it cannot reach are listed with the reason.

Usage: python benchmarks/fix_search.py [--budget S] [--backend aot_eager] [names...]
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
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = session.fix(budget_s=budget)
    search_s = time.perf_counter() - start
    after = session.report
    best = result.best if result.applied else result.start
    out = {
        "name": workload.name, "needs": workload.needs, "note": workload.note, "backend": backend,
        "breaks_before": before.break_count, "breaks_after": after.break_count,
        "recompiles_before": before.recompile_count, "recompiles_after": after.recompile_count,
        "graphs_before": before.graph_count, "graphs_after": after.graph_count,
        "check_after": "ok" if after.check is None or after.check.ok else f"FAILED: {after.check.message}",
        "check_compared": bool(after.check and after.check.compared),
        "search_s": round(search_s, 2), "trials": len(result.trials), "state": result.state,
        "rejected": sum(1 for t in result.trials if t.rejected),
        "chosen": best.describe() if best is not None else None, "applied": result.applied,
        "tracked_library_functions": result.tracked, "left": result.unremovable,
        "noisy": result.noisy,
    }
    configs = [("before", result.start.toggles if result.start else {}, {})]
    if best is not None and result.applied:
        configs.append(("after", best.toggles, best.options))
    try:
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
    session.reset()
    return out


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
        began = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--one", name, "--budget", str(args.budget),
                               "--backend", args.backend], capture_output=True, text=True,
                              timeout=args.budget * 4 + 600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"name": name, "error": done.stderr.strip().splitlines()[-1:]}
        row["process_s"] = round(time.perf_counter() - began, 1)
        rows.append(row)
        if "error" in row:
            print(f"{name}: ERROR {row['error']}", flush=True)
            continue
        def ms(key: str, row: dict = row) -> str:
            return f"{row[key] * 1e3:.2f} ms" if row.get(key) is not None else "not timed"

        speed = (f"eager {ms('eager_s')}, before {ms('before_s')}, after {ms('after_s')}"
                 if "timing_error" not in row else row["timing_error"])
        print(f"{name}: breaks {row['breaks_before']} -> {row['breaks_after']}, recompiles "
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
    summary = {
        "workloads": len(ok), "breaks_before": before, "breaks_after": after,
        "share_removed": round((before - after) / before, 3) if before else None,
        "transformers_share_removed": round((lib_before - lib_after) / lib_before, 3) if lib_before else None,
        "graphmend_share_removed": round(GRAPHMEND_SHARE, 3),
        "checks_ok": sum(1 for r in ok if r["check_after"] == "ok"),
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
