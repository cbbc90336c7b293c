"""Trials per minute of the fix search on the fast loop's training cell (a 2-block transformer with AdamW,
default backend), before and after a change: the same search run by two source trees side by side, each in
a process of its own, one after the other in the same run.

``python benchmarks/fix_trials.py --before DIR`` runs this tree and the tree at ``DIR`` (a checkout of the
commit before), each ``--budget`` seconds, and writes benchmarks/results/fix_trials.json. ``--one`` runs
the search once in this process and prints its figures as JSON (what each side runs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import write  # noqa: E402


def one(budget: float) -> dict:
    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from toggle_latency import TRAINING_CELL

    import nbcompile

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbcompile")
    torch.manual_seed(0)
    shell.user_ns["DEVICE"] = "cpu"
    shell.user_ns["tokens"] = torch.randint(0, 256, (8, 32))
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_cell_magic("compile", '--no-panel --run "train_step(tokens)"', TRAINING_CELL)
        session = nbcompile.last()
        began = time.perf_counter()
        result = session.fix(budget_s=budget)
        elapsed = time.perf_counter() - began
    trials = len(result.trials)
    out = {"trials": trials, "elapsed_s": elapsed, "trials_per_min": 60.0 * trials / result.elapsed_s,
           "search_s": result.elapsed_s, "state": result.state,
           "breaks": [result.trials[0].breaks if result.trials else None, result.best.breaks if result.best else None]}
    shell.run_line_magic("nbcompile", "reset")
    return out


def side(tree: pathlib.Path, budget: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(HERE / "fix_trials.py"), "--one", "--budget", str(budget)],
                          env=env, capture_output=True, text=True, cwd=tree, timeout=budget * 4 + 600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{tree}: no result\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--one", action="store_true")
    parser.add_argument("--before", type=pathlib.Path, help="a checkout of the commit before the change")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(HERE.parent / ".inductor-cache"))
    if args.one:
        print(json.dumps(one(args.budget)), flush=True)
        return
    if args.before is None:
        raise SystemExit("give --before DIR (a checkout of the commit before the change)")
    before = side(args.before.resolve(), args.budget)
    after = side(HERE.parent, args.budget)
    ratio = after["trials_per_min"] / before["trials_per_min"] if before["trials_per_min"] else None
    print(f"fix search trials per minute: before {before['trials_per_min']:.1f}, after {after['trials_per_min']:.1f} "
          f"(ratio {ratio:.2f})", flush=True)
    write("fix_trials", {"budget_s": args.budget, "before": before, "after": after, "ratio": ratio}, args.out)


if __name__ == "__main__":
    main()
